"""`lora-sched check TRACE [--policy P] [--json]`: every property, then the replay.

Prints one line per property in mypyvy's style
(`fifo_within_adapter ... ok` / `... VIOLATED at step 12 (line 40): ...`),
then, with `--policy`, the replay through the reference policy. Exit 0 when
every property checked holds (and the replay matches), 1 when one is
violated (or the replay diverges), 2 when the trace is malformed. `--json`
prints one versioned object instead (`verdicts`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lora_sched.spec.config import POLICIES, REFERENCE_POLICIES
from lora_sched.spec.observe import Observer
from lora_sched.spec.properties import ALL_PROPERTIES, Violation
from lora_sched.spec.state import peak_present, peak_waiting
from lora_sched.spec.trace import Abort, Arrive, Step, Trace, TraceError, read_trace

if TYPE_CHECKING:
    from lora_sched.policy.replay import ReplayResult


@dataclass
class CheckReport:
    trace: Trace
    bound: int | None
    bound_note: str
    first: dict[str, Violation] = field(default_factory=dict)  # property -> first violation
    counts: dict[str, int] = field(default_factory=dict)
    replay: ReplayResult | None = None
    waits: dict[str, int] = field(default_factory=dict)
    last_step: int = 0

    @property
    def ok(self) -> bool:
        return not self.first and (self.replay is None or self.replay.ok)


def bound_for(trace: Trace) -> tuple[int | None, str]:
    """B of `policy.fair` for this trace's config and requests, or why none applies."""
    from lora_sched.policy.fair import bound_applies, observed_bound

    cfg = trace.config
    reqs = list(trace.requests().values())
    if not reqs:
        return None, "no requests"
    why = bound_applies(cfg, (r.priority for r in reqs))
    if why is not None:
        return None, f"B does not apply: {why}"
    steps = trace.steps()
    b = observed_bound(cfg, reqs, steps)
    from lora_sched.bench.costmodel import DEFAULT

    return b, (f"B = {b} steps (<= {b * DEFAULT.max_step_seconds(cfg):.4g} s at the cost model's longest step): "
               f"fair's bound for this config, Q = {peak_present(steps)} requests present and "
               f"Qw = {peak_waiting(steps)} waiting at the peak")


def observe_trace(trace: Trace, obs: Observer) -> Iterator[list[Violation]]:
    """Feed `trace` to `obs` in the order events take effect; yield each step's violations.

    Under async scheduling the events of step t+1 precede step t's line in the
    file: each arrival and abort takes effect when the step it names starts.
    Each violation carries the trace line of its step.
    """
    pending = [e for e in trace.events if isinstance(e, (Arrive, Abort))]
    for ev in trace.events:
        if isinstance(ev, Step):
            due = [e for e in pending if e.step <= ev.rec.step]
            for e in sorted(due, key=lambda e: (e.step, isinstance(e, Abort))):
                pending.remove(e)
                if isinstance(e, Arrive):
                    obs.arrive(e.req)
                else:
                    obs.abort(e.id)
            yield [replace(v, line=ev.line) for v in obs.observe(ev.rec)]


def check_trace(trace: Trace | str, policy: str | None = None) -> CheckReport:
    if isinstance(trace, str):
        trace = read_trace(trace, allow_truncated_tail=True)
    holds = None
    if trace.config.policy == "fair":
        from lora_sched.policy.fair import FairHolds

        holds = FairHolds(trace.config)
    obs = Observer(trace.config, holds)
    bound, note = bound_for(trace)
    report = CheckReport(trace, bound, note)
    for found in observe_trace(trace, obs):
        for v in found:
            report.counts[v.property] = report.counts.get(v.property, 0) + 1
            report.first.setdefault(v.property, v)
    for v in obs.close(bound):
        # A trace-level verdict is placed at the first step line at or after its step.
        line = next((e.line for e in trace.events if isinstance(e, Step) and e.rec.step >= v.step), None)
        report.counts[v.property] = report.counts.get(v.property, 0) + 1
        report.first.setdefault(v.property, replace(v, line=line))
    report.waits = obs.waits()
    report.last_step = obs.last_step
    if policy is not None:
        from lora_sched.policy.replay import replay

        report.replay = replay(trace, policy)
    return report


def format_report(report: CheckReport) -> str:
    t = report.trace
    lines = [f"trace {t.path}: {len(t.requests())} requests, {len(t.steps())} steps, "
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
    if report.waits:
        worst = max(report.waits.items(), key=lambda kv: kv[1])
        lines.append(f"worst wait before first admission: {worst[1]} steps ({worst[0]})")
    if report.replay is not None:
        lines.append(report.replay.describe())
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
        "trace": t.path, "complete": t.complete, "requests": len(t.requests()), "steps": len(t.steps()),
        "policy": t.config.policy, "source": t.source, "ok": report.ok, "results": results,
    }
    if report.waits:
        rid, wait = max(report.waits.items(), key=lambda kv: kv[1])
        out["worst_wait"] = {"request": rid, "steps": wait}
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
    p.add_argument("trace", help="a lora-sched-trace JSONL file")
    p.add_argument("--policy", choices=POLICIES + REFERENCE_POLICIES,
                   help="replay the trace through this reference policy step by step")
    p.add_argument("--json", action="store_true",
                   help="print one versioned JSON object (a result per property) instead of text")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        report = check_trace(args.trace, args.policy)
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
