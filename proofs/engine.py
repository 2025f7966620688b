"""BMC, k-induction and the worst-case wait over `proofs.encoding`.

Verdicts: "proved" (k-induction), "holds" (up to a BMC depth), "cex" (a
real counterexample from the initial state, replayed in `policy/`), "cti"
(the induction step failed at every k tried: a counterexample to induction
from an unreachable state, not a bug), "unknown" (Z3 gave up; `reason`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import z3
from lora_sched.proofs import encoding as enc
from lora_sched.proofs.cex import Cex, extract, replay
from lora_sched.proofs.unroll import Path

Progress = Callable[[str], None]


@dataclass
class Result:
    policy: str
    property: str
    verdict: str  # proved | holds | cex | cti | unknown
    depth: int
    seconds: float
    cex: Cex | None = None
    detail: str = ""
    reason: str = ""
    bound: int | None = None
    worst: int | None = None
    replay_ok: bool | None = None
    timings: list[tuple[int, float]] = field(default_factory=list)  # depth, seconds of its query


def solver(timeout_ms: int) -> z3.Solver:
    """A solver for the bounded encodings, on Z3's older arithmetic solver
    (`arith.solver=2`): the manifest's checks take 183 s instead of 258 s on it."""
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.set("arith.solver", 2)
    return s


def inductive_lemmas(bounds: enc.Bounds, policy: str, timeout_ms: int = 120_000) -> tuple[bool, str]:
    """Are the strengthening invariants of `encoding.invariants` (without any
    property) true initially and preserved by every step at these bounds?
    Checked by two queries: init and not Inv(s0) (unsat), Inv(s0) and one
    step and not Inv(s1) (unsat). Then they hold in every reachable state
    and BMC may assume them at every depth (`bmc(lemmas=True)`)."""
    base = Path(bounds, policy, tag="li")
    s = solver(timeout_ms)
    s.add(*base.base(), *base.init(), z3.Not(z3.And(*base.invariants(0).values())))
    if s.check() != z3.unsat:
        return False, "the invariants do not hold initially"
    st = Path(bounds, policy, tag="ls")
    s = solver(timeout_ms)
    s.add(*st.base(), *st.invariants(0).values())
    s.add(st.extend())
    inv1 = st.invariants(1)
    s.add(z3.Not(z3.And(*inv1.values())))
    r = s.check()
    if r == z3.unsat:
        return True, f"invariants {sorted(inv1)} inductive"
    if r == z3.sat:
        m = s.model()
        bad = [n for n, e in inv1.items() if not z3.is_true(m.eval(e, model_completion=True))]
        return False, f"invariants {bad} not preserved by a step"
    return False, f"inductiveness unknown ({s.reason_unknown()})"


def bmc(bounds: enc.Bounds, policy: str, prop: str, depth: int, *, bound: int | None = None,
        timeout_ms: int = 120_000, progress: Progress | None = None, lemmas: bool = False) -> Result:
    """Search depth 1..`depth` for the shortest violation of `prop`
    (incremental solver, one push/pop per depth; once a depth is clear its
    property is assumed at the deeper ones).

    `lemmas`: when `inductive_lemmas` proves the strengthening invariants
    inductive at these bounds, assume them at every depth (sound: they hold
    in every reachable state), which keeps each depth's query local and
    leaves the shortest counterexample depth unchanged."""
    t0 = time.monotonic()
    path = Path(bounds, policy)
    s = solver(timeout_ms)
    s.add(path.base())
    s.add(path.init())
    note = ""
    use_lemmas = False
    if lemmas:
        use_lemmas, note = inductive_lemmas(bounds, policy, timeout_ms)
        if use_lemmas:
            s.add(*path.invariants(0).values())
    timings: list[tuple[int, float]] = []
    for k in range(1, depth + 1):
        t1 = time.monotonic()
        s.add(path.extend())
        if use_lemmas:
            s.add(*path.invariants(k).values())
        s.push()
        s.add(z3.Not(path.prop(prop, k, bound)))
        r = s.check()
        inc = time.monotonic() - t1
        timings.append((k, inc))
        if progress:
            progress(f"  depth {k}: {r} ({inc:.2f}s)")
        if r == z3.sat:
            cex = extract(path, s.model(), k, prop, f"shortest, depth {k}", bound)
            out = replay(cex)
            return Result(policy, prop, "cex", k, time.monotonic() - t0, cex, out.detail,
                          bound=bound, replay_ok=out.reproduced, timings=timings)
        if r == z3.unknown:
            return Result(policy, prop, "unknown", k, time.monotonic() - t0, reason=s.reason_unknown(),
                          timings=timings)
        s.pop()
        s.add(path.prop(prop, k, bound))  # depth k is clear: assume it deeper down
    return Result(policy, prop, "holds", depth, time.monotonic() - t0, bound=bound, timings=timings, reason=note)


