"""A live vLLM OpenAI server on loopback, driven through its HTTP API.

`LiveServer` starts `python -m vllm.entrypoints.openai.api_server` in its own
process group on 127.0.0.1, LoRA on, prefix caching off, our scheduler class
by `--scheduler-cls`, which records to `LORA_SCHED_TRACE`. `stop()` ends the
whole process group (SIGTERM, then SIGKILL after a grace period) and runs
from `finally` blocks. `drive` sends a scenario's requests at `arrival *
tick` seconds with the OpenAI client, streaming those the scenario cancels
and closing their streams after a few chunks (a client abort).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lora_sched.policy.scenarios import Scenario

from lora_sched.recorder import TRACE_ENV

SCHEDULER_CLASSES = {
    "vllm": "lora_sched.recorder.RecordingScheduler",
    "blocking": "lora_sched.scheduler.BlockingScheduler",
    "fair": "lora_sched.scheduler.FairScheduler",
    "drainer": "lora_sched.scheduler.DrainerScheduler",
    "timeslice": "lora_sched.scheduler.TimesliceScheduler",
    "vtc": "lora_sched.scheduler.VtcScheduler",
}
# Classes that read `starvation_steps` (fair's S, the drainer's threshold, the time slice).
KNOBBED = ("fair", "drainer", "timeslice")


class ServerError(RuntimeError):
    """The server did not start (the message carries its log tail)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout: float) -> None:
    """Poll the server's `/v1/models` until it answers; a server that exits,
    or is not up within `timeout` seconds (a hang guard, not a speed goal),
    raises `ServerError` with the log's last lines."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}/v1/models"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"vLLM server exited with code {proc.returncode} before it was "
                              f"ready; log {log}, last lines:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise ServerError(f"vLLM server not ready within {timeout:.0f} s; log {log}, last lines:\n{log_tail(log)}")


@dataclass
class LiveServer:
    model: str
    lora_modules: list[str]
    policy: str
    scenario: Scenario
    trace: Path
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    def max_model_len(self) -> int:
        """512, or what a small KV pool can hold: vLLM refuses to start unless
        one max_model_len sequence fits the KV cache (scenario `kv`: 6 x 32)."""
        cfg = self.scenario.config
        if cfg.kv_blocks is None:
            return 512
        return min(512, cfg.kv_blocks * cfg.block_size)

    def command(self) -> list[str]:
        cfg = self.scenario.config
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", self.model, "--served-model-name", "base",
               "--host", "127.0.0.1", "--port", str(self.port),
               "--enable-lora", "--max-loras", str(cfg.max_loras), "--max-lora-rank", "8",
               "--scheduler-cls", SCHEDULER_CLASSES[self.policy],
               "--no-enable-prefix-caching",
               "--max-num-seqs", str(cfg.max_num_seqs),
               "--max-num-batched-tokens", str(cfg.max_num_batched_tokens),
               "--max-model-len", str(self.max_model_len()), "--seed", "0",
               "--block-size", str(cfg.block_size)]
        if self.lora_modules:
            cmd += ["--lora-modules", *self.lora_modules]
        if self.policy in KNOBBED:
            cmd += ["--additional-config", json.dumps({"lora_sched": {"starvation_steps": cfg.starvation_steps}})]
        if cfg.long_prefill_token_threshold:
            cmd += ["--long-prefill-token-threshold", str(cfg.long_prefill_token_threshold)]
        if cfg.queue == "priority":
            cmd += ["--scheduling-policy", "priority"]
        if cfg.kv_blocks is not None:
            cmd += ["--num-gpu-blocks-override", str(cfg.kv_blocks + 1)]
        if not cfg.chunked_prefill:
            cmd += ["--no-enable-chunked-prefill"]
        return cmd

    def start(self, timeout: float = 240.0) -> None:
        env = dict(os.environ)
        env[TRACE_ENV] = str(self.trace)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            wait_ready(self.proc, self.port, self.log, timeout)
        except ServerError:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Failure injection: SIGKILL the whole server group, as a crash would."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 20.0) -> None:
        """End the server's process group; idempotent."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # Children (the engine core) may outlive the API server: kill the group.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class DriveResult:
    sent: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _prompt(n: int, salt: int) -> str:
    # The tiny model's WordLevel tokenizer maps each word to one token.
    return " ".join(f"w{(salt * 7 + i) % 500}" for i in range(n))


def drive(server: LiveServer, scenario: Scenario, *, tick: float = 0.05, progress: bool = True,
          kill_after: float | None = None) -> DriveResult:
    """Send every request of `scenario` (concurrently); returns the counts."""
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0,
                    timeout=120.0)
    res = DriveResult()
    lock = threading.Lock()
    reqs = sorted(scenario.workload.requests, key=lambda r: r.arrival)
    t0 = time.monotonic()
    first = reqs[0].arrival if reqs else 0

    def show() -> None:
        if progress:
            done = res.completed + res.cancelled + res.failed
            bar = "#" * (30 * done // max(1, len(reqs)))
            print(f"\r  [{bar:<30}] {done}/{len(reqs)} requests", end="", file=sys.stderr, flush=True)

    def one(i: int) -> None:
        req = reqs[i]
        delay = (req.arrival - first) * tick - (time.monotonic() - t0)
        if delay > 0:
            time.sleep(delay)
        model = f"lora{req.adapter}" if req.adapter > 0 else "base"
        extra = {"ignore_eos": True, "priority": req.priority}
        cancel = scenario.cancel_after.get(req.id)
        try:
            with lock:
                res.sent += 1
            if cancel is None:
                client.completions.create(model=model, prompt=_prompt(req.prompt_tokens, i),
                                          max_tokens=req.max_tokens, temperature=0.0, extra_body=extra)
                with lock:
                    res.completed += 1
            else:
                stream = client.completions.create(model=model, prompt=_prompt(req.prompt_tokens, i),
                                                   max_tokens=req.max_tokens, temperature=0.0,
                                                   extra_body=extra, stream=True)
                for n, _chunk in enumerate(stream, 1):
                    if n >= cancel:
                        break
                stream.close()  # the server sees the disconnect and aborts the request
                with lock:
                    res.cancelled += 1
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            with lock:
                res.failed += 1
                res.errors.append(f"{req.id}: {type(exc).__name__}: {exc}")
        with lock:
            show()

    killer = None
    if kill_after is not None:
        killer = threading.Timer(kill_after, server.kill)
        killer.daemon = True
        killer.start()
    try:
        with ThreadPoolExecutor(max_workers=min(64, max(1, len(reqs)))) as pool:
            list(pool.map(one, range(len(reqs))))
    finally:
        if killer is not None:
            killer.cancel()
        if progress:
            print(file=sys.stderr)
    # Give the engine a moment to apply the aborts of cancelled streams.
    time.sleep(0.5)
    res.seconds = time.monotonic() - t0
    return res
