"""No online rule is undominated on every family (`bench/online.py`): the pairs
adv-online-x / -y and adv-online2-x / -y, judged by exhaustive search,
cross-checked against the real core and against `experiments.optimum`'s separate
search."""

from __future__ import annotations

import pytest

from experiments.frontier import DEFAULT_KNOB, KNOBS, dominated, points
from experiments.online import (
    CASES,
    FIELD_POLICIES,
    MEASURES,
    PAIRS,
    Tree,
    dominated_by,
    field_points,
    horizon,
    judge,
    load_pair,
    main,
    replays,
    run_point,
)
from experiments.optimum import best_schedule

# Per pair: the split, the states reachable at split + 1 (a fingerprint: a change
# to the tree's moves shows here), and the best (steps, worst wait) of X and of Y
# over every schedule.
EXPECTED = {
    PAIRS[0]: (8, 49, [(21, 9)], [(20, 11), (22, 10)]),
    PAIRS[1]: (5, 90, [(20, 7)], [(13, 5)]),
}


@pytest.fixture(scope="module")
def pairs():
    return {pair: load_pair(pair) for pair in PAIRS}


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}-knobs{'-'.join(map(str, c[1]))}"
                         if isinstance(c, tuple) else str(c))
def test_no_online_rule_is_undominated_on_both(pairs, case, measure):
    """From every state that any admissions reach by the split, every
    completion on X or every completion on Y is beaten on both coordinates by
    a point of the field (every policy but fair, at the case's knobs)."""
    pair, knobs = case
    cfg, x, y, split = pairs[pair]
    assert split == EXPECTED[pair][0]
    assert [r for r in x if r.arrival <= split] == [r for r in y if r.arrival <= split]
    assert min(r.arrival for r in x + y if r not in x or r not in y) == split + 1
    v = judge(cfg, x, y, split, measure, knobs)
    assert v.escapes == 0
    assert v.states == EXPECTED[pair][1]


@pytest.mark.parametrize("pair", PAIRS)
def test_the_best_schedules_agree_with_the_optimum_search(pairs, pair):
    """The tree's best schedules from the start are what `experiments.optimum`'s
    breadth-first search (separate code, arrival order within an adapter)
    finds, and admitting out of order buys nothing on these pairs; each
    instance alone has a schedule the field does not beat (the proof needs
    the shared prefix)."""
    cfg, x, y, split = pairs[pair]
    for reqs, want in zip((x, y), EXPECTED[pair][2:], strict=True):
        pts = field_points(cfg, reqs)
        front = Tree(cfg, reqs, "steps", horizon(pts, "steps")).best()
        assert front == want
        assert Tree(cfg, reqs, "steps", horizon(pts, "steps"), fifo=True).best() == front
        assert any(dominated_by(steps, wait, pts, "steps") is None for steps, wait in front)
        start = min(r.arrival for r in reqs)
        for steps, wait in front:
            assert best_schedule(cfg, reqs, wait).last_step - start + 1 == steps
        assert best_schedule(cfg, reqs, min(w for _, w in front) - 1).last_step is None


@pytest.mark.parametrize("pair", PAIRS)
def test_every_policy_run_is_a_path_of_the_tree(pairs, pair):
    """The abstraction holds every rule's run: each policy, at each knob, run
    through the real core, replays move by move through the tree with its own
    steps, seconds (cost model) and worst wait (`experiments.online.replays`)."""
    cfg, x, y, _ = pairs[pair]
    for reqs in (x, y):
        assert replays(cfg, reqs) == []


@pytest.mark.parametrize("pair", PAIRS)
def test_fair_at_every_knob_is_dominated_on_one_of_each_pair(pairs, pair):
    """The consequence, on the frontier's own points (real core, cost model and
    steps): fair at each knob is dominated on X or on Y."""
    cfg, x, y, _ = pairs[pair]
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


