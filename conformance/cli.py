"""`lora-sched conform`: run vLLM (live or in-process) and check it against the reference.

Live (default): vLLM's OpenAI server with the policy's recording scheduler
class, driven through the HTTP API (`conformance.server`); `--in-process`
drives the class directly. The trace is checked for every property
(`policy.check`) and replayed through the reference (`policy.replay`); exit 0
only when everything holds. `--in-process --scheduler-cls CLASS` runs a
user's class instead, judged without a replay (docs/verify-your-scheduler.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from lora_sched.conformance.assets import ensure_assets
from lora_sched.conformance.target import LIVENESS, SAFETY, TargetError, expected, load, normalise
from lora_sched.policy import claims
from lora_sched.policy.check import check_trace, format_report
from lora_sched.policy.scenarios import SCENARIOS, VICTIM, Scenario
from lora_sched.spec import releases
from lora_sched.spec.config import IN_VLLM
from lora_sched.spec.trace import TraceError, read_trace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=IN_VLLM, default="vllm")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="seed")
    p.add_argument("--in-process", action="store_true", help="drive vLLM's Scheduler class directly (no server)")
    p.add_argument("--async-scheduling", action="store_true", help="in-process only: use vLLM's AsyncScheduler")
    p.add_argument("--model", help="a model directory (default: the generated tiny Llama)")
    p.add_argument("--lora-module", action="append", default=[], metavar="NAME=PATH",
                   help="an adapter to serve, the k-th given is adapter k (default: the generated lora1..loraN)")
    p.add_argument("--out", default="out/conform", help="directory for the trace and the server log")
    p.add_argument("--tick", type=float, default=0.05, help="live: seconds per arrival step")
    p.add_argument("--start-timeout", type=float, default=240.0, help="live: seconds to wait for readiness")
    p.add_argument("--kill-server-after", type=float, metavar="SECONDS", help="SIGKILL the server after this long")
    p.add_argument("--scheduler-cls", metavar="CLASS",
                   help="in-process only: run this class (pkg.module.Class or path/to/file.py:Class), no replay")
    p.add_argument("--expect", action="append", default=[], choices=[*LIVENESS, *SAFETY], metavar="PROP",
                   help="with --scheduler-cls: PROP's violation also fails the run (repeatable)")


def check(trace_path: Path, policy: str, scenario: Scenario) -> tuple[bool, list[str]]:
    """Properties and replay of a (possibly partial) trace; report lines."""
    try:
        trace = read_trace(trace_path, allow_truncated_tail=True)
    except TraceError as exc:
        return False, [f"trace unreadable: {exc}"]
    report = check_trace(trace, policy)
    claimed = claims(policy, trace.config)
    broken = sorted(p for p in report.first if p in claimed)
    lines = [ln for ln in format_report(report).splitlines() if ln not in ("all ok!", "FAILED")]
    unclaimed = sorted(p for p in report.first if p not in claimed)
    if unclaimed:
        lines.append(f"violations {policy} does not claim to avoid (expected): {', '.join(unclaimed)}")
    if broken:
        lines.append(f"CLAIMED PROPERTIES VIOLATED: {', '.join(broken)}")
    props_ok = not broken
    rep = report.replay
    assert rep is not None
    steps = trace.steps()
    if scenario.name == "starvation":
        # Live request ids are the server's; the victim is the adapter-3 request.
        first = {rid: rec.step for rec in reversed(steps) for rid in rec.admitted}
        victims = [r for r in trace.requests().values() if r.id == VICTIM or r.adapter == 3]
        if victims and victims[0].id in first:
            v = victims[0]
            lines.append(f"starvation: the adapter-3 request waited {first[v.id] - v.arrival} steps "
                         f"(arrived at step {v.arrival}, first admitted at step {first[v.id]})")
        else:
            lines.append("starvation: the adapter-3 request was never admitted")
    return props_ok and rep.ok, lines


def _no_reference() -> str | None:
    """Why the installed vLLM has no reference to conform against, or None."""
    import vllm

    if releases.unregistered(f"vllm {vllm.__version__}") is None:
        return None
    return (f"vLLM {vllm.__version__} is not in the release registry (supported: {releases.SUPPORTED}), so there "
            f"is no reference to replay against; `lora-sched fuzz` judges its properties without one")


def main(args: argparse.Namespace) -> int:
    if args.scheduler_cls or args.expect:
        return _user_class(args)
    scenario = SCENARIOS[args.scenario]
    cfg = replace(scenario.config, policy=args.policy)
    scenario = replace(scenario, config=cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = "inproc" if args.in_process else "live"
    trace_path = out / f"{args.scenario}-{args.policy}-{mode}.jsonl"
    t0 = time.monotonic()
    why = _no_reference()
    if why is not None:
        print(f"error: conform: {why}", file=sys.stderr)
        return 2
    print(f"conform: scenario {scenario.name} ({scenario.about}), policy {args.policy}, {mode}")
    if args.in_process:
        from lora_sched.conformance.inprocess import run_workload

        from lora_sched.hook import UnsupportedVllm

        cfg = replace(cfg, async_scheduling=bool(args.async_scheduling))
        try:
            steps = run_workload(cfg, scenario.workload, trace_path, policy=args.policy)
        except UnsupportedVllm as exc:
            print(f"error: conform: {exc}", file=sys.stderr)
            return 2
        print(f"vLLM scheduler ran {steps} steps in process")
        ok, lines = check(trace_path, args.policy, scenario)
        print("\n".join(lines))
        print(f"trace saved to {trace_path} ({time.monotonic() - t0:.1f} s)")
        print("conform: ok" if ok else "conform: FAILED")
        return 0 if ok else 1
    return _live(args, scenario, trace_path, out, t0)


def _user_class(args: argparse.Namespace) -> int:
    """`conform --in-process --scheduler-cls CLASS`: one scenario on the user's class."""
    if not args.scheduler_cls:
        print("error: conform: --expect needs --scheduler-cls", file=sys.stderr)
        return 2
    if not args.in_process:
        print("error: conform: --scheduler-cls runs in-process only (add --in-process); live, start vLLM with "
              "--scheduler-cls and check its trace with `lora-sched check`", file=sys.stderr)
        return 2
    try:
        target = load(normalise(args.scheduler_cls))
    except TargetError as exc:
        print(f"error: conform: --scheduler-cls {exc}", file=sys.stderr)
        return 2
    from lora_sched.conformance.inprocess import Stuck, run_workload

    scenario = SCENARIOS[args.scenario]
    cfg = replace(scenario.config, policy=target.policy, async_scheduling=target.is_async)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"{args.scenario}-{target.name}-inproc.jsonl"
    t0 = time.monotonic()
    mode = "async" if target.is_async else "sync"
    print(f"conform: scenario {scenario.name} ({scenario.about}), scheduler {target.path} ({mode}), inproc")
    crashed = None
    try:
        steps = run_workload(cfg, scenario.workload, trace_path, policy=target.policy,
                             scheduler_class=target.recorded)
        print(f"{target.name} ran {steps} steps in process")
    except Stuck as exc:
        crashed = f"stuck: {exc}"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the class's own crash: reported, its partial trace judged
        import traceback

        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" ({Path(last[0].filename).name}:{last[0].lineno} in {last[0].name})" if last else ""
        crashed = f"crash: {type(exc).__name__}: {' '.join(str(exc).split())}{where}"
    try:
        trace = read_trace(trace_path, allow_truncated_tail=True)
    except TraceError as exc:
        print(f"trace unreadable: {exc}")
        print("conform: FAILED")
        return 1
    report = check_trace(trace)
    wanted = expected(trace.config, tuple(args.expect))
    lines = [ln for ln in format_report(report).splitlines() if ln not in ("all ok!", "FAILED")]
    broken = sorted(p for p in report.first if p in wanted)
    evidence = sorted(p for p in report.first if p not in wanted)
    print("\n".join(lines))
    if evidence:
        print(f"violated, not expected (evidence): {', '.join(evidence)}")
    if broken:
        print(f"EXPECTED PROPERTIES VIOLATED: {', '.join(broken)}")
    if crashed:
        print(crashed)
    print(f"replay: off: no reference model for {args.scheduler_cls}")
    print(f"trace saved to {trace_path} ({time.monotonic() - t0:.1f} s)")
    ok = not broken and crashed is None
    print("conform: ok" if ok else "conform: FAILED")
    return 0 if ok else 1


