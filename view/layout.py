"""The layout of a trace timeline: what both renderers (HTML, PNG) draw.

One row per request, grouped by adapter (base model first), then by arrival;
a row is a list of segments (`waiting`, `held`, `prefill`, `decode`, `idle`,
`preempted`), marks are points (`preempted`, `finished`, `aborted`,
`violation`), all from the code `lora-sched check` runs
(`policy.check.observe_trace`), so the violations drawn are those `check`
reports. What each kind means: docs/view.md.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from lora_sched.policy.check import FairHolds, bound_for, observe_trace
from lora_sched.spec.observe import Observer
from lora_sched.spec.properties import StepView, Violation
from lora_sched.spec.trace import Abort, Trace, read_trace
from lora_sched.view.itf import is_itf, read_itf

from lora_sched.palette import VIOLATION_COLOR, adapter_color, mix

KINDS = ("waiting", "held", "prefill", "decode", "idle", "preempted")
KIND_LABELS = {
    "waiting": "waiting",
    "held": "held for r* (fair's guard)",
    "prefill": "running: prefill chunk",
    "decode": "running: decode",
    "idle": "running, not scheduled",
    "preempted": "preempted",
}


def kind_color(adapter: int, kind: str) -> str:
    """Segment colour: the adapter's colour, shaded by what the request does."""
    c = adapter_color(adapter)
    return {
        "waiting": mix(c, "#ffffff", 0.72),
        "held": mix(mix(c, "#ffffff", 0.72), "#000000", 0.35),
        "prefill": mix(c, "#000000", 0.4),
        "decode": c,
        "idle": "#ffffff",
        "preempted": "#000000",
    }[kind]


@dataclass
class Segment:
    start: int  # step number of the first step line (inclusive)
    end: int  # step number of the last step line (inclusive)
    kind: str
    tokens: list[int] = field(default_factory=list)  # tokens per step line (prefill / decode)
    steps: int = 1  # step lines covered (step numbers may jump over idle steps)


@dataclass
class Mark:
    step: int
    kind: str  # preempted | finished | aborted | violation
    label: str = ""


@dataclass
class Row:
    id: str
    adapter: int
    prompt_tokens: int
    max_tokens: int
    arrival: int
    priority: int
    first_admitted: int | None = None
    wait: int = 0  # steps from arrival to first admission (or to the last step if never)
    outcome: str | None = None  # finished | aborted | None (still present when the trace ends)
    segments: list[Segment] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    def add(self, step: int, kind: str, tokens: int | None = None) -> None:
        last = self.segments[-1] if self.segments else None
        if last is not None and last.kind == kind:
            last.end, last.steps = step, last.steps + 1
            if tokens is not None:
                last.tokens.append(tokens)
        else:
            self.segments.append(Segment(step, step, kind, [] if tokens is None else [tokens]))


@dataclass
class StepInfo:
    step: int
    batch: list[int]  # distinct adapters (> 0) scheduled
    running: list[int]  # distinct adapters (> 0) running once the step is scheduled
    tokens: int
    scheduled: int  # requests scheduled
    throttle: bool = False
    star: str | None = None  # fair: r* when the scan started
    victims: list[int] = field(default_factory=list)  # fair: adapters held for r*


@dataclass
class ViolationMark:
    property: str
    step: int
    message: str
    requests: list[str]


