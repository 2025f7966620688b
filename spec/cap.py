"""The LoRA cap: the one predicate every part of the project asks.

vLLM's `Scheduler.schedule()` skips a waiting request when
`len(scheduled_loras) == max_loras and lora_int_id not in scheduled_loras`.
Which set is counted is the policy's choice (`spec.releases` for `blocking`
and `vllm`; `fair` counts every running request's adapter); the rule over
that set is written here once, for the reference gates, the classes inside
vLLM and the trace checker. `proofs.encoding` encodes the same rule in SMT,
checked against this function by `tests/test_proofs_differential.py`.
"""

from __future__ import annotations

from collections.abc import Collection


def cap_blocks(active: Collection[int], adapter: int, max_loras: int) -> bool:
    """True when a request of `adapter` may not join a batch whose LoRA
    adapters are `active`: it uses a LoRA (> 0) not already active and all
    `max_loras` slots are taken (`>=` rather than vLLM's `==`, so that a set
    already over the cap also blocks)."""
    return adapter > 0 and adapter not in active and len(active) >= max_loras
