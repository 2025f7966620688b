"""Relieving starvation conflicts with a goal for every online rule (`bench/relief.py`):
the pairs adv-relief-wait and adv-relief-throughput, judged by exhaustive search,
cross-checked against the real core's runs and `bench.optimum`'s separate search."""

from __future__ import annotations

import json

import pytest
from lora_sched.bench.online import MEASURES, pair_split, replays
from lora_sched.bench.optimum import best_schedule
from lora_sched.bench.relief import (
    PAIRS,
    SCALES,
    conflicts,
    judge,
    largest_relief,
    load_pair,
    main,
    policy_rows,
    scaled,
    search,
    valid,
)

# Per pair: the split, the states reachable at split + 1, (relief, vllm's worst wait on X,
# the best schedule's on X), vllm's (steps, worst wait) on Y, and the largest relief at
# which no state escapes with the states that escape one step above it: fingerprints, so
# a change to the tree, the core or the judge shows here; and the price on Y of keeping the
# relief on X: the least max wait (wait pair) or the best throughput ratio in steps (throughput pair).
EXPECTED = {
    "adv-relief-wait": (5, 29, (11, 23, 8), (16, 7), (11, 5), 8),
    "adv-relief-throughput": (6, 57, (8, 16, 7), (14, 9), (8, 5), 14 / 15),
}


@pytest.fixture(scope="module")
def pairs():
    return {stem: load_pair(stem) for stem, _ in PAIRS}


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("stem, goal", PAIRS)
def test_relieving_x_misses_the_goal_on_y(pairs, stem, goal, measure):
    """From every state that any admissions reach by the split, no completion
    of X keeps every wait at or under the relief, or no completion of Y meets
    the goal; some schedule of X does keep the relief, and vllm does not."""
    cfg, x, y, split = pairs[stem]
    want_split, states, (relief, vllm_x, best_x), vllm_y, (largest, above), price = EXPECTED[stem]
    assert split == want_split
    assert [r for r in x if r.arrival <= split] == [r for r in y if r.arrival <= split]
    assert min(r.arrival for r in x + y if r not in x or r not in y) == split + 1
    v = judge(cfg, x, y, split, goal=goal, measure=measure)
    assert (v.escapes, v.states) == (0, states)
    assert (v.relief, v.vllm_x.wait, v.best_x) == (relief, vllm_x, best_x)
    assert (v.vllm_y.steps, v.vllm_y.wait) == vllm_y
    assert valid(v)
    if measure == "steps":
        assert v.price == pytest.approx(price, rel=1e-12)
    assert v.price > v.vllm_y.wait if goal == "wait" else v.price < v.floor  # the price misses the goal
    assert largest_relief(cfg, x, y, split, goal=goal, measure=measure) == (largest, above)


# Twice as long: (relief, vllm's worst wait on X, the best schedule's), states at the split,
# vllm's worst wait on Y and (steps) the price: the conflict and its price do not come from the small size.
TWICE = {
    "adv-relief-wait": ((23, 46, 16), 84, 14, 16),
    "adv-relief-throughput": ((16, 32, 14), 175, 9 * 2, 14 / 15),
}


@pytest.mark.parametrize("stem, goal", PAIRS)
def test_the_conflict_holds_twice_as_long(pairs, stem, goal):
    """Every output and arrival gap doubled: no state escapes, and the price on
    Y keeps its ratio (8/7 -> 16/14; 0.933 -> 0.933)."""
    cfg, x, y, _ = pairs[stem]
    start = min(r.arrival for r in x + y)
    xs, ys = scaled(x, 2, start), scaled(y, 2, start)
    v = judge(cfg, xs, ys, pair_split(xs, ys), goal=goal)
    (relief, vllm_x, best_x), states, vllm_y, price = TWICE[stem]
    assert (v.escapes, v.states, v.relief, v.vllm_x.wait, v.best_x, v.vllm_y.wait) == \
        (0, states, relief, vllm_x, best_x, vllm_y)
    assert v.price == pytest.approx(price, rel=1e-12)
    assert 2 in SCALES


@pytest.mark.parametrize("stem, goal", PAIRS)
def test_every_policy_that_relieves_x_misses_on_y(pairs, stem, goal):
    """The consequence on the real core: each policy of the project, at several
    knobs, that waits at most the relief on X misses the goal on Y (and some
    do relieve X, fair among them, so this is not vacuous)."""
    cfg, x, y, split = pairs[stem]
    for m in MEASURES:
        rows = policy_rows(cfg, x, y, judge(cfg, x, y, split, goal=goal, measure=m))
        relievers = [r for r in rows if r["relieves_x"]]
        assert any(r["policy"] == "fair" for r in relievers), m
        assert not [r for r in relievers if r["meets_y"]], m
        assert not next(r for r in rows if r["policy"] == "vllm")["relieves_x"]


