"""`bounded_wait` by growth, for a scheduler class with no reference bound.

A starvation-free scheduler's worst wait does not grow with the number of
later arrivals. `growth(target)` runs each stream family of
`policy.workloads.FAMILIES` at `LENGTHS` (1x, 2x, 4x) on the user's class
in-process; a family whose worst wait grows at every doubling, by at least
the shortest stream's length from 1x to 4x, is starvation (docs/fuzz.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from lora_sched.conformance.inprocess import Stuck, run_workload
from lora_sched.conformance.target import Target
from lora_sched.fuzz.findings import Finding, Findings, draw, slug
from lora_sched.fuzz.runner import default_trace_path
from lora_sched.policy.check import check_trace
from lora_sched.policy.workloads import FAMILIES
from lora_sched.spec.trace import read_trace

# Longer than fair's worst wait at its default S (47 steps on `starvation`),
# so a bounded scheduler's wait is flat over them.
LENGTHS = (40, 80, 160)


@dataclass
class FamilyGrowth:
    """One family's worst waits (steps; None: never admitted or the run failed) per stream length."""

    family: str
    lengths: tuple[int, ...]
    waits: list[int | None]
    who: list[str | None]  # the request of each worst wait
    error: str | None = None

    @property
    def grows(self) -> bool:
        """Every doubling lengthens the worst wait, by at least the shortest length over the range."""
        w = self.waits
        if self.error is not None or any(x is None for x in w):
            return False
        steps = all(b > a for a, b in zip(w, w[1:], strict=False))  # type: ignore[operator]
        return steps and w[-1] - w[0] >= self.lengths[0]  # type: ignore[operator]

    def line(self) -> str:
        pairs = ", ".join(f"{n}: {w if w is not None else '-'}" + (f" ({r})" if r else "")
                          for n, w, r in zip(self.lengths, self.waits, self.who, strict=True))
        verdict = "GROWS (starvation)" if self.grows else ("error: " + self.error if self.error else "flat")
        return f"{self.family}: worst wait by stream length {{{pairs}}}: {verdict}"


@dataclass
class GrowthReport:
    target: str
    families: list[FamilyGrowth] = field(default_factory=list)

    @property
    def starving(self) -> list[FamilyGrowth]:
        return [f for f in self.families if f.grows]

    def to_json(self) -> dict:
        return {"target": self.target, "lengths": list(LENGTHS),
                "families": [{"family": f.family, "waits": f.waits, "who": f.who, "grows": f.grows,
                              "error": f.error} for f in self.families]}


def _worst(target: Target, family: str, length: int, trace: Path) -> tuple[int | None, str | None]:
    cfg, wl = FAMILIES[family](length)
    cfg = replace(cfg, policy=target.policy, async_scheduling=target.is_async)
    run_workload(cfg, wl, trace, policy=target.policy, scheduler_class=target.recorded)
    report = check_trace(read_trace(trace, allow_truncated_tail=True))
    if report.worst_wait is None:
        return None, None
    rid, wait = report.worst_wait
    return wait, rid


def growth(target: Target, *, lengths: tuple[int, ...] = LENGTHS,
           families: tuple[str, ...] | None = None) -> GrowthReport:
    """The worst wait of each family at each length on `target`'s class."""
    out = GrowthReport(target.path)
    trace = default_trace_path()
    try:
        for name in families or tuple(FAMILIES):
            fg = FamilyGrowth(name, tuple(lengths), [], [])
            for n in lengths:
                try:
                    w, who = _worst(target, name, n, trace)
                except (Stuck, Exception) as exc:  # the class's crash: no growth verdict, the error said
                    fg.error = f"{type(exc).__name__} at length {n}: {' '.join(str(exc).split())[:200]}"
                    w, who = None, None
                fg.waits.append(w)
                fg.who.append(who)
            out.families.append(fg)
    finally:
        if os.path.exists(trace):
            os.unlink(trace)
    return out


_TEST = '''"""Reproducer of a `lora-sched fuzz --expect bounded_wait` finding: {signature}.

{line}

The test runs the family at each length on {path} in-process and asserts
that the worst wait still grows with the stream.
"""

from lora_sched.conformance.target import load
from lora_sched.fuzz.growth import growth

PATH = {path!r}


def test_{name}_reproduces() -> None:
    report = growth(load(PATH), lengths={lengths!r}, families=({family!r},))
    assert report.starving, [f.line() for f in report.families]
'''


def growth_findings(target: Target, out: Path, findings: Findings, *,
                    lengths: tuple[int, ...] = LENGTHS) -> GrowthReport:
    """Run `growth` on `target` and add one finding per starving family to
    `findings` (a signature already there is kept), each written under
    `<out>/findings/<slug>/` with the 1x run's trace and view and a reproducer."""
    report = growth(target, lengths=lengths)
    for fg in report.starving:
        sig = f"growth:bounded_wait@{fg.family}:{target.name}"
        if sig in findings.by_sig:
            continue
        f = Finding(sig, "growth", f"bounded_wait@{fg.family}", target.name, fg.line(), -1, 1, [],
                    status="growth")
        findings.by_sig[sig] = f
        d = out / "findings" / slug(sig)
        d.mkdir(parents=True, exist_ok=True)
        trace = d / "trace.jsonl"
        _worst(target, fg.family, lengths[0], trace)
        (d / "growth.json").write_text(json.dumps(report.to_json(), indent=1) + "\n")
        name = slug(sig)
        (d / f"test_{name}.py").write_text(_TEST.format(signature=sig, line=fg.line(), path=target.path,
                                                        name=name, lengths=tuple(lengths), family=fg.family))
        files = [("trace", "trace.jsonl"), ("growth", "growth.json"), ("test", f"test_{name}.py")]
        if draw(trace, d / "trace.html"):
            files.append(("view", "trace.html"))
        f.files = {k: str((d / v).relative_to(out)) for k, v in files}
    return report
