"""Realistic multi-tenant traffic: the workloads `fair` is judged on first (docs/fair.md).

`workload` turns a seeded `Spec` (Zipf adapters plus base-model traffic,
Poisson or on/off arrivals, lognormal lengths: medians 200 and 120 tokens,
sigma 1, clipped to 2048) into requests; `grid` is a fixed list of specs
whose index decides the design set (divisible by 3) or held out. Load
(`Spec.unit`) is relative to `vllm`'s completions per step on the burst
(`capacity`) or to `max_num_seqs / E[output]`; time is in scheduler steps.
`measure`: throughput against `vllm`, waits, tail/head and fair's worst wait / B.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from lora_sched.bench.popularity import tail_head_ratio
from lora_sched.bench.simulate import simulate_policy
from lora_sched.policy.bound import observed_bound
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

PROMPT_MEDIAN, OUTPUT_MEDIAN, SIGMA, CLIP = 200, 120, 1.0, 2048
SEATS = 256
GRID_DRAW = 20  # the seed of the fixed grid's axes; fresh draws are above it (their request seeds follow)


def draw_suffix(draw: int) -> str:
    """What a fresh draw's result files carry (`-dK`); nothing for the fixed grid."""
    return "" if draw == GRID_DRAW else f"-d{draw}"


def check_draw(draw: int) -> None:
    """The fixed grid's draw, or a fresh one above it. Below it the request
    seeds (1000 * (draw - 19) + index) would be zero or negative and repeat
    other draws' (a random seed's sign is ignored), so it is refused."""
    if draw < GRID_DRAW:
        raise ValueError(f"draw {draw}: the fixed grid is draw {GRID_DRAW} and fresh draws are above it")



@dataclass(frozen=True)
class Spec:
    """One realistic workload: everything `workload` needs, seeded."""

    index: int
    adapters: int  # LoRA adapters, ranked 1 (most popular) .. adapters
    alpha: float  # Zipf exponent of adapter popularity
    base: float  # fraction of base-model requests
    arrivals: str  # "poisson" | "onoff"
    load: float  # arrival rate / seat capacity
    budget: int  # max_num_batched_tokens
    max_loras: int
    requests: int
    seed: int
    unit: str = "vllm"  # the load's unit: "vllm" (`capacity`) or "seats" (max_num_seqs / E[output])
    draw: int = GRID_DRAW  # the seed `grid` drew the axes with; another draw is a fresh grid

    @property
    def design(self) -> bool:
        """In the design set (rules may be tuned on it) or held out; every
        workload of a fresh draw is held out."""
        return self.draw == GRID_DRAW and self.index % 3 == 0

    @property
    def name(self) -> str:
        fresh = "" if self.draw == GRID_DRAW else f"d{self.draw}-"
        return (f"{fresh}real{self.index:02d}-A{self.adapters}-z{self.alpha:g}-b{self.base:g}-{self.arrivals}"
                f"-l{self.load:g}{'s' if self.unit == 'seats' else ''}-T{self.budget}-m{self.max_loras}")

    def config(self, **overrides: object) -> Config:
        kw: dict = dict(max_loras=self.max_loras, max_num_seqs=SEATS, max_num_batched_tokens=self.budget)
        kw.update(overrides)
        return Config(**kw)


def _lognormal(rng: random.Random, median: float, clip: int = CLIP) -> int:
    return max(1, min(clip, int(round(rng.lognormvariate(math.log(median), SIGMA)))))


def _mix(spec: Spec) -> list[tuple[int, int, int]]:
    """(adapter, prompt, output) per request: Zipf adapters (rank r has
    weight r^-alpha), `base` of them base-model, lognormal lengths."""
    rng = random.Random(spec.seed)
    weights = [r ** -spec.alpha for r in range(1, spec.adapters + 1)]
    return [(0 if rng.random() < spec.base else rng.choices(range(1, spec.adapters + 1), weights)[0],
             _lognormal(rng, PROMPT_MEDIAN), _lognormal(rng, OUTPUT_MEDIAN)) for _ in range(spec.requests)]


_CAPACITY: dict[Spec, float] = {}


def _mean_output(spec: Spec) -> float:
    mix = _mix(spec)
    return sum(o for _, _, o in mix) / len(mix)


