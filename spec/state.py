"""Scheduler state (DESIGN section 2, "State") and the record of one step.

The state is what vLLM's `Scheduler` holds between two `schedule()` calls,
reduced to what admission depends on: the two queues, per-request token
counters, KV blocks held, and the finished / aborted sets. Field names follow
`vllm/v1/request.py` so the reference reads side by side with vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lora_sched.spec.config import Config
from lora_sched.spec.request import Request


def peak_present(records: Iterable[StepRecord]) -> int:
    """Q of `policy.bound.fair_bound`: the most requests waiting or running when a step starts."""
    return max((len(r.waiting) + len(r.running) for r in records), default=0)


def peak_waiting(records: Iterable[StepRecord]) -> int:
    """Qw of `policy.bound.fair_bound`: the most requests waiting when a step starts."""
    return max((len(r.waiting) for r in records), default=0)


def blocks_for(tokens: int, block_size: int) -> int:
    """KV blocks needed to hold `tokens` tokens (vLLM's `cdiv`)."""
    return -(-tokens // block_size)


@dataclass(slots=True)
class ReqState:
    req: Request
    seq: int  # arrival order, breaks ties like vLLM's arrival_time
    status: str = "waiting"  # waiting | running | finished | aborted
    computed: int = 0  # num_computed_tokens
    generated: int = 0  # num_output_tokens (applied)
    placeholders: int = 0  # async: num_output_placeholders
    in_flight: int = 0  # async: tokens scheduled whose output is not applied
    stale: int = 0  # async: in-flight tokens of a preempted request
    blocks: int = 0  # KV blocks held
    waiting_since: int = 0  # step it last joined `waiting` (arrival or preemption)
    first_admitted: int | None = None  # step of first admission
    preemptions: int = 0
    # vLLM `Request.is_prefill_chunk`: set when the request is scheduled, true
    # while its computed tokens have not caught up with its sequence (DP
    # prefill throttling defers such requests).
    is_prefill_chunk: bool = False

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (vLLM `Request.num_tokens`)."""
        return self.req.prompt_tokens + self.generated

    def priority_key(self) -> tuple[int, int, int]:
        """vLLM's `Request.__lt__`: (priority, arrival_time, request_id)."""
        return (self.req.priority, self.req.arrival, self.seq)


@dataclass
class State:
    config: Config
    step: int = 0
    reqs: dict[str, ReqState] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)  # queue order (sorted for priority)
    running: list[str] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)
    # vLLM's `deferred_waiting`: waiting requests a scan skipped since they
    # last joined `running`; and `prefill_capacity_bound`, which turns DP
    # prefill throttling off while requests wait for capacity, not skips.
    deferred: set[str] = field(default_factory=set)
    prefill_capacity_bound: bool = False

    def used_blocks(self) -> int:
        return sum(self.reqs[r].blocks for r in self.running)

    def adapter(self, rid: str) -> int:
        return self.reqs[rid].req.adapter

    def enqueue(self, rid: str, *, front: bool) -> None:
        """Put a request into `waiting`: FCFS appends (or prepends a preempted
        request); the priority queue keeps (priority, arrival, seq) order."""
        if self.config.queue == "priority":
            self.waiting.append(rid)
            self.waiting.sort(key=lambda r: self.reqs[r].priority_key())
        elif front:
            self.waiting.insert(0, rid)
        else:
            self.waiting.append(rid)


@dataclass(slots=True)
class StepRecord:
    """One `schedule()` plus its model output, as written to a trace.

    `waiting` and `running` are the orders when `schedule()` starts (after this
    step's arrivals and aborts); `scheduled` maps request -> tokens this step
    in scheduling order; `finished` lists requests completed by this step's
    output (under async scheduling that output is applied one step later);
    `throttle` is the step's input from the DP engine core (written only
    when true).
    """

    step: int
    waiting: list[str]
    running: list[str]
    scheduled: dict[str, int]
    admitted: list[str]
    preempted: list[str]
    finished: list[str]
    # `schedule(throttle_prefills=True)`: the DP engine core's off-cadence step.
    throttle: bool = False
    # Not part of the trace format: why the scan left requests waiting,
    # request -> reason, as the policy declares it (used by diagnostics).
    holds: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        line = {
            "kind": "step",
            "step": self.step,
            "waiting": list(self.waiting),
            "running": list(self.running),
            "scheduled": dict(self.scheduled),
            "admitted": list(self.admitted),
            "preempted": list(self.preempted),
            "finished": list(self.finished),
        }
        if self.throttle:
            line["throttle"] = True
        return line
