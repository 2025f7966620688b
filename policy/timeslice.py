"""`timeslice`: LoRAX's adapter cycle on vLLM's scheduler (a reference policy).

Source: predibase/lorax `router/src/queue.rs` at commit e1067a06
(`AdapterQueuesState`; lines counted in that file): per-adapter FIFO queues;
`pending_adapters` and `active_adapters` (L146-171), at most
`max_active_adapters` active.

- `append` (L193-221): a request of an adapter that is not tracked puts the
  adapter at the tail of `pending_adapters`.
- `update_adapters` (L338-447), before each batch: an active adapter not in
  use (no running request) with an empty queue is removed while pending
  adapters outnumber those removed (L349-376); then the *front* active
  adapter, if not in use, active longer than `max_active_time`
  (`adapter_cycle_time_s`, default 2 s) and some adapter is pending, goes to
  the tail of `pending_adapters` (L378-394); then pending adapters are
  activated from the front until `max_active_adapters` are active, each
  stamped with the activation time (L409-444).
- `next_entry` / `get_oldest_active_adapter` (L299-335, L449-462): the next
  request is the head of the active adapter whose head is oldest, preferring
  adapters still within their time slice.

Mapping to this model. `max_active_adapters` = `max_loras`; the time slice is
in steps, `Config.starvation_steps`; "in use" = the adapter of a request in
`running`; adapter memory costs are not modelled (every adapter fits). The base
model (adapter 0) is always active and takes no slot (vLLM's cap), its queue
competing in `next_entry`'s oldest-head order. Requests of inactive adapters
are skipped; the active set already keeps the running adapters within
`max_loras`, and vLLM's cap (`policy.gate.vllm_cap_blocks`) is applied on top.

What follows from the rule (searched for in `tests/test_reference_gates.py`):
an adapter that is always in use is never cycled out (L384), so with a steady
stream for the active adapters a pending adapter waits without bound
(`bounded_wait` fails); requests of inactive adapters are held while the cap
would let them in (`no_hol_blocking` fails without declared holds).
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
