"""`experiments.critical`: the critical-request experiment, on scenarios whose answers are forced by hand.

Steps count from 1 (the first requests are admitted at step 1), S = 2.
With one LoRA slot the slot time (each adapter present, for its longest
request's outputs left, one adapter at a time) is the whole run whatever
the order, so no request is ever critical; the scenarios use 2 and 3.
"""

from __future__ import annotations

from dataclasses import replace

from lora_sched.bench import realistic as R
from lora_sched.bench.simulate import simulate_policy
from lora_sched.policy.core import Scheduler
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

from experiments.critical import MODES, CriticalGate, compare, drain_estimate, main

CFG = Config(max_loras=2, policy="fair", starvation_steps=2)
# x and y hold both slots from step 1; b (1 output) starves; c, of x's
# adapter, arrives at step 3 with 60 outputs.
HELD = [Request("x", 1, 4, 10, 0), Request("y", 2, 4, 40, 0), Request("b", 3, 4, 1, 0), Request("c", 1, 4, 60, 3)]


def _runs(cfg: Config, reqs: list[Request]) -> dict[str, tuple[list, dict[str, int | None], int]]:
    """Per run (fair, each mode): the requests made r* as critical, first admissions, last finishing step."""
    out = {}
    for name in ("fair",) + MODES:
        gate = None if name == "fair" else CriticalGate(name)
        result = simulate_policy(cfg, reqs, "fair", gate=gate).result
        first = {k: rs.first_admitted for k, rs in result.scheduler.state.reqs.items()}
        out[name] = (gate.forced if gate else [], first, max(rec.step for rec in result.records if rec.finished))
    return out


def test_jump_makes_a_held_critical_request_r_star_and_the_run_ends_sooner():
    """fair makes `b` r* at step 3; x's adapter, whose slot frees first
    (step 10), is the only victim, and `c` (60 outputs, late) is held until
    `b` is in at step 11; then the cap keeps `c` out until `b`'s one output
    is done: in at 12, the run ends at 71. At step 4 `c` is critical: E is
    the slot time (60 for adapter 1, y's 37, b's 1: 98 over 2 slots, 49),
    and 60 >= 49. jump makes it r* and it goes in at once (its adapter
    holds a slot); the run ends with its 60th output at 63, and `b` waits
    for y's slot (step 41). next finds `b` r* already and changes nothing."""
    runs = _runs(CFG, HELD)
    assert runs["fair"] == ([], {"x": 1, "y": 1, "b": 11, "c": 12}, 71)
    assert runs["jump"] == ([(4, "c")], {"x": 1, "y": 1, "b": 41, "c": 4}, 63)
    assert runs["next"] == runs["fair"]


def test_a_critical_request_goes_before_an_older_starving_one_and_next_mode_alternates():
    """Three slots held by x, y, z (10, 20 and 30 outputs); `b` (1 output)
    starves; `c` and `d` (80 outputs each, adapters of their own) arrive at
    step 1. At step 2 the slot time is 9 + 19 + 29 + 1 + 80 + 80 = 218
    over 3 slots, 73, so `c` (before `d` by age) is critical and becomes r*
    ahead of `b`, the older starving request fair chooses; it takes x's
    slot at step 11. At step 12 `d` is critical too (9 + 19 + 79 + 1 + 80
    = 188 over 3, 63): jump makes it r* at once, past the S-step gap, and
    it takes y's slot at 21, `b` z's at 31; next makes fair's own r* (`b`)
    first, so `b` takes y's slot at 21 and `d` the slot `b` frees."""
    reqs = [Request("x", 1, 4, 10, 0), Request("y", 2, 4, 20, 0), Request("z", 3, 4, 30, 0),
            Request("b", 4, 4, 1, 0), Request("c", 5, 4, 80, 1), Request("d", 6, 4, 80, 1)]
    runs = _runs(replace(CFG, max_loras=3), reqs)
    held = {"x": 1, "y": 1, "z": 1}
    assert runs["fair"][:2] == ([], held | {"b": 11, "c": 12, "d": 21})
    assert runs["next"][:2] == ([(2, "c")], held | {"c": 11, "b": 21, "d": 22})
    assert runs["jump"][:2] == ([(2, "c"), (12, "d")], held | {"c": 11, "d": 21, "b": 31})


def test_a_long_request_is_not_critical_when_the_backlog_outlasts_it():
    """The held scenario behind 40 base-model requests of 40 outputs on 4
    seats: the backlog needs at least 400 steps, so `c`'s 60 outputs are
    never critical, and each mode runs fair unchanged."""
    base = [Request(f"base{i}", 0, 4, 40, 0) for i in range(40)]
    cfg = replace(CFG, max_num_seqs=4)
    fair = simulate_policy(cfg, base + HELD, "fair").result
    for mode in MODES:
        gate = CriticalGate(mode)
        crit = simulate_policy(cfg, base + HELD, "fair", gate=gate).result
        assert gate.forced == []
        assert [r.admitted for r in crit.records] == [r.admitted for r in fair.records]


def test_the_drain_estimate_takes_the_largest_of_its_four_lower_bounds():
    """The held scenario's four requests before any step: 111 outputs, 127
    tokens; slot time 60 + 40 + 1 = 101. Seats 2: 111 / 2 = 56 steps. Seats
    8 (14), budget 5 (26): slot time 101 / 2 slots = 51. Four slots (26),
    budget 4: 127 / 4 = 32. x alone after two steps: its 8 outputs left
    (slot time 8 / 2 = 4)."""
    for seqs, budget, slots, steps in ((2, 5, 2, 56), (8, 5, 2, 51), (8, 4, 4, 32)):
        cfg = replace(CFG, max_num_seqs=seqs, max_num_batched_tokens=budget, max_loras=slots)
        sched = Scheduler(cfg, CriticalGate())
        for r in HELD:
            sched.add(r)
        assert drain_estimate(sched.state) == steps
    sched = Scheduler(CFG, CriticalGate())
    sched.add(HELD[0])
    sched.step(0)
    sched.step(1)
    assert sched.state.reqs["x"].generated == 2 and drain_estimate(sched.state) == 8


def test_compare_reports_each_run_against_vllms():
    spec = replace(R.grid(large=True, draw=21)[1], requests=60, adapters=8, load=1.5, max_loras=2)
    row = compare(spec, 16)
    fair = simulate_policy(spec.config(starvation_steps=16), R.workload(spec), "fair")
    assert row["figures"]["vllm"]["ratio_s"] == 1.0
    assert row["figures"]["fair"]["max"] == max(fair.waits.values())
    for mode in MODES:
        gate = CriticalGate(mode)
        run = simulate_policy(spec.config(starvation_steps=16), R.workload(spec), "fair", gate=gate)
        assert row["figures"][mode]["forced"] == len(gate.forced)
        assert row["figures"][mode]["max"] == max(run.waits.values())


def test_an_unknown_workload_prefix_is_refused(capsys, tmp_path):
    assert main(["--workloads", "nope", "--out", str(tmp_path)]) == 2
    assert "--workloads nope: no workload of the grid starts with any of these" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
