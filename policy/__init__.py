"""Reference admission policies over one shared vLLM scheduler core."""

from __future__ import annotations

from lora_sched.policy.blocking import BlockingGate
from lora_sched.policy.drainer import DrainerGate
from lora_sched.policy.fair import FairGate
from lora_sched.policy.gate import Gate
from lora_sched.policy.timeslice import TimesliceGate
from lora_sched.policy.vllm import VllmGate
from lora_sched.policy.vtc import VtcGate
from lora_sched.spec import releases
from lora_sched.spec.config import POLICIES, REFERENCE_POLICIES, Config

GATES = {"blocking": BlockingGate, "vllm": VllmGate, "fair": FairGate,
         # the field's policies as references, priced against fair on the frontier
         "drainer": DrainerGate, "timeslice": TimesliceGate, "vtc": VtcGate}
# Gates that hold requests on purpose without declaring those holds on a
# trace (spec.properties.PolicyHolds): they do not claim no_hol_blocking.
UNDECLARED_HOLDS = {"drainer", "timeslice", "vtc"}
FAIR_CAP = {"fair"}  # cap over every running request's adapter
# Gates whose own rule bounds the adapters of every running request, scheduled
# or not: timeslice admits only active adapters and never deactivates one in
# use (proved for any size in proofs.unbounded, model timeslice+skip).
EVERY_RUNNING_CAP = FAIR_CAP | {"timeslice"}
assert tuple(GATES) == POLICIES + REFERENCE_POLICIES, "spec.config lists the policies, in this order"


def claims(policy: str, config: Config, *, skipped_running: bool = False) -> set[str]:
    """The properties `policy` claims under `config` (the README's table),
    on the vLLM release `config.vllm` names.

    - `blocking` gives up `no_hol_blocking` (that is PR #15422's point).
    - `blocking` and `vllm` count only the adapters of running requests
      *scheduled* this step. A running request left unscheduled lets another
      adapter in: under async scheduling (sure-to-finish requests) that breaks
      `running_lora_cap`; under DP prefill throttling
      (`prefill_schedule_interval > 1`) or an external skip
      (`skipped_running`), the next step schedules both and breaks
      `batch_lora_cap` (vLLM's assert). All found by search
      (tests/test_search_violations.py).
    - On a release whose cap counts every running request (`spec.releases`,
      `cap_counts == "running"`: 0.33), vLLM's own set holds every running
      adapter, so every policy's cap (vLLM's or its own) bounds them and all
      of them claim both caps everywhere: async, throttle and skips included
      (proved for any size: `proofs.unbounded`, models vllm+skip@0.33 and
      blocking+skip@0.33; tests/test_releases.py).
    - `fair` counts every running request's adapter, so it claims both caps
      everywhere, and `bounded_wait` (checked where `policy.bound.bound_applies`).
    - The reference gates (tests/test_reference_gates.py) keep vLLM's cap;
      `timeslice` also claims both caps everywhere: at most `max_loras`
      adapters are active and an adapter in use is never deactivated, so
      every running request's adapter is one of them (proved for any size,
      `proofs.unbounded`, model timeslice+skip); `drainer` gives up
      `fifo_within_adapter` (its 1.2x tolerance admits a short request of a
      draining adapter past a long one); `drainer`, `timeslice` and `vtc`
      give up `no_hol_blocking`, and `drainer` and `timeslice` are shown to
      starve.
    """
    claimed = {"capacity", "conservation", "fifo_within_adapter"}
    unscheduled = skipped_running or config.prefill_schedule_interval > 1
    if policy in EVERY_RUNNING_CAP or releases.get(config.vllm).cap_counts == "running":
        claimed |= {"batch_lora_cap", "running_lora_cap"}
        if policy in FAIR_CAP:
            claimed.add("bounded_wait")
    elif not unscheduled:
        claimed.add("batch_lora_cap")
        if not config.async_scheduling:
            claimed.add("running_lora_cap")
    if policy != "blocking" and policy not in UNDECLARED_HOLDS:
        claimed.add("no_hol_blocking")
    if policy == "drainer":
        claimed.discard("fifo_within_adapter")
    return claimed


def make_gate(name: str) -> Gate:
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(GATES)}") from None
