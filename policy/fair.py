"""`fair`: vLLM's skip rule plus a starvation guard (this project's policy).

Rule. Each step, after the running requests are scheduled, let the *starving*
request r* be the first request in `waiting` order with a LoRA adapter not in
`scheduled_loras` that has waited at least `S = starvation_steps` steps (since
it arrived, or since it was last preempted). When r* exists:

1. the scan visits r* first;
2. if the LoRA cap and capacity let r* in, it is admitted and the rest of the
   scan follows vLLM's rule;
3. if capacity stops r*, the scan stops (r* is first in line for the seat);
4. if the LoRA cap blocks r*, the guard picks a *victim*: the adapter in the
   batch that has been active longest (then the smallest id), and holds every
   waiting request of it until r* is admitted. The other adapters keep
   flowing. A new victim is added only when r* is cap-blocked again and no
   victim is in the batch.

Why one victim. Holding *every* other adapter (the first version) cascades:
right after r* gets in, the next starving request holds r*'s own adapter and
adapters enter one request at a time; `bench/` measured 0.27 of `vllm`'s
throughput on the seed workload. Holding only the requests younger than r*
(DESIGN's wording) is cheap but leaves the wait bounded by the queue length,
not the configuration. Draining one adapter, the one that has had its slot
longest, is all it takes to free a slot (as SGLang's LoRADrainer drains one
adapter, and LoRAX rotates adapters by time slice), and the batch stays full
with the others meanwhile.

Bound. For FCFS, synchronous scheduling, unlimited KV and no externally
skipped running requests, every request is first admitted within

    B = S + (Q + 1) * (2 * D + 2) steps of arriving, with
    D = (P + L - 1) + floor((N - 1) * (P + L - 1) / T),

where Q is the most requests present (waiting or running) at any step, P the
largest prompt, L the largest `max_tokens`, N = `max_num_seqs` and
T = `max_num_batched_tokens`. No bound can avoid Q: with one seat, FCFS makes
a request wait for every request ahead of it. D bounds how long any request
already running stays running when no request is inserted ahead of it
(admissions append to `running`; there is no preemption without a KV limit):
each step it either gets >= 1 of its <= P + L - 1 tokens, or the <= N - 1
requests ahead of it spend the whole budget T. A guard completes within
2D + 2 steps: the victims gain no request, so one leaves the batch within D
steps; no admission can refill the slot before r* (r* is visited first, a
capacity stop ends the scan, and r* stays r* until admitted), and r* gets a
seat within D more. Once a request r has waited S, every window of 2D + 2
steps admits r or a request that was present when r arrived (a guard's r* is
r or ahead of r, or it completes; a capacity stop lets only requests ahead of
r in), and at most Q - 1 were present. The argument is checked, not trusted:
`proofs/` checks B and reports the tight worst case, `tests/` check it on
random workloads (measured worst wait / B: 0.26 over 3000 random runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from policy.gate import Decision, ScanContext, cap_blocks
from spec.config import Config
from spec.properties import StepView
from spec.request import Request


@dataclass(frozen=True)
class Waiting:
    """A waiting request as the guard sees it."""

    id: str
    adapter: int
    waiting_since: int
    stale: bool = False


@dataclass
class FairGuard:
    """The guard's decisions and memory, on plain data.

    One object serves the reference gate, `fair` inside vLLM
    (`conformance.policies`) and the trace checker (`FairHolds`), so the three
    cannot drift apart.
    """

    starvation_steps: int
    max_loras: int
    active_since: dict[int, int] = field(default_factory=dict)  # adapter -> first step of its run in the batch
    star: str | None = None  # r*, kept from step to step until admitted
    star_adapter: int = 0
    victims: set[int] = field(default_factory=set)  # adapters held for `_victims_for`
    _victims_for: str | None = None

    def begin_scan(self, step: int, waiting: list[Waiting], scheduled_loras: set[int]) -> str | None:
        """Find r* (rule 1) when a waiting scan starts; returns it or None."""
        by_id = {w.id: w for w in waiting}
        if self.star in by_id and not by_id[self.star].stale:
            return self.star  # r* is sticky until admitted: a guard always completes
        self.star = None
        for w in waiting:
            if (
                w.adapter > 0
                and w.adapter not in scheduled_loras
                and step - w.waiting_since >= self.starvation_steps
                and not w.stale
            ):
                self.star, self.star_adapter = w.id, w.adapter
                break
        if self.star != self._victims_for:
            self.victims, self._victims_for = set(), self.star
        return self.star

    def visit_star(self, scheduled_loras: set[int]) -> None:
        """The scan reached r* (it has a seat and budget): pick a victim if the cap blocks it (rule 4)."""
        cap_blocked = (
            self.star_adapter not in scheduled_loras and len(scheduled_loras) >= self.max_loras
        )
        if cap_blocked and not (self.victims & scheduled_loras):
            victim = min(scheduled_loras, key=lambda a: (self.active_since.get(a, 0), a))
            self.victims.add(victim)

    def holds(self, rid: str, adapter: int) -> bool:
        """Is `rid` held for r* (rule 4)?"""
        return self.star is not None and rid != self.star and adapter in self.victims

    def admitted(self, rid: str) -> None:
        if rid == self.star:
            self.star = None
            self.victims, self._victims_for = set(), None

    def end_step(self, step: int, batch_loras: set[int]) -> None:
        """Every step, scan or not: remember since when each adapter is in the batch."""
        self.active_since = {a: self.active_since.get(a, step) for a in batch_loras}


def fair_bound(config: Config, *, queue: int, max_prompt: int, max_output: int) -> int:
    """B of the module docstring for a configuration and workload bounds."""
    work = max_prompt + max_output - 1
    drain = work + ((config.max_num_seqs - 1) * work) // config.max_num_batched_tokens
    return config.starvation_steps + (queue + 1) * (2 * drain + 2)


def workload_bound(config: Config, requests: Iterable[Request], *, queue: int | None = None) -> int:
    """B for a workload; Q defaults to its number of requests (a safe upper
    bound on how many are ever present at once; pass the observed peak for a
    tighter B)."""
    reqs = list(requests)
    return fair_bound(config, queue=len(reqs) if queue is None else queue,
                      max_prompt=max(r.prompt_tokens for r in reqs),
                      max_output=max(r.max_tokens for r in reqs))


class FairGate:
    name = "fair"

    def __init__(self) -> None:
        self.guard: FairGuard | None = None

    def _guard(self, ctx: ScanContext) -> FairGuard:
        if self.guard is None:
            cfg = ctx.state.config
            self.guard = FairGuard(cfg.starvation_steps, cfg.max_loras)
        return self.guard

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        st = ctx.state
        waiting = [Waiting(r, st.adapter(r), st.reqs[r].waiting_since, st.reqs[r].stale > 0) for r in queue]
        star = self._guard(ctx).begin_scan(ctx.step, waiting, ctx.scheduled_loras)
        if star is None:
            return queue
        return [star] + [r for r in queue if r != star]

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        guard = self._guard(ctx)
        if rid == guard.star:
            guard.visit_star(ctx.scheduled_loras)
        if guard.holds(rid, ctx.state.adapter(rid)):
            return Decision.SKIP, "fair_guard"
        if cap_blocks(ctx, ctx.state.adapter(rid)):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        self._guard(ctx).admitted(rid)

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        self._guard(ctx).end_step(ctx.step, batch_loras)


class FairHolds:
    """The guard's holds as `spec.properties.no_hol_blocking` sees them on a trace.

    Replays `FairGuard` on the observed state alone (waiting order,
    waiting-since steps, adapters of the scheduled requests), so a trace
    recorded from `fair` inside vLLM is judged the same way as the reference.
    """

    def __init__(self, config: Config) -> None:
        self.guard = FairGuard(config.starvation_steps, config.max_loras)

    def begin(self, view: StepView) -> str | None:
        rec, cfg = view.rec, view.config
        loras = {view.adapter[r] for r in rec.scheduled if r not in rec.admitted and view.adapter[r] > 0}
        waiting = [Waiting(r, view.adapter[r], view.waiting_since[r], r in view.in_flight) for r in rec.waiting]
        star = self.guard.begin_scan(rec.step, waiting, loras)
        budget = cfg.max_num_batched_tokens - sum(n for r, n in rec.scheduled.items() if r not in rec.admitted)
        if star is not None and budget > 0 and len(rec.running) < cfg.max_num_seqs:
            self.guard.visit_star(loras)
        if star is not None and star in rec.admitted:
            self.guard.admitted(star)
        return star

    def hold(self, view: StepView, rid: str) -> str | None:
        return "fair_guard" if self.guard.holds(rid, view.adapter[rid]) else None

    def end(self, view: StepView) -> None:
        rec = view.rec
        self.guard.end_step(rec.step, {view.adapter[r] for r in rec.scheduled if view.adapter[r] > 0})
