"""Would preempting a victim relieve the tail? An experiment on the realistic grid, not a policy.

fair frees a slot for r* by holding its victim's late requests until the
victim's running requests end, so a slot changes hands only as fast as its
longest request drains (up to 2048 outputs on the realistic grid). The
README's analysis of the grid says that this rate of switches, not their
order, sets the tail adapters' wait, and leaves open the other lever:
preempting a draining slot's requests. This module measures it.

`PreemptingScheduler` is the reference core running fair's gate unchanged,
plus one rule at the start of each step: when fair has an r* that the cap
blocks and has chosen victims (mechanism 2), the victim whose running
requests hold the fewest computed tokens (the cheapest to recompute) is
preempted whole, every running request of its adapter, as vLLM preempts
(recompute: back to the front of `waiting`, waiting since this step), when

- its longest-running request has more than S outputs left: a victim that
  frees within S steps costs r* no more than the wait the knob already
  allows, so preempting it buys nothing; and
- with a budget eps (`budget`), the tokens it has computed fit in a bucket
  that every scheduled token fills by eps, so at most eps of the work is
  recomputed (eps = 0.03 is what issue 20's 0.97 throughput goal leaves).
  That was meant to cap the throughput lost at about eps, as a step's
  time grows with its tokens; measured, it does not (docs/bench.md). The
  run ends with one long request, and what sets the makespan is when it
  was first admitted: where fair or preemption costs more than 3%, that
  request was, on nearly every workload, never preempted but admitted
  later than under vllm (each row's `last_*` fields), and then ran almost
  alone at the end. A restarted request finishing last is the exception.
  Without a budget (None) every such victim is preempted.

Its adapter stays a victim, so fair holds the preempted requests until r* is
in, and r* (visited first) takes the freed slot in the same step.

Waits here, as in `bench.realistic`, run from arrival to first admission,
so a preempted request's recompute does not show in them; the table adds
each point's p99 and worst time to finish (arrival to last output, steps)
and tail/head on that time. Throughput is issue 20's (`ratio_s`: vllm's
time to the last output over this point's, cost-model seconds); beside it,
`ratio_p99_tokens` takes the time to the 99th-percentile output token
instead, which leaves out a lone long request running at the very end,
and the summary counts the throughput misses whose run ends with a
request started later than under vllm. Neither changes a goal. It also
gives the head's and the tail's mean wait apart
(`bench.popularity.head_tail`): the ratio rises when the head gains more
than the tail, and falls when the head loses.
Nothing here is shipped: the vLLM classes, the proofs and the checker know
fair without preemption.

`python -m experiments.preemption [--large] [--requests N] [--draw K] [--out DIR] [--plot PNG]`
runs the default grid (12 workloads, 4 design / 8 held out; `--large`: the
48-workload grid, whose first 12 are the default's; `--draw K`: a fresh
grid of the same shape, `bench.realistic.grid(draw=K)`, all held out) for
vllm, fair, fair with preemption at eps = 0.03, 0.1 and without a budget, and the field
(drainer, timeslice, vtc), side by side; prints the table and issue 20's
realistic goals per fair point, and writes `preemption.json`
(`preemption-large.json`, `preemption-large-d21.json`) and a plot
(`bench.plots.preemption`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from lora_sched.bench import realistic as R
from lora_sched.bench.popularity import head_tail
from lora_sched.bench.realistic import Spec, grid, tail_head, workload
from lora_sched.bench.simulate import apply_model, build_timeline, result_block
from lora_sched.policy.core import Scheduler
from lora_sched.policy.costmodel import DEFAULT
from lora_sched.policy.driver import RunResult, Workload, run
from lora_sched.policy.fair import FairGate, starvation_window
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord

from experiments import goals as G
from experiments.dominance import FIELD

S = R.DEFAULT_FAIR[1]  # fair's default knob, as the realistic grid runs it
BUDGETS: tuple[float | None, ...] = (0.03, 0.1, None)


@dataclass
class PreemptingScheduler(Scheduler):
    """The reference core with fair's gate and the module docstring's preemption rule.
    `budget`: eps, or None for no budget. `evicted` lists (step, request,
    tokens it had computed) for every preemption the rule made; the step's
    record lists them under `preempted` too, so the timeline restarts them."""

    budget: float | None = None
    evicted: list[tuple[int, str, int]] = field(default_factory=list, init=False)
    _bucket: float = field(default=0.0, init=False)

    def _schedule(self, step: int, skip_running: frozenset[str], throttle: bool) -> StepRecord:
        out = self._evict(step)
        rec = super()._schedule(step, skip_running, throttle)
        if out:
            rec.preempted[:0] = out
        if self.budget is not None:
            self._bucket += self.budget * sum(rec.scheduled.values())
        return rec

    def _evict(self, step: int) -> list[str]:
        gate, st = self.gate, self.state
        guard = gate.guard if isinstance(gate, FairGate) else None
        if guard is None or guard.star is None or not guard.victims or guard.star not in st.reqs \
                or st.reqs[guard.star].status != "waiting":
            return []
        by: dict[int, list[str]] = {}
        for rid in st.running:
            if (a := st.adapter(rid)) in guard.victims:
                by.setdefault(a, []).append(rid)
        if not by:
            return []

        def cost(a: int) -> int:
            return sum(st.reqs[r].computed for r in by[a])

        victim = min(by, key=lambda a: (cost(a), a))
        left = max(st.reqs[r].req.max_tokens - st.reqs[r].generated for r in by[victim])
        if left <= starvation_window(self.config) or any(st.reqs[r].in_flight for r in by[victim]):
            return []
        if self.budget is not None:
            if cost(victim) > self._bucket:
                return []
            self._bucket -= cost(victim)
        for rid in by[victim]:
            self.evicted.append((step, rid, st.reqs[rid].computed))
            st.running.remove(rid)
            self._preempt(rid, step)
        return by[victim]


def preempt_name(budget: float | None) -> str:
    """The policy name of fair with preemption at `budget`."""
    return "fair+preempt " + ("no budget" if budget is None else f"eps={budget:g}")


def label(point: str, budget: float | None = None) -> str:
    """A point's label as `bench.realistic` writes it (knobbed policies at S),
    so that `experiments.goals.goals` judges these rows as it judges its own."""
    if point == "preempt":
        return R.label((preempt_name(budget), S))
    return R.label((point, None if point in ("vllm", "vtc") else S))


def fair_points() -> list[str]:
    """fair, then fair with preemption at each budget: the points the goals are judged for."""
    return [label("fair")] + [label("preempt", b) for b in BUDGETS]


def measure(spec: Spec, point: str, budget: float | None = None, *, reqs: list[Request] | None = None) -> dict:
    """One run of `point` ("vllm", "fair", or "preempt" with `budget`) on `spec`."""
    reqs = workload(spec) if reqs is None else reqs
    cfg = spec.config(starvation_steps=S)
    t = time.perf_counter()
    if point == "preempt":
        result = run(cfg, Workload(list(reqs)), policy="fair",
                     scheduler=functools.partial(PreemptingScheduler, budget=budget))
    else:
        result = run(cfg, Workload(list(reqs)), policy=point)
    sim_s = time.perf_counter() - t
    tl = apply_model(build_timeline(result), DEFAULT)
    block = result_block(tl, {r.id: r.prompt_tokens for r in reqs})
    out_times = sorted(t for ts in tl.tokens.values() for t in ts)
    tokens_p99_s = out_times[math.ceil(0.99 * len(out_times)) - 1] - min(tl.arrival.values())
    waits = result.waits()
    finish = finish_steps(result)
    adapter_of = {r.id: r.adapter for r in reqs}
    v = np.array(list(waits.values()), dtype=float)
    head, tail = head_tail(adapter_of.values(), spec.max_loras)
    to_finish = {r.id: finish[r.id] - r.arrival + 1 for r in reqs}
    e2e = np.array(list(to_finish.values()), dtype=float)
    evicted = result.scheduler.evicted if isinstance(result.scheduler, PreemptingScheduler) else []
    return {"workload": spec.name, "design": spec.design, "point": label(point, budget),
            "steps": result.last_step - min(r.arrival for r in reqs) + 1, "seconds": block["duration_s"],
            "tokens_p99_s": tokens_p99_s,
            "p99": float(np.percentile(v, 99)), "max": int(v.max()),
            "tail_head": tail_head(waits, adapter_of, spec),
            "head_mean": _mean(waits, adapter_of, head), "tail_mean": _mean(waits, adapter_of, tail),
            "finish_p99": float(np.percentile(e2e, 99)), "finish_max": int(e2e.max()),
            "finish_tail_head": tail_head(to_finish, adapter_of, spec),
            "preemptions": len(evicted), "recomputed": sum(c for _s, _r, c in evicted),
            "scheduled": sum(sum(rec.scheduled.values()) for rec in result.records), "sim_s": sim_s,
            **_last(result, finish), "_first": result.first_admitted()}


def _last(result: RunResult, finish: dict[str, int]) -> dict:
    """The request whose last output ends the run: what sets the makespan,
    and so the throughput ratio (`last_*`)."""
    rid = max(finish, key=lambda r: (finish[r], r))
    rs = result.scheduler.state.reqs[rid]
    return {"last": rid, "last_outputs": rs.req.max_tokens, "last_preempted": rs.preemptions,
            "last_admitted": rs.first_admitted}


def _mean(waits: dict[str, int], adapter_of: dict[str, int], group: set[int]) -> float:
    """The mean wait of the requests of the adapters in `group` (0.0 when none)."""
    ws = [w for rid, w in waits.items() if adapter_of[rid] in group]
    return float(np.mean(ws)) if ws else 0.0


def finish_steps(result: RunResult) -> dict[str, int]:
    """The step each request's last output came out (from the step records)."""
    out: dict[str, int] = {}
    for rec in result.records:
        for rid in rec.finished:
            out[rid] = rec.step
    return out


