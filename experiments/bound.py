"""How tight is fair's B? Two searches.

*Worst wait / B on the stream families* (`climb`): for each stream family
(`policy.workloads.FAMILIES`) and each configuration variant the bound
covers (sync, async, DP throttle, both), start from the family's workload
and climb: mutate one request (adapter, prompt, output, arrival), add or
drop one, keep the change when fair's worst wait / B does not drop. B is
`policy.fair.fair_bound` with Q the run's observed peak. A ratio above 1
would break the bound (the search would then have found a counterexample,
which `tests/test_fair_growth.py` guards against); the ratio's size says
how loose B is on that family.

*Can any bound be within 4x of a family's worst wait?* (`tightness`, issue
20 item 4; `python -m experiments.cli --bound-gap`, and `bench --realistic` for its
grid). B reads the configuration and a run's figures (`Figures`: Q, Qw,
P, L). So it must hold on every workload with the same configuration whose
figures are no larger, and a *witness*, such a workload on which fair
waits long (`witness`), puts a floor under every sound bound that reads
only those figures and does not shrink as they grow. Two witnesses are
sought: one that also keeps the number of adapters (a floor under a bound
linear in the adapters waiting ahead as well), and, where that one does
not settle the verdict, one within B's own figures only, free to use up
to one adapter per request (`free=True`); where the first leaves the
verdict open, both also try streams that keep the slots busy in front of
the waiting block (`stream_candidates`) and blocks whose every guard and
gap *feeders* stretch as far as the rule lets them (`feeder_candidates`),
and, under a DP throttle, blocks behind a base-model relay that keeps the
throttle on, with a late feeder of each victim (`relay_candidates`),
budget squeezes, where nobody waits for a seat or a slot
(`squeeze_candidates`), and blocks whose slot holders are fed online,
step by step, from fair's own state (`steered_candidates`).
When a witness waits more than
4x the family's worst wait, no bound in its figures is within 4x there
(`Tightness.verdict` "unreachable"; `Tightness.reads` says which figures);
when B is within 4x, "within"; otherwise "open" (B may be loose, or the
witnesses weak). A witness waiting longer than B at its own figures would
be a counterexample to B ("broken"). Where fair is run here
(`tightness`), the longest guard (r* chosen to admitted) is reported
against G, the allowance of the lemma `star_admitted_within_G`: where B's
slack is. `--bound-gap` (and `bench --realistic`) write the witness
workloads beside their results (`write_witnesses`), so that every verdict
can be re-measured without searching again (`tests/test_bound_gap.py`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from pathlib import Path

from lora_sched.bench.simulate import progress
from lora_sched.policy.bound import bound_applies, drain_steps, fair_bound, guard_steps, non_decode_steps
from lora_sched.policy.core import ScheduleError, Scheduler
from lora_sched.policy.driver import DriverStuck, Workload, run
from lora_sched.policy.fair import FairGate, FairGuard, starvation_window
from lora_sched.policy.workloads import FAMILIES
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord, blocks_for, peak_present, peak_waiting

from experiments.families import FAMILY_DIR, all_families

VARIANTS = {
    "sync": {},
    "async": {"async_scheduling": True},
    "throttle": {"prefill_schedule_interval": 2},
    "async+throttle": {"async_scheduling": True, "prefill_schedule_interval": 3},
}


@dataclass
class Climb:
    family: str
    variant: str
    start_ratio: float
    ratio: float
    worst: int
    bound: int
    requests: int


def score(cfg: Config, reqs: list[Request]) -> tuple[float, int, int]:
    """fair's worst wait / B on `reqs` (0 when the run cannot complete)."""
    got = _fair_run(cfg, reqs, max_steps=20_000)
    if got is None:
        return 0.0, 0, 0
    worst, fig, _ = got
    bound = bound_at(cfg, fig)
    return worst / bound, worst, bound


def _mutate(rng: random.Random, reqs: list[Request], adapters: int, fresh: int) -> list[Request]:
    out = list(reqs)
    op = rng.random()
    if op < 0.15 and len(out) > 2:
        out.pop(rng.randrange(len(out)))
    elif op < 0.3:
        base = rng.choice(out)
        out.append(replace(base, id=f"m{fresh}", adapter=rng.randint(0, adapters),
                           arrival=max(1, base.arrival + rng.randint(-3, 3))))
    else:
        i = rng.randrange(len(out))
        r = out[i]
        what = rng.choice(["adapter", "prompt_tokens", "max_tokens", "arrival"])
        if what == "adapter":
            r = replace(r, adapter=rng.randint(0, adapters))
        elif what == "prompt_tokens":
            r = replace(r, prompt_tokens=max(1, r.prompt_tokens + rng.randint(-3, 3)))
        elif what == "max_tokens":
            r = replace(r, max_tokens=max(1, r.max_tokens + rng.randint(-3, 3)))
        else:
            r = replace(r, arrival=max(1, r.arrival + rng.randint(-4, 4)))
        out[i] = r
    return out


def climb(family: str, variant: str, *, length: int = 40, iterations: int = 300, seed: int = 0) -> Climb:
    rng = random.Random(seed)
    cfg, wl = FAMILIES[family](length, **VARIANTS[variant])
    reqs = list(wl.requests)
    adapters = max(r.adapter for r in reqs) + 1
    best, worst, bound = score(cfg, reqs)
    start = best
    for i in range(iterations):
        cand = _mutate(rng, reqs, adapters, i)
        s, w, b = score(cfg, cand)
        if s >= best:
            reqs, best, worst, bound = cand, s, w, b
    return Climb(family, variant, start, best, worst, bound, len(reqs))


