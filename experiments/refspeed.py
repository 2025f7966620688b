"""Reference speed: our `vllm` policy vs vLLM's own scheduler, same workload, same schedule.

    python -m experiments.refspeed [--prompts N] [--repeat R]

vLLM's side is `Scheduler.schedule()` + `update_from_output()` (built by
`conformance.inprocess.make_scheduler`, faked runner output). vLLM's KV pool
holds every request's whole sequence (`pool_blocks`: nothing is preempted),
and `compare` raises `ScheduleMismatch` when the two take a different number
of steps.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from lora_sched.bench.simulate import SEED_PROMPTS, seed_config, seed_requests
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import blocks_for


class ScheduleMismatch(RuntimeError):
    """The reference and vLLM took a different number of steps: their speeds are not comparable."""


@dataclass
class Speed:
    steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")


def pool_blocks(cfg: Config, reqs: list[Request]) -> int:
    """KV blocks that hold every request's whole sequence at once: vLLM never preempts with them."""
    return sum(blocks_for(r.prompt_tokens + r.max_tokens, cfg.block_size) for r in reqs)


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
    """Best of `repeat` runs of vLLM's `Scheduler` (schedule + update_from_output),
    its KV pool sized to the workload when `cfg` leaves it unlimited (`pool_blocks`)."""
    from lora_sched.conformance.inprocess import _model_output, _vllm_request, make_scheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    template = make_scheduler(cfg, "vllm", plenty_blocks=pool_blocks(cfg, reqs))
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
        steps = 0
        while sched.has_requests():  # conformance.inprocess.run_sync, counting the steps that schedule work
            out = sched.schedule()
            sampled = {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
            sched.update_from_output(out, _model_output(out, sampled))
            # The engine calls schedule() once more after the last output, with nothing to schedule:
            # the reference's driver does not, so only steps that schedule tokens are counted.
            steps += out.total_num_scheduled_tokens > 0
        dt = time.perf_counter() - t
        best = min(best or dt, dt)
    return Speed(steps, best or 0.0)


def compare(cfg: Config, reqs: list[Request], repeat: int = 3) -> tuple[Speed, Speed]:
    """(reference, vLLM) on the same workload; `ScheduleMismatch` unless both take the same steps."""
    ref = reference_speed(cfg, reqs, repeat)
    vl = vllm_speed(cfg, reqs, repeat)
    if ref.steps != vl.steps:
        raise ScheduleMismatch(f"the reference took {ref.steps} steps and vLLM {vl.steps}: different schedules, "
                               "so their speeds are not comparable")
    return ref, vl


def describe(ref: Speed, vl: Speed) -> str:
    return (f"reference `vllm` policy: {ref.steps_per_s:.0f} steps/s ({ref.steps} steps); "
            f"vLLM Scheduler: {vl.steps_per_s:.0f} steps/s ({vl.steps} steps, the same schedule); "
            f"ratio {ref.steps_per_s / vl.steps_per_s:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.refspeed", description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=SEED_PROMPTS, help="requests of the seed-shaped workload")
    p.add_argument("--repeat", type=int, default=3, help="best of this many runs on each side")
    args = p.parse_args(argv)
    cfg = seed_config()
    reqs = seed_requests(args.prompts)
    print(f"seed-shaped workload: {len(reqs)} requests, max_loras {cfg.max_loras}, max_num_seqs {cfg.max_num_seqs}, "
          f"vLLM's KV pool {pool_blocks(cfg, reqs)} blocks (the whole workload), best of {args.repeat}", flush=True)
    ref, vl = compare(cfg, reqs, args.repeat)
    print(describe(ref, vl))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
