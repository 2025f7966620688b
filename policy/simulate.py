"""`lora-sched simulate`: run a named workload through a reference policy."""

from __future__ import annotations

import argparse
import sys

from policy.driver import DriverStuck, run
from policy.workloads import seed_example, starvation_stream
from spec.config import POLICIES

SCENARIOS = {
    "seed": lambda: seed_example(long={"R4-L1": 2, "R14-L1": 2}, max_tokens=16),
    "starvation": lambda: starvation_stream(40),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=list(POLICIES), default="vllm")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="seed",
                   help="seed: PR #15422's running example (R4-L1 and R14-L1 finish first); "
                        "starvation: max_loras 2, a stream for adapters 1 and 2, one adapter-3 request")
    p.add_argument("--out", default="out/trace.jsonl", help="where to write the trace")


def main(args: argparse.Namespace) -> int:
    config, workload = SCENARIOS[args.scenario]()
    try:
        result = run(config, workload, policy=args.policy, trace_path=args.out)
    except DriverStuck as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    admitting = [r for r in result.records if r.admitted]
    print(f"{args.policy} on {args.scenario}: {len(workload.requests)} requests, "
          f"{len(result.records)} steps (last step {result.last_step})")
    for rec in admitting[:6]:
        print(f"  step {rec.step:>4}: admitted {', '.join(rec.admitted)}")
    waits = result.waits()
    worst = max(waits.items(), key=lambda kv: kv[1])
    print(f"  worst wait before first admission: {worst[1]} steps ({worst[0]})")
    print(f"trace written to {args.out}")
    return 0
