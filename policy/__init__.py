"""Reference admission policies over one shared vLLM scheduler core."""

from __future__ import annotations

from policy.blocking import BlockingGate
from policy.drainer import DrainerGate
from policy.fair import FairGate
from policy.fair_drain import FairCohortGate, FairDrainGate, FairV3Gate
from policy.gate import Gate
from policy.timeslice import TimesliceGate
from policy.vllm import VllmGate
from policy.vtc import VtcGate
from spec.config import Config

GATES = {"blocking": BlockingGate, "vllm": VllmGate, "fair": FairGate}
# The field's policies (reference gates) and the fair prototypes priced on the frontier.
GATES.update({"drainer": DrainerGate, "timeslice": TimesliceGate, "vtc": VtcGate,
              "fair_v3": FairV3Gate, "fair_cohort": FairCohortGate, "fair_drain": FairDrainGate})
# Gates that hold requests on purpose without trace-level declared holds
# (spec.properties.PolicyHolds): they do not claim no_hol_blocking.
UNDECLARED_HOLDS = {"drainer", "timeslice", "vtc", "fair_v3", "fair_cohort", "fair_drain"}


def claims(policy: str, config: Config) -> set[str]:
    """The properties `policy` claims under `config` (the README's table).

    `blocking` gives up `no_hol_blocking` (that is PR #15422's point); only
    `fair` claims `bounded_wait`; under async scheduling no policy claims
    `running_lora_cap`: a running request sure to finish is left unscheduled,
    its adapter is not counted, and another adapter can join while it is still
    in `running` (found by search, tests/test_search_violations.py).

    The reference gates (tests/test_reference_gates.py): `drainer` gives up
    `fifo_within_adapter` (its 1.2x tolerance admits a short request of a
    draining adapter past a long one) and, with `timeslice` and `vtc`,
    `no_hol_blocking`; `fair_v3` and `fair_drain` claim `bounded_wait` (fair's
    B), `drainer` and `timeslice` are shown to starve.
    """
    claimed = {"batch_lora_cap", "capacity", "conservation", "fifo_within_adapter"}
    if not config.async_scheduling:
        claimed.add("running_lora_cap")
    if policy != "blocking" and policy not in UNDECLARED_HOLDS:
        claimed.add("no_hol_blocking")
    if policy in ("fair", "fair_v3", "fair_cohort", "fair_drain"):
        claimed.add("bounded_wait")
    if policy == "drainer":
        claimed.discard("fifo_within_adapter")
    return claimed


def make_gate(name: str) -> Gate:
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(GATES)}") from None
