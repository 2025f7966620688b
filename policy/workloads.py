"""Named workloads: the seed's running example and the scenarios of DESIGN §5."""

from __future__ import annotations

import random

from lora_sched.policy.driver import Workload
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

# vLLM PR #15422's running example: max_loras 4, sixteen requests, Rx-Ly uses LoRA y.
SEED_QUEUE = ["R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4", "R8-L5", "R9-L5",
              "R10-L5", "R11-L5", "R12", "R13", "R14-L1", "R15-L2", "R16-L3"]


def seed_adapter(name: str) -> int:
    return int(name.split("-L")[1]) if "-L" in name else 0


def seed_example(*, prompt_tokens: int = 8, max_tokens: int = 4,
                 long: dict[str, int] | None = None) -> tuple[Config, Workload]:
    """The seed example; `long` gives chosen requests a longer output."""
    long = long or {}
    cfg = Config(max_loras=4, max_num_seqs=256, max_num_batched_tokens=4096)
    reqs = [Request(name, seed_adapter(name), prompt_tokens, long.get(name, max_tokens), 1)
            for name in SEED_QUEUE]
    return cfg, Workload(reqs)


def starvation_stream(length: int = 40, *, max_loras: int = 2, prompt_tokens: int = 8,
                      max_tokens: int = 8, victim_at: int = 2) -> tuple[Config, Workload]:
    """max_loras 2; a steady stream for adapters 1 and 2; one request for adapter 3.

    A new request of adapters 1 and 2 arrives every step, so under `vllm` one of
    them is always scheduled and adapter 3 waits until the stream ends.
    """
    cfg = Config(max_loras=max_loras, max_num_seqs=64, max_num_batched_tokens=512)
    reqs = []
    for t in range(1, length + 1):
        reqs.append(Request(f"a1-{t}", 1, prompt_tokens, max_tokens, t))
        reqs.append(Request(f"a2-{t}", 2, prompt_tokens, max_tokens, t))
    reqs.append(Request("victim-a3", 3, prompt_tokens, max_tokens, victim_at))
    return cfg, Workload(reqs)


def seed_mix(n: int = 500, *, adapters: int = 8, seed: int = 2, prompt_mean: float = 249.04,
             max_tokens: int = 120, arrival_every: float = 0.0) -> list[Request]:
    """A seed-shaped mix: `n` requests round-robin over `adapters` LoRAs.

    ShareGPT cannot be downloaded; prompt lengths are drawn from a lognormal
    with the seed's mean (124520 input tokens / 500 prompts = 249.04).
    """
    rng = random.Random(seed)
    sigma = 0.9
    import math
    mu = math.log(prompt_mean) - sigma * sigma / 2
    reqs = []
    for i in range(n):
        prompt = max(4, min(2048, int(rng.lognormvariate(mu, sigma))))
        arrival = 1 + int(i * arrival_every)
        reqs.append(Request(f"r{i}", (i % adapters) + 1, prompt, max_tokens, arrival))
    return reqs


# ---- stream families: the same shape at growing length ----------------------
# Each family maps a stream length to a (config, workload) whose pressure per
# step does not change with the length: only the number of later arrivals
# grows. A starvation-free policy's worst wait must not grow with it
# (`tests/test_fair_growth.py`); `vllm`'s does on the starvation families.

def behind_lora_stream(length: int, *, early_adapter: int = 0, adapters: int = 5, every: int | None = None,
                       **cfg: object) -> tuple[Config, Workload]:
    """Issue #8's case: max_loras 1, one seat, budget 8; a LoRA request every
    `every` steps cycling over `adapters` adapters, and one early request of
    `early_adapter` (0: base model; 1: the adapter active when it arrives). A
    rule that lets each later starving LoRA request go first holds the early
    request as long as the stream lasts. `every = 2` is the issue's workload
    (sync); under async scheduling the stream comes every 4 steps (the default
    there), as a request holds the seat longer, so the queue does not grow."""
    config = Config(**{"max_loras": 1, "max_num_seqs": 1, "max_num_batched_tokens": 8, **cfg})
    if every is None:
        every = 4 if config.async_scheduling else 2
    reqs = [Request("L0", 1, 1, 2, 1), Request("early", early_adapter, 1, 1, 2)]
    reqs += [Request(f"L{i}", (i % adapters) + 1, 1, 2, max(2, 1 + (i - 1) * every + (every > 2)))
             for i in range(1, length + 1)]
    return config, Workload(reqs)


def starvation_family(length: int, **cfg: object) -> tuple[Config, Workload]:
    """`starvation_stream` at `length`: adapters 1 and 2 stream, one adapter-3 request."""
    config, wl = starvation_stream(length=length, max_tokens=16)
    return Config(**{**config.to_dict(), **cfg}), wl


def kv_pressure_stream(length: int, **cfg: object) -> tuple[Config, Workload]:
    """A KV pool that preempts (10 blocks of 4; a request needs up to 4):
    a stream over adapters 1 and 2 (max_loras 2), one request every 4 steps,
    and base-model and adapter-3 requests at step 12, when the stream is on."""
    config = Config(**{"max_loras": 2, "max_num_seqs": 8, "max_num_batched_tokens": 32, "kv_blocks": 10,
                       "block_size": 4, **cfg})
    reqs = [Request("early-base", 0, 6, 8, 12), Request("early-a3", 3, 6, 8, 12)]
    for t in range(1, length + 1):
        reqs.append(Request(f"k{t}", 1 + t % 2, 6, 10, 4 * t))
    return config, Workload(reqs)


FAMILIES = {
    "base_behind_lora_stream": lambda n, **c: behind_lora_stream(n, early_adapter=0, **c),
    "active_behind_lora_stream": lambda n, **c: behind_lora_stream(n, early_adapter=1, **c),
    "starvation": starvation_family,
    "kv_pressure_stream": kv_pressure_stream,
}
