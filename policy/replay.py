"""Replay a trace through a reference policy, step by step.

The reference gets the trace's arrivals and aborts at the steps they name and
schedules every step the trace records; it must produce the same queue
orders, scheduled tokens, admissions, preemptions and finishes. A step's
`throttle` is read as the engine core's input (a DP rank's
`throttle_prefills`); on a release whose scheduler also keeps its own prefill
cadence (0.33, 0.34) vLLM defers prefills on either, so the reference must
not mark a step the trace leaves unmarked. The first divergence is reported
with the state around it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from lora_sched.policy import make_gate
from lora_sched.policy.core import ScheduleError, Scheduler
from lora_sched.spec.config import Config
from lora_sched.spec.state import StepRecord
from lora_sched.spec.trace import Abort, Arrive, Step, Trace

FIELDS = ("waiting", "running", "scheduled", "admitted", "preempted", "finished")


@dataclass
class Divergence:
    step: int
    line: int
    field: str
    expected: object  # what the reference did
    actual: object  # what the trace says
    context: str  # recent steps and the reference state around it

    def __str__(self) -> str:
        return (f"step {self.step} (trace line {self.line}): {self.field} differs\n"
                f"    reference: {self.expected}\n    trace:     {self.actual}\n{self.context}")


@dataclass
class ReplayResult:
    policy: str
    matched: int
    total: int
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def describe(self) -> str:
        if self.ok:
            return f"replay against {self.policy} ... ok ({self.matched}/{self.total} steps matched)"
        return (f"replay against {self.policy} ... DIVERGED after {self.matched}/{self.total} steps matched "
                f"at {self.divergence}")


def _fmt(rec: StepRecord) -> str:
    return (f"step {rec.step}: waiting={rec.waiting} running={rec.running} scheduled={rec.scheduled} "
            f"admitted={rec.admitted} preempted={rec.preempted} finished={rec.finished}")


def _context(sched: Scheduler, ours: StepRecord, recent: Iterable[StepRecord]) -> str:
    st = sched.state
    rows = ["    recent steps of the trace:", *(f"      {_fmt(r)}" for r in list(recent)[-4:]),
            f"    reference state after the step (holds: {ours.holds}):"]
    for rid in [*ours.running, *ours.waiting][:24]:
        rs = st.reqs.get(rid)
        if rs is None:  # retired and forgotten since (`Scheduler(forget_done=True)`)
            rows.append(f"      {rid:>12} finished or aborted, no longer in the reference state")
            continue
        rows.append(f"      {rid:>12} adapter={rs.req.adapter} prompt={rs.req.prompt_tokens} "
                    f"max_tokens={rs.req.max_tokens} arrival={rs.req.arrival} priority={rs.req.priority} "
                    f"computed={rs.computed} generated={rs.generated} blocks={rs.blocks} status={rs.status}")
    return "\n".join(rows)


def due_events(pending: list[Arrive | Abort], step: int) -> list[Arrive | Abort]:
    """Take from `pending` (file order) the arrivals and aborts that take effect
    when step `step` starts, in the order they apply: by the step they name,
    arrivals before aborts, then file order. Under async scheduling the events
    of step t+1 precede step t's line in the file, so some wait for a later step."""
    if len(pending) == 1:  # the common case: one event read since the last step line
        if pending[0].step > step:
            return []
        due = pending[:]
        pending.clear()
        return due
    due = [e for e in pending if e.step <= step]
    if due:
        pending[:] = [e for e in pending if e.step > step]
        due.sort(key=lambda e: (e.step, isinstance(e, Abort)))
    return due