def _job(args: tuple[Spec, str, float | None]) -> dict:
    return measure(*args)


def points() -> list[tuple[str, float | None]]:
    """vllm, fair, fair with preemption at each budget, then the field (at S, as `bench.realistic` runs it)."""
    return [("vllm", None), ("fair", None)] + [("preempt", b) for b in BUDGETS] + [(p, None) for p in FIELD]


def run_grid(specs: list[Spec], *, processes: int = 2) -> list[dict]:
    """Every point on every spec, with the throughput ratio to vllm (cost-model seconds)."""
    import multiprocessing

    jobs = [(s, p, b) for s in specs for p, b in points()]
    rows: list[dict] = []
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        for i, row in enumerate(pool.imap_unordered(_job, jobs), 1):
            rows.append(row)
            print(f"  [{i}/{len(jobs)}] {row['workload']} {row['point']}: max wait {row['max']}, "
                  f"tail/head {row['tail_head']:.2f}, {row['preemptions']} preemptions", flush=True)
    base = {r["workload"]: r for r in rows if r["point"] == "vllm"}
    for r in rows:
        r["ratio_s"] = base[r["workload"]]["seconds"] / r["seconds"]
        r["ratio_p99_tokens"] = base[r["workload"]]["tokens_p99_s"] / r["tokens_p99_s"]
        r["last_admitted_vllm"] = base[r["workload"]]["_first"][r["last"]]
    for r in rows:
        del r["_first"]
    order = {s.name: i for i, s in enumerate(specs)}
    rank = {label(p, b): i for i, (p, b) in enumerate(points())}
    rows.sort(key=lambda r: (order[r["workload"]], rank.get(r["point"], 9)))
    return rows


