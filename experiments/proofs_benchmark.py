"""Benchmark of the proofs (prints figures; never asserts on time).

    python -m experiments.proofs_benchmark [--budget 60] [--only NAME ...]

Sections (each a function in `SECTIONS`, so other modules can add theirs):

* `bmc_depth`: the BMC depth curve on `batch_lora_cap` at R=8 / A=3 /
  max_loras 2 (`BIG`) within the budget (`budget_bmc`), per policy: plain
  incremental BMC, with adapter symmetry breaking (`adapter_symmetry`), and
  with the strengthening invariants once proved inductive at these bounds; the
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
* `fair_wait_family`: fair's tight worst wait (`tight_wait`) at R=6,
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

import z3
from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.cex import Cex, extract, replay
from lora_sched.proofs.checks import ASYNC_THROTTLE, fair_B
from lora_sched.proofs.unbounded import MODELS, TRACES, prove, run_trace
from lora_sched.proofs.unroll import Path as Unrolled

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from unbounded_crosscheck import crosscheck  # noqa: E402

# Holds behind_lora_stream(4, early_adapter=0, adapters=3) (L0 at 1, the base
# request and L1 at 2, then L2..L4 every two steps) and every other workload
# of 6 requests with P <= 1, L <= 2 arriving by step 7, under max_loras 1 or 2:
# fair's worst wait there is 10 (`python -m experiments.emit_cex --family`).
FAMILY = enc.Bounds(requests=6, adapters=3, max_prompt=1, max_output=2, max_loras=(1, 2), max_num_seqs=(1, 2),
                    max_num_batched_tokens=(2, 2), starvation_steps=(0, 0), last_arrival=7)
BIG = enc.Bounds(requests=8, adapters=3, max_prompt=2, max_output=2, max_loras=(2, 2), max_num_seqs=(1, 4),
                 max_num_batched_tokens=(1, 6), starvation_steps=(0, 3))


WALL_PER_CPU = 20  # Z3's wall-clock timeout per CPU second left, when the budget is CPU time


def adapter_symmetry(path: Unrolled) -> list[z3.BoolRef]:
    """Adapters are interchangeable for `vllm` and `blocking` (their gates and
    every property see only which requests share an adapter and how many
    adapters there are): keep one representative per renaming, adapter a > 1
    used only after a - 1 was used by an earlier slot. Not for `fair`, whose
    victim tie-break orders adapters by id."""
    if path.policy == "fair":
        return []
    p, b = path.params, path.bounds
    return [z3.Implies(p.adapter[i] == a, z3.Or([p.adapter[j] == a - 1 for j in range(i)]))
            for i in range(b.requests) for a in range(2, b.adapters + 1)]


def budget_bmc(bounds: enc.Bounds, policy: str, prop: str, budget: float, *, lemmas: bool = False,
               symmetry: bool = False, clock: Callable[[], float] = time.monotonic,
               timeout_ms: int = 120_000) -> engine.Result:
    """`engine.bmc` deepening until `budget` seconds of `clock` are spent: the
    depth reached ("holds" up to it) and the seconds per depth (`timings`).
    `symmetry` breaks the adapter renaming symmetry (`adapter_symmetry`), which
    leaves the shortest counterexample depth unchanged. `clock` is what the
    budget, `seconds` and the timings count (`time.process_time`: this
    process's CPU, Z3 included, which a shared machine does not distort; Z3's
    own timeouts stay in wall time, scaled by `WALL_PER_CPU`)."""
    t0 = clock()
    deadline = t0 + budget

    def wall_ms() -> int:
        scale = 1 if clock is time.monotonic else WALL_PER_CPU
        return max(1, min(timeout_ms, int((deadline - clock()) * 1000 * scale)))

    path = Unrolled(bounds, policy)
    s = z3.Solver()
    s.add(path.base())
    s.add(path.init())
    use_lemmas, note = engine.inductive_lemmas(bounds, policy, wall_ms()) if lemmas else (False, "")
    if use_lemmas:
        s.add(*path.invariants(0).values())
    if symmetry:
        s.add(*adapter_symmetry(path))
    timings: list[tuple[int, float]] = []
    k = 0
    while clock() <= deadline:
        k += 1
        t1 = clock()
        s.add(path.extend())
        if use_lemmas:
            s.add(*path.invariants(k).values())
        s.push()
        s.add(z3.Not(path.prop(prop, k, None)))
        s.set("timeout", wall_ms())  # no query may run past the deadline
        r = s.check()
        if r == z3.unknown and (clock() >= deadline - 0.5 or s.reason_unknown() in ("timeout", "canceled")):
            return engine.Result(policy, prop, "holds", k - 1, clock() - t0, timings=timings,
                                 detail=f"deadline during depth {k}", reason=note)
        timings.append((k, clock() - t1))
        if r != z3.unsat:
            return engine.Result(policy, prop, "cex" if r == z3.sat else "unknown", k, clock() - t0,
                                 reason=note if r == z3.sat else s.reason_unknown(), timings=timings)
        s.pop()
        s.add(path.prop(prop, k, None))  # depth k is clear: assume it deeper down
    return engine.Result(policy, prop, "holds", k, clock() - t0, timings=timings, detail="deadline", reason=note)


def bmc_depth(a: argparse.Namespace) -> None:
    print(f"bmc_depth: deepest BMC depth on batch_lora_cap in {a.budget:.0f}s "
          f"{'CPU' if a.cpu else 'wall'}, {BIG.describe()}")
    modes = (("plain", {}), ("symmetry", {"symmetry": True}), ("lemmas+symmetry", {"lemmas": True, "symmetry": True}))
    for pol in ("vllm", "fair", "blocking"):
        for name, kw in modes:
            if pol == "fair" and name == "symmetry":
                continue  # fair's victim tie-break orders adapters: no symmetry to break
            clock = time.process_time if a.cpu else time.monotonic
            r = budget_bmc(BIG, pol, "batch_lora_cap", a.budget, clock=clock, **kw)
            cum, curve = 0.0, []
            for k, inc in r.timings:
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
    r = engine.bmc(BIG, "vllm", "no_hol_blocking", a.fresh_depth)
    for k, inc in r.timings:
        fr = fresh_seconds(BIG, "vllm", "no_hol_blocking", k)
        print(f"   depth {k:2d}: incremental {inc:6.2f}s  fresh {fr:6.2f}s", flush=True)


def fresh_seconds(bounds: enc.Bounds, policy: str, prop: str, k: int, timeout_ms: int = 120_000) -> float:
    """Seconds a fresh solver takes to search depths 1..k at once (inf when Z3 gives up)."""
    t = time.monotonic()
    path = Unrolled(bounds, policy, tag="f")
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(path.base())
    s.add(path.init())
    for _ in range(k):
        s.add(path.extend())
    s.add(z3.Or([z3.Not(path.prop(prop, j, None)) for j in range(1, k + 1)]))
    return time.monotonic() - t if s.check() != z3.unknown else float("inf")


def tight_wait(bounds: enc.Bounds, policy: str, start: int = 1, *, stop: int = 64, lemmas: bool = True,
               timeout_ms: int = 3_600_000, progress: engine.Progress | None = None) -> engine.Result:
    """The tight worst first-admission wait, searched upward: for w = start,
    start + 1, ... BMC asks whether some request is still waiting, never
    admitted, at age >= w + 1 within the horizon last_arrival + w + 1 (every
    request arrives by `bounds.last_arrival`, so a longer wait shows by
    then). The first w with none is the worst wait; the counterexample for
    w - 1 is its witness and is replayed in `policy/` (it must wait >= w
    there). No completeness argument is needed, unlike `worst_wait`.
    `lemmas`: assume the strengthening invariants once proved inductive."""
    assert bounds.last_arrival is not None, "tight_wait needs Bounds.last_arrival"
    t0 = time.monotonic()
    use = lemmas and engine.inductive_lemmas(bounds, policy, timeout_ms)[0]
    witness: Cex | None = None
    for w in range(start, stop + 1):
        path = Unrolled(bounds, policy)
        s = engine.solver(timeout_ms)
        s.add(*path.base(), *path.init())
        if use:
            s.add(*path.invariants(0).values())
        horizon = bounds.last_arrival + w + 1
        found = None
        for k in range(1, horizon + 1):
            s.add(path.extend())
            if use:
                s.add(*path.invariants(k).values())
            s.push()
            s.add(z3.Not(path.prop("bounded_wait", k, w)))
            r = s.check()
            if r == z3.sat:
                found = extract(path, s.model(), k, "bounded_wait", f"a request waits > {w}", w)
            s.pop()
            if r == z3.unknown:
                return engine.Result(policy, "bounded_wait", "unknown", k, time.monotonic() - t0,
                                     reason=s.reason_unknown())
            if found is not None:
                break
            s.add(path.prop("bounded_wait", k, w))
        if progress:
            progress(f"  wait > {w} within horizon {horizon}: {'yes' if found else 'no'} "
                     f"({time.monotonic() - t0:.0f}s)")
        if found is None:
            res = engine.Result(policy, "bounded_wait", "proved", horizon, time.monotonic() - t0, witness,
                                bound=w, worst=w if witness is not None else None,
                                detail=(f"worst wait {w}" if witness is not None else f"worst wait <= {w}")
                                + (" (proved lemmas assumed)" if use else ""))
            if witness is not None:
                out = replay(witness)
                res.replay_ok = out.reproduced
                res.detail += f"; witness replays: {out.detail}"
            return res
        witness = found
    return engine.Result(policy, "bounded_wait", "cex", stop, time.monotonic() - t0, witness, bound=stop,
                         detail=f"a wait > {stop}")


def fair_wait_family(a: argparse.Namespace) -> None:
    B = fair_B(FAMILY)
    print(f"fair_wait_family: {FAMILY.describe()}, arrivals by step {FAMILY.last_arrival}, B = {B}")
    for mut in (None, "star_lora_only"):
        r = tight_wait(replace(FAMILY, mutant=mut), "fair", a.wait_start,
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
        r = budget_bmc(b, pol, "batch_lora_cap", a.budget, lemmas=pol == "fair")
        curve = " ".join(f"{k}:{sum(t for _, t in r.timings[:k]):.1f}" for k, _ in r.timings)
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