def kinduction(bounds: enc.Bounds, policy: str, prop: str, max_k: int = 3, *,
               timeout_ms: int = 120_000, progress: Progress | None = None) -> Result:
    """Prove `prop` for every depth: k-induction on P' = P and the named
    strengthening invariants of `encoding.invariants`. The base case is BMC
    of P' up to k (a violation of P there is a real counterexample); the
    step case assumes P' on k consecutive steps from an arbitrary state."""
    t0 = time.monotonic()
    base = Path(bounds, policy, tag="b")
    sb = solver(timeout_ms)
    sb.add(base.base())
    sb.add(base.init())
    cti_detail = ""
    for k in range(1, max_k + 1):
        # Base case at depth k.
        sb.add(base.extend())
        sb.push()
        inv = base.invariants(k)
        sb.add(z3.Not(z3.And(base.prop(prop, k), *inv.values())))
        r = sb.check()
        if r == z3.sat:
            m = sb.model()
            if not z3.is_true(m.eval(base.prop(prop, k), model_completion=True)):
                cex = extract(base, m, k, prop, f"base case, depth {k}")
                out = replay(cex)
                return Result(policy, prop, "cex", k, time.monotonic() - t0, cex, out.detail,
                              replay_ok=out.reproduced)
            bad = [n for n, e in inv.items() if not z3.is_true(m.eval(e, model_completion=True))]
            return Result(policy, prop, "unknown", k, time.monotonic() - t0,
                          reason=f"strengthening invariant(s) {bad} fail at depth {k}")
        if r == z3.unknown:
            return Result(policy, prop, "unknown", k, time.monotonic() - t0, reason=sb.reason_unknown())
        sb.pop()
        # Step case: k steps from an arbitrary state satisfying P'.
        step = Path(bounds, policy, tag=f"k{k}_")
        ss = solver(timeout_ms)
        ss.add(step.base())
        ss.add(*step.invariants(0).values())
        for _j in range(k):
            ss.add(step.extend())
        for j in range(1, k):
            ss.add(step.prop(prop, j), *step.invariants(j).values())
        last_inv = step.invariants(k)
        ss.add(z3.Not(z3.And(step.prop(prop, k), *last_inv.values())))
        r = ss.check()
        if progress:
            progress(f"  k={k}: base ok, step {r}")
        if r == z3.unsat:
            return Result(policy, prop, "proved", k, time.monotonic() - t0,
                          detail=f"{k}-inductive with invariants {sorted(last_inv)}")
        if r == z3.unknown:
            return Result(policy, prop, "unknown", k, time.monotonic() - t0, reason=ss.reason_unknown())
        m = ss.model()
        failing = [n for n, e in last_inv.items() if not z3.is_true(m.eval(e, model_completion=True))]
        if not z3.is_true(m.eval(step.prop(prop, k), model_completion=True)):
            failing.append(prop)
        cti_detail = f"counterexample to induction at k={k}: {failing} fail after a step from an unreachable state"
    return Result(policy, prop, "cti", max_k, time.monotonic() - t0, detail=cti_detail)


