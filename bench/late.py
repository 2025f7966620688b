"""Why fair starts the request that ends a realistic run late: an experiment, not a policy.

On the realistic grid, each workload where fair's throughput falls below
0.97 of vllm's ends with one long request that fair first admits far later
than vllm does, and that then runs almost alone at the end
(`bench.preemption`'s `last_*` fields). The rule change that would remove
those misses depends on which part of fair keeps that request waiting, so
this module says, for that request (the one whose last output comes last
under fair), on every step it waited under fair before its first
admission:

- the reason the scan gave it (`StepRecord.holds`): `lora_cap` (its
  adapter had no slot: the cap blocked it), `fair_guard` (fair held it:
  mechanism 3, a late request of the last victim), or a capacity reason
  of the scan (`budget`, `max_num_seqs`, `kv`, ...); `not visited` when
  the scan stopped before it without naming it;
- on how many of those steps it was r* itself (`StarLog`, fair's gate
  logging the r* each scan starts with).

A request fair holds (`fair_guard`) and one the cap blocks wait for
different reasons: the first is the guard acting on its adapter, the
second is the adapter not running, which under fair follows from the
older starving requests' adapters taking the slots (mechanisms 1 and 2).

`python -m lora_sched.bench.late [--large] [--draw K] [--S 16] [--workloads P,Q]`
runs vllm and fair at S on the grid (`bench.realistic.grid`), or on the
workloads whose names start with one of P, Q, ..., and prints one line
per workload whose throughput ratio (cost-model seconds, as
`bench.realistic`) is below 0.97: the run-ending request, its first
admission under fair and vllm, and its waiting steps by reason. It writes
`late[-large][-dK].json` under `--out`. Nothing here is shipped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections import Counter
from pathlib import Path

from lora_sched.bench import realistic as R
from lora_sched.bench.preemption import finish_steps
from lora_sched.bench.simulate import simulate_policy
from lora_sched.policy.driver import RunResult, release
from lora_sched.policy.fair import FairGate
from lora_sched.policy.gate import ScanContext
from lora_sched.spec import releases

THROUGHPUT_GOAL = 0.97  # issue 20's realistic goal: the misses this module explains
NOT_VISITED = "not visited"


class StarLog(FairGate):
    """fair's gate, unchanged, that also logs the r* each scan starts with (step -> r* or None)."""

    def __init__(self) -> None:
        super().__init__()
        self.stars: dict[int, str | None] = {}

    def front(self, ctx: ScanContext) -> list[str]:
        first = super().front(ctx)
        self.stars[ctx.step] = first[0] if first else None
        return first


def waiting_reasons(result: RunResult, rid: str) -> Counter[str]:
    """Each step `rid` waited before its first admission, by the reason the scan gave it."""
    first = result.scheduler.state.reqs[rid].first_admitted
    reasons: Counter[str] = Counter()
    for rec in result.records:
        if rid in rec.waiting and (first is None or rec.step < first):
            reasons[rec.holds.get(rid, NOT_VISITED)] += 1
    return reasons


def late_start(spec: R.Spec, knob: int) -> dict:
    """vllm and fair at S = `knob` on `spec`: the throughput ratio, and the
    request that ends fair's run with why it waited (module docstring)."""
    reqs = R.workload(spec)
    gate = StarLog()
    fair = simulate_policy(spec.config(starvation_steps=knob), reqs, "fair", gate=gate)
    vllm = simulate_policy(spec.config(), reqs, "vllm")
    finish = finish_steps(fair.result)
    last = max(finish, key=lambda r: (finish[r], r))
    state = fair.result.scheduler.state.reqs[last]
    waited = waiting_reasons(fair.result, last)
    return {"workload": spec.name, "S": knob, "design": spec.design,
            "ratio_s": vllm.block["duration_s"] / fair.block["duration_s"],
            "last": last, "adapter": state.req.adapter, "outputs": state.req.max_tokens,
            "arrival": state.req.arrival, "preempted": state.preemptions,
            "first_admitted_fair": state.first_admitted,
            "first_admitted_vllm": vllm.result.scheduler.state.reqs[last].first_admitted,
            "waited": sum(waited.values()), "reasons": dict(waited.most_common()),
            "star_steps": sum(1 for star in gate.stars.values() if star == last)}


def _job(args: tuple[R.Spec, int, str]) -> dict:
    spec, knob, name = args
    with release(name):
        return late_start(spec, knob)


def line(row: dict) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in row["reasons"].items())
    return (f"{row['workload']:44s} thr {row['ratio_s']:.3f}: {row['last']} (adapter {row['adapter']}, "
            f"{row['outputs']} outputs, arrives {row['arrival']}) first admitted {row['first_admitted_fair']} "
            f"under fair, {row['first_admitted_vllm']} under vllm; waited {row['waited']} steps: {reasons}; "
            f"r* on {row['star_steps']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lora_sched.bench.late", description=__doc__.split("\n")[0])
    ap.add_argument("--large", action="store_true", help="the 48-workload grid (1200 requests each)")
    ap.add_argument("--draw", type=R.parse_draw, default=R.GRID_DRAW, help="the grid's draw (bench.realistic)")
    ap.add_argument("--S", type=int, default=16, help="fair's starvation_steps (default 16)")
    ap.add_argument("--workloads", default="", help="only the workloads whose names start with one of these "
                                                      "(comma-separated), e.g. d21-real13")
    ap.add_argument("--vllm", choices=list(releases.RELEASES), default=releases.NEWEST)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    specs = R.grid(large=args.large, draw=args.draw)
    prefixes = [p for p in args.workloads.split(",") if p]
    if prefixes:
        specs = [s for s in specs if any(s.name.startswith(p) for p in prefixes)]
        if not specs:
            print(f"error: --workloads {args.workloads}: no workload of the grid starts with any of these")
            return 2
    t0 = time.perf_counter()
    print(f"late starts: {len(specs)} workloads, vllm and fair at S = {args.S} ...", flush=True)
    rows = []
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        for i, row in enumerate(pool.imap(_job, [(s, args.S, args.vllm) for s in specs]), 1):
            rows.append(row)
            print(f"  [{i}/{len(specs)}] {row['workload']}: thr {row['ratio_s']:.3f}", flush=True)
    misses = [r for r in rows if r["ratio_s"] < THROUGHPUT_GOAL]
    print(f"\nthroughput below {THROUGHPUT_GOAL} of vllm on {len(misses)} of {len(rows)}; the request that ends "
          "each such run, and why it waited under fair:")
    for r in misses:
        print("  " + line(r))
    total = Counter()
    for r in misses:
        total.update(r["reasons"])
    if misses:
        print("  all of them: " + ", ".join(f"{k} {v}" for k, v in total.most_common()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"late{'-large' if args.large else ''}{R.draw_suffix(args.draw)}.json"
    path.write_text(json.dumps({"S": args.S, "draw": args.draw, "large": args.large, "vllm": args.vllm,
                                "rows": rows, "wall_s": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
