"""No online rule is undominated on every family (`bench/online.py`): the pair
adv-online-x / adv-online-y, judged by exhaustive search, cross-checked
against the real core and against `bench.optimum`'s separate search."""

from __future__ import annotations

import pytest
from lora_sched.bench.frontier import KNOBBED, KNOBS, dominated, points
from lora_sched.bench.online import (
    FIELD_POLICIES,
    MEASURES,
    PAIR,
    Tree,
    field_points,
    horizon,
    judge,
    load_pair,
    main,
    run_point,
)
from lora_sched.bench.optimum import best_schedule

ALL_POLICIES = ("blocking", "vllm", "fair", "drainer", "timeslice", "vtc")


@pytest.fixture(scope="module")
def pair():
    return load_pair()


@pytest.mark.parametrize("measure", MEASURES)
def test_no_online_rule_is_undominated_on_both(pair, measure):
    """From every state that any admissions reach by the split, every
    completion on X or every completion on Y is beaten on both coordinates by
    a point of the field (every policy but fair, at every knob)."""
    cfg, x, y, split = pair
    assert split == 8 and [r for r in x if r.arrival <= split] == [r for r in y if r.arrival <= split]
    v = judge(cfg, x, y, split, measure)
    assert v.escapes == 0
    assert v.states == 49  # fingerprint: a change to the tree's moves shows here


def test_the_best_schedules_agree_with_the_optimum_search(pair):
    """The tree's best schedules from the start are what `bench.optimum`'s
    breadth-first search (separate code, arrival order within an adapter)
    finds, and admitting out of order buys nothing on this pair: X drains in
    21 steps at best, with a worst wait of 9, and no schedule waits less; Y
    in 20 steps with a wait of 11, or in 22 with 10, and none waits less than 10."""
    cfg, x, y, _ = pair
    for reqs in (x, y):
        h = horizon(field_points(cfg, reqs), "steps")
        front = Tree(cfg, reqs, "steps", h).best()
        assert Tree(cfg, reqs, "steps", h, fifo=True).best() == front
        start = min(r.arrival for r in reqs)
        for steps, wait in front:
            assert best_schedule(cfg, reqs, wait).last_step - start + 1 == steps
        assert best_schedule(cfg, reqs, min(w for _, w in front) - 1).last_step is None
    v = judge(cfg, x, y, 8, "steps")
    assert v.pareto_x == [(21, 9)] and v.pareto_y == [(20, 11), (22, 10)]


def test_every_policy_run_is_a_path_of_the_tree(pair):
    """The abstraction holds every rule's run: each policy, at each knob, run
    through the real core, replays move by move through the tree with its own
    steps, seconds (cost model) and worst wait."""
    cfg, x, y, _ = pair
    for reqs in (x, y):
        for policy in ALL_POLICIES:
            for knob in KNOBS if policy in KNOBBED else (None,):
                pt, res = run_point(cfg, reqs, policy, knob)
                for m in MEASURES:
                    steps, cost, wait = Tree(cfg, reqs, m, (0, 0)).replay(res)
                    assert (steps, wait) == (pt.steps, pt.wait), (policy, knob, m)
                    assert cost == pytest.approx(pt.measure(m), rel=1e-12), (policy, knob, m)


def test_fair_at_every_knob_is_dominated_on_one_of_the_pair(pair):
    """The consequence, on the frontier's own points (real core, cost model and
    steps): fair at each knob is dominated on X or on Y."""
    cfg, x, y, _ = pair
    fronts = [points(cfg, reqs) for reqs in (x, y)]
    for knob in KNOBS:
        for key in ("ratio", "ratio_steps"):
            hit = []
            for pts in fronts:
                as_ratio = [{**p, "ratio": p[key]} for p in pts]
                me = next(p for p in as_ratio if p["policy"] == "fair" and p["knob"] == knob)
                hit.append(bool(dominated(me, as_ratio)))
            assert any(hit), (knob, key)


# ---- the checks can fail ---------------------------------------------------------------------


def test_a_pair_with_nothing_to_tell_apart_has_an_escape(pair):
    """X against itself: a rule that runs X's best schedule is undominated on
    both, and the judge says so (it is not a judge that always says ok)."""
    cfg, x, _, split = pair
    assert judge(cfg, x, x, split).escapes > 0


def test_without_the_drainer_the_pair_proves_nothing(pair, monkeypatch):
    """The verdict rests on the field: X's only best schedule is the drainer's at
    threshold 0 (21 steps, wait 9); without the drainer in the field, a rule may
    escape."""
    import lora_sched.bench.online as online

    cfg, x, y, split = pair
    assert (21, 9) in {(p.steps, p.wait) for p in field_points(cfg, x) if p.policy == "drainer" and p.knob == 0}
    monkeypatch.setattr(online, "field_points", lambda c, r, knobs: field_points(
        c, r, tuple(p for p in FIELD_POLICIES if p != "drainer"), knobs))
    assert online.judge(cfg, x, y, split).escapes > 0


def test_a_tree_that_miscounts_a_step_fails_the_replay(pair):
    """Planted: the tree's step cost forgets the prompt tokens; the seconds it
    gives vllm's run no longer match the cost model's."""
    cfg, x, y, _ = pair

    class NoPrompts(Tree):
        def step_cost(self, tokens: int, seqs: int, adapters: int) -> float:
            return super().step_cost(0, seqs, adapters)

    pt, res = run_point(cfg, x, "vllm", None)
    _, cost, _ = NoPrompts(cfg, x, "seconds", (0, 0)).replay(res)
    assert cost != pytest.approx(pt.seconds, rel=1e-12)


def test_instances_that_differ_before_the_split_are_refused(pair):
    cfg, x, y, split = pair
    with pytest.raises(ValueError, match="differ in what arrives by step 9"):
        judge(cfg, x, y, split + 1)


def test_the_entry_points_judge_the_saved_pair(tmp_path, capsys):
    """`python -m lora_sched.bench.online` and `lora-sched bench --online`: a line
    per measure, exit 0, and the verdicts as JSON under --out."""
    import json

    from lora_sched.cli import main as cli_main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"pair {PAIR[0]} / {PAIR[1]}" in out
    assert out.count("... ok.") == len(MEASURES)
    assert cli_main(["bench", "--online", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "online.json").read_text())
    assert [v["escapes"] for v in saved["verdicts"]] == [0, 0] and saved["split"] == 8
