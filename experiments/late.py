"""Why fair starts the request that ends a realistic run late: an experiment, not a policy.

On the realistic grid, each workload where fair's throughput falls below
0.97 of vllm's ends with one long request that fair first admits far later
than vllm does, and that then runs almost alone at the end
(`experiments.preemption`'s `last_*` fields). The rule change that would remove
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

Then it asks what starting that request on time would cost, with an
oracle no online rule has (it knows which request ends the run and when
vllm admits it): fair unchanged, except that at the step vllm first
admits that request, it becomes r* at once, ahead of any older starving
request and of the S-step gap (`oracle_gate`). Beside vllm's and fair's
figures the row gives the oracle's throughput ratio, worst wait and
tail/head: what a rule that found such requests online could buy at
best by this route, and what it would cost the other goals.

`python -m experiments.late [--large] [--draw K] [--S 16] [--workloads P,Q]`
runs vllm and fair at S on the grid (`bench.realistic.grid`), or on the
workloads whose names start with one of P, Q, ..., and prints one line
per workload whose throughput ratio (cost-model seconds, as
`bench.realistic`) is below 0.97: the run-ending request, its first
admission under fair and vllm, its waiting steps by reason, and the
oracle's figures. It writes `late[-large][-dK].json` under `--out`.
Nothing here is shipped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lora_sched.bench import realistic as R
from lora_sched.bench.simulate import simulate_policy
from lora_sched.policy.driver import RunResult, release
from lora_sched.policy.fair import FairGate, FairGuard
from lora_sched.policy.gate import ScanContext
from lora_sched.spec import releases

from experiments import goals as G
from experiments.dominance import THROUGHPUT_GOAL
from experiments.preemption import finish_steps

NOT_VISITED = "not visited"


def oracle_gate(target: str, start: int) -> FairGate:
    """fair's gate, except that at the first scan at or after step `start`
    with `target` waiting, `target` becomes r* (the current r* and its
    victims dropped, the S-step gap ignored); the rule runs unchanged
    from there (module docstring: the oracle)."""

    class OracleGuard(FairGuard):
        forced = False

        def begin_scan(self, step: int, stale: Callable[[str], bool] = lambda rid: False) -> str | None:
            if not self.forced and step >= start and target in self._waiting and self.star != target:
                self._clear()
                self.star, self.star_adapter, self.chosen_at = target, self._waiting[target][1], step
                self.forced = True
            return super().begin_scan(step, stale)

    gate = FairGate()
    gate.guard_class = OracleGuard
    return gate


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
    at_vllm = vllm.result.scheduler.state.reqs[last].first_admitted
    oracle = simulate_policy(spec.config(starvation_steps=knob), reqs, "fair", gate=oracle_gate(last, at_vllm))
    adapter_of = {r.id: r.adapter for r in reqs}
    figures = {name: {"ratio_s": vllm.block["duration_s"] / run.block["duration_s"], "max": max(run.waits.values()),
                      "tail_head": R.tail_head(run.waits, adapter_of, spec)}
               for name, run in (("vllm", vllm), ("fair", fair), ("oracle", oracle))}
    return {"workload": spec.name, "S": knob, "design": spec.design,
            "ratio_s": figures["fair"]["ratio_s"],
            "last": last, "adapter": state.req.adapter, "outputs": state.req.max_tokens,
            "arrival": state.req.arrival, "preempted": state.preemptions,
            "first_admitted_fair": state.first_admitted, "first_admitted_vllm": at_vllm,
            "first_admitted_oracle": oracle.result.scheduler.state.reqs[last].first_admitted,
            "waited": sum(waited.values()), "reasons": dict(waited.most_common()),
            "star_steps": sum(1 for star in gate.stars.values() if star == last), "figures": figures}


def _job(args: tuple[R.Spec, int, str]) -> dict:
    spec, knob, name = args
    with release(name):
        return late_start(spec, knob)


def line(row: dict) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in row["reasons"].items())
    return (f"{row['workload']:44s} thr {row['ratio_s']:.3f}: {row['last']} (adapter {row['adapter']}, "
            f"{row['outputs']} outputs, arrives {row['arrival']}) first admitted {row['first_admitted_fair']} "
            f"under fair, {row['first_admitted_vllm']} under vllm; waited {row['waited']} steps: {reasons}; "
            f"r* on {row['star_steps']}\n    " + "; ".join(
                f"{name} thr {f['ratio_s']:.3f}, max wait {f['max']}, tail/head {f['tail_head']:.2f}"
                for name, f in row["figures"].items())
            + f" (oracle admits it at {row['first_admitted_oracle']})")


def grid_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """The command line this experiment and `experiments.critical` share: the
    grid (`--large`, `--draw`), S, `--workloads`, the release, `--out`,
    `--processes`."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ap.add_argument("--large", action="store_true", help="the 48-workload grid (1200 requests each)")
    ap.add_argument("--draw", type=G.parse_draw, default=R.GRID_DRAW, help="the grid's draw (bench.realistic)")
    ap.add_argument("--S", type=int, default=16, help="fair's starvation_steps (default 16)")
    ap.add_argument("--workloads", default="", help="only the workloads whose names start with one of these "
                                                      "(comma-separated), e.g. d21-real13")
    ap.add_argument("--vllm", choices=list(releases.RELEASES), default=releases.NEWEST)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--processes", type=int, default=2)
    return ap


def grid_specs(args: argparse.Namespace) -> list[R.Spec] | None:
    """The grid's workloads `--workloads` selects, or None (said why) when it selects none."""
    specs = R.grid(large=args.large, draw=args.draw)
    prefixes = [p for p in args.workloads.split(",") if p]
    if prefixes:
        specs = [s for s in specs if any(s.name.startswith(p) for p in prefixes)]
        if not specs:
            print(f"error: --workloads {args.workloads}: no workload of the grid starts with any of these")
            return None
    return specs


def write_rows(args: argparse.Namespace, stem: str, rows: list[dict], t0: float) -> Path:
    """`<stem>[-large][-dK].json` under `--out`: the run's S, grid, release, rows and wall time."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}{'-large' if args.large else ''}{R.draw_suffix(args.draw)}.json"
    path.write_text(json.dumps({"S": args.S, "draw": args.draw, "large": args.large, "vllm": args.vllm,
                                "rows": rows, "wall_s": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")
    return path


def main(argv: list[str] | None = None) -> int:
    args = grid_parser("python -m experiments.late", __doc__).parse_args(argv)
    specs = grid_specs(args)
    if specs is None:
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
        o = [r["figures"]["oracle"] for r in misses]
        v = [r["figures"]["vllm"] for r in misses]
        f = [r["figures"]["fair"] for r in misses]
        print(f"  the oracle: throughput >= {THROUGHPUT_GOAL} on {sum(x['ratio_s'] >= THROUGHPUT_GOAL for x in o)} "
              f"of {len(o)} (min {min(x['ratio_s'] for x in o):.3f}); worst wait above vllm's on "
              f"{sum(a['max'] > b['max'] for a, b in zip(o, v, strict=True))} (fair: "
              f"{sum(a['max'] > b['max'] for a, b in zip(f, v, strict=True))}), above fair's on "
              f"{sum(a['max'] > b['max'] for a, b in zip(o, f, strict=True))}; tail/head above fair's on "
              f"{sum(a['tail_head'] > b['tail_head'] for a, b in zip(o, f, strict=True))}")
    write_rows(args, "late", rows, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
