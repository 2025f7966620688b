"""`lora-sched bench --adversarial`: hill climbing for each policy's worst workloads.

Why search: random and hand-written workloads miss the worst cases (issue 11:
`fair` ran at 0.23-0.35 of `vllm` on a max_loras-1 family that no random test
had produced). Per policy and per objective, a hill climber mutates one
workload (config and requests) at a time and keeps a mutation when the
objective does not get worse:

- `throughput`: minimise the policy's throughput relative to `vllm` on the
  same workload, in steps to drain it (vllm's steps / the policy's, from the
  first arrival to the last step);
- `wait`: maximise how much longer the policy's worst wait (steps from
  arrival to first admission) is than `vllm`'s on the same workload (a raw
  wait mostly grows with the workload's size, for every policy);
- `bound` (policies that claim `bounded_wait`): maximise worst wait / B, fair's
  bound with the run's peak Q; a value > 1 breaks the claim.

Search space (sizes kept small so that a wait cannot grow just with size):
max_loras 1-4, max_num_seqs 1-32, max_num_batched_tokens 4-256 and at
least max_num_seqs (vLLM refuses a smaller budget: `vllm_runs`; families
found before that rule, which vLLM refuses, stay as simulation-only
families) (chunked prefill on, FCFS, synchronous, unlimited KV: the
assumptions of fair's bound),
2-48 requests over adapters 0-6, prompts 1-32, outputs 1-32, arrivals 1-40
(`--max-requests` and `--max-arrival` widen the last two: `widened`).
Restarts begin at a random workload and at the issue's known family. The best
workload of each (policy, objective) is saved under `bench/families/` as a
named family, for the frontier (`bench.frontier`) and the tests.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from lora_sched.bench.families import FAMILY_DIR, known_family, load, save, to_json
from lora_sched.bench.simulate import progress
from lora_sched.policy.driver import RunResult, Workload, run
from lora_sched.policy.fair import observed_bound
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

SEARCH_POLICIES = ("fair", "drainer", "timeslice", "vtc")
BOUND_POLICIES = ("fair",)
LIMITS = {"max_loras": (1, 4), "max_num_seqs": (1, 32), "max_num_batched_tokens": (4, 256),
          "n": (2, 48), "adapters": (0, 6), "prompt": (1, 32), "output": (1, 32), "arrival": (1, 40)}


@dataclass(frozen=True)
class Instance:
    config: Config
    requests: tuple[Request, ...]


def duration(result: RunResult, reqs: tuple[Request, ...] | list[Request]) -> int:
    """Steps from the first arrival to the last step (the drain time)."""
    return result.last_step - min(r.arrival for r in reqs) + 1


@dataclass(frozen=True)
class Evaluation:
    ratio: float  # throughput(policy) / throughput(vllm), in steps to drain
    wait: int  # the policy's worst wait (steps)
    vllm_wait: int
    bound: int  # fair's B with this run's peak Q
    steps: int
    vllm_steps: int

    def score(self, objective: str) -> float:
        if objective == "throughput":
            return -self.ratio
        if objective == "wait":
            return float(self.wait - self.vllm_wait)
        return self.wait / self.bound


def evaluate(inst: Instance, policy: str) -> Evaluation:
    wl = list(inst.requests)
    base = run(inst.config, Workload(wl), policy="vllm")
    res = run(inst.config, Workload(wl), policy=policy)
    b = observed_bound(inst.config, wl, res.records)
    return Evaluation(duration(base, wl) / duration(res, wl), max(res.waits().values()),
                      max(base.waits().values()), b, duration(res, wl), duration(base, wl))


def _clip(name: str, v: int) -> int:
    lo, hi = LIMITS[name]
    return max(lo, min(hi, v))


def vllm_runs(cfg: Config) -> Config:
    """The nearest config vLLM accepts: its SchedulerConfig requires
    max_num_batched_tokens >= max_num_seqs, so the budget is raised to the
    seats (the search stays among configurations vLLM runs)."""
    return replace(cfg, max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs))


def random_instance(rng: random.Random) -> Instance:
    adapters = rng.randint(1, LIMITS["adapters"][1])
    cfg = vllm_runs(Config(max_loras=rng.randint(*LIMITS["max_loras"]),
                           max_num_seqs=rng.randint(*LIMITS["max_num_seqs"]),
                           max_num_batched_tokens=rng.choice([4, 8, 16, 32, 64, 128, 256])))
    n = rng.randint(8, LIMITS["n"][1])
    reqs = tuple(Request(f"r{i}", rng.randint(0, adapters), rng.randint(*LIMITS["prompt"]),
                         rng.randint(*LIMITS["output"]), rng.randint(1, 10)) for i in range(n))
    return Instance(cfg, reqs)


def known_instance() -> Instance:
    cfg, reqs = known_family()
    return Instance(cfg, tuple(reqs))


@contextmanager
def widened(max_requests: int | None = None, max_arrival: int | None = None) -> Iterator[None]:
    """The search space with up to `max_requests` requests arriving up to step
    `max_arrival` (streams that outlast S and fair's switch price; the wider
    space of `bench.anneal --max-requests --max-arrival`), restored on exit."""
    saved = dict(LIMITS)
    if max_requests is not None:
        LIMITS["n"] = (LIMITS["n"][0], max_requests)
    if max_arrival is not None:
        LIMITS["arrival"] = (LIMITS["arrival"][0], max_arrival)
    try:
        yield
    finally:
        LIMITS.clear()
        LIMITS.update(saved)


def mutate(inst: Instance, rng: random.Random) -> Instance:
    """One small change: a config field, or one request's field, or add / drop a request."""
    cfg, reqs = inst.config, list(inst.requests)
    kind = rng.random()
    if kind < 0.2:
        field = rng.choice(["max_loras", "max_num_seqs", "max_num_batched_tokens"])
        v = getattr(cfg, field)
        nv = v * 2 if rng.random() < 0.2 else v // 2 if rng.random() < 0.25 else v + rng.choice([-1, 1])
        cfg = vllm_runs(replace(cfg, **{field: _clip(field, nv)}))
    elif kind < 0.35 and len(reqs) < LIMITS["n"][1]:
        src = rng.choice(reqs)
        ids = {r.id for r in reqs}
        k = len(reqs)
        while f"r{k}" in ids:
            k += 1
        reqs.append(replace(src, id=f"r{k}", arrival=_clip("arrival", src.arrival + rng.randint(-2, 4))))
    elif kind < 0.45 and len(reqs) > LIMITS["n"][0]:
        reqs.pop(rng.randrange(len(reqs)))
    else:
        i = rng.randrange(len(reqs))
        r = reqs[i]
        field = rng.choice(["adapter", "prompt", "output", "arrival"])
        if field == "adapter":
            r = replace(r, adapter=rng.randint(*LIMITS["adapters"]))
        elif field == "prompt":
            r = replace(r, prompt_tokens=_clip("prompt", r.prompt_tokens + rng.randint(-8, 8)))
        elif field == "output":
            r = replace(r, max_tokens=_clip("output", r.max_tokens + rng.randint(-8, 8)))
        else:
            r = replace(r, arrival=_clip("arrival", r.arrival + rng.randint(-5, 5)))
        reqs[i] = r
    return Instance(cfg, tuple(reqs))


