"""Safety for ANY number of requests and adapters: an inductive invariant
over uninterpreted sorts, checked by Z3 with quantifiers (mypyvy / Ivy style).

`Req` and `Adapter` are uninterpreted sorts; the config values are symbolic.
Obligations `init ⇒ Inv`, `Inv ∧ step ⇒ Inv'`, `Inv ∧ step ⇒ P`, one unsat
check each (`check_all`). The step over-approximates `policy.core.Scheduler`.
Non-vacuity: `VACUOUS_MUTANT`, `TRACES`, `MUTANTS`; soundness: `crosscheck`
(tests/unbounded_crosscheck.py). The vocabulary, the step, the gates' rules
and why the abstraction is sound: docs/proofs-unbounded.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import z3
from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.proofs import engine
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

POLICIES = ("vllm", "fair", "blocking", "drainer", "timeslice", "vtc")
FIELD = ("drainer", "timeslice", "vtc")  # the field's reference gates (policy/drainer.py, timeslice.py, vtc.py)
PROPERTIES = ("running_lora_cap", "batch_lora_cap", "capacity", "conservation", "fifo_within_adapter")
CAP_PROPERTIES = ("running_lora_cap", "batch_lora_cap")


@dataclass(frozen=True)
class Model:
    """One transition system: a policy, whether running requests may be left
    unscheduled while the scan runs, an optional planted bug, and the vLLM
    release whose cap set the scan starts from (`spec.releases`: 0.32 the
    scheduled running requests, 0.33 every running one)."""

    policy: str
    skip: bool = False
    mutant: str | None = None
    release: str = releases.LEGACY

    @property
    def label(self) -> str:
        return (f"{self.policy}{'+skip' if self.skip else ''}{'[' + self.mutant + ']' if self.mutant else ''}"
                f"{'@' + self.release if self.release != releases.LEGACY else ''}")

    @property
    def counts_running(self) -> bool:
        """Does the scan's cap set start from every running request (fair's own, or the release's)?"""
        return self.policy == "fair" or releases.get(self.release).cap_counts == "running"


# Planted bugs: name -> (what it changes, the properties that must catch it).
MUTANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cap_off_by_one": ("a new adapter may take slot M: the gate admits one adapter with |C| = M",
                       CAP_PROPERTIES),
    "cap_set_forgets_admitted": ("adapters admitted in the scan do not join the cap set", CAP_PROPERTIES),
    "fair_scheduled_set": ("fair counts only scheduled running requests in C0 (vLLM's set)", ("running_lora_cap",)),
    "seat_off_by_one": ("an admitted request may take seat N", ("capacity",)),
    "budget_off_by_one": ("a request may get one token more than the budget left", ("capacity",)),
    "preempted_stay_running": ("a preempted request goes back to waiting but stays running", ("conservation",)),
    "scan_order_free": ("the scan may visit never-admitted requests out of seq order", ("fifo_within_adapter",)),
    "star_not_oldest": ("fair's fresh r* need not be the oldest of its adapter", ("fifo_within_adapter",)),
    "evict_in_use": ("timeslice may deactivate an adapter that has a running request", CAP_PROPERTIES),
    "vtc_order_free": ("vtc's scan need not keep an adapter's queue in order (the counter order alone)",
                       ("fifo_within_adapter",)),
    "hold_any": ("fair's guard may hold any requests, not a tail of an adapter's queue", ("fifo_within_adapter",)),
}
# A planted bug that makes the caps hold vacuously: no request of a new adapter
# is ever admitted. The proofs still go through; the non-vacuity check of
# `prove` (a new adapter joins a running one) must fail.
VACUOUS_MUTANT = "gate_never_opens"


class Sig:
    """Sorts and rigid symbols (the same in every state)."""

    def __init__(self, req: z3.SortRef, ad: z3.SortRef) -> None:
        self.req, self.ad = req, ad
        self.adapter = z3.Function("adapter", req, ad)
        self.base = z3.Const("base", ad)
        self.prio = z3.Function("prio", req, z3.IntSort())
        self.seq = z3.Function("seq", req, z3.IntSort())
        self.mt = z3.Function("max_tokens", req, z3.IntSort())  # drainer's tolerance
        self.prompt = z3.Function("prompt_tokens", req, z3.IntSort())  # vtc's input charge
        self.M, self.N, self.T, self.S = z3.Ints("max_loras max_num_seqs max_num_batched_tokens starvation_steps")

    def axioms(self) -> list[z3.BoolRef]:
        return [self.M >= 1, self.N >= 1, self.T >= 1, self.S >= 0]

    def lora(self, r: z3.ExprRef) -> z3.BoolRef:
        return self.adapter(r) != self.base

    def r(self, name: str) -> z3.ExprRef:
        return z3.Const(name, self.req)

    def a(self, name: str) -> z3.ExprRef:
        return z3.Const(name, self.ad)


def _fa(vs: list[z3.ExprRef], body: z3.BoolRef) -> z3.BoolRef:
    return z3.ForAll(vs, body)


class State:
    """The state vocabulary, one copy per tag."""

    def __init__(self, g: Sig, tag: str) -> None:
        B, Z = z3.BoolSort(), z3.IntSort()

        def pred(n: str) -> z3.FuncDeclRef:
            return z3.Function(f"{n}@{tag}", g.req, B)

        self.arrived, self.W, self.R, self.F, self.X = (pred(n) for n in ("arrived", "W", "R", "F", "X"))
        self.ever, self.star = pred("ever"), pred("star")
        self.ws = z3.Function(f"ws@{tag}", g.req, Z)
        self.arr = z3.Function(f"arr@{tag}", g.req, Z)
        self.seat = z3.Function(f"seat@{tag}", g.req, Z)
        self.slot = z3.Function(f"slot@{tag}", g.ad, Z)
        self.step = z3.Int(f"step@{tag}")
        # the field's gates: output tokens generated (drainer's remaining work),
        # drainer's draining set, timeslice's active set, vtc's virtual counters
        self.gen = z3.Function(f"gen@{tag}", g.req, Z)
        self.drain = z3.Function(f"drain@{tag}", g.ad, B)
        self.act = z3.Function(f"act@{tag}", g.ad, B)
        self.cnt = z3.Function(f"cnt@{tag}", g.ad, Z)


def init(g: Sig, s: State) -> z3.BoolRef:
    """The empty scheduler before step 1 (ghosts arbitrary): no adapter
    drains or is active, every virtual counter is 0."""
    r, a = g.r("r"), g.a("a")
    return z3.And(s.step == 0, _fa([r], z3.And(*[z3.Not(p(r)) for p in (s.arrived, s.W, s.R, s.F, s.X,
                                                                       s.ever, s.star)])),
                  _fa([a], z3.And(z3.Not(s.drain(a)), z3.Not(s.act(a)), s.cnt(a) == 0)))


def _injective(g: Sig, member: Callable[[z3.ExprRef], z3.BoolRef], val: Callable[[z3.ExprRef], z3.ArithRef],
               key: Callable[[z3.ExprRef], z3.ExprRef], bound: z3.ArithRef) -> z3.BoolRef:
    """`val` maps the members into [0, bound) and is injective on their keys."""
    r1, r2 = g.r("r1"), g.r("r2")
    return z3.And(
        _fa([r1], z3.Implies(member(r1), z3.And(val(r1) >= 0, val(r1) < bound))),
        _fa([r1, r2], z3.Implies(z3.And(member(r1), member(r2), val(r1) == val(r2)), key(r1) == key(r2))))


def slots_ok(g: Sig, member: Callable[[z3.ExprRef], z3.BoolRef], slot: z3.FuncDeclRef) -> z3.BoolRef:
    """At most M distinct adapters (> 0) among the members: `slot` injects them into {0..M-1}."""
    def lora_member(r: z3.ExprRef) -> z3.BoolRef:
        return z3.And(member(r), g.lora(r))
    return _injective(g, lora_member, lambda r: slot(g.adapter(r)), g.adapter, g.M)


def seats_ok(g: Sig, member: Callable[[z3.ExprRef], z3.BoolRef], seat: z3.FuncDeclRef) -> z3.BoolRef:
    """At most N members: `seat` injects them into {0..N-1}."""
    return _injective(g, member, seat, lambda r: r, g.N)


def active_ok(g: Sig, act: z3.FuncDeclRef, slot: z3.FuncDeclRef) -> z3.BoolRef:
    """timeslice: at most M active adapters (> 0): `slot` injects them into {0..M-1}."""
    a1, a2 = g.a("a1"), g.a("a2")
    return z3.And(
        _fa([a1], z3.Implies(act(a1), z3.And(a1 != g.base, slot(a1) >= 0, slot(a1) < g.M))),
        _fa([a1, a2], z3.Implies(z3.And(act(a1), act(a2), slot(a1) == slot(a2)), a1 == a2)))


