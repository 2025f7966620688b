"""Reference admission policies over one shared vLLM scheduler core."""

from __future__ import annotations

from policy.blocking import BlockingGate
from policy.fair import FairGate
from policy.gate import Gate
from policy.vllm import VllmGate
from spec.config import POLICIES, Config

GATES = {"blocking": BlockingGate, "vllm": VllmGate, "fair": FairGate}
assert tuple(GATES) == POLICIES, "spec.config.POLICIES lists the policies, in this order"


def claims(policy: str, config: Config, *, skipped_running: bool = False) -> set[str]:
    """The properties `policy` claims under `config` (the README's table).

    - `blocking` gives up `no_hol_blocking` (that is PR #15422's point).
    - `blocking` and `vllm` count only the adapters of running requests
      *scheduled* this step. A running request left unscheduled lets another
      adapter in: under async scheduling (sure-to-finish requests) that breaks
      `running_lora_cap`; under DP prefill throttling
      (`prefill_schedule_interval > 1`) or an external skip
      (`skipped_running`), the next step schedules both and breaks
      `batch_lora_cap` (vLLM's assert). All found by search
      (tests/test_search_violations.py).
    - `fair` counts every running request's adapter, so it claims both caps
      everywhere, and `bounded_wait` (checked where `policy.fair.bound_applies`).
    """
    claimed = {"capacity", "conservation", "fifo_within_adapter"}
    unscheduled = skipped_running or config.prefill_schedule_interval > 1
    if policy == "fair":
        claimed |= {"batch_lora_cap", "running_lora_cap", "bounded_wait"}
    elif not unscheduled:
        claimed.add("batch_lora_cap")
        if not config.async_scheduling:
            claimed.add("running_lora_cap")
    if policy != "blocking":
        claimed.add("no_hol_blocking")
    return claimed


def make_gate(name: str) -> Gate:
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(GATES)}") from None
