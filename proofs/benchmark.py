"""Benchmark of the proofs (prints figures; never asserts on time).

    python -m proofs.benchmark [--budget 60]

1. deepest BMC depth (no_hol_blocking for vllm/fair, batch_lora_cap for
   all three, so that the search does not stop at a counterexample) reached
   within the budget for 8 requests / 3 adapters / max_loras 2, per policy;
   every query has the remaining budget as its Z3 timeout, so nothing hangs;
2. time of each k-induction proof (default bounds);
3. incremental (push/pop) vs fresh solver time per depth.
"""

from __future__ import annotations

import argparse
import time

from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine

BIG = enc.Bounds(requests=8, adapters=3, max_prompt=2, max_output=2, max_loras=(2, 2), max_num_seqs=(1, 4),
                 max_num_batched_tokens=(1, 6), starvation_steps=(0, 3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--fresh-depth", type=int, default=8)
    a = ap.parse_args()
    print(f"1. deepest BMC depth in {a.budget:.0f}s, {BIG.describe()}")
    for pol, prop in (("blocking", "batch_lora_cap"), ("vllm", "no_hol_blocking"), ("fair", "no_hol_blocking"),
                      ("vllm", "batch_lora_cap"), ("fair", "batch_lora_cap")):
        r = engine.bmc(BIG, pol, prop, 1000, deadline=time.monotonic() + a.budget)
        print(f"   {pol:9s} {prop:18s} depth {r.depth:3d} ({r.verdict}, {r.seconds:.1f}s)", flush=True)
    print("2. k-induction proofs, default bounds", enc.Bounds().describe())
    for pol in ("vllm", "fair"):
        for prop in enc.SAFETY:
            r = engine.kinduction(enc.Bounds(), pol, prop, 3)
            print(f"   {pol:5s} {prop:20s} {r.verdict} k={r.depth} {r.seconds:.1f}s", flush=True)
    print(f"3. incremental vs fresh solver per depth (vllm no_hol_blocking, {BIG.describe()})")
    r = engine.bmc(BIG, "vllm", "no_hol_blocking", a.fresh_depth, fresh=True)
    for k, inc, fr in r.timings:
        print(f"   depth {k:2d}: incremental {inc:6.2f}s  fresh {fr:6.2f}s", flush=True)


if __name__ == "__main__":
    main()
