"""`fair`: vLLM's skip rule plus a starvation guard (this project's policy).

Rule. Each step, after the running requests are scheduled, let the *starving*
request r* be the first request in `waiting` order with a LoRA adapter not in
`scheduled_loras` that has waited at least `S = starvation_steps` steps (since
it arrived, or since it was last preempted). When r* exists the guard holds:

1. the scan visits r* first;
2. if the LoRA cap and capacity let r* in, it is admitted and the rest of the
   scan follows vLLM's rule;
3. if capacity stops r*, the scan stops (r* is first in line for the seat);
4. if the LoRA cap blocks r*, LoRA requests of other adapters are held
   (skipped) for the rest of the scan: those *younger* than r* (arrived at a
   later step) once r* has waited S, all of them once it has waited 2S.
   Base-model requests and requests of r*'s adapter go in as usual.

The first level is DESIGN's rule ("stop admitting younger requests of the
active adapters"): it is cheap, because requests that arrived with or before
r* keep flowing, and it frees a slot as soon as those drain. It does not
bound the wait by the configuration alone (the older requests can be many),
and holding *every* other adapter from the first step of the guard cascades:
right after r* gets in, the next starving request holds r*'s own adapter, and
adapters then enter one request at a time (measured in `bench/`: throughput
fell to 0.27 of `vllm` on the seed workload). The second level, at 2S, is the
backstop that makes the bound below independent of the queue length.

Bound. For FCFS, synchronous scheduling, unlimited KV and no externally
skipped running requests, every request is first admitted within

    B = 2 * S + A * (2 * D + 2) steps of arriving, with
    D = (P + L - 1) + floor((N - 1) * (P + L - 1) / T),

where A is the number of distinct LoRA adapters in the workload, P the largest
prompt, L the largest `max_tokens`, N = `max_num_seqs` and
T = `max_num_batched_tokens`. D bounds how long any request already running
stays running when no request is inserted ahead of it (admissions append to
`running`; there is no preemption without a KV limit): each step it either
gets >= 1 of its <= P + L - 1 tokens, or the <= N - 1 requests ahead of it
spend the whole budget T. Once a request r has waited 2S, every candidate
ahead of it in FCFS order has waited at least as long, so each guard ahead of
r, and r's own, is at the second level: no other adapter gains a request, a
slot frees within D steps, and r* (visited first) gets a seat within D more.
At most one guard per adapter precedes r's. `proofs/` checks the bound and
reports the tight worst case; `tests/` check it on random workloads.
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
    return 2 * config.starvation_steps + adapters * (2 * drain + 2)


def guard_holds(
    *, adapter: int, arrival: int, star_adapter: int, star_arrival: int, star_waited: int, s: int
) -> bool:
    """Rule 4: does the guard for r* hold a request of `adapter` that arrived at `arrival`?"""
    if adapter == 0 or adapter == star_adapter:
        return False
    return star_waited >= 2 * s or arrival > star_arrival


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
        st, star = ctx.state, self.r_star
        if star is not None and not self.r_star_admitted and rid != star and guard_holds(
            adapter=st.adapter(rid), arrival=st.reqs[rid].req.arrival, star_adapter=st.adapter(star),
            star_arrival=st.reqs[star].req.arrival, star_waited=ctx.step - st.reqs[star].waiting_since,
            s=st.config.starvation_steps,
        ):
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
        star = self.scan_first(view)
        if star is None or star in view.rec.admitted or rid == star:
            return None
        held = guard_holds(
            adapter=view.adapter[rid], arrival=view.arrival[rid], star_adapter=view.adapter[star],
            star_arrival=view.arrival[star], star_waited=view.rec.step - view.waiting_since[star],
            s=view.config.starvation_steps,
        )
        return "fair_guard" if held else None
