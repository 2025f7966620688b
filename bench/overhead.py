"""Scheduler overhead: vLLM's real `schedule()` + `update_from_output()` per step, stock vs ours
(`lora-sched bench --overhead`, `python -m lora_sched.bench.overhead`).

Times that scheduler work for vLLM's stock `Scheduler` and `AsyncScheduler`
and every class of `lora_sched.scheduler.CLASSES`, built in-process as
`conformance.inprocess` builds them (runner output faked; async classes get
each output one step late), on a closed-loop workload over the grid W x A x
max_loras (docs/bench.md). Per cell the classes are warmed up and measured
round robin; a class's figure is its median ms/step in wall and thread CPU
time, its ratio over its stock base, flagged over 1.2. `--out [PATH]`
writes JSON (default `bench/results/overhead.json`). Other loads and a
profile: `python -m experiments.overhead_load`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

FORMAT = "lora-sched-overhead"
VERSION = 1
LIMIT = 1.2  # the goal: every class within 1.2x its stock base, in every cell
DEFAULT_OUT = "bench/results/overhead.json"
RUNNING = 256  # max_num_seqs: the batch
BUDGET = 8192  # max_num_batched_tokens
PROMPT = 64
OUTPUT = (128, 384)  # output tokens of every request but the first batch's (uniform)
BLOCK_SIZE = 16
WAITING = (0, 500, 2000, 10000)
ADAPTERS = (8, 64, 512)
MAX_LORAS = (4, 16)
STEPS = 8
EXTRA = 4  # a cheap cell measures up to EXTRA x --steps rounds, within --cell-seconds
CELL_SECONDS = 2.0
WARMUP_AFTER_S = 4  # warm-up = starvation_steps + this: the backlog has waited past S when the clock starts
QUICK = {"waiting": (0, 100), "adapters": (8,), "max_loras": (4,), "steps": 3, "warmup": 6,
         "starvation_steps": 2, "cell_seconds": 0.0}
STOCK = ("Scheduler", "AsyncScheduler")


@dataclass(frozen=True)
class Cell:
    waiting: int  # W: backlog beyond the batch
    adapters: int  # A: adapters of the backlog (uniform)
    max_loras: int

    @property
    def label(self) -> str:
        return f"W={self.waiting} A={self.adapters} max_loras={self.max_loras}"


@dataclass(frozen=True)
class Entry:
    """One scheduler class of the comparison."""

    name: str  # the class's __name__ (the table's and the JSON's key)
    cls: type
    policy: str  # "stock" or the CLASSES key
    is_async: bool

    @property
    def base(self) -> str:
        return STOCK[1] if self.is_async else STOCK[0]


def entries() -> list[Entry]:
    """Stock `Scheduler` and `AsyncScheduler`, then every class of `lora_sched.scheduler.CLASSES`."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from lora_sched.scheduler import CLASSES

    out = [Entry(STOCK[0], Scheduler, "stock", False), Entry(STOCK[1], AsyncScheduler, "stock", True)]
    for policy, classes in CLASSES.items():
        for cls in classes:
            out.append(Entry(cls.__name__, cls, policy, issubclass(cls, AsyncScheduler)))
    return out


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "max": max(values), "mean": statistics.fmean(values)} if values else {}


