"""`python -m experiments.prove_sweep`: its catalogue and its exit rule, without Ray or Z3 runs."""

from __future__ import annotations

from lora_sched.proofs import encoding as enc
from lora_sched.proofs.checks import Check
from lora_sched.proofs.manifest import load

from experiments.prove_sweep import catalogue, verdict_code


def test_catalogue_is_the_manifest_then_nine_sweep_points():
    checks, manifest = catalogue(), load()
    assert checks[:len(manifest)] == manifest
    sweep = checks[len(manifest):]
    points = {c.extra["name"] for c in sweep}
    assert len(points) == 9 and all(p.startswith("sweep ") for p in points)
    assert all(c.method in ("kind", "bmc") and not c.bounds.skip for c in sweep)
    # blocking's head-of-line blocking is an expected counterexample at every point
    assert {c.extra["name"] for c in sweep if c.policy == "blocking" and c.expect == "cex"} == points


def test_verdict_code_follows_prove_exit_rule():
    proved = Check("fair", "capacity", "kind", enc.Bounds(), 3, "proved")
    cex = Check("blocking", "no_hol_blocking", "bmc", enc.Bounds(), 4, "cex")
    assert verdict_code(proved, {"verdict": "proved", "worst": None, "replay_ok": None}) == 0
    assert verdict_code(cex, {"verdict": "cex", "worst": None, "replay_ok": True}) == 0
    assert verdict_code(cex, {"verdict": "cex", "worst": None, "replay_ok": False}) == 1
    assert verdict_code(cex, {"verdict": "holds", "worst": None, "replay_ok": None}) == 1
    assert verdict_code(proved, {"verdict": "unknown", "worst": None, "replay_ok": None}) == 2
