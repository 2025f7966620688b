"""Reconstruct scheduler state from observed events, for the property checks.

A trace says what was scheduled, not why; the observer replays the events
into per-request counters (computed tokens, sampled tokens, KV blocks, when a
request last started waiting) so that the property predicates can be asked
about each step. It uses no policy code: it is how a trace from vLLM itself
is judged. Memory follows what is live: a finished or aborted request is
packed (`_RETIRED`) until a later step names it (docs/operator-scale.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from lora_sched.spec.config import Config
from lora_sched.spec.properties import (
    STEP_PROPERTIES,
    PolicyHolds,
    StepView,
    Violation,
    bounded_wait,
    no_hol_blocking,
)
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord, blocks_for

# seq, adapter, prompt_tokens, max_tokens, arrival, priority, status, computed, sampled,
# waiting_since, first_admitted (-1: never)
_RETIRED = struct.Struct("<11i")  # 4-byte fields: steps, ids and tokens stay below 2**31
_STATUS = {"finished": 0, "aborted": 1}
_STATUS_NAME = {v: k for k, v in _STATUS.items()}


_NONE: frozenset[str] = frozenset()


@dataclass(slots=True)
class Observed:
    req: Request
    seq: int
    status: str = "waiting"
    computed: int = 0
    sampled: int = 0  # tokens sampled so far (applied or in flight)
    blocks: int = 0
    waiting_since: int = 0
    first_admitted: int | None = None

    @property
    def num_tokens(self) -> int:
        return self.req.prompt_tokens + self.sampled


class _Column(Mapping[str, Any]):
    """One field of the live requests, read when asked (a `StepView` mapping)."""

    __slots__ = ("_reqs", "_get")

    def __init__(self, reqs: dict[str, Observed], get: Callable[[Observed], Any]) -> None:
        self._reqs, self._get = reqs, get

    def __getitem__(self, rid: str) -> Any:
        return self._get(self._reqs[rid])

    def __iter__(self) -> Iterator[str]:
        return iter(self._reqs)

    def __len__(self) -> int:
        return len(self._reqs)

    def items(self):  # type: ignore[override]
        get = self._get
        return ((rid, get(o)) for rid, o in self._reqs.items())


@dataclass
class Observer:
    config: Config
    holds: PolicyHolds | None = None  # the policy's declared holds (fair's guard)
    reqs: dict[str, Observed] = field(default_factory=dict)  # live (not retired), in arrival order
    last_step: int = 0
    violations: list[Violation] = field(default_factory=list)
    keep_waits: bool = True  # False: `waits()` only knows the worst wait (`worst_wait`)
    _retired: dict[str, bytes] = field(default_factory=dict)
    _seq: int = 0
    _prev_scheduled: set[str] = field(default_factory=set)
    _prev_sampled: set[str] = field(default_factory=set)  # async: sampled last step, output not applied yet
    _deferred_finish: list[str] = field(default_factory=list)
    _waits: dict[str, tuple[int, int]] = field(default_factory=dict)  # rid -> (seq, wait)
    worst_wait: tuple[str, int, int] | None = None  # (rid, wait, seq): the longest, earliest arrival on ties

    def __post_init__(self) -> None:
        r = self.reqs
        # What never changes is kept in plain dicts (the hot lookups), and so
        # are each live request's status (in arrival order, as `reqs`) and the
        # live requests first admitted already, kept in step with `Observed`;
        # the rest is read when asked.
        self._fixed: dict[str, dict[str, int]] = {k: {} for k in ("adapter", "arrival", "priority", "seq")}
        self._status: dict[str, str] = {}
        self._by: dict[str, set[str]] = {"waiting": set(), "running": set()}  # the keys of `_status` by value
        self._ever: set[str] = set()
        # outputs_left reads `_prev_sampled` when asked: during the step's checks, before `_advance`.
        self._views = dict(
            num_tokens=_Column(r, lambda o: o.num_tokens), computed=_Column(r, lambda o: o.computed),
            waiting_since=_Column(r, lambda o: o.waiting_since), ever_admitted=self._ever,
            status=self._status, by_status=self._by,
            outputs_left=_Column(r, lambda o: o.req.max_tokens - o.sampled + (o.req.id in self._prev_sampled)),
            **self._fixed)
        for rid, o in r.items():
            self._track(rid, o)

    def _track(self, rid: str, o: Observed) -> None:
        f = self._fixed
        f["adapter"][rid], f["arrival"][rid], f["priority"][rid], f["seq"][rid] = \
            o.req.adapter, o.req.arrival, o.req.priority, o.seq
        self._set_status(rid, o.status)
        if o.first_admitted is not None:
            self._ever.add(rid)

    def _set_status(self, rid: str, status: str) -> None:
        """`rid`'s status in `_status` and `_by` (its `Observed` is set by the caller)."""
        by, old = self._by, self._status.get(rid)
        if old in by:
            by[old].discard(rid)
        self._status[rid] = status
        if status in by:
            by[status].add(rid)

    def arrive(self, req: Request) -> None:
        o = self.reqs[req.id] = Observed(req, self._seq, waiting_since=req.arrival)
        self._track(req.id, o)
        self._seq += 1

    def abort(self, rid: str) -> None:
        o = self.reqs.get(rid)
        if o is not None and o.status in ("waiting", "running"):
            o.status, o.blocks = "aborted", 0
            self._retire(rid)

    # ---- retired requests ---------------------------------------------------
    def _retire(self, rid: str) -> None:
        o = self.reqs.pop(rid)
        for d in self._fixed.values():
            del d[rid]
        self._by.get(self._status.pop(rid), set()).discard(rid)
        self._ever.discard(rid)
        r = o.req
        self._retired[r.id] = _RETIRED.pack(  # keyed by the arrival's id string, which the reader keeps too
            o.seq, r.adapter, r.prompt_tokens, r.max_tokens, r.arrival, r.priority, _STATUS[o.status],
            o.computed, o.sampled, o.waiting_since, -1 if o.first_admitted is None else o.first_admitted)

    def _unretire(self, rid: str) -> None:
        """Bring a retired request back to the live set (a step names it), keeping arrival order."""
        (seq, adapter, prompt, max_tokens, arrival, priority, status, computed, sampled, since,
         first) = _RETIRED.unpack(self._retired.pop(rid))
        self.reqs[rid] = Observed(Request(rid, adapter, prompt, max_tokens, arrival, priority), seq,
                                  _STATUS_NAME[status], computed, sampled, 0, since, None if first < 0 else first)
        ordered = sorted(self.reqs.items(), key=lambda kv: kv[1].seq)
        self.reqs.clear()
        self.reqs.update(ordered)
        for d in self._fixed.values():
            d.clear()
        self._status.clear()
        for ids in self._by.values():
            ids.clear()
        self._ever.clear()
        for r, o in ordered:
            self._track(r, o)

    def _unpacked(self) -> Iterator[tuple[str, int, int, int | None, str]]:
        """(id, seq, arrival, first admitted, status) of every request, retired or live."""
        for rid, packed in self._retired.items():
            seq, _, _, _, arrival, _, status, _, _, _, first = _RETIRED.unpack(packed)
            yield rid, seq, arrival, None if first < 0 else first, _STATUS_NAME[status]
        for rid, o in self.reqs.items():
            yield rid, o.seq, o.req.arrival, o.first_admitted, o.status

    # ---- one step -----------------------------------------------------------
    def observe(self, rec: StepRecord) -> list[Violation]:
        """Check every step property on `rec`, then advance the state."""
        cfg = self.config
        reqs = self.reqs
        named: list[str] = []
        known = reqs.__contains__
        if not all(map(known, chain(rec.waiting, rec.running, rec.scheduled, rec.admitted, rec.preempted,
                                    rec.finished))):
            for ids in (rec.waiting, rec.running, rec.scheduled, rec.admitted, rec.preempted, rec.finished):
                if not all(map(known, ids)):
                    for rid in ids:
                        if rid not in reqs and rid in self._retired:
                            self._unretire(rid)
                            named.append(rid)
        # KV after the running phase: scheduled running requests grow to hold
        # computed + new tokens; preempted ones hold nothing. Only the KV
        # clauses read blocks, so with unlimited KV none are counted.
        blocks_after: dict[str, int] = {}
        used_before_scan = 0
        preempted = set(rec.preempted) if rec.preempted else _NONE
        if cfg.kv_blocks is not None:
            sget, bs = rec.scheduled.get, cfg.block_size
            for rid in rec.running:
                if preempted and rid in preempted:
                    continue
                o = reqs[rid]
                n = sget(rid, 0)
                if n:
                    b = -(-(o.computed + n) // bs)  # blocks_for
                    blocks_after[rid] = b if b > o.blocks else o.blocks
                else:
                    blocks_after[rid] = o.blocks
            used_before_scan = sum(blocks_after.values())
            for rid in rec.admitted:
                blocks_after[rid] = blocks_for(reqs[rid].computed + sget(rid, 0), bs)
        running_after = ([r for r in rec.running if r not in preempted] if preempted else list(rec.running)) \
            + rec.admitted
        view = StepView(cfg, rec, running_after=running_after, blocks_after=blocks_after,
                        used_before_scan=used_before_scan,
                        in_flight=self._prev_scheduled if cfg.async_scheduling else _NONE, **self._views)
        found = []
        holds = self.holds
        for prop in STEP_PROPERTIES.values():
            v = prop(view, holds) if prop is no_hol_blocking or prop.__name__ == "no_hol_blocking" else prop(view)
            if v is not None:
                found.append(v)
        if holds is not None:
            holds.end(view)
        done = self._advance(rec, blocks_after)
        if done or named:
            for rid in [*done, *named]:
                o = reqs.get(rid)
                if o is not None and o.status in _STATUS:
                    self._retire(rid)
        if found:
            self.violations.extend(found)
        return found

    def _advance(self, rec: StepRecord, blocks_after: dict[str, int]) -> list[str]:
        """Apply the step; returns the requests it finished."""
        reqs = self.reqs
        for rid in rec.preempted:
            o = reqs[rid]
            o.status, o.computed, o.blocks, o.waiting_since = "waiting", 0, 0, rec.step
            self._set_status(rid, "waiting")
        for rid in rec.admitted:
            o = reqs[rid]
            o.status = "running"
            self._set_status(rid, "running")
            if o.first_admitted is None:
                o.first_admitted = rec.step
                self._ever.add(rid)
                self._admitted_first(o)
        async_ = self.config.async_scheduling
        sampled = set()  # read only under async scheduling (`_prev_sampled`)
        for rid, n in rec.scheduled.items():
            o = reqs[rid]
            o.computed = c = o.computed + n
            if c >= o.req.prompt_tokens + o.sampled:  # num_tokens
                o.sampled += 1
                if async_:
                    sampled.add(rid)
        if blocks_after:
            for rid in rec.scheduled:
                if rid in blocks_after:
                    reqs[rid].blocks = blocks_after[rid]
        if async_:
            self._prev_sampled = sampled
            self._prev_scheduled = set(rec.scheduled)
            done, self._deferred_finish = self._deferred_finish, list(rec.finished)
        else:  # outputs are applied at once: nothing in flight
            done = rec.finished
        for rid in done:
            o = reqs.get(rid)
            if o is None:  # retired since (aborted before its output was applied)
                continue
            if o.status in ("waiting", "running"):
                o.status, o.blocks = "finished", 0
                self._set_status(rid, "finished")
        self.last_step = rec.step
        return done

    def _admitted_first(self, o: Observed) -> None:
        wait = o.first_admitted - o.req.arrival  # type: ignore[operator]
        if self.keep_waits:
            self._waits[o.req.id] = (o.seq, wait)
        w = self.worst_wait
        if w is None or wait > w[1] or (wait == w[1] and o.seq < w[2]):
            self.worst_wait = (o.req.id, wait, o.seq)

    def close(self, bound: int | None) -> list[Violation]:
        """Trace-level properties once the trace is over (async finishes applied)."""
        for rid in self._deferred_finish:
            o = self.reqs.get(rid)
            if o is not None and o.status in ("waiting", "running"):
                o.status, o.blocks = "finished", 0
                self._set_status(rid, "finished")
        self._deferred_finish = []
        found = []
        if bound is not None:
            # bounded_wait reports the longest wait (the earliest arrival on ties): judge that one.
            worst: tuple[int, int, str, int, int | None, str] | None = None
            for rid, seq, arrival, first, status in self._unpacked():
                if first is None and status == "aborted":
                    continue
                wait = (first if first is not None else self.last_step) - arrival
                if worst is None or (wait, -seq) > (worst[0], -worst[1]):
                    worst = (wait, seq, rid, arrival, first, status)
            if worst is not None:
                v = bounded_wait({worst[2]: (worst[3], worst[4], worst[5])}, self.last_step, bound)
                if v is not None:
                    found.append(v)
        self.violations.extend(found)
        return found

    def waits(self) -> dict[str, int]:
        """Steps from arrival to first admission, in arrival order (`keep_waits`; else only the worst)."""
        if not self.keep_waits:
            return {self.worst_wait[0]: self.worst_wait[1]} if self.worst_wait else {}
        return {rid: w for rid, (_, w) in sorted(self._waits.items(), key=lambda kv: kv[1][0])}
