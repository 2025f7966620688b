"""Recording scheduler classes: vLLM's own schedulers, writing a trace.

`RecordingScheduler` (`AsyncRecordingScheduler`) subclasses vLLM's
`Scheduler` (`AsyncScheduler`), changes no decision and writes the
`lora-sched-trace` format through `spec.trace.TraceWriter` from
`add_request`, `finish_requests`, `schedule` and `update_from_output`.
Every class of `lora_sched.scheduler` records through `RecorderMixin`. Step
numbers count `schedule()` calls; a step's line is written when its output
is applied. `LORA_SCHED_TRACE=PATH` turns recording on; its variables and
failure modes: docs/conformance.md and docs/operator-scale.md.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import vllm
from vllm.logger import init_logger
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request as SpecRequest
from lora_sched.spec.state import StepRecord
from lora_sched.spec.trace import TraceWriter

_log = init_logger("vllm.lora_sched")  # under "vllm", whose handlers vLLM configures
TRACE_ENV = "LORA_SCHED_TRACE"
SOURCE = f"vllm {vllm.__version__}"


def installed_release() -> str:
    """The release whose semantics the installed vLLM's traces follow (`0.33`):
    its own, or the newest for a vLLM the registry lacks (`releases.modelled`;
    the trace's source names the version, and its check has no replay)."""
    return releases.modelled(vllm.__version__)

ROTATE_ENV = "LORA_SCHED_TRACE_ROTATE_MB"
FLUSH_ENV = "LORA_SCHED_TRACE_FLUSH"


class RecordingBroken(RuntimeError):
    """The scheduler left a state the recorder cannot write (`RecorderMixin.rec_strict`)."""


@dataclass
class _Open:
    """A scheduled step whose output has not been applied yet."""

    record: StepRecord


def config_of(sched: Scheduler, policy: str, *, async_scheduling: bool | None = None) -> Config:
    """The model's config for a live vLLM scheduler (DESIGN §2 keys);
    `async_scheduling` defaults to what the engine config resolved."""
    sc = sched.scheduler_config
    lora = sched.lora_config
    return Config(
        max_loras=lora.max_loras if lora is not None else 1,
        max_num_seqs=sched.max_num_active_reqs,
        max_num_batched_tokens=sched.max_num_scheduled_tokens,
        chunked_prefill=bool(sc.enable_chunked_prefill),
        long_prefill_token_threshold=int(sc.long_prefill_token_threshold or 0),
        # The block pool reserves one block as the null block.
        kv_blocks=sched.kv_cache_config.num_blocks - 1,
        block_size=sched.block_size,
        queue=str(getattr(sc.policy, "value", sc.policy)),
        # How the engine drives it, not the class: vLLM's CPU platform forces
        # async scheduling off (platforms/cpu.py), and an AsyncScheduler
        # subclass then gets each output before the next schedule(), like the
        # sync one. The in-process harness drives either way and says which.
        async_scheduling=(bool(sched.scheduler_config.async_scheduling) if async_scheduling is None
                          else async_scheduling),
        policy=policy,
        starvation_steps=int(getattr(sched, "starvation_steps", Config().starvation_steps)),
        prefill_schedule_interval=int(getattr(sc, "prefill_schedule_interval", 1) or 1),
        vllm=installed_release(),
    )


def unmodelled(sched: Scheduler) -> str | None:
    """One line naming a vLLM 0.34 admission feature switched on that the model
    (and fair's index) does not follow, or None."""
    sc = sched.scheduler_config
    if getattr(sched, "cache_aware_window", 0):
        return (f"--cache-aware-admission-window {sc.cache_aware_admission_window} reorders vLLM's waiting "
                "queue by cached prefix before each scan, which breaks FIFO within an adapter and the wait "
                "bound; start with --cache-aware-admission-window 0 (or without prefix caching)")
    if getattr(sc, "max_num_inflight_kv_loads", None) is not None:
        return (f"--max-num-inflight-kv-loads {sc.max_num_inflight_kv_loads} parks KV loads in a second "
                "waiting queue (async_kv_waiting) that the model does not follow; start without it")
    return None


class RecorderMixin:
    """The recording hooks; mixed in front of a vLLM scheduler class (whose
    `policy_name` names the policy in the trace header)."""

    policy_name: str
    # The header's `source`: it names the installed vLLM (the release registry
    # reads it); a class recorded for `--scheduler-cls` also names itself.
    trace_source: str = SOURCE
    # True: a step the recorder cannot write raises `RecordingBroken` instead
    # of stopping the recording (the in-process harness, where it is a finding).
    rec_strict: bool = False
    # What an instance vLLM's tests build without `__init__` (`object.__new__`) reads: not recording.
    _rec_writer: TraceWriter | None = None
    _rec_open: dict[int, _Open] = {}  # read only: `schedule` opens records only with a writer
    _rec_done: set[str] = frozenset()  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rec_step = 0
        self._rec_open: dict[int, _Open] = {}  # id(SchedulerOutput) -> open record
        # Finished or aborted ids still scheduled in an open step (async: a
        # request aborted after it was scheduled); nothing older is kept.
        self._rec_done: set[str] = set()
        path = os.environ.get(TRACE_ENV)
        self._rec_writer: TraceWriter | None = None
        if path:
            self.start_recording(path)

    # ---- public ------------------------------------------------------------
    def start_recording(self, path: str | os.PathLike[str], *, async_scheduling: bool | None = None,
                        rotate_mb: float | None = None, flush_every: int | None = None) -> None:
        """Open `path` and write the header (also used in-process, where the
        harness says whether it drives the scheduler asynchronously).
        `rotate_mb` and `flush_every` default to the environment's
        `LORA_SCHED_TRACE_ROTATE_MB` and `LORA_SCHED_TRACE_FLUSH`."""
        self._check_supported()
        config = config_of(self, self.policy_name, async_scheduling=async_scheduling)  # type: ignore[arg-type]
        rotate = rotate_mb if rotate_mb is not None else _env_number(ROTATE_ENV, float)
        flush = flush_every if flush_every is not None else _env_number(FLUSH_ENV, int)
        self._rec_writer = TraceWriter(path, config, self.trace_source, flush_every=int(flush or 1),
                                       max_bytes=int(rotate * 2**20) if rotate else None)

    def stop_recording(self) -> None:
        if self._rec_writer is not None:
            self._rec_writer.close()
            self._rec_writer = None

    def _check_supported(self) -> None:
        """The model abstracts prefix caching, spec decoding and connectors away;
        a trace recorded with them on would not be comparable."""
        s: Any = self
        if s.cache_config.enable_prefix_caching:
            raise RuntimeError("recording needs prefix caching off (--no-enable-prefix-caching)")
        if s.vllm_config.speculative_config is not None:
            raise RuntimeError("recording does not support speculative decoding")
        why = unmodelled(s)
        if why is not None:
            raise RuntimeError(f"recording: {why}")

    # ---- hooks ---------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        s: Any = self
        w = self._rec_writer
        # A streaming session's next chunk or its close carries the session's
        # id and is no new request: vLLM keeps its own, `request` is not it.
        if w is None or s.requests.get(request.request_id) is not request:
            return
        try:
            sp = request.sampling_params
            lora = request.lora_request
            req = SpecRequest(request.request_id, lora.lora_int_id if lora is not None else 0,
                              request.num_prompt_tokens, int(sp.max_tokens if sp is not None else 1),
                              self._rec_step + 1, int(request.priority))
            w.arrive(req, self._rec_step + 1)
        except Exception as exc:
            self._rec_fail(f"request {request.request_id!r} arriving", exc)

    def _rec_fail(self, where: str, exc: BaseException) -> None:
        """Recording stops (the engine serves on): one line names the trace,
        the step and what could not be written; the trace keeps every line
        written before."""
        w, self._rec_writer = self._rec_writer, None
        path = getattr(w, "path", "?")
        if self.rec_strict:
            if w is not None:
                with suppress(Exception):
                    w.close()
            raise RecordingBroken(f"recording stopped at step {self._rec_step}, {where}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        _log.error("lora_sched: recording to %s stopped at step %d, %s: %s: %s", path, self._rec_step, where,
                   type(exc).__name__, exc)
        if w is not None:
            with suppress(Exception):
                w.close()

    def finish_requests(self, request_ids: Any, finished_status: RequestStatus) -> list[Any]:
        done = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        for request in done:
            rid = request.request_id
            if any(rid in o.record.scheduled for o in self._rec_open.values()):
                self._rec_done.add(rid)
            if self._rec_writer is not None and finished_status == RequestStatus.FINISHED_ABORTED:
                try:
                    self._rec_writer.abort(rid, self._rec_step + 1)
                except Exception as exc:
                    self._rec_fail(f"request {rid!r} aborting", exc)
        return done

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        s: Any = self
        self._rec_step += 1
        if self._rec_writer is None:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        waiting = [r.request_id for r in s.kv_holding_waiting] + [r.request_id for r in s.waiting]
        running = [r.request_id for r in s.running]
        # 0.33's scheduler keeps its own prefill cadence (spec.releases): the
        # step is off-cadence on the condition its schedule() tests.
        k = int(getattr(s, "local_prefill_interval", 1))
        off_cadence = k > 1 and (s.num_executed_steps + 1) - s.last_prefill_step < k
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        scheduled = dict(out.num_scheduled_tokens)
        before = set(running)
        admitted = [rid for rid in scheduled if rid not in before]
        preempted_set = set(out.preempted_req_ids or ())
        # Victims in the order vLLM chose them: the tail of `running` first
        # under FCFS; under priority the reference orders them the same way
        # (by decreasing (priority, arrival)).
        preempted = [rid for rid in reversed(running) if rid in preempted_set]
        if s.policy.value == "priority":
            preempted.sort(key=lambda rid: (s.requests[rid].priority, s.requests[rid].arrival_time),
                           reverse=True)
        throttle = bool(kwargs.get("throttle_prefills", args[0] if args else False)) or off_cadence
        rec = StepRecord(self._rec_step, waiting, running, scheduled, admitted, preempted, [], throttle)
        self._rec_open[id(out)] = _Open(rec)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        s: Any = self
        opened = self._rec_open.pop(id(scheduler_output), None)
        done_before = {rid for rid in opened.record.scheduled if rid in self._rec_done} if opened else set()
        result = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        if opened is None or self._rec_writer is None:
            return result
        rec = opened.record
        for rid in rec.scheduled:
            if rid in done_before:
                continue
            request = s.requests.get(rid)
            if request is None or request.is_finished():
                rec.finished.append(rid)
        # Forget the done ids no open step schedules any more.
        still = {rid for o in self._rec_open.values() for rid in o.record.scheduled}
        self._rec_done = {rid for rid in self._rec_done if rid in still} | \
            {rid for rid in rec.finished if rid in still}
        try:
            self._rec_writer.step(rec)
        except Exception as exc:
            self._rec_fail("writing the step", exc)
        return result

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            self.stop_recording()


def _env_number(name: str, kind: type[int] | type[float]) -> int | float | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise RuntimeError(f"{name}={raw!r}: expected a positive {kind.__name__}") from None
    if value <= 0:
        raise RuntimeError(f"{name}={raw!r}: expected a positive {kind.__name__}")
    return value


class RecordingScheduler(RecorderMixin, Scheduler):
    """vLLM's synchronous `Scheduler`, recorded (policy `vllm`)."""

    policy_name = "vllm"


class AsyncRecordingScheduler(RecorderMixin, AsyncScheduler):
    """vLLM's `AsyncScheduler`, recorded (policy `vllm`)."""

    policy_name = "vllm"


RECORD_KEY = "lora_sched_record"  # --additional-config key of `Recorded` (apart from fair's "lora_sched")
_RECORDED: dict[tuple[type, str, bool], type] = {}


def recorded_class(cls: type, path: str, *, strict: bool = False) -> type:
    """`cls` with `RecorderMixin` in front: the trace's source names the
    installed vLLM and `path`; policy `vllm`, or the project's own policy for
    a class that records already. `strict`: a step the recorder cannot write
    raises (`rec_strict`)."""
    key = (cls, path, strict)
    got = _RECORDED.get(key)
    if got is None:
        attrs: dict[str, Any] = {"trace_source": f"{SOURCE}; scheduler {path}", "rec_strict": strict,
                                 "__module__": __name__}
        if issubclass(cls, RecorderMixin):
            got = type(f"Recorded{cls.__name__}", (cls,), attrs)
        else:
            got = type(f"Recorded{cls.__name__}", (RecorderMixin, cls), {**attrs, "policy_name": "vllm"})
        _RECORDED[key] = got
    return got


class Recorded:
    """Any scheduler class, recorded: `--scheduler-cls lora_sched.recorder.Recorded
    --additional-config '{"lora_sched_record": {"scheduler_cls": "pkg.mod.Class"}}'`.

    vLLM's engine core calls this class; it builds `pkg.mod.Class` (resolved as
    vLLM resolves `--scheduler-cls`) with `RecorderMixin` in front and returns
    that instance, which records to `LORA_SCHED_TRACE` and decides as
    `pkg.mod.Class` does. A missing or unloadable class stops the engine in one line."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        path = wrapped_path(vllm_config)
        try:
            target = resolve_obj_by_qualname(path)
        except Exception as exc:
            raise ValueError(f"lora_sched_record: scheduler_cls {path!r} cannot be loaded: "
                             f"{type(exc).__name__}: {exc}") from None
        if not (isinstance(target, type) and issubclass(target, Scheduler)):
            raise ValueError(f"lora_sched_record: scheduler_cls {path!r} is not a subclass of vLLM's Scheduler")
        return recorded_class(target, path)(*args, **kwargs)


def wrapped_path(vllm_config: Any) -> str:
    """The class path `Recorded` wraps (`additional_config["lora_sched_record"]["scheduler_cls"]`)."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    section = extra.get(RECORD_KEY) if isinstance(extra, dict) else None
    path = section.get("scheduler_cls") if isinstance(section, dict) else None
    unknown = sorted(set(section) - {"scheduler_cls"}) if isinstance(section, dict) else []
    if not isinstance(path, str) or not path or unknown:
        raise ValueError(f"lora_sched.recorder.Recorded needs --additional-config "
                         f"'{{\"{RECORD_KEY}\": {{\"scheduler_cls\": \"pkg.module.Class\"}}}}'"
                         + (f" (unknown keys: {', '.join(unknown)})" if unknown else f", got {section!r}"))
    return path
