"""vLLM 0.34's cache-aware admission window, through the finding's standalone script.

`docs/findings/vllm-0.34-cache-aware-admission.py` drives vLLM's own
`Scheduler` in-process with prefix caching and `cache_aware_admission_window`
on (`docs/findings.md`, "vLLM 0.34: the cache-aware admission window ...").
On 0.34 the stock window breaks FIFO within an adapter and a cold request's
wait grows with the stream of cached arrivals behind it (exit 1); window 0
and the proposed fix keep both (exit 0). Releases before 0.34 have no such
field, so the hazard cannot arise there: the script says so and exits 0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.full]  # a finding's script, not the package: make test-full

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "findings" / "vllm-0.34-cache-aware-admission.py"
STREAMS = (10, 20, 40)


def _has_window() -> bool:
    from vllm.config import SchedulerConfig

    return "cache_aware_admission_window" in {f.name for f in dataclasses.fields(SchedulerConfig)}


def _assert_absent() -> None:
    """Before 0.34: no window in the config, no reorder in the scheduler."""
    from vllm.config import SchedulerConfig
    from vllm.v1.core.sched.scheduler import Scheduler

    assert "cache_aware_admission_window" not in {f.name for f in dataclasses.fields(SchedulerConfig)}
    assert not hasattr(Scheduler, "_reorder_waiting_by_cached_prefix")


def _run(*args: str) -> tuple[int, str, dict]:
    from lora_sched.conformance.assets import ensure_assets

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", VLLM_TARGET_DEVICE="cpu")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(ensure_assets(0).model),
         "--streams", ",".join(map(str, STREAMS)), *args],
        capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout
    m = re.search(r"^RESULT fifo=(\w+) waits=(\S+) wait=(\w+)$", out, re.M)
    result = {}
    if m:
        result = {"fifo": m.group(1), "wait": m.group(3),
                  "waits": {int(n): int(w) for n, w in (p.split(":") for p in m.group(2).split(","))}}
    return proc.returncode, out + proc.stderr, result


@pytest.fixture(scope="module")
def has_window() -> bool:
    return _has_window()


def test_stock_window_breaks_fifo_and_starves_a_cold_request(has_window):
    if not has_window:
        _assert_absent()
        rc, out, _ = _run()
        assert rc == 0, out
        assert "has no cache_aware_admission_window" in out
        return
    rc, out, res = _run()
    assert rc == 1, out
    assert res["fifo"] == "broken", out
    assert re.search(r"actual:\s+new admitted first \(old at step (\d+), new at step (\d+)\)", out), out
    old_step, new_step = map(int, re.search(r"old at step (\d+), new at step (\d+)", out).groups())
    assert new_step < old_step  # the newer request of the same adapter went first
    waits = [res["waits"][n] for n in STREAMS]
    assert all(a < b for a, b in zip(waits, waits[1:], strict=False)), waits  # each longer stream: a longer wait
    assert all(res["waits"][n] >= n for n in STREAMS), waits  # every cached arrival went ahead
    assert res["wait"] == "grows"


def test_window_0_keeps_fifo_and_a_flat_wait(has_window):
    if not has_window:
        _assert_absent()
        return
    rc, out, res = _run("--window", "0")
    assert rc == 0, out
    assert res["fifo"] == "kept" and res["wait"] == "flat", out
    assert set(res["waits"].values()) == {0}, out  # admitted at the free slot, whatever follows


def test_proposed_fix_keeps_fifo_and_a_flat_wait(has_window):
    if not has_window:
        _assert_absent()
        return
    rc, out, res = _run("--fixed")
    assert rc == 0, out
    assert res["fifo"] == "kept" and res["wait"] == "flat", out
    assert len(set(res["waits"].values())) == 1, out