def _live(args: argparse.Namespace, scenario: Scenario, trace_path: Path, out: Path, t0: float) -> int:
    from lora_sched.conformance.server import LiveServer, ServerError, drive

    n = scenario.adapters()
    if args.model:
        model = args.model
        modules = list(args.lora_module)
    else:
        assets = ensure_assets(max(1, n))
        model = str(assets.model)
        modules = list(args.lora_module) or assets.lora_modules()
    if len(modules) < n:
        print(f"error: scenario {scenario.name} uses {n} adapters, {len(modules)} given", file=sys.stderr)
        return 2
    server = LiveServer(model, modules, args.policy, scenario, trace_path,
                        out / f"{scenario.name}-{args.policy}-server.log")
    died = None
    try:
        print(f"starting vLLM on 127.0.0.1:{server.port} (log {server.log})")
        try:
            server.start(timeout=args.start_timeout)
        except ServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        print(f"server ready after {time.monotonic() - t0:.1f} s; driving {len(scenario.workload.requests)} "
              "requests")
        res = drive(server, scenario, tick=args.tick, kill_after=args.kill_server_after)
        print(f"client: {res.completed} completed, {res.cancelled} cancelled, {res.failed} failed "
              f"in {res.seconds:.1f} s")
        if not server.alive():
            died = server.proc.returncode if server.proc is not None else None
    finally:
        server.stop()
    ok, lines = check(trace_path, args.policy, scenario)
    print("\n".join(lines))
    if died is not None:
        try:
            last = max((r.step for r in read_trace(trace_path, allow_truncated_tail=True).steps()), default=0)
        except Exception:  # noqa: BLE001
            last = 0
        print(f"error: the server died mid-run (exit {died}); the trace stops at step {last}; "
              f"log tail:\n{_tail(server.log)}", file=sys.stderr)
        ok = False
    print(f"trace saved to {trace_path}; live run took {time.monotonic() - t0:.1f} s")
    print("conform: ok" if ok else "conform: FAILED")
    return 0 if ok else 1


def _tail(path: Path) -> str:
    from lora_sched.conformance.server import log_tail

    return log_tail(path, 15)