@dataclass
class Runner:
    """One scheduler driven through the closed loop of `Cell`."""

    entry: Entry
    cell: Cell
    sched: Any
    rng: random.Random
    next_id: int = 0
    queue: list[tuple[Any, set[str]]] = field(default_factory=list)  # scheduled, output not applied
    reissue: list[int] = field(default_factory=list)  # adapters of the clients whose request finished
    adapter_of: dict[str, int] = field(default_factory=dict)
    step_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)  # the same, in this thread's CPU time
    schedule_ns: list[int] = field(default_factory=list)
    update_ns: list[int] = field(default_factory=list)
    waiting_seen: list[int] = field(default_factory=list)  # before each measured schedule()
    running_seen: list[int] = field(default_factory=list)  # right after each measured schedule()
    in_system_seen: list[int] = field(default_factory=list)
    admitted: int = 0  # new requests scheduled in the measured steps
    admitted_warmup: int = 0
    finished: int = 0

    @property
    def target(self) -> int:
        return RUNNING + self.cell.waiting

    def add(self, adapter: int, max_tokens: int) -> None:
        from lora_sched.conformance.inprocess import _vllm_request

        rid = f"r{self.next_id}"
        self.sched.add_request(_vllm_request(Request(rid, adapter, PROMPT, max_tokens, 0), self.next_id))
        self.adapter_of[rid] = adapter
        self.next_id += 1

    def fill(self) -> None:
        """The initial batch (staggered lengths, adapters 1..max_loras), then the backlog."""
        active = min(self.cell.max_loras, self.cell.adapters)
        for i in range(RUNNING):
            self.add(1 + i % active, 1 + i * (OUTPUT[0] + OUTPUT[1]) // (2 * RUNNING))
        for _ in range(self.cell.waiting):
            self.add(self.draw_adapter(), self.rng.randint(*OUTPUT))

    def draw_adapter(self) -> int:
        """A new client's adapter: uniform over 1..A."""
        return self.rng.randint(1, self.cell.adapters)

    def refill(self, *, broken: bool = False) -> None:
        """Each client whose request finished sends its next one (same adapter)."""
        running, waiting = self.sched.get_request_counts()
        need = self.target - running - waiting
        adapters, self.reissue = self.reissue, []
        if broken:
            return
        for i in range(need):
            adapter = adapters[i] if i < len(adapters) else self.draw_adapter()
            self.add(adapter, self.rng.randint(*OUTPUT))

    def step(self, *, measured: bool) -> None:
        from lora_sched.conformance.inprocess import _model_output

        sched = self.sched
        running, waiting = sched.get_request_counts()
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        out = sched.schedule()
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        running_after = len(sched.running)
        sampled = {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
        self.queue.append((out, sampled))
        t2 = t3 = c2 = c3 = 0
        if len(self.queue) > (1 if self.entry.is_async else 0):
            done, done_sampled = self.queue.pop(0)
            model_output = _model_output(done, done_sampled)
            c2, t2 = time.thread_time_ns(), time.perf_counter_ns()
            sched.update_from_output(done, model_output)
            t3, c3 = time.perf_counter_ns(), time.thread_time_ns()
            for rid in done.num_scheduled_tokens:
                if rid not in sched.requests:
                    self.reissue.append(self.adapter_of.pop(rid))
                    self.finished += int(measured)
        new = len(out.scheduled_new_reqs)
        if measured:
            self.step_ns.append((t1 - t0) + (t3 - t2))
            self.cpu_ns.append((c1 - c0) + (c3 - c2))
            self.schedule_ns.append(t1 - t0)
            self.update_ns.append(t3 - t2)
            self.waiting_seen.append(waiting)
            self.in_system_seen.append(running + waiting)
            self.running_seen.append(running_after)
            self.admitted += new
        else:
            self.admitted_warmup += new

    def result(self, base_ms: float | None, base_cpu_ms: float | None = None) -> dict[str, Any]:
        ms = statistics.median(self.step_ns) / 1e6 if self.step_ns else float("nan")
        cpu = statistics.median(self.cpu_ns) / 1e6 if self.cpu_ns else float("nan")
        return {
            "class": self.entry.name, "policy": self.entry.policy, "async": self.entry.is_async,
            "base": self.entry.base, "steps": len(self.step_ns),
            "ms_per_step": ms, "step_ms": [t / 1e6 for t in self.step_ns],
            "ratio": ms / base_ms if base_ms else float("nan"),
            "cpu_ms_per_step": cpu, "cpu_ratio": cpu / base_cpu_ms if base_cpu_ms else float("nan"),
            "mean_ms": statistics.fmean(self.step_ns) / 1e6 if self.step_ns else float("nan"),
            "schedule_ms": statistics.median(self.schedule_ns) / 1e6 if self.schedule_ns else float("nan"),
            "update_ms": statistics.median(self.update_ns) / 1e6 if self.update_ns else float("nan"),
            "waiting": _summary(self.waiting_seen), "running": _summary(self.running_seen),
            "in_system": _summary(self.in_system_seen),
            "admitted": self.admitted, "admitted_warmup": self.admitted_warmup, "finished": self.finished,
        }


def config(entry: Entry, cell: Cell, starvation_steps: int, kv_blocks: int | None = None, **kw: Any) -> Config:
    """The `Config` `entry`'s class runs `cell` under: KV blocks for the batch and 8 more requests
    at their longest unless `kv_blocks` is given; `kw`: more `Config` fields."""
    per_request = -(-(PROMPT + OUTPUT[1]) // BLOCK_SIZE)
    return Config(max_loras=cell.max_loras, max_num_seqs=RUNNING, max_num_batched_tokens=BUDGET,
                  kv_blocks=kv_blocks or (RUNNING + 8) * per_request, block_size=BLOCK_SIZE,
                  async_scheduling=entry.is_async, policy="vllm", starvation_steps=starvation_steps, **kw)


def build(entry: Entry, cell: Cell, *, starvation_steps: int, seed: int, runner: type[Runner] = Runner,
          cfg: Config | None = None) -> Runner:
    """`entry`'s class configured for `cell` (or `cfg`), built as `conformance.inprocess` builds vLLM's."""
    from lora_sched.conformance.inprocess import make_scheduler

    sched = make_scheduler(cfg or config(entry, cell, starvation_steps), scheduler_class=entry.cls)
    out = runner(entry, cell, sched, random.Random(f"{seed}:{cell.waiting}:{cell.adapters}:{cell.max_loras}"))
    out.fill()
    return out


Build = Callable[..., Runner]  # `build`'s signature


def run_cell(cell: Cell, chosen: Sequence[Entry], *, steps: int, warmup: int, starvation_steps: int,
             seed: int, cell_seconds: float = 0.0, broken_refill: bool = False, make: Build = build) -> list[Runner]:
    """Build (with `make`), warm up and measure every class of `chosen` on `cell`, interleaved.

    `steps` rounds at least; then more (up to `EXTRA` x `steps` in all) while
    the measured rounds have taken less than `cell_seconds`."""
    runners = [make(e, cell, starvation_steps=starvation_steps, seed=seed) for e in chosen]
    for _ in range(warmup):
        for r in runners:
            r.refill()
            r.step(measured=False)
    gc.collect()
    gc.freeze()
    try:
        t0, k = time.perf_counter(), 0
        while k < steps or (k < EXTRA * steps and time.perf_counter() - t0 < cell_seconds):
            shift = k % len(runners)
            k += 1
            for r in runners[shift:] + runners[:shift]:
                r.refill(broken=broken_refill)
                r.step(measured=True)
    finally:
        gc.unfreeze()
    return runners


def cell_result(cell: Cell, runners: Sequence[Runner]) -> dict[str, Any]:
    base = {r.entry.name: statistics.median(r.step_ns) / 1e6 for r in runners
            if r.entry.policy == "stock" and r.step_ns}
    base_cpu = {r.entry.name: statistics.median(r.cpu_ns) / 1e6 for r in runners
                if r.entry.policy == "stock" and r.cpu_ns}
    classes = {r.entry.name: r.result(base.get(r.entry.base), base_cpu.get(r.entry.base)) for r in runners}
    over = [n for n, c in classes.items() if c["policy"] != "stock" and not c["ratio"] <= LIMIT]
    over_cpu = [n for n, c in classes.items() if c["policy"] != "stock" and not c["cpu_ratio"] <= LIMIT]
    return {"waiting": cell.waiting, "adapters": cell.adapters, "max_loras": cell.max_loras,
            "classes": classes, "over": over, "over_cpu": over_cpu}


def grid(waiting: Iterable[int], adapters: Iterable[int], max_loras: Iterable[int]) -> list[Cell]:
    return [Cell(w, a, m) for w in waiting for a in adapters for m in max_loras]


def run_grid(cells: Sequence[Cell], *, steps: int, warmup: int, starvation_steps: int, seed: int = 0,
             cell_seconds: float = 0.0, broken_refill: bool = False, log: Any = None,
             policies: Sequence[str] | None = None, make: Build = build) -> dict[str, Any]:
    """Every cell, every class (or stock's and `policies`' only); the results as the JSON `--out` writes."""
    import vllm

    from lora_sched.recorder import TRACE_ENV

    if os.environ.pop(TRACE_ENV, None) is not None and log:
        log(f"overhead: {TRACE_ENV} unset (recording would be timed)")
    chosen = [e for e in entries() if policies is None or e.policy == "stock" or e.policy in policies]
    t_start = time.perf_counter()
    results = []
    for cell in cells:
        t = time.perf_counter()
        runners = run_cell(cell, chosen, steps=steps, warmup=warmup, starvation_steps=starvation_steps,
                           seed=seed, cell_seconds=cell_seconds, broken_refill=broken_refill, make=make)
        results.append(cell_result(cell, runners))
        del runners
        if log:
            steps_run = results[-1]["classes"][STOCK[0]]["steps"] if STOCK[0] in results[-1]["classes"] else steps
            log(f"overhead: {cell.label}: {steps_run} steps, {time.perf_counter() - t:.1f} s")
    return {
        "format": FORMAT, "version": VERSION, "command": sys.argv, "vllm": vllm.__version__,
        "limit": LIMIT, "seed": seed,
        "config": {"running": RUNNING, "max_num_seqs": RUNNING, "max_num_batched_tokens": BUDGET,
                   "prompt_tokens": PROMPT, "output_tokens": list(OUTPUT), "block_size": BLOCK_SIZE,
                   "starvation_steps": starvation_steps, "steps": steps, "warmup": warmup,
                   "cell_seconds": cell_seconds, "max_steps": EXTRA * steps},
        "classes": [{"class": e.name, "policy": e.policy, "async": e.is_async, "base": e.base} for e in chosen],
        "cells": results, "wall_s": time.perf_counter() - t_start,
    }


# ---- output ------------------------------------------------------------------------

def _short(name: str) -> str:
    return name.removesuffix("Scheduler").removeprefix("Async") or name


def table(report: dict[str, Any]) -> str:
    """One line per cell: stock ms/step (sync, async), then each class's ratio to its base."""
    classes = [c for c in report["classes"] if c["policy"] != "stock"]
    heads = [(c["class"], _short(c["class"]) + ("/a" if c["async"] else "/s")) for c in classes]
    width = max(12, *(len(h) + 2 for _, h in heads))
    lines = [f"{'W':>6}{'A':>5}{'loras':>6}{'sync ms':>9}{'async ms':>9}" + "".join(f"{h:>{width}}" for _, h in heads)]
    over_cells = over_cpu_cells = 0
    for cell in report["cells"]:
        cs = cell["classes"]
        row = (f"{cell['waiting']:>6}{cell['adapters']:>5}{cell['max_loras']:>6}"
               f"{cs[STOCK[0]]['ms_per_step']:>9.2f}{cs[STOCK[1]]['ms_per_step']:>9.2f}")
        for name, _ in heads:
            ratio, cpu = cs[name]["ratio"], cs[name].get("cpu_ratio", float("nan"))
            mark = "*" if name in cell["over"] else " "
            cpu_mark = "*" if name in cell.get("over_cpu", ()) else " "
            row += f"{f'{ratio:.2f}{mark}{cpu:.2f}{cpu_mark}':>{width}}"
        over_cells += bool(cell["over"])
        over_cpu_cells += bool(cell.get("over_cpu"))
        lines.append(row)
    lines.append(f"(each class: wall ratio, then CPU ratio: median ms/step over the stock base's, in wall time "
                 f"and in the thread's CPU time, which a busy machine's other jobs do not inflate; "
                 f"/s vs {STOCK[0]}, /a vs {STOCK[1]}; * = over {LIMIT}x; {over_cells} of {len(report['cells'])} "
                 f"cells have a class over it in wall time, {over_cpu_cells} in CPU time)")
    return "\n".join(lines)


# ---- CLI ----------------------------------------------------------------------------

def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def add_arguments(parser: argparse.ArgumentParser | Any, *, standalone: bool = True) -> None:
    """The overhead flags; `standalone=False` leaves out `--out` and `--seed`, which `lora-sched bench` has."""
    parser.add_argument("--steps", type=int, default=None,
                        help=f"measured steps per class and cell, at least (default {STEPS})")
    parser.add_argument("--cell-seconds", type=float, default=None,
                        help=f"a cell whose --steps rounds took less keeps measuring, up to {EXTRA} x --steps "
                             f"(default {CELL_SECONDS}; 0: exactly --steps)")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"unmeasured steps before them (default starvation_steps + {WARMUP_AFTER_S})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a tiny grid for tests: W {QUICK['waiting']}, A {QUICK['adapters']}, max_loras "
                             f"{QUICK['max_loras']}, {QUICK['steps']} steps, warmup {QUICK['warmup']}, "
                             f"starvation_steps {QUICK['starvation_steps']}, cell-seconds 0 (each unless given)")
    parser.add_argument("--waiting", default=None, help=f"W values (default {','.join(map(str, WAITING))})")
    parser.add_argument("--adapters", default=None, help=f"A values (default {','.join(map(str, ADAPTERS))})")
    parser.add_argument("--max-loras", default=None, help=f"max_loras values (default {','.join(map(str, MAX_LORAS))})")
    parser.add_argument("--starvation-steps", type=int, default=None,
                        help="lora_sched's starvation_steps, as --additional-config passes it (default 16)")
    parser.add_argument("--overhead-policies", default=None, metavar="P,Q",
                        help="time only these policies' classes next to stock's (default: every class)")
    if standalone:
        parser.add_argument("--out", nargs="?", const=DEFAULT_OUT, default=None,
                            help=f"write the results as JSON to this file (PATH/overhead.json unless PATH ends in "
                                 f".json; {DEFAULT_OUT} when no PATH is given); nothing is written without it")
        parser.add_argument("--seed", type=int, default=0, help="the request stream's seed")


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def settings(args: argparse.Namespace) -> dict[str, Any] | str:
    """`run_grid`'s arguments from the flags (`cells` first), or the error."""
    quick = bool(args.quick)
    pick = lambda flag, key, full: _ints(flag) if flag else (QUICK[key] if quick else full)  # noqa: E731
    waiting = pick(args.waiting, "waiting", WAITING)
    adapters = pick(args.adapters, "adapters", ADAPTERS)
    max_loras = pick(args.max_loras, "max_loras", MAX_LORAS)

    s = args.starvation_steps
    s = s if s is not None else (QUICK["starvation_steps"] if quick else Config().starvation_steps)
    steps = args.steps if args.steps is not None else (QUICK["steps"] if quick else STEPS)
    warmup = args.warmup if args.warmup is not None else (QUICK["warmup"] if quick else s + WARMUP_AFTER_S)
    cell_seconds = args.cell_seconds if args.cell_seconds is not None else \
        (QUICK["cell_seconds"] if quick else CELL_SECONDS)
    raw_seed = getattr(args, "seed", 0)
    seed = int(raw_seed) if str(raw_seed).isdigit() else sum(map(ord, str(raw_seed)))
    if steps < 1 or warmup < 0 or min(waiting + adapters + max_loras) < 0 or min(adapters + max_loras) < 1:
        return "--steps must be >= 1, --warmup >= 0, W >= 0, A and max_loras >= 1"
    only = tuple(x for x in args.overhead_policies.split(",") if x) if getattr(args, "overhead_policies", None) \
        else None
    known = {e.policy for e in entries()} - {"stock"}
    if only is not None and not set(only) <= known:
        return (f"--overhead-policies: {', '.join(sorted(set(only) - known))} not shipped; "
                f"choose from {', '.join(sorted(known))}")
    return {"cells": grid(waiting, adapters, max_loras), "steps": steps, "warmup": warmup, "starvation_steps": s,
            "seed": seed, "cell_seconds": cell_seconds, "policies": only}


def main(args: argparse.Namespace, *, make: Build = build, note: str = "", config: dict[str, Any] | None = None
         ) -> int:
    """The grid's run, table and JSON; `make`, `note` (the heading's) and `config` (the JSON's) give
    another load (`experiments.overhead_load`)."""
    got = settings(args)
    if isinstance(got, str):
        print(f"error: {got}")
        return 2
    cells, s, steps = got.pop("cells"), got["starvation_steps"], got["steps"]
    _progress(f"overhead: {len(cells)} cells, {steps} steps or more within {got['cell_seconds']} s "
              f"(warmup {got['warmup']}), starvation_steps {s}, seed {got['seed']}")
    report = run_grid(cells, **got, log=_progress, make=make)
    report["config"].update(config or {})
    print(f"== Scheduler overhead: vLLM {report['vllm']} schedule() + update_from_output(), "
          f"{RUNNING} running, budget {BUDGET}, starvation_steps {s}, {steps}-{EXTRA * steps} steps/cell{note} ==")
    print(table(report))
    if args.out:
        out = Path(args.out)
        if out.suffix != ".json":
            out = out / "overhead.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, default=str))
        _progress(f"overhead: results in {out}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lora_sched.bench.overhead",
                                     description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