@pytest.mark.parametrize("stem", [s for s, _ in PAIRS])
def test_every_policy_run_is_a_path_of_the_tree(pairs, stem):
    """The abstraction holds every rule's run: each policy at each knob, run
    through the real core, replays move by move through the tree with its own
    steps, seconds and worst wait (`bench.online.replays`)."""
    cfg, x, y, _ = pairs[stem]
    for reqs in (x, y):
        assert replays(cfg, reqs) == []


@pytest.mark.parametrize("stem, goal", PAIRS)
def test_the_best_relief_agrees_with_the_optimum_search(pairs, stem, goal):
    """X's least worst wait over every schedule is what `bench.optimum`'s
    breadth-first search (separate code) finds: a schedule within it exists,
    none within one step less."""
    cfg, x, _, split = pairs[stem]
    best_x = EXPECTED[stem][2][2]
    assert best_schedule(cfg, x, best_x).last_step is not None
    assert best_schedule(cfg, x, best_x - 1).last_step is None


# ---- the checks can fail ---------------------------------------------------------------------


def test_a_pair_with_nothing_to_tell_apart_has_an_escape(pairs):
    """X against itself: the schedule that relieves X meets vllm's max wait on
    X, and the judge says a rule escapes (it is not a judge that always says ok)."""
    cfg, x, _, split = pairs["adv-relief-wait"]
    assert judge(cfg, x, x, split, goal="wait", priced=False).escapes > 0


def test_a_lower_floor_lets_a_rule_escape(pairs):
    """Planted: the throughput goal at 0.85 of vllm's instead of 0.97; fair at
    S = 2 runs Y at 0.875 and relieves X, so a rule escapes."""
    cfg, x, y, split = pairs["adv-relief-throughput"]
    assert judge(cfg, x, y, split, goal="throughput", floor=0.85).escapes > 0


def test_the_price_is_tight(pairs, monkeypatch):
    """Planted: Y's goal one step looser than vllm's max wait (8, the price the
    search reports); a rule then escapes, so the verdict is exactly the price."""
    import lora_sched.bench.relief as relief

    cfg, x, y, split = pairs["adv-relief-wait"]
    real = relief.goal_limits
    monkeypatch.setattr(relief, "goal_limits", lambda g, vy, m, f: (real(g, vy, m, f)[0], real(g, vy, m, f)[1] + 1))
    assert judge(cfg, x, y, split, goal="wait").escapes > 0


def test_instances_that_differ_before_the_split_are_refused(pairs):
    cfg, x, y, split = pairs["adv-relief-wait"]
    with pytest.raises(ValueError, match=f"differ in what arrives by step {split + 1}"):
        judge(cfg, x, y, split + 1, goal="wait")


def test_an_unknown_goal_is_refused(pairs):
    cfg, x, y, split = pairs["adv-relief-wait"]
    with pytest.raises(ValueError, match="goal must be one of"):
        judge(cfg, x, y, split, goal="latency")


def test_the_search_finds_a_pair_the_judge_confirms():
    """`--search`: the hill climb over `bench.online`'s pairs finds one for the
    throughput goal (seed a, first restart), and judged afresh no state escapes."""
    found = search("a", "throughput", restarts=1)
    assert found is not None
    cfg, split, pre, tx, ty = found
    v = judge(cfg, pre + tx, pre + ty, split, goal="throughput")
    assert v.escapes == 0 and valid(v) and v.price < v.floor


def test_the_entry_points_judge_the_saved_pairs(tmp_path, capsys):
    """`lora-sched bench --online`: after the online pairs, a line per relief
    pair and measure, exit 0, the verdicts as JSON under --out; and
    `python -m lora_sched.bench.relief --search` prints the pair it finds."""
    from lora_sched.cli import main as cli_main

    assert cli_main(["bench", "--online", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.split("(bench.relief):")[1]
    assert out.count("... ok.") == len(PAIRS) * (len(MEASURES) + len(SCALES))
    assert out.count("of them meeting the goal on Y: 0 (must be 0)") == len(PAIRS) * len(MEASURES)
    saved = json.loads((tmp_path / "relief.json").read_text())["verdicts"]
    assert [(v["pair"], v["scale"], v["measure"], v["escapes"], v["shown"]) for v in saved] == \
        [row for stem, _ in PAIRS for row in [(stem, 1, m, 0, True) for m in MEASURES]
         + [(stem, k, "steps", 0, True) for k in SCALES]]
    assert main(["--search", "a", "--goal", "throughput", "--restarts", "1"]) == 0
    assert "pair: (Config(" in capsys.readouterr().out


def test_the_realistic_report_reads_both_verdicts():
    """`bench --realistic` prints `conflicts()` beside `bench.tailhead`'s lines:
    one per pair, each a conflict in both measures, naming the goal on Y."""
    got = conflicts()
    assert [(name.split(",")[0], ok) for name, ok, _ in got] == [(stem, True) for stem, _ in PAIRS]
    assert "max wait <= vllm's" in got[0][0] and "throughput >= 0.97" in got[1][0]
    assert "waiting <= 11 on X, where vllm waits 23" in got[0][2]