@pytest.mark.parametrize("pair", PAIRS)
def test_a_pair_with_nothing_to_tell_apart_has_an_escape(pairs, pair):
    """X against itself: a rule that runs X's best schedule is undominated on
    both, and the judge says so (it is not a judge that always says ok)."""
    cfg, x, _, split = pairs[pair]
    assert judge(cfg, x, x, split).escapes > 0


@pytest.mark.parametrize("pair, needed", [(PAIRS[0], "drainer"), (PAIRS[1], "vtc")])
def test_without_its_best_field_policy_a_pair_proves_nothing(pairs, monkeypatch, pair, needed):
    """Each verdict rests on the field: the first pair on the drainer (at
    threshold 0: X's best schedule is its run, so at the default knob alone
    it proves nothing either), the second on vtc (Y's best schedule is vtc's
    run). Without that policy in the field, a rule may escape."""
    import experiments.online as online

    cfg, x, y, split = pairs[pair]
    monkeypatch.setattr(online, "field_points", lambda c, r, knobs: field_points(
        c, r, tuple(p for p in FIELD_POLICIES if p != needed), knobs))
    assert online.judge(cfg, x, y, split).escapes > 0
    monkeypatch.undo()
    if pair == PAIRS[0]:
        assert (21, 9) in {(p.steps, p.wait) for p in field_points(cfg, x) if (p.policy, p.knob) == ("drainer", 0)}
        assert judge(cfg, x, y, split, knobs=(DEFAULT_KNOB,)).escapes > 0
    else:
        assert (13, 5) in {(p.steps, p.wait) for p in field_points(cfg, y) if p.policy == "vtc"}


def test_a_tree_that_miscounts_a_step_fails_the_replay(pairs):
    """Planted: the tree's step cost forgets the prompt tokens; the seconds it
    gives vllm's run no longer match the cost model's."""
    cfg, x, _, _ = pairs[PAIRS[0]]

    class NoPrompts(Tree):
        def step_cost(self, tokens: int, seqs: int, adapters: int) -> float:
            return super().step_cost(0, seqs, adapters)

    pt, res = run_point(cfg, x, "vllm", None)
    _, cost, _ = NoPrompts(cfg, x, "seconds", (0, 0)).replay(res)
    assert cost != pytest.approx(pt.seconds, rel=1e-12)


def test_replays_names_the_runs_a_miscounting_tree_gets_wrong(pairs, monkeypatch):
    """Planted: the same forgotten prompt tokens, in the tree `replays` walks;
    it names runs (in seconds only: steps and waits do not read the cost)."""
    import experiments.online as online

    cfg, x, _, _ = pairs[PAIRS[0]]
    real = online.Tree.step_cost
    monkeypatch.setattr(online.Tree, "step_cost", lambda self, tokens, seqs, adapters: real(self, 0, seqs, adapters))
    bad = replays(cfg, x)
    assert bad and all("(seconds)" in b for b in bad), bad


def test_instances_that_differ_before_the_split_are_refused(pairs):
    cfg, x, y, split = pairs[PAIRS[0]]
    with pytest.raises(ValueError, match="differ in what arrives by step 9"):
        judge(cfg, x, y, split + 1)


@pytest.mark.xdist_group("bench_online")  # one worker computes the session fixture
def test_the_entry_points_judge_the_saved_pairs(bench_online, capsys):
    """`python -m experiments.online` and `python -m experiments.cli --online`: a line
    per case and measure, exit 0, and the verdicts as JSON under --out."""
    import json

    assert main([]) == 0
    out = capsys.readouterr().out
    for pair in PAIRS:
        assert f"pair {pair[0]} / {pair[1]}" in out
    assert out.count("... ok.") == len(CASES) * len(MEASURES)
    rc, cli_out, out_dir = bench_online
    assert rc == 0
    assert cli_out.split("(experiments.relief):")[0].count("... ok.") == len(CASES) * len(MEASURES)
    saved = json.loads((out_dir / "online.json").read_text())["verdicts"]
    assert [(tuple(v["pair"]), v["measure"], v["escapes"]) for v in saved] == \
        [(pair, m, 0) for pair, _ in CASES for m in MEASURES]
