"""`fair_cohort` and `fair_drain`: prototypes of two changes to fair's guard (rule v3).

Not the shipped `fair` (the lead owns `policy/fair.py`): subclasses of
`policy.fair.FairGate` that change only what is said here, so that the
frontier (`bench.frontier`) can price each change before it is folded in.
Everything else is fair v3: the cap over every running request's adapter, r*
the oldest request that has waited S steps (any kind), sticky, visited
first, one victim adapter held while the cap blocks r*.

*Cohort* (`fair_cohort`, and `fair_drain`). Under v3, right after r* is
admitted the next r* is often blocked by the adapter r* just brought in
(with one LoRA slot, always): that adapter becomes the victim and its other
waiting requests are held, so each switch of the slot serves one request
and the seats run empty while the slot drains (issue 11's family: 0.44 of
vllm's throughput). The change: when r* is admitted, the requests of r*'s
adapter waiting at that moment form a *cohort*; the guard never holds a
cohort member (the cap and capacity still apply). A switch then serves the
adapter's whole queue, as vllm would, and later arrivals of it are held as
before.

*Drain admission* (`fair_drain` only). While a victim is held, its waiting
request r is still admitted when r's whole remaining work in tokens (prompt
or recompute still to compute, plus outputs still to produce, minus one) is
at most the number of outputs the victim's longest-running request still has
to produce. Each of those outputs needs a step, so r, given a token per step,
ends no later than the request the slot already waits for. A victim's
requests are admitted this way in queue order only (once one does not fit,
the later ones of that adapter wait too), so FIFO within an adapter holds.
SGLang's drainer (`policy.drainer`) admits within 1.2x of the remaining
tokens and does not count the prompt.

The bound. Neither change is proved to keep B = S + Qw (3D + 3): a cohort
member can be admitted after r arrived without being present when r
arrived, which the argument of `policy.fair` does not count (at most Q
cohorts of at most Q members each, so a B quadratic in Q holds). The state
machines assert fair's linear B on random runs for both gates, and the
adversarial search (`bench.adversarial`, objective `bound`) reports the worst
wait / B it finds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.policy.fair import FairGate, FairGuard
from lora_sched.policy.gate import Decision, ScanContext, running_loras
from lora_sched.spec.cap import cap_blocks


@dataclass
class CohortGuard(FairGuard):
    """fair's guard whose holds spare the cohorts of the r*s admitted."""

    cohort: set[str] = field(default_factory=set)

    def holds(self, rid: str, adapter: int) -> bool:
        return super().holds(rid, adapter) and rid not in self.cohort


class FairCohortGate(FairGate):
    name = "fair_cohort"
    guard_class = CohortGuard
    drain_admit = False

    def __init__(self) -> None:
        super().__init__()
        self._refused: set[int] = set()

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        self._refused = set()
        return super().scan_order(ctx, queue)

    def keep_held(self, ctx: ScanContext, rid: str, adapter: int) -> bool:
        if not self.drain_admit or adapter in self._refused or not self._fits_drain(ctx, rid):
            self._refused.add(adapter)  # later requests of `adapter` wait too: FIFO within it
            return True
        return False

    @staticmethod
    def _fits_drain(ctx: ScanContext, rid: str) -> bool:
        """`rid` ends before its adapter's longest-running request (module docstring)."""
        st = ctx.state
        a = st.adapter(rid)
        left = [st.reqs[r].req.max_tokens - st.reqs[r].generated for r in st.running if st.adapter(r) == a]
        if not left:
            return False
        rs = st.reqs[rid]
        return (rs.num_tokens - rs.computed) + (rs.req.max_tokens - rs.generated) - 1 <= max(left)

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        guard = self._guard(ctx)
        assert isinstance(guard, CohortGuard)
        guard.cohort.discard(rid)
        if rid == guard.star:
            st, a = ctx.state, ctx.state.adapter(rid)
            guard.cohort |= {r for r in st.waiting
                             if r != rid and st.adapter(r) == a and st.reqs[r].status == "waiting"}
        super().admitted(ctx, rid)


class FairDrainGate(FairCohortGate):
    name = "fair_drain"
    drain_admit = True


class FairLrwGate(FairDrainGate):
    """`fair_drain` whose victim is the slot-holding adapter with the least
    remaining work (its longest running request's tokens still to compute plus
    outputs still to produce), as SGLang's drainer picks the adapter with the
    fewest remaining tokens (`policy.drainer`), instead of the one that has
    held its slot longest. Any victim serves B's argument in `policy.fair`
    (a victim gains no request and leaves within D steps); the shortest one
    leaves first and idles the fewest seats."""

    name = "fair_lrw"

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        guard = self._guard(ctx)
        if rid == guard.star:
            active = running_loras(ctx)
            if cap_blocks(active, guard.star_adapter, guard.max_loras) and not (guard.victims & active):
                st = ctx.state

                def work(a: int) -> int:
                    return max(st.reqs[r].num_tokens - st.reqs[r].computed + st.reqs[r].req.max_tokens
                               - st.reqs[r].generated for r in st.running if st.adapter(r) == a)

                guard.victims.add(min(active, key=lambda a: (work(a), a)))
        return super().decide(ctx, rid)
