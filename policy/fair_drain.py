"""`fair_drain`: a prototype of fair's rule v3 plus drain-time admission.

Not the shipped `fair` (the lead owns `policy/fair.py`); a separate gate so
the frontier can price one change to fair's guard before it is folded in.

Fair v3 (the brief's rule, written out here):

- cap set C = adapters (> 0) of every request in `running` when the waiting
  scan starts (preempted ones removed), scheduled this step or not, plus the
  adapters admitted so far; a waiting request of adapter a > 0 is cap-blocked
  iff a is not in C and |C| >= max_loras;
- r* = among waiting requests that have waited >= S (`step - waiting_since`,
  S = `starvation_steps`) and have no stale async output, the one with the
  smallest (priority [priority queue only], waiting_since, arrival order);
  any request can be r*; r* stays r* until admitted;
- the scan visits r* first; if the cap blocks r* and no victim adapter is in
  C, the victim is the adapter in C whose current run in C started first
  (then the smallest id); every waiting request of a victim is held until r*
  is admitted, the others flow; a capacity stop at r* stops the scan (core).

The change measured here (`drain_admit`): while a victim is held, its waiting
request r is still admitted when r's whole remaining work, counted in tokens
(prompt or recompute still to compute, plus outputs still to produce, minus
one), is at most the number of outputs the victim's longest-running request
still has to produce. Each of those outputs needs a step of its own, so r,
given a token per step, ends no later than the request the slot already waits
for, and the held adapter keeps its seats busy while it drains instead of
emptying them one by one (SGLang's drainer admits requests within 1.2x of the
remaining tokens, `policy.drainer`; this rule uses 1.0x and counts the prompt,
and admits a victim's requests in queue order only: once one does not fit,
the later ones of that adapter wait too, so FIFO within an adapter holds).
Whether fair's bound B survives is checked, not assumed: the state machines
assert B on random workloads for this gate too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policy.gate import Decision, ScanContext


@dataclass
class FairDrainGate:
    name = "fair_drain"
    drain_admit: bool = True
    cohort_admit: bool = True
    star: str | None = None
    victims: set[int] = field(default_factory=set)
    active_since: dict[int, int] = field(default_factory=dict)  # adapter -> first step of its run in C
    _refused: set[int] = field(default_factory=set)  # victims whose queue head did not fit this scan
    cohort: set[str] = field(default_factory=set)  # waiting with r*'s adapter when r* got in: never held
    _c: set[int] = field(default_factory=set)  # the cap set C during a scan

    def _key(self, ctx: ScanContext, rid: str) -> tuple[int, int, int]:
        rs = ctx.state.reqs[rid]
        prio = rs.req.priority if ctx.state.config.queue == "priority" else 0
        return (prio, rs.waiting_since, rs.seq)

    def scan_order(self, ctx: ScanContext, queue: list[str]) -> list[str]:
        st, s = ctx.state, ctx.state.config.starvation_steps
        self._refused = set()
        self._c = self._cap_set(ctx)  # C when the scan starts; admissions add to it
        if self.star is not None and self.star not in queue:
            if st.reqs[self.star].status != "running":  # aborted or finished while waiting
                self.star, self.victims = None, set()
        if self.star is None:
            ready = [r for r in queue if ctx.step - st.reqs[r].waiting_since >= s and st.reqs[r].stale == 0]
            if ready:
                self.star = min(ready, key=lambda r: self._key(ctx, r))
                self.victims = set()
        if self.star is None or self.star not in queue:
            return queue
        return [self.star] + [r for r in queue if r != self.star]

    @staticmethod
    def _cap_set(ctx: ScanContext) -> set[int]:
        st = ctx.state
        return {st.adapter(r) for r in st.running if st.adapter(r) > 0}

    def _blocked(self, ctx: ScanContext, adapter: int) -> bool:
        c = self._c
        return adapter > 0 and adapter not in c and len(c) >= ctx.state.config.max_loras

    def _fits_drain(self, ctx: ScanContext, rid: str) -> bool:
        """r ends before the victim's longest-running request (module docstring)."""
        st = ctx.state
        a = st.adapter(rid)
        left = [st.reqs[r].req.max_tokens - st.reqs[r].generated for r in st.running if st.adapter(r) == a]
        if not left:
            return False
        rs = st.reqs[rid]
        work = (rs.num_tokens - rs.computed) + (rs.req.max_tokens - rs.generated) - 1
        return work <= max(left)

    def decide(self, ctx: ScanContext, rid: str) -> tuple[Decision, str | None]:
        a = ctx.state.adapter(rid)
        if rid == self.star and self._blocked(ctx, a):
            c = self._c
            if not (self.victims & c):
                self.victims.add(min(c, key=lambda v: (self.active_since.get(v, ctx.step), v)))
        if self.star is not None and rid != self.star and a in self.victims and rid not in self.cohort:
            if not self.drain_admit or a in self._refused or not self._fits_drain(ctx, rid):
                self._refused.add(a)  # later requests of `a` wait too: FIFO within the adapter
                return Decision.SKIP, "fair_guard"
        if self._blocked(ctx, a):
            return Decision.SKIP, "lora_cap"
        return Decision.ADMIT, None

    def admitted(self, ctx: ScanContext, rid: str) -> None:
        if ctx.state.adapter(rid) > 0:
            self._c.add(ctx.state.adapter(rid))
        self.cohort.discard(rid)
        if rid == self.star:
            self.star, self.victims = None, set()
            if self.cohort_admit:
                st, a = ctx.state, ctx.state.adapter(rid)
                if a > 0:
                    self.cohort |= {r for r in st.waiting if st.adapter(r) == a and st.reqs[r].status == "waiting"}

    def step_done(self, ctx: ScanContext, batch_loras: set[int]) -> None:
        c = self._cap_set(ctx)
        self.active_since = {a: self.active_since.get(a, ctx.step) for a in c}


class FairV3Gate(FairDrainGate):
    """Fair rule v3 alone (both changes off): the baseline the changes are priced against."""

    name = "fair_v3"

    def __init__(self) -> None:
        super().__init__(drain_admit=False, cohort_admit=False)


class FairCohortGate(FairDrainGate):
    """v3 plus the cohort change only."""

    name = "fair_cohort"

    def __init__(self) -> None:
        super().__init__(drain_admit=False, cohort_admit=True)
