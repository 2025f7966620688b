"""Re-run every check of proofs/manifest.json; any verdict drift fails.

Violations a policy must have (blocking's head-of-line blocking, vllm's
starvation, the skipped-running counterexamples) are found by the search and
must replay in `policy/` with the same violation.
"""

from __future__ import annotations

import pytest

from proofs.checks import Check, run_check
from proofs.manifest import drift, load

CHECKS = load()


@pytest.mark.parametrize("check", CHECKS, ids=[c.extra["name"] for c in CHECKS])
def test_manifest_verdict(check: Check) -> None:
    r = run_check(check)
    assert r.verdict == check.expect, f"{check.label}: {r.verdict} ({r.detail} {r.reason})"
    if r.verdict == "cex":
        assert r.cex is not None and r.replay_ok, f"counterexample does not replay: {r.detail}"
    if check.worst is not None:
        assert r.worst == check.worst, f"worst wait {r.worst} != manifest {check.worst}"
        assert r.replay_ok, f"worst-wait witness does not replay: {r.detail}"


def test_drift_reports_a_changed_fingerprint() -> None:
    """A verdict that stays the same but is found at another depth is drift."""
    from proofs import engine

    entry = next(c for c in CHECKS if c.extra["name"] == "vllm-throttle-batch")
    assert entry.extra["fingerprint"] == {"depth": 3}
    r = run_check(entry)
    assert drift(entry, r) is None
    deeper = engine.Result(r.policy, r.property, r.verdict, r.depth + 1, r.seconds, r.cex, r.detail,
                           replay_ok=r.replay_ok)
    assert drift(entry, deeper) == "fingerprint depth = 4, manifest records 3"
