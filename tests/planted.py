"""Planted bugs: policies that are wrong on purpose, for checks that must catch them.

Each is a small subclass of a real gate that reintroduces one known mistake;
the test that uses it asserts that the check it exercises fails on it.
"""

from __future__ import annotations

from lora_sched.policy.fair import FairGate, FairGuard, Waiting


class LoraOnlyStarGuard(FairGuard):
    """fair's first design: only a LoRA request can be r*, so a base-model
    request is never put first and a stream of later starving LoRA requests,
    each visited first, holds it back as long as the stream lasts."""

    def candidate(self, step: int, w: Waiting) -> bool:
        return w.adapter > 0 and super().candidate(step, w)


class LoraOnlyStarGate(FairGate):
    guard_class = LoraOnlyStarGuard


class UnpricedGuard(FairGuard):
    """fair without the age in its price: a victim's request is let in
    whatever r*'s age, so a victim that keeps receiving requests never drains
    and r* waits as long as its stream lasts (as under `vllm`)."""

    def priced(self, w: Waiting) -> bool:
        return True


class UngatedGuard(FairGuard):
    """fair v5's hold: what was waiting when r* was chosen is held like any
    later arrival, so under overload each switch splits the victim's queue
    and the rest runs after another switch (below 0.8 of vllm on
    `adv-fairv5-throughput-overload`)."""

    def gated(self, w: Waiting) -> bool:
        return False


class FreeSwitchGuard(FairGuard):
    """fair v5's hold: the switch itself is not priced, so a victim's short
    request is held as soon as its own price is paid and a long request of
    the victim that arrives next runs late and alone (the punished switch,
    below 0.8 of vllm on `adv-fairv5-throughput-mechanism`)."""

    def switch_unpaid(self) -> bool:
        return False


class SlotHoldersSwitchGuard(FairGuard):
    """fair's switch price counting only the requests holding a slot, not the
    waiting ones: a long waiting request of the victim, held behind a short
    one, runs alone at the end (below 0.8 of vllm on
    `adv-fairv5-throughput-waiting`)."""

    def visit_star(self, left: dict[int, int]) -> None:
        super().visit_star(left)
        self.longest = max(left.values(), default=0)


class UnpricedGate(FairGate):
    guard_class = UnpricedGuard


class UngatedGate(FairGate):
    guard_class = UngatedGuard


class FreeSwitchGate(FairGate):
    guard_class = FreeSwitchGuard


class SlotHoldersSwitchGate(FairGate):
    guard_class = SlotHoldersSwitchGuard
