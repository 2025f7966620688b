"""A stock subclass that only counts its steps (clean: no finding)."""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class StepCounter(Scheduler):
    """vLLM's `Scheduler`, counting `schedule()` calls in `steps`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self.steps += 1
        return super().schedule(*args, **kwargs)
