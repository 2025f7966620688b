"""Adapter affinity: the waiting requests of adapters already running go first.

The change: "a request whose adapter is loaded costs no adapter swap; admit
those first". Each `schedule()` moves the waiting requests whose adapter a
running request holds ahead of the others (stable: each group keeps arrival
order, so FIFO within an adapter holds).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class AdapterAffinity(Scheduler):
    """vLLM's `Scheduler` admitting the requests of running adapters first."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        running = {r.lora_request.lora_int_id for r in self.running if r.lora_request is not None}
        order = list(self.waiting)
        ranked = sorted(order, key=lambda r: (r.lora_request.lora_int_id if r.lora_request else 0) not in running)
        if ranked != order:
            self.waiting.remove_requests(order)
            for req in ranked:
                self.waiting.add_request(req)
        return super().schedule(*args, **kwargs)
