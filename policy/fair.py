"""`fair`: vLLM's skip rule with a crash-proof cap and an aging guard (this project's policy).

Rule (v3). Two changes to `vllm`:

*Cap.* The LoRA cap (`spec.cap.cap_blocks`) is counted over the adapters of
every request in `running`, scheduled this step or not, plus those admitted
so far; vLLM counts only running requests scheduled this step. A running
request left unscheduled (async scheduling's sure-to-finish skip, the DP
engine core's prefill throttle, pipeline parallelism, the encoder budget)
keeps its adapter's slot, so no (max_loras+1)-th adapter can join while it
waits and vLLM's `assert len(scheduled_loras) <= max_loras` cannot fire.
This gives `running_lora_cap` under async scheduling too.

*Guard.* Each step, when the waiting scan starts, let the *starving* request
r* be, among the waiting requests that have waited at least
`S = starvation_steps` steps (since they arrived or were last preempted) and
have no async output in flight, the oldest: smallest (priority, under the
priority queue), then the step it joined `waiting`, then arrival order. Any
request can be r*: a base-model request, one whose adapter is active, one
whose adapter is not. r* stays r* until it is admitted. Then:

1. the scan visits r* first;
2. if the cap and capacity let r* in, it is admitted and the scan goes on
   under the cap above;
3. if capacity stops r* (seats, token budget, KV blocks for its whole
   sequence, no chunking, the DP throttle), the scan stops there: vLLM's own
   stops end the scan, and r* is first in line;
4. if the cap blocks r*, the guard picks a *victim*: of the adapters holding
   a slot, the one that has held it longest (then the smallest id), and holds
   every waiting request of it until r* is admitted; the other adapters keep
   flowing. A new victim is picked only when r* is cap-blocked again and no
   victim holds a slot.

Why "the oldest of any kind". The first design let only LoRA requests of an
inactive adapter be r*; a base-model request, which can never be one, was
held back for as long as a stream of later starving LoRA requests lasted,
each visited first (found by an adversarial search; its wait grew linearly
with the stream: `tests/test_fair_growth.py`). With r* the oldest starving
request of any kind, a later arrival can become r* only after every older
starving request has been admitted.

Why one victim. Holding every other adapter cascades (0.27 of `vllm`'s
throughput on the seed workload in the first version); draining the adapter
that has held its slot longest is all it takes to free a slot (as SGLang's
LoRADrainer drains one adapter and LoRAX rotates adapters by time slice).

Bound. Let P be the largest prompt, L the largest `max_tokens`,
W = P + L - 1 (the tokens one request computes in one stay in `running`),
N = min(`max_num_seqs`, Q), T = `max_num_batched_tokens`, c the long-prefill
threshold (chunks = ceil(W / c), 1 when off), k = `prefill_schedule_interval`
(1 without DP throttling), Q the most requests present (waiting or
running) and Qw <= Q the most requests waiting when a step starts. Then

    D = floor(N * W / T) + k * chunks + (L - 1) + (2 if async scheduling else 0)

bounds the steps a request spends in `running` while none is inserted ahead
of it (admissions append; preemption only removes): in each step it is either
budget-starved, which spends T tokens of the at most N * W that it and the
requests ahead of it still need, or gets all it asks for: a prefill chunk
(deferred on at most k - 1 throttled steps in a row) or a decode; async
scheduling adds the sure-to-finish step and the output that lands one step
late. A guard ends within G = 3D + 3 steps of r* being chosen: until r* is
first visited nobody is admitted, so within D + 1 steps running empties or the
scan reaches r*; a victim gains no request and leaves `running` within D
steps, no adapter can take its slot before r* (r* is visited first and the
slots are full until then); after that a capacity stop at r* admits nobody,
so within D + 1 steps `running` is empty (no decode left: the throttle is off)
and r* gets in. Every r* chosen once a request r has waited S steps is older
than r (r is a candidate and the oldest candidate wins; a sticky r* chosen
before was older still), so it was already waiting when the step r arrived
at started (it has waited continuously since it last joined `waiting`, no
later than r did), and each is r* at most once (a preempted request rejoins
`waiting` younger). Hence, r included, at most Qw guards end before r is in,
and every request is first admitted within

    B = S + Qw * (3D + 3)

steps of arriving, under these assumptions: every request has the same
priority (FCFS, or the priority queue with one priority: with mixed
priorities a stream of more urgent requests may delay a less urgent one
without limit, which is what priorities ask for), and no running request is
left unscheduled for a reason outside the model (pipeline parallelism,
encoder budget). Synchronous or async scheduling, KV that can run out and DP
throttling are all covered. The argument is checked, not trusted: the state
machines assert B on every run, `tests/test_fair_growth.py` hunts for a wait
that grows with the stream, and `bench/` reports the worst wait / B a search
finds per workload family.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, ScanContext, running_loras
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.properties import StepView
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord, peak_present, peak_waiting


@dataclass(frozen=True)
class Waiting:
    """A waiting request as the guard sees it."""

    id: str
    adapter: int
    waiting_since: int  # step it last joined `waiting` (arrival or preemption)
    seq: int  # arrival order
    priority: int = 0
    stale: bool = False  # async output still in flight: vLLM skips it


@dataclass
class FairGuard:
    """The guard's decisions and memory, on plain data.

    One object serves the reference gate, `fair` inside vLLM
    (`lora_sched.scheduler`) and the trace checker (`FairHolds`), so the three
    cannot drift apart.
    """

    starvation_steps: int
    max_loras: int
    priority_queue: bool = False
    active_since: dict[int, int] = field(default_factory=dict)  # adapter -> first step of its run holding a slot
    star: str | None = None  # r*, kept from step to step until admitted
    star_adapter: int = 0
    victims: set[int] = field(default_factory=set)  # adapters held for r*

    def _age_key(self, w: Waiting) -> tuple[int, int, int]:
        return (w.priority if self.priority_queue else 0, w.waiting_since, w.seq)

    def begin_scan(self, step: int, waiting: list[Waiting]) -> str | None:
        """Find r* when a waiting scan starts (sticky until admitted); returns it or None."""
        by_id = {w.id: w for w in waiting}
        if self.star is not None and self.star not in by_id:
            self.star, self.victims = None, set()  # aborted (or admitted behind the guard's back)
        if self.star is None:
            ready = [w for w in waiting if self.candidate(step, w)]
            if ready:
                star = min(ready, key=self._age_key)
                self.star, self.star_adapter, self.victims = star.id, star.adapter, set()
        if self.star is not None and by_id[self.star].stale:
            return None  # cannot be admitted this step; stays r*
        return self.star

    def candidate(self, step: int, w: Waiting) -> bool:
        """May `w` become r*? It has waited S steps and can be admitted now."""
        return step - w.waiting_since >= self.starvation_steps and not w.stale

    def visit_star(self, active: set[int]) -> None:
        """The scan reached r*: pick a victim if the cap blocks it (rule 4)."""
        if cap_blocks(active, self.star_adapter, self.max_loras) and not (self.victims & active):
            self.victims.add(min(active, key=lambda a: (self.active_since.get(a, 0), a)))

    def holds(self, rid: str, adapter: int) -> bool:
        """Is `rid` held for r* (rule 4)?"""
        return self.star is not None and rid != self.star and adapter in self.victims

    def admitted(self, rid: str) -> None:
        if rid == self.star:
            self.star, self.victims = None, set()

    def end_step(self, step: int, active: set[int]) -> None:
        """Every step, scan or not: remember since when each adapter holds a slot."""
        self.active_since = {a: self.active_since.get(a, step) for a in active}


def drain_steps(config: Config, *, max_prompt: int, max_output: int, queue: int | None = None) -> int:
    """D of the module docstring: the most steps a request stays in `running`
    (N is `max_num_seqs`, or Q when fewer requests are ever present)."""
    work = max_prompt + max_output - 1
    c = config.long_prefill_token_threshold
    chunks = -(-work // c) if c > 0 else 1
    seats = config.max_num_seqs if queue is None else min(config.max_num_seqs, queue)
    return (seats * work) // config.max_num_batched_tokens \
        + config.prefill_schedule_interval * chunks + (max_output - 1) + (2 if config.async_scheduling else 0)


def fair_bound(config: Config, *, queue: int, max_prompt: int, max_output: int, waiting: int | None = None) -> int:
    """B of the module docstring for a configuration and workload bounds
    (`waiting` is Qw; without it, Q stands in for it, as Qw <= Q)."""
    d = drain_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    return config.starvation_steps + (queue if waiting is None else waiting) * (3 * d + 3)


def workload_bound(config: Config, requests: Iterable[Request], *, queue: int | None = None,
                   waiting: int | None = None) -> int:
    """B for a workload; Q (and Qw) default to its number of requests (a safe
    upper bound on how many are ever present at once; pass the observed peaks
    for a tighter B, or use `observed_bound`)."""
    reqs = list(requests)
    return fair_bound(config, queue=len(reqs) if queue is None else queue, waiting=waiting,
                      max_prompt=max(r.prompt_tokens for r in reqs),
                      max_output=max(r.max_tokens for r in reqs))


def observed_bound(config: Config, requests: Iterable[Request], records: Iterable[StepRecord]) -> int:
    """B for a run: Q and Qw the peaks its step records show."""
    recs = list(records)
    return workload_bound(config, requests, queue=peak_present(recs), waiting=peak_waiting(recs))


def bound_applies(config: Config, priorities: Iterable[int], *, skipped_running: bool = False) -> str | None:
    """Why B does not apply to a run, or None when it does (the docstring's assumptions)."""
    if len(set(priorities)) > 1:
        return "requests of different priorities (B holds among equal priorities only)"
    if skipped_running:
        return "running requests skipped for reasons outside the model (PP, encoder budget)"
    return None


class FairGate:
    name = "fair"
    guard_class: type[FairGuard] = FairGuard

    def __init__(self) -> None:
        self.guard: FairGuard | None = None

    def _guard(self, ctx: ScanContext) -> FairGuard:
        if self.guard is None:
            cfg = ctx.state.config
            self.guard = self.guard_class(cfg.starvation_steps, cfg.max_loras, cfg.queue == "priority")
        return self.guard

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        st = ctx.state
        waiting = [Waiting(r, st.adapter(r), st.reqs[r].waiting_since, st.reqs[r].seq, st.reqs[r].req.priority,
                           st.reqs[r].stale > 0) for r in queue]
        star = self._guard(ctx).begin_scan(ctx.step, waiting)
        if star is None:
            return queue
        return [star] + [r for r in queue if r != star]

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        guard = self._guard(ctx)
        active = running_loras(ctx)
        if rid == guard.star:
            guard.visit_star(active)
        adapter = ctx.state.adapter(rid)
        if guard.holds(rid, adapter) and self.keep_held(ctx, rid, adapter):
            return Decision.SKIP, "fair_guard"
        if cap_blocks(active, adapter, ctx.state.config.max_loras):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None

    def keep_held(self, ctx: ScanContext, rid: str, adapter: int) -> bool:
        """The guard holds `rid`; may a variant let it in anyway? (fair: never.)"""
        return True

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        self._guard(ctx).admitted(rid)

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        self._guard(ctx).end_step(ctx.step, running_loras(ctx))


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Replays `FairGuard` on the observed state alone (waiting order,
    waiting-since steps, the running requests and admissions of each step),
    so a trace recorded from `fair` inside vLLM is judged the same way as the
    reference. It declares two kinds of hold: the guard's victims
    (`fair_guard`) and fair's cap over every running request's adapter
    (`fair_cap`), which is stricter than the cap `no_hol_blocking` applies.
    """

    def __init__(self, config: Config) -> None:
        self.guard = FairGuard(config.starvation_steps, config.max_loras, config.queue == "priority")
        self._order: list[str] = []
        self._base: set[int] = set()

    def begin(self, view: StepView) -> str | None:
        rec, cfg = view.rec, view.config
        running = [r for r in rec.running if r not in rec.preempted]
        self._base = {view.adapter[r] for r in running if view.adapter[r] > 0}
        waiting = [Waiting(r, view.adapter[r], view.waiting_since[r], view.seq[r], view.priority[r],
                           r in view.in_flight) for r in rec.waiting]
        star = self.guard.begin_scan(rec.step, waiting)
        budget = cfg.max_num_batched_tokens - sum(n for r, n in rec.scheduled.items() if r not in rec.admitted)
        if star is not None and budget > 0 and len(running) < cfg.max_num_seqs:
            self.guard.visit_star(self._base)
        if star is not None and star in rec.admitted:
            self.guard.admitted(star)
        self._order = ([star] if star is not None else []) + [r for r in rec.waiting if r != star]
        return star

    def hold(self, view: StepView, rid: str) -> str | None:
        if self.guard.holds(rid, view.adapter[rid]):
            return "fair_guard"
        admitted = set(view.rec.admitted)
        before = self._order[:self._order.index(rid)] if rid in self._order else []
        active = self._base | {view.adapter[r] for r in before if r in admitted and view.adapter[r] > 0}
        return "fair_cap" if cap_blocks(active, view.adapter[rid], view.config.max_loras) else None

    def end(self, view: StepView) -> None:
        rec = view.rec
        running = [r for r in rec.running if r not in rec.preempted] + list(rec.admitted)
        self.guard.end_step(rec.step, {view.adapter[r] for r in running if view.adapter[r] > 0})
