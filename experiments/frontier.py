"""`python -m experiments.cli --frontier`: worst wait against throughput, per policy and knob, per family.

For every family (`experiments.families.all_families`: the tuning set, the known
max_loras-1 family, the adversarial families under `experiments/families/`) and
every policy at each value of its knob (`Config.starvation_steps`: fair's S,
the drainer's wait threshold, the time slice's length; `vtc` and `vllm` have
none), one simulated run gives

- `ratio`: request throughput relative to `vllm` on the same family, from the
  cost model (`policy.costmodel`, seconds per step from the batch);
- `ratio_steps`: the same in steps to drain (vllm's steps / the policy's);
- `wait`: the worst wait (steps from arrival to first admission).

A point is *dominated* when another policy's point has a smaller worst wait
and a higher ratio. The goals of issue 11: `fair` at its default knob is not
dominated on any family, and its ratio is >= 0.8 on the adversarial families
and >= 0.97 on the seed and tuning workloads: printed, not asserted. No rule
outside the field that decides online can meet the first on every family
(`experiments.online`: pairs of families on which every rule is beaten by the
field on one of each), so the table also prints, for each family where fair is dominated, what it would take
(`escape`).
"""

from __future__ import annotations

from dataclasses import replace

from lora_sched.bench.simulate import progress, simulate_policy
from lora_sched.policy.costmodel import DEFAULT, CostModel
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

KNOBS = (0, 4, 8, 16, 32, 64)
DEFAULT_KNOB = 16  # Config.starvation_steps
KNOBBED = ("fair", "drainer", "timeslice")
FRONTIER_POLICIES = ("vllm", *KNOBBED, "vtc")


def points(cfg: Config, reqs: list[Request], *, policies: tuple[str, ...] = FRONTIER_POLICIES,
           knobs: tuple[int, ...] = KNOBS, model: CostModel = DEFAULT,
           knobs_of: dict[str, tuple[int, ...]] | None = None) -> list[dict]:
    """One point per (policy, knob) on one family; `knobs_of` gives some
    knobbed policies knobs of their own (the others take `knobs`)."""
    base = simulate_policy(cfg, reqs, "vllm", model)
    base_tp = base.block["request_throughput"]
    base_steps = base.result.last_step - min(r.arrival for r in reqs) + 1
    out = []
    for policy in policies:
        for knob in ((knobs_of or {}).get(policy, knobs) if policy in KNOBBED else (None,)):
            c = cfg if knob is None else replace(cfg, starvation_steps=knob)
            r = base if policy == "vllm" else simulate_policy(c, reqs, policy, model)
            steps = r.result.last_step - min(q.arrival for q in reqs) + 1
            out.append({"policy": policy, "knob": knob, "ratio": r.block["request_throughput"] / base_tp,
                        "ratio_steps": base_steps / steps, "wait": max(r.waits.values())})
    return out


# Ratios closer than this are equal: the cost model sums a run's step times in
# the order the steps come, so two runs of equal throughput can differ in the
# last bits (1e-16 to 1e-15 measured) and must not count as one beating the other.
RATIO_TIE = 1e-9


def dominated(p: dict, pts: list[dict]) -> list[dict]:
    """Points of other policies that wait less and run faster than `p`."""
    return [q for q in pts if q["policy"] != p["policy"] and q["wait"] < p["wait"]
            and q["ratio"] > p["ratio"] + RATIO_TIE]


def escape(p: dict, pts: list[dict]) -> tuple[float, int]:
    """What would take `p` off the dominated list, one coordinate at a time: the
    ratio it would need at its own wait (that of the fastest point that waits
    less), and the wait it would need at its own ratio (that of the point with
    the shortest wait among those that run faster)."""
    others = [q for q in pts if q["policy"] != p["policy"]]
    ratio = max([q["ratio"] for q in others if q["wait"] < p["wait"]], default=p["ratio"])
    wait = min([q["wait"] for q in others if q["ratio"] > p["ratio"] + RATIO_TIE], default=p["wait"])
    return ratio, wait


def frontier(families: dict[str, tuple[Config, list[Request]]], **kw) -> dict[str, list[dict]]:
    out = {}
    for name, (cfg, reqs) in families.items():
        progress(f"frontier: {name} ({len(reqs)} requests)")
        out[name] = points(cfg, reqs, **kw)
    return out


def default_point(pts: list[dict], policy: str) -> dict | None:
    want = DEFAULT_KNOB if policy in KNOBBED else None
    return next((p for p in pts if p["policy"] == policy and p["knob"] == want), None)


def best_point(pts: list[dict], policy: str) -> dict | None:
    """The policy's knob value with the highest ratio (then the smaller wait)."""
    mine = [p for p in pts if p["policy"] == policy]
    return max(mine, key=lambda p: (p["ratio"], -p["wait"])) if mine else None


def print_table(result: dict[str, list[dict]], policies: tuple[str, ...] = FRONTIER_POLICIES) -> None:
    print("== Frontier: per family, per policy at its default knob (16) and at its best knob ==")
    print("(cells: throughput ratio vs vllm from the cost model / worst wait in steps; "
          "best = knob with the highest ratio; * = dominated by another policy's point)")
    for name, pts in result.items():
        print(f"\n-- {name}")
        print(f"{'policy':13}{'default':>18}{'best':>24}")
        for policy in policies:
            d, b = default_point(pts, policy), best_point(pts, policy)
            if d is None or b is None:
                continue
            mark = "*" if dominated(d, pts) else " "
            dcell = f"{d['ratio']:.3f} / {d['wait']}{mark}"
            bcell = f"{b['ratio']:.3f} / {b['wait']} (k={b['knob']})" if b["knob"] is not None else "-"
            print(f"{policy:13}{dcell:>18}{bcell:>24}")
    print("\nfair at S = 16, ratio per family: " + ", ".join(
        f"{n}: {default_point(p, 'fair')['ratio']:.3f}" for n, p in result.items()))
    beaten = {n: p for n, p in result.items() if dominated(default_point(p, "fair"), p)}
    print(f"\nfair at S = 16 is dominated on {len(beaten)} of {len(result)} families "
          "(no online rule outside the field avoids all: bench/online.py); what it would take, "
          "at its own wait or its own ratio:")
    for n, pts in beaten.items():
        me = default_point(pts, "fair")
        ratio, wait = escape(me, pts)
        by = ", ".join(q["policy"] + ("" if q["knob"] is None else f" k={q['knob']}")
                       for q in sorted(dominated(me, pts), key=lambda q: (q["policy"], q["knob"] or 0)))
        print(f"  {n}: {me['ratio']:.3f} / {me['wait']}, beaten by {by}; needs ratio >= {ratio:.3f} "
              f"or wait <= {wait}")


if __name__ == "__main__":
    from experiments.cli import run_mode

    raise SystemExit(run_mode("--frontier"))
