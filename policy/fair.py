"""`fair`: vLLM's skip rule with a crash-proof cap and an aging guard (this project's policy).

Rule (v6). Two changes to `vllm`:

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
whose adapter is not. r* stays r* until it is admitted. Its *age* is the
steps since it joined `waiting`. Then:

1. the scan visits r* first;
2. if the cap and capacity let r* in, it is admitted and the scan goes on
   under the cap above;
3. if capacity stops r* (seats, token budget, KV blocks for its whole
   sequence, no chunking, the DP throttle), the scan stops there: vLLM's own
   stops end the scan, and r* is first in line;
4. if the cap blocks r* and no victim holds a slot, the guard picks one
   *victim* among the adapters holding a slot: the one with the fewest
   waiting requests (its *backlog*), then the one whose longest-running
   request has the fewest outputs left, then the smallest id. It sets the
   victim's *deadline*: this step plus those outputs left (the step by which
   its slot frees if nothing joins it). Until r* is admitted, a waiting
   request r of a victim is let in only when r and every waiting request of
   its adapter ahead of it in the queue (outside a cohort) are *admissible*
   (so FIFO within the adapter holds), where r is admissible when
   - it was waiting when r* was chosen (it has not left `waiting` since;
     off at S = 0): a *gated* admission; the switch is made for what
     arrives after r* was chosen, and the queue already there goes first,
     as under `vllm` (a finite set); or
   - r*'s age is less than 3S/16 steps per output left of the longest
     request present, holding a LoRA slot or waiting (3 per output at the
     default S = 16; `SWITCH_PRICE`): the *switch price*, since a switch can
     make a request of the evicted adapter wait for a slot about that long
     (the slots' holders and r*'s adapter's queue, which takes the freed
     slot, are among those requests) and then run alone; or
   - it can end by the deadline (step + its outputs left <= deadline, each
     output taking a step): a *drain* admission, free for r*; or
   - r*'s age is less than S/2 steps per output r has left
     (2 * age < S * outputs left), so holding r, which may run alone later
     for up to its outputs left, would cost more than 2/S of r*'s wait: a
     *priced* admission;
   and a *cohort* member is never held: when an r* is admitted at step t,
   the requests of its adapter waiting at t form a cohort, exempt until
   step t + 2S. Each request of a victim admitted while r* waits (gated,
   switch-priced, drain, priced or cohort) moves the deadline, from the
   next step on, to the step it can end by, if later: its slot is taken
   until then anyway. The other adapters keep flowing.

Why "the oldest of any kind". The first design let only LoRA requests of an
inactive adapter be r*; a base-model request, which can never be one, was
held back for as long as a stream of later starving LoRA requests lasted,
each visited first (found by an adversarial search; its wait grew linearly
with the stream: `tests/test_fair_growth.py`). With r* the oldest starving
request of any kind, a later arrival can become r* only after every older
starving request has been admitted.

Why one victim, and why drain, cohort, priced and gated admissions and the
switch price (v4-v6; issue 11's frontier). Holding every other adapter
cascades (0.27 of `vllm`'s throughput on the seed workload in the first
version); draining one adapter is all it takes to free a slot. v3 held
every waiting request of the victim
(the adapter holding its slot longest) while it drained, so the seats stood
idle until its longest request ended and the held requests then ran alone
at the end (0.64 of vllm on a searched family); right after r* got in, the
next r* made r*'s own adapter the victim, so each switch of a slot served
one request (0.37 of vllm on another). A drain admission ends no later than
the slot frees anyway, a cohort is the queue the switch was made for, and a
victim without a backlog costs nothing to drain. v4 stopped there and still
ran at 0.66 of vllm on searched families: a held request that cannot end by
the deadline runs after r*, often alone, so holding a request with n outputs
left can cost up to n steps of the whole run to gain r* a few. v5 prices
that: it holds r only once r* has waited S/2 steps per output of r, so
r's own outputs, run late, cost at most 2/S of the wait the hold ends (1/8
at the default S = 16), and lets the deadline follow the requests a victim
admits, so nothing is held that could end before the slot frees. The switch
the holds buy is not priced: a long request of the victim that arrives just
after it loses its slot can still run late and alone (0.627 of vllm on a
searched family; docs/frontier.md, "the punished switch"). v6 prices the
switch too: nothing of a victim is held before r* has waited 3S/16 steps per
output left of the longest request present, about the most a request of the
evicted adapter can be made to wait for a slot; a switch made at least three
times that far into the run keeps the run >= 0.8 of vllm's (the punished
families run at 1.000; counting only the slots' holders left a waiting
32-output request of the victim to run alone at the end: 0.759 on an
annealed family). And it gates: what was waiting when r* was chosen is never
held, so under overload, when every request is past S and each r* is chosen
only once the one before is in, fair serves each adapter's waiting queue
whole, as vllm does, instead of splitting it at every switch (0.790 of vllm
under v5 on an annealed max_loras-1 family, 1.000 under v6; a gate at the
step r* had waited S steps still split it: 0.973). What a switch still costs
when it comes late, T steps into a run and punished by l steps, is
(T + l) / (T + 2 l): 0.909 on the worst family found, T = 180, l = 20. A hill
climb over workloads finds the worst ratio to vllm per rule: `lora-sched
bench --adversarial`; `python -m lora_sched.bench.anneal` is a second search.

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
late. A guard ends within G = 3D + 3 + L + max(2S, ceil(S L / 2), Qw (D + 1))
steps of r* being chosen at step t0 (the last term only when S > 0):
- until r* is first visited nobody is admitted, so within D + 1 steps
  `running` empties or the scan reaches r*;
- if the cap blocks r* then (step t1 <= t0 + D + 1), the victim gains
  requests by cohort admissions, whose cohorts formed before t0 (a cohort
  forms only when an r* is admitted) and expire by t0 + 2S; by priced and
  switch-priced admissions, only while r*'s age is below S L / 2 (the
  switch price, 3S/16 per output, is below S/2), that is before
  t0 + ceil(S L / 2) (r* was at least S old at t0); by gated admissions,
  of requests waiting when r* was chosen at t0: the scan admits in queue
  order, later arrivals queue behind them, and a step that does not reach
  the last of them admits one of the at most Qw requests ahead of it or
  stops on capacity, which frees within D + 1 steps, so they are all in
  before t1 + Qw (D + 1); and by drain
  admissions, before the deadline, which is set <= t1 + L and moved only by
  the other kinds, each to at most L steps after it. So its last request
  joins before t1 + L + max(2S, ceil(S L / 2), Qw (D + 1)) and leaves
  `running` within D steps of that. No adapter can take its slot before r*
  (r* is visited first and the slots are full until then);
- after that a capacity stop at r* admits nobody, so within D + 1 steps
  `running` is empty (no decode left: the throttle is off) and r* gets in.
Every r* chosen once a request r has waited S steps is older than r (r is a
candidate and the oldest candidate wins; a sticky r* chosen before was older
still), so it was already waiting when the step r arrived at started (it has
waited continuously since it last joined `waiting`, no later than r did),
and each is r* at most once (a preempted request rejoins `waiting`
younger). Hence, r included, at most Qw guards end before r is in, and every
request is first admitted within

    B = S + Qw * (3D + 3 + L + max(2S, ceil(S L / 2), Qw (D + 1)))

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

# The switch price, as a fraction of S per output left of the longest request
# present (holding a LoRA slot or waiting): 3/16, so 3 steps per output at
# the default S = 16. A switch T steps into a run can make a request of the
# evicted adapter wait for a slot about as long as the l outputs the longest
# of those requests has left, and then run alone: about (T + l) / (T + 2 l) of
# vllm's throughput, >= 0.8 (issue 11's goal) when T >= 3 l. Scaled by S so
# that S stays the one knob and S = 0 turns it off.
SWITCH_PRICE = (3, 16)


@dataclass(frozen=True)
class Waiting:
    """A waiting request as the guard sees it."""

    id: str
    adapter: int
    waiting_since: int  # step it last joined `waiting` (arrival or preemption)
    seq: int  # arrival order
    priority: int = 0
    stale: bool = False  # async output still in flight: vLLM skips it
    left: int = 1  # outputs still to produce (max_tokens - generated): steps it needs at least


@dataclass
class FairGuard:
    """The guard's decisions and memory, on plain data.

    One object serves the reference gate, `fair` inside vLLM
    (`lora_sched.scheduler`) and the trace checker (`FairHolds`), so the three
    cannot drift apart. Each feeds it, per step, the waiting queue in order
    (`begin_scan`), the adapters holding a slot with the outputs left of their
    longest-running request (`visit_star`), and r*'s admission (`admitted`).
    """

    starvation_steps: int
    max_loras: int
    priority_queue: bool = False
    star: str | None = None  # r*, kept from step to step until admitted
    star_adapter: int = 0
    star_since: int = 0  # step r* joined `waiting` (its age is step - star_since)
    victims: set[int] = field(default_factory=set)  # adapters held for r*
    deadline: dict[int, int] = field(default_factory=dict)  # victim -> step its slot frees if nothing joins
    cohort: dict[str, int] = field(default_factory=dict)  # request -> first step it may be held again
    step: int = 0
    _queue: list[Waiting] = field(default_factory=list)  # this scan's waiting queue, in order
    _by_id: dict[str, Waiting] = field(default_factory=dict)  # the same, by request id
    scan_deadline: dict[int, int] = field(default_factory=dict)  # the deadlines this scan judges by
    longest: int = 0  # most outputs left of a request holding a LoRA slot or waiting, when the scan reached r*
    chosen_at: int = 0  # the step r* was chosen (0: no r*)

    def _age_key(self, w: Waiting) -> tuple[int, int, int]:
        return (w.priority if self.priority_queue else 0, w.waiting_since, w.seq)

    def begin_scan(self, step: int, waiting: list[Waiting]) -> str | None:
        """Find r* when a waiting scan starts (sticky until admitted); returns it or None.
        `waiting` is the queue in its order."""
        self.step, self._queue = step, list(waiting)
        self._by_id = by_id = {w.id: w for w in waiting}
        self.cohort = {r: until for r, until in self.cohort.items() if r in by_id and until > step}
        if self.star is not None and self.star not in by_id:
            self._clear()  # aborted (or admitted behind the guard's back)
        if self.star is None:
            ready = [w for w in waiting if self.candidate(step, w)]
            if ready:
                star = min(ready, key=self._age_key)
                self.star, self.star_adapter, self.chosen_at = star.id, star.adapter, step
        if self.star is None:
            return None
        self.star_since = by_id[self.star].waiting_since
        self.scan_deadline = dict(self.deadline)  # admissions of this scan move `deadline` for the next one
        if by_id[self.star].stale:
            return None  # cannot be admitted this step; stays r*
        return self.star

    def candidate(self, step: int, w: Waiting) -> bool:
        """May `w` become r*? It has waited S steps and can be admitted now."""
        return step - w.waiting_since >= self.starvation_steps and not w.stale

    def admission(self, w: Waiting) -> str | None:
        """Which of rule 4's four admissions lets `w` (of a victim) in, tried in
        this order, or None: `w` is held (or its adapter is no victim)."""
        if w.adapter not in self.scan_deadline:
            return None
        for kind, ok in (("gated", self.gated), ("switch", lambda _: self.switch_unpaid()),
                         ("drain", self.drains), ("priced", self.priced)):
            if ok(w):
                return kind
        return None

    def _age(self) -> int:
        return self.step - self.star_since

    def gated(self, w: Waiting) -> bool:
        """`w` was waiting when r* was chosen (it has not left `waiting` since);
        off at S = 0."""
        return self.starvation_steps > 0 and w.waiting_since <= self.chosen_at

    def switch_unpaid(self) -> bool:
        """r* has waited less than 3S/16 steps per output left of the longest
        request present, holding a LoRA slot or waiting (`SWITCH_PRICE`)."""
        num, den = SWITCH_PRICE
        return den * self._age() < num * self.starvation_steps * self.longest

    def drains(self, w: Waiting) -> bool:
        """`w` can end by its victim's deadline, one output per step."""
        return self.step + w.left <= self.scan_deadline[w.adapter]

    def priced(self, w: Waiting) -> bool:
        """r* has waited less than S/2 steps per output `w` has left: holding
        `w` would cost more than 2/S of r*'s wait."""
        return 2 * self._age() < self.starvation_steps * w.left

    def backlog(self, adapter: int) -> int:
        """Waiting requests of `adapter` other than r* (cohort members too: they
        join its slot all the same)."""
        return sum(1 for w in self._queue if w.adapter == adapter and w.id != self.star)

    def visit_star(self, left: dict[int, int]) -> None:
        """The scan reached r*; `left` maps each adapter holding a slot to the
        outputs its longest-running request has left. Note the longest request
        present (the switch price), and pick a victim if the cap blocks r* and
        no victim holds a slot (rule 4)."""
        active = set(left)
        self.longest = max([*left.values(), *(w.left for w in self._queue)], default=0)
        if cap_blocks(active, self.star_adapter, self.max_loras) and not (self.victims & active):
            victim = min(active, key=lambda a: (self.backlog(a), left[a], a))
            self.victims.add(victim)
            self.deadline[victim] = self.scan_deadline[victim] = self.step + left[victim]

    def holds(self, rid: str, adapter: int) -> bool:
        """Is `rid` held for r* (rule 4)? A victim's request is held unless it is
        in a cohort, or it and every waiting request of its adapter ahead of it
        outside a cohort are admissible."""
        if self.star is None or rid == self.star or adapter not in self.victims or rid in self.cohort:
            return False
        for w in self._queue:
            if w.adapter != adapter or w.id == self.star or w.id in self.cohort:
                continue
            if self.admission(w) is None:
                return True  # `rid`, or a request of its adapter ahead of it, is held
            if w.id == rid:
                return False
        return False  # not in this scan's queue: not the guard's to hold

    def admitted(self, rid: str) -> None:
        """`rid` got in. When it is r*, its adapter's waiting requests form a
        cohort; when it is a victim's, the victim's deadline moves, from the
        next step on, to the step `rid` can end by, if later."""
        if rid == self.star:
            until = self.step + 2 * self.starvation_steps
            self.cohort.update({w.id: until for w in self._queue if w.adapter == self.star_adapter and w.id != rid})
            self._clear()
            return
        w = self._by_id.get(rid)
        if w is not None and w.adapter in self.deadline:
            self.deadline[w.adapter] = max(self.deadline[w.adapter], self.step + w.left)

    def _clear(self) -> None:
        self.star, self.victims, self.deadline, self.scan_deadline = None, set(), {}, {}
        self.longest = self.chosen_at = 0


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
    s = config.starvation_steps
    qw = queue if waiting is None else waiting
    gated = qw * (d + 1) if s > 0 else 0
    guard = 3 * d + 3 + max_output + max(2 * s, -(-s * max_output // 2), gated)
    return config.starvation_steps + qw * guard


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


def slot_outputs_left(running: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Per adapter (> 0) holding a slot, the outputs its longest-running request
    has left, from (adapter, outputs left) of each running request."""
    left: dict[int, int] = {}
    for adapter, n in running:
        if adapter > 0:
            left[adapter] = max(left.get(adapter, 0), n)
    return left


class FairGate:
    name = "fair"
    guard_class: type[FairGuard] = FairGuard  # planted bugs (tests/planted.py) swap the guard

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
                           st.reqs[r].stale > 0, st.reqs[r].req.max_tokens - st.reqs[r].generated)
                   for r in queue]
        star = self._guard(ctx).begin_scan(ctx.step, waiting)
        if star is None:
            return queue
        return [star] + [r for r in queue if r != star]

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        guard, st = self._guard(ctx), ctx.state
        if rid == guard.star:
            guard.visit_star(slot_outputs_left((st.adapter(r), st.reqs[r].req.max_tokens - st.reqs[r].generated)
                                               for r in st.running))
        adapter = st.adapter(rid)
        if guard.holds(rid, adapter):
            return Decision.SKIP, "fair_guard"
        if cap_blocks(running_loras(ctx), adapter, st.config.max_loras):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        self._guard(ctx).admitted(rid)

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        pass


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Replays `FairGuard` on the observed state alone (waiting order,
    waiting-since steps, outputs left, the running requests and admissions
    of each step), so a trace recorded from `fair` inside vLLM is judged the
    same way as the reference. It declares two kinds of hold: the guard's
    victims (`fair_guard`) and fair's cap over every running request's adapter
    (`fair_cap`), which is stricter than the cap `no_hol_blocking` applies.
    """

    def __init__(self, config: Config) -> None:
        self.guard = FairGuard(config.starvation_steps, config.max_loras, config.queue == "priority")
        self._order: list[str] = []
        self._base: set[int] = set()
        self._scanned = False

    def begin(self, view: StepView) -> str | None:
        rec, cfg = view.rec, view.config
        running = [r for r in rec.running if r not in rec.preempted]
        self._base = {view.adapter[r] for r in running if view.adapter[r] > 0}
        waiting = [Waiting(r, view.adapter[r], view.waiting_since[r], view.seq[r], view.priority[r],
                           r in view.in_flight, view.outputs_left[r]) for r in rec.waiting]
        star = self.guard.begin_scan(rec.step, waiting)
        budget = cfg.max_num_batched_tokens - sum(n for r, n in rec.scheduled.items() if r not in rec.admitted)
        if star is not None and budget > 0 and len(running) < cfg.max_num_seqs:
            self.guard.visit_star(slot_outputs_left((view.adapter[r], view.outputs_left[r]) for r in running))
        if star is not None and star in rec.admitted:
            self.guard.admitted(star)
        self._order = ([star] if star is not None else []) + [r for r in rec.waiting if r != star]
        self._scanned = True
        return star

    def hold(self, view: StepView, rid: str) -> str | None:
        if self.guard.holds(rid, view.adapter[rid]):
            return "fair_guard"
        admitted = set(view.rec.admitted)
        before = self._order[:self._order.index(rid)] if rid in self._order else []
        active = self._base | {view.adapter[r] for r in before if r in admitted and view.adapter[r] > 0}
        return "fair_cap" if cap_blocks(active, view.adapter[rid], view.config.max_loras) else None

    def end(self, view: StepView) -> None:
        if self._scanned:  # the other admissions of the scan (r*'s came first, in `begin`)
            for rid in view.rec.admitted:
                if rid != self.guard.star:
                    self.guard.admitted(rid)
        self._scanned = False
