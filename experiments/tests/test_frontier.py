"""The adversarial families and the frontier (fast checks; the figures are printed by
`python -m experiments.cli --adversarial / --frontier`, never asserted as goals here)."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from experiments.adversarial import Instance, climb, evaluate, known_instance, mutate
from experiments.cli import main as exp_main
from experiments.families import FAMILY_DIR, FamilyError, load
from experiments.frontier import dominated, points


def test_saved_families_reproduce_what_the_search_recorded():
    """Drift check: each family under experiments/families/ gives, run again, the ratio
    and waits recorded by the search that found it (a change to a policy or to
    the core that moves them must regenerate the families, on purpose)."""
    paths = sorted(FAMILY_DIR.glob("adv-*.json"))
    assert paths, "no adversarial families: run `python -m experiments.cli --adversarial`"
    for path in paths:
        name, cfg, reqs, raw = load(path)
        fb = raw["found_by"]
        ev = evaluate(Instance(cfg, tuple(reqs)), fb["policy"])
        assert ev.ratio == pytest.approx(fb["ratio_steps"]), name
        assert (ev.wait, ev.vllm_wait, ev.bound) == (fb["wait"], fb["vllm_wait"], fb["bound"]), name


def test_hill_climbing_never_loses_ground():
    """Each accepted mutation keeps or worsens the objective, so the climb ends at
    least as bad for the policy as it started (here: fair's throughput on the
    issue's known family)."""
    start = known_instance()
    rng = random.Random(3)
    _, ev = climb("fair", "throughput", start, rng, 15)
    assert ev.ratio <= evaluate(start, "fair").ratio


def test_mutations_stay_in_the_search_space():
    """From the known family and from one whose budget equals its seats (so
    any budget cut or seat increase would leave what vLLM accepts)."""
    rng = random.Random(5)
    known = known_instance()
    tight = Instance(replace(known.config, max_num_seqs=16, max_num_batched_tokens=16), known.requests)
    for inst in [known] * 200 + [tight] * 200:
        inst = mutate(inst, rng)
        assert 2 <= len(inst.requests) <= 48
        assert len({r.id for r in inst.requests}) == len(inst.requests)
        assert 1 <= inst.config.max_loras <= 4 and inst.config.max_num_batched_tokens >= 4
        # only configurations vLLM accepts (SchedulerConfig: budget >= seats)
        assert inst.config.max_num_batched_tokens >= inst.config.max_num_seqs


def test_dominance_is_strict_in_both_coordinates():
    pts = [{"policy": "a", "wait": 10, "ratio": 0.9}, {"policy": "b", "wait": 9, "ratio": 0.95},
           {"policy": "c", "wait": 9, "ratio": 0.9}, {"policy": "a", "wait": 1, "ratio": 1.0}]
    assert dominated(pts[0], pts) == [pts[1]]  # c ties on ratio; a's own points do not count
    # equal throughput computed in another order is a tie, not a win
    tie = [{"policy": "a", "wait": 10, "ratio": 1.0419350993130827},
           {"policy": "b", "wait": 5, "ratio": 1.0419350993130827 + 6.7e-16}]
    assert dominated(tie[0], tie) == []
    assert dominated(pts[1], pts) == [pts[3]]


def test_escape_is_what_takes_a_point_off_the_dominated_list():
    """`escape` gives the ratio (at the point's own wait) and the wait (at its own
    ratio) that end its domination, and nothing less would."""
    from experiments.frontier import escape

    pts = [{"policy": "a", "wait": 10, "ratio": 0.9}, {"policy": "b", "wait": 9, "ratio": 0.95},
           {"policy": "c", "wait": 7, "ratio": 0.92}, {"policy": "a", "wait": 1, "ratio": 1.0},
           # ties do not dominate, so they set no escape: as long a wait but faster, as fast but shorter
           {"policy": "d", "wait": 10, "ratio": 0.99}, {"policy": "e", "wait": 2, "ratio": 0.9}]
    me = pts[0]
    assert escape(me, pts) == (0.95, 7)
    assert not dominated({**me, "ratio": 0.95}, pts) and dominated({**me, "ratio": 0.949}, pts)
    assert not dominated({**me, "wait": 7}, pts) and dominated({**me, "wait": 8}, pts)


def test_frontier_points_on_a_family():
    """vllm is the reference (ratio 1); every knobbed policy has one point per knob."""
    inst = known_instance()
    pts = points(inst.config, list(inst.requests), policies=("vllm", "fair", "vtc"), knobs=(0, 16))
    assert [(p["policy"], p["knob"]) for p in pts] == [("vllm", None), ("fair", 0), ("fair", 16), ("vtc", None)]
    assert pts[0]["ratio"] == 1.0 and pts[0]["ratio_steps"] == 1.0
    assert all(p["wait"] >= 0 and p["ratio"] > 0 for p in pts)


@pytest.mark.parametrize("mutilate, field", [
    (lambda raw: raw.pop("config"), "config"),
    (lambda raw: raw["requests"][0].pop("max_tokens"), "max_tokens"),
    (lambda raw: raw["config"].update(max_loras=0), "max_loras"),
])
def test_bad_family_file_names_the_field(tmp_path, mutilate, field):
    raw = json.loads(next(FAMILY_DIR.glob("adv-*.json")).read_text())
    mutilate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(FamilyError, match=field) as exc:
        load(path)
    assert str(path) in str(exc.value)


def test_frontier_cli_rejects_a_bad_family_with_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    rc = exp_main(["--frontier", "--families-dir", str(tmp_path), "--out", str(tmp_path / "out"),
                   "--no-plots"])
    assert rc == 2
    assert "bad.json" in capsys.readouterr().out


def test_optimum_of_a_hand_solved_instance():
    """Two requests of different adapters, one LoRA slot, two seats, 2 steps
    each, both at step 1: the slot serialises them, so the best schedule ends
    at step 4 whatever the wait bound >= 2; a bound of 1 is infeasible (one of
    them must wait 2 steps), and the core's vllm agrees with the optimum."""
    from lora_sched.spec.config import Config
    from lora_sched.spec.request import Request

    from experiments.optimum import best_schedule, check_abstraction, reference_last_step

    cfg = Config(max_loras=1, max_num_seqs=2, max_num_batched_tokens=8)
    reqs = [Request("a", 1, 2, 2, 1), Request("b", 2, 2, 2, 1)]
    assert best_schedule(cfg, reqs, None).last_step == 4
    assert best_schedule(cfg, reqs, 2).last_step == 4
    assert best_schedule(cfg, reqs, 1).last_step is None
    check_abstraction(cfg, reqs)
    assert reference_last_step(cfg, reqs, "vllm") == (4, 2)


def test_optimum_search_matches_the_core_on_random_small_instances():
    """The abstraction's claim, checked: for random small instances inside it,
    the unbounded optimum is never later than vllm's run through the real core,
    and vllm's own worst wait as the bound is feasible by vllm's end."""
    from experiments.optimum import check_abstraction, small_instance, small_mutate

    rng = random.Random(11)
    for _ in range(12):
        cfg, reqs = small_instance(rng, n_max=7)
        for _ in range(3):
            cfg, reqs = small_mutate(cfg, reqs, rng, n_max=7)
        check_abstraction(cfg, reqs)


def test_adversarial_cli_narrows_the_search(tmp_path):
    """`--search-policies/--objectives/--suffix` run one (policy, objective) and
    name its family; an unknown name is an error (exit 2), not a silent no-op."""
    out = tmp_path / "out"
    assert exp_main(["--adversarial", "--search-policies", "vtc", "--objectives", "wait", "--iters", "2",
                     "--restarts", "1", "--suffix", "t", "--families-dir", str(tmp_path), "--out", str(out)]) == 0
    assert [p.name for p in tmp_path.glob("adv-*.json")] == ["adv-vtc-wait-t.json"]
    assert exp_main(["--adversarial", "--search-policies", "nope", "--families-dir", str(tmp_path),
                     "--out", str(out)]) == 2


def test_the_wider_space_is_reached_and_restored(tmp_path):
    """`--max-requests / --max-arrival` (`experiments.adversarial.widened`): inside,
    mutations grow a 48-request workload past 48 requests and arrivals past
    step 40, within the new limits; after, the default space is back (also
    after a CLI run)."""
    from experiments.adversarial import LIMITS, widened

    before = dict(LIMITS)
    full = known_instance()
    full = Instance(full.config, tuple(replace(r, id=f"r{i}", arrival=40)
                                       for i, r in enumerate((list(full.requests) * 2)[:48])))
    rng = random.Random(7)
    with widened(96, 200):
        sizes, arrivals = [], []
        inst = full
        for _ in range(400):
            inst = mutate(inst, rng)
            sizes.append(len(inst.requests))
            arrivals += [r.arrival for r in inst.requests]
        assert 48 < max(sizes) <= 96 and 40 < max(arrivals) <= 200
    assert LIMITS == before
    assert exp_main(["--adversarial", "--search-policies", "vtc", "--objectives", "wait", "--iters", "2",
                     "--restarts", "1", "--max-requests", "60", "--max-arrival", "80",
                     "--families-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert LIMITS == before


def test_reevaluate_measures_a_kept_family_again(tmp_path):
    """`bench --adversarial --reevaluate` rewrites a kept family's figures from
    a fresh run (here: figures planted wrong are put right) and refuses a
    family that a search owns (no `found_against`)."""
    from experiments.adversarial import reevaluate

    kept = json.loads((FAMILY_DIR / "adv-fairv4-throughput-deep.json").read_text())
    kept["found_by"].update(ratio_steps=0.1, wait=1, bound=1)
    path = tmp_path / "adv-kept.json"
    path.write_text(json.dumps(kept))
    row = reevaluate(path)
    _, cfg, reqs, raw = load(path)
    ev = evaluate(Instance(cfg, tuple(reqs)), "fair")
    assert (raw["found_by"]["ratio_steps"], raw["found_by"]["wait"], raw["found_by"]["bound"]) == \
        (ev.ratio, ev.wait, ev.bound) == (row["ratio_steps"], row["wait"], row["bound"])
    assert raw["description"].startswith("hill climbing (1500 x 4)")
    # a family found another way keeps saying how (found_by.method)
    kept["found_by"]["method"] = "written by hand"
    path.write_text(json.dumps(kept))
    reevaluate(path)
    assert load(path)[3]["description"].startswith("written by hand, worst throughput")
    owned = tmp_path / "adv-owned.json"
    owned.write_text((FAMILY_DIR / "adv-drainer-throughput.json").read_text())
    with pytest.raises(ValueError, match="found_against"):
        reevaluate(owned)


def test_annealing_stays_in_the_space_and_keeps_its_best():
    """`experiments.anneal` (the adversary's search) returns a workload inside the
    search space whose ratio is no worse than its start's; `in_space` rejects
    a config vLLM refuses and an off-default knob (so a move that leaves the
    space cannot be kept)."""
    from experiments.anneal import anneal, in_space

    _, cfg, reqs, _ = load(FAMILY_DIR / "adv-fairv5-throughput-mechanism.json")
    start = Instance(cfg, tuple(reqs))
    assert in_space(start)
    assert not in_space(Instance(replace(cfg, max_num_batched_tokens=cfg.max_num_seqs - 1), start.requests))
    assert not in_space(Instance(replace(cfg, starvation_steps=8), start.requests))
    best, score, ev = anneal(start, random.Random(0), 60, "throughput")
    assert in_space(best) and score == ev.ratio <= evaluate(start, "fair").ratio
    assert evaluate(best, "fair") == ev
