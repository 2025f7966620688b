"""The DP-throttle crash of vLLM 0.32: the shortest workload, found by search.

vLLM's data-parallel engine core calls `schedule(throttle_prefills=True)` on
off-cadence steps (`--prefill-schedule-interval > 1`). Such a step defers
running requests' prefill chunks, so their adapters are missing from
`scheduled_loras`; the waiting scan admits a one-token-prompt request of
another adapter; on the next step both are scheduled and vLLM's
`assert len(scheduled_loras) <= max_loras` fails inside `schedule()`.

`shortest_crash` enumerates small workloads in order of size through the
reference (`policy.driver`, which models the throttle exactly and does not
crash: `batch_lora_cap` reports the batch) and returns the smallest one whose
run breaks `batch_lora_cap`; `tests/test_throttle_crash.py` then runs it on
vLLM's own scheduler and asserts the `AssertionError`, and runs it on
`lora_sched.scheduler.FairScheduler`, which must complete with both caps held.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations_with_replacement, product

from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

# The search space: max_loras 1, a 3-token budget and 3 seats (vLLM wants
# max_num_batched_tokens >= max_num_seqs), so a 4-token prompt is
# chunked), DP throttling every other step.
CONFIG = Config(max_loras=1, max_num_seqs=3, max_num_batched_tokens=3, prefill_schedule_interval=2, policy="vllm")
ADAPTERS = (0, 1, 2)
PROMPTS = (1, 4)
OUTPUTS = (1, 3)
ARRIVALS = (1, 2, 3)


@dataclass(frozen=True)
class Crash:
    workload: Workload
    step: int  # the step whose batch exceeds max_loras (vLLM asserts in its schedule())
    adapters: list[int]


def _shapes() -> list[tuple[int, int, int, int]]:
    return sorted(product(ARRIVALS, ADAPTERS, PROMPTS, OUTPUTS))


def workloads(n: int) -> Iterator[Workload]:
    """Every workload of `n` requests over the search space, each once (no permutations)."""
    for combo in combinations_with_replacement(_shapes(), n):
        yield Workload([Request(f"r{i}", a, p, o, t) for i, (t, a, p, o) in enumerate(combo)])


def first_cap_break(config: Config, wl: Workload) -> tuple[int, list[int]] | None:
    """The first step of the reference run whose batch holds more than max_loras adapters."""
    adapter = {r.id: r.adapter for r in wl.requests}
    for rec in run(config, wl).records:
        loras = sorted({adapter[r] for r in rec.scheduled if adapter[r] > 0})
        if len(loras) > config.max_loras:
            return rec.step, loras
    return None


def shortest_crash(config: Config = CONFIG, max_requests: int = 3) -> Crash:
    """The smallest workload (fewest requests, then fewest steps to the crash,
    then fewest tokens) whose run under vLLM's rule breaks the batch cap."""
    for n in range(1, max_requests + 1):
        found: list[tuple[int, int, Crash]] = []
        for wl in workloads(n):
            hit = first_cap_break(config, wl)
            if hit is not None:
                tokens = sum(r.prompt_tokens + r.max_tokens for r in wl.requests)
                found.append((hit[0], tokens, Crash(wl, *hit)))
        if found:
            return min(found, key=lambda f: (f[0], f[1]))[2]
    raise LookupError(f"no crash with up to {max_requests} requests in the search space")