def _same_key(g: Sig, r1: z3.ExprRef, r2: z3.ExprRef) -> z3.BoolRef:
    return z3.And(g.adapter(r1) == g.adapter(r2), g.prio(r1) == g.prio(r2))


def invariants(g: Sig, s: State, m: Model) -> dict[str, z3.BoolRef]:
    """The inductive invariant, one named ∀-formula per conjunct (partition,
    unarrived, times, seats, slots / active_running, fifo_state, star_first);
    each in English: docs/proofs-unbounded.md, "Invariants"."""
    r, r1, r2 = g.r("r"), g.r("r1"), g.r("r2")
    inv: dict[str, z3.BoolRef] = {}
    inv["partition"] = _fa([r], z3.And(s.arrived(r) == z3.Or(s.W(r), s.R(r), s.F(r), s.X(r)),
                                       z3.AtMost(s.W(r), s.R(r), s.F(r), s.X(r), 1)))
    inv["unarrived"] = z3.And(
        _fa([r], z3.Implies(z3.Not(s.arrived(r)), z3.And(z3.Not(s.ever(r)), z3.Not(s.star(r))))),
        _fa([r1, r2], z3.Implies(z3.And(s.arrived(r1), z3.Not(s.arrived(r2))), g.seq(r1) < g.seq(r2))))
    inv["times"] = z3.And(
        s.step >= 0,
        _fa([r], z3.Implies(s.arrived(r), z3.And(s.arr(r) >= 1, s.arr(r) <= s.ws(r), s.ws(r) <= s.step))),
        _fa([r1, r2], z3.Implies(z3.And(s.arrived(r1), s.arrived(r2), g.seq(r1) < g.seq(r2)),
                                 s.arr(r1) <= s.arr(r2))),
        _fa([r], z3.Implies(z3.And(s.W(r), z3.Not(s.ever(r))), s.ws(r) == s.arr(r))),
        _fa([r], z3.Implies(s.R(r), s.ever(r))))
    inv["seats"] = seats_ok(g, s.R, s.seat)
    if m.policy == "timeslice":
        inv["slots"] = active_ok(g, s.act, s.slot)
        inv["active_running"] = _fa([r], z3.Implies(z3.And(s.R(r), g.lora(r)), s.act(g.adapter(r))))
    elif m.counts_running or not m.skip:
        inv["slots"] = slots_ok(g, s.R, s.slot)
    if m.policy != "drainer":
        inv["fifo_state"] = _fa([r1, r2], z3.Implies(
            z3.And(s.ever(r1), s.W(r2), z3.Not(s.ever(r2)), _same_key(g, r1, r2)), z3.Not(g.seq(r2) < g.seq(r1))))
    if m.policy == "fair":
        inv["star_first"] = _fa([r1, r2], z3.Implies(
            z3.And(s.star(r1), s.W(r1), z3.Not(s.ever(r1)), s.W(r2), z3.Not(s.ever(r2)), _same_key(g, r1, r2)),
            z3.Not(g.seq(r2) < g.seq(r1))))
    return inv


