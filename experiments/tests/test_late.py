"""`experiments.late`: the reasons a request waited, step by step, as the scan gave them.

One slot (max_loras 1): `long` (adapter 1, 12 outputs) runs from the first
step, `b` (adapter 2) arrives with it, `long2` (adapter 1, 30 outputs) at
step 3. vllm keeps adapter 1's slot busy: it admits `long2` at once and
`b` waits for the slot to drain. fair at S = 2 makes `b` r* (from step 3),
adapter 1 its victim, and holds `long2` (late: 30 outputs cannot end by
the deadline) until `b` is in; the oracle, told `long2` and step 3,
starts it then and makes `b` wait. Each count is checked against what
the scenario forces, not against the module's own arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from lora_sched.bench import realistic as R
from lora_sched.bench.simulate import simulate_policy
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

from experiments.late import StarLog, late_start, oracle_gate, waiting_reasons

REQS = [Request("long", 1, 4, 12, 0), Request("b", 2, 4, 1, 0), Request("long2", 1, 4, 30, 3)]


def _fair(s: int):
    gate = StarLog()
    run = simulate_policy(Config(max_loras=1, policy="fair", starvation_steps=s), REQS, "fair", gate=gate)
    return run.result, gate


def test_a_cap_blocked_request_waits_on_the_cap_every_step():
    vllm = simulate_policy(Config(max_loras=1), REQS, "vllm").result
    first = {k: rs.first_admitted for k, rs in vllm.scheduler.state.reqs.items()}
    assert first["long2"] == 3  # vllm: adapter 1 holds the slot, so long2 goes straight in ...
    assert first["b"] > first["long"] + 12  # ... and b waits until both of adapter 1's have drained
    result, gate = _fair(16)
    start = result.records[0].step
    b = result.scheduler.state.reqs["b"].first_admitted
    assert dict(waiting_reasons(result, "b")) == {"lora_cap": b - start}
    assert waiting_reasons(result, "long") == {}  # admitted on the first step: never waited
    stars = [s for s, r in gate.stars.items() if r == "b"]
    assert stars and min(stars) == start + 16 and max(stars) == b  # r* from S steps on until admitted


def test_a_held_request_is_counted_as_held_and_is_not_r_star():
    result, gate = _fair(2)
    reqs = result.scheduler.state.reqs
    reasons = waiting_reasons(result, "long2")
    assert reasons["fair_guard"] > 0 and reqs["long2"].first_admitted > reqs["b"].first_admitted
    assert sum(reasons.values()) == reqs["long2"].first_admitted - 3  # every step from its arrival
    assert "long2" not in gate.stars.values() and "b" in gate.stars.values()


def test_the_oracle_starts_the_request_when_vllm_does_at_the_older_ones_cost():
    """At step 3, when vllm admits `long2`, the oracle makes it r* ahead of
    `b` (older, starving, r* since step 3): it gets in at once, its
    adapter's slot stays busy 30 more steps, and `b` waits for that."""
    cfg = Config(max_loras=1, policy="fair", starvation_steps=2)
    fair = simulate_policy(cfg, REQS, "fair").result.scheduler.state.reqs
    oracle = simulate_policy(cfg, REQS, "fair", gate=oracle_gate("long2", 3)).result.scheduler.state.reqs
    assert fair["long2"].first_admitted > 3 and oracle["long2"].first_admitted == 3
    assert oracle["b"].first_admitted > fair["b"].first_admitted + 12
    unforced = simulate_policy(cfg, REQS, "fair", gate=oracle_gate("long2", 10 ** 6)).result.scheduler.state.reqs
    assert {k: rs.first_admitted for k, rs in unforced.items()} == {k: rs.first_admitted for k, rs in fair.items()}


def test_late_start_names_the_request_that_ends_fairs_run():
    spec = replace(R.grid(large=True, draw=21)[1], requests=60, adapters=8, load=1.5, max_loras=2)
    row = late_start(spec, 16)
    fair = simulate_policy(spec.config(starvation_steps=16), R.workload(spec), "fair").result
    last_step = max(rec.step for rec in fair.records if row["last"] in rec.finished)
    assert last_step == max(rec.step for rec in fair.records if rec.finished)
    rs = fair.scheduler.state.reqs[row["last"]]
    assert row["first_admitted_fair"] == rs.first_admitted
    start = max(rs.req.arrival, fair.records[0].step)  # the step it first waits
    assert row["waited"] == sum(row["reasons"].values()) == rs.first_admitted - start
    assert row["figures"]["vllm"]["ratio_s"] == 1.0 and row["figures"]["fair"]["ratio_s"] == row["ratio_s"]
    assert row["figures"]["fair"]["max"] == max(fair.waits().values())
