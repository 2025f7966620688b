"""bench.realistic: the realistic multi-tenant grid and its measures.

The generator's shape (Zipf popularity, base share, lognormal lengths
clipped to 2048, arrival order), the fixed design / held-out split, the
tail/head ratio on a hand-computed case (the goals' verdicts:
experiments/tests/test_goals.py). Speed is never asserted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from lora_sched.bench import realistic as R


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
    assert R.draw_suffix(21) == "-d21" and R.draw_suffix(R.GRID_DRAW) == ""


def test_tail_head_by_hand():
    spec = replace(R.grid()[0], max_loras=1)
    adapter_of = {"h1": 1, "h2": 1, "m": 2, "t1": 3, "t2": 4, "b": 0}
    waits = {"h1": 0, "h2": 2, "m": 50, "t1": 9, "t2": 19, "b": 500}
    # head = {1}: mean 1 -> 2; tail = bottom half of ranks {1,2,3,4} = {3, 4}: mean 14 -> 15
    assert R.tail_head(waits, adapter_of, spec) == 15 / 2