def worst_wait(bounds: enc.Bounds, policy: str, depth: int, bound: int, *, timeout_ms: int = 300_000,
               progress: Progress | None = None, expect: int | None = None) -> Result:
    """bounded_wait with an age counter (step - arrival of a never-admitted
    waiting request), arrivals up to `bounds.last_arrival`. First: can any
    request wait > bound within `depth` (cex)? If depth < last_arrival + bound,
    no request may still wait at the horizon (else "unknown"). Then the worst
    first-admission wait, by tightening: a trace with a wait >= w, then w+1, ...
    until unsat, w starting at `expect` (at 0 if no trace reaches it)."""
    t0 = time.monotonic()
    path = Path(bounds, policy)
    s = solver(timeout_ms)
    s.add(path.base())
    s.add(path.init())
    for _k in range(depth):
        s.add(path.extend())
    # One query for any step first (one unsat query is several times cheaper
    # than one per step); only when it is not unsat, the shortest
    # counterexample: the first step at which some trace has a request
    # waiting > bound (one query per step, so the depth reported does not
    # depend on which model the solver returns).
    s.push()
    s.add(z3.Or([z3.Not(path.prop("bounded_wait", k, bound)) for k in range(1, depth + 1)]))
    r = s.check()
    s.pop()
    for k in range(1, depth + 1) if r != z3.unsat else ():
        s.push()
        s.add(z3.Not(path.prop("bounded_wait", k, bound)))
        r = s.check()
        if r != z3.unsat:
            break
        s.pop()
    if r == z3.sat:
        m = s.model()
        cex = extract(path, m, k, "bounded_wait", f"a request waits > {bound}", bound)
        out = replay(cex)
        return Result(policy, "bounded_wait", "cex", k, time.monotonic() - t0, cex, out.detail,
                      bound=bound, replay_ok=out.reproduced)
    if r == z3.unknown:
        return Result(policy, "bounded_wait", "unknown", depth, time.monotonic() - t0,
                      reason=s.reason_unknown(), bound=bound)
    # Completeness of the horizon: a horizon shorter than last_arrival + bound
    # is enough when no request can still be waiting at its end (then every
    # wait is observed within it).
    complete = "horizon covers last_arrival + B"
    if bounds.last_arrival is None or depth < bounds.last_arrival + bound:
        s.push()
        s.add(z3.Or(path.states[depth].W))
        r = s.check()
        s.pop()
        if r != z3.unsat:
            return Result(policy, "bounded_wait", "unknown", depth, time.monotonic() - t0, bound=bound,
                          reason=f"horizon {depth} too short: a request can still be waiting at its end ({r})")
        complete = f"no request waits at step {depth}"
    # Iterative tightening of the worst first-admission wait.
    first_wait = []  # (condition, wait expression)
    for k in range(1, depth + 1):
        aux = path.steps[k - 1].aux
        for i in range(bounds.requests):
            first_wait.append((z3.And(aux.admitted[i], z3.Not(aux.mid.ever[i])), aux.mid.step - aux.mid.arrival[i]))
    best, witness, floor = -1, None, expect or 0
    while True:
        s.push()
        s.add(z3.Or([z3.And(c, w >= max(best + 1, floor)) for c, w in first_wait]))
        r = s.check()
        m = s.model() if r == z3.sat else None
        s.pop()
        if r == z3.unsat and floor > best + 1:  # no trace reaches `expect`: from 0
            floor = 0
            continue
        if m is None:
            break
        best = max(m.eval(w, model_completion=True).as_long() for c, w in first_wait
                   if z3.is_true(m.eval(c, model_completion=True)))
        witness = m
        if progress:
            progress(f"  worst wait >= {best}")
    if r == z3.unknown:
        return Result(policy, "bounded_wait", "unknown", depth, time.monotonic() - t0,
                      reason=s.reason_unknown(), bound=bound, worst=best)
    cex = extract(path, witness, depth, "bounded_wait", f"witness of the worst wait {best}", bound) \
        if witness is not None else None
    res = Result(policy, "bounded_wait", "proved", depth, time.monotonic() - t0, cex,
                 detail=f"worst wait {best} <= B {bound} ({complete})", bound=bound, worst=best)
    if cex is not None:
        out = replay(cex)
        res.replay_ok = max(out.waits.values(), default=-1) == best
        res.detail += f"; replayed worst wait {max(out.waits.values(), default=-1)}"
    return res