@dataclass
class Layout:
    title: str
    subtitle: str
    policy: str
    max_loras: int
    rows: list[Row]
    steps: list[StepInfo]
    violations: list[ViolationMark]
    bound: int | None
    regions: list[dict[str, Any]] = field(default_factory=list)  # {start, end, label}: e.g. a lasso's loop

    @property
    def first_step(self) -> int:
        return min([s.step for s in self.steps] + [r.arrival for r in self.rows], default=0)

    @property
    def last_step(self) -> int:
        return max([s.step for s in self.steps] + [r.arrival for r in self.rows], default=0)

    def star_spans(self) -> list[tuple[str, int, int]]:
        """fair: (r*, first step, last step) for each run of consecutive step lines with the same r*."""
        spans: list[tuple[str, int, int]] = []
        prev = None
        for s in self.steps:
            if s.star is not None and spans and spans[-1][0] == s.star and spans[-1][2] == prev:
                spans[-1] = (s.star, spans[-1][1], s.step)
            elif s.star is not None:
                spans.append((s.star, s.step, s.step))
            prev = s.step
        return spans

    def adapters(self) -> list[int]:
        return sorted({r.adapter for r in self.rows})

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["first_step"], d["last_step"] = self.first_step, self.last_step
        d["star_spans"] = self.star_spans()
        d["colors"] = {str(a): {k: kind_color(a, k) for k in KINDS} for a in self.adapters()}
        d["adapter_colors"] = {str(a): adapter_color(a) for a in self.adapters()}
        d["kind_labels"] = KIND_LABELS
        d["violation_color"] = VIOLATION_COLOR
        return d