def climb(policy: str, objective: str, start: Instance, rng: random.Random,
          iters: int) -> tuple[Instance, Evaluation]:
    best, best_ev = start, evaluate(start, policy)
    for _ in range(iters):
        cand = mutate(best, rng)
        ev = evaluate(cand, policy)
        if ev.score(objective) >= best_ev.score(objective):
            best, best_ev = cand, ev
    return best, best_ev


def search(policies: tuple[str, ...] = SEARCH_POLICIES, *, iters: int = 250, restarts: int = 2,
           seed: int | str = 0, out_dir: Path = FAMILY_DIR, objectives: tuple[str, ...] | None = None,
           suffix: str = "") -> list[dict]:
    """Hill-climb each (policy, objective); save the worst workload of each as a
    family `adv-POLICY-OBJECTIVE[-SUFFIX]` (objectives: all that apply by default)."""
    rows = []
    for policy in policies:
        applies = ["throughput", "wait"] + (["bound"] if policy in BOUND_POLICIES else [])
        for objective in [o for o in applies if objectives is None or o in objectives]:
            rng = random.Random(f"{seed}-{policy}-{objective}")
            found: tuple[Instance, Evaluation] | None = None
            for k in range(restarts):
                start = known_instance() if k == 0 else random_instance(rng)
                inst, ev = climb(policy, objective, start, rng, iters)
                if found is None or ev.score(objective) > found[1].score(objective):
                    found = (inst, ev)
            assert found is not None
            inst, ev = found
            name = f"adv-{policy}-{objective}" + (f"-{suffix}" if suffix else "")
            found_by = {"policy": policy, "objective": objective, "iters": iters, "restarts": restarts,
                        "seed": seed, "ratio_steps": ev.ratio, "wait": ev.wait, "vllm_wait": ev.vllm_wait,
                        "bound": ev.bound}
            desc = (f"hill climbing, worst {objective} for {policy}: {ev.ratio:.3f} of vllm's throughput "
                    f"(steps), worst wait {ev.wait} (vllm {ev.vllm_wait}), B {ev.bound}")
            save(out_dir / f"{name}.json", to_json(name, inst.config, list(inst.requests),
                                                   description=desc, found_by=found_by))
            row = {"family": name, **found_by, "requests": len(inst.requests),
                   "max_loras": inst.config.max_loras, "max_num_seqs": inst.config.max_num_seqs,
                   "max_num_batched_tokens": inst.config.max_num_batched_tokens}
            rows.append(row)
            progress(f"{name}: ratio {ev.ratio:.3f}, wait {ev.wait} (vllm {ev.vllm_wait}), "
                     f"wait/B {ev.wait / ev.bound:.3f}")
    return rows


