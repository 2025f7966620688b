"""The LoRA family: workloads that reach a scheduler's LoRA defects fast.

`generate_lora(seed, scheduler_cls)` is the family a `--scheduler-cls`
campaign draws from, a pure function of the seed like `fuzz.space.generate`:
more adapters than LoRA slots, hot adapters' streams that keep the slots busy
and cold adapters' lone requests behind them, drawn around that shape as
docs/fuzz.md, "A user's scheduler class", lists. The class, not the draw,
decides async scheduling. A case's findings are the violations of
`conformance.target.expected`.
"""

from __future__ import annotations

import random
from dataclasses import replace

from lora_sched.conformance.target import load
from lora_sched.fuzz.space import FuzzCase, _aborts, generate, max_len
from lora_sched.policy.driver import Workload
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import blocks_for


def _config(rng: random.Random, is_async: bool, release: str) -> Config:
    budget = rng.choice([4, 8, 16, 32, 64, 256])
    chunked = rng.random() < 0.7
    limit = 2048 if chunked else budget
    cadence = releases.get(release).cap_counts == "running"  # 0.32 crashes under it on its own
    return Config(
        max_loras=rng.choice([1, 1, 2, 2, 3, 4]),
        max_num_seqs=min(budget, rng.choice([2, 3, 4, 8, 16, 64])),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        long_prefill_token_threshold=min(limit, rng.choice([0, 0, 0, 4, 16])),
        block_size=rng.choice([4, 8, 16]),
        queue=rng.choice(["fcfs", "fcfs", "fcfs", "priority"]),
        async_scheduling=is_async,
        policy="vllm",
        prefill_schedule_interval=rng.choice([1, 1, 1, 2, 3]) if cadence else 1,
        vllm=release,
    )


def _requests(rng: random.Random, cfg: Config) -> list[Request]:
    limit = max_len(cfg)
    hot = cfg.max_loras + rng.choice([0, 0, 1])
    cold = rng.randint(1, 3)
    max_prompt = max(1, min(rng.choice([4, 16, 48]), limit - 1))
    max_out = rng.choice([4, 16, 48])
    reqs: list[tuple[int, int, int, int]] = []  # (arrival, adapter, prompt, output)

    def add(arrival: int, adapter: int) -> None:
        prompt = rng.randint(1, max_prompt)
        reqs.append((arrival, adapter, prompt, rng.randint(1, max(1, min(max_out, limit - prompt)))))

    length, gap = rng.randint(3, 24), rng.choice([1, 1, 2, 3])
    for a in range(1, hot + 1):  # streams that keep the slots busy
        start = rng.randint(1, 3)
        for i in range(length):
            add(start + i * gap, a)
    for c in range(hot + 1, hot + cold + 1):  # lone adapters behind the streams
        for _ in range(rng.choice([1, 1, 2])):
            add(rng.randint(2, 2 + 2 * gap), c)
    for _ in range(rng.choice([0, 0, 2, 5])):  # base-model traffic
        add(rng.randint(1, length * gap + 3), 0)
    reqs.sort(key=lambda x: x[0])
    prio = cfg.queue == "priority"
    return [Request(f"r{i}", a, p, o, t, rng.choice([0, 0, 1]) if prio else 0)
            for i, (t, a, p, o) in enumerate(reqs)]


def generate_lora(seed: int, scheduler_cls: str, *, expect: tuple[str, ...] = (), is_async: bool = False,
                  release: str | None = None) -> FuzzCase:
    """The LoRA family's case of `seed` for `scheduler_cls` (`release`: the
    installed vLLM's, `recorder.installed_release()`, by default the newest)."""
    rng = random.Random(f"lora-sched-fuzz-lora/{seed}")
    cfg = _config(rng, is_async, release or releases.NEWEST)
    requests = _requests(rng, cfg)
    if rng.random() < 0.4:  # a pool small enough to preempt
        need = blocks_for(max(r.prompt_tokens + r.max_tokens for r in requests), cfg.block_size)
        cfg = replace(cfg, kv_blocks=rng.randint(need + 1, need * rng.choice([1, 2, 3]) + 2))
    aborts = _aborts(rng, cfg, requests)
    return FuzzCase(seed, cfg, Workload(requests, aborts), "vllm", scheduler_cls, tuple(expect))


def case_of(seed: int, *, reference: str | None = None, scheduler_cls: str | None = None,
            expect: tuple[str, ...] = ()) -> FuzzCase:
    """A campaign's case of `seed`: for a user's class the LoRA family's, on
    the installed vLLM's release, async as the class is; else `fuzz.space.generate`'s."""
    if scheduler_cls is None:
        return generate(seed, reference=reference)
    from lora_sched.recorder import installed_release

    target = load(scheduler_cls)
    return generate_lora(seed, scheduler_cls, expect=expect, is_async=target.is_async, release=installed_release())
