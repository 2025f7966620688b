"""Z3's shortest counterexamples for `vllm`, run on vLLM's own scheduler (0.32 and 0.33).

`tests/cex/` replays each counterexample in the reference (`policy/`); here
the same workloads drive vLLM's `Scheduler` / `AsyncScheduler` in-process
(`conformance.inprocess`), the way the engine core does:

- the DP-throttle `batch_lora_cap` counterexample (depth 3) makes vLLM trip
  its own `assert len(scheduled_loras) <= max_loras`, and the trace up to
  the crash replays step for step;
- the async `running_lora_cap` counterexample (depth 2) runs to the end on
  vLLM's `AsyncScheduler`; its trace replays with zero divergences and
  breaks `running_lora_cap`.

On vLLM 0.33 both run to the end with both caps held (0.33 counts every
running request's adapter) and replay against the 0.33 reference.

vLLM refuses `max_num_batched_tokens < max_num_seqs`, which the SMT model
allows; such a config runs here with the budget raised to `max_num_seqs`
(the counterexample's steps never use more).
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
from inprocess_cases import conform
from lora_sched.conformance.inprocess import run_workload
from lora_sched.policy.check import check_trace
from lora_sched.policy.replay import replay
from lora_sched.proofs.cex import Cex
from lora_sched.spec.trace import read_trace

pytestmark = pytest.mark.vllm

sys.path.insert(0, str(Path(__file__).parent / "cex"))
from test_vllm_async_running_lora_cap import CEX as ASYNC_CEX  # noqa: E402
from test_vllm_throttle_batch_lora_cap import CEX as THROTTLE_CEX  # noqa: E402


def _for_vllm(raw: dict):
    cex = Cex.from_json(raw)
    cfg = cex.config_obj()
    cfg = replace(cfg, max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs))
    return cfg, cex.workload()


def _holds_both_caps_on_033(cfg, wl, path) -> None:
    out = conform(cfg, wl, path, policy="vllm")
    assert out.replay.ok, out.replay.describe()
    report = check_trace(str(out.trace))
    assert report.trace.config.vllm == installed_release()
    assert not {"batch_lora_cap", "running_lora_cap"} & set(report.first), report.first


def test_throttle_counterexample_crashes_vllm(tmp_path):
    cfg, wl = _for_vllm(THROTTLE_CEX)
    path = tmp_path / "throttle.jsonl"
    if installed_release() != "0.32":
        return _holds_both_caps_on_033(cfg, wl, path)
    with pytest.raises(AssertionError) as info:
        run_workload(cfg, wl, path)
    frame = traceback.extract_tb(info.tb)[-1]
    assert frame.line == "assert len(scheduled_loras) <= self.lora_config.max_loras"
    trace = read_trace(path, allow_truncated_tail=True)
    assert trace.steps()[-1].step == THROTTLE_CEX["depth"] - 1  # vLLM dies scheduling the cex's last step
    assert [s.step for s in trace.steps() if s.throttle] == THROTTLE_CEX["throttled"]
    result = replay(trace)
    assert result.ok and result.matched == len(trace.steps()), result.describe()


def test_async_counterexample_breaks_running_lora_cap_in_vllm(tmp_path):
    cfg, wl = _for_vllm(ASYNC_CEX)
    assert cfg.async_scheduling
    if installed_release() != "0.32":
        return _holds_both_caps_on_033(cfg, wl, tmp_path / "async.jsonl")
    out = conform(cfg, wl, tmp_path / "async.jsonl", policy="vllm")
    assert out.replay.ok, out.replay.describe()
    first = check_trace(str(out.trace)).first
    assert first["running_lora_cap"].step == ASYNC_CEX["depth"], first
    assert "batch_lora_cap" not in first  # the batch itself stays within the cap: no crash


def installed_release() -> str:
    from lora_sched.recorder import installed_release  # imports vLLM: only when these tests run

    return installed_release()
