"""`experiments.knobs`: issue 20's goals at each value of S.

The sweep must measure fair at the S it names, everywhere: the saved
families (`goal_rows(knob=S)`), the fresh searches (instances drawn and
climbed at S) and the realistic grid (`goals(point=("fair", S))`). Each
check compares against a run made here, outside the code under test, and
fails if a part ignored the knob (S = 16, the default, would be measured
instead). Speed is never asserted.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

from lora_sched.bench import realistic as R
from lora_sched.bench.simulate import simulate_policy

from experiments import goals as G
from experiments import knobs
from experiments.adversarial import GOAL_RATIO, GOAL_WAIT, goal_rows
from experiments.cli import main as exp_main
from experiments.families import FAMILY_DIR, coded_families, load

# A family whose worst wait under fair moves with S (16: 84 steps, 48: 93; vllm 107).
FAMILY = "adv-fairv9-kv-throughput"


def _worst(cfg, reqs, policy: str) -> int:
    return max(simulate_policy(cfg, reqs, policy).waits.values())


def test_saved_families_are_judged_at_the_knob(tmp_path):
    (tmp_path / f"{FAMILY}.json").write_text((FAMILY_DIR / f"{FAMILY}.json").read_text())
    _, cfg, reqs, _ = load(tmp_path / f"{FAMILY}.json")
    vllm = _worst(cfg, reqs, "vllm")
    waits = {}
    for s in (16, 48):
        [row] = goal_rows(tmp_path, coded=False, knob=s)
        waits[s] = _worst(replace(cfg, starvation_steps=s), reqs, "fair")
        assert (row["wait"], row["vllm_wait"]) == (waits[s], vllm)
        assert row["wait_ok"] == (waits[s] <= GOAL_WAIT * vllm + s)  # the goal's "+ S" is the knob
        assert row["ratio_ok"] == (row["ratio"] >= GOAL_RATIO)
        assert set(row["field"]) == {"drainer", "timeslice"}
    assert waits[16] != waits[48]  # else this test could not tell the knob was ignored


def test_fresh_searches_climb_at_the_knob_and_judge_there():
    rows = knobs.fresh(40, 1, iters=4, restarts=1, spaces=("base", "kv"))
    assert {r["family"] for r in rows} == {"adv-fairS40-throughput", "adv-fairS40-wait",
                                          "adv-fairS40-kv-throughput", "adv-fairS40-kv-wait"}
    assert all(r["knob"] == 40 and r["seed"] == 1 for r in rows)
    for r in rows:
        assert r["ok"] == (r["ratio_ok"] and r["wait_ok"])
        assert r["wait_ok"] == (r["wait"] <= GOAL_WAIT * r["vllm_wait"] + 40)
    s = knobs.summary(rows)
    assert s["of"] == 4 and s["ok"] == sum(r["ok"] for r in rows)
    bad = copy.deepcopy(rows)
    bad[0].update(ok=False, ratio=0.5)
    assert knobs.summary(bad)["ok"] == s["ok"] - rows[0]["ok"] and len(knobs.summary(bad)["misses"]) >= 1


def test_realistic_goals_read_the_knobs_row():
    spec = replace(R.grid()[0], requests=40, adapters=4, load=1.0, unit="seats")
    pts = (("vllm", None), ("fair", 16), ("fair", 64), ("drainer", 16), ("timeslice", 16), ("vtc", None))
    rows = R.run_grid([spec], pts, processes=1, progress=lambda m: None)
    bad = copy.deepcopy(rows)
    vmax = next(r["max"] for r in rows if r["policy"] == "vllm")
    for r in bad:
        if r["point"] == "fair S=64":
            r["max"] = vmax + 1
    at16 = dict((g, m) for g, m, _ in G.goals(bad, point=("fair", 16)))
    at64 = dict((g, m) for g, m, _ in G.goals(bad, point=("fair", 64)))
    assert at16["max wait never above vllm's"] == all(
        r["max"] <= vmax for r in rows if r["point"] == "fair S=16")
    assert not at64["max wait never above vllm's"]


def test_cli_prints_the_sweep_and_writes_it(tmp_path, monkeypatch, capsys):
    """`bench --knob-goals` end to end, on a small sweep (`_small_sweep`)."""
    fams = tmp_path / "fams"
    fams.mkdir()
    (fams / f"{FAMILY}.json").write_text((FAMILY_DIR / f"{FAMILY}.json").read_text())
    monkeypatch.setattr(knobs, "sweep", _small_sweep(fams))
    assert exp_main(["--knob-goals", "16,48", "--knob-seeds", "1", "--iters", "2", "--restarts", "1",
                     "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "issue 20's goals at each S" in out
    doc = json.loads((tmp_path / "out" / "knob-goals.json").read_text())
    assert doc["knobs"] == [16, 48] and set(doc["by_knob"]) == {"16", "48"}
    for e in doc["by_knob"].values():
        assert e["saved_design"]["of"] + e["saved_held_out"]["of"] == 1 + len(coded_families())
        assert len(e["realistic_design"]) == 7


def _small_sweep(fams):
    """`knobs.sweep` on one family, one space and a 30-request realistic workload."""
    real = knobs.sweep
    spec = replace(R.grid()[0], requests=30, adapters=4, load=1.0, unit="seats")

    def small(knob_values, seeds, *, iters, restarts, progress):
        return real(knob_values, seeds, iters=iters, restarts=restarts, directory=fams, specs=[spec],
                    spaces=("base",), processes=1, progress=progress)
    return small


def test_cli_realistic_knob_goals_runs_the_grid_it_names(tmp_path, monkeypatch, capsys):
    """`bench --realistic --knob-goals 16,48 --large --draw 21`: only the
    realistic part, on the grid the flags name (shrunk here to two small
    workloads of it), fair run at each S; a fresh draw has no design set."""
    real_grid = R.grid
    calls = []

    def small_grid(**kw):
        calls.append(kw)
        return [replace(s, requests=60, adapters=8, load=1.5, max_loras=2) for s in real_grid(**kw)[:2]]
    monkeypatch.setattr(R, "grid", small_grid)
    assert exp_main(["--realistic", "--knob-goals", "16,48", "--large", "--draw", "21",
                     "--out", str(tmp_path)]) == 0
    assert calls == [{"large": True, "draw": 21}]
    out = capsys.readouterr().out
    assert "realistic goals at each S: 2 workloads, draw 21" in out and "saved families" not in out
    doc = json.loads((tmp_path / "knob-realistic-large-d21.json").read_text())
    assert (tmp_path / "knob-realistic-large-d21.png").exists()
    assert doc["knobs"] == [16, 48] and set(doc["by_knob"]) == {"16", "48"}
    for e in doc["by_knob"].values():
        assert "realistic_design" not in e and len(e["realistic_held_out"]) == 7
    specs = small_grid(large=True, draw=21)
    worst = {}
    for s in (16, 48):  # each S's rows are fair's own run at that S, made here outside the sweep
        for spec in specs:
            run = simulate_policy(spec.config(starvation_steps=s), R.workload(spec), "fair")
            [row] = [r for r in doc["rows"] if r["workload"] == spec.name and r["point"] == f"fair S={s}"]
            assert row["max"] == worst.setdefault((s, spec.name), max(run.waits.values()))
    assert worst[16, specs[1].name] != worst[48, specs[1].name]  # else a knob ignored would pass


def test_large_and_draw_are_refused_outside_realistic(capsys):
    for flags in (["--large"], ["--draw", "21"]):
        assert exp_main(["--knob-goals", "16", *flags]) == 2
        assert "--large and --draw choose the grid of --realistic" in capsys.readouterr().out