def report(iterations: int = 300) -> list[Climb]:
    return [climb(f, v, iterations=iterations) for f in FAMILIES for v in VARIANTS]


# ---- Is "B within 4x of the worst wait" reachable at all? (issue 20, item 4) ----------------

WITHIN = 4  # the goal: B <= 4x the worst wait found


@dataclass(frozen=True)
class Figures:
    """What a bound of B's kind reads of a run: Q, Qw, the largest prompt P and
    `max_tokens` L (B's own figures), and the LoRA adapters that send
    requests (what a bound linear in the adapters waiting ahead would read
    too). The configuration is read too, and a witness keeps it."""

    present: int  # Q: the most requests waiting or running when a step starts
    waiting: int  # Qw: the most requests waiting when a step starts
    prompt: int  # P
    output: int  # L
    adapters: int  # LoRA adapters (> 0) among the requests

    def exceeded_by(self, other: Figures, *, adapters: bool = True) -> list[str]:
        """The figures of `other` above this one's (empty: `other` is within
        it); without `adapters`, B's own figures only."""
        return [f"{k} {getattr(other, k)} > {getattr(self, k)}" for k in self.__dataclass_fields__
                if (adapters or k != "adapters") and getattr(other, k) > getattr(self, k)]


def figures_of(reqs: list[Request] | tuple[Request, ...], records: list[StepRecord]) -> Figures:
    return Figures(peak_present(records), peak_waiting(records), max(r.prompt_tokens for r in reqs),
                   max(r.max_tokens for r in reqs), len({r.adapter for r in reqs if r.adapter > 0}))


@dataclass
class _TimedGuard(FairGuard):
    """fair's guard, noting for each r* the steps from its choice to its admission."""

    times: list[int] = field(default_factory=list)

    def admitted(self, rid: str) -> None:
        if rid == self.star:
            self.times.append(self.step - self.chosen_at)
        super().admitted(rid)


class _TimedGate(FairGate):
    guard_class = _TimedGuard


def bound_at(cfg: Config, fig: Figures) -> int:
    """B (`policy.fair.fair_bound`) for `cfg` at a run's figures."""
    return fair_bound(replace(cfg, policy="fair"), queue=fig.present, waiting=fig.waiting, max_prompt=fig.prompt,
                      max_output=fig.output)


def _fair_run(cfg: Config, reqs: list[Request], *, max_steps: int = 400_000) -> tuple[int, Figures, int] | None:
    """fair's worst wait on `reqs`, the run's figures and its longest guard (the
    most steps any r* took from its choice to its admission; 0 with none);
    None when the run cannot complete."""
    gate = _TimedGate()
    try:
        result = run(replace(cfg, policy="fair"), Workload(reqs), max_steps=max_steps, gate=gate)
    except (DriverStuck, ValueError):
        return None
    waits = result.waits()
    times = gate.guard.times if isinstance(gate.guard, _TimedGuard) else []
    return (max(waits.values()) if waits else 0), figures_of(reqs, result.records), max(times, default=0)


