"""Simulated benchmark: the seed's configuration through the reference policies.

The cost model (`policy.costmodel`) turns each reference step into seconds;
from the per-request token timeline this computes the result block of vLLM's
`benchmark_serving.py` with its definitions (TTFT, TPOT, ITL, numpy's linear
percentiles) and each adapter's mean and maximum wait before first admission.
`seed_requests`: the seed's 500 prompts (docs/bench.md).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np
from lora_sched.policy.costmodel import DEFAULT, CostModel, StepFeatures
from lora_sched.policy.driver import RunResult, Workload, run
from lora_sched.policy.gate import Gate
from lora_sched.policy.workloads import seed_mix
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

SEED_PROMPTS = 500
SEED_INPUT_TOKENS = 124520
SEED_OUTPUT = 120
SEED_ADAPTERS = 8


def progress(msg: str) -> None:
    """One progress line on stderr (the bench prints results on stdout)."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def seed_config(**overrides: object) -> Config:
    """The seed's server flags: max_loras 4, max_num_seqs 256, max_num_batched_tokens 4096."""
    return Config(**{"max_loras": 4, "max_num_seqs": 256, "max_num_batched_tokens": 4096, **overrides})


def seed_requests(n: int = SEED_PROMPTS, *, adapters: int = SEED_ADAPTERS, seed: int = 2,
                  output: int = SEED_OUTPUT, assign: str = "round_robin",
                  total_input: int | None = None, arrival_every: float = 0.0) -> list[Request]:
    """`seed_mix`'s prompts rescaled to the seed's 124520 input tokens, adapters round
    robin (or uniform with `assign="random"`), `output` tokens each, all at step 1."""
    reqs = seed_mix(n, adapters=adapters, seed=seed, max_tokens=output, arrival_every=arrival_every)
    target = total_input if total_input is not None else round(SEED_INPUT_TOKENS * n / SEED_PROMPTS)
    raw = [r.prompt_tokens for r in reqs]
    factor = target / sum(raw)
    prompts = [max(4, min(2048, round(p * factor))) for p in raw]
    # Spread the rounding residue one token at a time over the longest prompts.
    order = sorted(range(n), key=lambda i: -prompts[i])
    k = 0
    while (diff := target - sum(prompts)) != 0 and n:
        i = order[k % n]
        step = 1 if diff > 0 else -1
        if 4 <= prompts[i] + step <= 2048:
            prompts[i] += step
        k += 1
    rng = random.Random(seed + 1)
    out = []
    for r, p in zip(reqs, prompts, strict=True):
        adapter = rng.randrange(1, adapters + 1) if assign == "random" else r.adapter
        out.append(replace(r, prompt_tokens=p, adapter=adapter))
    return out


# ---- from steps to a timeline ---------------------------------------------------------------


@dataclass
class Timeline:
    """Per-step features and times, per-request token times, for one run."""

    policy: str
    steps: list[int]  # step numbers of the records
    features: list[StepFeatures]
    idle_steps: int  # steps the driver jumped over (no request in the system)
    step_end: list[float] = field(default_factory=list)  # seconds, end of each record's step
    arrival: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, list[float]] = field(default_factory=dict)  # token receive times
    # Index into `steps` of each token, so times can be recomputed for another model.
    token_steps: dict[str, list[int]] = field(default_factory=dict)
    arrival_index: dict[str, int] = field(default_factory=dict)  # records before its arrival step


def build_timeline(result: RunResult) -> Timeline:
    """Walk the records once: features per step, which step delivers each token.

    A step's sampled tokens are available at the end of that step. A request
    samples when its computed tokens reach prompt + tokens sampled so far
    (vLLM's `_update_after_schedule`, async scheduling included); a preemption
    resets the computed count and the recompute delivers no token until it
    catches up.
    """
    reqs = result.scheduler.state.reqs
    computed: dict[str, int] = {}
    generated: dict[str, int] = {}
    steps: list[int] = []
    feats: list[StepFeatures] = []
    token_steps: dict[str, list[int]] = {rid: [] for rid in reqs}
    idle = 0
    prev = 0
    for idx, rec in enumerate(result.records):
        idle += rec.step - prev - 1
        prev = rec.step
        for rid in rec.preempted:
            computed[rid] = 0
        adapters = set()
        total = 0
        for rid, n in rec.scheduled.items():
            total += n
            a = reqs[rid].req.adapter
            if a > 0:
                adapters.add(a)
            c = computed.get(rid, 0) + n
            computed[rid] = c
            g = generated.get(rid, 0)
            if c >= reqs[rid].req.prompt_tokens + g:
                generated[rid] = g + 1
                token_steps[rid].append(idx)
        steps.append(rec.step)
        feats.append(StepFeatures(total, len(rec.scheduled), len(adapters)))
    tl = Timeline(result.config.policy, steps, feats, idle, token_steps=token_steps)
    step_idx = np.array(steps)
    for rid, rs in reqs.items():
        tl.arrival_index[rid] = int(np.searchsorted(step_idx, rs.req.arrival))
    return tl


