"""Shortest prompt first across the whole waiting queue, for latency.

The change: "short prompts finish sooner; admit them first". Each
`schedule()` reorders the waiting queue by prompt length (stable: ties keep
arrival order). Breaks `fifo_within_adapter`: a later, shorter request of an
adapter is first admitted before an earlier, longer one.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class ShortestPromptFirst(Scheduler):
    """vLLM's `Scheduler` admitting the shortest waiting prompt first."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        order = list(self.waiting)
        ranked = sorted(order, key=lambda r: r.num_prompt_tokens)
        if ranked != order:
            self.waiting.remove_requests(order)
            for req in ranked:
                self.waiting.add_request(req)
        return super().schedule(*args, **kwargs)
