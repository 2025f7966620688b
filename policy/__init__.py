"""Reference admission policies over one shared vLLM scheduler core."""

from __future__ import annotations

from policy.blocking import BlockingGate
from policy.fair import FairGate
from policy.gate import Gate
from policy.vllm import VllmGate

GATES = {"blocking": BlockingGate, "vllm": VllmGate, "fair": FairGate}


def make_gate(name: str) -> Gate:
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(GATES)}") from None
