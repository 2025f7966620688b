"""`vtc`: the Virtual Token Counter (Sheng et al., OSDI'24) on vLLM's scheduler (a reference policy).

Source: Ying1123/VTC-artifact, `slora/server/router/vtc_req_queue.py` at
commit 14c19b70, a client being a LoRA adapter: the smallest-counter client
is served, charged input 1 and output 2 per token; the batch closes when its
head does not fit (here: vLLM's cap, `policy.gate.vllm_cap_blocks`);
`starvation_steps` is ignored. The rule line by line, and what fails:
docs/field.md, "The rules in detail".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, GateBase, ScanContext, vllm_cap_blocks

INPUT_PRICE = 1  # vtc_req_queue.py L17
OUTPUT_PRICE = 2


@dataclass
class VtcGate(GateBase):
    name = "vtc"
    served: dict[int, float] = field(default_factory=dict)  # client (adapter) -> virtual counter
    backlogged: set[int] = field(default_factory=set)  # clients with waiting requests after the last step
    charged: dict[str, int] = field(default_factory=dict)  # request -> output tokens already charged
    _admits: set[str] = field(default_factory=set)  # first admissions whose prompt is charged

    @property
    def remembers(self) -> set[str] | dict[str, int]:
        """Requests this gate still reads after they finish (their last outputs are charged at the next scan)."""
        return self.charged

    def _charge_outputs(self, ctx: ScanContext) -> None:
        """`update_counter` (L147-156): output_price per generated token."""
        st = ctx.state
        for rid in list(self.charged):
            rs = st.reqs[rid]
            delta = rs.generated - self.charged[rid]
            if delta:
                self.served[rs.req.adapter] = self.served.get(rs.req.adapter, 0) + OUTPUT_PRICE * delta
                self.charged[rid] = rs.generated
            if rs.status in ("finished", "aborted"):  # charged in full: forget it
                del self.charged[rid]
                self._admits.discard(rid)

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        st = ctx.state
        self._charge_outputs(ctx)
        queues: dict[int, list[str]] = {}
        for rid in queue:
            queues.setdefault(st.adapter(rid), []).append(rid)
        # append (L36-50): a client whose queue was empty is lifted to the
        # smallest counter of the other backlogged clients.
        seen = set(self.backlogged) & set(queues)
        for a in queues:
            if a not in self.backlogged:
                cnts = [self.served.get(k, 0) for k in seen if k != a]
                self.served[a] = max(self.served.get(a, 0), min(cnts)) if cnts else self.served.get(a, 0)
                seen.add(a)
        # generate_new_batch (L104-135): smallest counter first, charging each
        # visited request's prompt as if admitted (a request that is not
        # admitted stops the scan, as VTC's `break` does, so the order beyond
        # it never matters; the one exception is an async request whose
        # output is still in flight, which the core skips).
        counters = {a: self.served.get(a, 0) for a in queues}
        order: list[str] = []
        # The scan admits at most the free seats before it stops; stale async
        # requests are skipped on top: no request past that is ever visited.
        limit = st.config.max_num_seqs - len(st.running) + sum(1 for r in queue if st.reqs[r].stale) + 1
        while counters and len(order) < limit:
            a = min(counters, key=lambda c: (counters[c], c))
            if not queues[a]:
                del counters[a]
                continue
            rid = queues[a].pop(0)
            order.append(rid)
            if st.reqs[rid].first_admitted is None:
                counters[a] += INPUT_PRICE * st.reqs[rid].req.prompt_tokens
        return order

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        if vllm_cap_blocks(ctx, ctx.state.adapter(rid)):
            return Decision.STOP, "vtc_stop"
        return Decision.ADMIT, None

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        rs = ctx.state.reqs[rid]
        if rid not in self._admits:
            self._admits.add(rid)
            self.served[rs.req.adapter] = self.served.get(rs.req.adapter, 0) + INPUT_PRICE * rs.req.prompt_tokens
        self.charged.setdefault(rid, rs.generated)

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        self._charge_outputs(ctx)
        self.backlogged = {ctx.state.adapter(r) for r in ctx.state.waiting}
