"""A LoRA cap that counts only the adapters admitted this step.

The change: "running requests already hold their adapters, so the cap should
only limit the adapters a step brings in". Each `schedule()` lets the waiting
scan admit `max_loras` adapters on top of those of the running requests.
Breaks `running_lora_cap` and `batch_lora_cap` (or trips vLLM's own
`max_loras` assert): both are findings.
"""

from __future__ import annotations

import copy
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler


class AdmittedOnlyCap(Scheduler):
    """vLLM's `Scheduler` whose LoRA cap ignores the running requests' adapters."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        real = self.lora_config
        if real is None:
            return super().schedule(*args, **kwargs)
        running = {r.lora_request.lora_int_id for r in self.running if r.lora_request is not None}
        widened = copy.copy(real)
        widened.max_loras = real.max_loras + len(running)
        self.lora_config = widened
        try:
            return super().schedule(*args, **kwargs)
        finally:
            self.lora_config = real
