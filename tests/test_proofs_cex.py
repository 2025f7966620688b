"""Counterexamples: shortest traces, table, ITF JSON, emitted pytest case."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.cex import emit_test, write_itf


def test_blocking_hol_cex_is_shortest_and_replays(tmp_path: Path) -> None:
    r = engine.bmc(enc.Bounds(requests=3), "blocking", "no_hol_blocking", 3)
    assert r.verdict == "cex" and r.depth == 1 and r.replay_ok, r.detail
    assert r.cex is not None
    table = r.cex.table()
    assert "step   1:" in table and "admitted=" in table
    itf = tmp_path / "x.itf.json"
    write_itf(r.cex, str(itf))
    data = json.loads(itf.read_text())
    assert data["vars"][0] == "step" and data["states"][0]["#meta"] == {"index": 0}
    assert len(data["states"]) == r.depth + 1
    test_file = tmp_path / "test_emitted.py"
    emit_test(r.cex, str(test_file))
    spec = importlib.util.spec_from_file_location("test_emitted", test_file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.test_blocking_no_hol_blocking_replays()


def test_skip_breaks_running_cap_under_vllm() -> None:
    """The skipped-running question: an unscheduled running request's adapter
    is not counted, so a second adapter is admitted (depth 2)."""
    r = engine.bmc(enc.Bounds(requests=3, skip=True), "vllm", "running_lora_cap", 3)
    assert r.verdict == "cex" and r.depth == 2 and r.replay_ok, r.detail
    assert r.cex is not None and r.cex.skips


def test_skip_breaks_batch_cap_under_vllm() -> None:
    """...and one step later both adapters are scheduled together (depth 3):
    the reference hits vLLM's own `assert len(scheduled_loras) <= max_loras`."""
    r = engine.bmc(enc.Bounds(requests=3, skip=True), "vllm", "batch_lora_cap", 4)
    assert r.verdict == "cex" and r.depth == 3 and r.replay_ok, r.detail


def test_tight_wait_agrees_with_worst_wait() -> None:
    """The upward search (no completeness query, proved lemmas assumed) finds
    the same tight worst wait as the manifest's iterative tightening, and its
    witness waits that long in `policy/`."""
    from lora_sched.proofs.mutants import WAIT, WAIT_WORST

    from experiments.proofs_benchmark import tight_wait

    r = tight_wait(WAIT, "fair", 1)
    assert r.verdict == "proved" and r.worst == WAIT_WORST and r.replay_ok, r.detail


def test_worst_wait_is_the_same_wherever_its_search_starts() -> None:
    """`expect` (the manifest's recorded worst) is only where the tightening
    starts: below the true worst, at it, or above it (no trace reaches it, so
    the search starts again from 0), the worst wait and its replay agree."""
    from lora_sched.proofs.manifest import load

    c = next(c for c in load() if c.extra["name"] == "fair-wait-small")
    worst = {e: engine.worst_wait(c.bounds, c.policy, c.depth, c.wait_bound(), expect=e) for e in
             (None, 1, c.worst, c.worst + 3)}
    assert {e: (r.verdict, r.worst, r.replay_ok) for e, r in worst.items()} == \
        {e: ("proved", c.worst, True) for e in worst}
