"""bench.realistic: the realistic multi-tenant grid and its measures.

The generator's shape (Zipf popularity, base share, lognormal lengths
clipped to 2048, arrival order), the fixed design / held-out split, the
tail/head ratio on a hand-computed case, and the goals' verdicts, which must
be able to say NOT MET (a doctored row is caught). Speed is never asserted.
"""

from __future__ import annotations

import argparse
import copy
from collections import Counter
from dataclasses import replace

import pytest
from lora_sched.bench import realistic as R
from lora_sched.bench.popularity import dominates


def test_the_mix_has_the_shape_it_claims():
    spec = replace(R.grid()[0], requests=3000, adapters=32, alpha=1.0, base=0.2, unit="seats")
    reqs = R.workload(spec)
    counts = Counter(r.adapter for r in reqs)
    assert 0.17 < counts[0] / len(reqs) < 0.23  # base share
    lora = [counts[a] for a in range(1, 33)]
    assert lora[0] > lora[3] > lora[15]  # Zipf: popularity falls with rank
    assert all(1 <= r.prompt_tokens <= R.CLIP and 1 <= r.max_tokens <= R.CLIP for r in reqs)
    outs = sorted(r.max_tokens for r in reqs)
    assert 90 < outs[len(outs) // 2] < 150  # median output about 120
    assert [r.arrival for r in reqs] == sorted(r.arrival for r in reqs)


def test_the_split_is_fixed_by_index():
    specs = R.grid(large=True)
    assert [s.index for s in specs] == list(range(48))
    assert [s.design for s in specs[:6]] == [True, False, False, True, False, False]
    assert R.grid()[:3] == [replace(s, requests=600) for s in specs[:3]]  # same axes, fewer requests
    assert specs[0].seed == 1000 and specs[0].name.startswith("real00-")  # the fixed grid, as it always was


def test_a_fresh_draw_is_another_grid_and_all_held_out():
    fixed, fresh = R.grid(large=True), R.grid(large=True, draw=21)
    assert not any(s.design for s in fresh)
    assert {s.seed for s in fresh}.isdisjoint(s.seed for s in fixed)
    assert {s.name for s in fresh}.isdisjoint(s.name for s in fixed)
    axes = [(s.adapters, s.alpha, s.base, s.arrivals, s.load, s.budget, s.max_loras) for s in fresh]
    assert axes != [(s.adapters, s.alpha, s.base, s.arrivals, s.load, s.budget, s.max_loras) for s in fixed]
    assert R.workload(replace(fresh[0], requests=50)) != R.workload(replace(fixed[0], requests=50))


def test_a_draw_below_the_fixed_grid_is_refused():
    """Its request seeds would be <= 0 and repeat another draw's (draw 18's
    first seed, -1000, seeds as 1000: the fixed grid's real00)."""
    with pytest.raises(ValueError, match="draw 18"):
        R.grid(draw=18)
    with pytest.raises(argparse.ArgumentTypeError, match="fresh draws are above it"):
        R.parse_draw("18")
    with pytest.raises(argparse.ArgumentTypeError, match="not an integer"):
        R.parse_draw("x")
    assert R.parse_draw("21") == 21 and R.draw_suffix(21) == "-d21" and R.draw_suffix(R.GRID_DRAW) == ""


def test_tail_head_by_hand():
    spec = replace(R.grid()[0], max_loras=1)
    adapter_of = {"h1": 1, "h2": 1, "m": 2, "t1": 3, "t2": 4, "b": 0}
    waits = {"h1": 0, "h2": 2, "m": 50, "t1": 9, "t2": 19, "b": 500}
    # head = {1}: mean 1 -> 2; tail = bottom half of ranks {1,2,3,4} = {3, 4}: mean 14 -> 15
    assert R.tail_head(waits, adapter_of, spec) == 15 / 2


def test_goals_can_fail(monkeypatch):
    spec = replace(R.grid()[0], requests=40, adapters=4, load=1.0, unit="seats")
    rows = R.run_grid([spec], (("vllm", None), ("fair", 16), ("drainer", 16), ("timeslice", 16), ("vtc", None)),
                      processes=1, progress=lambda m: None)
    by = {r["point"]: r for r in rows}
    assert by["vllm"]["ratio_s"] == 1.0 and by["vllm"]["ratio_steps"] == 1.0
    assert len(R.goals(rows)) == 7
    bad = copy.deepcopy(rows)
    for r in bad:
        if r["point"] == "fair S=16":
            r["max"] = by["vllm"]["max"] + 1
            r["ratio_s"] = 0.5
    verdicts = dict((g, met) for g, met, _ in R.goals(bad))
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
    verdicts = {g: (met, fig) for g, met, fig in R.goals(rows)}
    assert verdicts["fair dominates drainer on (tail/head, throughput)"][0]  # equal points
    met, fig = verdicts["fair dominates timeslice on (tail/head, throughput)"]
    assert not met and "dominates on 0 of 1" in fig and "dominated by it on 0" in fig  # faster, worse tail/head
    met, fig = verdicts["fair dominates vtc on (tail/head, throughput)"]
    assert not met and "dominated by it on 1" in fig


def test_dominates_by_hand():
    assert dominates(2.0, 1.0, 2.0, 1.0) and dominates(1.9, 1.01, 2.0, 1.0)
    assert not dominates(2.1, 1.5, 2.0, 1.0) and not dominates(1.0, 0.99, 2.0, 1.0)
    assert dominates(2.0 * (1 + 1e-12), 1.0, 2.0, 1.0)  # float order of one schedule's figures
