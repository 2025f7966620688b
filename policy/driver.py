"""Run a workload through a reference policy to completion, writing a trace."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from lora_sched.policy import make_gate
from lora_sched.policy.core import Scheduler
from lora_sched.policy.gate import Gate
from lora_sched.spec import releases
from lora_sched.spec.config import Config, throttled
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord
from lora_sched.spec.trace import TraceWriter


@dataclass
class Workload:
    """Requests (each with its arrival step) and client aborts (id -> step)."""

    requests: list[Request]
    aborts: dict[str, int] = field(default_factory=dict)
    # Running requests the environment declines to schedule (step -> ids):
    # DESIGN's nondeterministic skip, for checkers that ask what it breaks.
    skips: dict[int, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [r.id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise ValueError("workload: duplicate request ids")
        for rid in self.aborts:
            if rid not in ids:
                raise ValueError(f"workload: abort of unknown request {rid!r}")


class DriverStuck(RuntimeError):
    """The run made no progress within `max_steps` (e.g. a request larger than KV)."""


@dataclass
class RunResult:
    """`records` holds every step's record unless the run was told not to keep
    them (`run(keep_records=False)`: then it is empty, `steps` counts them, and
    the scheduler forgot finished requests, so `first_admitted` and `waits`
    come from the summary gathered as the run went)."""

    config: Config
    records: list[StepRecord]
    scheduler: Scheduler
    last_step: int
    steps: int = 0
    _first: dict[str, int | None] | None = None  # the summary, when records were not kept
    _arrival: dict[str, int] = field(default_factory=dict)

    def first_admitted(self) -> dict[str, int | None]:
        if self._first is not None:
            return dict(self._first)
        return {rid: rs.first_admitted for rid, rs in self.scheduler.state.reqs.items()}

    def waits(self) -> dict[str, int]:
        """Steps from arrival to first admission, for admitted requests."""
        if self._first is not None:
            arrival = self._arrival
            return {rid: s - arrival[rid] for rid, s in self._first.items() if s is not None}
        return {rid: rs.first_admitted - rs.req.arrival
                for rid, rs in self.scheduler.state.reqs.items() if rs.first_admitted is not None}


_RELEASE: str | None = None  # `release`'s override of every run's `Config.vllm`


@contextlib.contextmanager
def release(name: str | None) -> Iterator[None]:
    """Every `run` inside follows vLLM release `name` (`spec.releases`), whatever
    its config says: how `lora-sched bench --vllm` reaches the configs the
    benches build. None leaves configs as they are. Restored on exit."""
    global _RELEASE
    if name is not None:
        releases.get(name)  # an unknown release is refused here, naming the supported ones
    old, _RELEASE = _RELEASE, name
    try:
        yield
    finally:
        _RELEASE = old


def run(
    config: Config,
    workload: Workload,
    *,
    policy: str | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    max_steps: int = 200_000,
    source: str = "lora-sched reference",
    gate: Gate | None = None,
    keep_records: bool = True,
    scheduler: Callable[..., Scheduler] = Scheduler,
) -> RunResult:
    """Drive `workload` until every request finished or was aborted.

    `gate` replaces the policy's gate (planted bugs), `scheduler` the core.
    `keep_records=False` keeps memory to the live requests: step records go
    only to the trace (when `trace_path` is given), the scheduler forgets
    finished requests, each request's first admission is summarised as the run
    goes (`RunResult`), and a scan that stops early costs what it reached
    (`Scheduler.all_holds`). The clock jumps over idle steps to the next arrival,
    as vLLM's engine does not call `schedule()` without requests. Each step is
    throttled as vLLM's DP engine core throttles it (`spec.config.throttled`,
    counting the steps of the current wave) on a release whose engine core
    drives the cadence (`spec.releases`: 0.32); elsewhere nothing is passed.
    """
    if policy is not None:
        config = replace(config, policy=policy)
    if _RELEASE is not None:
        config = replace(config, vllm=_RELEASE)
    # Without records nobody reads a step's `holds`: the scan reports only what it reached.
    sched = scheduler(config, gate if gate is not None else make_gate(config.policy), forget_done=not keep_records,
                      all_holds=keep_records)
    first: dict[str, int | None] | None = None if keep_records else {}
    arrival: dict[str, int] = {}
    n_steps = 0
    arrivals = sorted(workload.requests, key=lambda r: r.arrival)
    aborts = sorted(workload.aborts.items(), key=lambda kv: kv[1])
    writer = TraceWriter(trace_path, config, source) if trace_path is not None else None
    records: list[StepRecord] = []
    held: StepRecord | None = None  # async: a record completes one step later
    ai = bi = 0
    step = 0
    wave = 0  # steps in the current wave (vLLM's DP `step_counter`)
    try:
        while ai < len(arrivals) or sched.has_work():
            step += 1
            if not sched.has_work():
                wave = 0
                if ai < len(arrivals):
                    step = max(step, arrivals[ai].arrival)
            if step > max_steps:
                raise DriverStuck(f"no completion after {max_steps} steps "
                                  f"({len(sched.state.waiting)} waiting, {len(sched.state.running)} running)")
            while ai < len(arrivals) and arrivals[ai].arrival <= step:
                req = arrivals[ai]
                if req.arrival < step:
                    req = replace(req, arrival=step)
                sched.add(req)
                if first is not None:
                    first[req.id] = None
                    arrival[req.id] = req.arrival
                if writer:
                    writer.arrive(req, step)
                ai += 1
            while bi < len(aborts) and aborts[bi][1] <= step:
                rid = aborts[bi][0]
                if rid in sched.state.reqs and sched.abort(rid) and writer:
                    writer.abort(rid, step)
                bi += 1
            if not sched.state.waiting and not sched.state.running:
                if config.async_scheduling and sched.has_work():
                    last = sched.drain()
                    if last is not None and writer:
                        writer.step(last)
                    held = None
                continue
            off = sched.release.prefill_cadence == "dp_engine" and throttled(config, wave)
            rec = sched.step(step, workload.skips.get(step, frozenset()), throttle=off)
            wave += 1
            n_steps += 1
            if keep_records:
                records.append(rec)
            else:
                for rid in rec.admitted:
                    if first is not None and first[rid] is None:
                        first[rid] = step
            if config.async_scheduling:
                if held is not None and writer:
                    writer.step(held)
                held = rec
            elif writer:
                writer.step(rec)
        if config.async_scheduling:
            last = sched.drain()
            if held is not None and writer:
                writer.step(held)
    finally:
        if writer:
            writer.close()
    return RunResult(config, records, sched, step, n_steps, first, arrival)
