"""Live conformance: a real vLLM OpenAI server (CPU build, tiny model).

One short run per policy, then the failure behaviours: a server that cannot
start gives a clear error with its log tail; a server killed mid-run gives a
partial-trace report and a non-zero exit. These tests need the `vllm` extra
(CI installs it); they are not skipped, they are marked `vllm` and `live`.
"""

from __future__ import annotations

import argparse
import os
import subprocess

import pytest

from conformance import cli

pytestmark = [pytest.mark.vllm, pytest.mark.live]


def _args(tmp_path, **kw):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    a = p.parse_args([])
    a.out = str(tmp_path)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def _no_server_left():
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "vllm.entrypoints.openai.api_server" in ln and str(os.getpid()) not in ln]


@pytest.mark.parametrize("policy", ["vllm", "blocking", "fair"])
def test_live_run(tmp_path, policy, capsys):
    rc = cli.main(_args(tmp_path, policy=policy, scenario="aborts" if policy == "vllm" else "seed"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "steps matched" in out
    assert not _no_server_left()


def test_server_that_cannot_start(tmp_path, capsys):
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    rc = cli.main(_args(tmp_path, model=str(bad), lora_module=[f"lora{i}=" + str(bad) for i in range(1, 6)],
                        start_timeout=120.0))
    err = capsys.readouterr().err
    assert rc != 0
    assert "vLLM server" in err and "log" in err
    assert not _no_server_left()


def test_killed_server_partial_trace(tmp_path, capsys):
    rc = cli.main(_args(tmp_path, scenario="mix", kill_server_after=1.0, tick=0.2))
    captured = capsys.readouterr()
    assert rc != 0
    assert "server died mid-run" in captured.err and "trace stops at step" in captured.err
    assert not _no_server_left()
