"""Reference admission policies over one shared vLLM scheduler core."""

from __future__ import annotations

from policy.blocking import BlockingGate
from policy.fair import FairGate
from policy.gate import Gate
from policy.vllm import VllmGate
from spec.config import Config

GATES = {"blocking": BlockingGate, "vllm": VllmGate, "fair": FairGate}


def claims(policy: str, config: Config) -> set[str]:
    """The properties `policy` claims under `config` (the README's table).

    `blocking` gives up `no_hol_blocking` (that is PR #15422's point); only
    `fair` claims `bounded_wait`; under async scheduling no policy claims
    `running_lora_cap`: a running request sure to finish is left unscheduled,
    its adapter is not counted, and another adapter can join while it is still
    in `running` (found by search, tests/test_search_violations.py).
    """
    claimed = {"batch_lora_cap", "capacity", "conservation", "fifo_within_adapter"}
    if not config.async_scheduling:
        claimed.add("running_lora_cap")
    if policy != "blocking":
        claimed.add("no_hol_blocking")
    if policy == "fair":
        claimed.add("bounded_wait")
    return claimed


def make_gate(name: str) -> Gate:
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(GATES)}") from None