def capacity(spec: Spec) -> float:
    """Requests per step `vllm` completes on the mix when all of it arrives at
    step 1 (cached per spec)."""
    if spec not in _CAPACITY:
        burst = [Request(f"q{i}", a, p, o, 1) for i, (a, p, o) in enumerate(_mix(spec))]
        _CAPACITY[spec] = len(burst) / run(spec.config(), Workload(burst), policy="vllm").last_step
    return _CAPACITY[spec]


def workload(spec: Spec) -> list[Request]:
    """The requests of `spec`: the mix of `_mix`, arriving at `load` times
    `capacity`; Poisson, or on/off: 100 busy steps at twice the rate, then
    100 silent ones (the same mean rate)."""
    rng = random.Random(spec.seed + 1)
    unit = capacity(spec) if spec.unit == "vllm" else SEATS / _mean_output(spec)
    rate = spec.load * unit  # requests per step
    reqs: list[Request] = []
    t = 1.0
    for i, (adapter, prompt, output) in enumerate(_mix(spec)):
        if spec.arrivals == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.expovariate(2 * rate)
            if int(t) // 100 % 2 == 1:  # a silent period: jump to the next busy one
                t = (int(t) // 100 + 1) * 100
        reqs.append(Request(f"q{i}", adapter, prompt, output, int(t)))
    return reqs


def grid(*, large: bool = False, requests: int | None = None, draw: int = GRID_DRAW) -> list[Spec]:
    """The fixed grid: 12 workloads by default, 48 with `large`, the axes crossed in a fixed
    pseudo-random order so that every prefix covers each axis and the design / held-out split
    is fixed. Another `draw` (above `GRID_DRAW`, `check_draw`) gives a fresh, held-out grid."""
    check_draw(draw)
    rng = random.Random(draw)
    n = 48 if large else 12
    specs = []
    for i in range(n):
        adapters = rng.choice((8, 32, 128, 512))
        specs.append(Spec(
            index=i, adapters=adapters, alpha=rng.choice((0.5, 1.0, 1.5)), base=rng.choice((0.1, 0.2, 0.3)),
            arrivals=rng.choice(("poisson", "onoff")), load=rng.choice((0.3, 0.7, 1.0, 1.5)),
            budget=rng.choice((4096, 8192)), max_loras=rng.choice((2, 4, 8, 16)),
            requests=requests if requests is not None else (1200 if large else 600),
            seed=1000 * (draw - GRID_DRAW + 1) + i, unit="seats" if i % 2 else "vllm", draw=draw))
    return specs


def tail_head(waits: dict[str, int], adapter_of: dict[str, int], spec: Spec) -> float:
    """Tail/head as `bench.popularity` defines it."""
    return tail_head_ratio(waits, adapter_of, spec.max_loras)


def spec_dict(spec: Spec) -> dict:
    return asdict(spec) | {"name": spec.name, "design": spec.design}


# ---- the benchmark ----------------------------------------------------------------------

# (policy, knob): fair at three values of S around its default, the field at
# its default knob (Config.starvation_steps: the drainer's threshold, the time
# slice's length), vtc and blocking without one.
POINTS: tuple[tuple[str, int | None], ...] = (
    ("vllm", None), ("fair", 4), ("fair", 16), ("fair", 64), ("drainer", 16), ("timeslice", 16), ("vtc", None),
    ("blocking", None))
DEFAULT_FAIR = ("fair", 16)


def label(point: tuple[str, int | None]) -> str:
    policy, knob = point
    return policy if knob is None else f"{policy} S={knob}"


def measure(spec: Spec, point: tuple[str, int | None]) -> dict:
    """One simulated run of `point` on `spec`, with the module docstring's measures
    (throughput ratios are filled in by `run_grid`, against vllm's run)."""
    policy, knob = point
    reqs = workload(spec)
    cfg = spec.config() if knob is None else spec.config(starvation_steps=knob)
    run = simulate_policy(cfg, reqs, policy)
    waits = run.waits
    adapter_of = {r.id: r.adapter for r in reqs}
    per: dict[int, list[int]] = {}
    for rid, w in waits.items():
        per.setdefault(adapter_of[rid], []).append(w)
    v = np.array(list(waits.values()), dtype=float)
    first = min(r.arrival for r in reqs)
    return {"workload": spec.name, "point": label(point), "policy": policy, "knob": knob,
            "steps": run.result.last_step - first + 1, "seconds": run.block["duration_s"],
            "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "max": int(v.max()),
            "tail_head": tail_head(waits, adapter_of, spec),
            "adapter_p99": {str(a): float(np.percentile(ws, 99)) for a, ws in sorted(per.items())},
            "bound": observed_bound(cfg, reqs, run.result.records) if policy == "fair" else None,
            "sim_s": run.sim_seconds}


def _job(args: tuple[Spec, tuple[str, int | None]]) -> dict:
    return measure(*args)



def run_grid(specs: list[Spec], points: tuple[tuple[str, int | None], ...] = POINTS, *, processes: int = 2,
             progress: object = print) -> list[dict]:
    """Every point on every spec (in `processes` worker processes), with
    `ratio_steps` and `ratio_s` against vllm's run of the same spec."""
    import multiprocessing

    jobs = [(s, p) for s in specs for p in points]
    rows: list[dict] = []
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        for i, row in enumerate(pool.imap_unordered(_job, jobs), 1):
            rows.append(row)
            progress(f"  [{i}/{len(jobs)}] {row['workload']} {row['point']}: {row['steps']} steps, "
                     f"max wait {row['max']}, tail/head {row['tail_head']:.2f} ({row['sim_s']:.1f} s)")
    base = {r["workload"]: r for r in rows if r["policy"] == "vllm"}
    design = {s.name: s.design for s in specs}
    for r in rows:
        b = base[r["workload"]]
        r["ratio_steps"] = b["steps"] / r["steps"]
        r["ratio_s"] = b["seconds"] / r["seconds"] if r["seconds"] else float("nan")
        r["design"] = design[r["workload"]]
    order = {s.name: i for i, s in enumerate(specs)}
    rank = {label(p): i for i, p in enumerate(points)}
    rows.sort(key=lambda r: (order[r["workload"]], rank[r["point"]]))
    return rows



def table(rows: list[dict]) -> str:
    """One line per (workload, point)."""
    head = (f"{'workload':44s} {'policy':13s} {'thr(s)':>7s} {'thr(st)':>7s} {'p50':>6s} {'p99':>7s} "
            f"{'max':>7s} {'tail/head':>9s}")
    lines = [head, "-" * len(head)]
    last = None
    for r in rows:
        name = r["workload"] + ("" if r["design"] else " (held out)") if r["workload"] != last else ""
        last = r["workload"]
        lines.append(f"{name:44s} {r['point']:13s} {r['ratio_s']:7.3f} {r['ratio_steps']:7.3f} {r['p50']:6.0f} "
                     f"{r['p99']:7.0f} {r['max']:7d} {r['tail_head']:9.2f}")
    return "\n".join(lines)


def report(out: Path, *, large: bool = False, requests: int | None = None, plots: bool = True,
           processes: int = 2, draw: int = GRID_DRAW) -> int:
    """`lora-sched bench --realistic`: run the grid, print the table and fair's
    worst wait / B, write `realistic.json` and the plots under `out`."""
    import json
    import time

    specs = grid(large=large, requests=requests, draw=draw)
    suffix = draw_suffix(draw)
    t0 = time.perf_counter()
    print(f"realistic grid: {len(specs)} workloads x {len(POINTS)} policy points", flush=True)
    rows = run_grid(specs, processes=processes, progress=lambda m: print(m, flush=True))
    print(table(rows))
    fair_rows = [r for r in rows if r["point"] == label(DEFAULT_FAIR)]
    ratios = [r["max"] / r["bound"] for r in fair_rows]
    print(f"\nfair's bound B (observed peaks Q, Qw) at {label(DEFAULT_FAIR)}: worst wait / B "
          f"{min(ratios):.4f} to {max(ratios):.4f}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"realistic{suffix}.json"
    path.write_text(json.dumps({"specs": [spec_dict(s) for s in specs], "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    if plots:
        from lora_sched.bench.plots import realistic_adapters, realistic_tradeoff

        for p in (realistic_adapters(rows, out / f"realistic-adapters{suffix}.png"),
                  realistic_tradeoff(rows, out / f"realistic-tradeoff{suffix}.png")):
            print(f"wrote {p}")
    print(f"realistic grid done in {time.perf_counter() - t0:.0f} s")
    return 0
