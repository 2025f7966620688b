"""Realistic multi-tenant traffic: the workloads `fair` is judged on first (DESIGN section 3).

The shape production multi-LoRA papers use (S-LoRA, Punica, dLoRA): many
adapters with Zipf popularity plus base-model traffic, Poisson or on/off
arrivals at a load below, near or above capacity, ShareGPT-like lognormal
prompt and output lengths (medians 200 and 120 tokens, sigma 1, clipped to
2048), `max_num_seqs` 256, budgets 4096 and 8192, `max_loras` 2 to 16.

One seeded generator (`workload`) turns a `Spec` into requests. The grid
(`grid`) is a fixed list of specs, each with an index; the index decides,
before any rule is designed or tuned, whether a workload is in the *design*
set (index divisible by 3) or *held out* (the rest). Reports give both.

Load. Capacity is what the deployed scheduler sustains on this mix: the
requests `vllm` completes per step when the workload's requests (their
adapters and lengths) all arrive at once (`capacity`). With few LoRA slots
and many adapters that is far below the seats' `max_num_seqs / E[output]`,
since a slot changes hands only when its adapter drains; a load of 1.0 is
an arrival rate equal to it. Time is in scheduler steps; `bench.costmodel`
turns steps into seconds.

Measures (per policy, per workload; `measure`):
- throughput against `vllm`: the ratio of makespans, in steps and in
  cost-model seconds (`vllm`'s / the policy's; > 1 is faster);
- waits (steps from arrival to first admission): p50, p99, max;
- tail/head: the mean wait of the *tail* adapters' requests (the bottom
  half of the adapters by popularity rank) over the mean wait of the *head*
  adapters' (the `max_loras` most popular), each plus one step (a request
  admitted on its arrival step waited one step), so the ratio is defined at
  light load where the head waits 0;
- per-adapter p99 wait, by popularity rank.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

import numpy as np
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

PROMPT_MEDIAN, OUTPUT_MEDIAN, SIGMA, CLIP = 200, 120, 1.0, 2048
SEATS = 256


@dataclass(frozen=True)
class Spec:
    """One realistic workload: everything `workload` needs, seeded."""

    index: int
    adapters: int  # LoRA adapters, ranked 1 (most popular) .. adapters
    alpha: float  # Zipf exponent of adapter popularity
    base: float  # fraction of base-model requests
    arrivals: str  # "poisson" | "onoff"
    load: float  # arrival rate / seat capacity
    budget: int  # max_num_batched_tokens
    max_loras: int
    requests: int
    seed: int

    @property
    def design(self) -> bool:
        """In the design set (rules may be tuned on it) or held out."""
        return self.index % 3 == 0

    @property
    def name(self) -> str:
        return (f"real{self.index:02d}-A{self.adapters}-z{self.alpha:g}-b{self.base:g}-{self.arrivals}"
                f"-l{self.load:g}-T{self.budget}-m{self.max_loras}")

    def config(self, **overrides: object) -> Config:
        kw: dict = dict(max_loras=self.max_loras, max_num_seqs=SEATS, max_num_batched_tokens=self.budget)
        kw.update(overrides)
        return Config(**kw)


def _lognormal(rng: random.Random, median: float) -> int:
    return max(1, min(CLIP, int(round(rng.lognormvariate(math.log(median), SIGMA)))))


def _mix(spec: Spec) -> list[tuple[int, int, int]]:
    """(adapter, prompt, output) per request: Zipf adapters (rank r has
    weight r^-alpha), `base` of them base-model, lognormal lengths."""
    rng = random.Random(spec.seed)
    weights = [r ** -spec.alpha for r in range(1, spec.adapters + 1)]
    return [(0 if rng.random() < spec.base else rng.choices(range(1, spec.adapters + 1), weights)[0],
             _lognormal(rng, PROMPT_MEDIAN), _lognormal(rng, OUTPUT_MEDIAN)) for _ in range(spec.requests)]


_CAPACITY: dict[Spec, float] = {}


def capacity(spec: Spec) -> float:
    """Requests per step `vllm` completes on the mix when all of it arrives at
    step 1 (cached per spec)."""
    if spec not in _CAPACITY:
        from lora_sched.policy.driver import Workload, run

        burst = [Request(f"q{i}", a, p, o, 1) for i, (a, p, o) in enumerate(_mix(spec))]
        _CAPACITY[spec] = len(burst) / run(spec.config(), Workload(burst), policy="vllm").last_step
    return _CAPACITY[spec]


def workload(spec: Spec) -> list[Request]:
    """The requests of `spec`: the mix of `_mix`, arriving at `load` times
    `capacity`; Poisson, or on/off: 100 busy steps at twice the rate, then
    100 silent ones (the same mean rate)."""
    rng = random.Random(spec.seed + 1)
    rate = spec.load * capacity(spec)  # requests per step
    reqs: list[Request] = []
    t = 1.0
    for i, (adapter, prompt, output) in enumerate(_mix(spec)):
        if spec.arrivals == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.expovariate(2 * rate)
            if int(t) // 100 % 2 == 1:  # a silent period: jump to the next busy one
                t = (int(t) // 100 + 1) * 100
        reqs.append(Request(f"q{i}", adapter, prompt, output, int(t)))
    return reqs


def grid(*, large: bool = False, requests: int | None = None) -> list[Spec]:
    """The fixed grid: 12 workloads by default, 48 with `large`. The axes
    are crossed in a fixed pseudo-random order so that every prefix covers
    each axis; indices never change, so the design / held-out split is fixed."""
    rng = random.Random(20)
    n = 48 if large else 12
    specs = []
    for i in range(n):
        adapters = rng.choice((8, 32, 128, 512))
        specs.append(Spec(
            index=i, adapters=adapters, alpha=rng.choice((0.5, 1.0, 1.5)), base=rng.choice((0.1, 0.2, 0.3)),
            arrivals=rng.choice(("poisson", "onoff")), load=rng.choice((0.3, 0.7, 1.0, 1.5)),
            budget=rng.choice((4096, 8192)), max_loras=rng.choice((2, 4, 8, 16)),
            requests=requests if requests is not None else (2000 if large else 1200), seed=1000 + i))
    return specs


def tail_head(waits: dict[str, int], adapter_of: dict[str, int], spec: Spec) -> float:
    """Mean wait of the tail adapters' requests over the head adapters' (each + 1 step).

    Head: ranks 1..max_loras. Tail: the bottom half of the ranks that sent a
    request. Base-model requests are in neither."""
    ranks = sorted({a for a in adapter_of.values() if a > 0})
    if len(ranks) < 2:
        return 1.0
    head = set(ranks[:spec.max_loras])
    tail = set(ranks[len(ranks) - len(ranks) // 2:]) - head
    h = [waits[r] for r, a in adapter_of.items() if a in head and r in waits]
    t = [waits[r] for r, a in adapter_of.items() if a in tail and r in waits]
    if not h or not t:
        return 1.0
    return (float(np.mean(t)) + 1) / (float(np.mean(h)) + 1)


def spec_dict(spec: Spec) -> dict:
    return asdict(spec) | {"name": spec.name, "design": spec.design}
