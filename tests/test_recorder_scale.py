"""The in-vLLM recorder at production rate: gzip segments rotated by size, flushed every N lines.

vLLM 0.32's own scheduler records the `aborts` and `kv` scenarios (aborts,
preemptions) in-process, once to one plain file and once with
`LORA_SCHED_TRACE_ROTATE_MB` and `LORA_SCHED_TRACE_FLUSH` set: the segments
are gzip files, several of them, and `check DIR` gives the verdicts of the
plain file (line numbers count within a segment) and replays against the
reference. A bad value in either variable stops recording with its name.
"""

from __future__ import annotations

import re

import pytest
from lora_sched.policy.check import check_file, verdicts
from lora_sched.policy.scenarios import SCENARIOS

pytestmark = pytest.mark.vllm


def _strip(v: dict) -> dict:
    v = {k: x for k, x in v.items() if k != "trace"}
    return {k: (re.sub(r"'line': \d+", "'line': 0", str(x)) if k in ("results", "replay") else x) for k, x in v.items()}


@pytest.mark.parametrize("name", ["aborts", "kv"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_rotated_gzip_recording_checks_like_the_plain_one(tmp_path, monkeypatch, name, async_scheduling):
    from dataclasses import replace

    from lora_sched.conformance.inprocess import run_workload

    sc = SCENARIOS[name]
    cfg = replace(sc.config, async_scheduling=async_scheduling)
    plain = tmp_path / "plain.jsonl"
    run_workload(cfg, sc.workload, plain)
    monkeypatch.setenv("LORA_SCHED_TRACE_ROTATE_MB", "0.0003")
    monkeypatch.setenv("LORA_SCHED_TRACE_FLUSH", "4")
    rotated = tmp_path / "rotated"
    run_workload(cfg, sc.workload, rotated)
    files = sorted(rotated.iterdir())
    assert len(files) >= 2 and all(f.name.endswith(".jsonl.gz") for f in files), files
    a, b = check_file(str(plain), "vllm"), check_file(str(rotated), "vllm")
    assert a.ok and b.ok and a.steps == b.steps > 0
    assert _strip(verdicts(a)) == _strip(verdicts(b))


@pytest.mark.parametrize(("var", "value"), [("LORA_SCHED_TRACE_ROTATE_MB", "lots"),
                                            ("LORA_SCHED_TRACE_FLUSH", "0")])
def test_a_bad_setting_names_its_variable(tmp_path, monkeypatch, var, value):
    from lora_sched.conformance.inprocess import run_workload

    monkeypatch.setenv(var, value)
    sc = SCENARIOS["aborts"]
    with pytest.raises(RuntimeError, match=var):
        run_workload(sc.config, sc.workload, tmp_path / "t.jsonl.gz")