def summary(rows: list[dict], workloads: list[str]) -> list[dict]:
    """Per fair point, over `workloads`: what happens to the tail adapters'
    own mean wait on the starving ones (vllm's tail/head > 3), against vllm
    and against fair, and the throughput, worst-wait and time-to-finish
    figures that come with it (docs/bench.md's held-out table)."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["workload"] in workloads:
            by.setdefault(r["workload"], {})[r["point"]] = r
    starving = [w for w, ps in by.items() if ps["vllm"]["tail_head"] > 3]
    fair = label("fair")
    out = []
    for p in fair_points():
        tail = [(by[w][p]["tail_mean"] + 1) / (by[w]["vllm"]["tail_mean"] + 1) for w in starving]
        thr = [ps[p]["ratio_s"] for ps in by.values()]
        fin = [ps[p]["finish_p99"] / ps["vllm"]["finish_p99"] for ps in by.values()]
        out.append({
            "point": p, "workloads": len(by), "starving": len(starving),
            "tail_vs_vllm": [float(np.median(tail)), min(tail), max(tail)] if tail else None,
            "tail_below_fair": sum(by[w][p]["tail_mean"] < 0.95 * by[w][fair]["tail_mean"] for w in starving),
            "tail_above_fair": sum(by[w][p]["tail_mean"] > 1.05 * by[w][fair]["tail_mean"] for w in starving),
            "tail_head_at_most_2": sum(by[w][p]["tail_head"] <= 2.0 for w in starving),
            "tail_head_below_fair": sum(by[w][p]["tail_head"] < 0.95 * by[w][fair]["tail_head"] for w in starving),
            "tail_head_above_fair": sum(by[w][p]["tail_head"] > 1.05 * by[w][fair]["tail_head"] for w in starving),
            "throughput_below_0.97": sum(t < 0.97 for t in thr), "throughput": [min(thr), float(np.median(thr))],
            "below_0.97_late_start": _late_starts([ps[p] for ps in by.values() if ps[p]["ratio_s"] < 0.97]),
            "p99_tokens_below_0.97": sum(ps[p]["ratio_p99_tokens"] < 0.97 for ps in by.values()),
            "p99_tokens": [min(ps[p]["ratio_p99_tokens"] for ps in by.values()),
                           float(np.median([ps[p]["ratio_p99_tokens"] for ps in by.values()]))],
            "max_below_fair": sum(ps[p]["max"] < ps[fair]["max"] for ps in by.values()),
            "max_above_vllm": sum(ps[p]["max"] > ps["vllm"]["max"] for ps in by.values()),
            "finish_p99_vs_vllm": [float(np.median(fin)), max(fin)]})
    return out


def _late_starts(rows: list[dict]) -> int:
    """Of `rows`, those whose run ends with a request that was never preempted
    but was first admitted later than under vllm: the makespan, and so the
    throughput ratio, is set by when that one long request started."""
    return sum(r["last_preempted"] == 0 and r["last_admitted"] > r["last_admitted_vllm"] for r in rows)


def print_summary(summ: list[dict], title: str) -> None:
    print(f"\n{title} (tail: the tail adapters' mean wait + 1 over vllm's; 'vs fair': more than 5% apart)")
    for s in summ:
        t = s["tail_vs_vllm"]
        print(f"  {s['point']:26s} starving {s['starving']:2d}: tail/vllm median "
              + (f"{t[0]:.2f} ({t[1]:.2f}-{t[2]:.2f})" if t else "-")
              + f", tail below/above fair {s['tail_below_fair']}/{s['tail_above_fair']}"
              f", tail/head <= 2 on {s['tail_head_at_most_2']}, below/above fair "
              f"{s['tail_head_below_fair']}/{s['tail_head_above_fair']}; throughput < 0.97 on "
              f"{s['throughput_below_0.97']} of {s['workloads']} (min {s['throughput'][0]:.3f}, median "
              f"{s['throughput'][1]:.3f}; {s['below_0.97_late_start']} of them end with a request never "
              f"preempted but started later than under vllm; to the 99th-percentile output token: < 0.97 on "
              f"{s['p99_tokens_below_0.97']}, min {s['p99_tokens'][0]:.3f}); worst wait below fair "
              f"{s['max_below_fair']}, above vllm "
              f"{s['max_above_vllm']}; p99 finish / vllm median {s['finish_p99_vs_vllm'][0]:.2f}, "
              f"max {s['finish_p99_vs_vllm'][1]:.2f}")


def table(rows: list[dict]) -> str:
    head = (f"{'workload':44s} {'point':24s} {'thr(s)':>6s} {'thr99':>6s} {'p99':>6s} {'max':>6s} {'tail/head':>9s} "
            f"{'head':>6s} {'tail':>6s} "
            f"{'fin p99':>7s} {'fin max':>7s} {'fin t/h':>7s} {'preempt':>7s} {'recomp':>7s}")
    lines, last = [head, "-" * len(head)], None
    for r in rows:
        name = (r["workload"] + ("" if r["design"] else " (held out)")) if r["workload"] != last else ""
        last = r["workload"]
        recomp = f"{r['recomputed'] / r['scheduled']:.1%}" if r["scheduled"] else "-"
        lines.append(f"{name:44s} {r['point']:24s} {r['ratio_s']:6.3f} {r['ratio_p99_tokens']:6.3f} "
                     f"{r['p99']:6.0f} {r['max']:6d} "
                     f"{r['tail_head']:9.2f} {r['head_mean']:6.0f} {r['tail_mean']:6.0f}"
                     f" {r['finish_p99']:7.0f} {r['finish_max']:7d} {r['finish_tail_head']:7.2f} "
                     f"{r['preemptions']:7d} "
                     f"{recomp:>7s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.preemption", description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=None, help="requests per workload (default: the grid's 600)")
    ap.add_argument("--large", action="store_true", help="the 48-workload grid (bench.realistic.grid(large=True)); "
                    "its first 12 are the default grid's")
    ap.add_argument("--out", default="experiments/results", help="where preemption.json goes")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--draw", type=G.parse_draw, default=R.GRID_DRAW,
                    help=f"the grid's draw (default {R.GRID_DRAW}, the fixed grid); a larger one is a fresh grid, "
                    "all held out")
    ap.add_argument("--plot", default=None,
                    help="the plot's path ('' for none; default docs/img/preemption[-large][-dDRAW].png)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    specs = grid(large=args.large, requests=args.requests, draw=args.draw)
    fresh = args.draw != R.GRID_DRAW
    print(f"preemption experiment: {len(specs)} workloads x {len(points())} points, S = {S}", flush=True)
    rows = run_grid(specs, processes=args.processes)
    print(table(rows))
    doc: dict = {"S": S, "budgets": list(BUDGETS), "draw": args.draw, "rows": rows, "goals": {}}
    for policy in ["fair"] + [preempt_name(b) for b in BUDGETS]:
        for name, design in ((("held out", False),) if fresh else (("design", True), ("held out", False))):
            point = R.label((policy, S))
            print(f"\ngoals for {point}, {name} set:")
            doc["goals"][f"{point} / {name}"] = []
            for goal, met, figures in G.goals(rows, design=design, point=(policy, S)):
                print(f"  {goal} ... {'met' if met else 'NOT MET'}. ({figures})")
                doc["goals"][f"{point} / {name}"].append({"goal": goal, "met": met, "figures": figures})
    default = {s.name for s in grid(requests=args.requests)}
    parts = [("default grid", [s.name for s in specs if s.name in default])]
    if fresh:
        parts = [(f"a fresh grid (draw {args.draw}: no rule was looked at on it)", [s.name for s in specs])]
    elif args.large:
        parts.append(("the large grid beyond the default 12 (held out from this experiment)",
                      [s.name for s in specs if s.name not in default]))
    doc["summary"] = {}
    for title, names in parts:
        doc["summary"][title] = summary(rows, names)
        print_summary(doc["summary"][title], title)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ("-large" if args.large else "") + R.draw_suffix(args.draw)
    name = f"preemption{suffix}.json"
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / name}")
    if args.plot is None:
        args.plot = f"docs/img/preemption{suffix}.png"
    if args.plot:
        from experiments.plots import preemption

        others = [label(p) for p in FIELD]
        print(f"wrote {preemption(rows, fair_points(), others, Path(args.plot))}")
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
