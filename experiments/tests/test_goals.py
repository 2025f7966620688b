"""experiments.goals: the realistic grid's goals, which must be able to say NOT MET (a doctored row is caught)."""

from __future__ import annotations

import argparse
import copy
from dataclasses import replace

import pytest
from lora_sched.bench import realistic as R

from experiments import goals as G
from experiments.dominance import dominates


def test_a_draw_below_the_fixed_grid_is_refused_as_a_flag():
    with pytest.raises(argparse.ArgumentTypeError, match="fresh draws are above it"):
        G.parse_draw("18")
    with pytest.raises(argparse.ArgumentTypeError, match="not an integer"):
        G.parse_draw("x")
    assert G.parse_draw("21") == 21


def test_goals_can_fail(monkeypatch):
    spec = replace(R.grid()[0], requests=40, adapters=4, load=1.0, unit="seats")
    rows = R.run_grid([spec], (("vllm", None), ("fair", 16), ("drainer", 16), ("timeslice", 16), ("vtc", None)),
                      processes=1, progress=lambda m: None)
    by = {r["point"]: r for r in rows}
    assert by["vllm"]["ratio_s"] == 1.0 and by["vllm"]["ratio_steps"] == 1.0
    assert len(G.goals(rows)) == 7
    bad = copy.deepcopy(rows)
    for r in bad:
        if r["point"] == "fair S=16":
            r["max"] = by["vllm"]["max"] + 1
            r["ratio_s"] = 0.5
    verdicts = dict((g, met) for g, met, _ in G.goals(bad))
    assert not verdicts["max wait never above vllm's"]
    assert not verdicts["throughput >= 0.97 of vllm everywhere"]


def _row(point: str, tail_head: float, ratio_s: float, mx: int = 10) -> dict:
    return {"workload": "real99-A4", "design": True, "point": point, "tail_head": tail_head, "ratio_s": ratio_s,
            "max": mx}


def test_dominates_is_the_issues_goal_by_hand():
    """fair must be no worse than each of the field on both tail/head and
    throughput (a tie counts for fair), not merely left undominated."""
    rows = [_row("vllm", 4.0, 1.0), _row("fair S=16", 2.0, 1.0), _row("drainer S=16", 2.0, 1.0),
            _row("timeslice S=16", 3.0, 1.01), _row("vtc", 1.0, 1.1)]
    verdicts = {g: (met, fig) for g, met, fig in G.goals(rows)}
    assert verdicts["fair dominates drainer on (tail/head, throughput)"][0]  # equal points
    met, fig = verdicts["fair dominates timeslice on (tail/head, throughput)"]
    assert not met and "dominates on 0 of 1" in fig and "dominated by it on 0" in fig  # faster, worse tail/head
    met, fig = verdicts["fair dominates vtc on (tail/head, throughput)"]
    assert not met and "dominated by it on 1" in fig


def test_dominates_by_hand():
    assert dominates(2.0, 1.0, 2.0, 1.0) and dominates(1.9, 1.01, 2.0, 1.0)
    assert not dominates(2.1, 1.5, 2.0, 1.0) and not dominates(1.0, 0.99, 2.0, 1.0)
    assert dominates(2.0 * (1 + 1e-12), 1.0, 2.0, 1.0)  # float order of one schedule's figures
