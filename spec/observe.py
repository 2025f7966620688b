"""Reconstruct scheduler state from observed events, for the property checks.

A trace says what was scheduled, not why; the observer replays the events
into per-request counters (computed tokens, sampled tokens, KV blocks, when a
request last started waiting) so that the property predicates can be asked
about each step. It uses no policy code: it is how a trace from vLLM itself
is judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.spec.config import Config
from lora_sched.spec.properties import (
    STEP_PROPERTIES,
    PolicyHolds,
    StepView,
    Violation,
    bounded_wait,
)
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord, blocks_for


@dataclass
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


@dataclass
class Observer:
    config: Config
    holds: PolicyHolds | None = None  # the policy's declared holds (fair's guard)
    reqs: dict[str, Observed] = field(default_factory=dict)
    last_step: int = 0
    violations: list[Violation] = field(default_factory=list)
    _prev_scheduled: set[str] = field(default_factory=set)
    _prev_sampled: set[str] = field(default_factory=set)  # async: sampled last step, output not applied yet
    _deferred_finish: list[str] = field(default_factory=list)

    def arrive(self, req: Request) -> None:
        self.reqs[req.id] = Observed(req, len(self.reqs), waiting_since=req.arrival)

    def abort(self, rid: str) -> None:
        o = self.reqs[rid]
        if o.status in ("waiting", "running"):
            o.status, o.blocks = "aborted", 0

    def observe(self, rec: StepRecord) -> list[Violation]:
        """Check every step property on `rec`, then advance the state."""
        cfg = self.config
        reqs = self.reqs
        # KV after the running phase: scheduled running requests grow to hold
        # computed + new tokens; preempted ones hold nothing.
        blocks_after: dict[str, int] = {}
        for rid in rec.running:
            if rid in rec.preempted:
                continue
            o = reqs[rid]
            n = rec.scheduled.get(rid, 0)
            blocks_after[rid] = max(o.blocks, blocks_for(o.computed + n, cfg.block_size)) if n else o.blocks
        used_before_scan = sum(blocks_after.values())
        for rid in rec.admitted:
            blocks_after[rid] = blocks_for(reqs[rid].computed + rec.scheduled.get(rid, 0), cfg.block_size)
        running_after = [r for r in rec.running if r not in rec.preempted] + list(rec.admitted)
        view = StepView(
            config=cfg,
            rec=rec,
            adapter={rid: o.req.adapter for rid, o in reqs.items()},
            num_tokens={rid: o.num_tokens for rid, o in reqs.items()},
            computed={rid: o.computed for rid, o in reqs.items()},
            waiting_since={rid: o.waiting_since for rid, o in reqs.items()},
            arrival={rid: o.req.arrival for rid, o in reqs.items()},
            priority={rid: o.req.priority for rid, o in reqs.items()},
            seq={rid: o.seq for rid, o in reqs.items()},
            ever_admitted={rid for rid, o in reqs.items() if o.first_admitted is not None},
            status={rid: o.status for rid, o in reqs.items()},
            running_after=running_after,
            blocks_after=blocks_after,
            used_before_scan=used_before_scan,
            in_flight=set(self._prev_scheduled) if cfg.async_scheduling else set(),
            outputs_left={rid: o.req.max_tokens - o.sampled + (rid in self._prev_sampled) for rid, o in reqs.items()},
        )
        found = []
        for prop in STEP_PROPERTIES.values():
            v = prop(view, self.holds) if prop.__name__ == "no_hol_blocking" else prop(view)
            if v is not None:
                found.append(v)
        if self.holds is not None:
            self.holds.end(view)
        self._advance(rec, blocks_after)
        self.violations.extend(found)
        return found

    def _advance(self, rec: StepRecord, blocks_after: dict[str, int]) -> None:
        reqs = self.reqs
        for rid in rec.preempted:
            o = reqs[rid]
            o.status, o.computed, o.blocks, o.waiting_since = "waiting", 0, 0, rec.step
        for rid in rec.admitted:
            o = reqs[rid]
            o.status = "running"
            if o.first_admitted is None:
                o.first_admitted = rec.step
        sampled = set()
        for rid, n in rec.scheduled.items():
            o = reqs[rid]
            o.computed += n
            o.blocks = blocks_after.get(rid, o.blocks)
            if o.computed >= o.num_tokens:
                o.sampled += 1
                sampled.add(rid)
        self._prev_sampled = sampled if self.config.async_scheduling else set()
        if self.config.async_scheduling:
            done, self._deferred_finish = self._deferred_finish, list(rec.finished)
        else:
            done = list(rec.finished)
        for rid in done:
            o = reqs[rid]
            if o.status in ("waiting", "running"):
                o.status, o.blocks = "finished", 0
        self._prev_scheduled = set(rec.scheduled)
        self.last_step = rec.step

    def close(self, bound: int | None) -> list[Violation]:
        """Trace-level properties once the trace is over (async finishes applied)."""
        for rid in self._deferred_finish:
            o = self.reqs[rid]
            if o.status in ("waiting", "running"):
                o.status, o.blocks = "finished", 0
        self._deferred_finish = []
        found = []
        if bound is not None:
            v = bounded_wait(
                {rid: (o.req.arrival, o.first_admitted, o.status) for rid, o in self.reqs.items()},
                self.last_step,
                bound,
            )
            if v is not None:
                found.append(v)
        self.violations.extend(found)
        return found

    def waits(self) -> dict[str, int]:
        return {rid: o.first_admitted - o.req.arrival for rid, o in self.reqs.items()
                if o.first_admitted is not None}
