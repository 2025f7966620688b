"""The any-size model of `lora_sched.proofs.unbounded` against the reference,
on concrete universes: `crosscheck` sets each sort to a `z3.EnumSort` of the
requests and adapters of random runs of `policy.core.Scheduler` and asks Z3,
at every step, whether the real step is a step of the model between states
that satisfy the invariant (tests/test_proofs_unbounded.py;
docs/proofs-unbounded.md, "Bounded instance cross-checked against the
reference")."""

from __future__ import annotations

import inspect
import itertools
import random
from dataclasses import dataclass, field

import z3
from lora_sched.policy import make_gate
from lora_sched.policy.core import Scheduler
from lora_sched.policy.fair import starvation_window
from lora_sched.proofs.unbounded import Model, System
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

_ENUMS = itertools.count()  # fresh names for Z3 enumeration sorts


@dataclass
class CrossResult:
    steps: int = 0
    admissions: int = 0
    preemptions: int = 0
    skipped: int = 0
    cap_skips: int = 0  # waiting requests left by the LoRA cap or fair's guard
    drains: int = 0  # steps that began with a draining adapter (drainer)
    gate_holds: int = 0  # ... by a field gate's own rule (drainer's tolerance, timeslice's inactive, vtc's stop)
    unknown: int = 0  # steps Z3 did not decide within the timeout (not failures, not checked)
    throttled: int = 0  # steps run with the DP prefill throttle
    throttle_holds: int = 0  # waiting requests the throttle stopped the scan at
    deferred: int = 0  # running requests left unscheduled by the reference itself (budget, async, throttle)
    guard_exempt: int = 0  # fair: a victim's requests admitted while r* waits (any of its exemptions)
    failures: list[str] = field(default_factory=list)


