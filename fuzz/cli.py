"""`lora-sched fuzz`: run vLLM's real scheduler against the spec on Ray until a time or count limit.

Prints a progress line (workloads/s, findings so far) and each new finding,
then one line per finding and where its reproducer is. Exit 0 when no
workload failed, 1 when there are findings, 2 on bad options or a report of
another campaign in `--out`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from lora_sched.conformance.target import LIVENESS, SAFETY, TargetError, load, normalise
from lora_sched.fuzz.campaign import CampaignError, Options, run_campaign
from lora_sched.fuzz.growth import growth_findings
from lora_sched.fuzz.runner import unregistered
from lora_sched.spec import releases


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, help="stop submitting workloads after this many minutes")
    p.add_argument("--count", type=int, help="run this many workloads (default with neither: --minutes 2)")
    p.add_argument("--workers", type=int, help="Ray workers (default: every CPU Ray has)")
    p.add_argument("--out", default="out/fuzz", help="campaign directory: report.json, findings/ (default out/fuzz)")
    p.add_argument("--seed", type=int, default=0, help="first workload seed (default 0)")
    p.add_argument("--address", help="an existing Ray cluster (default: a local Ray instance on 127.0.0.1)")
    p.add_argument("--chunk", type=int, default=8, help="workloads per Ray task (default 8)")
    p.add_argument("--shrink-runs", type=int, default=1000, help="most vLLM runs to shrink one finding (<= 3 min)")
    p.add_argument("--no-shrink", action="store_true", help="record findings without shrinking them")
    p.add_argument("--replay-against", choices=["blocking", "vllm", "fair"],
                   help="replay every trace through this reference instead (plants a divergence: tests)")
    p.add_argument("--scheduler-cls", metavar="CLASS",
                   help="run this class (pkg.module.Class or path/to/file.py:Class) on the LoRA family, no replay")
    p.add_argument("--expect", action="append", default=[], choices=[*LIVENESS, *SAFETY], metavar="PROP",
                   help="with --scheduler-cls: PROP's violation is a finding too (bounded_wait by growth)")


def main(args: argparse.Namespace) -> int:
    print("lora-sched fuzz " + " ".join(shlex.quote(a) for a in sys.argv[2:]), flush=True)
    minutes = args.minutes if (args.minutes is not None or args.count is not None) else 2.0
    for name in ("minutes", "count", "workers", "chunk", "shrink_runs"):
        v = minutes if name == "minutes" else getattr(args, name)
        if v is not None and v <= 0:
            print(f"error: --{name.replace('_', '-')} must be > 0, got {v}", file=sys.stderr)
            return 2
    target = None
    if args.expect and not args.scheduler_cls:
        print("error: --expect needs --scheduler-cls", file=sys.stderr)
        return 2
    if args.scheduler_cls:
        if args.replay_against:
            print("error: --replay-against and --scheduler-cls: a user's class has no reference", file=sys.stderr)
            return 2
        try:
            target = load(normalise(args.scheduler_cls))
        except TargetError as exc:
            print(f"error: --scheduler-cls {exc}", file=sys.stderr)
            return 2
    opts = Options(minutes=minutes, count=args.count, workers=args.workers, seed=args.seed, address=args.address,
                   chunk=args.chunk, replay_against=args.replay_against, shrink=not args.no_shrink,
                   shrink_runs=args.shrink_runs, scheduler_cls=target.path if target else None,
                   expect=tuple(sorted(set(args.expect))))
    out = Path(args.out)
    try:
        report = run_campaign(opts, out)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if target is not None and "bounded_wait" in opts.expect:
        grown = growth_findings(target, out, report.findings)
        report.growth = grown.to_json()
        report.save(out / "report.json")
        for fg in grown.families:
            print(f"growth: {fg.line()}")
    last = report.runs[-1]
    print(f"{report.workloads} workloads in all ({last['workloads']} this run: {last['workloads_per_s']}/s "
          f"on {last['workers']} workers), seeds {report.to_json()['ranges_done']}, {report.vllm}")
    for f in report.findings:
        where = f.files.get("test", "(not shrunk)")
        if f.kind == "growth":
            print(f"  {f.signature}: the worst wait grows with the stream -> {where}")
            continue
        print(f"  {f.signature}: {f.hits} workloads, first seed {f.first_seed}, {f.status}"
              + (f" to {len(f.minimal['requests'])} request(s)" if f.minimal else "") + f" -> {where}")
    if target is not None:
        for prop, e in sorted(report.evidence.items()):
            print(f"  evidence (not expected): {prop} violated in {e['workloads']} workloads, first seed "
                  f"{e['first_seed']}: {e['message'].splitlines()[0][:160]}")
        print(f"replay: off: no reference model for {args.scheduler_cls}")
    elif (version := unregistered()) is not None:
        print(f"replay: off: vLLM {version} is not in the release registry (supported: {releases.SUPPORTED}); "
              f"stock vLLM's properties are judged with vLLM {releases.NEWEST}'s semantics")
    print(f"report: {out / 'report.json'}")
    print("no findings" if not len(report.findings) else f"{len(report.findings)} findings")
    return 1 if len(report.findings) else 0
