"""`vllm`: vLLM V1 since PR #15422 (vLLM 0.32, 0.33 and 0.34).

A waiting request whose adapter would exceed `max_loras` is skipped and the
scan goes on; skipped requests return to the head of `waiting` in their
original order. The cap counts adapters of running requests *scheduled this
step* (0.32; every running request on 0.33, `spec.releases`) plus those
admitted so far. Known defect: an adapter can starve while
the active adapters keep receiving requests (vLLM #16876, SGLang #15129).
"""

from __future__ import annotations

from lora_sched.policy.gate import Decision, GateBase, ScanContext
from lora_sched.spec.cap import cap_blocks

_SKIP = (Decision.SKIP, "lora_cap")
_ADMIT = (Decision.ADMIT, None)


class VllmGate(GateBase):
    name = "vllm"

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        # `gate.vllm_cap_blocks`, unfolded: the scan asks once per request it visits.
        st = ctx.state
        if cap_blocks(ctx.scheduled_loras, st.reqs[rid].req.adapter, st.config.max_loras):
            return _SKIP
        return _ADMIT