def crosscheck(policy: str, *, runs: int = 4, requests: int = 6, adapters: int = 3, seed: int = 0,
               skip: bool = False, async_scheduling: bool = False, kv_blocks: int | None = None,
               queue: str = "fcfs", horizon: int = 14, timeout_ms: int = 20_000,
               model: Model | None = None, max_prompt: int = 3, crowd: bool = False, max_output: int = 3,
               last_arrival: int = 4) -> CrossResult:
    """Bounded instance against the reference: instantiate the sorts with the
    R requests and A+1 adapters (0 = base) of random runs of
    `policy.core.Scheduler` (`z3.EnumSort`) and check at every step that the
    concrete step (arrivals, aborts, scheduled, preempted, admitted, finished,
    tokens, pre- and post-state) is a step of the model from a state that
    satisfies the invariant, to a state that satisfies it again. The
    abstraction: the pre-state's clock is the previous step (events of a step
    without a `schedule()` call belong to the next pre-state); pre-state ghosts number the running requests and their
    adapters in running order (timeslice: its active adapters in list
    order); r* is fair's guard's r* while it is waiting; max_tokens, prompt
    tokens and generated tokens, and the field gates' state (drainer's
    draining adapters, timeslice's active set, vtc's counters, before and
    after) are pinned from the reference; everything the model leaves free
    (scan order, cap sets, post ghosts, drainer's `rem`, vtc's visit
    counters) is found by Z3. Arrivals are in steps 1..`last_arrival`,
    outputs 1..`max_output` tokens. `model` replaces the model matching
    `policy` (to show that a wrong model is caught); `crowd` draws one slot,
    two seats, two adapters, S 1..2, arrivals at steps 1-2 and outputs 1 or
    3, where fair's victims have queues (drain admissions; cohort ones on some
    seeds). A
    failure means the model excludes a real behaviour (the
    over-approximation would be unsound) or the invariant is false on a
    reachable state."""
    rng = random.Random(seed)
    ids = [f"r{i}" for i in range(requests)]
    k = next(_ENUMS)  # Z3 enumeration sorts and their elements need fresh names
    req_sort, reqs = z3.EnumSort(f"CReq{k}", [f"{x}_{k}" for x in ids])
    ad_sort, ads = z3.EnumSort(f"CAd{k}", [f"a{i}_{k}" for i in range(adapters + 1)])
    throttle_kw = "throttle" in inspect.signature(Scheduler.step).parameters
    m = model if model is not None else Model(policy, skip)
    sy = System(m, req_sort, ad_sort)
    g = sy.g
    inv0 = sy.inv(sy.s0)
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(g.axioms() + [g.base == ads[0]] + sy.trans() + list(inv0.values()) + list(sy.inv(sy.s1).values()))
    out = CrossResult()
    for n in range(runs):
        cfg = Config(max_loras=1 if crowd else rng.randint(1, 2), max_num_seqs=2 if crowd else rng.randint(1, 4),
                     max_num_batched_tokens=rng.randint(1, 8), kv_blocks=kv_blocks, block_size=2,
                     queue=queue, async_scheduling=async_scheduling, policy=policy,
                     starvation_steps=rng.randint(1, 2) if crowd else rng.randint(0, 2))
        sched = Scheduler(cfg, make_gate(policy))
        arrivals = sorted(rng.randint(1, 2 if crowd else last_arrival) for _ in ids)
        lo, hi = (1, 2) if crowd else (0, adapters)
        wl = [Request(ids[i], rng.randint(lo, hi), rng.randint(1, max_prompt),
                      rng.choice((1, 3)) if crowd else rng.randint(1, max_output), arrivals[i],
                      priority=rng.randint(0, 1) if queue == "priority" else 0) for i in range(requests)]
        for step in range(1, horizon + 1):
            before = _snapshot(sched)
            guard = getattr(sched.gate, "guard", None)
            star0 = getattr(guard, "star", None)
            arrive = [r for r in wl if r.arrival == step]
            for r in arrive:
                sched.add(r)
            abort = {r for r in sched.state.waiting + sched.state.running if rng.random() < 0.05}
            for r in abort:
                sched.abort(r)
            if not (sched.state.waiting or sched.state.running):
                continue  # the driver does not call schedule(); the next pre-state includes these events
            skips = frozenset(r for r in sched.state.running if skip and rng.random() < 0.3)
            if skip and throttle_kw and rng.random() < 0.3:
                rec = sched.step(step, skips, throttle=True)  # DP prefill throttle (where the reference has it)
                out.throttled += 1
                out.throttle_holds += sum(1 for why in rec.holds.values() if why == "throttle")
            else:
                rec = sched.step(step, skips)
            out.deferred += sum(1 for r in rec.running if r not in rec.scheduled and r not in skips
                                and r not in rec.preempted)
            after = _snapshot(sched)
            solver.push()
            solver.add(_pins(sy, reqs, ads, wl, before, after, cfg, step, rec, {r.id for r in arrive}, abort))
            res = solver.check()
            solver.pop()
            out.steps += 1
            out.admissions += len(rec.admitted)
            guard = getattr(sched.gate, "guard", None)
            if star0 is not None and getattr(guard, "star", None) == star0:
                out.guard_exempt += sum(1 for r in rec.admitted if sched.state.adapter(r) in guard.victims)
            out.preemptions += len(rec.preempted)
            out.skipped += len(skips)
            out.cap_skips += sum(1 for why in rec.holds.values() if why in ("lora_cap", "lora_stop", "fair_guard"))
            out.drains += bool(before.get("drain"))
            out.gate_holds += sum(1 for why in rec.holds.values() if why in ("drainer", "timeslice", "vtc_stop"))
            if res == z3.unknown:
                out.unknown += 1
                continue
            if res != z3.sat:
                core = _core(sy, _pins(sy, reqs, ads, wl, before, after, cfg, step, rec,
                                       {r.id for r in arrive}, abort), ads[0], timeout_ms) if res == z3.unsat else ""
                out.failures.append(f"run {n} step {step}: {res}; {cfg}; record {rec.to_json()}; "
                                    f"before {before['waiting']}/{before['running']}; core {core}")
                break
    return out


def _core(sy: System, pins: list[z3.BoolRef], base: z3.ExprRef, timeout_ms: int) -> list[str]:
    """Names of the invariants and transition axioms in an unsat core (diagnostics)."""
    sv = z3.Solver()
    sv.set("timeout", timeout_ms)
    sv.add(sy.g.axioms() + [sy.g.base == base] + pins)
    named: dict[str, z3.BoolRef] = {}
    for n, f in sy.inv(sy.s0).items():
        named[f"inv0:{n}"] = f
    for n, f in sy.inv(sy.s1).items():
        named[f"inv1:{n}"] = f
    for i, f in enumerate(sy.trans()):
        named[f"trans{i}:{str(f)[:80]}"] = f
    for n, f in named.items():
        sv.assert_and_track(f, z3.Bool(n))
    if sv.check() != z3.unsat:
        return ["(no core)"]
    return sorted(str(c) for c in sv.unsat_core())


