"""`drainer`: SGLang's LoRADrainer on vLLM's scheduler (a reference policy).

Source: sglang PR #17913, `python/sglang/srt/lora/lora_drainer.py` at commit
5a7bdc11. When running adapters fill the slots, each starving adapter makes
the running adapter with the fewest `max_remaining_tokens` drain for it; a
draining adapter admits only requests with `max_tokens <= 1.2 *
max_remaining_tokens`, then vLLM's cap (`policy.gate.vllm_cap_blocks`). The
threshold is `Config.starvation_steps` steps. The rule line by line, and what
fails: docs/field.md, "The rules in detail".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, GateBase, ScanContext, vllm_cap_blocks

DRAIN_SCHEDULE_TOLERANCE = 1.2  # lora_drainer.py L25


@dataclass
class AdapterStats:
    """lora_drainer.py `AdapterStats` (L28-43), in steps."""

    num_waiting: int = 0
    max_wait: int = 0
    max_remaining_tokens: int = 0
    draining_for: int | None = None


@dataclass
class DrainerGate(GateBase):
    name = "drainer"
    stats: dict[int, AdapterStats] = field(default_factory=dict)

    def _stats(self, adapter: int) -> AdapterStats:
        return self.stats.setdefault(adapter, AdapterStats())

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        self.update_draining_state(ctx, queue)
        return queue

    def update_draining_state(self, ctx: ScanContext, queue: list[str]) -> None:
        """`LoRADrainer.update_draining_state` (L61-74)."""
        st, threshold, max_loras = ctx.state, ctx.state.config.starvation_steps, ctx.state.config.max_loras
        for s in self.stats.values():
            s.num_waiting, s.max_wait, s.max_remaining_tokens = 0, 0, 0
        for rid in queue:
            a = st.adapter(rid)
            if a == 0:
                continue
            s = self._stats(a)
            s.num_waiting += 1
            s.max_wait = max(s.max_wait, ctx.step - st.reqs[rid].waiting_since)
        for rid in st.running:
            a = st.adapter(rid)
            if a == 0:
                continue
            rs = st.reqs[rid]
            s = self._stats(a)
            s.max_remaining_tokens = max(s.max_remaining_tokens, rs.req.max_tokens - rs.generated)
        running = {st.adapter(r) for r in st.running if st.adapter(r) > 0}
        # _update_draining_loras (L101-157)
        if len(running) >= max_loras:
            starving = {a for a, s in self.stats.items() if s.max_wait > threshold and s.num_waiting > 0}
            drained_for = {s.draining_for for s in self.stats.values() if s.draining_for is not None}
            new = sorted(starving - drained_for, key=lambda a: (-self.stats[a].max_wait, a))
            eligible = {a for a in running if self._stats(a).draining_for is None}
            for a in new:
                if not eligible:
                    break
                victim = min(eligible, key=lambda v: (self.stats[v].max_remaining_tokens, v))
                self.stats[victim].draining_for = a
                eligible.remove(victim)
        # _update_fully_drained_loras (L159-173)
        for a, s in self.stats.items():
            if s.draining_for is not None and a not in running:
                s.draining_for = None

    def can_schedule(self, ctx: ScanContext, rid: str) -> bool:
        """`LoRADrainer.can_schedule` (L175-190)."""
        a = ctx.state.adapter(rid)
        s = self.stats.get(a)
        if a == 0 or s is None or s.draining_for is None:
            return True
        return ctx.state.reqs[rid].req.max_tokens <= s.max_remaining_tokens * DRAIN_SCHEDULE_TOLERANCE

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        if not self.can_schedule(ctx, rid):
            return Decision.SKIP, "drainer"
        if vllm_cap_blocks(ctx, ctx.state.adapter(rid)):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None
