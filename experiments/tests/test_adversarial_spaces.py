"""The adversarial search's spaces (`experiments.adversarial.SPACES`): finite KV, async,
the prefill throttle and the priority queue next to `base`.

Fast checks, no search: each space's draws and mutations stay in the space,
among configurations vLLM accepts, and the reference runs them (the axis
actually acts: pools preempt, steps are throttled, priorities differ); `base`
draws and mutates exactly as before the spaces existed (a pinned
fingerprint); the families found in the spaces load, name their space and
release, and evaluate; the CLI reaches a space. The `vllm`-marked test runs
vLLM's own scheduler on them in-process and replays its traces through the
reference. Figures and goals are printed by `python -m experiments.cli --adversarial
--goals`, never asserted here.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace

import pytest
from lora_sched.policy.driver import Workload, release, run
from lora_sched.spec import releases

from experiments.adversarial import (
    SPACES,
    Instance,
    accepts,
    evaluate,
    goal_rows,
    kv_range,
    mutate,
    random_instance,
    space_of,
)
from experiments.cli import main as exp_main
from experiments.families import FAMILY_DIR, load

NEW_SPACES = tuple(s for s in SPACES if s != "base")
SPACE_FAMILIES = sorted(p for p in FAMILY_DIR.glob("adv-*.json")
                        if json.loads(p.read_text())["found_by"].get("space", "base") != "base")
# sha256 of `base`'s random instance and 200 mutations from random.Random(20), as
# the search drew them before it had spaces (bench/adversarial.py at 6a5f690).
BASE_FINGERPRINT = "9e082813482bc29cc35781d69468556dd1281f6036ac3de37f4b1b25ac965f8d"


def _walk(space: str, seed: int, n: int) -> list[Instance]:
    rng = random.Random(seed)
    inst = random_instance(rng, space)
    out = [inst]
    for k in range(n):
        inst = random_instance(rng, space) if k % 25 == 24 else mutate(inst, rng, space)
        out.append(inst)
    return out


def test_base_space_draws_and_mutates_as_before():
    rng = random.Random(20)
    inst = random_instance(rng)
    seen = [inst]
    for _ in range(200):
        inst = mutate(inst, rng, "base")
        seen.append(inst)
    text = repr([((i.config.max_loras, i.config.max_num_seqs, i.config.max_num_batched_tokens),
                  [(r.id, r.adapter, r.prompt_tokens, r.max_tokens, r.arrival, r.priority) for r in i.requests])
                 for i in seen])
    assert hashlib.sha256(text.encode()).hexdigest() == BASE_FINGERPRINT
    assert all(space_of(i.config) == "base" for i in seen)


@pytest.mark.parametrize("space", NEW_SPACES)
def test_space_stays_in_the_space_vllm_accepts_and_the_reference_runs(space):
    acts = 0
    priorities: set[int] = set()
    for inst in _walk(space, 3, 60):
        cfg = inst.config
        assert space_of(cfg) == space and accepts(inst), cfg
        assert cfg.max_num_batched_tokens >= cfg.max_num_seqs  # vLLM's SchedulerConfig
        assert cfg.vllm == releases.NEWEST  # no --vllm override: the newest, as bench simulates
        assert 2 <= len(inst.requests) <= 48 and len({r.id for r in inst.requests}) == len(inst.requests)
        if space == "kv":
            lo, hi = kv_range(cfg, inst.requests)
            assert lo <= cfg.kv_blocks <= hi and cfg.block_size in (4, 8, 16)
        if space == "throttle":
            assert 2 <= cfg.prefill_schedule_interval <= 4
        if space == "priority":
            assert cfg.queue == "priority" and all(0 <= r.priority <= 2 for r in inst.requests)
            priorities |= {r.priority for r in inst.requests}
        for policy in ("vllm", "fair"):
            res = run(cfg, Workload(list(inst.requests)), policy=policy)
            assert res.scheduler.state.finished == {r.id for r in inst.requests}
            if policy == "vllm":
                acts += any(r.preempted for r in res.records) if space == "kv" else \
                    any(r.throttle for r in res.records) if space == "throttle" else 1
        ev = evaluate(inst, "fair")
        assert ev.ratio > 0 and ev.wait >= 0 and ev.bound > 0
    assert acts >= 20, f"{space}: the axis acted on {acts} of 61 instances"
    if space == "priority":
        assert priorities == {0, 1, 2}


def test_a_space_records_the_release_it_runs_under():
    with release("0.32"):
        assert random_instance(random.Random(1), "async").config.vllm == "0.32"
    assert random_instance(random.Random(1), "async").config.vllm == releases.NEWEST


def test_space_families_load_name_their_space_and_evaluate(tmp_path):
    assert len(SPACE_FAMILIES) >= 8, [p.name for p in SPACE_FAMILIES]
    found = set()
    for path in SPACE_FAMILIES:
        name, cfg, reqs, raw = load(path)
        fb = raw["found_by"]
        inst = Instance(cfg, tuple(reqs))
        assert space_of(cfg) == fb["space"] and accepts(inst), name
        assert cfg.vllm == fb["vllm"], name
        assert fb["found_against"] in ("fair v7", "fair v8", "fair v9", "fair v10", "fair v12"), name
        version = fb["found_against"].split()[1]
        stem = f"adv-fair{version}-{fb['space']}-{fb['objective']}"
        assert name == path.stem and (name == stem or name.startswith(stem + "-")), name  # `--suffix` ends some
        ev = evaluate(inst, fb["policy"])
        assert (ev.ratio, ev.wait, ev.vllm_wait) == pytest.approx((fb["ratio_steps"], fb["wait"], fb["vllm_wait"]))
        found.add((fb["space"], fb["objective"]))
        (tmp_path / path.name).write_text(path.read_text())
    assert found >= {(s, o) for s in NEW_SPACES for o in ("throughput", "wait")}
    rows = goal_rows(tmp_path, coded=False)
    assert {r["family"] for r in rows} == {p.stem for p in SPACE_FAMILIES}
    by = {r["family"]: r for r in rows}
    assert all(r["space"] != "base" for r in rows)
    # v10 was designed on the families found against v7, v8 and v9, v12 on every throttle-space family
    # before it; the other searches against v10, and those against v12, are held out
    assert all(r["design"] == (not any(v in name for v in ("fairv10", "fairv12")) or "fairv10-throttle" in name)
               for name, r in by.items())
    assert all(set(r["field"]) == {"drainer", "timeslice"} for r in rows)


def test_cli_searches_a_space_and_names_the_family(tmp_path):
    assert exp_main(["--adversarial", "--space", "priority", "--search-policies", "fair",
                     "--objectives", "wait", "--iters", "2", "--restarts", "1", "--found-against", "fair v7",
                     "--families-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    [path] = tmp_path.glob("adv-*.json")
    assert path.name == "adv-fairv7-priority-wait.json"
    _, cfg, _, raw = load(path)
    assert cfg.queue == "priority" and cfg.vllm == releases.NEWEST
    assert raw["found_by"]["space"] == "priority" and raw["found_by"]["found_against"] == "fair v7"
    with pytest.raises(SystemExit):
        exp_main(["--adversarial", "--space", "nope", "--families-dir", str(tmp_path)])


@pytest.mark.vllm
def test_vllm_runs_the_space_families_and_random_instances(tmp_path):
    """vLLM's own scheduler (in-process, the installed release) accepts every
    space family and a few random instances of each space, and its traces
    replay step for step through the reference, for vllm and fair."""
    from inprocess_cases import conform

    cases = [load(p)[1:3] for p in SPACE_FAMILIES]
    for space in NEW_SPACES:
        cases += [(i.config, list(i.requests)) for i in _walk(space, 9, 40)[::20]]
    for cfg, reqs in cases:
        for policy in ("vllm", "fair"):
            out = conform(replace(cfg, policy=policy), Workload(list(reqs)), tmp_path / "t.jsonl", policy=policy)
            assert out.replay.ok, f"{cfg}\n{out.replay.describe()}"
            assert out.replay.matched > 0


def test_goals_cli_prints_both_sets(tmp_path, capsys):
    """`bench --adversarial --goals`: the coded families and those of the
    directory, split into design (every family saved before fair v10, and
    the throttle-space ones found against it) and held out (the others found
    against v10, and those found against v12), each row with its verdict;
    under the table, the relief pairs that break each half of the goal for
    every online rule that halves a starving workload's wait."""
    from experiments.families import coded_families

    for name in ("adv-fairv10-wait.json", "adv-fairv8-async-wait.json", "adv-fairv5-wait.json"):
        (tmp_path / name).write_text((FAMILY_DIR / name).read_text())
    assert exp_main(["--adversarial", "--goals", "--families-dir", str(tmp_path),
                     "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"Design set: {len(coded_families()) + 2} of {len(coded_families()) + 2} ok." in out
    assert "adv-fairv8-async-wait" in out.split("Held-out set: ")[0]
    assert "Held-out set: 1 of 1 ok." in out
    assert "adv-fairv10-wait" in out.split("Held-out set: ")[1]
    assert ("goals conflict on adv-relief-floor, online: relief on X against throughput >= 0.8 of vllm's on Y... "
            "yes.") in out
    assert ("goals conflict on adv-relief-ceiling, online: relief on X against max wait <= 1.25x vllm's + 16 on Y... "
            "yes.") in out
    saved = json.loads((tmp_path / "out" / "search.json").read_text())
    assert [u["goals_conflict"] for u in saved["unreachable"]] == [True, True]


def test_counting_s_in_prefill_cadences_is_what_keeps_the_throttle_family_at_vllms_throughput():
    """v12's change, measured against the planted v11 (S counted in steps):
    on the throttle-space family found against v10 (0.33's prefill cadence
    of 4, one slot, three seats) fair with S = 16 cadences (64 steps) drains
    in vllm's steps with vllm's worst wait, while S = 16 steps switches the
    slot four times as often and drains at 0.65 of vllm's throughput, below
    issue 20's 0.8."""
    from planted import StepsWindowGate

    _, cfg, reqs, _ = load(FAMILY_DIR / "adv-fairv10-throttle-throughput.json")
    cfg = replace(cfg, policy="fair")
    assert cfg.prefill_schedule_interval == 4 and cfg.starvation_steps == 16
    vllm = run(replace(cfg, policy="vllm"), Workload(list(reqs)), policy="vllm")
    v12 = run(cfg, Workload(list(reqs)), policy="fair")
    v11 = run(cfg, Workload(list(reqs)), gate=StepsWindowGate())
    assert v12.last_step == vllm.last_step and max(v12.waits().values()) == max(vllm.waits().values()) == 345
    start = min(r.arrival for r in reqs)
    ratio = (vllm.last_step - start + 1) / (v11.last_step - start + 1)
    assert ratio < 0.8 and max(v11.waits().values()) == 534, ratio
