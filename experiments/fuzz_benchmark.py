"""Benchmark: fuzz throughput with 1 and 2 Ray workers, side by side (`python -m experiments.fuzz_benchmark`).

Runs the same seed range with 1 worker, then 2, `--rounds` times alternating
(so that load from elsewhere on the machine hits both alike), each on a fresh
local Ray instance, without shrinking; prints workloads/s after the workers
are ready (vLLM imported) and the ratio. A benchmark, not a test: it prints
figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from lora_sched.fuzz.campaign import Options, run_campaign


def measure(workers: int, count: int, seed: int) -> dict:
    """The run entry of one campaign on a fresh local Ray (workloads/s, startup, worker ms per workload)."""
    import ray

    with tempfile.TemporaryDirectory() as d:
        rep = run_campaign(Options(count=count, workers=workers, seed=seed, shrink=False, progress_every=30.0),
                           Path(d), log=lambda s: None)
    ray.shutdown()
    return rep.runs[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    rates: dict[int, list[float]] = {1: [], 2: []}
    for r in range(a.rounds):
        for w in (1, 2):
            load = os.getloadavg()[0]
            run = measure(w, a.count, a.seed)
            rates[w].append(run["workloads_per_s"])
            print(f"round {r + 1}: {w} worker(s): {run['workloads_per_s']:.2f} workloads/s, "
                  f"{run['worker_ms_per_workload']} ms of worker time per workload, "
                  f"workers on CPU {100 * run['worker_cpu_share']:.0f}% of it "
                  f"(seeds {a.seed}..{a.seed + a.count - 1}, startup {run['startup_seconds']:.1f}s, "
                  f"load average {load:.1f} on {os.cpu_count()} CPUs)", flush=True)
    m1, m2 = statistics.median(rates[1]), statistics.median(rates[2])
    print(f"median: 1 worker {m1:.2f}/s, 2 workers {m2:.2f}/s, speed-up {m2 / m1:.2f}x (goal >= 1.7x)")


if __name__ == "__main__":
    main()