def witness_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """Workloads built to wait long within `fig`: the LoRA slots taken by
    L-output requests of `max_loras` adapters, arriving at most Qw a step
    so that each is in at once (or no such lead), then as many requests as
    `fig` lets wait, each of the next adapter in turn, every one with L
    outputs and a 1-token or a P-token prompt. With A adapters and m slots,
    adapters take the slots about A / m times in a row, each time for about
    L steps, whatever the rule: only the order in which the waiting ones get
    a slot is the rule's."""
    lora = fig.adapters > 0
    per_step = max(1, fig.waiting)
    for lead in ((min(cfg.max_loras, fig.adapters, cfg.max_num_seqs) if lora else 0), 0):
        k = min(fig.waiting, fig.present - lead)
        if k < 1:
            continue
        after = 1 + -(-lead // per_step)  # the step after the lead's last arrival
        for prompt in (1, fig.prompt):
            first = [Request(f"s{i}", i + 1, 1, fig.output, 1 + i // per_step) for i in range(lead)]
            rest = [Request(f"w{i}", (lead + i) % fig.adapters + 1 if lora else 0, prompt, fig.output,
                            after if lead else 1) for i in range(k)]
            yield first + rest


STREAM_PERIODS = (1, 2, 4)  # steps between a slot holder's stream requests


def stream_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """Workloads that keep the LoRA slots busy (`vllm`'s starvation shape):
    each of `max_loras` adapters sends an L-output request every p steps for
    a while, and from step 2 a block of k requests of the other adapters,
    in turn, waits behind them. Under fair each of the block is put first in
    its turn and waits for a victim's drain and the gap after the guard
    before it; with one adapter per request that is one guard per request,
    which is what B charges. Only shapes whose streams fit in Q beside the
    block are built (m ceil(L / p) + k <= Q)."""
    m, L, P = cfg.max_loras, fig.output, fig.prompt
    others = fig.adapters - m
    if others < 1:
        return
    for period in STREAM_PERIODS:
        for frac in (1.0, 0.5):
            k = max(1, int(min(fig.waiting, fig.present) * frac))
            if m * -(-L // period) + k > fig.present:
                continue
            for horizon in (4 * L, 16 * L):
                streams = [Request(f"s{a}_{t}", a, 1, L, t) for a in range(1, m + 1) for t in range(1, horizon, period)]
                block = [Request(f"w{i}", m + 1 + i % others, P if i % 2 else 1, L, 2) for i in range(k)]
                yield streams + block


@dataclass
class _FeedGuard(_TimedGuard):
    """fair's guard, noting per scan whether a guard runs and its deadline, and
    each step a deadline is set (what `feeder_candidates` feeds)."""

    scans: dict[int, tuple[bool, dict[int, int]]] = field(default_factory=dict)  # step -> (r* set, deadlines)
    deadlines: list[tuple[int, int, int]] = field(default_factory=list)  # (step, a victim, deadline)

    def begin_scan(self, step: int, stale: Callable[[str], bool] = lambda rid: False) -> str | None:
        star = super().begin_scan(step, stale)
        self.scans[step] = (self.star is not None, dict(self.deadline))
        return star

    def visit_star(self, left: dict[int, int]) -> None:
        before = set(self.victims)
        super().visit_star(left)
        if self.victims and self.victims != before:
            self.deadlines.append((self.step, max(self.victims), next(iter(self.deadline.values()))))
            self.scans[self.step] = (True, dict(self.deadline))


class _FeedGate(FairGate):
    guard_class = _FeedGuard


FEEDERS = 200  # the most feeders `feeder_candidates` tries per candidate (each try is one run)


def _feeds(fig: Figures, reqs: list[Request], guard: _FeedGuard, records: list[StepRecord],
           deadline_feeds: int = 1) -> list[tuple]:
    """Where a feeder would stretch the run, in step order: (arrival, key,
    adapter, outputs). Wherever a slot holder is about to lose its last
    running request while requests wait, one more of its adapter the step
    before: with L outputs outside a guard, with the outputs that end by
    the deadline for a victim inside one; and, the step after a guard sets
    its deadline, `deadline_feeds` of a victim ending by it."""
    L, adapter = fig.output, {r.id: r.adapter for r in reqs}
    out = [(t + 1, ("deadline", t, j), victim, min(L, dl - t - 1)) for t, victim, dl in guard.deadlines
           if dl - t - 1 >= 1 for j in range(deadline_feeds)]
    for prev, rec in zip(records, records[1:], strict=False):
        if not rec.waiting or rec.step not in guard.scans:
            continue
        guarded = guard.scans[rec.step][0]
        deadline = guard.scans.get(prev.step, (False, {}))[1]
        lost = {adapter[r] for r in prev.running} - {adapter[r] for r in rec.running} - {0}
        for a in sorted(lost):
            o = L if not guarded else min(L, deadline.get(a, prev.step) - prev.step)
            if o >= 1:
                out.append((prev.step, ("slot", prev.step, a), a, o))
    return sorted(out, key=lambda f: f[0])


@dataclass
class _FedRun:
    """fair's run on a candidate, with the deadlines noted (`_FeedGuard`)."""

    wait: int  # the worst wait
    guard: _FeedGuard
    records: list[StepRecord]
    waits: dict[str, int]


def _feed_run(cfg: Config, fig: Figures, reqs: list[Request]) -> _FedRun | None:
    """fair on `reqs`, or None when the run cannot complete or leaves `fig`."""
    gate = _FeedGate()
    try:
        res = run(replace(cfg, policy="fair"), Workload(reqs), max_steps=400_000, gate=gate)
    except (DriverStuck, ValueError):
        return None
    if fig.exceeded_by(figures_of(reqs, res.records)) or not isinstance(gate.guard, _FeedGuard):
        return None
    waits = res.waits()
    return _FedRun(max(waits.values(), default=0), gate.guard, res.records, waits)


def _fed(cfg: Config, fig: Figures, reqs: list[Request], feeder_prompt: int,
         deadline_feeds: int = 1) -> list[Request] | None:
    """`reqs` with feeders added one at a time in step order (`_feeds`), each
    kept if the run stays within `fig`: a feeder changes the run only from
    its arrival on, so the feeds found before it still apply. None when
    `reqs` itself is not within `fig`."""
    got, tried = _feed_run(cfg, fig, reqs), set()
    for n in range(FEEDERS if got is not None else 0):
        feeds = [f for f in _feeds(fig, reqs, got.guard, got.records, deadline_feeds) if f[1] not in tried]
        if not feeds:
            break
        arrival, key, a, o = feeds[0]
        tried.add(key)
        cand = reqs + [Request(f"f{n}", a, feeder_prompt, o, arrival)]
        again = _feed_run(cfg, fig, cand)
        if again is not None:
            reqs, got = cand, again
    return reqs if got is not None else None


def feeder_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """Workloads that make every guard and gap as long as the rule lets them:
    a block of Qw or Qw - 1 requests (L outputs, a 1-token or a P-token
    prompt, each of the next adapter in turn) waits, behind `max_loras`
    lead requests or none, and *feeders* keep the slots busy (`_fed`): one
    of a slot's adapter arrives whenever its slot is about to change hands
    while the block waits, with L outputs outside a guard (no slot holder is
    a victim then) and, inside one, for a victim with the outputs that end
    by the deadline (mechanism 3 lets it in); and one of a victim arrives
    the step after a guard sets its deadline (two in the last variants,
    which wait longer on a family whose KV runs out, `adv-fairv9-kv-wait`).
    So each guard waits out a drain stretched by S and each gap keeps r*'s
    adapter in the slot, which is what G and the gap charge; with a P-token
    prompt a feeder's prefill stretches it further."""
    lora = fig.adapters > 0
    per_step = max(1, fig.waiting)
    leads = sorted({min(cfg.max_loras, fig.adapters, cfg.max_num_seqs) if lora else 0, 0})
    one = ((fig.prompt, 1, 1), (fig.prompt, fig.prompt, 1), (1, 1, 1), (1, fig.prompt, 1))
    for feeds in (one, ((fig.prompt, 1, 2),)):  # (block prompt, feeder prompt, feeders at a deadline)
        for k in sorted({fig.waiting, fig.waiting - 1} - {0}, reverse=True):
            for lead in leads:
                if k + lead > fig.present:
                    continue
                after = 1 + -(-lead // per_step) if lead else 1
                for prompt, feeder_prompt, deadline_feeds in feeds:
                    first = [Request(f"s{i}", i + 1, 1, fig.output, 1 + i // per_step) for i in range(lead)]
                    block = [Request(f"w{i}", (lead + i) % fig.adapters + 1 if lora else 0, prompt, fig.output,
                                     after) for i in range(k)]
                    fed = _fed(cfg, fig, first + block, feeder_prompt, deadline_feeds)
                    if fed is not None:
                        yield fed


RELAY_PERIODS = (0, 2)  # a relay request arrives every L - this many steps


def _late_fed(cfg: Config, fig: Figures, reqs: list[Request]) -> list[Request] | None:
    """`reqs` with a *late feeder* per guard, in step order: a request of the
    victim with a P-token prompt arriving k steps before the deadline (k the
    prefill interval) with the k outputs (else 1) that end by it if it is let
    in on arrival, so mechanism 3 lets it in and its stay past the deadline
    is all prefill. Each is kept if the run stays within `fig` and its worst
    wait does not drop. None when `reqs` itself is not within `fig`."""
    k = max(1, cfg.prefill_schedule_interval)
    got = _feed_run(cfg, fig, reqs)
    if got is None:
        return None
    wait, guard = got.wait, got.guard
    tried: set[tuple[int, int]] = set()
    for n in range(FEEDERS):
        todo = [(v, dl) for _t, v, dl in guard.deadlines if (v, dl) not in tried and dl - k >= 1]
        if not todo:
            break
        victim, dl = todo[0]
        tried.add((victim, dl))
        for outputs in sorted({min(k, fig.output), 1}, reverse=True):
            cand = reqs + [Request(f"l{n}", victim, fig.prompt, outputs, dl - k)]
            again = _feed_run(cfg, fig, cand)
            if again is not None and again.wait >= wait:
                reqs, wait, guard = cand, again.wait, again.guard
                break
    return reqs


def squeeze_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """A budget squeeze, for a family where nobody waits for a seat or a
    slot: d = Q - Qw - 1 requests with 1-token prompts and L outputs decode
    (arriving at most Qw a step, the adapters in turn), then Qw requests
    with P-token prompts and one output arrive every step. Each step the
    decodes take d tokens of the budget before the prefills, so where Qw P
    is about T what the prefills leave over grows by d a step, until a
    step's budget is spent before its last arrival, which waits. The stream
    is cut after the first step in which somebody waits (later arrivals
    would only raise Qw)."""
    per_step = max(1, fig.waiting)
    decoders = fig.present - per_step - 1
    if decoders < 1:
        return
    first = [Request(f"d{i}", i % fig.adapters + 1 if fig.adapters else 0, 1, fig.output, 1 + i // per_step)
             for i in range(decoders)]
    start = 2 + (decoders - 1) // per_step
    stream = [Request(f"p{s}_{j}", 0, fig.prompt, 1, start + s) for s in range(fig.output) for j in range(per_step)]
    try:
        res = run(replace(cfg, policy="fair"), Workload(first + stream), max_steps=20 * fig.output + 100)
    except (DriverStuck, ValueError):
        return
    waits = res.waits()
    waited = [r.arrival for r in stream if waits.get(r.id, 0) > 0]
    if waited:
        yield first + [r for r in stream if r.arrival <= min(waited)]


def relay_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """Workloads for a DP throttle (`prefill_schedule_interval` k > 1), which
    defers prefills to every k-th step only while something decodes: a
    *relay* of base-model requests (1-token prompt, L outputs, one every L
    or L - 2 steps, so one is nearly always decoding beside everything else)
    keeps the throttle on for the whole run, and takes a token of the budget
    each step. A block of Qw - 1 or Qw - 2 requests (P-token prompt, L
    outputs, each of the next adapter in turn) waits from step 2. Under fair
    each of the block is put first in turn: its slot holder, the previous r*
    admitted S steps before, is then still in its throttled prefill, so the
    deadline is a full L + S away; a late feeder of the victim (`_late_fed`)
    let in just before the deadline then stays for a whole throttled,
    budget-shared prefill past it, and the next r* waits for that too. The
    relay runs up to B while the feeders are found, then is cut a little
    after the last admission of a LoRA request."""
    k = cfg.prefill_schedule_interval
    if k <= 1 or fig.adapters < 1:
        return
    L, P = fig.output, fig.prompt
    horizon = bound_at(cfg, fig) + L
    for size in sorted({fig.waiting - 1, fig.waiting - 2}, reverse=True):
        if size < 1 or size + 2 > fig.present:
            continue
        block = [Request(f"w{i}", i % fig.adapters + 1, P, L, 2) for i in range(size)]
        for less in RELAY_PERIODS:
            relay = [Request(f"b{t}", 0, 1, L, t) for t in range(1, horizon, max(1, L - less))]
            fed = _late_fed(cfg, fig, block + relay)
            got = None if fed is None else _feed_run(cfg, fig, fed)
            if got is not None:  # the relay past the block's last admission changes no wait of the block
                end = max(r.arrival + got.waits.get(r.id, 0) for r in fed if r.adapter) + L
                yield [r for r in fed if r.adapter or r.arrival <= end]


def _preemptions(sched: Scheduler, extra: list[Request], horizon: int) -> int:
    """Preemptions in the next `horizon` steps of a copy of `sched` with `extra`
    arriving now and nothing after (what a feeder of `steered_candidates` costs)."""
    s = copy.deepcopy(sched)
    step = s.state.step + 1
    for r in extra:
        s.add(replace(r, arrival=step))
    n = 0
    for i in range(horizon):
        if not s.has_work():
            break
        n += len(s.step(step + i).preempted)
    return n


def _steer(cfg: Config, fig: Figures, k: int, block_out: int, reach: int, chain_out: int,
           max_steps: int = 20_000) -> list[Request] | None:
    """One `steered_candidates` workload, built online: fair is stepped here and
    the feeders of each step are chosen from its state (guard included).

    `max_loras` lead requests take the slots at step 1 and a block of k
    requests (one adapter each beyond them, 1-token prompt, `block_out`
    outputs) waits from step 2. Then each step, while any of the block
    waits, a slot holder about to lose its last running request gets a
    feeder of its adapter: `chain_out` outputs outside a guard; the step
    before the next r* can be chosen (the cooldown's end, or when the
    oldest waiting one has waited S), every holder whose longest request
    has fewer than `reach` outputs left gets one with `reach` + 1, so the
    guard's deadline is as far as `reach` lets it; inside a guard one victim
    (the soonest) is fed with the outputs that end by the deadline and
    drains last, and every other victim, near the deadline, gets a *late*
    one (it stops being a victim and keeps its slot), so only one slot
    frees for r* and the rest of the block stays behind the cap through the
    gap; r*'s adapter gets a feeder when r* is about to take the freed slot
    (the next holder). Where KV is finite a feeder whose outputs would
    preempt (looked ahead `L` steps) is shortened or dropped: under finite
    KV a preemption frees a slot and lets the block in early, so holders
    are kept small (`chain_out`) except for the deadline-setting ones.
    Feeders arrive only within Qw and Q."""
    cfg = replace(cfg, policy="fair")
    m, S, kv = cfg.max_loras, starvation_window(cfg), cfg.kv_blocks
    L = fig.output
    if kv is not None:  # a request must fit the KV cache (`Scheduler.add`)
        L = max((o for o in range(1, L + 1) if blocks_for(1 + o, cfg.block_size) <= kv), default=0)
    if L < 1 or k < 1 or m < 1:
        return None
    reach, chain_out, block_out = min(reach, L - 1), max(1, min(chain_out, L)), max(1, min(block_out, L))
    gate = FairGate()
    sched = Scheduler(cfg, gate)
    st = sched.state
    leads = [Request(f"s{i}", i + 1, 1, chain_out, 1) for i in range(m)]
    block = [Request(f"w{i}", m + 1 + i % max(1, fig.adapters - m), 1, block_out, 2) for i in range(k)]
    out, pending, block_ids = leads + block, {1: list(leads), 2: list(block)}, {r.id for r in block}
    drainer: dict[str, int] = {}  # r* -> the victim left to drain
    n = 0
    try:
        for step in range(1, max_steps):
            arr = pending.pop(step, [])
            guard = gate.guard
            if step > 2 and not any(r in block_ids for r in st.waiting):
                return out
            if step > 2 and guard is not None and st.waiting:
                held: dict[int, int] = {}  # slot holder -> outputs left of its longest request
                for r in st.running:
                    rs = st.reqs[r]
                    if rs.req.adapter > 0:
                        held[rs.req.adapter] = max(held.get(rs.req.adapter, 0), rs.req.max_tokens - rs.generated)
                star = guard.star
                victims = guard.victims if star is not None else set()
                choose = None if star is not None else \
                    max(guard.cool_until, min(st.reqs[r].waiting_since for r in st.waiting) + S)
                if star is not None and victims and star not in drainer:
                    soonest = sorted(victims & set(held), key=lambda a: (held[a], a))
                    if soonest:
                        drainer[star] = soonest[0]
                want: list[tuple[int, int]] = []  # (adapter, outputs)
                for a, left in sorted(held.items()):
                    if a in victims:
                        d = guard.deadline[a]
                        if a == drainer.get(star):
                            if left == 1 and d - step >= 1:
                                want.append((a, d - step))
                        elif len(victims) > 1 and (left == 1 or d - step <= 1):
                            late = d - step + 1 <= max(chain_out, 2)
                            want.append((a, max(d - step + 1, chain_out) if late else min(chain_out, d - step)))
                    elif choose is not None and step == choose - 1 and left < reach:
                        want.append((a, reach + 1))
                    elif left == 1:
                        want.append((a, chain_out))
                if star is not None and len(set(held) - {guard.star_adapter}) < m \
                        and guard.star_adapter not in held and guard.star_adapter > 0:
                    want.append((guard.star_adapter, chain_out))  # r* takes a slot now: its successor
                room = min(fig.waiting - len(st.waiting), fig.present - len(st.waiting) - len(st.running)) - len(arr)
                for a, o in want[:max(0, room)]:
                    r = Request(f"f{n}", a, 1, max(1, min(o, L)), step)
                    if kv is not None:
                        base = _preemptions(sched, arr, L + 2)
                        for o2 in sorted({r.max_tokens, 3 * r.max_tokens // 4, r.max_tokens // 2,
                                          min(r.max_tokens, chain_out), 1} - {0}, reverse=True):
                            r = replace(r, max_tokens=o2)
                            if _preemptions(sched, arr + [r], L + 2) <= base:
                                break
                        else:
                            continue
                    n += 1
                    arr.append(r)
                    out.append(r)
            for r in arr:
                sched.add(r)
            if st.waiting or st.running:
                sched.step(step)
    except (ScheduleError, ValueError):
        return None
    return None


STEER_REACH = (1.0, 0.75)  # `steered_candidates`: the deadline-setting feeders' outputs, as a share of L


def steered_candidates(cfg: Config, fig: Figures) -> Iterator[list[Request]]:
    """Blocks that wait behind slot holders fed online, one step at a time,
    from fair's own state (`_steer`): every r* of the block finds every slot
    held by a request with about `reach` outputs left (so its deadline is
    `reach` + S away), only one slot drains by the deadline (the other
    victims get a late feeder and stay), r*'s adapter is fed as it takes
    the slot, and through the gap the block stays behind the cap. So each
    of the block waits S, then a guard of `reach` + S and a gap of S per
    request ahead of it, which is the G + S per guard that B charges, less
    its drain and budget slack. Under finite KV (`adv-fairv10-kv-throughput`)
    the plain and fed blocks lose this: a holder whose KV runs out is
    preempted, its slot frees and r* (and the block behind it) walks in
    early, so here the holders are fed short requests, only the
    deadline-setting ones are long, and a feeder that would preempt within
    L steps is shortened. A block request has one adapter of its own where
    the figures allow (the free witness); with the adapters kept the block
    shares them, and still waits more than 4x the worst wait on 12 of the
    families only the free witness settled before (`adv-fair-wait`: 116
    against 21, six adapters). The block leaves room in Qw for the
    holders' feeders (k = Qw - max_loras, Qw - max_loras - 1)."""
    m = cfg.max_loras
    for k in sorted({fig.waiting - m, fig.waiting - m - 1}, reverse=True):
        for share in STEER_REACH:
            reach = max(1, int(fig.output * share))
            got = _steer(cfg, fig, k, 1, reach, max(2, fig.output // 4))
            if got is not None:
                yield got


def _mutate_within(rng: random.Random, reqs: list[Request], fig: Figures, fresh: int) -> list[Request]:
    out = list(reqs)
    top = max(1, fig.adapters)
    op = rng.random()
    if op < 0.1 and len(out) > 1:
        out.pop(rng.randrange(len(out)))
    elif op < 0.2:
        base = rng.choice(out)
        out.append(replace(base, id=f"x{fresh}", adapter=rng.randint(1, top) if fig.adapters else 0))
    else:
        i = rng.randrange(len(out))
        r = out[i]
        what = rng.choice(["adapter", "prompt_tokens", "max_tokens", "arrival"])
        if what == "adapter" and fig.adapters:
            r = replace(r, adapter=rng.randint(1, top))
        elif what == "prompt_tokens":
            r = replace(r, prompt_tokens=rng.randint(1, fig.prompt))
        elif what == "max_tokens":
            r = replace(r, max_tokens=rng.randint(1, fig.output))
        else:
            r = replace(r, arrival=max(1, r.arrival + rng.randint(-3, 3)))
        out[i] = r
    return out


@dataclass
class Witness:
    """The longest fair wait found on a workload within a run's figures."""

    wait: int
    figures: Figures
    requests: list[Request]


Shape = Callable[[Config, Figures], Iterator[list[Request]]]  # a builder of witness candidates


def witness(cfg: Config, fig: Figures, *, climb_iters: int = 0, seed: int = 0, free: bool = False,
            enough: int | None = None, shapes: tuple[Shape, ...] | None = None) -> Witness | None:
    """The best candidate of `shapes` (default `witness_candidates`; also
    `stream_candidates`, `feeder_candidates`, `relay_candidates`,
    `steered_candidates`) that stays within `fig`, then (with `climb_iters`)
    hill-climbed on fair's worst wait, every step kept
    within `fig` (a mutation that exceeds a figure is thrown away); with
    `enough`, both stop once a witness waits longer than it. With `free`,
    within B's own figures only: the witness may use up to one adapter per
    waiting request beyond the `max_loras` that hold the slots."""
    target = replace(fig, adapters=fig.waiting + cfg.max_loras + 1) if free and fig.adapters else fig
    best: Witness | None = None
    for cand in chain.from_iterable(shape(cfg, target) for shape in shapes or (witness_candidates,)):
        if enough is not None and best is not None and best.wait > enough:
            break  # the shapes are lazy: the rest are not built
        got = _fair_run(cfg, cand)
        if got is not None and not fig.exceeded_by(got[1], adapters=not free) and (best is None or got[0] > best.wait):
            best = Witness(got[0], got[1], cand)
    rng = random.Random(seed)
    for i in range(climb_iters if best is not None else 0):
        if enough is not None and best.wait > enough:
            break
        cand = _mutate_within(rng, best.requests, target, i)
        got = _fair_run(cfg, cand)
        if got is not None and not fig.exceeded_by(got[1], adapters=not free) and got[0] >= best.wait:
            best = Witness(got[0], got[1], cand)
    return best


@dataclass
class Tightness:
    """One family's worst wait against B and against witnesses within its figures.

    Verdicts: `within` (B <= 4x the worst wait); `unreachable` (a workload
    within the family's figures, on its configuration, makes fair wait more
    than 4x the family's worst wait, so every sound bound that reads only
    these figures and grows with them is above 4x that worst wait, B
    included; `reads` names the figures); `open` (neither: B is more than
    4x the worst wait and no witness shows that this must be so). `broken`
    would be a witness that waits longer than B: a counterexample to the
    bound."""

    family: str
    worst: int
    bound: int
    figures: Figures
    witness_wait: int  # the witness that keeps the number of adapters too
    witness_bound: int  # B at the witness's own figures (it must hold there)
    guard: int | None = None  # the family run's longest guard (r* chosen -> admitted), when measured
    guard_bound: int | None = None  # G, what `star_admitted_within_G` allows a guard
    free_wait: int | None = None  # the witness within B's figures only (None: not sought)
    free_bound: int | None = None  # B at its own figures
    # The witnesses' workloads (empty when none was found or, from a results file, kept):
    witness_requests: tuple[Request, ...] = field(default=(), compare=False, repr=False)
    free_requests: tuple[Request, ...] = field(default=(), compare=False, repr=False)

    @property
    def verdict(self) -> str:
        if self.witness_wait > self.witness_bound or (self.free_wait or 0) > (self.free_bound or 0):
            return "broken"
        if self.bound <= WITHIN * self.worst:
            return "within"
        if self.witness_wait > WITHIN * self.worst or (self.free_wait or 0) > WITHIN * self.worst:
            return "unreachable"
        return "open"

    @property
    def reads(self) -> str:
        """The figures an "unreachable" verdict covers: "Q,Qw,P,L,A" when the
        witness that keeps the adapters settles it (a bound linear in the
        adapters is covered too), "Q,Qw,P,L" (B's) when only the free one does."""
        if self.verdict != "unreachable":
            return "-"
        return "Q,Qw,P,L,A" if self.witness_wait > WITHIN * self.worst else "Q,Qw,P,L"


def tightness(family: str, cfg: Config, reqs: list[Request], *, climb_iters: int = 0, seed: int = 0) -> Tightness:
    """`Tightness` of fair (at `cfg`'s S) on `reqs` (fair is run here, so its
    longest guard is measured too)."""
    got = _fair_run(cfg, list(reqs))
    if got is None:
        raise ValueError(f"{family}: fair's run does not complete")
    worst, fig, longest = got
    t = judge(family, cfg, fig, worst, climb_iters=climb_iters, seed=seed)
    fair_cfg = replace(cfg, policy="fair")
    d = drain_steps(fair_cfg, max_prompt=fig.prompt, max_output=fig.output, queue=fig.present)
    d0 = non_decode_steps(fair_cfg, max_prompt=fig.prompt, max_output=fig.output, queue=fig.present)
    return replace(t, guard=longest, guard_bound=guard_steps(fair_cfg, d, d0, fig.present, max_prompt=fig.prompt,
                                                             max_output=fig.output))


def judge(family: str, cfg: Config, fig: Figures, worst: int, *, climb_iters: int = 0, seed: int = 0) -> Tightness:
    """`Tightness` from a run's figures and fair's worst wait there: the
    witness that keeps the adapters, then, where it does not settle the
    verdict, the slot-holding streams (`stream_candidates`), the fed
    blocks (`feeder_candidates`), the relayed blocks (`relay_candidates`),
    the budget squeezes (`squeeze_candidates`) and the steered blocks
    (`steered_candidates`) with the adapters kept, then the free witness,
    all of them included (climbed only until it settles the verdict)."""
    fair_cfg = replace(cfg, policy="fair")
    w = witness(fair_cfg, fig, climb_iters=climb_iters, seed=seed)
    t = Tightness(family, worst, bound_at(cfg, fig), fig, 0, 0) if w is None else \
        Tightness(family, worst, bound_at(cfg, fig), fig, w.wait, bound_at(cfg, w.figures),
                  witness_requests=tuple(w.requests))
    if t.verdict != "open":
        return t
    for shape, enough in ((stream_candidates, None), (feeder_candidates, WITHIN * worst),
                          (relay_candidates, WITHIN * worst), (squeeze_candidates, WITHIN * worst),
                          (steered_candidates, WITHIN * worst)):  # adapters kept
        s = witness(fair_cfg, fig, shapes=(shape,), enough=enough)
        if s is not None and s.wait > t.witness_wait:
            t = replace(t, witness_wait=s.wait, witness_bound=bound_at(cfg, s.figures),
                        witness_requests=tuple(s.requests))
            if t.verdict != "open":
                return t
    f = witness(fair_cfg, fig, climb_iters=climb_iters, seed=seed, free=True, enough=WITHIN * worst,
                shapes=(witness_candidates, stream_candidates, feeder_candidates, relay_candidates,
                        squeeze_candidates, steered_candidates))
    return t if f is None else replace(t, free_wait=f.wait, free_bound=bound_at(cfg, f.figures),
                                       free_requests=tuple(f.requests))


def print_tightness(rows: list[Tightness], title: str, noun: str = "families") -> dict[str, int]:
    """One line per family, then how many of each verdict."""
    print(f"== {title}: fair's B against its worst wait, and witnesses within the same figures ==")
    print(f"{'family':46}{'worst':>7}{'B':>9}{'B/worst':>9}{'witness':>9}{'/worst':>8}{'free':>7}{'/worst':>8}"
          f"{'guard/G':>9}  verdict")
    counts: dict[str, int] = {}
    for t in rows:
        counts[t.verdict] = counts.get(t.verdict, 0) + 1
        free = ("-", "-") if t.free_wait is None else (str(t.free_wait), f"{t.free_wait / max(1, t.worst):.1f}")
        reads = f" ({t.reads})" if t.verdict == "unreachable" else ""
        print(f"{t.family:46}{t.worst:>7}{t.bound:>9}{t.bound / max(1, t.worst):>9.1f}{t.witness_wait:>9}"
              f"{t.witness_wait / max(1, t.worst):>8.1f}{free[0]:>7}{free[1]:>8}{_guard_share(t):>9}  "
              f"{t.verdict}{reads}", flush=True)
    by_reads = {r: sum(t.reads == r for t in rows) for r in ("Q,Qw,P,L,A", "Q,Qw,P,L")}
    print(f"{len(rows)} {noun}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f" (within: B <= {WITHIN}x the worst wait; unreachable: a witness waits > {WITHIN}x it, so no "
          "bound in its figures is within 4x; open: neither; broken: a witness beats B)")
    if counts.get("unreachable"):
        print(f"unreachable, by the figures the witness kept: Q,Qw,P,L and the adapters {by_reads['Q,Qw,P,L,A']}, "
              f"B's own (Q,Qw,P,L) {by_reads['Q,Qw,P,L']}")
    return counts


def _guard_share(t: Tightness) -> str:
    """The longest guard over G (how much of `star_admitted_within_G`'s allowance a guard used)."""
    return "-" if t.guard is None or not t.guard_bound else f"{t.guard / t.guard_bound:.3f}"


def tightness_dict(t: Tightness) -> dict:
    return {"family": t.family, "worst": t.worst, "bound": t.bound, "figures": asdict(t.figures),
            "witness_wait": t.witness_wait, "witness_bound": t.witness_bound, "guard": t.guard,
            "guard_bound": t.guard_bound, "free_wait": t.free_wait, "free_bound": t.free_bound,
            "verdict": t.verdict, "reads": t.reads}


def tightness_of(d: dict) -> Tightness:
    """The inverse of `tightness_dict` (the verdict is recomputed)."""
    return Tightness(d["family"], d["worst"], d["bound"], Figures(**d["figures"]), d["witness_wait"],
                     d["witness_bound"], d.get("guard"), d.get("guard_bound"), d.get("free_wait"),
                     d.get("free_bound"))


def _family_job(args: tuple[str, Config, list[Request], int]) -> Tightness:
    name, cfg, reqs, iters = args
    return tightness(name, replace(cfg, policy="fair"), reqs, climb_iters=iters, seed=len(name))


def family_gap(directory: Path | None = None, *, climb_iters: int = 250, processes: int = 2,
               progress: Callable[[str], object] = progress) -> list[Tightness]:
    """`Tightness` on every family of `experiments.families` that B applies to (one
    priority), each witness hill-climbed `climb_iters` steps; a progress
    line per family as it is judged."""
    import multiprocessing
    import time

    fams = all_families(directory or FAMILY_DIR)
    jobs = [(n, cfg, reqs, climb_iters) for n, (cfg, reqs) in sorted(fams.items())
            if bound_applies(cfg, (r.priority for r in reqs)) is None]
    rows: list[Tightness] = []
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        for i, t in enumerate(pool.imap_unordered(_family_job, jobs), 1):
            rows.append(t)
            progress(f"  [{i}/{len(jobs)}] {t.family}: {t.verdict} ({time.perf_counter() - t0:.0f} s)")
    return sorted(rows, key=lambda t: t.family)


WITNESSES = "bound-witnesses.json"  # beside bound-gap.json: the workloads behind its witness waits


def witnesses_doc(rows: list[Tightness]) -> dict:
    """The witness workloads of `rows`, per family: "kept" (the witness that
    keeps the adapters) and "free" (within B's figures only) when found,
    each as its wait and its requests [id, adapter, prompt, max_tokens,
    arrival] (priority 0: B applies among equal priorities only). With
    the family files, what `experiments/results/bound-gap.json` claims can be
    re-measured without searching again (`tests/test_bound_gap.py`)."""
    def one(wait: int | None, reqs: tuple[Request, ...]) -> dict:
        return {"wait": wait, "requests": [[r.id, r.adapter, r.prompt_tokens, r.max_tokens, r.arrival] for r in reqs]}

    doc: dict[str, dict] = {}
    for t in rows:
        got = {}
        if t.witness_requests:
            got["kept"] = one(t.witness_wait, t.witness_requests)
        if t.free_requests:
            got["free"] = one(t.free_wait, t.free_requests)
        if got:
            doc[t.family] = got
    return doc


def write_witnesses(path: Path, rows: list[Tightness]) -> None:
    """`witnesses_doc(rows)` to `path`, one line per family."""
    import json

    wit = witnesses_doc(rows)
    path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in wit.items()) + "\n}\n")
    print(f"wrote {path} ({len(wit)} witnessed)")


def witness_requests(entry: dict) -> list[Request]:
    """The requests of one `witnesses_doc` entry ("kept" or "free")."""
    return [Request(i, a, p, o, t) for i, a, p, o, t in entry["requests"]]


def main_gap(out: Path, *, climb_iters: int = 250) -> int:
    """`python -m experiments.cli --bound-gap`: `family_gap` printed and written to JSON
    (`bound-gap.json`, and the witness workloads in `WITNESSES`)."""
    import json
    import time

    t0 = time.perf_counter()
    rows = family_gap(climb_iters=climb_iters)
    counts = print_tightness(rows, f"adversarial and coded families (witness climbed {climb_iters} steps)")
    doc = {"climb_iters": climb_iters, "counts": counts, "rows": [tightness_dict(t) for t in rows]}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bound-gap.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    write_witnesses(out / WITNESSES, rows)
    print(f"bound gap done in {time.perf_counter() - t0:.0f} s")
    return 1 if counts.get("broken") else 0

if __name__ == "__main__":
    print(f"{'family':28}{'variant':16}{'start':>8}{'found':>8}{'wait':>7}{'B':>7}{'B/wait':>8}")
    for c in report():
        print(f"{c.family:28}{c.variant:16}{c.start_ratio:>8.3f}{c.ratio:>8.3f}{c.worst:>7}{c.bound:>7}"
              f"{c.bound / max(1, c.worst):>8.1f}", flush=True)
