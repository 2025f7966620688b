"""`experiments.cadence`: fair's S in prefill cadences (v12) against S in steps (v11), side by side.

The figures are printed by `python -m experiments.cadence`, never
asserted as goals here; these tests check that each side runs the rule it
names and that the summary counts what it says.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from lora_sched.policy import fair

from experiments import cadence
from experiments.adversarial import Instance, evaluate
from experiments.families import FAMILY_DIR, load


def test_in_steps_runs_v11_and_restores_v12():
    """Inside `in_steps` fair counts S in steps: on the throttle family
    found against v10 it drains at 0.65 of vllm with a worst wait of 534, as
    v11 recorded; outside it, vllm's own figures (345)."""
    _, cfg, reqs, _ = load(FAMILY_DIR / "adv-fairv10-throttle-throughput.json")
    inst = Instance(replace(cfg, policy="fair"), tuple(reqs))
    with cadence.in_steps():
        assert fair.starvation_window(cfg) == 16
        v11 = evaluate(inst, "fair")
    assert fair.starvation_window(cfg) == 64
    v12 = evaluate(inst, "fair")
    assert v11.ratio == pytest.approx(0.6496, abs=1e-3) and v11.wait == 534
    assert v12.ratio == 1.0 and v12.wait == v12.vllm_wait == 345
    assert v11.bound < v12.bound  # B reads the same window as the guard


def test_one_seed_side_by_side_and_its_summary():
    """Seed 10 is the climb that found v11's worst saved throttle family:
    counting in steps misses the goal there, counting in cadences does not,
    and the summary counts both rows of each side."""
    rows = [r for c in cadence.COUNTINGS for r in cadence.searched(c, range(10, 11))]
    by = {c: cadence.summary([r for r in rows if r["counting"] == c]) for c in cadence.COUNTINGS}
    assert by["steps"]["of"] == by["cadences"]["of"] == 2
    assert by["steps"]["misses"] == 1 and by["steps"]["min_ratio"] < 0.8
    assert by["cadences"]["misses"] == 0 and by["cadences"]["min_ratio"] >= 0.8
    with pytest.raises(ValueError, match="counting must be one of"):
        cadence.searched("tokens", range(1, 2))


def test_bad_seeds_are_named(capsys):
    with pytest.raises(SystemExit):
        cadence.main(["--seeds", "x-3"])
    assert "--seeds: expected N or N-M, got 'x-3'" in capsys.readouterr().err
