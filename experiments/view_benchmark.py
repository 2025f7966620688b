"""Render speed of `lora-sched view` on the seed's 500-request workload: `python -m experiments.view_benchmark`.

The trace is the simulated benchmark's seed run (`bench.simulate.seed_requests`,
500 prompts over 8 adapters, max_loras 4, 120 output tokens) through the
`vllm` reference; the figures (seconds to read and lay out, to write the
HTML, to write the PNG) are printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from lora_sched.bench.simulate import seed_config, seed_requests
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import POLICIES
from lora_sched.view import html, png
from lora_sched.view.layout import layout_file


def seed_trace(path: str, policy: str = "vllm", n: int = 500) -> str:
    run(seed_config(policy=policy), Workload(seed_requests(n)), trace_path=path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="vllm", choices=POLICIES)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--out", default=None, help="folder for the trace and the pictures (default: a temporary one)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        d = args.out or tmp
        os.makedirs(d, exist_ok=True)
        trace = seed_trace(os.path.join(d, f"seed{args.requests}-{args.policy}.jsonl"), args.policy, args.requests)
        t0 = time.perf_counter()
        layout = layout_file(trace)
        t1 = time.perf_counter()
        size = html.render(layout, os.path.join(d, "seed.html"))
        t2 = time.perf_counter()
        drawn = png.render(layout, os.path.join(d, "seed.png"))
        t3 = time.perf_counter()
    print(f"seed, {args.policy}: {len(layout.rows)} requests, {len(layout.steps)} steps, "
          f"{drawn.segments} segments")
    print(f"  read + lay out: {t1 - t0:.2f}s")
    print(f"  HTML:           {t2 - t1:.2f}s ({size // 1024} KiB)")
    print(f"  PNG:            {t3 - t2:.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
