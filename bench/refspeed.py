"""Reference speed: our `vllm` policy vs vLLM's own scheduler, same workload, one process.

Why: the reference is the oracle the conformance harness replays vLLM's
traces through, and the checkers run it millions of times; its cost relative
to vLLM's real `Scheduler.schedule()` + `update_from_output()` says whether
it is usable at the scale vLLM runs. vLLM's scheduler is built without a
model by `conformance.inprocess.make_scheduler` (the way vLLM's tests'
`create_scheduler` does); we take its config and construct vLLM's plain
`Scheduler` from it, so no recording overhead is timed. The fake model
output samples one token for each request not mid-prefill, as the runner does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request


@dataclass
class Speed:
    steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")


def reference_speed(cfg: Config, reqs: list[Request], repeat: int = 3) -> Speed:
    """Best of `repeat` runs of the reference `vllm` policy through the driver."""
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = run(cfg, Workload(list(reqs)), policy="vllm")
        dt = time.perf_counter() - t
        best = min(best or dt, dt)
    return Speed(len(result.records), best or 0.0)


def vllm_speed(cfg: Config, reqs: list[Request], repeat: int = 3) -> Speed:
    """Best of `repeat` runs of vLLM's `Scheduler` (schedule + update_from_output)."""
    from lora_sched.conformance.inprocess import _vllm_request, make_scheduler, run_sync
    from vllm.v1.core.sched.scheduler import Scheduler

    template = make_scheduler(cfg, "vllm")
    best = None
    steps = 0
    for _ in range(repeat):
        sched = Scheduler(vllm_config=template.vllm_config, kv_cache_config=template.kv_cache_config,
                          structured_output_manager=template.structured_output_manager,
                          block_size=cfg.block_size, log_stats=False)
        vreqs = [_vllm_request(r, i) for i, r in enumerate(sorted(reqs, key=lambda r: r.arrival))]
        t = time.perf_counter()
        # Request rate inf: every request arrives before the first step.
        for vr in vreqs:
            sched.add_request(vr)
        steps = run_sync(sched)
        dt = time.perf_counter() - t
        best = min(best or dt, dt)
    return Speed(steps, best or 0.0)