@dataclass
class Step:
    """Transition-local symbols of one step from `pre` to `post` and the
    derived sets (Python functions building terms)."""

    g: Sig
    pre: State
    post: State
    m: Model
    tag: str
    syms: dict[str, z3.ExprRef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        g, t = self.g, self.tag
        B, Z = z3.BoolSort(), z3.IntSort()
        for n in ("arrive", "abort", "sched", "preempt", "adm", "fin", "star_s", "stop", "full"):
            self.syms[n] = z3.Function(f"{n}#{t}", g.req, B)
        for n in ("tok", "before"):
            self.syms[n] = z3.Function(f"{n}#{t}", g.req, Z)
        for n in ("C0", "D", "A"):  # D: drainer's draining set, A: timeslice's active set (this scan)
            self.syms[n] = z3.Function(f"{n}#{t}", g.ad, B)
        self.syms["H"] = z3.Function(f"H#{t}", g.req, B)  # fair: the guard holds this request
        self.syms["rem"] = z3.Function(f"rem#{t}", g.ad, Z)  # drainer: max remaining output of D's adapters
        self.syms["vc"] = z3.Function(f"vc#{t}", g.req, Z)  # vtc: the counter of r's adapter when visited
        self.syms["starve"] = z3.Bool(f"starve#{t}")  # drainer: some waiting request waited > S
        self.syms["keep"] = z3.Bool(f"keep#{t}")  # drainer: a step without a scan keeps the draining set
        self.syms["ahead"] = z3.Function(f"ahead#{t}", g.req, g.req, B)
        self.syms["so"] = z3.Function(f"so#{t}", g.req, g.req, B)
        self.syms["Cb"] = z3.Function(f"Cb#{t}", g.req, g.ad, B)
        self.syms["h"] = z3.Bool(f"h#{t}")
        self.syms["noscan"] = z3.Bool(f"noscan#{t}")
        self.syms["t"] = z3.Int(f"t#{t}")

    def __getattr__(self, name: str) -> z3.ExprRef:
        syms = self.__dict__.get("syms", {})
        if name in syms:
            return syms[name]
        raise AttributeError(name)

    # derived sets
    def W1(self, r: z3.ExprRef) -> z3.BoolRef:
        return z3.And(z3.Or(self.pre_.W(r), self.arrive(r)), z3.Not(self.abort(r)))

    def R1(self, r: z3.ExprRef) -> z3.BoolRef:
        return z3.And(self.pre_.R(r), z3.Not(self.abort(r)))

    def R2(self, r: z3.ExprRef) -> z3.BoolRef:
        if self.m.mutant == "preempted_stay_running":
            return self.R1(r)
        return z3.And(self.R1(r), z3.Not(self.preempt(r)))

    def W2(self, r: z3.ExprRef) -> z3.BoolRef:
        return z3.Or(z3.And(self.W1(r), z3.Not(self.adm(r))), self.preempt(r))

    def R3(self, r: z3.ExprRef) -> z3.BoolRef:
        """Running once the step is scheduled (before the model output)."""
        return z3.Or(self.R2(r), self.adm(r))

    def Xs(self, r: z3.ExprRef) -> z3.BoolRef:
        """Scheduled in this step (running phase or admitted)."""
        return z3.Or(self.sched(r), self.adm(r))

    def ws1(self, r: z3.ExprRef) -> z3.ArithRef:
        return z3.If(self.arrive(r), self.t, self.pre_.ws(r))

    def new(self, r: z3.ExprRef) -> z3.BoolRef:
        """r is admitted and brings a new adapter into the scan's cap set."""
        g = self.g
        return z3.And(self.adm(r), g.lora(r), z3.Not(self.Cb(r, g.adapter(r))))

    def capb(self, r: z3.ExprRef) -> z3.BoolRef:
        g = self.g
        return z3.And(g.lora(r), z3.Not(self.Cb(r, g.adapter(r))), self.full(r))

    def hold(self, r: z3.ExprRef) -> z3.BoolRef:
        return z3.And(self.H(r), self.h, z3.Not(self.star_s(r)))

    def left(self, r: z3.ExprRef) -> z3.ArithRef:
        """drainer: output tokens r has still to produce (`max_tokens - generated`)."""
        return self.g.mt(r) - self.pre_.gen(r)

    def drain_hold(self, r: z3.ExprRef) -> z3.BoolRef:
        """drainer's `can_schedule` refuses r: its adapter drains and r's
        max_tokens exceeds 1.2x the adapter's remaining tokens (5 mt > 6 rem,
        exact; equal to SGLang's float test for every value up to 300)."""
        g = self.g
        return z3.And(g.lora(r), self.D(g.adapter(r)), 5 * g.mt(r) > 6 * self.rem(g.adapter(r)))

    def inactive(self, r: z3.ExprRef) -> z3.BoolRef:
        """timeslice skips r: its adapter is not active in this scan."""
        return z3.And(self.g.lora(r), z3.Not(self.A(self.g.adapter(r))))

    @property
    def pre_(self) -> State:
        return self.pre

    def c0_base(self, r: z3.ExprRef) -> z3.BoolRef:
        """The running requests whose adapters form the scan's initial cap set."""
        if self.m.counts_running and self.m.mutant != "fair_scheduled_set":
            return self.R2(r)
        return self.sched(r)


def transition(g: Sig, st: Step) -> list[z3.BoolRef]:
    """The step relation (see the module docstring), as a list of axioms."""
    s, p, m = st.pre, st.post, st.m
    r, r1, r2, r3 = g.r("r"), g.r("r1"), g.r("r2"), g.r("r3")
    a = g.a("a")
    t = st.t
    fair = m.policy == "fair"
    cs: list[z3.BoolRef] = [t >= s.step + 1]
    # events
    cs += [
        _fa([r], z3.Implies(st.arrive(r), z3.Not(s.arrived(r)))),
        _fa([r1, r2], z3.Implies(z3.And(st.arrive(r1), z3.Not(s.arrived(r2)), z3.Not(st.arrive(r2))),
                                 g.seq(r1) < g.seq(r2))),
        _fa([r], z3.Implies(st.abort(r), z3.Or(s.W(r), s.R(r), st.arrive(r)))),
    ]
    # running phase
    cs += [
        _fa([r], z3.Implies(z3.Or(st.sched(r), st.preempt(r)), st.R1(r))),
        _fa([r], z3.Not(z3.And(st.sched(r), st.preempt(r)))),
        _fa([r], z3.Implies(st.preempt(r), st.noscan)),
        _fa([r], z3.Implies(z3.And(st.noscan, st.W1(r)), st.stop(r))),
    ]
    if not m.skip:
        cs.append(_fa([r], z3.Implies(z3.And(st.R1(r), z3.Not(st.sched(r)), z3.Not(st.preempt(r))), st.noscan)))
    # the scan order
    cs += [
        _fa([r], z3.Not(st.ahead(r, r))),
        _fa([r1, r2, r3], z3.Implies(z3.And(st.ahead(r1, r2), st.ahead(r2, r3)), st.ahead(r1, r3))),
        _fa([r1, r2], z3.Implies(z3.And(st.W1(r1), st.W1(r2), r1 != r2),
                                 z3.Or(st.ahead(r1, r2), st.ahead(r2, r1)))),
    ]
    # timeslice and vtc visit per-adapter queues (each in queue order), merged
    # by their own rule: the queue order binds only requests of one adapter.
    per_adapter = m.policy in ("timeslice", "vtc")
    if m.mutant not in ("scan_order_free", "vtc_order_free"):
        cs.append(_fa([r1, r2], z3.Implies(
            z3.And(st.W1(r1), st.W1(r2), z3.Not(s.ever(r1)), z3.Not(s.ever(r2)), g.prio(r1) == g.prio(r2),
                   g.seq(r1) < g.seq(r2), z3.Not(st.star_s(r2)),
                   *([g.adapter(r1) == g.adapter(r2)] if per_adapter else [])),
            st.ahead(r1, r2))))
    if fair and m.mutant != "hold_any":
        # fair's holds pass down a queue: a held never-admitted request holds every
        # later one of its adapter and priority.
        cs.append(_fa([r1, r2], z3.Implies(z3.And(st.H(r1), z3.Not(s.ever(r1)), st.ahead(r1, r2),
                                                  _same_key(g, r1, r2)), st.H(r2))))
    # monotone scan flags
    cs += [
        _fa([r1, r2], z3.Implies(z3.And(st.stop(r1), st.ahead(r1, r2)), st.stop(r2))),
        _fa([r1, r2], z3.Implies(z3.And(st.full(r1), st.ahead(r1, r2)), st.full(r2))),
        _fa([r], z3.Implies(st.new(r), z3.Not(st.full(r)))),
    ]
    # the initial cap set C0 and its growth Cb
    cs += [
        _fa([r], z3.Implies(z3.And(st.c0_base(r), g.lora(r)), st.C0(g.adapter(r)))),
        _fa([a], z3.Implies(st.C0(a), z3.And(a != g.base, z3.Exists([r], z3.And(st.c0_base(r),
                                                                                  g.adapter(r) == a))))),
        _fa([r, a], z3.Implies(z3.And(st.W1(r), st.C0(a)), st.Cb(r, a))),
        _fa([r, a], z3.Implies(st.Cb(r, a), z3.Or(st.C0(a), z3.Exists([r1], z3.And(
            st.new(r1), g.adapter(r1) == a, st.ahead(r1, r)))))),
    ]
    if m.mutant == VACUOUS_MUTANT:
        cs.append(_fa([r], z3.Not(st.new(r))))
    if m.mutant != "cap_set_forgets_admitted":
        cs.append(_fa([r1, r2], z3.Implies(z3.And(st.adm(r1), g.lora(r1), st.ahead(r1, r2), st.W1(r2)),
                                           st.Cb(r2, g.adapter(r1)))))
    # admission and the reasons for leaving a request waiting
    capb = st.capb(r)
    allowed = [st.W1(r), z3.Not(st.stop(r)), z3.Not(capb)]
    if fair:
        allowed.append(z3.Not(st.hold(r)))
    if m.policy == "drainer":
        allowed.append(z3.Not(st.drain_hold(r)))
    if m.policy == "timeslice":
        allowed.append(z3.Not(st.inactive(r)))
    cs.append(_fa([r], z3.Implies(st.adm(r), z3.And(*allowed))))
    reasons = [st.stop(r), s.ever(r)]  # a stop; stale async output (only after an admission)
    if m.policy == "vllm":
        reasons.append(capb)
    elif fair:
        reasons += [capb, st.hold(r)]
    elif m.policy == "drainer":  # can_schedule's skip, then vLLM's cap skip
        reasons += [capb, st.drain_hold(r)]
    elif m.policy == "timeslice":  # an inactive adapter's request, then vLLM's cap skip
        reasons += [capb, st.inactive(r)]
    else:  # blocking, vtc: a cap-blocked request stops the scan
        cs.append(_fa([r], z3.Implies(z3.And(st.W1(r), capb), st.stop(r))))
    cs += _field_rules(g, st)
    cs.append(_fa([r], z3.Implies(z3.And(st.W1(r), z3.Not(st.adm(r))), z3.Or(*reasons))))
    # fair's r*: sticky, or a fresh waiting request that has waited S and is
    # the oldest (waiting_since, seq) of its priority and adapter.
    if fair:
        older = z3.Or(st.ws1(r) < st.ws1(r2), z3.And(st.ws1(r) == st.ws1(r2), g.seq(r) <= g.seq(r2)))
        fresh = [st.W1(r), t - st.ws1(r) >= g.S]
        if m.mutant != "star_not_oldest":
            fresh.append(_fa([r2], z3.Implies(
                z3.And(z3.Not(s.ever(r)), st.W1(r2), z3.Not(s.ever(r2)), _same_key(g, r, r2),
                       t - st.ws1(r2) >= g.S), older)))
        cs += [
            _fa([r], z3.Implies(z3.And(st.star_s(r), s.star(r)), st.W1(r))),
            _fa([r], z3.Implies(z3.And(st.star_s(r), z3.Not(s.star(r))), z3.And(*fresh))),
            _fa([r1, r2], z3.Implies(z3.And(st.star_s(r1), st.star_s(r2)), r1 == r2)),
            _fa([r], p.star(r) == z3.And(st.star_s(r), p.W(r))),  # kept until admitted (or gone)
        ]
    else:
        cs += [_fa([r], z3.Not(st.star_s(r))), _fa([r], p.star(r) == s.star(r))]
    # ghost LoRA slots: kept by running adapters, a free one in [0, M) for a new adapter
    # (timeslice: kept by active adapters, a free one for a newly activated adapter)
    hi = g.M + 1 if m.mutant == "cap_off_by_one" else g.M
    if m.policy == "timeslice":
        a2 = g.a("a2")
        cs += [
            _fa([a], z3.Implies(z3.And(st.A(a), s.act(a)), p.slot(a) == s.slot(a))),
            _fa([a], z3.Implies(z3.And(st.A(a), z3.Not(s.act(a))), z3.And(p.slot(a) >= 0, p.slot(a) < hi))),
            _fa([a, a2], z3.Implies(z3.And(st.A(a), z3.Not(s.act(a)), st.A(a2), a2 != a),
                                    p.slot(a2) != p.slot(a))),
        ]
    else:
        cs += [
            _fa([r], z3.Implies(z3.And(st.R2(r), g.lora(r)), p.slot(g.adapter(r)) == s.slot(g.adapter(r)))),
            _fa([r], z3.Implies(st.new(r), z3.And(p.slot(g.adapter(r)) >= 0, p.slot(g.adapter(r)) < hi))),
            _fa([r, a], z3.Implies(z3.And(st.new(r), st.Cb(r, a)), p.slot(a) != p.slot(g.adapter(r)))),
        ]
    # ghost seats: kept by running requests, a free one in [0, N) for an admitted one
    nhi = g.N + 1 if m.mutant == "seat_off_by_one" else g.N
    cs += [
        _fa([r], z3.Implies(st.R2(r), p.seat(r) == s.seat(r))),
        _fa([r], z3.Implies(st.adm(r), z3.And(p.seat(r) >= 0, p.seat(r) < nhi))),
        _fa([r, r2], z3.Implies(z3.And(st.adm(r), z3.Or(st.R2(r2), z3.And(st.adm(r2), st.ahead(r2, r)))),
                                p.seat(r2) != p.seat(r))),
    ]
    # token budget: prefix sums in scheduling order `so`
    room = g.T - st.before(r) + (1 if m.mutant == "budget_off_by_one" else 0)
    cs += [
        _fa([r], z3.Implies(st.Xs(r), z3.And(st.tok(r) >= 1, st.before(r) >= 0, st.tok(r) <= room))),
        _fa([r], z3.Not(st.so(r, r))),
        _fa([r1, r2, r3], z3.Implies(z3.And(st.so(r1, r2), st.so(r2, r3)), st.so(r1, r3))),
        _fa([r1, r2], z3.Implies(z3.And(st.Xs(r1), st.Xs(r2), r1 != r2), z3.Or(st.so(r1, r2), st.so(r2, r1)))),
        _fa([r1, r2], z3.Implies(z3.And(st.Xs(r1), st.Xs(r2), st.so(r1, r2)),
                                 st.before(r2) >= st.before(r1) + st.tok(r1))),
    ]
    # model output
    if m.skip:
        cs.append(_fa([r], z3.Implies(st.fin(r), z3.Or(st.R3(r), z3.And(st.W2(r), s.ever(r))))))
    else:
        cs.append(_fa([r], z3.Implies(st.fin(r), st.Xs(r))))
    cs += [
        p.step == t,
        _fa([r], z3.And(
            p.arrived(r) == z3.Or(s.arrived(r), st.arrive(r)),
            p.W(r) == z3.And(st.W2(r), z3.Not(st.fin(r))),
            p.R(r) == z3.And(st.R3(r), z3.Not(st.fin(r))),
            p.F(r) == z3.Or(s.F(r), st.fin(r)),
            p.X(r) == z3.Or(s.X(r), st.abort(r)),
            p.ever(r) == z3.Or(s.ever(r), st.adm(r)),
            p.ws(r) == z3.If(st.preempt(r), t, st.ws1(r)),
            p.arr(r) == z3.If(st.arrive(r), t, s.arr(r)))),
    ]
    return cs


def _field_rules(g: Sig, st: Step) -> list[z3.BoolRef]:
    """What the field's gates add to the step (see the module docstring,
    "The field's gates"): drainer's draining set and tolerance, timeslice's
    active set, vtc's counter order."""
    s, p, m, t = st.pre, st.post, st.m, st.t
    r, r1, r2 = g.r("r"), g.r("r1"), g.r("r2")
    a = g.a("a")
    cs: list[z3.BoolRef] = []
    if m.policy == "drainer":
        gen0 = z3.If(st.arrive(r), 0, s.gen(r))
        cs += [
            _fa([r], g.mt(r) >= 1),
            # one output token per step at most (a new request has none)
            _fa([r], z3.And(p.gen(r) >= gen0, p.gen(r) <= gen0 + 1)),
            # a starving request: waiting (at the scan) longer than S
            z3.Implies(st.starve, z3.Exists([r1], z3.And(st.W1(r1), g.lora(r1), t - st.ws1(r1) > g.S))),
            # D: an adapter drains only while it has a running request (cleared
            # otherwise, L159-173), stays draining while it has one, and starts
            # draining only when some request starves (L101-157; which adapter
            # is the victim is a free choice here)
            _fa([a], z3.Implies(st.D(a), z3.And(a != g.base, z3.Or(s.drain(a), st.starve), z3.Exists([r1], z3.And(
                st.R2(r1), g.adapter(r1) == a, st.rem(a) == st.left(r1)))))),
            _fa([r], z3.Implies(z3.And(st.R2(r), g.lora(r), s.drain(g.adapter(r))), st.D(g.adapter(r)))),
            # rem: the largest remaining output among the adapter's running requests (stats L76-99)
            _fa([r], z3.Implies(z3.And(st.R2(r), st.D(g.adapter(r))), st.left(r) <= st.rem(g.adapter(r)))),
            # the state keeps D; a step without a scan (preemption) may keep the old set
            # (SGLang updates it only when it looks at the waiting queue)
            z3.Implies(st.keep, st.noscan),
            _fa([a], p.drain(a) == z3.If(st.keep, s.drain(a), st.D(a))),
        ]
    if m.policy == "timeslice":
        keep = [] if m.mutant == "evict_in_use" else [
            # an adapter in use (a running request) is never deactivated (L349-394)
            _fa([r], z3.Implies(z3.And(st.R2(r), g.lora(r), s.act(g.adapter(r))), st.A(g.adapter(r))))]
        cs += keep + [
            _fa([a], z3.Implies(st.A(a), a != g.base)),
            _fa([a], p.act(a) == st.A(a)),
        ]
    if m.policy == "vtc":
        charge = z3.If(s.ever(r1), 0, g.prompt(r1))
        cs += [
            _fa([r], g.prompt(r) >= 1),
            # the least-served adapter first: counters only grow during a scan
            _fa([r1, r2], z3.Implies(z3.And(st.W1(r1), st.W1(r2), st.ahead(r1, r2)), st.vc(r1) <= st.vc(r2))),
            # visiting a never-admitted request charges its prompt to its adapter (L122-124)
            _fa([r1, r2], z3.Implies(z3.And(st.W1(r1), st.W1(r2), st.ahead(r1, r2),
                                            g.adapter(r1) == g.adapter(r2)), st.vc(r2) >= st.vc(r1) + charge)),
            # a scan starts from the counters (raised by the lift of `append` and the output charges)
            _fa([r], z3.Implies(st.W1(r), st.vc(r) >= s.cnt(g.adapter(r)))),
            _fa([a], p.cnt(a) >= s.cnt(a)),
        ]
    return cs


def step_property(g: Sig, st: Step, name: str) -> z3.BoolRef:
    """The step properties of `spec.properties`, stated on the pre-state, the
    step's sets and the post-state, never on the scan's own decisions; each in
    English: docs/proofs-unbounded.md (the properties after "Invariants")."""
    s, p = st.pre, st.post
    r, r1, r2 = g.r("r"), g.r("r1"), g.r("r2")
    if name == "running_lora_cap":
        return slots_ok(g, st.R3, p.slot)
    if name == "batch_lora_cap":
        return slots_ok(g, st.Xs, p.slot)
    if name == "capacity":
        return z3.And(seats_ok(g, st.R3, p.seat),
                      _fa([r], z3.Implies(st.Xs(r), st.before(r) + st.tok(r) <= g.T)))
    if name == "conservation":
        return _fa([r], z3.And(p.arrived(r) == z3.Or(p.W(r), p.R(r), p.F(r), p.X(r)),
                               z3.AtMost(p.W(r), p.R(r), p.F(r), p.X(r), 1)))
    if name == "fifo_within_adapter":
        return _fa([r1, r2], z3.Implies(
            z3.And(st.adm(r1), z3.Not(s.ever(r1)), st.W1(r2), z3.Not(st.adm(r2)), z3.Not(s.ever(r2)),
                   _same_key(g, r1, r2)),
            z3.Not(g.seq(r2) < g.seq(r1))))
    raise ValueError(f"unknown property {name!r}")


class System:
    """Sorts, two states and a step for one `Model` (symbolic sorts by default)."""

    def __init__(self, m: Model, req: z3.SortRef | None = None, ad: z3.SortRef | None = None) -> None:
        self.m = m
        self.g = Sig(req if req is not None else z3.DeclareSort("Req"),
                     ad if ad is not None else z3.DeclareSort("Adapter"))
        self.s0, self.s1 = State(self.g, "0"), State(self.g, "1")
        self.step = Step(self.g, self.s0, self.s1, m, "0")

    def inv(self, s: State) -> dict[str, z3.BoolRef]:
        return invariants(self.g, s, self.m)

    def trans(self) -> list[z3.BoolRef]:
        return transition(self.g, self.step)


# ---- obligations ----------------------------------------------------------

@dataclass
class Outcome:
    model: str
    kind: str  # init | preserves | safety | trace
    name: str
    verdict: str  # ok | fail | unknown | sat | unsat
    seconds: float
    detail: str = ""
    counter: z3.ModelRef | None = None
    exact: z3.ModelRef | None = None  # a model of `exact_violation`, when one was found
    system: System | None = None

    def line(self) -> str:
        word = {"init": "implies invariant", "preserves": "preserves invariant", "safety": "implies safety",
                "trace": "sat trace"}[self.kind]
        mins, secs = divmod(self.seconds, 60)
        v = {"ok": "ok.", "fail": "FAILED.", "unknown": "UNKNOWN.", "sat": "ok (sat).",
             "unsat": "UNSAT."}[self.verdict]
        return (f"  {word} {self.name} ... {v} (0:{int(mins):02d}:{secs:05.2f})"
                + (f" {self.detail}" if self.detail else ""))


def _solve(facts: list[z3.BoolRef], timeout_ms: int, seed: int | None = None,
           ) -> tuple[z3.CheckSatResult, z3.Solver, float]:
    """Check `facts`. Without `seed`: three random seeds with a quarter of the
    timeout each, then all of it (sat and unsat are final whatever the seed; a
    query's time depends on the seed and on the process's past: measured, the
    drainer's any-size check ran past 60 s on seed 0 and took 2 s on seed 1)."""
    t0 = time.monotonic()
    tries = ((seed, timeout_ms),) if seed is not None else \
        ((None, timeout_ms // 4), (1, timeout_ms // 4), (2, timeout_ms // 4), (None, timeout_ms))
    for attempt, limit in tries:
        sv = z3.Solver()
        sv.set("timeout", limit)
        if attempt is not None:
            sv.set("random_seed", attempt)
        sv.add(facts)
        r = sv.check()
        if r != z3.unknown:
            break
    return r, sv, time.monotonic() - t0


def _verdict(r: z3.CheckSatResult) -> str:
    return "ok" if r == z3.unsat else ("fail" if r == z3.sat else "unknown")


def prove(m: Model, *, props: tuple[str, ...] = PROPERTIES, timeout_ms: int = 60_000) -> list[Outcome]:
    """Every obligation of `m`: init ⇒ each invariant, Inv ∧ step ⇒ each
    invariant', Inv ∧ step ⇒ each property in `props`."""
    sy = System(m)
    g, out = sy.g, []
    inv0, inv1 = sy.inv(sy.s0), sy.inv(sy.s1)
    names = list(inv0)
    base = g.axioms()
    for n in names:
        r, sv, dt = _solve(base + [init(g, sy.s0), z3.Not(inv0[n])], timeout_ms)
        out.append(Outcome(m.label, "init", n, _verdict(r), dt, counter=sv.model() if r == z3.sat else None))
    hyp = base + list(inv0.values()) + sy.trans()
    for n in names:
        r, sv, dt = _solve(hyp + [z3.Not(inv1[n])], timeout_ms)
        out.append(Outcome(m.label, "preserves", n, _verdict(r), dt,
                           counter=sv.model() if r == z3.sat else None))
    # non-vacuity of the step: from a state satisfying the invariant, a request
    # of a new adapter is admitted while another adapter keeps running.
    st, r1, r2 = sy.step, g.r("n1"), g.r("n2")
    r, _sv, dt = _solve(hyp + [z3.Exists([r1, r2], z3.And(st.R2(r1), g.lora(r1), st.new(r2),
                                                          g.adapter(r1) != g.adapter(r2)))], timeout_ms)
    out.append(Outcome(m.label, "trace", "[Inv ∧ step: a new adapter joins a running one]",
                       "sat" if r == z3.sat else ("unknown" if r == z3.unknown else "fail"), dt,
                       detail="" if r == z3.sat else f"expected sat, got {r}: the step is vacuous"))
    for n in props:
        r, sv, dt = _solve(hyp + [z3.Not(step_property(g, sy.step, n))], timeout_ms)
        o = Outcome(m.label, "safety", n, _verdict(r), dt, counter=sv.model() if r == z3.sat else None, system=sy)
        if r == z3.sat:
            o.detail, o.exact = real_violation(sy, hyp, n, timeout_ms)
        out.append(o)
    for o in out:
        o.system = sy
    return out


def exact_violation(g: Sig, st: Step, name: str) -> z3.BoolRef:
    """A violation of `name` that does not depend on the ghosts: for the caps,
    M = 1 and two requests of distinct adapters (> 0) running / scheduled;
    for the seats, N = 1 and two requests running; otherwise the negated
    property (it mentions no ghost)."""
    r1, r2 = g.r("v1"), g.r("v2")
    if name in CAP_PROPERTIES:
        f = st.R3 if name == "running_lora_cap" else st.Xs
        return z3.And(g.M == 1, z3.Exists([r1, r2], z3.And(f(r1), f(r2), g.lora(r1), g.lora(r2),
                                                            g.adapter(r1) != g.adapter(r2))))
    if name == "capacity":
        r = g.r("v")
        return z3.Or(z3.And(g.N == 1, z3.Exists([r1, r2], z3.And(st.R3(r1), st.R3(r2), r1 != r2))),
                     z3.Exists([r], z3.And(st.Xs(r), st.before(r) + st.tok(r) > g.T)))
    return z3.Not(step_property(g, st, name))


def real_violation(sy: System, hyp: list[z3.BoolRef], name: str,
                   timeout_ms: int) -> tuple[str, z3.ModelRef | None]:
    """When an obligation fails, ask whether some state satisfying the
    invariant steps to an *exact* violation (`exact_violation`), and count it
    in Python in the countermodel's finite universe."""
    g, st = sy.g, sy.step
    r, sv, _ = _solve(hyp + [exact_violation(g, st, name)], timeout_ms)
    if r != z3.sat:
        return f"[no exact violation from an invariant state ({r}): the ghost fails, see the traces]", None
    mod = sv.model()
    return _count_violation(sy, mod, name), mod


def _count_violation(sy: System, mod: z3.ModelRef, name: str) -> str:
    g, st = sy.g, sy.step
    reqs = mod.get_universe(g.req) or []
    if name in CAP_PROPERTIES:
        member = st.R3 if name == "running_lora_cap" else st.Xs
        ads = {str(mod.eval(g.adapter(x), model_completion=True)) for x in reqs
               if z3.is_true(mod.eval(z3.And(member(x), g.lora(x)), model_completion=True))}
        M = mod.eval(g.M, model_completion=True).as_long()
        rel = ">" if len(ads) > M else "<= (not a violation!)"
        return (f"[exact violation from an invariant state: {len(reqs)} requests, "
                f"{len(ads)} adapters {rel} max_loras {M}]")
    return f"[exact violation from an invariant state: {len(reqs)} requests]"


CTI_VERSION = 1


def cti_json(o: Outcome) -> dict:
    """A failed obligation as a versioned JSON object (mypyvy's `--json`):
    the finite universes of its countermodel (the exact violation when there
    is one), the rigid symbols, the pre- and post-state relations and the
    step's sets. Element names are Z3's (`Req!val!0`, ...)."""
    sy = o.system
    mod = o.exact if o.exact is not None else o.counter
    assert sy is not None and mod is not None, "only a failed obligation has a countermodel"
    g, st = sy.g, sy.step
    reqs = mod.get_universe(g.req) or []
    ads = mod.get_universe(g.ad) or []

    def ev(e: z3.ExprRef) -> z3.ExprRef:
        return mod.eval(e, model_completion=True)

    def members(f: Callable[[z3.ExprRef], z3.BoolRef]) -> list[str]:
        return [str(x) for x in reqs if z3.is_true(ev(f(x)))]

    def state(s: State) -> dict:
        out: dict = {"step": ev(s.step).as_long()}
        for n in ("arrived", "W", "R", "F", "X", "ever", "star"):
            out[n] = members(getattr(s, n))
        return out

    return {
        "version": CTI_VERSION,
        "type": "init" if o.kind == "init" else "cti",
        "model": o.model, "obligation": o.kind, "name": o.name, "exact": o.exact is not None,
        "config": {k: ev(v).as_long() for k, v in (("max_loras", g.M), ("max_num_seqs", g.N),
                                                    ("max_num_batched_tokens", g.T), ("starvation_steps", g.S))},
        "universes": {"Req": [str(x) for x in reqs], "Adapter": [str(a) for a in ads]},
        "rigid": {"base": str(ev(g.base)), "adapter": {str(x): str(ev(g.adapter(x))) for x in reqs},
                  "prio": {str(x): ev(g.prio(x)).as_long() for x in reqs},
                  "seq": {str(x): ev(g.seq(x)).as_long() for x in reqs}},
        "states": [state(sy.s0), state(sy.s1)],
        "step": {**{n: members(getattr(st, n)) for n in ("arrive", "abort", "sched", "preempt", "adm", "fin")},
                 "tok": {x: ev(st.tok(r)).as_long() for x, r in ((str(r), r) for r in reqs)
                         if z3.is_true(ev(st.Xs(r)))},
                 "before": {x: ev(st.before(r)).as_long() for x, r in ((str(r), r) for r in reqs)
                            if z3.is_true(ev(st.Xs(r)))}},
    }


def write_cti(o: Outcome, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(cti_json(o), f, indent=1)


# ---- reachability (mypyvy `sat trace`) ------------------------------------

def trace(m: Model, depth: int, goal: Callable[[System, list[State], list[Step]], z3.BoolRef], *,
          extra: Callable[[Sig, list[Step]], list[z3.BoolRef]] | None = None, timeout_ms: int = 60_000,
          seeds: int = 1) -> tuple[z3.CheckSatResult, float, z3.ModelRef | None, System, list[Step]]:
    """Is a state satisfying `goal` reachable in `depth` steps from init?
    With `seeds` > 1, an `unknown` is retried with the next random seed
    (a portfolio: MBQI's time on a sat query swings with the seed), each
    try with `timeout_ms`; the time reported is the total."""
    sy = System(m)
    g = sy.g
    states = [State(g, f"t{i}") for i in range(depth + 1)]
    steps = [Step(g, states[i], states[i + 1], m, f"t{i}") for i in range(depth)]
    facts = g.axioms() + [init(g, states[0])] + (extra(g, steps) if extra else [])
    for st in steps:
        facts += transition(g, st)
    facts.append(goal(sy, states, steps))
    total = 0.0
    for seed in range(seeds):
        r, sv, dt = _solve(facts, timeout_ms, seed if seeds > 1 else None)
        total += dt
        if r != z3.unknown:
            break
    return r, total, (sv.model() if r == z3.sat else None), sy, steps


def reference_like(g: Sig, steps: list[Step]) -> list[z3.BoolRef]:
    """max_loras 1, one priority, no preemption (the replay has ample KV)."""
    r = g.r("r")
    return [g.M == 1, _fa([r], g.prio(r) == 0)] + [_fa([r], z3.Not(st.preempt(r))) for st in steps]


def two_adapters(member: str) -> Callable[[System, list[State], list[Step]], z3.BoolRef]:
    """Goal: in the last step, two requests of distinct adapters (> 0) are
    running once scheduled (`member` = "R3") or scheduled ("Xs")."""
    def goal(sy: System, states: list[State], steps: list[Step]) -> z3.BoolRef:
        g, st = sy.g, steps[-1]
        r1, r2 = g.r("w1"), g.r("w2")
        f = getattr(st, member)
        return z3.Exists([r1, r2], z3.And(f(r1), f(r2), g.lora(r1), g.lora(r2), g.adapter(r1) != g.adapter(r2)))
    return goal


def cap_blocked_at_full(sy: System, states: list[State], steps: list[Step]) -> z3.BoolRef:
    """Goal: M = 2 adapters are running after the last step and a request of a
    third adapter is left waiting, cap-blocked (the cap is reached and used)."""
    g, st = sy.g, steps[-1]
    r1, r2, r3 = g.r("w1"), g.r("w2"), g.r("w3")
    return z3.And(g.M == 2, z3.Exists([r1, r2, r3], z3.And(
        st.R3(r1), st.R3(r2), g.lora(r1), g.lora(r2), g.adapter(r1) != g.adapter(r2),
        st.W1(r3), z3.Not(st.adm(r3)), st.capb(r3),
        g.adapter(r3) != g.adapter(r1), g.adapter(r3) != g.adapter(r2))))


def exact_drainer(g: Sig, steps: list[Step]) -> list[z3.BoolRef]:
    """The drainer as the replay runs it: max_loras 1, one priority, no
    preemption, abort or idle step; prompts of one token (each scheduled
    request gets 1 token and produces one output token; it finishes at
    max_tokens <= 40); ample seats and budget (no stop); and, with one slot,
    the one running adapter starts draining as soon as a request starves
    (SGLang marks it, L101-157)."""
    r, r1 = g.r("r"), g.r("r1")
    out = [g.M == 1, _fa([r], z3.And(g.prio(r) == 0, g.mt(r) <= 40)),
           _fa([r, r1], z3.Implies(r != r1, g.seq(r) != g.seq(r1)))]  # the replay's arrival order
    for st in steps:
        gen0 = z3.If(st.arrive(r), 0, st.pre.gen(r))
        out += [st.t == st.pre.step + 1, z3.Not(st.noscan),
                _fa([r], z3.And(z3.Not(st.preempt(r)), z3.Not(st.abort(r)), z3.Not(st.stop(r)),
                                z3.Implies(st.R1(r), st.sched(r)),
                                z3.Implies(st.Xs(r), st.tok(r) == 1),
                                st.post.gen(r) == z3.If(st.Xs(r), gen0 + 1, gen0),
                                st.fin(r) == z3.And(st.Xs(r), st.post.gen(r) == g.mt(r)))),
                _fa([r, r1], z3.Implies(z3.And(st.W1(r1), g.lora(r1), st.t - st.ws1(r1) > g.S, st.R2(r), g.lora(r)),
                                        z3.And(st.starve, st.D(g.adapter(r))))),
                # the drainer scans the waiting queue in order (no preemption: arrival order)
                _fa([r, r1], z3.Implies(z3.And(st.W1(r), st.W1(r1)), st.ahead(r, r1) == (g.seq(r) < g.seq(r1))))]
    return out


def violates_fifo(sy: System, states: list[State], steps: list[Step]) -> z3.BoolRef:
    """Goal: the last step first-admits a request while an earlier one of its
    adapter and priority stays waiting, never admitted."""
    return z3.Not(step_property(sy.g, steps[-1], "fifo_within_adapter"))


def vtc_stops_behind_least_served(sy: System, states: list[State], steps: list[Step]) -> z3.BoolRef:
    """Goal (max_loras 1): vtc visits a cap-blocked request of the
    least-served adapter first (smaller counter), stops there, and leaves
    behind it a never-admitted request of an adapter the cap already counts."""
    g, st = sy.g, steps[-1]
    rb, ra = g.r("w1"), g.r("w2")
    return z3.And(g.M == 1, z3.Exists([rb, ra], z3.And(
        st.W1(rb), st.capb(rb), st.stop(rb), st.W1(ra), z3.Not(st.adm(ra)), z3.Not(states[-2].ever(ra)),
        g.lora(ra), st.Cb(ra, g.adapter(ra)), st.ahead(rb, ra), st.vc(rb) < st.vc(ra))))


def timeslice_cycles(sy: System, states: list[State], steps: list[Step]) -> z3.BoolRef:
    """Goal (max_loras 1): an adapter active at step 1 is no longer active
    and a request of another, newly activated adapter is admitted."""
    g, st = sy.g, steps[-1]
    r, a = g.r("w1"), g.a("b1")
    return z3.And(g.M == 1, z3.Exists([r, a], z3.And(
        states[1].act(a), z3.Not(states[-1].act(a)), st.adm(r), g.lora(r), g.adapter(r) != a,
        z3.Not(st.pre.act(g.adapter(r))))))


def max_loras_is(k: int) -> Callable[[Sig, list[Step]], list[z3.BoolRef]]:
    return lambda g, _steps: [g.M == k]


@dataclass(frozen=True)
class TraceCheck:
    name: str
    model: Model
    depth: int
    goal: Callable[[System, list[State], list[Step]], z3.BoolRef]
    extra: Callable[[Sig, list[Step]], list[z3.BoolRef]] | None
    expect: str  # sat | unsat
    props: tuple[str, ...] = CAP_PROPERTIES  # the properties it gives evidence about
    replay: str | None = None  # a sat trace violating this property must replay in the reference
    seeds: int = 1  # random seeds tried in turn while Z3 answers unknown (`trace`)


TRY_MS = 8_000  # per seed, for a trace with `seeds` > 1

TRACES = (
    # non-vacuity: the cap is reached and blocks a third adapter
    TraceCheck("vllm: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("vllm"), 2,
               cap_blocked_at_full, None, "sat"),
    TraceCheck("fair+skip: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("fair", True), 2,
               cap_blocked_at_full, None, "sat"),
    TraceCheck("blocking: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("blocking"), 2,
               cap_blocked_at_full, None, "sat"),
    # vLLM's scheduled-only cap set under a skipped running request: reachable violations
    TraceCheck("vllm+skip: 2 adapters running with max_loras 1 (running_lora_cap)", Model("vllm", True), 2,
               two_adapters("R3"), reference_like, "sat", replay="running_lora_cap"),
    TraceCheck("vllm+skip: 2 adapters scheduled with max_loras 1 (batch_lora_cap, the crash)", Model("vllm", True),
               3, two_adapters("Xs"), reference_like, "sat", replay="batch_lora_cap"),
    # ... and not for fair nor for vllm without the skip (bounded confirmation of the proofs)
    TraceCheck("fair+skip: 2 adapters running with max_loras 1", Model("fair", True), 2,
               two_adapters("R3"), max_loras_is(1), "unsat"),
    TraceCheck("vllm: 2 adapters scheduled with max_loras 1", Model("vllm"), 2,
               two_adapters("Xs"), max_loras_is(1), "unsat"),
    # the field's gates: the cap is reached and used, each gate's own rule acts
    TraceCheck("drainer: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("drainer"), 2,
               cap_blocked_at_full, None, "sat", seeds=4),
    TraceCheck("timeslice: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("timeslice"), 2,
               cap_blocked_at_full, None, "sat", seeds=4),
    TraceCheck("vtc: 2 adapters running, a 3rd cap-blocked (max_loras 2)", Model("vtc"), 2,
               cap_blocked_at_full, None, "sat", seeds=4),
    TraceCheck("timeslice: an adapter is cycled out and another admitted (max_loras 1)", Model("timeslice"), 3,
               timeslice_cycles, None, "sat", seeds=4),
    TraceCheck("vtc: the least-served adapter's blocked head stops the scan (max_loras 1)", Model("vtc"), 2,
               vtc_stops_behind_least_served, None, "sat", seeds=4),
    # drainer's tolerance admits a short request past a long one: a reachable violation
    TraceCheck("drainer: a draining adapter admits a short request past a long one (fifo_within_adapter)",
               Model("drainer"), 2, violates_fifo, exact_drainer, "sat", ("fifo_within_adapter",),
               replay="fifo_within_adapter", seeds=6),
    # vLLM's scheduled-only cap under a skipped running request (drainer, vtc), not timeslice's active set
    TraceCheck("drainer+skip: 2 adapters running with max_loras 1 (running_lora_cap)", Model("drainer", True), 2,
               two_adapters("R3"), reference_like, "sat", replay="running_lora_cap", seeds=4),
    TraceCheck("vtc+skip: 2 adapters running with max_loras 1 (running_lora_cap)", Model("vtc", True), 2,
               two_adapters("R3"), reference_like, "sat", replay="running_lora_cap", seeds=4),
    TraceCheck("vtc+skip: 2 adapters scheduled with max_loras 1 (batch_lora_cap, the crash)", Model("vtc", True),
               3, two_adapters("Xs"), reference_like, "sat", replay="batch_lora_cap", seeds=4),
    TraceCheck("timeslice+skip: 2 adapters running with max_loras 1", Model("timeslice", True), 2,
               two_adapters("R3"), max_loras_is(1), "unsat"),
    TraceCheck("timeslice+skip: 2 adapters scheduled with max_loras 1", Model("timeslice", True), 3,
               two_adapters("Xs"), max_loras_is(1), "unsat"),
)


def run_trace(tc: TraceCheck, timeout_ms: int = 60_000) -> Outcome:
    """One reachability check; a violating sat trace is also replayed (`replay_trace`)."""
    r, dt, mod, sy, steps = trace(tc.model, tc.depth, tc.goal, extra=tc.extra,
                                  timeout_ms=timeout_ms if tc.seeds == 1 else min(timeout_ms, TRY_MS),
                                  seeds=tc.seeds)
    v = "sat" if r == z3.sat else ("unsat" if r == z3.unsat else "unknown")
    ok = v == tc.expect
    detail = f"expected {tc.expect}, got {v}"
    if ok and mod is not None and tc.replay is not None:
        replay = replay_arrivals if tc.replay == "fifo_within_adapter" else replay_trace
        ok, how = replay(tc, mod, sy, steps)
        detail += f"; replay in policy/: {how}"
    return Outcome(tc.model.label, "trace", f"[{tc.name}] depth {tc.depth}",
                   ("sat" if v == "sat" else "ok") if ok else ("unknown" if v == "unknown" else "fail"),
                   dt, detail=detail, counter=mod)


def replay_trace(tc: TraceCheck, mod: z3.ModelRef, sy: System, steps: list[Step]) -> tuple[bool, str]:
    """Turn a sat trace into a `policy.driver.Workload` and run it through the
    reference; `policy.check.check_trace` (the Observer) must report `tc.replay`.

    The workload keeps the requests the trace admits, each arriving at the
    step that admits it (in scan order), a request the trace finishes is
    aborted at the next step, one the trace aborts is aborted at that step,
    and the running requests the trace leaves
    unscheduled are the skips. Prompts and outputs are long (8 and 8 tokens)
    and budget and seats ample, so the reference admits every request of the
    workload the LoRA gate lets in: the same sets as the trace when the trace
    is a real behaviour."""
    prop = tc.replay
    assert prop is not None
    g = sy.g
    univ = mod.get_universe(g.req) or []

    def true(e: z3.ExprRef) -> bool:
        return z3.is_true(mod.eval(e, model_completion=True))

    ad_ids: dict[str, int] = {str(mod.eval(g.base, model_completion=True)): 0}
    reqs: list[Request] = []
    name: dict[str, str] = {}
    aborts: dict[str, int] = {}
    skips: dict[int, frozenset[str]] = {}
    for i, st in enumerate(steps):
        sk = {name[str(x)] for x in univ if str(x) in name
              and true(z3.And(st.R1(x), z3.Not(st.sched(x)), z3.Not(st.preempt(x))))}
        if sk:
            skips[i + 1] = frozenset(sk)
        adm = [x for x in univ if true(st.adm(x))]
        adm.sort(key=functools.cmp_to_key(lambda x, y, st=st: -1 if true(st.ahead(x, y)) else 1))
        for x in adm:
            a = str(mod.eval(g.adapter(x), model_completion=True))
            ad_ids.setdefault(a, len(ad_ids))
            name[str(x)] = f"u{len(reqs)}"
            reqs.append(Request(f"u{len(reqs)}", ad_ids[a], 8, 8, i + 1))
        for x in univ:
            if str(x) in name and true(st.fin(x)):
                aborts[name[str(x)]] = i + 2
        for x in univ:  # a client abort in the trace (of a request admitted earlier)
            if str(x) in name and true(st.abort(x)):
                aborts[name[str(x)]] = i + 1
    end = len(steps) + 1
    for q in reqs:
        aborts.setdefault(q.id, end)  # stop the run right after the trace
    cfg = Config(max_loras=mod.eval(g.M, model_completion=True).as_long(), max_num_seqs=64,
                 max_num_batched_tokens=256, policy=tc.model.policy)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        run(cfg, Workload(reqs, aborts, skips), trace_path=path)
        report = check_trace(path)
    v = report.first.get(prop)
    shape = (f"{len(reqs)} requests, adapters {[q.adapter for q in reqs]}, arrivals {[q.arrival for q in reqs]}, "
             f"skips {{{', '.join(f'{k}: {sorted(v)}' for k, v in skips.items())}}}")
    return v is not None, f"{shape}: {v if v else 'no ' + prop + ' violation in the reference'}"


def replay_arrivals(tc: TraceCheck, mod: z3.ModelRef, sy: System, steps: list[Step]) -> tuple[bool, str]:
    """Replay a trace of an `exact_drainer`-like model: every request the
    trace makes arrive, at its step (in `seq` order), with the trace's
    adapter and max_tokens, a one-token prompt; max_loras and
    starvation_steps the trace's, seats and budget ample. The reference
    (`policy.core.Scheduler` with the gate) runs it to completion and
    `policy.check.check_trace` (the Observer) must report `tc.replay`."""
    prop = tc.replay
    assert prop is not None
    g = sy.g
    univ = mod.get_universe(g.req) or []

    def val(e: z3.ExprRef) -> int:
        return mod.eval(e, model_completion=True).as_long()

    ad_ids: dict[str, int] = {str(mod.eval(g.base, model_completion=True)): 0}
    reqs: list[Request] = []
    for i, st in enumerate(steps):
        new = sorted((x for x in univ if z3.is_true(mod.eval(st.arrive(x), model_completion=True))),
                     key=lambda x: val(g.seq(x)))
        for x in new:
            a = str(mod.eval(g.adapter(x), model_completion=True))
            ad_ids.setdefault(a, len(ad_ids))
            reqs.append(Request(f"u{len(reqs)}", ad_ids[a], 1, val(g.mt(x)), i + 1))
    cfg = Config(max_loras=val(g.M), max_num_seqs=64, max_num_batched_tokens=256, starvation_steps=val(g.S),
                 policy=tc.model.policy)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        run(cfg, Workload(reqs), trace_path=path)
        report = check_trace(path)
    v = report.first.get(prop)
    shape = (f"{len(reqs)} requests, adapters {[q.adapter for q in reqs]}, max_tokens "
             f"{[q.max_tokens for q in reqs]}, arrivals {[q.arrival for q in reqs]}, "
             f"starvation_steps {cfg.starvation_steps}")
    return v is not None, f"{shape}: {v if v else 'no ' + prop + ' violation in the reference'}"


# ---- the catalogue ---------------------------------------------------------

# What is claimed for any size: (model, properties expected to be proved,
# properties expected to fail).
MODELS: tuple[tuple[Model, tuple[str, ...], tuple[str, ...]], ...] = (
    (Model("vllm"), PROPERTIES, ()),
    (Model("vllm", True), ("capacity", "conservation", "fifo_within_adapter"), CAP_PROPERTIES),
    (Model("fair"), PROPERTIES, ()),
    (Model("fair", True), PROPERTIES, ()),
    (Model("blocking"), PROPERTIES, ()),
    (Model("blocking", True), ("capacity", "conservation", "fifo_within_adapter"), CAP_PROPERTIES),
    # the field's gates (docs/field.md)
    (Model("drainer"), ("running_lora_cap", "batch_lora_cap", "capacity", "conservation"),
     ("fifo_within_adapter",)),
    (Model("drainer", True), ("capacity", "conservation"), (*CAP_PROPERTIES, "fifo_within_adapter")),
    (Model("timeslice"), PROPERTIES, ()),
    (Model("timeslice", True), PROPERTIES, ()),  # the active set bounds every running adapter
    (Model("vtc"), PROPERTIES, ()),
    (Model("vtc", True), ("capacity", "conservation", "fifo_within_adapter"), CAP_PROPERTIES),
    # vLLM 0.33's stock cap (every running request's adapter): both caps with skips too
    (Model("vllm", True, release="0.33"), PROPERTIES, ()),
    (Model("blocking", True, release="0.33"), PROPERTIES, ()),
)

# Planted bugs: (model, mutant); each must make every property MUTANTS names fail.
MUTANT_RUNS: tuple[tuple[str, bool, str], ...] = (
    ("vllm", False, "cap_off_by_one"),
    ("fair", True, "cap_off_by_one"),
    ("fair", True, "cap_set_forgets_admitted"),
    ("fair", True, "fair_scheduled_set"),
    ("vllm", False, "seat_off_by_one"),
    ("fair", True, "budget_off_by_one"),
    ("vllm", False, "preempted_stay_running"),
    ("vllm", False, "scan_order_free"),
    ("fair", False, "star_not_oldest"),
    ("fair", False, "hold_any"),
    # the field's gates: each proved property of each gate has a bug that breaks it
    ("drainer", False, "cap_off_by_one"),
    ("drainer", False, "seat_off_by_one"),
    ("drainer", False, "preempted_stay_running"),
    ("timeslice", True, "evict_in_use"),
    ("timeslice", False, "cap_off_by_one"),
    ("timeslice", False, "budget_off_by_one"),
    ("timeslice", False, "preempted_stay_running"),
    ("timeslice", False, "scan_order_free"),
    ("vtc", False, "cap_off_by_one"),
    ("vtc", False, "seat_off_by_one"),
    ("vtc", False, "preempted_stay_running"),
    ("vtc", False, "vtc_order_free"),
)


def manifest_result(policy: str, prop: str, *, skip: bool = False, timeout_ms: int = 60_000):  # -> engine.Result
    """One any-size verdict as `proofs/manifest.json` pins it (method
    `unbounded`): "proved" (depth 1: the invariant is inductive) when every
    init and preservation obligation and `Inv ∧ step ⇒ prop` are unsat and
    the step is not vacuous; "cex" when `prop` fails with an exact violation
    from an invariant state AND a sat trace of `TRACES` reaches it from init
    (depth = that trace's depth; `replay_ok` = its replay in `policy/`);
    "cti" when it fails without such a trace; "unknown" when Z3 gives up."""
    m = Model(policy, skip)
    t0 = time.monotonic()
    outs = prove(m, props=(prop,), timeout_ms=timeout_ms)
    bad = [o for o in outs if o.kind != "safety" and o.verdict not in ("ok", "sat")]
    (safety,) = [o for o in outs if o.kind == "safety"]
    if any(o.verdict == "unknown" for o in outs):
        return engine.Result(policy, prop, "unknown", 1, time.monotonic() - t0, reason="z3 unknown")
    if bad:
        return engine.Result(policy, prop, "cti", 1, time.monotonic() - t0, detail="; ".join(o.line() for o in bad))
    n_inv = sum(o.kind == "preserves" for o in outs)
    if safety.verdict == "ok":
        return engine.Result(policy, prop, "proved", 1, time.monotonic() - t0,
                             detail=f"{n_inv} invariants, inductive")
    for tc in TRACES:
        if tc.model == m and tc.replay == prop and tc.expect == "sat":
            o = run_trace(tc, timeout_ms)
            return engine.Result(policy, prop, "cex", tc.depth, time.monotonic() - t0,
                                 detail=f"{safety.detail}; {o.detail}", replay_ok=o.verdict == "sat")
    return engine.Result(policy, prop, "cti", 1, time.monotonic() - t0,
                         detail=f"{safety.detail}; no sat trace from init in TRACES")


def run_mutant(policy: str, skip: bool, mutant: str, timeout_ms: int = 60_000) -> list[Outcome]:
    """The properties the mutant must break, with the invariants assumed."""
    return [o for o in prove(Model(policy, skip, mutant), props=MUTANTS[mutant][1], timeout_ms=timeout_ms)
            if o.kind == "safety"]


def check_all(*, policies: tuple[str, ...] = POLICIES, properties: tuple[str, ...] = PROPERTIES,
              timeout_ms: int = 60_000, echo: Callable[[str], None] = print, cti_dir: str | None = None) -> int:
    """The whole catalogue, mypyvy style; returns the number of unexpected
    results. With `cti_dir`, every failed obligation is written there as
    `unbounded_<model>_<name>.cti.json` (`cti_json`)."""
    errors = 0
    t_all = time.monotonic()
    for m, good, bad in MODELS:
        if m.policy not in policies:
            continue
        echo(f"checking {m.label} (any number of requests and adapters):")
        props = tuple(n for n in good + bad if n in properties)
        for o in prove(m, props=props, timeout_ms=timeout_ms):
            if o.kind == "trace":
                echo(o.line())
                errors += o.verdict != "sat"
                continue
            expected_fail = o.kind == "safety" and o.name in bad
            text = o.line()
            if cti_dir and o.verdict == "fail":
                path = f"{cti_dir}/unbounded_{m.label}_{o.name}.cti.json"
                write_cti(o, path)
                text += f" (wrote {path})"
            if expected_fail:
                text += " (expected: a real violation, see the sat traces)" if o.verdict == "fail" else \
                    " (a failure was expected!)"
            echo(text)
            if (o.verdict != "ok") != expected_fail:
                errors += 1
                if o.verdict == "fail" and o.kind != "safety":
                    echo(f"    error: invariant {o.name} may not be preserved by transition step[{m.label}]")
    echo("sat traces (reachability from init, mypyvy `sat trace`):")
    for tc in TRACES:
        if tc.model.policy not in policies or not set(tc.props) & set(properties):
            continue
        o = run_trace(tc, timeout_ms)
        echo(o.line())
        errors += o.verdict in ("fail", "unknown")
    echo("planted bugs (each must make its properties fail):")
    for pol, skip, mu in MUTANT_RUNS:
        if pol not in policies or not set(MUTANTS[mu][1]) & set(properties):
            continue
        for o in run_mutant(pol, skip, mu, timeout_ms):
            caught = o.verdict == "fail"
            echo(o.line().replace(" ... FAILED.", " ... caught (fails).").replace(
                "implies safety", f"mutant {mu} on {pol}{'+skip' if skip else ''}: safety")
                 + ("" if caught else " (SURVIVED!)"))
            errors += not caught
    vac = [o for o in prove(Model("fair", True, VACUOUS_MUTANT), props=CAP_PROPERTIES, timeout_ms=timeout_ms)
           if o.kind in ("trace", "safety")] if "fair" in policies else []
    for o in vac:  # the caps hold vacuously; the non-vacuity check must fail
        caught = o.verdict == "fail" if o.kind == "trace" else o.verdict == "ok"
        word = "sat trace" if o.kind == "trace" else "implies safety"
        echo(o.line().replace(word, f"mutant {VACUOUS_MUTANT} on fair+skip: {word}")
             + (" (vacuously)" if o.kind == "safety" else " (caught: vacuous step)" if caught else " (SURVIVED!)"))
        errors += not caught
    echo(f"{'all ok!' if errors == 0 else f'program has errors. ({errors})'} "
         f"({time.monotonic() - t_all:.1f}s)")
    return errors


def cli_main(args: argparse.Namespace) -> int:
    """`lora-sched prove --unbounded [--policy P] [--property X] [--timeout S] [--itf-dir DIR]`:
    exit 0 when every verdict is the expected one, 1 when one is not (a proof
    fails, a planted bug survives, a trace differs), else 2 when Z3 gave up
    on some obligation; `--itf-dir` receives the failed obligations as CTI
    JSON. `--json`, `--manifest` and `--emit-test` are refused (exit 2)."""
    import sys

    policy = getattr(args, "policy", None)
    prop = getattr(args, "property", None)
    if prop is not None and prop not in PROPERTIES:
        print(f"--unbounded: --property {prop!r} is not one of {', '.join(PROPERTIES)}", file=sys.stderr)
        return 2
    for flag in ("json", "manifest", "emit_test"):
        if getattr(args, flag, None):
            print(f"--unbounded: --{flag.replace('_', '-')} is not supported with --unbounded", file=sys.stderr)
            return 2
    unknown: list[str] = []

    def echo(line: str) -> None:
        if "UNKNOWN." in line:
            unknown.append(line)
        print(line, flush=True)

    errors = check_all(policies=(policy,) if policy else POLICIES, properties=(prop,) if prop else PROPERTIES,
                       timeout_ms=int(getattr(args, "timeout", 60)) * 1000, cti_dir=getattr(args, "itf_dir", None),
                       echo=echo)
    if errors > len(unknown):
        return 1
    return 2 if unknown else 0

