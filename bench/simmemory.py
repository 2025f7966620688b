"""The simulator's time and peak memory on seed-shaped bursts: 5k, 10k and 50k requests over 500 adapters.

Each run is `policy.driver.run(keep_records=False)` in a fresh child
process (the seed's server flags, `bench.simulate.seed_config`; every
request arrives at step 1, prompts rescaled as the seed's, 500 adapters
round robin): step records are not kept and finished requests are
forgotten, so memory follows the requests live at once, which in a burst
is every request at the start. The child prints its steps, time and peak
RSS (`ru_maxrss`); `--records` runs the same with every record kept, as
callers that read `RunResult.records` do.

    python -m lora_sched.bench.simmemory [--sizes 5000 10000 50000] [--policies vllm fair] [--records]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
from lora_sched.bench.simulate import seed_config, seed_requests
from lora_sched.policy.driver import Workload, run
n, policy, keep = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
reqs = seed_requests(n, adapters=500)
t = time.perf_counter()
r = run(seed_config(), Workload(reqs), policy=policy, keep_records=keep, max_steps=10_000_000)
dt = time.perf_counter() - t
waits = r.waits()
print(json.dumps({"steps": r.steps, "seconds": dt, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "max_wait": max(waits.values()), "admitted": len(waits)}))
"""


def measure(n: int, policy: str, keep_records: bool = False) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), policy, "1" if keep_records else "0"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{policy} at {n} requests failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lora_sched.bench.simmemory", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[5_000, 10_000, 50_000])
    p.add_argument("--policies", nargs="+", default=["vllm", "fair"])
    p.add_argument("--records", action="store_true", help="keep every step record (the old default)")
    args = p.parse_args(argv)
    print(f"seed-shaped burst over 500 adapters, records {'kept' if args.records else 'not kept'}; one child each",
          flush=True)
    print(f"{'policy':>8} {'requests':>9} {'steps':>7} {'seconds':>8} {'peak MB':>8} {'max wait':>9}", flush=True)
    for policy in args.policies:
        for n in args.sizes:
            r = measure(n, policy, args.records)
            print(f"{policy:>8} {n:>9} {r['steps']:>7} {r['seconds']:8.1f} {r['peak_mb']:8.0f} {r['max_wait']:>9}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
