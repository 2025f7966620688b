"""Re-run every check of proofs/manifest.json; any verdict drift fails.

Violations a policy must have (blocking's head-of-line blocking, vllm's
starvation, the skipped-running counterexamples) are found by the search and
must replay in `policy/` with the same violation. The drift rule is
`proofs.manifest.drift`, the one `lora-sched prove --manifest` applies; the
CLI tests below show that mode exiting 0 on a manifest that matches and 1 on
one with a planted drift, and plain `prove` exiting 1 on a violation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lora_sched.proofs.checks import Check, run_check
from lora_sched.proofs.manifest import MANIFEST, drift, load
from verdicts import verdicts

ROOT = Path(__file__).resolve().parent.parent
CHECKS = load()


@pytest.mark.parametrize("check", CHECKS, ids=[c.extra["name"] for c in CHECKS])
def test_manifest_verdict(check: Check) -> None:
    r = run_check(check)
    assert drift(check, r) is None, f"{check.label}: {drift(check, r)}"
    if r.verdict == "cex":  # an unbounded entry's witness is a sat trace, replayed
        assert (r.cex is not None or check.method == "unbounded") and r.replay_ok


def prove(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "lora_sched.cli", "prove", *args, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    out = verdicts(proc.stdout, proc.returncode)
    assert (out["version"], out["tool"], out["command"]) == (1, "lora-sched", "prove")
    return proc.returncode, out


def small_manifest(tmp_path: Path, expect: str) -> str:
    """The manifest's blocking-hol entry alone, expecting `expect`."""
    with open(MANIFEST) as f:
        raw = json.load(f)
    entry = next(e for e in raw["checks"] if e["name"] == "blocking-hol")
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({**raw, "checks": [{**entry, "expect": expect}]}))
    return str(path)


def test_prove_manifest_mode_exits_0_when_verdicts_match(tmp_path):
    """The entry's violation is expected there: no drift, exit 0, though a property is violated."""
    code, out = prove("--manifest", small_manifest(tmp_path, "cex"))
    assert code == 0, out
    (r,) = out["results"]
    assert (out["mode"], out["ok"]) == ("manifest", True)
    assert (r["name"], r["verdict"], r["expected"], r["drift"]) == ("blocking-hol", "violated", "violated", None)
    assert r["replayed"] is True and r["witness"]["#meta"]["policy"] == "blocking"


def test_prove_manifest_mode_exits_1_on_drift(tmp_path):
    """A planted drift (the manifest says blocking holds) is reported and exits 1."""
    code, out = prove("--manifest", small_manifest(tmp_path, "holds"))
    assert code == 1, out
    (r,) = out["results"]
    assert out["ok"] is False and r["expected"] == "holds" and r["verdict"] == "violated"
    assert r["drift"].startswith("verdict cex, manifest expects holds"), r


def test_prove_exits_1_on_any_violation(tmp_path):
    """Plain `prove` exits 1 on a violation, even one the catalogue expects
    (vllm's starvation lasso), and points at the witness it wrote."""
    code, out = prove("--policy", "vllm", "--property", "bounded_wait", "--itf-dir", str(tmp_path))
    assert code == 1, out
    (r,) = out["results"]
    assert (r["method"], r["verdict"], r["replayed"]) == ("lasso", "violated", True), r
    itf = json.loads(Path(r["itf"]).read_text())
    assert itf["#meta"]["property"] == "bounded_wait" and itf["#meta"]["lasso"]["victim"]


def test_prove_exits_0_when_proved():
    """A k-induction proof exits 0 with verdict proved."""
    code, out = prove("--policy", "fair", "--property", "capacity", "--requests", "3")
    assert code == 0, out
    (r,) = out["results"]
    assert (r["verdict"], r["method"]) == ("proved", "kind") and out["ok"] is True


def test_drift_reports_a_changed_fingerprint() -> None:
    """A verdict that stays the same but is found at another depth is drift."""
    from lora_sched.proofs import engine

    entry = next(c for c in CHECKS if c.extra["name"] == "vllm-throttle-batch")
    assert entry.extra["fingerprint"] == {"depth": 3}
    r = run_check(entry)
    assert drift(entry, r) is None
    deeper = engine.Result(r.policy, r.property, r.verdict, r.depth + 1, r.seconds, r.cex, r.detail,
                           replay_ok=r.replay_ok)
    assert drift(entry, deeper) == "fingerprint depth = 4, manifest records 3"
