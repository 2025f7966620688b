"""The DP-throttle crash on vLLM 0.32 itself, its fix in fair, the upstream patch, and 0.33.

`experiments.crash.shortest_crash` finds the smallest workload whose run
under vLLM's LoRA rule with DP prefill throttling puts two adapters in one
batch with max_loras 1. Here it runs on vLLM's own `Scheduler`: vLLM's
`assert len(scheduled_loras) <= max_loras` fails inside `schedule()` at
exactly the step the reference predicts, the trace up to it replays step for
step; `lora_sched.scheduler.FairScheduler` completes it with both caps; and
the patch of `docs/findings.md` applied to vLLM's `scheduler.py` fixes it.

On vLLM 0.33 (`make test` runs this file under the release venvs too) the same
workload runs to completion with both caps: 0.33's scheduler counts every
running request's adapter (scheduler.py 1038-1047, the patch's line), so the
patch no longer applies, and the trace replays against the 0.33 reference.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
from inprocess_cases import conform
from lora_sched.conformance.inprocess import run_workload
from lora_sched.policy.check import check_trace
from lora_sched.policy.replay import replay
from lora_sched.spec.trace import read_trace

from experiments.crash import CONFIG, shortest_crash

pytestmark = pytest.mark.vllm  # drives vLLM's own scheduler

PATCH = Path(__file__).resolve().parents[1] / "docs" / "vllm-0.32-lora-cap.patch"
CAPS = {"batch_lora_cap", "running_lora_cap"}


@pytest.fixture(scope="module")
def crash():
    return shortest_crash()


def test_search_finds_a_three_request_crash(crash):
    """No workload of one or two requests in the space crashes (the search
    tries them first); the shortest has three: a request decoding (so the
    throttle is on), a LoRA request mid-prefill (deferred), and a one-token
    prompt of another adapter (admitted on the throttled step)."""
    reqs = crash.workload.requests
    assert len(reqs) == 3 and crash.adapters == [1, 2]
    assert sorted(r.adapter for r in reqs) == [0, 1, 2]
    chunked = [r for r in reqs if r.prompt_tokens > CONFIG.max_num_batched_tokens // 2]
    assert [r.adapter for r in chunked] == [1]
    assert any(r.adapter == 2 and r.prompt_tokens == 1 for r in reqs)


def test_stock_vllm_on_the_crash(crash, tmp_path):
    """0.32 trips its max_loras assert at the step the reference flags; 0.33 completes it with both caps."""
    path = tmp_path / "stock.jsonl"
    if installed_release() != "0.32":
        run_workload(CONFIG, crash.workload, path)
        report = check_trace(str(path), policy="vllm")
        assert report.trace.config.vllm == installed_release() and report.replay is not None and report.replay.ok, \
            report.replay.describe() if report.replay else None
        assert report.trace.complete and not CAPS & set(report.first), report.first
        assert any(s.throttle for s in report.trace.steps())  # the scheduler's own cadence held prefills
        finished = {rid for s in report.trace.steps() for rid in s.finished}
        assert finished == {r.id for r in crash.workload.requests}
        return
    assert installed_release() == "0.32"
    with pytest.raises(AssertionError) as info:
        run_workload(CONFIG, crash.workload, path)
    frame = traceback.extract_tb(info.tb)[-1]
    assert frame.filename.endswith("vllm/v1/core/sched/scheduler.py")
    assert frame.line == "assert len(scheduled_loras) <= self.lora_config.max_loras"
    trace = read_trace(path, allow_truncated_tail=True)
    steps = trace.steps()
    assert steps[-1].step == crash.step - 1  # vLLM died scheduling the step the reference flags
    assert any(s.throttle for s in steps)
    result = replay(trace)
    assert result.ok and result.matched == len(steps), result.describe()


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_fair_in_vllm_runs_it_with_both_caps(crash, tmp_path, async_scheduling):
    cfg = replace(CONFIG, policy="fair", async_scheduling=async_scheduling)
    out = conform(cfg, crash.workload, tmp_path / "fair.jsonl", policy="fair")
    assert out.replay.ok, out.replay.describe()
    report = check_trace(str(out.trace))
    assert not CAPS & set(report.first), report.first
    finished = {rid for s in read_trace(out.trace).steps() for rid in s.finished}
    assert finished == {r.id for r in crash.workload.requests}


def _patched_scheduler_class(tmp_path: Path) -> type:
    import vllm.v1.core.sched.scheduler as stock

    from lora_sched.recorder import RecorderMixin

    copy = tmp_path / "scheduler.py"
    shutil.copy(stock.__file__, copy)
    subprocess.run(["patch", "-s", str(copy), str(PATCH)], check=True)
    spec = importlib.util.spec_from_file_location("patched_vllm_scheduler", copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    class PatchedScheduler(RecorderMixin, module.Scheduler):
        policy_name = "vllm"

    return PatchedScheduler


def test_upstream_patch_fixes_the_crash(crash, tmp_path):
    """`docs/vllm-0.32-lora-cap.patch` (count every running request's adapter)
    applied to vLLM's own scheduler.py: the crashing workload completes and
    keeps both caps. On 0.33 upstream has the patch's line, so it no longer applies."""
    if installed_release() != "0.32":
        import vllm.v1.core.sched.scheduler as stock

        text = Path(stock.__file__).read_text()
        assert "for req in self.running\n                if req.lora_request" in text
        copy = tmp_path / "scheduler.py"
        shutil.copy(stock.__file__, copy)
        dry = subprocess.run(["patch", "--dry-run", "-N", "-s", str(copy), str(PATCH)],
                             capture_output=True, text=True)
        assert dry.returncode != 0, dry.stdout
        return
    cls = _patched_scheduler_class(tmp_path)
    path = tmp_path / "patched.jsonl"
    run_workload(CONFIG, crash.workload, path, scheduler_class=cls)
    report = check_trace(str(path))
    assert report.trace.complete and not CAPS & set(report.first), report.first


def installed_release() -> str:
    from lora_sched.recorder import installed_release  # imports vLLM: only when these tests run

    return installed_release()