def apply_model(tl: Timeline, model: CostModel) -> Timeline:
    """Give every step a duration; idle steps cost an empty forward pass (t0)."""
    t = 0.0
    ends = []
    prev = 0
    for s, f in zip(tl.steps, tl.features, strict=True):
        t += (s - prev - 1) * model.t0
        prev = s
        t += model.step_time(f)
        ends.append(t)
    tl.step_end = ends
    starts = [0.0] + ends[:-1]
    tl.arrival = {}
    for rid, i in tl.arrival_index.items():
        tl.arrival[rid] = starts[i] if i < len(starts) else (ends[-1] if ends else 0.0)
    tl.tokens = {rid: [ends[i] for i in idxs] for rid, idxs in tl.token_steps.items()}
    return tl


# ---- benchmark_serving's result block ---------------------------------------------------------


def _stats(prefix: str, values: Iterable[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float) * 1e3
    if v.size == 0:
        return {f"mean_{prefix}_ms": 0.0, f"median_{prefix}_ms": 0.0, f"p99_{prefix}_ms": 0.0}
    return {f"mean_{prefix}_ms": float(v.mean()), f"median_{prefix}_ms": float(np.median(v)),
            f"p99_{prefix}_ms": float(np.percentile(v, 99))}


def result_block(tl: Timeline, prompts: dict[str, int]) -> dict[str, float]:
    """The figures benchmark_serving prints, from the token timeline alone."""
    done = [rid for rid, ts in tl.tokens.items() if ts]
    start = min(tl.arrival.values(), default=0.0)
    duration = max((tl.tokens[r][-1] for r in done), default=0.0) - start
    ttft, tpot, itl = [], [], []
    out_tokens = 0
    for rid in done:
        ts = tl.tokens[rid]
        out_tokens += len(ts)
        ttft.append(ts[0] - tl.arrival[rid])
        if len(ts) > 1:
            tpot.append((ts[-1] - ts[0]) / (len(ts) - 1))
        itl.extend(b - a for a, b in zip(ts, ts[1:], strict=False))
    in_tokens = sum(prompts[r] for r in done)
    d = duration if duration > 0 else float("nan")
    block = {
        "completed": len(done), "duration_s": duration, "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens, "request_throughput": len(done) / d,
        "output_throughput": out_tokens / d, "total_token_throughput": (in_tokens + out_tokens) / d,
    }
    block |= _stats("ttft", ttft) | _stats("tpot", tpot) | _stats("itl", itl)
    return block


def adapter_waits(result: RunResult, tl: Timeline) -> dict[int, dict[str, float]]:
    """Per adapter: mean and max wait before first admission, steps and seconds."""
    reqs = result.scheduler.state.reqs
    index = {s: i for i, s in enumerate(tl.steps)}
    starts = [0.0] + tl.step_end[:-1]
    per: dict[int, list[tuple[int, float]]] = {}
    for rid, rs in reqs.items():
        if rs.first_admitted is None:
            continue
        w_steps = rs.first_admitted - rs.req.arrival
        w_sec = starts[index[rs.first_admitted]] - tl.arrival[rid]
        per.setdefault(rs.req.adapter, []).append((w_steps, w_sec))
    return {a: {"requests": len(v), "mean_wait_steps": float(np.mean([x[0] for x in v])),
                "max_wait_steps": int(max(x[0] for x in v)),
                "mean_wait_s": float(np.mean([x[1] for x in v])),
                "max_wait_s": float(max(x[1] for x in v))}
            for a, v in sorted(per.items())}


@dataclass
class PolicyRun:
    policy: str
    result: RunResult
    timeline: Timeline
    block: dict[str, float]
    adapters: dict[int, dict[str, float]]
    waits: dict[str, int]  # request -> steps before first admission
    sim_seconds: float  # wall time of the reference run itself

    def summary(self) -> dict:
        return {"policy": self.policy, "steps": len(self.timeline.steps),
                "idle_steps": self.timeline.idle_steps, "result": self.block,
                "adapters": {str(a): v for a, v in self.adapters.items()},
                "max_wait_steps": max(self.waits.values(), default=0),
                "reference_run_s": self.sim_seconds}


def simulate_policy(config: Config, reqs: list[Request], policy: str,
                    model: CostModel = DEFAULT, *, gate: Gate | None = None) -> PolicyRun:
    """One reference run of `policy` (or of `gate`, which replaces its gate,
    as `driver.run` allows) through the cost model."""
    t = time.perf_counter()
    result = run(config, Workload(list(reqs)), policy=policy, gate=gate)
    elapsed = time.perf_counter() - t
    tl = apply_model(build_timeline(result), model)
    prompts = {r.id: r.prompt_tokens for r in reqs}
    return PolicyRun(policy, result, tl, result_block(tl, prompts), adapter_waits(result, tl),
                     result.waits(), elapsed)


def ratio(runs: dict[str, PolicyRun], num: str, den: str) -> float:
    a = runs[num].block["request_throughput"]
    b = runs[den].block["request_throughput"]
    return a / b if b else math.nan
