"""Live conformance: a real vLLM OpenAI server (CPU build, tiny model).

One short run per policy, then the failure behaviours: a server that cannot
start gives a clear error with its log tail; a server killed mid-run gives a
partial-trace report and a non-zero exit. These tests need the `vllm` extra
(CI installs it); they are not skipped, they are marked `vllm` and `live`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from lora_sched.conformance import cli

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


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def _readme_deploy_command() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after = readme.split("<!-- deploy-command:", 1)[1]
    block = after.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip()


def test_readme_deploy_command(tmp_path):
    """The README's "Deploy fair in vLLM" command, run as written (bash, with
    the variables it names pointing at the locally generated model and
    adapters), serves base and LoRA requests through the OpenAI client with
    fair loaded and its setting applied."""
    from lora_sched.conformance.assets import ensure_assets
    from lora_sched.conformance.server import free_port, log_tail, wait_ready
    from openai import OpenAI

    assets = ensure_assets(3)
    port = free_port()
    # As in a shell with the project's environment activated: `python` is ours.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = dict(os.environ, PATH=path, MODEL=str(assets.model), PORT=str(port),
               **{f"LORA{i}": str(assets.adapters[f"lora{i}"]) for i in (1, 2, 3)})
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["VLLM_LOGGING_LEVEL"] = "INFO"  # vLLM's default; the in-process harness lowers it for this process
    # vLLM's CPU attention uses AMX without asking Linux for it (tests/amx_permission/sitecustomize.py).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent / "amx_permission"),
                                                    env.get("PYTHONPATH")) if p)
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(["bash", "-c", _readme_deploy_command()], stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        wait_ready(proc, port, log, 240)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)
        models = {m.id for m in client.models.list().data}
        assert {"lora1", "lora2", "lora3"} <= models
        try:
            with ThreadPoolExecutor(8) as pool:
                outs = list(pool.map(lambda m: client.completions.create(
                    model=m, prompt="w1 w2 w3 w4", max_tokens=8, temperature=0.0, extra_body={"ignore_eos": True}),
                    [str(assets.model), "lora1", "lora2", "lora3", "lora1", "lora3"]))
        except Exception as e:  # the cause is in the server's log, not in the client's error
            raise AssertionError(f"{e}\n--- server log (last 150 lines) ---\n{log_tail(log, 150)}") from e
        assert all(o.usage.completion_tokens == 8 for o in outs)
        text = log.read_text(errors="replace")
        assert "lora_sched: fair on AsyncFairScheduler, starvation_steps=16, max_loras=2" in text, log_tail(log)
    finally:
        _stop(proc)
    assert not _no_server_left()


def test_recorded_wraps_a_users_class_inside_vllm_serve(tmp_path):
    """`--scheduler-cls lora_sched.recorder.Recorded` with the catalogue's
    `ShortestPromptFirst` named in `--additional-config`: the server serves
    through the OpenAI client, its trace names the wrapped class, and `check`
    on that trace finds the class's defect (a later, shorter prompt of lora1
    admitted before an earlier, longer one while one seat is busy)."""
    import time

    from lora_sched.conformance.assets import ensure_assets
    from lora_sched.conformance.server import free_port, log_tail, wait_ready
    from openai import OpenAI

    root = Path(__file__).resolve().parents[1]
    assets = ensure_assets(1)
    port = free_port()
    trace = tmp_path / "recorded.jsonl"
    wrapped = "examples.shortest_prompt_first.ShortestPromptFirst"
    env = dict(os.environ, LORA_SCHED_TRACE=str(trace), VLLM_CPU_KVCACHE_SPACE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), str(Path(__file__).parent / "amx_permission"),
                                                    env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(assets.model),
           "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port),
           "--enable-lora", "--max-loras", "1", "--max-lora-rank", "8",
           "--lora-modules", f"lora1={assets.adapters['lora1']}", "--no-enable-prefix-caching",
           "--max-num-seqs", "1", "--max-model-len", "512", "--seed", "0",
           "--scheduler-cls", "lora_sched.recorder.Recorded",
           "--additional-config", json.dumps({"lora_sched_record": {"scheduler_cls": wrapped}})]
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    try:
        wait_ready(proc, port, log, 240)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)

        def complete(prompt: str, tokens: int) -> int:
            out = client.completions.create(model="lora1", prompt=prompt, max_tokens=tokens, temperature=0.0,
                                            extra_body={"ignore_eos": True})
            return out.usage.completion_tokens

        with ThreadPoolExecutor(3) as pool:
            busy = pool.submit(complete, "w1 w2", 400)  # holds the one seat
            time.sleep(1.0)
            longer = pool.submit(complete, " ".join(f"w{i}" for i in range(40)), 4)
            time.sleep(0.3)
            shorter = pool.submit(complete, "w1", 4)
            assert [busy.result(), longer.result(), shorter.result()] == [400, 4, 4]
    except Exception as e:
        raise AssertionError(f"{e}\n--- server log (last 150 lines) ---\n{log_tail(log, 150)}") from e
    finally:
        _stop(proc)
    assert not _no_server_left()
    header = json.loads(trace.read_text().splitlines()[0])
    assert f"scheduler {wrapped}" in json.dumps(header), header
    check = subprocess.run([sys.executable, "-m", "lora_sched", "check", str(trace), "--json"],
                           capture_output=True, text=True, cwd=root, timeout=300)
    assert check.returncode == 1, check.stdout + check.stderr
    violated = {r["property"] for r in json.loads(check.stdout)["results"] if r["verdict"] == "violated"}
    assert violated == {"fifo_within_adapter"}, check.stdout
