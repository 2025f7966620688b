"""`lora-sched check TRACE [--policy P] [--json]`: every property, then the replay.

One line per property in mypyvy's style, then, with `--policy`, the replay
through the reference policy (README.md, "Check a trace from your server").
Exit 0 when every property checked holds (and the replay matches), 1 when one
is violated (or the replay diverges), 2 when the trace is malformed. The trace
is read once (`check_file`; docs/operator-scale.md). The checker sits in
`policy` because fair's holds (`FairHolds`), its bound (`policy.bound`), the
replay and the cost model are policy code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from lora_sched.policy.bound import bound_applies, fair_bound
from lora_sched.policy.costmodel import DEFAULT
from lora_sched.policy.fair import FairGuard, Waiting, slot_outputs_left, starvation_window
from lora_sched.policy.replay import Replayer, ReplayResult, due_events
from lora_sched.spec import releases
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import POLICIES, REFERENCE_POLICIES, Config
from lora_sched.spec.observe import Observer
from lora_sched.spec.properties import ALL_PROPERTIES, StepView, Violation
from lora_sched.spec.state import StepRecord
from lora_sched.spec.trace import Abort, Arrive, Event, Step, Trace, TraceError, TraceReader, read_trace, step_line_at

PROGRESS_EVERY_S = 5.0  # `check_file(progress=...)`: one line this often


@dataclass
class CheckReport:
    trace: Trace  # the header's data; `events` only when the trace was read whole (`check_trace`)
    bound: int | None
    bound_note: str
    first: dict[str, Violation] = field(default_factory=dict)  # property -> first violation
    counts: dict[str, int] = field(default_factory=dict)
    replay: ReplayResult | None = None
    waits: dict[str, int] = field(default_factory=dict)  # every admitted request's wait (`check_trace` only)
    last_step: int = 0
    requests: int = 0
    steps: int = 0
    worst_wait: tuple[str, int] | None = None  # (request, steps): the longest wait, earliest arrival on ties

    @property
    def ok(self) -> bool:
        return not self.first and (self.replay is None or self.replay.ok)


@dataclass
class _Stats:
    """What B needs from the whole trace, gathered as it streams by."""

    requests: int = 0
    steps: int = 0
    priorities: set[int] = field(default_factory=set)
    max_prompt: int = 0
    max_output: int = 0
    present: int = 0  # Q: the peak of waiting + running
    waiting: int = 0  # Qw: the peak of waiting

    def add(self, ev: Event) -> None:
        if isinstance(ev, Arrive):
            r = ev.req
            self.requests += 1
            self.priorities.add(r.priority)
            self.max_prompt = max(self.max_prompt, r.prompt_tokens)
            self.max_output = max(self.max_output, r.max_tokens)
        elif isinstance(ev, Step):
            self.step(ev.rec)

    def step(self, rec: StepRecord) -> None:
        """One step line (`spec.state.peak_present` and `peak_waiting` over the records so far)."""
        self.steps += 1
        w = len(rec.waiting)
        if w + len(rec.running) > self.present:
            self.present = w + len(rec.running)
        if w > self.waiting:
            self.waiting = w


def bound_for(trace: Trace) -> tuple[int | None, str]:
    """fair's B (`policy.bound`) for this trace's config and requests, or why none applies."""
    stats = _Stats()
    for ev in trace.events:
        stats.add(ev)
    return _bound(trace.config, stats)


def _bound(cfg: Config, stats: _Stats) -> tuple[int | None, str]:
    """fair's B (`policy.bound`) for this trace's config and requests (`observed_bound`), or why none applies."""
    if not stats.requests:
        return None, "no requests"
    why = bound_applies(cfg, stats.priorities)
    if why is not None:
        return None, f"B does not apply: {why}"
    b = fair_bound(cfg, queue=stats.present, waiting=stats.waiting, max_prompt=stats.max_prompt,
                   max_output=stats.max_output)
    return b, (f"B = {b} steps (<= {b * DEFAULT.max_step_seconds(cfg):.4g} s at the cost model's longest step): "
               f"fair's bound for this config, Q = {stats.present} requests present and "
               f"Qw = {stats.waiting} waiting at the peak")


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Runs `FairGuard` on the observed state alone, calling it as
    `policy.fair.FairGate` does (`begin_scan` when a scan starts, `visit_star`
    when it reaches r*, unless the budget or seats were gone before it; `holds`
    per request, `admitted` per admission in scan order), so a trace of `fair`
    inside vLLM is judged by the guard the reference runs. It declares the
    guard's holds (`fair_guard`) and fair's cap over every running request's
    adapter (`fair_cap`), stricter than the cap `no_hol_blocking` applies.
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


class NoReference(ValueError):
    """A replay was asked for on a trace whose vLLM release has no reference model."""


def replay_off(trace: Trace) -> str | None:
    """Why a trace is judged without a replay when its release is unregistered, or None."""
    if trace.unregistered is None:
        return None
    return (f"replay: off: vLLM {trace.unregistered} is not in the release registry (supported: "
            f"{releases.SUPPORTED}); the properties are judged with vLLM {trace.config.vllm}'s semantics")


class TraceCheck:
    """Every property and the replay, in one pass over a trace's events.

    `feed` takes the events in file order (under async scheduling step t+1's
    events precede step t's line): each arrival and abort takes effect when the
    step it names starts (`policy.replay.due_events`), for the observer and the
    replay alike; memory follows the live requests. `finish` judges the
    trace-level property and returns the report.
    """

    def __init__(self, trace: Trace, policy: str | None = None, *, keep_waits: bool = True) -> None:
        if policy is not None and trace.unregistered is not None:
            raise NoReference(f"{trace.path}: --policy {policy}: the trace was recorded on vLLM "
                              f"{trace.unregistered}, which the release registry lacks (supported: "
                              f"{releases.SUPPORTED}), so there is no reference to replay; run without "
                              f"--policy to judge the properties")
        self.trace = trace
        holds = None
        if trace.config.policy == "fair":
            holds = FairHolds(trace.config)
        self.obs = Observer(trace.config, holds, keep_waits=keep_waits)
        self.replayer = Replayer(trace.config, policy) if policy is not None else None
        self.pending: list[Arrive | Abort] = []
        self.stats = _Stats()
        self.first: dict[str, Violation] = {}
        self.counts: dict[str, int] = {}

    def _found(self, v: Violation) -> None:
        self.counts[v.property] = self.counts.get(v.property, 0) + 1
        self.first.setdefault(v.property, v)

    def feed(self, ev: Event) -> None:
        if not isinstance(ev, Step):
            self.stats.add(ev)
            self.pending.append(ev)
            return
        rec = ev.rec
        self.stats.step(rec)
        obs, rp = self.obs, self.replayer
        if self.pending:
            for e in due_events(self.pending, rec.step):
                if isinstance(e, Arrive):
                    obs.arrive(e.req)
                else:
                    obs.abort(e.id)
                if rp is not None:
                    rp.apply(e)
        found = obs.observe(rec)
        if found:
            for v in found:
                self._found(replace(v, line=ev.line))
        if rp is not None:
            rp.step(ev)

    def finish(self, complete: bool, locate: Callable[[int], int | None]) -> CheckReport:
        """The report; `locate(step)` is the line of the first step line at or after `step`."""
        t = self.trace
        t.complete = complete
        bound, note = _bound(t.config, self.stats)
        report = CheckReport(t, bound, note, self.first, self.counts, requests=self.stats.requests,
                             steps=self.stats.steps)
        for v in self.obs.close(bound):
            # A trace-level verdict is placed at the first step line at or after its step.
            self._found(replace(v, line=locate(v.step)))
        report.waits = self.obs.waits() if self.obs.keep_waits else {}
        w = self.obs.worst_wait
        report.worst_wait = (w[0], w[1]) if w is not None else None
        report.last_step = self.obs.last_step
        if self.replayer is not None:
            report.replay = self.replayer.finish(self.pending, complete=complete, total=self.stats.steps)
        return report


def observe_trace(trace: Trace, obs: Observer) -> Iterator[list[Violation]]:
    """Feed `trace` to `obs` in the order events take effect (`policy.replay.due_events`);
    yield each step's violations, each carrying the trace line of its step."""
    pending: list[Arrive | Abort] = []
    for ev in trace.events:
        if not isinstance(ev, Step):
            pending.append(ev)
            continue
        for e in due_events(pending, ev.rec.step):
            if isinstance(e, Arrive):
                obs.arrive(e.req)
            else:
                obs.abort(e.id)
        yield [replace(v, line=ev.line) for v in obs.observe(ev.rec)]


def check_trace(trace: Trace | str, policy: str | None = None) -> CheckReport:
    """Check a trace read whole (a path is read with `read_trace`): the report
    keeps the `Trace` and every request's wait. `check_file` streams instead."""
    if isinstance(trace, str):
        trace = read_trace(trace, allow_truncated_tail=True)
    check = TraceCheck(Trace(trace.path, trace.config, trace.source, trace.header), policy)
    for ev in trace.events:
        check.feed(ev)
    report = check.finish(trace.complete, lambda step: next(
        (e.line for e in trace.events if isinstance(e, Step) and e.rec.step >= step), None))
    report.trace = trace
    return report


def check_file(path: str, policy: str | None = None, *,
               progress: Callable[[str], None] | None = None) -> CheckReport:
    """Check a trace file (gzip accepted) or a directory of its segments in
    one pass. Memory: the live requests, plus for every request seen its id
    and arrival step (to tell an unknown request from a finished one) and a
    packed record (`spec.observe`), about 360 bytes; nothing per step.
    `progress` gets a line every `PROGRESS_EVERY_S`."""
    reader = TraceReader(path, allow_truncated_tail=True)
    check = TraceCheck(Trace(reader.path, reader.config, reader.source, reader.header), policy,
                       keep_waits=False)
    t0 = last = time.perf_counter()
    for i, ev in enumerate(reader):
        check.feed(ev)
        if progress is not None and not i & 4095 and (now := time.perf_counter()) - last >= PROGRESS_EVERY_S:
            last = now
            n = check.stats.steps
            progress(f"check: {n:,} steps, {check.stats.requests:,} requests, "
                     f"{n / (now - t0):,.0f} steps/s (step {check.obs.last_step})")
    return check.finish(reader.complete, lambda step: step_line_at(reader.path, step))


def format_report(report: CheckReport) -> str:
    t = report.trace
    lines = [f"trace {t.path}: {report.requests} requests, {report.steps} steps, "
             f"policy {t.config.policy}, source {t.source or '?'}, vLLM {t.config.vllm} semantics"
             + ("" if t.complete else f" (truncated: the last line is cut short; the trace stops after step "
                                       f"{report.last_step})")]
    for name in ALL_PROPERTIES:
        v = report.first.get(name)
        if name == "bounded_wait" and report.bound is None:
            lines.append(f"{name} ... not checked: {report.bound_note}")
        elif v is None:
            extra = f" ({report.bound_note})" if name == "bounded_wait" else ""
            lines.append(f"{name} ... ok{extra}")
        else:
            more = report.counts[name] - 1
            lines.append(f"{name} ... VIOLATED at {v.where()}: {v.message}"
                         + (f" (+{more} more)" if more else ""))
    if report.worst_wait is not None:
        worst = report.worst_wait
        lines.append(f"worst wait before first admission: {worst[1]} steps ({worst[0]})")
    if report.replay is not None:
        lines.append(report.replay.describe())
    elif (off := replay_off(t)) is not None:
        lines.append(off)
    lines.append("all ok!" if report.ok else "FAILED")
    return "\n".join(lines)


def verdicts(report: CheckReport) -> dict[str, Any]:
    """The report as one versioned JSON object: one result per property
    (`verdict` ok | violated | not_checked, with the first violation's step,
    line and message and how many steps violated it), the worst wait, and the
    replay when one was asked for."""
    t = report.trace
    results: list[dict[str, Any]] = []
    for name in ALL_PROPERTIES:
        v = report.first.get(name)
        res: dict[str, Any] = {"property": name}
        if name == "bounded_wait" and report.bound is None:
            res.update(verdict="not_checked", message=report.bound_note)
        elif v is None:
            res.update(verdict="ok")
            if name == "bounded_wait":
                res.update(bound=report.bound, message=report.bound_note)
        else:
            res.update(verdict="violated", step=v.step, line=v.line, message=v.message,
                       count=report.counts[name])
            if name == "bounded_wait":
                res.update(bound=report.bound)
        results.append(res)
    out: dict[str, Any] = {
        **json_envelope("check"),
        "trace": t.path, "complete": t.complete, "requests": report.requests, "steps": report.steps,
        "policy": t.config.policy, "source": t.source, "ok": report.ok, "results": results,
    }
    if report.worst_wait is not None:
        rid, wait = report.worst_wait
        out["worst_wait"] = {"request": rid, "steps": wait}
    if (off := replay_off(t)) is not None:
        out["replay_off"] = off
    r = report.replay
    if r is not None:
        out["replay"] = {"policy": r.policy, "verdict": "ok" if r.ok else "diverged", "matched": r.matched,
                         "steps": r.total}
        if r.divergence is not None:
            d = r.divergence
            out["replay"].update(step=d.step, line=d.line, field=d.field, expected=_jsonable(d.expected),
                                 actual=_jsonable(d.actual))
    return out


def json_envelope(command: str) -> dict[str, Any]:
    """The head every `--json` object starts with (`lora-sched check` / `prove`)."""
    return {"version": 1, "tool": "lora-sched", "command": command}


def _jsonable(x: object) -> Any:
    return json.loads(json.dumps(x, default=str))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a lora-sched-trace JSONL file (gzip accepted) or a directory of its segments")
    p.add_argument("--policy", choices=POLICIES + REFERENCE_POLICIES, help="replay the trace through this policy")
    p.add_argument("--json", action="store_true", help="print one versioned JSON object (a result per property)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr (one every few seconds)")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        report = check_file(args.trace, args.policy,
                            progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True))
    except NoReference as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({**json_envelope("check"), "trace": exc.path, "ok": False,
                              "error": {"line": exc.line, "reason": exc.reason}}))
        return 2
    if args.json:
        print(json.dumps(verdicts(report), indent=1))
    else:
        print(format_report(report))
        print(f"({time.perf_counter() - t0:.2f}s)")
    return 0 if report.ok else 1