def _snapshot(sched: object) -> dict:
    st = sched.state  # type: ignore[attr-defined]
    guard = getattr(getattr(sched, "gate", None), "guard", None)
    return {"step": st.step, "waiting": list(st.waiting), "running": list(st.running),
            "finished": set(st.finished), "aborted": set(st.aborted),
            "ever": {r for r, rs in st.reqs.items() if rs.first_admitted is not None},
            "ws": {r: rs.waiting_since for r, rs in st.reqs.items()},
            "arr": {r: rs.req.arrival for r, rs in st.reqs.items()},
            "seq": {r: rs.seq for r, rs in st.reqs.items()},
            "adapter": {r: rs.req.adapter for r, rs in st.reqs.items()},
            "star": getattr(guard, "star", None),
            "gen": {r: rs.generated for r, rs in st.reqs.items()},
            **_gate_snapshot(getattr(sched, "gate", None))}


def _gate_snapshot(gate: object) -> dict:
    """The field's gates' state: drainer's draining adapters, timeslice's
    active adapters (in its list order), vtc's counters."""
    out: dict = {}
    if hasattr(gate, "stats") and getattr(gate, "name", "") == "drainer":
        out["drain"] = {a for a, s in gate.stats.items() if s.draining_for is not None}  # type: ignore[attr-defined]
    if getattr(gate, "name", "") == "timeslice":
        out["active"] = list(gate.active)  # type: ignore[attr-defined]
    if getattr(gate, "name", "") == "vtc":
        out["served"] = dict(gate.served)  # type: ignore[attr-defined]
    return out


def _pins(sy: System, reqs: list, ads: list, wl: list, before: dict, after: dict, cfg: object, step: int,
          rec: object, arrived_now: set[str], aborted_now: set[str]) -> list[z3.BoolRef]:
    """Equalities fixing the concrete structure of one reference step."""
    g, st, s0, s1 = sy.g, sy.step, sy.s0, sy.s1
    c = cfg
    cs: list[z3.BoolRef] = [g.M == c.max_loras, g.N == c.max_num_seqs,  # type: ignore[attr-defined]
                            g.T == c.max_num_batched_tokens,  # type: ignore
                            g.S == (starvation_window(c) if c.policy == "fair" else c.starvation_steps),  # type: ignore
                            s0.step == step - 1, st.t == step, s1.step == step]
    scheduled = dict(rec.scheduled)  # type: ignore[attr-defined]
    admitted = set(rec.admitted)  # type: ignore[attr-defined]
    preempted = set(rec.preempted)  # type: ignore[attr-defined]
    finished = after["finished"] - before["finished"]  # async: the previous step's output lands now
    slots: dict[int, int] = {}
    if "active" in before:  # timeslice: the ghost slot numbers the active adapters
        slots = {a: i for i, a in enumerate(before["active"])}
    for r in before["running"]:
        a = before["adapter"][r]
        if a > 0 and a not in slots:
            slots[a] = len(slots)
    seats = {r: i for i, r in enumerate(before["running"])}
    for i, r in enumerate(wl):
        e = reqs[i]
        cs += [g.adapter(e) == ads[r.adapter], g.prio(e) == r.priority,
               g.seq(e) == after["seq"].get(r.id, 1000 + i), g.mt(e) == r.max_tokens, g.prompt(e) == r.prompt_tokens]
        for snap, s in ((before, s0), (after, s1)):
            arrived = r.id in snap["adapter"]
            cs += [s.arrived(e) == arrived, s.W(e) == (r.id in snap["waiting"]),
                   s.R(e) == (r.id in snap["running"]), s.F(e) == (r.id in snap["finished"]),
                   s.X(e) == (r.id in snap["aborted"]), s.ever(e) == (r.id in snap["ever"]),
                   s.star(e) == (snap["star"] == r.id and r.id in snap["waiting"])]
            if arrived:
                cs += [s.ws(e) == snap["ws"][r.id], s.arr(e) == snap["arr"][r.id], s.gen(e) == snap["gen"][r.id]]
        if r.id in seats:
            cs.append(s0.seat(e) == seats[r.id])
        cs += [st.arrive(e) == (r.id in arrived_now), st.abort(e) == (r.id in aborted_now),
               st.adm(e) == (r.id in admitted), st.preempt(e) == (r.id in preempted),
               st.sched(e) == (r.id in scheduled and r.id not in admitted), st.fin(e) == (r.id in finished)]
        if r.id in scheduled:
            cs.append(st.tok(e) == scheduled[r.id])
    cs += [s0.slot(ads[a]) == k for a, k in slots.items()]
    for snap, s in ((before, s0), (after, s1)):  # the field's gates' state, pinned
        for a in range(len(ads)):
            if "drain" in snap:
                cs.append(s.drain(ads[a]) == (a in snap["drain"]))
            if "active" in snap:
                cs.append(s.act(ads[a]) == (a in snap["active"]))
            if "served" in snap:
                cs.append(s.cnt(ads[a]) == int(snap["served"].get(a, 0)))
    return cs
