"""`drainer`: SGLang's LoRADrainer on vLLM's scheduler (a reference policy).

Source: sglang PR #17913, `python/sglang/srt/lora/lora_drainer.py` at commit
5a7bdc11 (lines counted in that file), called from
`Scheduler._can_schedule_lora_req` in `python/sglang/srt/managers/scheduler.py`
before the adapter-capacity check (a request the drainer refuses is skipped).

Rule, per waiting scan (`update_draining_state`, L61-74, runs first):

1. stats (L76-99): per adapter, the longest wait of its waiting requests and
   `max_remaining_tokens` = max over its *running* requests of
   `max_tokens - generated`;
2. (L101-157) only when the running requests' adapters fill the slots
   (`len(running_adapter_ids) < max_loras_per_batch: return`, L110): every
   adapter whose longest wait exceeds the threshold (`is_starving`, L40-43:
   strictly greater, and it has a waiting request) and that no adapter drains
   for yet is *starving*; most-waited first, each takes the running adapter
   with the fewest `max_remaining_tokens` among those not draining already and
   marks it draining for itself (L139-157);
3. (L159-173) a draining adapter with no running request is cleared;
4. `can_schedule` (L175-190): a request of a draining adapter is admitted only
   if `max_tokens <= 1.2 * max_remaining_tokens` of that adapter
   (`DRAIN_SCHEDULE_TOLERANCE`, L25); anything else goes to the LoRA cap as usual.

Mapping to this model. SGLang's threshold is seconds (`max_wait_time_secs`);
here it is steps, `Config.starvation_steps` (waited = step - waiting_since).
The base model (adapter 0; SGLang's `lora_id None`) neither occupies a slot nor
starves, as in vLLM's cap. The cap itself is vLLM's (`policy.gate.vllm_cap_blocks`);
the drainer's stats see every running request, scheduled this step or not, as
SGLang's `running_reqs` do.

What follows from the rule (searched for in `tests/test_reference_gates.py`):
the tolerance lets a short request of a draining adapter pass a long one
queued before it (`fifo_within_adapter` fails); an adapter whose new requests
keep fitting 1.2x of its remaining tokens never drains, so a starving request
can wait without bound (`bounded_wait` fails).
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
