"""The LoRA admission gate: the one decision the three policies differ in.

The shared core (`policy.core`) runs vLLM's `schedule()`; when the waiting
scan reaches a request it asks the policy's gate whether the LoRA cap lets the
request in. Everything else (budgets, KV, preemption) is the core's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.state import State


class Decision(Enum):
    ADMIT = "admit"  # the LoRA cap allows it; capacity checks follow
    SKIP = "skip"  # leave it waiting, keep scanning (vLLM since #15422)
    STOP = "stop"  # leave it and everything after it waiting (before #15422)


@dataclass
class ScanContext:
    """What the gate may look at during one waiting scan."""

    state: State
    step: int
    # Adapters (> 0) of running requests scheduled this step (0.32; every
    # running request on 0.33, `spec.releases`) plus requests admitted so far
    # in this scan: the set vLLM counts against max_loras.
    scheduled_loras: set[int]


def vllm_cap_blocks(ctx: ScanContext, adapter: int) -> bool:
    """vLLM's LoRA cap (`spec.cap.cap_blocks`) over vLLM's set (`ScanContext.scheduled_loras`)."""
    return cap_blocks(ctx.scheduled_loras, adapter, ctx.state.config.max_loras)


def running_loras(ctx: ScanContext) -> set[int]:
    """Adapters (> 0) of every request in `running` now: those scheduled this
    step, those left unscheduled (async sure-to-finish, DP throttle, skips)
    and those admitted so far in this scan."""
    st = ctx.state
    return {a for a in (st.adapter(r) for r in st.running) if a > 0}


class Gate(Protocol):
    name: str

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        """The order in which the waiting scan visits `queue`."""
        ...

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        """The LoRA decision for `rid` and, when not ADMIT, the hold reason."""
        ...

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        """Told when `rid` passed every check and joined `running`."""
        ...

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        """Told at the end of every `schedule()`, scan or not, with the batch's adapters."""
        ...

    def enqueued(self, state: State, rid: str) -> None:
        """Told when `rid` joins `waiting` (arrival, or preemption), after its
        `waiting_since` is set: a gate may index the queue instead of
        re-reading it every scan."""
        ...

    def dequeued(self, state: State, rid: str) -> None:
        """Told when `rid` leaves `waiting` without being admitted (abort, or a
        stale async output that finishes it); admissions come to `admitted`."""
        ...


class GateBase:
    """Defaults for a gate: queue order, nothing to remember. A gate overrides
    what its rule needs; `decide` it must write."""

    name: str

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        return queue

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        pass

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        pass

    def enqueued(self, state: State, rid: str) -> None:
        pass

    def dequeued(self, state: State, rid: str) -> None:
        pass