def _shape_eq(p: enc.Params, s1: enc.StateVars, s2: enc.StateVars, victim: list[z3.BoolRef]) -> z3.BoolRef:
    """s1 and s2 are equal up to an order-preserving renaming of the requests
    present (waiting or running) that maps the victim to itself: the j-th
    present request (slot order) of s1 and of s2 agree in status, adapter,
    lengths and progress; running order is slot order in both."""
    R = range(p.b.requests)
    live1 = [z3.Or(s1.W[i], s1.R[i]) for i in R]
    live2 = [z3.Or(s2.W[i], s2.R[i]) for i in R]
    pos1 = [enc._count(live1[:i]) for i in R]
    pos2 = [enc._count(live2[:i]) for i in R]
    cs = [enc._count(live1) == enc._count(live2)]
    for i in R:
        cs.append(z3.Implies(victim[i], z3.And(s1.W[i], s2.W[i])))
        for j in R:
            same = z3.And(s1.W[i] == s2.W[j], p.adapter[i] == p.adapter[j], p.prompt[i] == p.prompt[j],
                          p.max_tokens[i] == p.max_tokens[j], s1.computed[i] == s2.computed[j],
                          s1.generated[i] == s2.generated[j], z3.Implies(victim[i], victim[j]))
            cs.append(z3.Implies(z3.And(live1[i], live2[j], pos1[i] == pos2[j]), same))
        for j in range(i + 1, p.b.requests):
            for s in (s1, s2):
                cs.append(z3.Implies(z3.And(s.R[i], s.R[j]), s.admitted_at[i] <= s.admitted_at[j]))
    return z3.And(cs)


def lasso(bounds: enc.Bounds, policy: str, depth: int, *, timeout_ms: int = 120_000,
          progress: Progress | None = None) -> Result:
    """Starvation as a lasso: a path s_0 .. s_k1 .. s_k2 (k2 <= depth) with a
    victim request waiting at k1 and k2, and s_k2 equal to s_k1 up to an
    order-preserving renaming of the other requests present (the arrivals of
    k1+1..k2 replace those that left). `vllm`'s gate has no memory, so
    repeating those arrivals every k2 - k1 steps repeats the loop forever:
    the victim waits longer than any bound. No aborts, no skips. The verdict
    is "cex" with `cex.extra = {"loop": [k1, k2], "victim": id}`."""
    if policy == "fair":
        raise ValueError("lasso: fair's guard has memory (r*, victims, deadlines, cohorts) the shape does not cover")
    if bounds.general:
        raise ValueError("lasso: the shape assumes the fast path (running order = slot order, no queue keys)")
    t0 = time.monotonic()
    path = Path(bounds, policy)
    p = path.params
    s = solver(timeout_ms)
    s.add(path.base())
    s.add(path.init())
    victim = [z3.Bool(f"victim_{i}") for i in range(bounds.requests)]
    s.add(z3.PbEq([(v, 1) for v in victim], 1))
    for k in range(1, depth + 1):
        s.add(path.extend())
        s.add(*[z3.Not(a) for a in path.steps[-1].inputs.abort])
        loops = [(k1, k) for k1 in range(1, k)]
        if not loops:
            continue
        s.push()
        sel = [z3.Bool(f"loop_{k1}_{k}") for k1, _ in loops]
        for b_, (k1, k2) in zip(sel, loops, strict=True):
            s.add(z3.Implies(b_, _shape_eq(p, path.states[k1], path.states[k2], victim)))
        s.add(z3.Or(sel))
        r = s.check()
        if progress:
            progress(f"  lasso up to depth {k}: {r}")
        if r == z3.sat:
            m = s.model()
            k1, k2 = next(lp for b_, lp in zip(sel, loops, strict=True)
                          if z3.is_true(m.eval(b_, model_completion=True)))
            vi = next(i for i in range(bounds.requests) if z3.is_true(m.eval(victim[i], model_completion=True)))
            cex = extract(path, m, k2, "bounded_wait", f"lasso: step {k2} repeats step {k1}, r{vi} waiting")
            cex.extra = {"loop": [k1, k2], "victim": f"r{vi}"}
            return Result(policy, "bounded_wait", "cex", k2, time.monotonic() - t0, cex,
                          f"lasso {k1}->{k2}, victim r{vi}")
        if r == z3.unknown:
            return Result(policy, "bounded_wait", "unknown", k, time.monotonic() - t0, reason=s.reason_unknown())
        s.pop()
    return Result(policy, "bounded_wait", "holds", depth, time.monotonic() - t0, detail="no lasso")

