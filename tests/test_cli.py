"""`lora-sched simulate` writes traces that `lora-sched check --policy P` accepts.

For each policy and scenario, the simulated trace replays through the same
reference policy with zero divergence. `check` exits 0 only when every
property holds: `vllm` and `fair` pass on the seed example; `blocking` exits 1
because the seed example is exactly its head-of-line blocking.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lora_sched.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def simulate_and_check(tmp_path: Path, policy: str, scenario: str) -> subprocess.CompletedProcess:
    out = tmp_path / f"{policy}-{scenario}.jsonl"
    sim = cli("simulate", "--policy", policy, "--scenario", scenario, "--out", str(out))
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert f"trace written to {out}" in sim.stdout
    chk = cli("check", str(out), "--policy", policy)
    assert "Traceback" not in chk.stdout + chk.stderr
    m = re.search(rf"^replay against {policy} \.\.\. ok \((\d+)/(\d+) steps matched\)$", chk.stdout, re.M)
    assert m and m[1] == m[2] and int(m[1]) > 0, chk.stdout
    return chk


@pytest.mark.parametrize("policy", ["vllm", "fair"])
def test_simulate_then_check_passes(tmp_path, policy):
    """`vllm` and `fair` on the seed: every property line ok, replay matches, exit 0."""
    chk = simulate_and_check(tmp_path, policy, "seed")
    assert chk.returncode == 0, chk.stdout
    for prop in ("batch_lora_cap", "running_lora_cap", "capacity", "conservation",
                 "fifo_within_adapter", "no_hol_blocking"):
        assert re.search(rf"^{prop} \.\.\. ok$", chk.stdout, re.M), chk.stdout
    assert chk.stdout.rstrip().splitlines()[-2] == "all ok!"


def test_blocking_check_reports_hol_blocking(tmp_path):
    """`blocking` on the seed replays exactly but violates no_hol_blocking at
    its first step (R12 and R13 wait behind R8-L5): check exits 1."""
    chk = simulate_and_check(tmp_path, "blocking", "seed")
    assert chk.returncode == 1, chk.stdout
    m = re.search(r"^no_hol_blocking \.\.\. VIOLATED at step 1: '(R\d+(-L\d+)?)'", chk.stdout, re.M)
    assert m, chk.stdout
    assert m[1] in {"R12", "R13", "R14-L1", "R15-L2", "R16-L3"}
    for prop in ("batch_lora_cap", "running_lora_cap", "capacity", "conservation", "fifo_within_adapter"):
        assert re.search(rf"^{prop} \.\.\. ok$", chk.stdout, re.M), chk.stdout
    assert "FAILED" in chk.stdout


def _worst_wait(stdout: str) -> tuple[int, str]:
    m = re.search(r"^worst wait before first admission: (\d+) steps \((\S+)\)$", stdout, re.M)
    assert m, stdout
    return int(m[1]), m[2]


def test_starvation_scenario_replays(tmp_path):
    """The starvation scenario replays with zero divergence for every policy;
    under `vllm` the adapter-3 request waits for the whole stream (the worst
    wait), `fair` admits it much sooner and keeps bounded_wait."""
    waits = {}
    for policy in ("blocking", "vllm", "fair"):
        chk = simulate_and_check(tmp_path, policy, "starvation")
        waits[policy] = _worst_wait(chk.stdout)
        if policy == "fair":
            assert re.search(r"^bounded_wait \.\.\. ok", chk.stdout, re.M), chk.stdout
    wait, who = waits["vllm"]
    assert who == "victim-a3" and wait >= 30, waits
    assert waits["fair"][0] < wait, waits


def test_check_replay_against_another_policy_diverges(tmp_path):
    """Replaying a `vllm` seed trace through `blocking` shows the first divergence
    (step 1's admissions differ) and exits 1: the replay can fail."""
    out = tmp_path / "vllm.jsonl"
    assert cli("simulate", "--policy", "vllm", "--out", str(out)).returncode == 0
    chk = cli("check", str(out), "--policy", "blocking")
    assert chk.returncode == 1
    assert re.search(r"^replay against blocking \.\.\. DIVERGED after 0/\d+ steps matched at step 1", chk.stdout,
                     re.M), chk.stdout
