"""The in-vLLM recorder's cost per step, side by side with recording off.

    python -m experiments.recorder_overhead [--requests 3000] [--adapters 64] [--steps 600]

vLLM's `Scheduler` is driven in-process (`conformance.inprocess`) through one
workload with thousands of requests waiting, timed over `schedule()` +
`update_from_output()` four ways: `plain` (vLLM's class), `off` (the
recording class, no trace open), `on` (JSONL flushed every line) and `on-gz`
(gzip segments rotated by size). The ways run `--repeat` times interleaved;
each one's best per-step time is printed with its overhead over `plain`.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

WAYS = ("plain", "off", "on", "on-gz")


def workload(n: int, adapters: int, seed: int = 3) -> list[Request]:
    rng = random.Random(seed)
    return [Request(f"r{i}", rng.randint(1, adapters), rng.randint(16, 400), rng.randint(8, 128), 1)
            for i in range(n)]


def time_way(way: str, cfg: Config, reqs: list[Request], steps: int, tmp: Path) -> tuple[float, int, int]:
    """(seconds in the scheduler, steps, trace bytes) for one way."""
    from lora_sched.conformance.inprocess import _model_output, _vllm_request, make_scheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    template = make_scheduler(cfg, "vllm", plenty_blocks=200_000)
    cls = Scheduler if way == "plain" else type(template)
    sched = cls(vllm_config=template.vllm_config, kv_cache_config=template.kv_cache_config,
                structured_output_manager=template.structured_output_manager, block_size=cfg.block_size,
                log_stats=False)
    out_path = tmp / way
    if way == "on":
        sched.start_recording(out_path.with_suffix(".jsonl"), async_scheduling=False)
    elif way == "on-gz":
        sched.start_recording(out_path, async_scheduling=False, rotate_mb=64, flush_every=256)
    for i, r in enumerate(reqs):
        sched.add_request(_vllm_request(r, i))
    spent, n = 0.0, 0
    while sched.has_requests() and n < steps:
        t = time.perf_counter()
        out = sched.schedule()
        spent += time.perf_counter() - t
        sampled = {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
        mro = _model_output(out, sampled)
        t = time.perf_counter()
        sched.update_from_output(out, mro)
        spent += time.perf_counter() - t
        n += 1
    if way.startswith("on"):
        sched.stop_recording()
    size = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    return spent, n, size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.recorder_overhead",
                                description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--adapters", type=int, default=64)
    p.add_argument("--steps", type=int, default=600, help="steps timed per run")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    cfg = Config(max_loras=4, max_num_seqs=256, max_num_batched_tokens=4096, policy="vllm")
    reqs = workload(args.requests, args.adapters)
    print(f"vLLM 0.32 Scheduler in-process: {args.requests} requests over {args.adapters} adapters arrive at once, "
          f"max_loras 4, 256 seats, 4096 tokens; {args.steps} steps timed, best of {args.repeat}", flush=True)
    best: dict[str, tuple[float, int, int]] = {}
    for _ in range(args.repeat):
        for way in WAYS:
            with tempfile.TemporaryDirectory() as d:
                spent, n, size = time_way(way, cfg, reqs, args.steps, Path(d))
            if way not in best or spent / n < best[way][0] / best[way][1]:
                best[way] = (spent, n, size)
    base = best["plain"][0] / best["plain"][1]
    print(f"{'way':>6} {'us/step':>9} {'overhead':>9} {'trace MB':>9}")
    for way in WAYS:
        spent, n, size = best[way]
        per = spent / n
        print(f"{way:>6} {per * 1e6:9.0f} {100 * (per - base) / base:8.1f}% {size / 2**20:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
