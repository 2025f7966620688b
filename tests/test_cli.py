"""`lora-sched simulate` writes traces that `lora-sched check --policy P` accepts.

For each policy and scenario, the simulated trace replays through the same
reference policy with zero divergence. `check` exits 0 only when every
property holds: `vllm` and `fair` pass on the seed example; `blocking` exits 1
because the seed example is exactly its head-of-line blocking. The verdicts
are read from `check --json`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lora_sched.spec.properties import ALL_PROPERTIES
from verdicts import verdicts as parse_verdicts

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lora_sched.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def simulate_and_check(tmp_path: Path, policy: str, scenario: str) -> tuple[int, dict]:
    """Simulate, then `check --json --policy`: (exit code, verdicts); the replay must match."""
    out = tmp_path / f"{policy}-{scenario}.jsonl"
    sim = cli("simulate", "--policy", policy, "--scenario", scenario, "--out", str(out))
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert f"trace written to {out}" in sim.stdout
    chk = cli("check", str(out), "--policy", policy, "--json")
    assert "Traceback" not in chk.stdout + chk.stderr
    res = parse_verdicts(chk.stdout, chk.returncode)
    assert (res["version"], res["tool"], res["command"]) == (1, "lora-sched", "check")
    rep = res["replay"]
    assert rep["policy"] == policy and rep["verdict"] == "ok", rep
    assert rep["matched"] == rep["steps"] > 0, rep
    return chk.returncode, res


def verdicts(res: dict) -> dict[str, dict]:
    return {r["property"]: r for r in res["results"]}


@pytest.mark.parametrize("policy", ["vllm", "fair"])
def test_simulate_then_check_passes(tmp_path, policy):
    """`vllm` and `fair` on the seed: every property ok, replay matches, exit 0."""
    code, res = simulate_and_check(tmp_path, policy, "seed")
    assert code == 0, res
    v = verdicts(res)
    assert list(v) == ALL_PROPERTIES
    assert all(r["verdict"] == "ok" for r in v.values()), v
    assert res["ok"] is True


def test_blocking_check_reports_hol_blocking(tmp_path):
    """`blocking` on the seed replays exactly but violates no_hol_blocking at
    its first step (R12 and R13 wait behind R8-L5): check exits 1."""
    code, res = simulate_and_check(tmp_path, "blocking", "seed")
    assert code == 1, res
    v = verdicts(res)
    hol = v["no_hol_blocking"]
    assert hol["verdict"] == "violated" and hol["step"] == 1 and hol["line"] > 1, hol
    assert hol["message"].split()[0].strip("'") in {"R12", "R13", "R14-L1", "R15-L2", "R16-L3"}, hol
    for prop in ("batch_lora_cap", "running_lora_cap", "capacity", "conservation", "fifo_within_adapter"):
        assert v[prop]["verdict"] == "ok", v[prop]
    assert res["ok"] is False


def test_starvation_scenario_replays(tmp_path):
    """The starvation scenario replays with zero divergence for every policy;
    under `vllm` the adapter-3 request waits for the whole stream (the worst
    wait), `fair` admits it much sooner and keeps bounded_wait."""
    waits = {}
    for policy in ("blocking", "vllm", "fair"):
        _, res = simulate_and_check(tmp_path, policy, "starvation")
        waits[policy] = (res["worst_wait"]["steps"], res["worst_wait"]["request"])
        if policy == "fair":
            assert verdicts(res)["bounded_wait"]["verdict"] == "ok", res
    wait, who = waits["vllm"]
    assert who == "victim-a3" and wait >= 30, waits
    assert waits["fair"][0] < wait, waits


def test_check_replay_against_another_policy_diverges(tmp_path):
    """Replaying a `vllm` seed trace through `blocking` shows the first divergence
    (step 1's admissions differ) and exits 1: the replay can fail."""
    out = tmp_path / "vllm.jsonl"
    assert cli("simulate", "--policy", "vllm", "--out", str(out)).returncode == 0
    chk = cli("check", str(out), "--policy", "blocking", "--json")
    assert chk.returncode == 1
    rep = parse_verdicts(chk.stdout, chk.returncode)["replay"]
    assert rep["verdict"] == "diverged" and rep["matched"] == 0 and rep["step"] == 1, rep
    assert rep["field"] in ("scheduled", "admitted"), rep
    text = cli("check", str(out), "--policy", "blocking")
    assert text.returncode == 1 and "replay against blocking ... DIVERGED after 0/" in text.stdout
