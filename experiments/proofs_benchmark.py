"""Benchmark of the proofs (prints figures; never asserts on time).

    python -m experiments.proofs_benchmark [--budget 60] [--only NAME ...]

Sections (each a function in `SECTIONS`, so other modules can add theirs):

* `bmc_depth`: the BMC depth curve on `batch_lora_cap` at R=8 / A=3 /
  max_loras 2 (`BIG`) within the budget, per policy: plain incremental BMC,
  with adapter symmetry breaking, and with the strengthening invariants
  once proved inductive at these bounds (`engine.bmc(lemmas=True)`); the
  cumulative seconds at each depth (wall, or with `--cpu` this process's CPU
  time, for a machine shared with others). Every query gets the remaining
  budget as its Z3 timeout, so nothing hangs.
* `kinduction`: the time of each k-induction proof at the default bounds,
  synchronous and under async scheduling + DP throttle.
* `incremental`: incremental (push/pop) vs fresh solver per depth.
* `kv_priority`: the general mode (KV pool with preemption, the priority
  queue, async scheduling, DP throttle): fair's `batch_lora_cap` and
  `running_lora_cap` by k-induction for growing R (A=3 from R=5), the time
  of each proof (stops growing R once a proof takes over the budget); and
  the BMC depth on `batch_lora_cap` for vllm and fair at R=4 / A=2 within
  the budget.
* `fair_wait_family`: fair's tight worst wait (`engine.tight_wait`) at R=6,
  A=3, max_loras 1..2, on a model that holds the base-model stream family (a
  base request behind later LoRA arrivals,
  `policy.workloads.behind_lora_stream`), and the same search on fair's
  first design (`star_lora_only`) for comparison. Many minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.checks import ASYNC_THROTTLE, FAMILY, fair_B
from lora_sched.proofs.unbounded import MODELS, TRACES, prove, run_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from unbounded_crosscheck import crosscheck  # noqa: E402

BIG = enc.Bounds(requests=8, adapters=3, max_prompt=2, max_output=2, max_loras=(2, 2), max_num_seqs=(1, 4),
                 max_num_batched_tokens=(1, 6), starvation_steps=(0, 3))


def bmc_depth(a: argparse.Namespace) -> None:
    print(f"bmc_depth: deepest BMC depth on batch_lora_cap in {a.budget:.0f}s "
          f"{'CPU' if a.cpu else 'wall'}, {BIG.describe()}")
    modes = (("plain", {}), ("symmetry", {"symmetry": True}), ("lemmas+symmetry", {"lemmas": True, "symmetry": True}))
    for pol in ("vllm", "fair", "blocking"):
        for name, kw in modes:
            if pol == "fair" and name == "symmetry":
                continue  # fair's victim tie-break orders adapters: no symmetry to break
            clock = time.process_time if a.cpu else time.monotonic
            r = engine.bmc(BIG, pol, "batch_lora_cap", 1000, deadline=clock() + a.budget, clock=clock, **kw)
            cum, curve = 0.0, []
            for k, inc, _ in r.timings:
                cum += inc
                curve.append(f"{k}:{cum:.1f}")
            print(f"   {pol:9s} {name:16s} depth {r.depth:3d} ({r.verdict}, {r.seconds:.1f}s)"
                  + (f" [{r.reason}]" if r.reason and "lemmas" in name else ""), flush=True)
            print(f"      depth:cumulative s  {' '.join(curve)}", flush=True)


def kinduction(a: argparse.Namespace) -> None:
    for b in (enc.Bounds(), ASYNC_THROTTLE):
        print("kinduction:", b.describe())
        for pol in ("vllm", "fair"):
            for prop in enc.SAFETY:
                r = engine.kinduction(b, pol, prop, 3)
                print(f"   {pol:5s} {prop:20s} {r.verdict} k={r.depth} {r.seconds:.1f}s", flush=True)


def incremental(a: argparse.Namespace) -> None:
    print(f"incremental: incremental vs fresh solver per depth (vllm no_hol_blocking, {BIG.describe()})")
    r = engine.bmc(BIG, "vllm", "no_hol_blocking", a.fresh_depth, fresh=True)
    for k, inc, fr in r.timings:
        print(f"   depth {k:2d}: incremental {inc:6.2f}s  fresh {fr:6.2f}s", flush=True)


def fair_wait_family(a: argparse.Namespace) -> None:
    B = fair_B(FAMILY)
    print(f"fair_wait_family: {FAMILY.describe()}, arrivals by step {FAMILY.last_arrival}, B = {B}")
    for mut in (None, "star_lora_only"):
        r = engine.tight_wait(replace(FAMILY, mutant=mut), "fair", a.wait_start,
                              progress=lambda s: print("     ", s, flush=True))
        print(f"   fair{'' if mut is None else ' [' + mut + ']'}: {r.verdict}, worst wait {r.worst} vs B = {B} "
              f"({r.detail or r.reason}) {r.seconds:.0f}s", flush=True)


GENERAL = enc.Bounds(kv_blocks=(1, 4), priority=True, async_scheduling=True, prefill_interval=2)


def kv_priority(a: argparse.Namespace) -> None:
    print(f"kv_priority: fair's caps by k-induction, {GENERAL.describe()}, growing R")
    slow = False
    for R, A in ((3, 2), (4, 2), (5, 3), (6, 3), (8, 3)):
        b = replace(GENERAL, requests=R, adapters=A)
        for prop in ("batch_lora_cap", "running_lora_cap"):
            if slow:
                break
            r = engine.kinduction(b, "fair", prop, 1, timeout_ms=int(a.budget * 10_000))
            print(f"   R={R} A={A} fair {prop:16s} {r.verdict} k={r.depth} {r.seconds:.1f}s", flush=True)
            slow = r.seconds > a.budget
    b = replace(GENERAL, requests=4, adapters=2)
    print(f"kv_priority: BMC depth on batch_lora_cap in {a.budget:.0f}s wall, {b.describe()}")
    for pol in ("vllm", "fair"):
        r = engine.bmc(b, pol, "batch_lora_cap", 1000, deadline=time.monotonic() + a.budget, lemmas=pol == "fair")
        curve = " ".join(f"{k}:{sum(t for _, t, _ in r.timings[:k]):.1f}" for k, _, _ in r.timings)
        print(f"   {pol:5s} {r.verdict} depth {r.depth} ({r.detail or r.reason or 'in budget'})", flush=True)
        print(f"      depth:cumulative s  {curve}", flush=True)


def unbounded_figures(echo: Callable[[str], None] = print) -> dict[str, float]:
    """Figures of `proofs.unbounded`: seconds per model (all obligations),
    the slowest obligation, and the sat traces. Prints; never asserts."""
    figures: dict[str, float] = {}
    echo("unbounded proofs (uninterpreted sorts, any R and A; seconds on this machine):")
    for m, good, bad in MODELS:
        t0 = time.monotonic()
        outs = prove(m, props=good + bad)
        total = time.monotonic() - t0
        slow = max(outs, key=lambda o: o.seconds)
        proved = [o.name for o in outs if o.kind == "safety" and o.verdict == "ok"]
        failed = [o.name for o in outs if o.kind == "safety" and o.verdict != "ok"]
        echo(f"   {m.label:14s} {len(outs):2d} obligations {total:6.2f}s, slowest {slow.kind} {slow.name} "
             f"{slow.seconds:.2f}s; proved {proved}; fails {failed}")
        figures[m.label] = total
    for tc in TRACES:
        o = run_trace(tc)
        echo(f"   trace {tc.name}: {o.detail} ({o.seconds:.2f}s)")
        figures[f"trace:{tc.name}"] = o.seconds
    echo("bounded instance vs the reference (crosscheck: Z3 over EnumSorts of R requests, A adapters):")
    for R, A in ((4, 2), (8, 4), (16, 8)):
        t0 = time.monotonic()
        res = crosscheck("fair", runs=1, requests=R, adapters=A, horizon=10, kv_blocks=2 * R, seed=R)
        dt = time.monotonic() - t0
        echo(f"   R={R:2d} A={A}: {res.steps} reference steps in {dt:.2f}s ({dt / max(1, res.steps):.2f}s/step), "
             f"{len(res.failures)} failures, {res.unknown} unknown (timeout 20s)")
        figures[f"crosscheck:R={R}"] = dt / max(1, res.steps)
    return figures


def unbounded(a: argparse.Namespace) -> None:
    """The any-size proofs (`proofs.unbounded`): seconds per model, sat traces."""
    unbounded_figures()


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "bmc_depth": bmc_depth,
    "kinduction": kinduction,
    "incremental": incremental,
    "kv_priority": kv_priority,
    "unbounded": unbounded,
    "fair_wait_family": fair_wait_family,
}
# fair_wait_family takes minutes: ask for it
DEFAULT = ("bmc_depth", "kinduction", "incremental", "kv_priority", "unbounded")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per BMC depth run")
    ap.add_argument("--cpu", action="store_true",
                    help="bmc_depth: the budget is this process's CPU time (Z3 included), not wall time")
    ap.add_argument("--fresh-depth", type=int, default=8)
    ap.add_argument("--wait-start", type=int, default=3, help="fair_wait_family: first wait tried")
    ap.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run only these sections")
    a = ap.parse_args()
    for name in a.only or DEFAULT:
        SECTIONS[name](a)


if __name__ == "__main__":
    main()
