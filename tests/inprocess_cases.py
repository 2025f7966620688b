"""vLLM's scheduler driven in-process for the tests: random cases, `conform` and a plain synchronous loop."""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lora_sched.policy.driver import Workload
from lora_sched.policy.replay import ReplayResult, replay
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.trace import read_trace


@dataclass
class Outcome:
    trace: Path
    steps: int
    replay: ReplayResult


def conform(cfg: Config, workload: Workload, trace_path: str | os.PathLike[str] | None = None,
            *, policy: str | None = None) -> Outcome:
    """Record vLLM on `workload` (`conformance.inprocess.run_workload`) and replay the trace through the reference."""
    from lora_sched.conformance.inprocess import run_workload

    policy = policy or cfg.policy
    if trace_path is None:
        # tmpfs when there is one: the writer fsyncs on close.
        tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, name = tempfile.mkstemp(prefix="lora-sched-", suffix=".jsonl", dir=tmp)
        os.close(fd)
        trace_path = name
    steps = run_workload(cfg, workload, trace_path, policy=policy)
    return Outcome(Path(trace_path), steps, replay(read_trace(trace_path), policy))


def run_sync(sched, max_steps: int | None = None) -> int:
    """Drive a scheduler synchronously (schedule, then its output) until it
    holds no request; returns the number of steps."""
    from lora_sched.conformance.inprocess import Stuck, _model_output

    steps = 0
    while sched.has_requests():
        out = sched.schedule()
        sampled = {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
        sched.update_from_output(out, _model_output(out, sampled))
        steps += 1
        if max_steps is not None and steps > max_steps:
            raise Stuck(f"no completion after {max_steps} steps")
    return steps


def random_case(rng: random.Random) -> tuple[Config, Workload]:
    """A random config and workload exercising every modelled feature."""
    from lora_sched.conformance.inprocess import MAX_MODEL_LEN

    block_size = rng.choice([4, 8, 16])
    max_loras = rng.randint(1, 3)
    budget = rng.choice([8, 16, 32, 64, 128, 512])
    chunked = rng.random() < 0.8
    n = rng.randint(1, 14)
    adapters = rng.randint(1, 5)
    max_prompt = rng.choice([4, 12, 40, 100])
    # Without chunked prefill vLLM caps max_model_len at the token budget; a
    # request must end before it (the model has no max_model_len).
    max_len = MAX_MODEL_LEN if chunked else budget
    reqs = []
    for i in range(n):
        prompt = rng.randint(1, min(max_prompt, max_len - 1))
        out = rng.randint(1, min(12, max_len - prompt))
        reqs.append(Request(f"r{i}", rng.randint(0, adapters), prompt, out, rng.randint(1, 8),
                            rng.choice([0, 0, 1, 2]) if rng.random() < 0.5 else 0))
    longest = max(r.prompt_tokens + r.max_tokens for r in reqs)
    need = -(-longest // block_size)
    kv = None if rng.random() < 0.4 else rng.randint(need + 1, need * 3 + 2)
    cfg = Config(
        max_loras=max_loras,
        max_num_seqs=min(budget, rng.choice([1, 2, 3, 4, 8, 64])),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        long_prefill_token_threshold=min(max_len, rng.choice([0, 0, 0, 4, 16])),
        kv_blocks=kv,
        block_size=block_size,
        queue=rng.choice(["fcfs", "fcfs", "priority"]),
        async_scheduling=rng.random() < 0.4,
        starvation_steps=rng.choice([0, 1, 2, 4, 8]),
        prefill_schedule_interval=rng.choice([1, 1, 2, 3]),
    )
    aborts = {r.id: r.arrival + rng.randint(0, 10) for r in reqs if rng.random() < 0.15}
    return cfg, Workload(reqs, aborts)
