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
    """fair v5 without the age in its price: a victim's request is let in
    whatever r*'s age, so a victim that keeps receiving requests never drains
    and r* waits as long as its stream lasts (as under `vllm`)."""

    def _admissible(self, w: Waiting) -> bool:
        return w.adapter in self.scan_deadline


class UnpricedGate(FairGate):
    guard_class = UnpricedGuard
