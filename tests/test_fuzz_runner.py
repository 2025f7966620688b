"""The fuzz runner on vLLM's real scheduler: a crash of vLLM is a finding, with its trace, and shrinks.

Seed 1029 is the first workload of the campaign from seed 0 that trips vLLM
0.32's `assert len(scheduled_loras) <= max_loras` under the DP prefill
throttle (docs/findings.md 1, docs/fuzz.md). On vLLM 0.33 (`make test` runs
this file under the release venvs too) the same workload runs clean: 0.33 counts every
running request's adapter.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from lora_sched.fuzz.findings import trace_itf
from lora_sched.fuzz.runner import run_case
from lora_sched.fuzz.shrink import shrink
from lora_sched.fuzz.space import generate
from lora_sched.spec.trace import read_trace

pytestmark = pytest.mark.vllm

CRASH = "crash:AssertionError@scheduler.py:schedule:vllm"
SEED = 1029


def test_vllm_crash_is_a_finding_with_the_trace_up_to_it(tmp_path) -> None:
    case = generate(SEED)
    res = run_case(case, tmp_path / "t.jsonl")
    if installed_release() != "0.32":
        assert not res.failures, [f.message for f in res.failures]
        assert read_trace(tmp_path / "t.jsonl").config.vllm == installed_release()
        return
    assert CRASH in res.signatures, (f"seed {SEED} no longer crashes vLLM (was the generator changed?)",
                                     [f.message for f in res.failures])
    crash = next(f for f in res.failures if f.signature == CRASH)
    assert "max_loras" in crash.message
    trace = read_trace(tmp_path / "t.jsonl", allow_truncated_tail=True)
    steps = trace.steps()
    assert steps and any(r.throttle for r in steps)  # the throttled step that let the extra adapter in
    itf = trace_itf(trace, CRASH)
    assert len(itf["states"]) == len(steps) + 1 and "preempted" in itf["vars"]


def test_fair_in_vllm_runs_the_crashing_workload() -> None:
    case = generate(SEED)
    fair = replace(case, config=replace(case.config, policy="fair"), reference="fair")
    res = run_case(fair)
    assert not res.failures, [f.message for f in res.failures]


def test_the_crash_shrinks_to_three_requests() -> None:
    """On 0.32 the crash shrinks to three requests; 0.33 does not crash on the
    same workload (its cap counts every running request), so there is
    nothing to shrink and the test says so by running it."""
    if installed_release() != "0.32":
        assert CRASH not in run_case(generate(SEED)).signatures
        return
    out = shrink(generate(SEED), lambda c: CRASH in run_case(c).signatures, max_runs=700)
    small = out.case
    assert CRASH in run_case(small).signatures
    assert len(small.workload.requests) == 3, small.to_json()  # no 1- or 2-request workload crashes
    assert small.config.prefill_schedule_interval > 1 and not small.workload.aborts


def installed_release() -> str:
    from lora_sched.recorder import installed_release  # imports vLLM: only when these tests run

    return installed_release()


# A vLLM the release registry lacks: the interpreter's vLLM reports 0.40.1
# before lora_sched is imported (as a dev build or a later release would).
_AS_0401 = "import sys, vllm\nvllm.__version__ = '0.40.1'\n"


@pytest.mark.release_slow  # the version is patched: the same test on every release
def test_an_unregistered_vllm_is_fuzzed_without_a_replay_and_refused_by_conform(tmp_path) -> None:
    """`conform` needs a reference: one line, exit 2. A fuzz case of the
    project's classes (which refuse to load there) runs stock vLLM; its trace
    names 0.40.1, is judged with the newest release's semantics and is not
    replayed, so nothing is a finding."""
    import json
    import subprocess
    import sys
    import textwrap

    seed = next(s for s in range(100) if generate(s).config.policy == "fair")
    # One interpreter for both (vLLM's import is most of the time): conform's
    # exit code, stdout and stderr, then the fuzz case's signatures, as JSON.
    script = _AS_0401 + textwrap.dedent(f"""
        import contextlib, io, json
        from lora_sched.cli import main
        from lora_sched.fuzz.runner import run_case
        from lora_sched.fuzz.space import generate
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["conform", "--in-process", "--scenario", "starvation", "--policy", "fair",
                         "--out", {str(tmp_path)!r}])
        res = run_case(generate({seed}), {str(tmp_path / 't.jsonl')!r})
        print(json.dumps([code, out.getvalue(), err.getvalue(), [f.signature for f in res.failures]]))
        """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    code, out, err, signatures = json.loads(run.stdout.strip().splitlines()[-1])
    assert code == 2 and out == "", out
    assert err.strip().count("\n") == 0, err
    assert "vLLM 0.40.1 is not in the release registry" in err and "0.34.x" in err
    assert signatures == []
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.source == "vllm 0.40.1" and trace.unregistered == "0.40.1" and trace.config.policy == "vllm"
    assert trace.steps()
