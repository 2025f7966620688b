"""Planted bugs: policies that are wrong on purpose, for checks that must catch them.

Each is a small subclass of a real gate that reintroduces one known mistake
in one of fair's mechanisms, or (`SkipFirstGate`, `OneAdmissionGate`) breaks
the scan a lemma of B_queue relies on; the test that uses it asserts that
the check it exercises fails on it.
"""

from __future__ import annotations

from lora_sched.policy.fair import FairGate, FairGuard, Waiting
from lora_sched.policy.gate import Decision


class LoraOnlyStarGuard(FairGuard):
    """Mechanism 1 (the oldest starving request goes first), as fair's first
    design had it: only a LoRA request can be r* (base-model requests never
    enter the age index), so a base-model request is never put first and a
    stream of later starving LoRA requests, each visited first, holds it back
    as long as the stream lasts."""

    def enqueue(self, w: Waiting) -> None:
        if w.adapter > 0:
            super().enqueue(w)
        else:  # counted as waiting, never a candidate for r*
            self._waiting[w.id] = (w.waiting_since, w.adapter)
            self.backlog[w.adapter] = self.backlog.get(w.adapter, 0) + 1


class LoraOnlyStarGate(FairGate):
    guard_class = LoraOnlyStarGuard


class UnboundedDrainGuard(FairGuard):
    """Mechanism 3 without its deadline: every request of the victim counts
    as ending in time, so a victim that keeps receiving requests never drains
    and r* waits as long as its stream lasts (as under `vllm`)."""

    def drains(self, adapter: int, left: int) -> bool:
        return True


class UnboundedDrainGate(FairGate):
    guard_class = UnboundedDrainGuard


class NotFirstGate(FairGate):
    """Mechanism 1 without its order: r* is chosen but the scan visits the
    queue in its own order, so requests ahead of r* are admitted first."""

    def scan_order(self, ctx, queue: list[str]) -> list[str]:
        super().scan_order(ctx, queue)
        return queue


class NoGapGuard(FairGuard):
    """Mechanism 1 without its gap: the next r* may be chosen the
    step after the last one was admitted."""

    def admitted(self, rid: str) -> None:
        star = self.star
        super().admitted(rid)
        if rid == star:
            self.cool_until = 0


class NoGapGate(FairGate):
    guard_class = NoGapGuard


class StepsWindowGate(FairGate):
    """S counted in steps, not prefill cadences: under a DP
    throttle of k the guard's threshold, gap and deadline slack are S steps,
    a k-th of what the rule allows, so r* is chosen again S steps after the
    last one got in."""

    def window(self, config) -> int:
        return config.starvation_steps


class LateChoiceGuard(FairGuard):
    """Mechanism 1 that lets every other scan pass without choosing r*, so a
    request that has waited S steps may wait past the gap with no guard."""

    def begin_scan(self, step: int, stale=lambda rid: False) -> str | None:
        if self.star is None and step % 2:
            self.step, self._held, self._late = step, set(), {}
            return None
        return super().begin_scan(step, stale)


class LateChoiceGate(FairGate):
    guard_class = LateChoiceGuard


class KeepLateVictimGuard(FairGuard):
    """Mechanism 3 without its drop: a victim that lets a late request in
    stays a victim, so while two victims remain each lets its own late
    requests in, neither slot frees by the deadline, and r* waits on both."""

    def admitted(self, rid: str) -> None:
        self._late.pop(rid, None)
        super().admitted(rid)


class KeepLateVictimGate(FairGate):
    guard_class = KeepLateVictimGuard


class NewestStarvingGuard(FairGuard):
    """Mechanism 1 choosing the newest request that has waited S steps, not
    the oldest, so a request that arrives after r can be put first while r
    waits (and one after another, without limit)."""

    def _oldest_starving(self, step: int, stale=lambda rid: False) -> str | None:
        cands = [(since, rid) for rid, (since, _a) in self._waiting.items()
                 if step - since >= self.window_steps and not stale(rid)]
        return max(cands)[1] if cands else None


class NewestStarvingGate(FairGate):
    guard_class = NewestStarvingGuard


class KeptOverUrgentGuard(FairGuard):
    """Mechanism 1 as v10 had it: r* stays r* until admitted even when a
    request of a more urgent priority starves, so under the priority queue
    the guard can give a freeing slot to the less urgent r*."""

    def _outranked(self, star: str, step: int, stale=lambda rid: False) -> bool:
        return False


class KeptOverUrgentGate(FairGate):
    guard_class = KeptOverUrgentGuard


class SkipFirstGate(FairGate):
    """A scan that skips the first request it visits (unless it is r* or
    alone in the queue), as a skip for a reason outside the LoRA cap would:
    requests behind it are admitted first, so the scan no longer admits a
    prefix of the queue where the cap cannot block (`queue_order`)."""

    def scan_order(self, ctx, queue: list[str]) -> list[str]:
        order = super().scan_order(ctx, queue)
        self._first = order[0] if len(order) > 1 and (self.guard is None or order[0] != self.guard.star) else None
        return order

    def decide(self, ctx, rid: str):
        if rid == self._first:
            return Decision.SKIP, "planted"
        return super().decide(ctx, rid)


class OneAdmissionGate(FairGate):
    """A scan that stops after its first admission, with seats and budget
    left: a step leaves a request waiting that nothing stops
    (`full_or_starved`)."""

    def scan_order(self, ctx, queue: list[str]) -> list[str]:
        self._admitted = False
        return super().scan_order(ctx, queue)

    def decide(self, ctx, rid: str):
        if self._admitted:
            return Decision.STOP, "planted"
        return super().decide(ctx, rid)

    def admitted(self, ctx, rid: str) -> None:
        self._admitted = True
        super().admitted(ctx, rid)
