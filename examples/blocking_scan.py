"""The waiting scan stops at the first LoRA-blocked request, as vLLM did before PR #15422.

The change: "a request whose adapter does not fit ends the scan" (vLLM's rule
until PR #15422 made it skip the request and go on). Each `schedule()` hides,
for that step, the waiting requests from the first one whose adapter would
exceed `max_loras` onwards. Violates `no_hol_blocking`: a request behind the
blocked one whose adapter is already in the batch waits although the cap
and the capacity let it in (found with `--expect no_hol_blocking`).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class BlockingScan(Scheduler):
    """vLLM's `Scheduler` whose waiting scan stops at the first LoRA-blocked request."""

    def _blocked_tail(self) -> list[Any]:
        if self.lora_config is None:
            return []
        loras = {r.lora_request.lora_int_id for r in self.running if r.lora_request is not None}
        order = list(self.waiting)
        for i, req in enumerate(order):
            lora = req.lora_request.lora_int_id if req.lora_request is not None else 0
            if lora > 0 and lora not in loras:
                if len(loras) >= self.lora_config.max_loras:
                    return order[i:]
                loras.add(lora)
        return []

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        hidden = self._blocked_tail()
        if hidden:
            self.waiting.remove_requests(hidden)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            for req in hidden:
                self.waiting.add_request(req)
