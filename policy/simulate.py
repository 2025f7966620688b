"""`lora-sched simulate`: run a named workload through a reference policy."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from lora_sched.policy.driver import DriverStuck, run
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.spec import releases
from lora_sched.spec.config import POLICIES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=POLICIES, default="vllm")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="seed",
                   help="; ".join(f"{name}: {sc.about}" for name, sc in sorted(SCENARIOS.items())))
    p.add_argument("--out", default="out/trace.jsonl", help="where to write the trace")
    p.add_argument("--vllm", choices=list(releases.RELEASES), default=releases.NEWEST,
                   help=f"the vLLM release the reference follows (default {releases.NEWEST}; spec/releases.py)")


def main(args: argparse.Namespace) -> int:
    sc = SCENARIOS[args.scenario]
    config, workload = replace(sc.config, vllm=args.vllm), sc.workload
    try:
        result = run(config, workload, policy=args.policy, trace_path=args.out)
    except DriverStuck as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    admitting = [r for r in result.records if r.admitted]
    print(f"{args.policy} on {args.scenario} (vLLM {args.vllm}): {len(workload.requests)} requests, "
          f"{len(result.records)} steps (last step {result.last_step})")
    for rec in admitting[:6]:
        print(f"  step {rec.step:>4}: admitted {', '.join(rec.admitted)}")
    waits = result.waits()
    worst = max(waits.items(), key=lambda kv: kv[1])
    print(f"  worst wait before first admission: {worst[1]} steps ({worst[0]})")
    print(f"trace written to {args.out}")
    return 0
