"""The named scenarios: the one registry `simulate`, `conform` (in-process
and live) and the tests draw from.

A scenario is a config plus a workload. In-process, a request's `arrival` is
the step it joins; on the live server it is a send time (`arrival * tick`
seconds after the start), and `aborts` become client cancellations of a
streamed request. Lengths are small so the tiny model serves them quickly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from lora_sched.policy.driver import Workload
from lora_sched.policy.workloads import seed_example, starvation_stream
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

# vLLM's CPU attention backend needs block sizes that are multiples of 32.
BS = 32


@dataclass
class Scenario:
    name: str
    config: Config
    workload: Workload
    about: str
    # Live runs: requests cancelled by the client after this many streamed chunks.
    cancel_after: dict[str, int] = field(default_factory=dict)

    def adapters(self) -> int:
        return max((r.adapter for r in self.workload.requests), default=0)


def _seed() -> Scenario:
    # R4-L1 and R14-L1 finish first, as in the PR's narrative ("Lets say R4-L1 completes").
    cfg, wl = seed_example(prompt_tokens=8, max_tokens=8, long={"R4-L1": 2, "R14-L1": 2})
    cfg = Config(max_loras=4, max_num_seqs=32, max_num_batched_tokens=512, block_size=BS)
    return Scenario("seed", cfg, wl, "vLLM PR #15422's running example (16 requests, max_loras 4)")


def _mix() -> Scenario:
    rng = random.Random(7)
    reqs = [Request(f"m{i}", (i % 8) + 1, rng.randint(8, 48), rng.randint(4, 12), 1 + i // 6)
            for i in range(48)]
    cfg = Config(max_loras=4, max_num_seqs=16, max_num_batched_tokens=256, block_size=BS)
    return Scenario("mix", cfg, Workload(reqs), "seed-shaped mix: 8 adapters round-robin, max_loras 4")


def _budget() -> Scenario:
    rng = random.Random(11)
    reqs = [Request(f"b{i}", rng.randint(0, 3), rng.randint(20, 90), rng.randint(2, 6), 1 + i // 3)
            for i in range(12)]
    cfg = Config(max_loras=2, max_num_seqs=8, max_num_batched_tokens=32, long_prefill_token_threshold=16,
                 block_size=BS)
    return Scenario("budget", cfg, Workload(reqs), "small token budget (32): chunked prefill, long-prefill cap 16")


def _kv() -> Scenario:
    rng = random.Random(13)
    reqs = [Request(f"k{i}", rng.randint(0, 3), rng.randint(24, 60), rng.randint(8, 24), 1 + i // 4)
            for i in range(12)]
    cfg = Config(max_loras=2, max_num_seqs=8, max_num_batched_tokens=256, kv_blocks=6, block_size=BS)
    return Scenario("kv", cfg, Workload(reqs), "small KV capacity (6 blocks of 32): preemption")


def _priority() -> Scenario:
    rng = random.Random(17)
    reqs = [Request(f"p{i}", rng.randint(0, 3), rng.randint(8, 40), rng.randint(4, 16), 1 + i // 4,
                    rng.choice([0, 1, 2])) for i in range(16)]
    cfg = Config(max_loras=2, max_num_seqs=4, max_num_batched_tokens=128, kv_blocks=6, queue="priority",
                 block_size=BS)
    return Scenario("priority", cfg, Workload(reqs), "priority queue with small KV (priority preemption)")


def _aborts() -> Scenario:
    rng = random.Random(19)
    reqs = [Request(f"a{i}", rng.randint(0, 3), rng.randint(8, 32), 24, 1 + i // 4) for i in range(12)]
    aborts = {f"a{i}": 1 + i // 4 + 4 for i in (1, 4, 6, 9)}
    cfg = Config(max_loras=2, max_num_seqs=8, max_num_batched_tokens=128, block_size=BS)
    return Scenario("aborts", cfg, Workload(reqs, aborts), "client aborts of streamed requests",
                    cancel_after={rid: 3 for rid in aborts})


def _starvation() -> Scenario:
    # Outputs long enough (32 tokens) that adapters 1 and 2 always have a
    # request running when the next one arrives, also on the live server,
    # where one arrival tick spans several engine steps. S = 1: the
    # adapter-3 request is r* one step after it arrives, so the guard's
    # drain shows within the 40-step stream (simulated: it waits 32 steps
    # under fair, 70 under vllm; at the default S = 16 fair's wait is 47).
    cfg, wl = starvation_stream(length=40, prompt_tokens=8, max_tokens=32)
    cfg = Config(max_loras=2, max_num_seqs=64, max_num_batched_tokens=512, starvation_steps=1,
                 block_size=BS)
    return Scenario("starvation", cfg, wl,
                    "max_loras 2, steady stream for adapters 1 and 2, one request for adapter 3")


SCENARIOS = {s.name: s for s in (f() for f in (_seed, _mix, _budget, _kv, _priority, _aborts, _starvation))}
VICTIM = "victim-a3"
