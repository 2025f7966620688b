"""`fair`: vLLM's skip rule with a crash-proof cap and a starvation guard (this project's policy).

The rule, with S its one knob: `starvation_steps` prefill cadences, that
is `starvation_steps` steps, or `starvation_steps` * k steps where vLLM's
DP prefill throttle lets waiting requests in on one step in k (k =
`prefill_schedule_interval`; `starvation_window`). Every S below, B's
included, is that many steps.

*Cap.* The LoRA cap (`spec.cap.cap_blocks`) counts the adapters of every
request in `running`, scheduled this step or not, plus those admitted so
far (vLLM 0.32 counts only running requests scheduled this step). A running
request left unscheduled (async scheduling's sure-to-finish skip, the DP
prefill throttle, pipeline parallelism, the encoder budget) keeps its
adapter's slot, so no (max_loras+1)-th adapter joins while it waits and
vLLM's `assert len(scheduled_loras) <= max_loras` cannot fire.

*Guard*, three mechanisms:

1. **The oldest starving request goes first, one every S steps.** When a
   waiting scan starts, r* is the oldest waiting request that has waited at
   least S steps (since it arrived or was last preempted) and has no async
   output in flight: smallest (priority, under the priority queue), then
   the step it joined `waiting`, then arrival order. Any request can be r*:
   base-model, of an active adapter, of an inactive one. r* stays r* until
   it is admitted; then no new r* is chosen for S steps (guards are S
   apart). Under the priority queue a request of a more urgent priority
   that has waited S steps replaces r* (the guard starts again for it): a
   guard never keeps a freeing slot from a more urgent starving request,
   which vLLM's priority scan would give it. The scan visits r* first; if
   capacity stops it (seats, budget, KV for its whole sequence, no
   chunking, the throttle), the scan stops there, as vLLM's own stops do.
2. **The slots that can free by a deadline drain.** If the cap blocks r*
   and no victim holds a slot, the *deadline* is the step + the fewest
   outputs left of a slot holder's longest-running request + S (the step
   by which the soonest slot frees if nothing of its adapter joins, plus
   S), and every adapter holding a slot whose longest-running request ends
   by the deadline is a *victim*. Every other adapter keeps flowing.
3. **Only the last victim is held.** Until r* is admitted, a waiting request
   of a victim whose outputs left fit before the deadline (step + outputs
   left <= deadline) is let in. One that does not (*late*) is let in too
   while another victim remains, and once it is admitted its adapter stops
   being a victim; a late request of the last victim is held. Within a
   scan, once one of an adapter's requests is held, its later ones are
   held too, so FIFO within the adapter holds.

Why these and no constant. r* first is what bounds a wait: each request
that is older when it starves goes first, and a request becomes r* only
after every older starving one is in. Guards are S apart because a burst
leaves every waiting request past S: without the gap a new r* is chosen the
step after each switch, its victim is the adapter just switched in, with
only the requests its first scan admitted, and the seats its held backlog
would fill stay empty (v7, which had no gap, ran at 0.47-0.73 of vllm's
throughput on max_loras-1 bursts); S, the time a request waits before it is
put first, is also the time a new slot holder serves before it can be made
a victim. r* needs one slot. A slot whose holder keeps receiving requests
never frees, which is `vllm`'s starvation, so holding is what frees it;
the soonest slot is the one r* waits least for, and any slot that frees by
the deadline serves r* as well. A request that ends by the soonest slot's
own freeing costs r* nothing (one output a step, the slot is held that
long anyway), and one that ends within S steps after it costs r* at most
S: the wait the knob already lets every request have before it is put
first. A request held instead runs after r*, when its adapter gets a slot
again: a switch back, often for that request alone, with the victim's
seats empty in between (v8, whose deadline had no S, ran at 0.73-0.78 of
vllm's throughput on nine max_loras 1-3 bursts that way). So a late
request is held only when letting it in would leave no slot that can free
by the deadline: while another victim remains, holding it buys r* nothing
(v9 held the soonest slot's late requests even while another slot was
about to free, and ran at 0.74-0.77 of vllm's throughput on three bursts
where the held request was the last to finish). S trades wait for
throughput: a request that waited fewer than S steps is never put first
and never causes a hold, a slot holder switched in for r* is not a victim
for S steps, and a victim keeps its slot at most S steps past the soonest
freeing (S = 0: the oldest waiting request is always first, which makes
the scan FCFS among requests the cap would block, and the victims drain
exactly). S is counted in prefill cadences because what it meters is
admissions: where a throttle of k lets waiting requests in on one step in
k, S steps would put a request first after S / k chances to be admitted
and make a slot holder switched in for r* a victim again after S / k
admitting scans, so slots would switch k times as often per admission as
without the throttle (v11 counted S in steps; fresh hill climbs in the
throttle space found it below issue 20's adversarial goal on 19 of 80,
down to 0.593 of vllm's throughput).
The rule's history (v1-v12: what each added or dropped, and why) is in
`docs/fair-history.md`.

Bound. Let P be the largest prompt, L the largest `max_tokens`,
W = P + L - 1 (the tokens one request computes in one stay in `running`),
N = min(`max_num_seqs`, Q, `kv_blocks`) the most requests `running` can
hold (`kv_blocks` where KV is finite: a request in `running` holds at least
one block, since it was admitted with at least one token and the model has
no prefix caching to share one), T = `max_num_batched_tokens`, c the long-prefill
threshold (chunks = ceil(W / c), 1 when off), k = `prefill_schedule_interval`
(1 without DP throttling), Q the most requests present (waiting or
running) and Qw <= Q the most requests waiting when a step starts. Then

    F  = floor(N * W / T), or floor(N * P / (T - N + 1)) where KV is
         unlimited, T >= N and that is fewer
    e  = N - 1 where KV can run out under the priority queue, else 0
    D0 = k * (F + chunks + e) + (1 if async scheduling else 0)
    D  = D0 + (L - 1)

bounds the steps a request spends in `running` while none is inserted ahead
of it (admissions append; preemption only removes), and D0 + o - 1 does for
one admitted with o outputs left (`stay`, a monitor too): in each step it
is either budget-starved, which spends T tokens of the at most N * W that
it and the requests ahead of it still need, or gets all it asks for: a
prefill chunk or a decode, or is left out because a request ahead of it
preempted itself, which ends vLLM's running loop. Where KV is unlimited
nothing is preempted, so those at most N requests prefill at most N * P
tokens in all, and a step that starves it spends at least T - N + 1 of
them: the requests scheduled before it, N - 1 at most, decode one token
each at most (hence F). A request that cannot grow preempts the last
request in `running` under FCFS (one behind it, or itself when nobody is
behind), but the latest arrival under the priority queue, which can be
itself while a request that arrived earlier, readmitted after a
preemption, is behind it; each such step takes one of the at most N - 1
requests ahead out of `running` for good (admissions append), hence e.
A DP throttle defers a prefill on at most k - 1 steps in a row before each
step that schedules one, budget-starved or not (so it can come before
every budget-starved step, not only before each chunk: hence k times
F + chunks + e; a step that schedules nothing, every decode skipped as
sure to finish under async scheduling, leaves nothing decoding, so the
next step does not defer). Async scheduling adds one step: the one after
the request's last token, in which it is skipped as sure to finish while
that token's output is in flight (the skip needs every token computed but
the last output's, as at most one output is in flight when a step is
scheduled; the output a preempted request had in flight lands, stale, in
the step that preempts it, which readmits nobody, so it rejoins
`running` with nothing in flight). The cap can
block r* in a scan that admits anyone only when max_loras < N: the scan
stops at a full `running` before it asks the cap, so the cap sees at most
N - 1 running adapters, except where N = `kv_blocks` <= `max_num_seqs`;
there a cap that blocks r* sees max_loras >= N requests holding a block
each, so no block is free and the scan admits nobody (every admission
needs a free block), which is what a capacity stop at r* does.
Lemmas, each a monitor in `tests/test_state_machines.py`:

- `star_first`: from the step r* is chosen, nobody is admitted before r*
  in a scan (r* is visited first; a capacity stop at r* ends the scan).
- `victim_drains` (G1 = D + S + 1, G1* = D + D0 + S + 2): a victim
  chosen at step t1, with deadline t1 + l + S (l <= L the fewest outputs
  left), for r* chosen at t0 <= t1, holds no slot after
  min(t1 + G1, t0 + G1*) while it is a victim. Its requests running at t1
  have at most l + S outputs left (that is how it was chosen), so leave by
  t1 + D0 + l + S - 1; each one admitted at t >= t1 while it is a victim
  has o outputs left with t + o <= the deadline, so leaves by
  t + D0 + o - 1 <= t1 + l + S + D0 - 1. Both are <= t1 + D + S, as
  l <= L; and both are <= t0 + D + D0 + S + 1, as t1 + l <= t0 + D + 2:
  nobody is admitted from t0 until t1 (each scan visits r* first, and a
  capacity stop at r* ends it), so the slot holder whose longest-running
  request y has l outputs left at t1 ran y from t0 to t1, in which y got
  an output in every step but at most D0 (the D0 argument above, from
  t0), so t1 - t0 <= D0 + (L - l), one more where async scheduling has
  y's output of the step before still in flight (and D0 + L = D + 1). A late
  request is let in only while another victim remains, so one always
  remains.
- `star_fits` (E): r* that starts a step waiting with a seat and a LoRA
  slot free is admitted within E steps, that one included. From that step
  on nobody is admitted before r* (`star_first`; the cap does not stop it,
  and a capacity stop at r* ends the scan), so `running` only shrinks and
  the seat and the slot stay free. E = D + 1 in general: `running` empties
  within D steps, and then r* is in. E = 1 where capacity cannot stop r*
  once a seat and a slot are free (`capacity_admits_star`: KV unlimited,
  no DP throttle, and T covers the other N - 1 requests' largest chunks
  and r*'s first). E = k (F(N - 1) + 1) where KV is unlimited,
  prefill is chunked and scheduling synchronous or unthrottled (k = 1;
  async without a throttle since the seventh restatement: with nothing
  preempted r* has no output in flight, so only the budget stops it
  there): r* needs a seat, a slot
  and one token of budget, so a step that does not admit it is either
  deferred by the DP throttle or budget-starved, its whole budget T spent
  by the at most N - 1 running requests, which need at most (N - 1) W
  tokens in all, (N - 1) P of them prefill, and get no new company; each
  such step spends at least T - N + 1 prefill tokens (one decode token a
  request at most), so at most F(N - 1) steps are budget-starved (F with
  N - 1 requests in place of N), and the throttle defers at most k - 1 steps
  in a row before each step it does not defer (in a synchronous step that
  defers, something decodes and is scheduled, so 0.33's cadence
  advances; an async step may schedule nothing and leave the cadence
  where it was, so async scheduling under a throttle keeps E = D + 1).
- `star_admitted_within_G` (G = G1* + E + 1 = D + D0 + S + E + 3 when
  max_loras < N): r* chosen at t0 is admitted by t0 + G. Until the cap
  blocks it, a capacity stop at r* admits nobody, so within D + 1 steps
  `running` empties or r* is in or cap-blocked (t1); a victim's slot is
  free by t0 + G1*, and the request whose leaving frees it frees a seat
  too (with KV unlimited nothing is preempted; where KV can run out, E =
  D + 1 needs no free seat), so `star_fits` applies from the next step.
  Where the cap cannot block r* in a scan that admits anyone (max_loras >=
  N), G = D + 2: nobody is admitted from t0 until r* (`star_alone`), so
  `running` empties within D steps, and then r* is in (a DP throttle
  defers prefills only while something decodes).
- `star_alone` (max_loras >= N): no scan admits anyone from the step r* is
  chosen until r* is admitted. r* has no async output in flight when
  chosen, and a waiting request gets none, so every scan visits it first;
  a capacity stop at r* ends the scan, and a cap that blocks r* leaves no
  block free (above).
- `guards_apart`: no r* is chosen within S steps of the admission of the
  one before it (so a guard and the gap after it take at most G + S).
- `guards_ahead`: every r* whose guard runs while a request r waits (from
  the step t_r r joins `waiting` until it is first admitted) joined
  `waiting` at t_r at the latest and has stayed there since: one chosen
  once r has waited S steps is older than r; one chosen before had waited
  S steps when r had not, so it joined earlier. It was waiting when step
  t_r started, or it was preempted in step t_r, which then admits nobody,
  so all of them are waiting when step t_r or step t_r + 1 starts; and
  each is r* once per stay in `waiting` (with one priority nothing replaces
  an r*). So at most Qw guards run in that time, r's own included, and a
  gap follows each but r's own.
- `quiet_guard`: r* chosen at t0 whose guard is quiet (no step from t0
  until r* is in admits anyone but r*) is admitted by t0 + D + 2, which is
  G where the cap cannot block r* (there every guard is quiet,
  `star_alone`) and at most G - S where it can: nobody is admitted, so
  `running` only shrinks and empties within D steps, and then r* is in.
- `star_chosen` (p = N - 1 where KV can run out, else 0): from the step r
  has waited S steps until it is admitted, a step that is in no guard and
  no gap chooses an r* (r is a candidate: it has no async output in
  flight, as only a preempted request has one), unless it scans no
  waiting request, which vLLM skips after a preemption. Such steps come
  at most p in a row: each preempts, nobody is admitted in them, and a
  lone running request is never preempted (its whole sequence fits).

Hence, counting from the step t_r a request r joins `waiting`: S steps,
then guards (at most Qw, G each), gaps (at most Qw - 1, S each) and steps
that choose no r* (at most p before each of the at most Qw choices): Qw *
(G + S + p). Where the cap can block r*, one S less. Let m <= Qw be the
guards that run while r waits (`guards_ahead`). If the first was chosen at
t_r or before, r's first S steps lie inside it and the S-step gap after
it: at most G + (m - 1)(S + p + G). If it was chosen later and m < Qw,
one whole guard and gap less than Qw's. If it was chosen later and m = Qw, then from step
t_r + 1 on all m of its r*s wait until each is admitted, so at every step
start of that first guard exactly they wait: nobody else is waiting then
(no arrival, no preemption, which would make Qw + 1), so nobody else is
admitted and it is quiet (`quiet_guard`): D + 2 <= G - S. So every request is first
admitted within

    B = Qw * (G + S + p) - S  =  Qw * (D + D0 + E + 2S + 3 + p) - S   (max_loras < N)
    B = Qw * (G + S + p)      =  Qw * (D + S + 2 + p)                 (max_loras >= N)

steps of joining `waiting`: linear in the requests waiting ahead, in the
longest request and in S, under these assumptions: every request has the same
priority (FCFS, or the priority queue with one priority: with mixed
priorities a stream of more urgent requests may delay a less urgent one
without limit, which is what priorities ask for), and no running request is
left unscheduled for a reason outside the model (pipeline parallelism,
encoder budget). Synchronous or async scheduling, KV that can run out and DP
throttling are covered.

Where nobody can be skipped, a wait is bounded by the work ahead of it, not
by guards. That is where the cap cannot block (max_loras >= N), KV is
unlimited (nothing is preempted) and prefill is chunked (`queue_order_applies`).
Let M = min(Qw - 1 + N, Q - 1), the most requests running or waiting ahead
of r when r joins `waiting`. Lemmas, each a monitor too:

- `queue_order`: every scan admits a prefix of the waiting queue. The cap
  blocks nobody (a scan that reaches a request with a seat free has seen at
  most N - 1 adapters running or admitted), fair holds only victims'
  requests and there are none, no waiting request has an async output in
  flight (only a preempted one can), and r* is the head: with nothing
  preempted, a request's waiting since is its arrival, and the queue is in
  arrival order. So while r waits only the M requests ahead of it run or
  are admitted, each at most D steps in `running` (admissions append) and
  needing at most W tokens.
- `full_or_starved`: a step that leaves a request waiting ends its scan
  with every seat taken, or spends the whole budget T, or is deferred by the
  DP throttle (the scan stops at a prefill it defers). A prefix scan stops
  at the first request it leaves, for seats, budget (chunked prefill stops
  only at 0) or the throttle.
- `deferrals`: while r waits, at most k - 1 steps defer. After a step
  that does not defer and leaves r waiting, vLLM records that requests
  wait for capacity, not skips (`prefill_capacity_bound`), and no later
  step defers while r waits; before it, the deferred steps come in one
  run from r's arrival, at most k - 1 long. On 0.32 the engine core's
  step counter throttles at most k - 1 steps in a row (it restarts only
  after the engine was idle). On 0.33 a deferred step that schedules a
  token advances the scheduler's cadence and carries no prefill (prefill
  chunks wait; a request admitted in it has one token left, which is no
  prefill), so nothing restarts the cadence; one that schedules none has
  every running request sure to finish, so nothing decodes in the next
  step, which does not defer.

So r's wait has at most M D / N steps with every seat taken (each holds N
of the at most M D steps the requests ahead spend in `running`), at most
F(M) that spend the budget with a seat free (F with M requests in place
of N: each spends T of the at most M W tokens the requests ahead need, and
at least T - N + 1 of their at most M P prefill tokens, as at most N - 1
requests decode in it), and at most k - 1 deferred ones:

    B_queue = floor(M * D / N) + F(M) + (k - 1)

Where the cap never blocks, whether KV can run out or not, a wait is
bounded by the heads of `running` instead. That is where max_loras >=
min(`max_num_seqs`, Q) (the scan stops at a full `running` before it asks
the cap, which then sees at most min(`max_num_seqs`, Q) - 1 adapters),
scheduling is synchronous, no DP throttle defers prefills and the queue is
FCFS (`heads_apply`). Let t = T, or c where the long-prefill threshold is
below T, and H = ceil(P / t) + L - 1. Lemmas, each a monitor too:

- `arrival_order`: nobody who arrived after r is admitted before r's first
  admission. The cap blocks nobody, so fair has no victim and holds
  nobody; every scan stops at the first request it leaves (seats, budget,
  KV: a waiting request is admitted only with blocks for its whole
  prompt); and it visits r* first, which is r or arrived before r (it
  has waited S steps when r has not, or waits since no later than r, ties
  going to arrival order; either way it joined `waiting` by r's arrival,
  as an arrival before r or a preemption of a request running then), and
  the queue holds the requests that arrived after r behind r (preempted
  ones rejoin its head).
- `head_steps`: every step schedules the head of `running` (its first
  request: admissions append) first, with the whole budget, and never
  preempts it (FCFS preempts the last request, and the head's whole
  sequence fits alone); a step that starts with `running` empty admits the
  first request it visits (every block and seat is free). So a request
  is the head once, until it ends, and in at most H steps: each prefills
  at least min(t, what is left) of at most P + o tokens (a request
  preempted after o outputs recomputes them) and its last chunk yields an
  output, then one output a step, and ceil((P + o) / t) + L - o - 1 <= H.

So each step of r's wait has a head, admitted before r and so present when
r arrived (`arrival_order`): at most M of them, each the head in at most H
steps:

    B_heads = M * H

B is the smallest of the bounds that apply (`fair_bound`). B_queue and
B_heads need no S: nobody is put ahead of r, so the guard changes nothing
(`vllm`'s scan admits the same requests there). `bench --realistic` and
the adversarial families report the worst wait / B found, and beside it
the wait of a witness within the same figures (`bench.bound`: how far any
bound in them can come down).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, GateBase, ScanContext, running_loras
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.properties import StepView
from lora_sched.spec.request import Request
from lora_sched.spec.state import State, StepRecord, peak_present, peak_waiting


@dataclass(frozen=True)
class Waiting:
    """A request joining `waiting`, as the guard indexes it."""

    id: str
    adapter: int
    waiting_since: int  # step it last joined `waiting` (arrival or preemption)
    seq: int  # arrival order
    priority: int = 0


@dataclass
class FairGuard:
    """The guard's decisions and memory, on plain data (the module docstring's rule).

    One object serves the reference gate (`FairGate`, which vLLM's scheduler
    classes run through `lora_sched.scheduler.GateMixin`) and the trace
    checker (`FairHolds`). It keeps the waiting queue indexed as requests
    join and leave it (`enqueue`, `dequeue`: a heap by (waiting since, arrival
    order) per priority level, and a count per adapter), so finding r* costs
    O(log W) per step, not a pass over the queue. Per scan it is told the
    step (`begin_scan`), the adapters holding a slot when the scan reaches
    r* (`visit_star`), asked about each request the scan reaches (`holds`),
    and told of each admission (`admitted`) before the next request is
    asked about (a late admission changes the victims).
    """

    starvation_steps: int
    max_loras: int
    priority_queue: bool = False
    star: str | None = None  # r*, kept from step to step until admitted
    star_adapter: int = 0
    chosen_at: int = 0  # the step r* was chosen (0: no r*)
    cool_until: int = 0  # no new r* before this step: S after the last r* was admitted
    victims: set[int] = field(default_factory=set)  # slot holders whose slot can free by the deadline
    deadline: dict[int, int] = field(default_factory=dict)  # victim -> the deadline (one for all)
    step: int = 0
    backlog: dict[int, int] = field(default_factory=dict)  # adapter -> waiting requests
    _waiting: dict[str, tuple[int, int]] = field(default_factory=dict)  # rid -> (waiting since, adapter)
    _level: dict[str, int] = field(default_factory=dict)  # rid -> its priority level (0 without the priority queue)
    _heaps: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # level -> (since, seq, rid)
    _held: set[int] = field(default_factory=set)  # victims with a request held in this scan (FIFO)
    _late: dict[str, int] = field(default_factory=dict)  # this scan's requests let in past the deadline

    def enqueue(self, w: Waiting) -> None:
        """`w` joined `waiting` (arrival or preemption)."""
        if w.id in self._waiting:
            self.dequeue(w.id)
        self._waiting[w.id] = (w.waiting_since, w.adapter)
        self.backlog[w.adapter] = self.backlog.get(w.adapter, 0) + 1
        level = self._level[w.id] = w.priority if self.priority_queue else 0
        heapq.heappush(self._heaps.setdefault(level, []), (w.waiting_since, w.seq, w.id))

    def dequeue(self, rid: str) -> None:
        """`rid` left `waiting` (admitted, aborted, finished); its heap entry goes lazily."""
        entry = self._waiting.pop(rid, None)
        if entry is not None:
            self._level.pop(rid, None)
            self.backlog[entry[1]] -= 1
            if not self.backlog[entry[1]]:
                del self.backlog[entry[1]]

    def waiting_ids(self) -> set[str]:
        return set(self._waiting)

    def begin_scan(self, step: int, stale: Callable[[str], bool] = lambda rid: False) -> str | None:
        """Find r* when a waiting scan starts (sticky until admitted, or until
        a request of a more urgent priority level starves, which replaces it);
        returns it, or None when there is none or it cannot be admitted this
        step (`stale`: its async output is in flight; it stays r*)."""
        self.step, self._held, self._late = step, set(), {}
        if self.star is not None and self.star not in self._waiting:
            self._clear()  # aborted (or admitted behind the guard's back)
        if self.star is not None and self._outranked(self.star, step, stale):
            self._clear()  # a more urgent request starves: its guard starts now (priority queue only)
        if self.star is None and step >= self.cool_until:  # guards are S apart
            found = self._oldest_starving(step, stale)
            if found is not None:
                self.star, self.star_adapter, self.chosen_at = found, self._waiting[found][1], step
        if self.star is None or stale(self.star):
            return None
        return self.star

    def _outranked(self, star: str, step: int, stale: Callable[[str], bool]) -> bool:
        """Has a request of a more urgent priority level than r* (`star`)'s
        waited S steps (and no async output in flight)? Then it replaces r*."""
        urgent = [level for level in sorted(self._heaps) if level < self._level[star]]
        return bool(urgent) and self._first_starving(urgent, step, stale) is not None

    def _oldest_starving(self, step: int, stale: Callable[[str], bool]) -> str | None:
        """The smallest (priority level, waiting since, arrival order) among the
        waiting requests that waited S steps and are not stale."""
        return self._first_starving(sorted(self._heaps), step, stale)

    def _first_starving(self, levels: Iterable[int], step: int, stale: Callable[[str], bool]) -> str | None:
        """`_oldest_starving` among the priority levels `levels` (ascending).
        Per level the candidates are the heap's oldest entries, so the first
        level whose oldest valid, non-stale entry waited S steps holds the
        answer."""
        for level in levels:
            if level not in self._heaps:
                continue
            heap, skipped, found = self._heaps[level], [], None
            while heap:
                since, _seq, rid = heap[0]
                entry = self._waiting.get(rid)
                if entry is None or entry[0] != since:
                    heapq.heappop(heap)  # left `waiting`, or rejoined later under a new entry
                    continue
                if step - since < self.starvation_steps:
                    break  # the oldest of this level has not waited S steps
                if stale(rid):
                    skipped.append(heapq.heappop(heap))
                    continue
                found = rid
                break
            for item in skipped:
                heapq.heappush(heap, item)
            if not heap:
                del self._heaps[level]
            if found is not None:
                return found
        return None

    def visit_star(self, left: dict[int, int]) -> None:
        """The scan reached r*; `left` maps each adapter holding a slot to the
        outputs its longest-running request has left. If the cap blocks r*
        and no victim holds a slot, set the deadline (step + the fewest of
        those + S) and make every slot holder whose slot frees by it a
        victim (mechanism 2)."""
        active = set(left)
        if cap_blocks(active, self.star_adapter, self.max_loras) and not (self.victims & active):
            deadline = self.step + min(left.values()) + self.starvation_steps
            self.victims = {a for a in active if self.step + left[a] <= deadline}
            self.deadline = dict.fromkeys(self.victims, deadline)

    def drains(self, adapter: int, left: int) -> bool:
        """A request of victim `adapter` with `left` outputs left ends by the deadline."""
        return self.step + left <= self.deadline[adapter]

    def holds(self, rid: str, adapter: int, left: int) -> bool:
        """Is `rid` (of `adapter`, `left` outputs left) held for r*? Only a
        request of the last victim, and only one that cannot end by the
        deadline or comes after one of its adapter held in this scan
        (mechanism 3). A victim's request that cannot end by the deadline
        while other victims remain is let in, and if it is admitted
        (`admitted`) its adapter stops being a victim."""
        if self.star is None or rid == self.star or adapter not in self.victims:
            return False
        if adapter in self._held:
            return True
        if self.drains(adapter, left):
            return False
        if len(self.victims) > 1:
            self._late[rid] = adapter
            return False
        self._held.add(adapter)
        return True

    def admitted(self, rid: str) -> None:
        """`rid` got in (it leaves the index); when it is r*, the guard is over
        and the next one waits S steps; when it is a victim's request that
        cannot end by the deadline, its adapter stops being a victim."""
        self.dequeue(rid)
        if rid == self.star:
            self._clear()
            self.cool_until = self.step + self.starvation_steps
        elif rid in self._late:
            adapter = self._late.pop(rid)
            self.victims.discard(adapter)
            self.deadline.pop(adapter, None)

    def _clear(self) -> None:
        self.star, self.star_adapter, self.chosen_at = None, 0, 0
        self.victims, self.deadline = set(), {}


def starvation_window(config: Config) -> int:
    """S of the module docstring, in steps: `starvation_steps` prefill
    cadences, `starvation_steps` * k (k = `prefill_schedule_interval`, 1
    without a DP throttle). The guard's threshold, gap and deadline slack
    and every S of B are this many steps."""
    return config.starvation_steps * config.prefill_schedule_interval


def drain_steps(config: Config, *, max_prompt: int, max_output: int, queue: int | None = None) -> int:
    """D of the module docstring: the most steps a request stays in `running`
    (N is `seats`: `max_num_seqs`, or Q or `kv_blocks` where fewer)."""
    return non_decode_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue) + (max_output - 1)


def non_decode_steps(config: Config, *, max_prompt: int, max_output: int, queue: int | None = None) -> int:
    """D0 of the module docstring: D less the L - 1 decodes (a request admitted
    with o outputs left stays in `running` at most D0 + o - 1 steps)."""
    work = max_prompt + max_output - 1
    c = config.long_prefill_token_threshold
    chunks = -(-work // c) if c > 0 else 1
    starved = starved_steps(config, seats(config, queue), max_prompt=max_prompt, max_output=max_output, queue=queue)
    return (config.prefill_schedule_interval * (starved + chunks + left_out_steps(config, queue))
            + (1 if config.async_scheduling else 0))


def left_out_steps(config: Config, queue: int | None = None) -> int:
    """e of the module docstring: the steps in which a request ahead of it
    preempts itself and so ends the running loop, N - 1 at most where KV can
    run out under the priority queue (each takes one of the at most N - 1
    requests ahead out of `running`); 0 under FCFS, which preempts the
    last request, and where KV is unlimited."""
    if config.kv_blocks is None or config.queue != "priority":
        return 0
    return max(0, seats(config, queue) - 1)


def starved_steps(config: Config, requests: int, *, max_prompt: int, max_output: int,
                  queue: int | None = None) -> int:
    """F of the module docstring with `requests` requests in place of N: the
    most budget-starved steps that many requests, needing at most W =
    `max_prompt` + `max_output` - 1 tokens each, can cause while nobody
    joins them. Each such step spends
    the whole budget T of the at most `requests` * W tokens they need:
    floor(`requests` W / T). Where KV is unlimited nothing is preempted, so
    each prefills at most P tokens, and such a step holds at most N - 1
    decodes of one token, so spends at least T - N + 1 prefill tokens: at
    most floor(`requests` P / (T - N + 1)) such steps, when T >= N, if that
    is fewer. D0 takes N of them; `star_fits` the N - 1 beside r*; B_queue
    the M ahead of r."""
    t = config.max_num_batched_tokens
    steps = requests * (max_prompt + max_output - 1) // t
    spare = t - seats(config, queue) + 1  # prefill tokens a budget-starved step spends at least
    if config.kv_blocks is None and spare > 0:
        steps = min(steps, requests * max_prompt // spare)
    return steps


def seats(config: Config, queue: int | None = None) -> int:
    """N of the module docstring: the most requests `running` can hold:
    `max_num_seqs`, Q when fewer requests are ever present, and `kv_blocks`
    when fewer blocks are (each request in `running` holds one at least)."""
    n = config.max_num_seqs if queue is None else min(config.max_num_seqs, queue)
    return n if config.kv_blocks is None else min(n, config.kv_blocks)


def cap_can_block(config: Config, queue: int | None = None) -> bool:
    """Can the cap block r* in a scan that admits anyone? Only when
    max_loras < N (the scan stops at a full `running` before it asks the
    cap, which then sees at most N - 1 adapters; where N is `kv_blocks`, a
    cap that sees N adapters sees every block held, and nobody is admitted)."""
    return config.max_loras < seats(config, queue)


def capacity_admits_star(config: Config, *, max_prompt: int, queue: int | None = None) -> bool:
    """Does r* always fit once a seat and a LoRA slot are free? Yes when KV is
    unlimited, no DP throttle defers prefills, and the budget left after the
    other N - 1 requests' largest chunks (a prompt of at most P tokens, or
    c, the long-prefill threshold; a decode's 1 where prompts are never
    split) still holds r*'s first chunk (1 token with chunked prefill, else
    its whole prompt up to c)."""
    if config.kv_blocks is not None or config.prefill_schedule_interval > 1:
        return False
    c, chunked = config.long_prefill_token_threshold, config.chunked_prefill
    other = min(max_prompt, c) if c > 0 else (max_prompt if chunked else 1)
    first = 1 if chunked else (min(max_prompt, c) if c > 0 else max_prompt)
    return config.max_num_batched_tokens >= (seats(config, queue) - 1) * other + first


def star_fits_steps(config: Config, drain: int, queue: int | None = None, *, max_prompt: int,
                    max_output: int) -> int:
    """E of the module docstring (`star_fits`; `drain` is D): from a step that
    starts with r* waiting, a seat free and a LoRA slot free, r* is admitted
    within E steps, that step included: 1 where capacity admits it at once
    (`capacity_admits_star`); k (F(N - 1) + 1) where KV is
    unlimited, prefill is chunked and scheduling synchronous or not
    throttled (k = 1) (each step that
    does not admit it is budget-starved by the at most N - 1 running
    requests' at most (N - 1) W tokens, or deferred by the throttle, at most
    k - 1 in a row); else D + 1 (`running` only shrinks and empties)."""
    if capacity_admits_star(config, max_prompt=max_prompt, queue=queue):
        return 1
    if config.kv_blocks is None and config.chunked_prefill and (
            not config.async_scheduling or config.prefill_schedule_interval == 1):
        starved = starved_steps(config, seats(config, queue) - 1, max_prompt=max_prompt, max_output=max_output,
                                queue=queue)
        return config.prefill_schedule_interval * (starved + 1)
    return drain + 1


def guard_steps(config: Config, drain: int, non_decode: int, queue: int | None = None, *, max_prompt: int,
                max_output: int) -> int:
    """G of the module docstring (`drain` is D, `non_decode` D0): r* is
    admitted within G1* + E + 1 = D + D0 + S + E + 3 steps of being chosen
    where the cap can block it (`cap_can_block`; E = `star_fits_steps`),
    else within D + 2."""
    if cap_can_block(config, queue):
        fits = star_fits_steps(config, drain, queue, max_prompt=max_prompt, max_output=max_output)
        return star_victim_steps(drain, non_decode, starvation_window(config)) + fits + 1
    return quiet_guard_steps(drain)  # every guard is quiet (`star_alone`)


def victim_steps(drain: int, starvation_steps: int) -> int:
    """G1 of the module docstring (`victim_drains`): a victim holds no slot
    D + S + 1 steps after it is chosen."""
    return drain + starvation_steps + 1


def star_victim_steps(drain: int, non_decode: int, starvation_steps: int) -> int:
    """G1* of the module docstring (`victim_drains`): a victim holds no slot
    D + D0 + S + 2 steps after r* is chosen."""
    return drain + non_decode + starvation_steps + 2


def quiet_guard_steps(drain: int) -> int:
    """`quiet_guard`: a guard whose steps admit nobody but r* ends within
    D + 2 steps (`drain` is D): `running` empties, then r* is in."""
    return drain + 2


def gap_steps(config: Config) -> int:
    """The gap after a guard (`guards_apart`): no new r* for S steps."""
    return starvation_window(config)


def unscanned_steps(config: Config, queue: int | None = None) -> int:
    """p of the module docstring (`star_chosen`): the most steps in a row that
    scan no waiting request (each preempts): N - 1 where KV can run out, else 0."""
    return seats(config, queue) - 1 if config.kv_blocks is not None else 0


def queue_order_applies(config: Config, queue: int | None = None) -> bool:
    """Does every scan admit a prefix of the waiting queue (`queue_order`)?
    Where the cap cannot block (`cap_can_block` false), KV is unlimited and
    prefill is chunked."""
    return not cap_can_block(config, queue) and config.kv_blocks is None and config.chunked_prefill


def queue_order_steps(config: Config, *, queue: int, waiting: int, max_prompt: int, max_output: int) -> int:
    """B_queue of the module docstring, where `queue_order_applies`: with M =
    min(Qw - 1 + N, Q - 1) requests ahead, floor(M D / N) steps with every
    seat taken, F(M) (`starved_steps`) that spend the budget, k - 1 deferred."""
    n = seats(config, queue)
    ahead = ahead_of(config, queue=queue, waiting=waiting)
    drain = drain_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    full = ahead * drain // n if ahead else 0  # Q = 0 (N = 0): nobody ever waited
    starved = starved_steps(config, ahead, max_prompt=max_prompt, max_output=max_output, queue=queue)
    return full + starved + config.prefill_schedule_interval - 1


def heads_apply(config: Config, queue: int | None = None) -> bool:
    """Are requests first admitted in arrival order with the head of `running`
    scheduled in every step (`arrival_order`, `head_steps`)? Where the cap
    never blocks (max_loras >= min(`max_num_seqs`, Q): the scan stops at a
    full `running` before it asks the cap, which then sees at most
    min(`max_num_seqs`, Q) - 1 adapters), scheduling is synchronous, no DP
    throttle defers prefills and the queue is FCFS; KV may run out."""
    n = config.max_num_seqs if queue is None else min(config.max_num_seqs, queue)
    return (config.max_loras >= n and not config.async_scheduling and config.prefill_schedule_interval == 1
            and config.queue == "fcfs")


def head_steps(config: Config, *, max_prompt: int, max_output: int) -> int:
    """H of the module docstring (`head_steps`): the most steps a request is
    the head of `running`, ceil(P / t) + L - 1 with t = T, or c where the
    long-prefill threshold is below it."""
    c = config.long_prefill_token_threshold
    chunk = min(config.max_num_batched_tokens, c) if c > 0 else config.max_num_batched_tokens
    return -(-max_prompt // chunk) + max_output - 1


def heads_bound(config: Config, *, queue: int, waiting: int, max_prompt: int, max_output: int) -> int:
    """B_heads of the module docstring, where `heads_apply`: M H, with M =
    min(Qw - 1 + N, Q - 1) requests present when r arrives and H =
    `head_steps`."""
    return ahead_of(config, queue=queue, waiting=waiting) * head_steps(config, max_prompt=max_prompt,
                                                                     max_output=max_output)


def ahead_of(config: Config, *, queue: int, waiting: int) -> int:
    """M of the module docstring: min(Qw - 1 + N, Q - 1), the most requests
    present (running, or waiting ahead) when a request joins `waiting`."""
    return max(0, min(waiting - 1 + seats(config, queue), queue - 1))


def fair_bound(config: Config, *, queue: int, max_prompt: int, max_output: int, waiting: int | None = None) -> int:
    """B of the module docstring for a configuration and workload bounds
    (`waiting` is Qw; without it, Q stands in for it, as Qw <= Q): the
    guards' bound (`guard_bound`), or B_queue (`queue_order_applies`) or
    B_heads (`heads_apply`) where one applies and is smaller."""
    b = guard_bound(config, queue=queue, max_prompt=max_prompt, max_output=max_output, waiting=waiting)
    qw = queue if waiting is None else waiting
    if queue_order_applies(config, queue):
        b = min(b, queue_order_steps(config, queue=queue, waiting=qw, max_prompt=max_prompt,
                                     max_output=max_output))
    if heads_apply(config, queue):
        b = min(b, heads_bound(config, queue=queue, waiting=qw, max_prompt=max_prompt, max_output=max_output))
    return b


def guard_bound(config: Config, *, queue: int, max_prompt: int, max_output: int, waiting: int | None = None) -> int:
    """The guards' B of the module docstring, Qw (G + S + p) (less S where the
    cap can block r*), which holds wherever B's assumptions do."""
    d = drain_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    d0 = non_decode_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    qw = queue if waiting is None else waiting
    b = qw * (guard_steps(config, d, d0, queue, max_prompt=max_prompt, max_output=max_output) + gap_steps(config)
              + unscanned_steps(config, queue))
    # Where the cap can block r*, every wait's guards and gaps come to one S less (the docstring's
    # "one S less": r's first S inside the first guard, a guard fewer, or a quiet first guard,
    # D + 2 <= G - S steps).
    return b - starvation_window(config) if qw > 0 and cap_can_block(config, queue) else b


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


