"""How tight is fair's B? A hill-climbing search for the worst wait / B.

For each stream family (`policy.workloads.FAMILIES`) and each configuration
variant the bound covers (sync, async, DP throttle, both), start from the
family's workload and climb: mutate one request (adapter, prompt, output,
arrival), add or drop one, keep the change when fair's worst wait / B does
not drop. B is `policy.fair.fair_bound` with Q the run's observed peak. A
ratio above 1 would break the bound (the search would then have found a
counterexample, which `tests/test_fair_growth.py` guards against); the
ratio's size says how loose B is on that family.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from lora_sched.policy.driver import DriverStuck, Workload, run
from lora_sched.policy.fair import observed_bound
from lora_sched.policy.workloads import FAMILIES
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

VARIANTS = {
    "sync": {},
    "async": {"async_scheduling": True},
    "throttle": {"prefill_schedule_interval": 2},
    "async+throttle": {"async_scheduling": True, "prefill_schedule_interval": 3},
}


@dataclass
class Climb:
    family: str
    variant: str
    start_ratio: float
    ratio: float
    worst: int
    bound: int
    requests: int


def score(cfg: Config, reqs: list[Request]) -> tuple[float, int, int]:
    """fair's worst wait / B on `reqs` (0 when the run cannot complete)."""
    try:
        result = run(replace(cfg, policy="fair"), Workload(reqs), max_steps=20_000)
    except (DriverStuck, ValueError):
        return 0.0, 0, 0
    waits = result.waits()
    if not waits:
        return 0.0, 0, 0
    worst = max(waits.values())
    bound = observed_bound(result.config, reqs, result.records)
    return worst / bound, worst, bound


def _mutate(rng: random.Random, reqs: list[Request], adapters: int, fresh: int) -> list[Request]:
    out = list(reqs)
    op = rng.random()
    if op < 0.15 and len(out) > 2:
        out.pop(rng.randrange(len(out)))
    elif op < 0.3:
        base = rng.choice(out)
        out.append(replace(base, id=f"m{fresh}", adapter=rng.randint(0, adapters),
                           arrival=max(1, base.arrival + rng.randint(-3, 3))))
    else:
        i = rng.randrange(len(out))
        r = out[i]
        field = rng.choice(["adapter", "prompt_tokens", "max_tokens", "arrival"])
        if field == "adapter":
            r = replace(r, adapter=rng.randint(0, adapters))
        elif field == "prompt_tokens":
            r = replace(r, prompt_tokens=max(1, r.prompt_tokens + rng.randint(-3, 3)))
        elif field == "max_tokens":
            r = replace(r, max_tokens=max(1, r.max_tokens + rng.randint(-3, 3)))
        else:
            r = replace(r, arrival=max(1, r.arrival + rng.randint(-4, 4)))
        out[i] = r
    return out


def climb(family: str, variant: str, *, length: int = 40, iterations: int = 300, seed: int = 0) -> Climb:
    rng = random.Random(seed)
    cfg, wl = FAMILIES[family](length, **VARIANTS[variant])
    reqs = list(wl.requests)
    adapters = max(r.adapter for r in reqs) + 1
    best, worst, bound = score(cfg, reqs)
    start = best
    for i in range(iterations):
        cand = _mutate(rng, reqs, adapters, i)
        s, w, b = score(cfg, cand)
        if s >= best:
            reqs, best, worst, bound = cand, s, w, b
    return Climb(family, variant, start, best, worst, bound, len(reqs))


def report(iterations: int = 300) -> list[Climb]:
    return [climb(f, v, iterations=iterations) for f in FAMILIES for v in VARIANTS]


if __name__ == "__main__":
    print(f"{'family':28}{'variant':16}{'start':>8}{'found':>8}{'wait':>7}{'B':>7}{'B/wait':>8}")
    for c in report():
        print(f"{c.family:28}{c.variant:16}{c.start_ratio:>8.3f}{c.ratio:>8.3f}{c.worst:>7}{c.bound:>7}"
              f"{c.bound / max(1, c.worst):>8.1f}", flush=True)
