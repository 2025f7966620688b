"""Run one fuzz case on vLLM's real scheduler (in-process) and name its failures.

A case fails by a crash, no progress (`stuck`), a claimed property broken
(`property`), or a replay that diverges or is rejected (`divergence`,
`reference-error`); each failure's signature, `kind:name:policy`, is what
the campaign deduplicates and the shrinker preserves (docs/fuzz.md). A
user's class (`case.scheduler_cls`), and any case on a vLLM the release
registry lacks (run with the newest release's semantics), has no replay.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from lora_sched.conformance.inprocess import Stuck, run_workload
from lora_sched.conformance.target import expected, load
from lora_sched.fuzz.space import FuzzCase
from lora_sched.policy import claims
from lora_sched.policy.check import check_trace
from lora_sched.policy.replay import replay
from lora_sched.spec import releases
from lora_sched.spec.trace import TraceError, read_trace


def unregistered() -> str | None:
    """The installed vLLM's version when the release registry lacks it, else None."""
    import vllm

    return releases.unregistered(f"vllm {vllm.__version__}")


@dataclass(frozen=True)
class Failure:
    kind: str  # crash | stuck | property | divergence | reference-error | harness-error (campaign)
    name: str  # exception@function, property name, or diverging field
    policy: str
    message: str
    step: int | None = None

    @property
    def signature(self) -> str:
        return f"{self.kind}:{self.name}:{self.policy}"

    def to_json(self) -> dict:
        return {"signature": self.signature, "kind": self.kind, "name": self.name, "policy": self.policy,
                "message": self.message, "step": self.step}


@dataclass
class CaseResult:
    case: FuzzCase
    trace: Path
    steps: int
    failures: list[Failure] = field(default_factory=list)
    # A user's class: violations of properties not expected (reported with evidence, not findings).
    evidence: list[Failure] = field(default_factory=list)
    features: set[str] = field(default_factory=set)  # what the run exercised (campaign coverage)

    @property
    def signatures(self) -> set[str]:
        return {f.signature for f in self.failures}


def _crash_name(exc: BaseException) -> tuple[str, str]:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    where = f"{os.path.basename(last.filename)}:{last.name}" if last else "?"
    # Code compiled from rewritten source (lora_sched's hooked schedule()) has no file to quote.
    text = f": {last.line}" if last and last.line and os.path.exists(last.filename) else ""
    line = f" ({os.path.basename(last.filename)}:{last.lineno}{text})" if last else ""
    return f"{type(exc).__name__}@{where}", f"{type(exc).__name__}: {exc}{line}".strip()


def default_trace_path() -> Path:
    tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, name = tempfile.mkstemp(prefix="lora-sched-fuzz-", suffix=".jsonl", dir=tmp)
    os.close(fd)
    return Path(name)


def run_case(case: FuzzCase, trace_path: str | os.PathLike[str] | None = None) -> CaseResult:
    """Run `case` inside vLLM, record its trace, check it; never raises for a failing case."""
    path = Path(trace_path) if trace_path is not None else default_trace_path()
    if case.scheduler_cls is not None:
        return _run_target(case, path)
    if unregistered() is not None and case.config.policy != "vllm":
        case = replace(case, config=replace(case.config, policy="vllm"), reference="vllm")
    cfg = case.config
    policy = cfg.policy
    result = CaseResult(case, path, 0)
    try:
        result.steps = run_workload(cfg, case.workload, path, policy=policy)
    except Stuck as exc:
        result.failures.append(Failure("stuck", "Stuck", policy, str(exc)))
    except Exception as exc:  # vLLM's own crash: a finding, not an error of the campaign
        name, message = _crash_name(exc)
        result.failures.append(Failure("crash", name, policy, message))
    try:
        trace = read_trace(path, allow_truncated_tail=True)
    except TraceError as exc:
        result.failures.append(Failure("reference-error", "TraceError", policy, str(exc)))
        return result
    report = check_trace(trace)
    claimed = claims(policy, trace.config)  # the release the trace's source names
    for prop, v in report.first.items():
        if prop in claimed:
            result.failures.append(Failure("property", prop, policy, str(v), v.step))
    if trace.steps() and trace.unregistered is None:
        try:
            rep = _replay(trace, case.reference)
        except (ValueError, RuntimeError, KeyError) as exc:
            name, message = _crash_name(exc)
            result.failures.append(Failure("reference-error", name, policy, message))
        else:
            if rep.divergence is not None:
                d = rep.divergence
                result.failures.append(Failure("divergence", d.field, policy,
                                               f"step {d.step}: reference {d.expected} vs vLLM {d.actual}", d.step))
    result.features = _features(case, trace)
    return result


def _run_target(case: FuzzCase, path: Path) -> CaseResult:
    """Run a user's scheduler class (`case.scheduler_cls`): every property is
    judged, those `expected` decide the findings, the others are evidence;
    whatever the class does (raise, return garbage, break the recorder)
    becomes a failure, never an exception here. No replay: no reference
    models the class."""
    target = load(case.scheduler_cls)  # type: ignore[arg-type]
    cfg = replace(case.config, async_scheduling=target.is_async, policy=target.policy)
    label = target.name
    result = CaseResult(case, path, 0)
    try:
        result.steps = run_workload(cfg, case.workload, path, policy=cfg.policy, scheduler_class=target.recorded)
    except Stuck as exc:
        result.failures.append(Failure("stuck", "Stuck", label, str(exc)))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the class's own crash (SystemExit included): a finding
        name, message = _crash_name(exc)
        result.failures.append(Failure("crash", name, label, message))
    try:
        trace = read_trace(path, allow_truncated_tail=True)
        report = check_trace(trace)
    except Exception as exc:  # a trace the class made unreadable or unjudgeable
        name, message = _crash_name(exc)
        result.failures.append(Failure("trace-error", name, label, message))
        return result
    wanted = expected(trace.config, case.expect)
    for prop, v in report.first.items():
        failure = Failure("property", prop, label, str(v), v.step)
        (result.failures if prop in wanted else result.evidence).append(failure)
    result.features = _features(replace(case, config=cfg), trace)
    return result


def _replay(trace, reference: str):
    return replay(trace, reference)


def _features(case: FuzzCase, trace) -> set[str]:
    cfg = case.config
    steps = trace.steps()
    f = {f"policy:{cfg.policy}", f"queue:{cfg.queue}", "async" if cfg.async_scheduling else "sync",
         "chunked" if cfg.chunked_prefill else "no-chunk", f"max_loras:{cfg.max_loras}"}
    if cfg.kv_blocks is not None:
        f.add("kv-limited")
    if cfg.long_prefill_token_threshold:
        f.add("long-prefill-threshold")
    if cfg.prefill_schedule_interval > 1:
        f.add("throttle")
    if any(r.preempted for r in steps):
        f.add("preemption")
        if cfg.queue == "priority":
            f.add("priority-preemption")  # where 0.33 goes on past a self-preempting request
    if any(r.throttle for r in steps):
        f.add("off-cadence")  # a step the prefill cadence held (0.32: DP engine core; 0.33: the scheduler)
    f.add(f"vllm:{trace.config.vllm}")
    if case.workload.aborts:
        f.add("aborts")
    adapters = {r.adapter for r in case.workload.requests if r.adapter > 0}
    if len(adapters) > cfg.max_loras:
        f.add("adapters>max_loras")
    if any(r.adapter == 0 for r in case.workload.requests):
        f.add("base-model")
    return f
