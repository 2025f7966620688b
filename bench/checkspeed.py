"""`lora-sched check` at operator scale: steps per second and peak memory on long traces.

    python -m lora_sched.bench.checkspeed [--steps 10000 100000 ...] [--dir out/checkspeed]
    python -m lora_sched.bench.checkspeed --goal   # one 4 M-step trace, deleted afterwards unless --keep

A light serving trace (docs/operator-scale.md), simulated by the reference
`vllm` policy and written gzip, is checked by `lora-sched check TRACE
--policy vllm` in a fresh process; wall and CPU time, steps per second, peak
RSS and the load average are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

CONFIG = Config(max_loras=4, max_num_seqs=32, max_num_batched_tokens=2048, policy="vllm")
ADAPTERS = 16
RATE = 0.5  # arrivals per step
GOAL_STEPS, GOAL_RATE, GOAL_MB = 4_000_000, 10_000, 1024  # issue 22


def serving_requests(steps: int, *, seed: int = 1, rate: float = RATE, adapters: int = ADAPTERS) -> list[Request]:
    """Poisson arrivals at `rate` per step over about `steps` steps; a fifth for the
    base model, the rest Zipf over `adapters`; prompts 8-512 and outputs 4-48 tokens."""
    rng = random.Random(seed)
    weights = [1 / (a ** 1.1) for a in range(1, adapters + 1)]
    reqs, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= steps:
            return reqs
        adapter = 0 if rng.random() < 0.2 else rng.choices(range(1, adapters + 1), weights)[0]
        prompt = min(512, max(8, int(rng.lognormvariate(4.0, 0.8))))
        output = min(48, max(4, int(rng.lognormvariate(2.6, 0.5))))
        reqs.append(Request(f"r{len(reqs)}", adapter, prompt, output, int(t)))


def make_trace(path: Path, steps: int, config: Config = CONFIG) -> tuple[int, float]:
    """Simulate the serving trace into `path`; returns (steps, seconds)."""
    reqs = serving_requests(steps)
    t = time.perf_counter()
    result = run(config, Workload(reqs), trace_path=path, keep_records=False, max_steps=10 * steps + 1000,
                 source="lora-sched reference (bench.checkspeed)")
    return result.steps, time.perf_counter() - t


def time_check(path: Path, policy: str | None = "vllm") -> dict[str, object]:
    """Run `lora-sched check` on `path` in a child process: wall time, peak RSS, verdict."""
    cmd = [sys.executable, "-m", "lora_sched.cli", "check", str(path), "--json", "--quiet"]
    if policy is not None:
        cmd += ["--policy", policy]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = (load + os.getloadavg()[0]) / 2
    peak_kb = after.ru_maxrss
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"check failed ({out.returncode}): {out.stderr.strip()}")
    v = json.loads(out.stdout)
    return {"steps": v["steps"], "requests": v["requests"], "seconds": wall, "cpu": cpu, "ok": v["ok"],
            # ru_maxrss of the children is the largest so far: only a new maximum is this child's own.
            "peak_mb": peak_kb / 1024 if peak_kb > before.ru_maxrss else None,
            "replay": v.get("replay", {}).get("verdict"), "load": load}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lora_sched.bench.checkspeed", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, nargs="+", default=[10_000, 30_000, 100_000],
                   help="trace lengths to generate and check (increasing: the peak RSS of each is its own)")
    p.add_argument("--dir", default="out/checkspeed", help="where the traces go")
    p.add_argument("--keep", action="store_true", help="keep the generated traces")
    p.add_argument("--kv-blocks", type=int, default=None, help="KV blocks of 16 tokens (default: unlimited)")
    p.add_argument("--goal", action="store_true", help=f"check one {GOAL_STEPS:,}-step trace (minutes)")
    args = p.parse_args(argv)
    if args.goal:
        args.steps = [GOAL_STEPS]
    config = CONFIG if args.kv_blocks is None else replace(CONFIG, kv_blocks=args.kv_blocks)
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    print(f"config: {json.dumps(config.to_dict())}; {ADAPTERS} adapters, {RATE} arrivals/step; "
          f"check = every property + replay against vllm, in a child process", flush=True)
    print(f"{'steps':>10} {'requests':>9} {'trace MB':>9} {'gen s':>7} {'wall s':>7} {'cpu s':>7} "
          f"{'steps/s':>8} {'/cpu s':>8} {'peak MB':>8} {'load':>5} verdict", flush=True)
    for n in sorted(args.steps):
        path = d / f"serving-{n}.jsonl.gz"
        steps, gen_s = make_trace(path, n, config)
        r = time_check(path)
        size = path.stat().st_size / 2**20
        peak = f"{r['peak_mb']:8.0f}" if r["peak_mb"] is not None else f"{'<prev':>8}"
        print(f"{r['steps']:>10} {r['requests']:>9} {size:9.1f} {gen_s:7.1f} {r['seconds']:7.1f} {r['cpu']:7.1f} "
              f"{r['steps'] / r['seconds']:8.0f} {r['steps'] / r['cpu']:8.0f} {peak} {r['load']:5.1f} "
              f"{'ok' if r['ok'] else 'FAILED'} (replay {r['replay']})", flush=True)
        if not args.keep:
            os.unlink(path)
        if args.goal:
            peak = f"{r['peak_mb']:,.0f} MB" if r["peak_mb"] is not None else "not measured"
            print(f"goal (issue 22): >= {GOAL_RATE:,} steps/s with the replay: {r['steps'] / r['seconds']:,.0f} "
                  f"per wall second, {r['steps'] / r['cpu']:,.0f} per CPU second (load {r['load']:.1f}); "
                  f"<= {GOAL_MB} MB peak: {peak}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