def reevaluate(path: Path) -> dict:
    """Measure a family kept from an earlier rule (`found_by.found_against`)
    again under the policy it is now judged by (`found_by.policy`): the
    ratio, waits and B in `found_by` and the description are rewritten, the
    workload is not. The drift check (tests/test_frontier.py) then holds the
    family to the new figures; run after a change of rule, on purpose."""
    name, cfg, reqs, raw = load(path)
    fb = raw["found_by"]
    if "found_against" not in fb:
        raise ValueError(f"{path}: found_by.found_against missing: only families kept from an earlier rule "
                         "are re-evaluated (search again for the others)")
    ev = evaluate(Instance(cfg, tuple(reqs)), fb["policy"])
    fb.update(ratio_steps=ev.ratio, wait=ev.wait, vllm_wait=ev.vllm_wait, bound=ev.bound)
    how = fb.get("method") or f"hill climbing ({fb['iters']} x {fb['restarts']})"  # annealed, by hand, ...
    raw["description"] = (f"{how}, worst {fb['objective']}, found "
                          f"against {fb['found_against']}; under {fb['policy']}: {ev.ratio:.3f} of vllm's "
                          f"throughput (steps), worst wait {ev.wait} (vllm {ev.vllm_wait}), B {ev.bound}")
    save(path, raw)
    return {"family": name, **fb, "requests": len(reqs), "max_loras": cfg.max_loras,
            "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens}


def print_rows(rows: list[dict]) -> None:
    print("== Adversarial search (hill climbing; ratio = throughput vs vllm in steps to drain) ==")
    print(f"{'family':32}{'ratio':>8}{'wait':>7}{'vllm wait':>10}{'wait/B':>8}{'reqs':>6}"
          f"{'max_loras':>10}{'seqs':>6}{'budget':>8}")
    for r in rows:
        print(f"{r['family']:32}{r['ratio_steps']:>8.3f}{r['wait']:>7}{r['vllm_wait']:>10}"
              f"{r['wait'] / r['bound']:>8.3f}{r['requests']:>6}{r['max_loras']:>10}{r['max_num_seqs']:>6}"
              f"{r['max_num_batched_tokens']:>8}")
