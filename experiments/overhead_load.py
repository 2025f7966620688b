"""The scheduler overhead (`lora_sched.bench.overhead`) under other loads, and one class profiled.

    python -m experiments.overhead_load [--queue priority] [--base-share F] [--kv F] [grid flags ...]
    python -m experiments.overhead_load --profile CLASS [--cell W,A,MAX_LORAS] [grid flags ...]

The overhead benchmark's grid, tables and JSON (its flags: `python -m
lora_sched.bench.overhead --help`) with the steady state changed: vLLM's
waiting queue (`--queue priority`: every request at priority 0, so the heap
orders by arrival), a share F of the requests for the base model
(`--base-share`), and the KV pool at F of what the batch and 8 more requests
need at their longest (`--kv`; below 1, running requests are preempted).
`--profile CLASS` (a class name, or a policy for its sync class) prints
cProfile's 15 largest cumulative functions over that class's measured
`schedule()` + `update_from_output()` on one cell (default: the grid's
largest W and A, smallest max_loras).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from lora_sched.bench import overhead
from lora_sched.bench.overhead import Cell, Entry, Runner


@dataclass(frozen=True)
class Load:
    """The steady state besides the cell: the waiting queue, the base model's share, the KV pool's fraction."""

    queue: str = "fcfs"
    base_share: float = 0.0
    kv_fraction: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "base_share": self.base_share, "kv_fraction": self.kv_fraction}

    def note(self) -> str:
        """What the table's heading adds."""
        return (f"{', priority queue' if self.queue == 'priority' else ''}"
                f"{f', base model {self.base_share:.0%}' if self.base_share else ''}"
                f"{f', KV {self.kv_fraction:.0%}' if self.kv_fraction < 1 else ''}")


class SharedRunner(Runner):
    """A runner whose new clients ask for the base model (adapter 0) at `base_share`."""

    base_share = 0.0

    def draw_adapter(self) -> int:
        if self.base_share and self.rng.random() < self.base_share:
            return 0
        return super().draw_adapter()


def build(entry: Entry, cell: Cell, *, starvation_steps: int, seed: int, load: Load = Load()) -> Runner:
    """`overhead.build` under `load`."""
    per_request = -(-(overhead.PROMPT + overhead.OUTPUT[1]) // overhead.BLOCK_SIZE)
    kv = max(per_request, int((overhead.RUNNING + 8) * per_request * load.kv_fraction))
    cfg = overhead.config(entry, cell, starvation_steps, kv_blocks=kv, queue=load.queue)
    runner = type("Runner", (SharedRunner,), {"base_share": load.base_share})
    return overhead.build(entry, cell, starvation_steps=starvation_steps, seed=seed, runner=runner, cfg=cfg)


def profile_cell(name: str, cell: Cell, *, steps: int, warmup: int, starvation_steps: int, seed: int = 0,
                 top: int = 15, load: Load = Load()) -> str:
    """cProfile's top `top` functions by cumulative time over `name`'s measured steps on `cell`."""
    chosen = [e for e in overhead.entries() if name in (e.name, e.policy) and not (e.policy == name and e.is_async)]
    if not chosen:
        known = ", ".join(e.name for e in overhead.entries())
        raise SystemExit(f"error: --profile: unknown class {name!r} (known: {known}, or a policy name)")
    r = build(chosen[0], cell, starvation_steps=starvation_steps, seed=seed, load=load)
    for _ in range(warmup):
        r.refill()
        r.step(measured=False)
    prof = cProfile.Profile()

    def profiled(inner: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            prof.enable()
            try:
                return inner(*a, **kw)
            finally:
                prof.disable()
        return call

    for method in ("schedule", "update_from_output"):  # the scheduler's work only, as the clock times it
        setattr(r.sched, method, profiled(getattr(r.sched, method)))
    for _ in range(steps):
        r.refill()
        r.step(measured=True)
    buf = io.StringIO()
    buf.write(f"== {r.entry.name} on {cell.label}: {len(r.step_ns)} steps, median "
              f"{statistics.median(r.step_ns) / 1e6:.2f} ms/step (profiled) ==\n")
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.overhead_load", description=__doc__.splitlines()[0])
    overhead.add_arguments(parser)
    parser.add_argument("--queue", choices=("fcfs", "priority"), default="fcfs",
                        help="vLLM's waiting queue (--scheduling-policy; default fcfs)")
    parser.add_argument("--base-share", type=float, default=0.0, metavar="F",
                        help="the share of requests for the base model, 0 <= F < 1 (default 0)")
    parser.add_argument("--kv", type=float, default=1.0, metavar="F",
                        help="the KV pool as a fraction of what the batch and 8 more requests need at "
                             "their longest, 0 < F <= 1 (default 1)")
    parser.add_argument("--profile", metavar="CLASS", default=None, help="cProfile one class on one cell")
    parser.add_argument("--cell", default=None, metavar="W,A,MAX_LORAS", help="--profile's cell")
    args = parser.parse_args(argv)
    load = Load(args.queue, args.base_share, args.kv)
    if not (0 <= load.base_share < 1 and 0 < load.kv_fraction <= 1):
        print("error: --base-share must be in [0, 1) and --kv in (0, 1]")
        return 2
    if args.profile:
        got = overhead.settings(args)
        if isinstance(got, str):
            print(f"error: {got}")
            return 2
        cells = got["cells"]
        cell = Cell(*overhead._ints(args.cell)) if args.cell else \
            Cell(max(c.waiting for c in cells), max(c.adapters for c in cells), min(c.max_loras for c in cells))
        print(profile_cell(args.profile, cell, steps=got["steps"], warmup=got["warmup"],
                           starvation_steps=got["starvation_steps"], seed=got["seed"], load=load))
        return 0
    return overhead.main(args, make=lambda *a, **kw: build(*a, **kw, load=load), note=load.note(),
                         config=load.to_dict())


if __name__ == "__main__":
    sys.exit(main())