class _RecordingHolds:
    """`FairHolds` plus a record of r*, the victims and the held requests of each step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.star: str | None = None
        self.victims: list[int] = []
        self.held: set[str] = set()

    def begin(self, view: StepView) -> str | None:
        star = self.inner.begin(view)
        guard = self.inner.guard
        self.star, self.victims = star, sorted(guard.victims)
        self.held = self.inner.held_ids - set(view.rec.admitted)
        return star

    def hold(self, view: StepView, rid: str) -> str | None:
        return self.inner.hold(view, rid)

    def end(self, view: StepView) -> None:
        self.inner.end(view)

    def take(self) -> tuple[str | None, list[int], set[str]]:
        out = (self.star, self.victims, self.held)
        self.star, self.victims, self.held = None, [], set()
        return out


def load(path: str | os.PathLike[str]) -> Trace:
    """A `lora-sched-trace` JSONL file or an ITF counterexample, as a `Trace`.

    A file whose first line is a JSON object is JSON Lines (a trace); an ITF
    file is one JSON document. Raises `spec.trace.TraceError` or
    `view.itf.ItfError` on bad input."""
    spath = str(path)
    try:
        with open(spath, encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return read_trace(spath)  # it words the error
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        obj = None
    if obj is None and first.lstrip().startswith("{"):
        try:
            with open(spath, encoding="utf-8") as f:
                obj = json.load(f)
        except json.JSONDecodeError:
            obj = None
    if is_itf(obj):
        return read_itf(spath, obj)
    return read_trace(spath, allow_truncated_tail=True)


def _involved(v: Violation, rec: Any, adapter: dict[str, int], known: set[str]) -> list[str]:
    """The requests a violation names (quoted ids), or for the cap properties the batch / running set."""
    named = [r for r in re.findall(r"'([^']+)'", v.message) if r in known]
    if named or rec is None:
        return named
    if v.property == "batch_lora_cap":
        return [r for r in rec.scheduled if adapter[r] > 0]
    if v.property == "running_lora_cap":
        after = [r for r in rec.running if r not in rec.preempted] + list(rec.admitted)
        return [r for r in after if adapter[r] > 0]
    return []


def build(trace: Trace) -> Layout:
    """Derive the layout of `trace` (see the module docstring)."""
    cfg = trace.config
    reqs = trace.requests()
    adapter = {rid: r.adapter for rid, r in reqs.items()}
    holds: _RecordingHolds | None = None
    if cfg.policy == "fair":
        holds = _RecordingHolds(FairHolds(cfg))
    obs = Observer(cfg, holds)
    bound, bound_note = bound_for(trace)
    rows = {rid: Row(rid, r.adapter, r.prompt_tokens, r.max_tokens, r.arrival, r.priority)
            for rid, r in reqs.items()}
    steps: list[StepInfo] = []
    violations: list[ViolationMark] = []
    records = {}
    gen = observe_trace(trace, obs)
    for rec in trace.steps():
        before = {rid: obs.reqs[rid].computed if rid in obs.reqs else 0 for rid in rec.scheduled}
        found = next(gen)
        records[rec.step] = rec
        star, victims, held = holds.take() if holds is not None else (None, [], set())
        for rid in rec.waiting:
            row = rows[rid]
            if rid in rec.admitted:
                continue  # drawn with the scheduled ones below
            row.add(rec.step, "held" if rid in held else "waiting")
        for rid in rec.running:
            if rid in rec.preempted:
                rows[rid].add(rec.step, "preempted")
                rows[rid].marks.append(Mark(rec.step, "preempted"))
            elif rid not in rec.scheduled:
                rows[rid].add(rec.step, "idle")
        for rid, n in rec.scheduled.items():
            row = rows[rid]
            if rid in rec.admitted and row.first_admitted is None:
                row.first_admitted = rec.step
            decode = n == 1 and before[rid] >= row.prompt_tokens
            row.add(rec.step, "decode" if decode else "prefill", n)
        for rid in rec.finished:
            rows[rid].outcome = "finished"
            rows[rid].marks.append(Mark(rec.step, "finished"))
        after = [r for r in rec.running if r not in rec.preempted] + list(rec.admitted)
        steps.append(StepInfo(
            rec.step,
            sorted({adapter[r] for r in rec.scheduled if adapter[r] > 0}),
            sorted({adapter[r] for r in after if adapter[r] > 0}),
            sum(rec.scheduled.values()),
            len(rec.scheduled),
            rec.throttle,
            star,
            victims,
        ))
        for v in found:
            violations.append(ViolationMark(v.property, v.step, v.message, _involved(v, rec, adapter, set(reqs))))
    for ev in trace.events:
        if isinstance(ev, Abort) and rows[ev.id].outcome is None:
            rows[ev.id].outcome = "aborted"
            rows[ev.id].marks.append(Mark(ev.step, "aborted"))
    for v in obs.close(bound):
        violations.append(ViolationMark(v.property, v.step, v.message,
                                        _involved(v, records.get(v.step), adapter, set(reqs))))
    last = max([s.step for s in steps], default=0)
    waits = obs.waits()
    for rid, row in rows.items():
        row.wait = waits.get(rid, max(last - row.arrival, 0))
    for vm in violations:
        for rid in vm.requests:
            rows[rid].marks.append(Mark(vm.step, "violation", vm.property))
    ordered = sorted(rows.values(), key=lambda r: (r.adapter, r.arrival, obs.reqs[r.id].seq if r.id in obs.reqs
                                                   else len(rows)))
    meta = trace.header
    regions = []
    if trace.source.endswith("(ITF)"):
        title = f"{cfg.policy}: {meta.get('property', '?')} counterexample (Z3, {meta.get('note', '')})"
        lasso = meta.get("lasso")
        if isinstance(lasso, dict) and "loop" in lasso:
            k1, k2 = lasso["loop"]
            steps_txt = f"step {k2} repeats" if k2 == k1 + 1 else f"steps {k1 + 1}-{k2} repeat"
            regions.append({"start": k1 + 1, "end": k2,
                            "label": f"lasso: {steps_txt} forever, {lasso.get('victim', '?')} never admitted"})
    else:
        title = f"{os.path.basename(trace.path)}: policy {cfg.policy}"
    subtitle = (f"{len(rows)} requests, {len(steps)} steps, max_loras {cfg.max_loras}, "
                f"max_num_seqs {cfg.max_num_seqs}, max_num_batched_tokens {cfg.max_num_batched_tokens}"
                + (f", S = {cfg.starvation_steps}" if cfg.policy == "fair" else "")
                + (f"; {bound_note}" if bound is not None and cfg.policy == "fair" else "")
                + ("" if trace.complete else "; truncated trace"))
    worst = max(rows.values(), key=lambda r: r.wait, default=None)
    if worst is not None:
        subtitle += f"; longest wait {worst.wait} steps ({worst.id}" + (
            ", never admitted)" if worst.first_admitted is None else ")")
    return Layout(title, subtitle, cfg.policy, cfg.max_loras, ordered, steps, violations, bound, regions)


def layout_file(path: str | os.PathLike[str]) -> Layout:
    return build(load(path))
