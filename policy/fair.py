"""`fair`: vLLM's skip rule with a crash-proof cap and a starvation guard.

S, the one knob, is `starvation_steps` prefill cadences: S x k steps, where
vLLM's DP prefill throttle admits on one step in k (`starvation_window`).
The rule, in the order `FairGate.decide` applies it (the oldest starving
request r* first, one every S steps; the slots that can free by a deadline
drain; only the last victim is held; the cap counts every running request),
and why each part is there: docs/fair.md. B, the bound on every wait:
`policy.bound` (docs/fair-bound.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, GateBase, ScanContext, running_loras
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.state import State


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
    """The guard's memory and its index of `waiting`, for `FairGate` and the
    trace checker (`policy.check.FairHolds`). The index (`enqueue`, `dequeue`)
    is a heap by (waiting since, arrival order) per priority level, so r*
    costs O(log W) a step. Per scan: `begin_scan` (mechanism 1), `visit_star`
    (2), `holds` per request (3), `admitted` per admission, each before the
    next request is asked about (a late admission changes the victims)."""

    window_steps: int  # S x k steps (`starvation_window`): threshold, gap and deadline slack
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
        """Mechanism 1 when a scan starts: r*, or None when there is none or it is
        `stale` (its async output is in flight; it stays r*)."""
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
        """Has a request of a more urgent priority level than r*'s waited S steps (and is not stale)?"""
        urgent = [level for level in sorted(self._heaps) if level < self._level[star]]
        return bool(urgent) and self._first_starving(urgent, step, stale) is not None

    def _oldest_starving(self, step: int, stale: Callable[[str], bool]) -> str | None:
        """The smallest (level, waiting since, arrival order) that waited S steps, not stale."""
        return self._first_starving(sorted(self._heaps), step, stale)

    def _first_starving(self, levels: Iterable[int], step: int, stale: Callable[[str], bool]) -> str | None:
        """`_oldest_starving` among the priority levels `levels` (ascending)."""
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
                if step - since < self.window_steps:
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
        """Mechanism 2 when the scan reaches r* (`left`: `slot_outputs_left`)."""
        active = set(left)
        if cap_blocks(active, self.star_adapter, self.max_loras) and not (self.victims & active):
            deadline = self.step + min(left.values()) + self.window_steps
            self.victims = {a for a in active if self.step + left[a] <= deadline}
            self.deadline = dict.fromkeys(self.victims, deadline)

    def drains(self, adapter: int, left: int) -> bool:
        """A request of victim `adapter` with `left` outputs left ends by the deadline."""
        return self.step + left <= self.deadline[adapter]

    def holds(self, rid: str, adapter: int, left: int) -> bool:
        """Mechanism 3: is `rid` (of `adapter`, `left` outputs left) held for r*?"""
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
        """`rid` got in: r* starts the gap; a late request ends its adapter's victimhood."""
        self.dequeue(rid)
        if rid == self.star:
            self._clear()
            self.cool_until = self.step + self.window_steps
        elif rid in self._late:
            adapter = self._late.pop(rid)
            self.victims.discard(adapter)
            self.deadline.pop(adapter, None)

    def _clear(self) -> None:
        self.star, self.star_adapter, self.chosen_at = None, 0, 0
        self.victims, self.deadline = set(), {}


def starvation_window(config: Config) -> int:
    """S in steps: `starvation_steps` prefill cadences x k (`prefill_schedule_interval`)."""
    return config.starvation_steps * config.prefill_schedule_interval


def slot_outputs_left(running: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Per slot holder, its longest-running request's outputs left, from each running (adapter, left)."""
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
        """The requests the scan visits first: [r*], or none (then queue order)."""
        reqs = ctx.state.reqs
        self._active, self._star_seen = running_loras(ctx), False
        star = self._guard(ctx.state).begin_scan(ctx.step, lambda r: reqs[r].stale > 0)
        return [] if star is None else [star]

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        first = self.front(ctx)  # ids are unique in `waiting`: r*, then the queue less r*, in order
        return first + [r for r in queue if r != first[0]] if first else queue

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        """The rule for `rid`, in the module docstring's order (1: `front` put r*
        first). Only a victim's request asks `FairGuard.holds`: it holds no other."""
        st = ctx.state
        guard = self.guard if self.guard is not None else self._guard(st)
        rs = st.reqs[rid]
        adapter = rs.req.adapter
        star = guard.star
        if star is not None:  # with no r*, nothing is held
            if rid == star:  # 2: the slots that can free by a deadline drain
                self._star_seen = True
                guard.visit_star(slot_outputs_left((st.adapter(r), st.reqs[r].req.max_tokens - st.reqs[r].generated)
                                                   for r in st.running))
            elif adapter in guard.victims and guard.holds(rid, adapter, rs.req.max_tokens - rs.generated):
                return _GUARD  # 3: only the last victim is held
        if cap_blocks(self._active, adapter, st.config.max_loras):
            return _CAP  # 4: the cap over every running request's adapter
        return _ADMIT

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        self._guard(ctx.state).admitted(rid)
        if ctx.state.adapter(rid) > 0:
            self._active.add(ctx.state.adapter(rid))

    def cap_closed(self, ctx: ScanContext) -> set[int] | None:
        """Once the cap is full, the adapters a request (but r*) must be of to get
        past `decide` for the rest of the scan, else None: vLLM's driver skips
        and passes over the others without asking (`GateMixin`, `PassOverQueue`)."""
        return self._active if len(self._active) >= ctx.state.config.max_loras else None

    def held_for_scan(self) -> set[int] | frozenset[int]:
        """The adapters whose every later request in this scan `decide` holds (once
        it visited r*, which stays r* to the scan's end); the driver skips them too."""
        guard = self.guard
        if not self._star_seen or guard is None or guard.star is None:
            return _NONE
        return guard._held

    def waiting_by_adapter(self) -> dict[int, int]:
        """The waiting requests per adapter (0: the base model), from the index."""
        return self.guard.backlog if self.guard is not None else {}
