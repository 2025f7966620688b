"""`timeslice`: LoRAX's adapter cycle on vLLM's scheduler (a reference policy).

Source: predibase/lorax `router/src/queue.rs` at commit e1067a06: per-adapter
FIFO queues, at most `max_loras` adapters active, each active one sent back
to pending after its slice (`Config.starvation_steps` steps) when not in use;
requests of inactive adapters are skipped, and vLLM's cap
(`policy.gate.vllm_cap_blocks`) applies on top. The rule line by line, and
what fails: docs/field.md, "The rules in detail".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, GateBase, ScanContext, vllm_cap_blocks


@dataclass
class TimesliceGate(GateBase):
    name = "timeslice"
    pending: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)
    activated: dict[int, int] = field(default_factory=dict)  # adapter -> step it was activated

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        st = ctx.state
        queues: dict[int, list[str]] = {}
        for rid in queue:
            queues.setdefault(st.adapter(rid), []).append(rid)
        tracked = set(self.pending) | set(self.active)
        for rid in queue:  # append (L210-213): untracked adapters join the pending tail
            a = st.adapter(rid)
            if a > 0 and a not in tracked:
                self.pending.append(a)
                tracked.add(a)
        self.update_adapters(ctx, queues)
        return self.next_entries(ctx, queues, queue)

    def update_adapters(self, ctx: ScanContext, queues: dict[int, list[str]]) -> None:
        """`AdapterQueuesState::update_adapters` (L338-447)."""
        st, step = ctx.state, ctx.step
        in_use = {st.adapter(r) for r in st.running}
        remove: set[int] = set()
        for a in self.active:
            if a in in_use:
                continue
            if len(self.pending) <= len(remove):
                continue
            if not queues.get(a):
                remove.add(a)
        self.active = [a for a in self.active if a not in remove]
        if self.active:
            a = self.active[0]
            if (a not in in_use and step - self.activated[a] > st.config.starvation_steps
                    and len(self.pending) >= 1):
                self.active.pop(0)
                self.pending.append(a)
        while len(self.active) < st.config.max_loras and self.pending:
            a = self.pending.pop(0)
            self.activated[a] = step
            self.active.append(a)

    def next_entries(self, ctx: ScanContext, queues: dict[int, list[str]], queue: list[str]) -> list[str]:
        """Repeated `next_entry` (L449-462): the active queues' heads, oldest first,
        preferring adapters within their slice; then the rest (they will be skipped)."""
        st, step, limit = ctx.state, ctx.step, ctx.state.config.starvation_steps
        heads = {a: list(queues.get(a, [])) for a in [0, *self.active]}
        order: list[str] = []

        def key(a: int) -> tuple[int, int]:
            head = st.reqs[heads[a][0]]
            return (head.waiting_since, head.seq)

        while True:
            live = [a for a in heads if heads[a]]
            if not live:
                break
            within = [a for a in live if a == 0 or step - self.activated[a] < limit]
            a = min(within or live, key=key)
            order.append(heads[a].pop(0))
        chosen = set(order)
        return order + [r for r in queue if r not in chosen]

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        a = ctx.state.adapter(rid)
        if a > 0 and a not in self.active:
            return Decision.SKIP, "timeslice"
        if vllm_cap_blocks(ctx, a):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None
