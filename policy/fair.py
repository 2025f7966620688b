"""`fair`: vLLM's skip rule plus a starvation guard (this project's policy).

Rule. Each step, after the running requests are scheduled, let the *starving*
request r* be the first request in `waiting` order with a LoRA adapter not in
`scheduled_loras` that has waited at least `S = starvation_steps` steps (since
it arrived, or since it was last preempted). When r* exists the guard holds:

1. the scan visits r* first;
2. if the LoRA cap and capacity let r* in, it is admitted and the rest of the
   scan follows vLLM's rule;
3. if capacity stops r*, the scan stops (r* is first in line for the seat);
4. if the LoRA cap blocks r*, every LoRA request of another adapter is held
   (skipped) for the rest of the scan; base-model requests and requests of
   r*'s adapter are admitted as usual. No active adapter gains requests, so
   one drains and its slot goes to r*.

Bound. For FCFS, synchronous scheduling, unlimited KV and no externally
skipped running requests, every request is first admitted within

    B = S + A * (2 * D + 2) steps of arriving, with
    D = (P + L - 1) + floor((N - 1) * (P + L - 1) / T),

where A is the number of distinct LoRA adapters in the workload, P the largest
prompt, L the largest `max_tokens`, N = `max_num_seqs` and
T = `max_num_batched_tokens`. D bounds how long any request already running
stays running when no request is ever inserted ahead of it: each step it
either gets >= 1 of its <= P + L - 1 tokens, or the <= N - 1 requests ahead
of it spend the whole budget T. While the guard holds for r*, a slot frees
within D steps and a seat within D more (r* is visited first, so nobody takes
the seat), and every starving request ahead of r* (at most one per other
adapter) costs the same. `proofs/` checks the bound and reports the tight
worst case; `tests/` check it on random workloads.
"""

from __future__ import annotations

from policy.gate import Decision, ScanContext, cap_blocks
from spec.config import Config
from spec.properties import StepView
from spec.state import State


def starving_request(state: State, step: int, scheduled_loras: set[int]) -> str | None:
    """r*: first waiting LoRA request of an inactive adapter that waited >= S."""
    s = state.config.starvation_steps
    for rid in state.waiting:
        rs = state.reqs[rid]
        if (
            rs.req.adapter > 0
            and rs.req.adapter not in scheduled_loras
            and step - rs.waiting_since >= s
            and rs.stale == 0
        ):
            return rid
    return None


def fair_bound(config: Config, *, adapters: int, max_prompt: int, max_output: int) -> int:
    """B of the module docstring for a configuration and workload bounds."""
    work = max_prompt + max_output - 1
    drain = work + ((config.max_num_seqs - 1) * work) // config.max_num_batched_tokens
    return config.starvation_steps + adapters * (2 * drain + 2)


def guard_holds(state: State, rid: str, r_star: str | None, r_star_admitted: bool) -> bool:
    """True when the guard holds `rid` (rule 4): another adapter's LoRA request."""
    if r_star is None or r_star_admitted or rid == r_star:
        return False
    adapter = state.adapter(rid)
    return adapter > 0 and adapter != state.adapter(r_star)


class FairGate:
    name = "fair"

    def __init__(self) -> None:
        self.r_star: str | None = None
        self.r_star_admitted = False

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        self.r_star = starving_request(ctx.state, ctx.step, ctx.scheduled_loras)
        self.r_star_admitted = False
        if self.r_star is None:
            return queue
        return [self.r_star] + [r for r in queue if r != self.r_star]

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        if guard_holds(ctx.state, rid, self.r_star, self.r_star_admitted):
            return Decision.SKIP, "fair_guard"
        if cap_blocks(ctx, ctx.state.adapter(rid)):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        if rid == self.r_star:
            self.r_star_admitted = True


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Computed from the observed state alone (waiting order, waiting-since
    steps, adapters of the scheduled running requests), so a trace recorded
    from `fair` running inside vLLM is judged the same way as the reference.
    """

    def scan_first(self, view: StepView) -> str | None:
        rec = view.rec
        if rec.preempted:
            return None
        loras = {view.adapter[r] for r in rec.scheduled if r not in rec.admitted and view.adapter[r] > 0}
        for rid in rec.waiting:
            if (
                view.adapter[rid] > 0
                and view.adapter[rid] not in loras
                and rec.step - view.waiting_since[rid] >= view.config.starvation_steps
                and rid not in view.in_flight
            ):
                return rid
        return None

    def hold(self, view: StepView, rid: str) -> str | None:
        r_star = self.scan_first(view)
        if r_star is None or r_star in view.rec.admitted or rid == r_star:
            return None
        a = view.adapter[rid]
        return "fair_guard" if a > 0 and a != view.adapter[r_star] else None
