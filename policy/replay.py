"""Replay a trace through a reference policy, step by step.

The reference gets the trace's arrivals and aborts at the steps they name and
schedules every step the trace records; it must produce the same queue
orders, scheduled tokens, admissions, preemptions and finishes, and, on a
release whose scheduler keeps the prefill cadence (0.33), the same
off-cadence steps (on 0.32 a step's `throttle` is the engine core's input). The first
divergence is reported with the state around it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lora_sched.policy import make_gate
from lora_sched.policy.core import ScheduleError, Scheduler
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


def _context(sched: Scheduler, ours: StepRecord, recent: list[str]) -> str:
    st = sched.state
    rows = ["    recent steps of the trace:", *(f"      {r}" for r in recent[-4:]),
            f"    reference state after the step (holds: {ours.holds}):"]
    for rid in [*ours.running, *ours.waiting][:24]:
        rs = st.reqs[rid]
        rows.append(f"      {rid:>12} adapter={rs.req.adapter} prompt={rs.req.prompt_tokens} "
                    f"max_tokens={rs.req.max_tokens} arrival={rs.req.arrival} priority={rs.req.priority} "
                    f"computed={rs.computed} generated={rs.generated} blocks={rs.blocks} status={rs.status}")
    return "\n".join(rows)


def replay(trace: Trace, policy: str | None = None) -> ReplayResult:
    """Replay `trace` through `policy` (default: the policy in its header)."""
    config = trace.config if policy is None else replace(trace.config, policy=policy)
    sched = Scheduler(config, make_gate(config.policy))
    steps = [e for e in trace.events if isinstance(e, Step)]
    pending: list[tuple[int, object]] = []  # events not yet applied, in file order
    prev: tuple[Step, StepRecord] | None = None  # async: finishes known one step late
    matched = 0
    recent: list[str] = []

    def compare(ev: Step, ours: StepRecord, fields: tuple[str, ...]) -> Divergence | None:
        for f in fields:
            want, got = getattr(ours, f), getattr(ev.rec, f)
            same = want == got if f == "throttle" else (sorted(want) == sorted(got)) if f == "finished" else (
                list(want.items()) == list(got.items()) if f == "scheduled" else list(want) == list(got))
            if not same:
                return Divergence(ev.rec.step, ev.line, f, want, got, _context(sched, ours, recent))
        return None

    ours_last = StepRecord(0, [], [], {}, [], [], [])
    events = iter(trace.events)
    for ev in events:
        if isinstance(ev, (Arrive, Abort)):
            pending.append((ev.step, ev))
            continue
        assert isinstance(ev, Step)
        step = ev.rec.step
        for s, e in sorted([p for p in pending if p[0] <= step], key=lambda p: (p[0], isinstance(p[1], Abort))):
            pending.remove((s, e))
            if isinstance(e, Arrive):
                try:
                    sched.add(e.req)
                except ScheduleError as exc:  # a request vLLM would refuse
                    return ReplayResult(config.policy, matched, len(steps), Divergence(
                        e.step, e.line, "arrive", f"refused: {exc}", "accepted", _context(sched, ours_last, recent)))
            else:
                sched.abort(e.id)
        # 0.32: the DP engine core's throttle is an input of the step; 0.33's
        # scheduler keeps the cadence, so the trace's marks must match the reference's.
        by_engine = sched.release.prefill_cadence == "dp_engine"
        ours = ours_last = sched.step(step, throttle=ev.rec.throttle if by_engine else False)
        fields = FIELDS if not config.async_scheduling else FIELDS[:-1]
        if not by_engine:
            fields = ("throttle", *fields)
        d = compare(ev, ours, fields)
        if d is None and config.async_scheduling and prev is not None:
            d = compare(prev[0], prev[1], ("finished",))
        if d is not None:
            return ReplayResult(config.policy, matched, len(steps), d)
        matched += 1
        recent.append(_fmt(ev.rec))
        prev = (ev, ours)
    if config.async_scheduling and prev is not None:
        # Aborts after the last step still land before its output is applied
        # (the driver applies them at the next step, which never comes).
        for _, e in sorted(pending, key=lambda p: p[0]):
            if isinstance(e, Abort) and e.id in sched.state.reqs:
                sched.abort(e.id)
        sched.drain()
        d = compare(prev[0], prev[1], ("finished",))
        if d is not None and trace.complete:
            return ReplayResult(config.policy, matched - 1, len(steps), d)
    return ReplayResult(config.policy, matched, len(steps), None)