class Replayer:
    """The reference fed a trace one event at a time (one pass, memory of the live requests).

    `apply` takes each arrival and abort when it takes effect (`due_events`),
    `step` each step line; `result` is final after `finish`. After the first
    divergence the rest is ignored."""

    def __init__(self, config: Config, policy: str | None = None, *, total: int = 0) -> None:
        self.config = config if policy is None else replace(config, policy=policy)
        self.sched = Scheduler(self.config, make_gate(self.config.policy), forget_done=True)
        self.matched = 0
        self.total = total  # steps in the trace (known at the end when streaming)
        self.divergence: Divergence | None = None
        self._prev: tuple[Step, StepRecord] | None = None  # async: finishes known one step late
        self._recent: deque[StepRecord] = deque(maxlen=4)
        self._ours_last = StepRecord(0, [], [], {}, [], [], [])

    def _compare(self, ev: Step, ours: StepRecord, fields: tuple[str, ...]) -> Divergence | None:
        for f in fields:
            want, got = getattr(ours, f), getattr(ev.rec, f)
            if want == got and (f != "scheduled" or list(want) == list(got)):
                continue  # equal (and `scheduled` in the same order): the common case, told quickly
            same = want == got if f == "throttle" else (sorted(want) == sorted(got)) if f == "finished" else (
                list(want.items()) == list(got.items()) if f == "scheduled" else list(want) == list(got))
            if not same:
                return Divergence(ev.rec.step, ev.line, f, want, got, _context(self.sched, ours, self._recent))
        return None

    def apply(self, e: Arrive | Abort) -> None:
        if self.divergence is not None:
            return
        if isinstance(e, Arrive):
            try:
                self.sched.add(e.req)
            except ScheduleError as exc:  # a request vLLM would refuse
                self.divergence = Divergence(e.step, e.line, "arrive", f"refused: {exc}", "accepted",
                                             _context(self.sched, self._ours_last, self._recent))
        else:
            self.sched.abort(e.id)

    def step(self, ev: Step) -> None:
        if self.divergence is not None:
            return
        config = self.config
        # The trace's throttle is the step's input on every release; where the
        # scheduler keeps its own cadence too (0.33, 0.34) the reference ORs
        # it in, and the marks must then match.
        by_engine = self.sched.release.prefill_cadence == "dp_engine"
        ours = self._ours_last = self.sched.step(ev.rec.step, throttle=ev.rec.throttle)
        rec = ev.rec
        if (ours.scheduled == rec.scheduled and ours.waiting == rec.waiting and ours.running == rec.running
                and ours.admitted == rec.admitted and ours.preempted == rec.preempted
                and (config.async_scheduling or ours.finished == rec.finished)
                and (by_engine or ours.throttle == rec.throttle) and list(ours.scheduled) == list(rec.scheduled)):
            d = None  # every field the same (the common case, told at once; `_compare` says what differs)
        else:
            fields = FIELDS if not config.async_scheduling else FIELDS[:-1]
            if not by_engine:
                fields = ("throttle", *fields)
            d = self._compare(ev, ours, fields)
        if d is None and config.async_scheduling and self._prev is not None:
            d = self._compare(self._prev[0], self._prev[1], ("finished",))
        if d is not None:
            self.divergence = d
            return
        self.matched += 1
        self._recent.append(ev.rec)
        self._prev = (ev, ours)

    def finish(self, pending: list[Arrive | Abort], *, complete: bool, total: int | None = None) -> ReplayResult:
        """The verdict, once every step line was fed; `pending` holds the events never due."""
        if total is not None:
            self.total = total
        if self.divergence is None and self.config.async_scheduling and self._prev is not None:
            # Aborts after the last step still land before its output is applied
            # (the driver applies them at the next step, which never comes).
            for e in sorted(pending, key=lambda e: e.step):
                if isinstance(e, Abort) and e.id in self.sched.state.reqs:
                    self.sched.abort(e.id)
            self.sched.drain()
            d = self._compare(self._prev[0], self._prev[1], ("finished",))
            if d is not None and complete:
                self.divergence = d
                self.matched -= 1
            self._prev = None
        return ReplayResult(self.config.policy, self.matched, self.total, self.divergence)


def replay(trace: Trace, policy: str | None = None) -> ReplayResult:
    """Replay `trace` through `policy` (default: the policy in its header)."""
    r = Replayer(trace.config, policy, total=sum(isinstance(e, Step) for e in trace.events))
    pending: list[Arrive | Abort] = []  # events not yet applied, in file order
    for ev in trace.events:
        if isinstance(ev, Step):
            for e in due_events(pending, ev.rec.step):
                r.apply(e)
            r.step(ev)
            if r.divergence is not None:
                break
        else:
            pending.append(ev)
    return r.finish(pending, complete=trace.complete)
