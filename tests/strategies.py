"""Shared Hypothesis strategies: scheduler configs and workloads that cannot get stuck.

A generated pair (config, workload) is always *completable*: every request
can run to the end on its own. Concretely, with `p` the largest prompt and
`m` the largest `max_tokens` the config is drawn for:

- with chunked prefill off, a request's whole current sequence (after a
  preemption: prompt plus the tokens it already generated, at most
  `p + m - 1`) must fit the token budget, so the budget is at least `p + m`;
- with limited KV, a request's whole sequence must fit the KV blocks, so
  `kv_blocks * block_size >= p + m`.

If a run on such a pair still gets stuck (`policy.driver.DriverStuck`) that
is a bug of the reference, and the tests report it rather than filter it out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st
from lora_sched.policy.driver import Workload
from lora_sched.spec.config import POLICIES, Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import blocks_for


@dataclass(frozen=True)
class Bounds:
    """Per-request length bounds a config was drawn to accommodate."""

    max_prompt: int
    max_output: int
    adapters: int  # LoRA ids are drawn from 0..adapters


@st.composite
def bounds(draw, *, max_prompt: int = 12, max_output: int = 8, max_adapters: int = 5) -> Bounds:
    return Bounds(
        max_prompt=draw(st.integers(1, max_prompt)),
        max_output=draw(st.integers(1, max_output)),
        adapters=draw(st.integers(0, max_adapters)),
    )


@st.composite
def configs(
    draw,
    b: Bounds,
    *,
    policy: str = "vllm",
    kv: bool | None = None,
    queue: str | None = None,
    async_scheduling: bool | None = None,
) -> Config:
    """A small config under which every request within `b` can complete.

    `kv`, `queue` and `async_scheduling` pin the corresponding choice when given.
    """
    chunked = draw(st.booleans())
    need = b.max_prompt + b.max_output  # a whole sequence, with one token of slack
    lo_budget = 1 if chunked else need
    budget = draw(st.integers(lo_budget, max(lo_budget, 48)))
    limited = draw(st.booleans()) if kv is None else kv
    block_size = draw(st.integers(1, 4))
    kv_blocks = None
    if limited:
        least = blocks_for(need, block_size)
        kv_blocks = draw(st.integers(least, least + 6))
    return Config(
        max_loras=draw(st.integers(1, 4)),
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 2, 3, 5, 8])),
        kv_blocks=kv_blocks,
        block_size=block_size,
        queue=draw(st.sampled_from(["fcfs", "priority"])) if queue is None else queue,
        async_scheduling=draw(st.booleans()) if async_scheduling is None else async_scheduling,
        policy=policy,
        starvation_steps=draw(st.integers(0, 6)),
        prefill_schedule_interval=draw(st.sampled_from([1, 1, 2, 3])),
    )


@st.composite
def requests(draw, b: Bounds, *, n_max: int = 12, arrival_max: int = 10, priorities: bool = True) -> list[Request]:
    n = draw(st.integers(1, n_max))
    reqs = []
    for i in range(n):
        reqs.append(Request(
            id=f"r{i}",
            adapter=draw(st.integers(0, b.adapters)),
            prompt_tokens=draw(st.integers(1, b.max_prompt)),
            max_tokens=draw(st.integers(1, b.max_output)),
            arrival=draw(st.integers(1, arrival_max)),
            priority=draw(st.integers(0, 2)) if priorities else 0,
        ))
    return reqs


@st.composite
def workloads(draw, b: Bounds, **kw) -> Workload:
    """Requests plus client aborts (a random subset, each at a random step)."""
    reqs = draw(requests(b, **kw))
    aborts = {}
    for r in reqs:
        if draw(st.integers(0, 5)) == 0:
            aborts[r.id] = draw(st.integers(r.arrival, r.arrival + 12))
    return Workload(reqs, aborts)


@st.composite
def scenarios(draw, *, policy: str | None = None, **config_kw) -> tuple[Config, Workload]:
    """A completable (config, workload) pair; `policy` pins the policy."""
    b = draw(bounds())
    p = policy if policy is not None else draw(st.sampled_from(POLICIES))
    cfg = draw(configs(b, policy=p, **config_kw))
    return cfg, draw(workloads(b))


def with_policy(cfg: Config, policy: str) -> Config:
    return replace(cfg, policy=policy)
