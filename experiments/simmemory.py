"""The simulator's time and peak memory on seed-shaped bursts (5k, 10k and 50k requests over 500 adapters).

    python -m experiments.simmemory [--sizes 1000 5000] [--policies vllm fair] [--records]
    python -m experiments.simmemory --large   # 5k, 10k and 50k (tens of minutes)

Each run is `policy.driver.run(keep_records=False)` in a fresh child process
(the seed's flags, every request at step 1, 500 adapters round robin); the
child prints its steps, wall and CPU time and peak RSS; `--records` keeps
every step record. Beside each policy's row, its speed against `vllm`'s on
the same burst (`speed_ratios`). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, resource, sys, time
from lora_sched.bench.simulate import seed_config, seed_requests
from lora_sched.policy.driver import Workload, run
n, policy, keep = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
reqs = seed_requests(n, adapters=500)
t, c = time.perf_counter(), time.process_time()
r = run(seed_config(), Workload(reqs), policy=policy, keep_records=keep, max_steps=10_000_000)
dt, cpu = time.perf_counter() - t, time.process_time() - c
waits = r.waits()
print(json.dumps({"steps": r.steps, "seconds": dt, "cpu": cpu,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "max_wait": max(waits.values()), "admitted": len(waits)}))
"""


def measure(n: int, policy: str, keep_records: bool = False) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), policy, "1" if keep_records else "0"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{policy} at {n} requests failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def speed_ratios(rows: dict[tuple[str, int], dict[str, float]]) -> list[str]:
    """One line per (policy, size) measured beside `vllm` at that size: its
    steps per CPU second over vllm's, and its speed over the whole burst
    (vllm's CPU time for the burst over its own; the two differ where the
    policies take different numbers of steps)."""
    out = []
    for (policy, n), r in rows.items():
        base = rows.get(("vllm", n))
        if policy == "vllm" or base is None:
            continue
        per_step = (r["steps"] / r["cpu"]) / (base["steps"] / base["cpu"])
        out.append(f"{policy} at {n}: {per_step:.2f}x vllm's steps per CPU second, "
                   f"{base['cpu'] / r['cpu']:.2f}x its speed over the whole burst")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.simmemory", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 5_000])
    p.add_argument("--large", action="store_true", help="5k, 10k and 50k requests (long)")
    p.add_argument("--policies", nargs="+", default=["vllm", "fair"])
    p.add_argument("--records", action="store_true", help="keep every step record")
    args = p.parse_args(argv)
    if args.large:
        args.sizes = [5_000, 10_000, 50_000]
    print(f"seed-shaped burst over 500 adapters, records {'kept' if args.records else 'not kept'}; one child each",
          flush=True)
    print(f"{'policy':>8} {'requests':>9} {'steps':>7} {'wall s':>8} {'cpu s':>8} {'ms/step':>8} {'peak MB':>8} "
          f"{'max wait':>9} {'load':>5}", flush=True)
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for policy in args.policies:
        for n in args.sizes:
            load = os.getloadavg()[0]
            r = rows[policy, n] = measure(n, policy, args.records)
            load = (load + os.getloadavg()[0]) / 2
            print(f"{policy:>8} {n:>9} {r['steps']:>7} {r['seconds']:8.1f} {r['cpu']:8.1f} "
                  f"{r['cpu'] / r['steps'] * 1e3:8.2f} {r['peak_mb']:8.0f} {r['max_wait']:>9} {load:5.1f}", flush=True)
    for line in speed_ratios(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
