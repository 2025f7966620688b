"""Findings of a campaign: one per signature, each written as a reproducer.

A finding is keyed by its failure signature (`fuzz.runner.Failure.signature`);
later workloads with it count as hits. A shrunk finding is written under
`<out>/findings/<slug>/` (the files: docs/fuzz.md); `trace.html` is written by
running `lora-sched view`, the view layer sitting above fuzz. A user's class
(`FuzzCase.scheduler_cls`) is imported by its path in the reproducer, which
needs only vLLM and lora_sched.
"""

from __future__ import annotations

import json
import pprint
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lora_sched.fuzz.space import FuzzCase
from lora_sched.policy.check import observe_trace
from lora_sched.spec.observe import Observer
from lora_sched.spec.trace import Step, Trace, read_trace


def slug(signature: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", signature.lower()).strip("_")


@dataclass
class Finding:
    signature: str
    kind: str
    name: str
    policy: str
    message: str
    first_seed: int
    hits: int = 1
    seeds: list[int] = field(default_factory=list)
    status: str = "found"  # found | shrunk | not-reproduced | shrink-error
    minimal: dict[str, Any] | None = None  # the shrunk case (FuzzCase.to_json)
    minimal_message: str | None = None
    shrink_runs: int = 0
    files: dict[str, str] = field(default_factory=dict)
    # Seconds after the workers were ready (this invocation) when it was found and when shrunk.
    found_after_s: float | None = None
    shrunk_after_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if self.minimal is not None:
            d["minimal_size"] = {"requests": len(self.minimal["requests"]), "aborts": len(self.minimal["aborts"])}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**d)


class Findings:
    """The campaign's findings, deduplicated by signature."""

    KEEP_SEEDS = 20

    def __init__(self, items: list[Finding] | None = None) -> None:
        self.by_sig: dict[str, Finding] = {f.signature: f for f in items or []}

    def add(self, seed: int, failure: dict[str, Any]) -> Finding | None:
        """Record `failure` of workload `seed`; return the finding if its signature is new."""
        sig = failure["signature"]
        f = self.by_sig.get(sig)
        if f is not None:
            f.hits += 1
            if len(f.seeds) < self.KEEP_SEEDS:
                f.seeds.append(seed)
            f.first_seed = min(f.first_seed, seed)
            return None
        f = Finding(sig, failure["kind"], failure["name"], failure["policy"], failure["message"], seed, 1, [seed])
        self.by_sig[sig] = f
        return f

    def __len__(self) -> int:
        return len(self.by_sig)

    def __iter__(self):
        return iter(sorted(self.by_sig.values(), key=lambda f: f.signature))


def trace_itf(trace: Trace, signature: str) -> dict[str, Any]:
    """The trace's steps as an ITF trace (the variables of `proofs.cex.Cex`, plus
    `preempted`): `waiting`/`running` as recorded at the step's start, the other
    variables after it (finished and aborted accumulated)."""
    from lora_sched.proofs.cex import Cex

    obs = Observer(trace.config)
    steps = [e for e in trace.events if isinstance(e, Step)]
    states: list[dict[str, Any]] = [{"step": 0}]
    finished: list[str] = []
    for ev, _ in zip(steps, observe_trace(trace, obs), strict=True):
        rec = ev.rec
        finished.extend(r for r in rec.finished if r not in finished)
        states.append({
            "step": rec.step, "waiting": list(rec.waiting), "running": list(rec.running),
            "finished": list(finished),
            "aborted": sorted(rid for rid, o in obs.reqs.items() if o.status == "aborted"),
            "computed": {rid: o.computed for rid, o in obs.reqs.items()},
            "generated": {rid: o.sampled for rid, o in obs.reqs.items()},
            "scheduled": dict(rec.scheduled), "admitted": list(rec.admitted), "preempted": list(rec.preempted),
        })
    reqs = [{"id": r.id, "adapter": r.adapter, "prompt_tokens": r.prompt_tokens, "max_tokens": r.max_tokens,
             "arrival": r.arrival, "priority": r.priority} for r in trace.requests().values()]
    aborts = {e.id: e.step for e in trace.events if type(e).__name__ == "Abort"}
    cex = Cex(trace.config.policy, signature, trace.config.to_dict(), reqs, aborts, {}, states,
              note=f"lora-sched fuzz finding {signature}")
    itf = cex.to_itf()
    itf["#meta"]["source"] = f"lora-sched fuzz ({trace.source})"
    itf["vars"].append("preempted")
    for row, st in zip(itf["states"], states, strict=True):
        row["preempted"] = st.get("preempted", [])
    return itf


_TEST = '''"""Reproducer of a `lora-sched fuzz` finding: {signature}.

Found from workload seed {seed} on {vllm}, shrunk by delta debugging to
{n} request(s). The test runs the minimal case on {who} in-process
and asserts that the failure reproduces:

{message}
"""

from lora_sched.fuzz.runner import run_case
from lora_sched.fuzz.space import FuzzCase

SIGNATURE = {signature!r}
CASE = {case}


def test_{name}_reproduces() -> None:
    result = run_case(FuzzCase.from_json(CASE))
    assert SIGNATURE in result.signatures, [f.message for f in result.failures]
'''


def write_finding(out: Path, f: Finding, case: FuzzCase, trace_text: str, vllm_version: str) -> None:
    """Write the reproducer files of a shrunk finding and record them in `f.files`."""
    name = slug(f.signature)
    d = out / "findings" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "case.json").write_text(json.dumps(case.to_json(), indent=1) + "\n")
    (d / "trace.jsonl").write_text(trace_text)
    trace = read_trace(d / "trace.jsonl", allow_truncated_tail=True)
    (d / "trace.itf.json").write_text(json.dumps(trace_itf(trace, f.signature), indent=1) + "\n")
    message = "\n".join("    " + line for line in (f.minimal_message or f.message).splitlines()[:12])
    who = "vLLM's scheduler" if case.scheduler_cls is None else f"the scheduler class {case.scheduler_cls}"
    test = _TEST.format(signature=f.signature, seed=f.first_seed, vllm=vllm_version, n=len(case.workload.requests),
                        message=message, case=pprint.pformat(case.to_json(), width=110), name=name, who=who)
    (d / f"test_{name}.py").write_text(test)
    files = [("case", "case.json"), ("trace", "trace.jsonl"), ("itf", "trace.itf.json"), ("test", f"test_{name}.py")]
    if draw(d / "trace.jsonl", d / "trace.html"):
        files.append(("view", "trace.html"))
    f.files = {k: str((d / v).relative_to(out)) for k, v in files}


def draw(trace: Path, html: Path) -> bool:
    """Draw `trace` with `lora-sched view`; False (no page) when it cannot."""
    try:
        done = subprocess.run([sys.executable, "-m", "lora_sched", "view", str(trace), "--out", str(html)],
                              capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and html.is_file()
