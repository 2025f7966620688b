"""The starvation sweep and the tuning of `fair`'s `starvation_steps`.

`starvation_sweep`: the starved request's wait per policy as the stream that
starves it grows, beside B (`policy.bound.fair_bound`). `tuning_sweep`:
throughput(fair) / throughput(vllm) (cost-model seconds) against S, and the
smallest S that keeps the ratio >= 0.97 on every workload.
"""

from __future__ import annotations

from dataclasses import replace

from lora_sched.bench.simulate import progress, seed_config, seed_requests, simulate_policy
from lora_sched.policy.bound import observed_bound, workload_bound
from lora_sched.policy.costmodel import DEFAULT, CostModel
from lora_sched.policy.driver import RunResult, Workload, run
from lora_sched.policy.workloads import starvation_stream
from lora_sched.spec.config import POLICIES, Config
from lora_sched.spec.request import Request

STREAM_LENGTHS = (10, 20, 40, 80, 160, 320)
STARVATION_STEPS = (0, 8, 16, 24, 32, 48, 64, 96, 128, 256)
TARGET_RATIO = 0.97


def bound_for(cfg: Config, reqs: list[Request], result: RunResult | None = None) -> int:
    """B for this workload: its largest prompt and output, and Q and Qw the
    peaks of `result` (all the requests when no run is given)."""
    return observed_bound(cfg, reqs, result.records) if result is not None else workload_bound(cfg, reqs)


def guard_steps(result: RunResult) -> int:
    """Steps in which `fair`'s guard held a victim adapter's request (rule 4)."""
    return sum(1 for rec in result.records if "fair_guard" in rec.holds.values())


def starvation_sweep(lengths: tuple[int, ...] = STREAM_LENGTHS, *,
                     starvation_steps: int | None = None) -> list[dict]:
    """Wait (steps) of `victim-a3` per policy at each stream length, with B."""
    rows = []
    for n in lengths:
        cfg, wl = starvation_stream(n)
        if starvation_steps is not None:
            cfg = replace(cfg, starvation_steps=starvation_steps)
        row: dict = {"length": n}
        for policy in POLICIES:
            res = run(cfg, Workload(list(wl.requests)), policy=policy)
            waits = res.waits()
            row[policy] = waits.get("victim-a3")
            row[f"{policy}_max"] = max(waits.values())
            if policy == "fair":
                row["bound"] = bound_for(cfg, wl.requests, res)
                row["fair_guard_steps"] = guard_steps(res)
        rows.append(row)
        progress(f"starvation stream {n}: victim wait vllm {row['vllm']} fair {row['fair']} "
                 f"(B = {row['bound']})")
    return rows


def tuning_workloads() -> dict[str, tuple[Config, list[Request]]]:
    """Workloads on which S is priced: the seed, the seed at a finite rate, the stream."""
    scfg, stream = starvation_stream(160)
    return {
        "seed (rate inf)": (seed_config(), seed_requests()),
        "seed, 4 req/step": (seed_config(), seed_requests(arrival_every=0.25)),
        "seed random adapters, 2 req/step": (seed_config(), seed_requests(assign="random",
                                                                          arrival_every=0.5)),
        "starvation stream 160": (scfg, list(stream.requests)),
    }


def tuning_sweep(values: tuple[int, ...] = STARVATION_STEPS, model: CostModel = DEFAULT) -> dict:
    """throughput(fair)/throughput(vllm) and max wait vs S, per workload."""
    out: dict = {"values": list(values), "workloads": {}}
    for name, (cfg, reqs) in tuning_workloads().items():
        base = simulate_policy(cfg, reqs, "vllm", model)
        rows = []
        for s in values:
            c = replace(cfg, starvation_steps=s)
            fr = simulate_policy(c, reqs, "fair", model)
            rows.append({"starvation_steps": s,
                         "ratio": fr.block["request_throughput"] / base.block["request_throughput"],
                         "fair_max_wait": max(fr.waits.values()), "bound": bound_for(c, reqs, fr.result),
                         "guard_steps": guard_steps(fr.result), "steps": len(fr.result.records)})
        out["workloads"][name] = {"vllm_max_wait": max(base.waits.values()), "rows": rows}
        progress(f"tuning on {name}: ratio at S={values[0]} {rows[0]['ratio']:.3f}, "
                 f"at S={values[-1]} {rows[-1]['ratio']:.3f}")
    ok = [s for i, s in enumerate(values)
          if all(w["rows"][i]["ratio"] >= TARGET_RATIO for w in out["workloads"].values())]
    out["recommended"] = min(ok) if ok else None
    # The same, counting only values at which the guard acts on some workload
    # (an S so large that the guard never fires meets the target trivially).
    firing = [s for s in ok if any(w["rows"][values.index(s)]["guard_steps"] > 0
                                   for w in out["workloads"].values())]
    out["recommended_firing"] = min(firing) if firing else None
    out["target_ratio"] = TARGET_RATIO
    return out