_GUARD, _CAP, _ADMIT = (Decision.SKIP, "fair_guard"), (Decision.SKIP, "lora_cap"), (Decision.ADMIT, None)
_NONE: frozenset[int] = frozenset()


class FairGate(GateBase):
    """`fair` in the reference core: `FairGuard` fed from the core's state."""

    name = "fair"
    guard_class: type[FairGuard] = FairGuard  # planted bugs (tests/planted.py) swap the guard

    def __init__(self) -> None:
        self.guard: FairGuard | None = None
        self._active: set[int] = set()  # adapters of every running request, kept as the scan admits
        self._star_seen = False  # this scan has visited r*

    def _guard(self, state: State) -> FairGuard:
        if self.guard is None:
            cfg = state.config
            self.guard = self.guard_class(self.window(cfg), cfg.max_loras, cfg.queue == "priority")
        return self.guard

    def window(self, config: Config) -> int:
        """The guard's S in steps (`starvation_window`; planted bugs count it otherwise)."""
        return starvation_window(config)

    def enqueued(self, state: State, rid: str) -> None:
        rs = state.reqs[rid]
        self._guard(state).enqueue(Waiting(rid, rs.req.adapter, rs.waiting_since, rs.seq, rs.req.priority))

    def dequeued(self, state: State, rid: str) -> None:
        self._guard(state).dequeue(rid)

    def front(self, ctx: ScanContext) -> list[str]:
        """The requests the scan visits first, in O(log W) from the guard's
        index: [r*], or none. (The rest follow in queue order.)"""
        reqs = ctx.state.reqs
        self._active, self._star_seen = running_loras(ctx), False
        star = self._guard(ctx.state).begin_scan(ctx.step, lambda r: reqs[r].stale > 0)
        return [] if star is None else [star]

    def cap_closed(self, ctx: ScanContext) -> set[int] | None:
        """The adapters a request must be of to get past `decide` for the rest
        of this scan, or None while that is not so: once the cap is full
        (`max_loras` adapters run or were admitted), `decide` skips every
        request of another adapter (> 0) other than r*, whose visit picks the
        victim (a held request of another adapter is skipped as well: the
        hold and the cap give the same answer, and the set only grows as the
        scan admits, so a later request of that adapter is skipped too).
        vLLM's driver skips those requests without asking, and passes over
        them before vLLM's loop reaches them (`GateMixin`, `PassOverQueue`)."""
        return self._active if len(self._active) >= ctx.state.config.max_loras else None

    def waiting_by_adapter(self) -> dict[int, int]:
        """The waiting requests per adapter (0: the base model), from the index."""
        return self.guard.backlog if self.guard is not None else {}

    def held_for_scan(self) -> set[int] | frozenset[int]:
        """The adapters whose every later request in this scan `decide` holds
        (the set grows as the scan goes): those with a request held in it,
        once the scan has visited r* and it is still r*. r* is admitted only
        at its own visit, so it then stays r* to the scan's end, and
        `FairGuard.holds` holds an adapter's later requests once one is held
        (FIFO within the adapter). vLLM's driver skips and passes over them
        as it does the cap's (`GateMixin`, `PassOverQueue`)."""
        guard = self.guard
        if not self._star_seen or guard is None or guard.star is None:
            return _NONE
        return guard._held

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        first = self.front(ctx)
        if not first:
            return queue
        rest = list(queue)
        if first[0] in rest:  # ids are unique in `waiting`: the queue less r*, in order
            rest.remove(first[0])
        return first + rest

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        # The scan asks once per request it visits, so the common case (no r*,
        # or a request of no victim) asks `FairGuard.holds` nothing: it holds
        # neither r* nor a request of an adapter that is not a victim.
        st = ctx.state
        guard = self.guard if self.guard is not None else self._guard(st)
        rs = st.reqs[rid]
        adapter = rs.req.adapter
        star = guard.star
        if star is not None:  # with no r*, nothing is held (`FairGuard.holds`)
            if rid == star:
                self._star_seen = True
                guard.visit_star(slot_outputs_left((st.adapter(r), st.reqs[r].req.max_tokens - st.reqs[r].generated)
                                                   for r in st.running))
            elif adapter in guard.victims and guard.holds(rid, adapter, rs.req.max_tokens - rs.generated):
                return _GUARD
        if cap_blocks(self._active, adapter, st.config.max_loras):
            return _CAP
        return _ADMIT

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        self._guard(ctx.state).admitted(rid)
        if ctx.state.adapter(rid) > 0:
            self._active.add(ctx.state.adapter(rid))


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Runs `FairGuard` on the observed state alone (waiting order,
    waiting-since steps, outputs left, the running requests and admissions
    of each step), calling it as `FairGate` does: `begin_scan` when a scan
    starts, `visit_star` when the scan reaches r* (it does unless the budget
    or the seats were gone before it: the core's loop checks both before each
    request), `holds` per request, `admitted` per admission in scan order.
    So a trace recorded from `fair` inside vLLM is judged by the guard the
    reference runs. It declares two kinds of hold: the guard's
    (`fair_guard`) and fair's cap over every running request's adapter
    (`fair_cap`), which is stricter than the cap `no_hol_blocking` applies.
    """

    def __init__(self, config: Config) -> None:
        self.guard = FairGuard(starvation_window(config), config.max_loras, config.queue == "priority")
        self._order: list[str] = []
        self._base: set[int] = set()
        self._scanned = False
        self.held_ids: set[str] = set()  # the requests the guard holds in this step's scan
        self._told: set[str] = set()  # this step's admissions told to the guard

    def begin(self, view: StepView) -> str | None:
        rec, cfg = view.rec, view.config
        running = [r for r in rec.running if r not in rec.preempted]
        self._base = {view.adapter[r] for r in running if view.adapter[r] > 0}
        g = self.guard
        now = set(rec.waiting)
        for rid in g.waiting_ids() - now:
            g.dequeue(rid)  # admitted (told in `end`) or aborted / finished
        for rid in rec.waiting:  # arrivals, and requests that rejoined (preempted)
            entry = g._waiting.get(rid)
            if entry is None or entry[0] != view.waiting_since[rid]:
                g.enqueue(Waiting(rid, view.adapter[rid], view.waiting_since[rid], view.seq[rid], view.priority[rid]))
        star = g.begin_scan(rec.step, view.in_flight.__contains__)
        budget = cfg.max_num_batched_tokens - sum(n for r, n in rec.scheduled.items() if r not in rec.admitted)
        self._order = ([star] if star is not None else []) + [r for r in rec.waiting if r != star]
        admitted = set(rec.admitted)
        self._told = set()
        if star is not None and budget > 0 and len(running) < cfg.max_num_seqs:
            self.guard.visit_star(slot_outputs_left((view.adapter[r], view.outputs_left[r]) for r in running))
            if star in admitted:
                self._tell(star)  # r* comes first: the rest of the scan runs without a guard
        # `holds` in scan order, on the requests the scan judges (not r*, not
        # stale), each admission told before the next request is judged
        self.held_ids = set()
        for r in self._order:
            if r == star or r in view.in_flight:
                continue
            if self.guard.holds(r, view.adapter[r], view.outputs_left[r]):
                self.held_ids.add(r)
            elif r in admitted:
                self._tell(r)
        self._scanned = True
        return star

    def _tell(self, rid: str) -> None:
        self.guard.admitted(rid)
        self._told.add(rid)

    def hold(self, view: StepView, rid: str) -> str | None:
        if rid in self.held_ids:
            return "fair_guard"
        admitted = set(view.rec.admitted)
        before = self._order[:self._order.index(rid)] if rid in self._order else []
        active = self._base | {view.adapter[r] for r in before if r in admitted and view.adapter[r] > 0}
        return "fair_cap" if cap_blocks(active, view.adapter[rid], view.config.max_loras) else None

    def end(self, view: StepView) -> None:
        if self._scanned:  # admissions `begin` did not judge (it tells the others in scan order)
            for rid in view.rec.admitted:
                if rid not in self._told:
                    self.guard.admitted(rid)
        self._scanned = False
