"""No online rule is on the frontier of every family: pairs of instances, by exhaustive search.

Why: issue 11 asks `fair` at its default knob to be *undominated on every
family*: no other policy's point (at any knob) both waits less and runs
faster. This module shows that no scheduling rule that decides online
(outside the field it is compared with) can meet that on every family,
with small families the frontier now holds: the pair `adv-online-x` /
`-y` against the field at every knob (it needs the drainer at threshold
0), and `adv-online2-x` / `-y` against the field at its default knob alone
as well (vllm's schedule is the best of all on X, vtc's on Y), so even
"undominated by the field's defaults" is out of reach.

A *rule* here is what decides, at each step, which waiting requests vLLM's
scheduler admits (fair, vllm, the field's gates are all such rules); what the
core then does with them (the whole prompt in the admission step when the
budget allows, a decode per step) is vLLM's.

The adversary argument. Two instances X and Y (a pair of files under
`experiments/families/`, `PAIRS`) agree on every request that arrives by step `split` (id, adapter,
prompt, `max_tokens`, arrival) and differ only in what arrives after it.
A scheduler decides at step s from what has arrived by s (vLLM's scheduler
sees a request, its adapter and its `max_tokens`, once it has arrived), so
any rule admits the same requests on X and Y through step `split` and
reaches the same state at `split` + 1. The search enumerates every state
reachable at `split` + 1 by *any* admissions, and from each, every
completion on X and on Y. If from each such state every completion on X or
every completion on Y is dominated by a point of the field (vllm, drainer
and timeslice at every knob of the frontier, vtc: every policy but fair),
then every rule is beaten on X or on Y by a field point. For fair (at any
S), or any rule outside the field, that is the frontier's own test
(`experiments.frontier.dominated`: beaten by another policy's point). A policy
of the field may be beaten only by its own point at another knob, which
the frontier does not count: the drainer at threshold 0 on the first pair
(beaten on Y only by the drainer at threshold 4; found by an adversarial
review of this module).

Abstraction: `experiments.optimum`'s, without its order within an adapter (FCFS
arrivals, synchronous scheduling, unlimited KV, a budget that holds every
seat's prompt, so a request holds its seat for exactly `max_tokens` steps
from admission and a rule decides only which waiting requests to admit).
Any set of arrived requests that the seats and the LoRA cap allow may be
admitted at any step, in any order, idle steps included (a rule may wait
on purpose). That every rule's run is one path of this tree is checked, not
assumed: `replay` walks each policy's own run through it and must get its
steps, its seconds and its worst wait exactly (`tests/test_online.py`).

Measures: `steps` (to drain, the model's unit) and `seconds` (the frontier's
cost model, `policy.costmodel`: its `duration_s`, so its throughput ratio).
A completion counts as dominated only when a field point waits strictly
less and is faster by more than `experiments.frontier.RATIO_TIE` (relative), so
ties count in the completion's favour.

`python -m experiments.cli --online` (or `python -m experiments.online`) judges
the saved pair, a line per measure; `python -m experiments.online
--search SEED` hill-climbs for a new pair (small instances: max_loras 1-2,
2-4 seats, a shared prefix of up to 6 requests and tails of up to 4),
keeping a mutation when the escaping states do not grow. The saved pairs
came from a first version of this climb whose tree kept arrival order
within an adapter (the first pair: seed `b`, second restart, about 5
minutes; the second, `--defaults --restarts 10`: seed `d1`, seventh
restart, about 35 minutes); the climb over the current tree is
slower and stalls at one escaping state as often (`--search b`: one
escaping state after its first restart, 15 minutes), so it is a way to
look for other pairs, not a reproduction of these.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations, product
from pathlib import Path

from lora_sched.bench.simulate import progress, simulate_policy
from lora_sched.policy.costmodel import DEFAULT, CostModel, StepFeatures
from lora_sched.policy.driver import RunResult
from lora_sched.spec.config import POLICIES, REFERENCE_POLICIES, Config
from lora_sched.spec.request import Request

from experiments.families import FAMILY_DIR, load
from experiments.frontier import DEFAULT_KNOB, FRONTIER_POLICIES, KNOBBED, KNOBS, RATIO_TIE
from experiments.optimum import AbstractionError, inside_abstraction

MEASURES = ("steps", "seconds")
FIELD_POLICIES = tuple(p for p in FRONTIER_POLICIES if p != "fair")
# The saved pairs, and the fields each is judged against: every knob of the
# frontier, or the knobbed policies at their default only (DEFAULT_KNOB).
PAIRS = (("adv-online-x", "adv-online-y"), ("adv-online2-x", "adv-online2-y"))
CASES: tuple[tuple[tuple[str, str], tuple[int, ...]], ...] = (
    (PAIRS[0], KNOBS), (PAIRS[1], (DEFAULT_KNOB,)), (PAIRS[1], KNOBS))

Running = tuple[tuple[int, int], ...]  # sorted (adapter, steps left) of the running requests


@dataclass(frozen=True)
class Point:
    """A policy's run on an instance: steps to drain, seconds (cost model) and worst wait."""

    policy: str
    knob: int | None
    steps: int
    seconds: float  # duration in the cost model
    wait: int

    def measure(self, m: str) -> float:
        return self.steps if m == "steps" else self.seconds


def run_point(cfg: Config, reqs: list[Request], policy: str, knob: int | None,
              model: CostModel = DEFAULT) -> tuple[Point, RunResult]:
    c = cfg if knob is None else replace(cfg, starvation_steps=knob)
    r = simulate_policy(c, reqs, policy, model)
    start = min(q.arrival for q in reqs)
    return Point(policy, knob, r.result.last_step - start + 1, r.block["duration_s"], max(r.waits.values())), r.result


def field_points(cfg: Config, reqs: list[Request], policies: tuple[str, ...] = FIELD_POLICIES,
                 knobs: tuple[int, ...] = KNOBS) -> list[Point]:
    """The field: every policy but fair at every knob of the frontier (or at `knobs`)."""
    return [run_point(cfg, reqs, p, k)[0] for p in policies for k in (knobs if p in KNOBBED else (None,))]


def pareto(outs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The (cost, wait) pairs no other pair beats on both (ties kept once)."""
    best: list[tuple[float, int]] = []
    for c, w in sorted(set(outs)):
        if not best or w < best[-1][1]:
            best.append((c, w))
    return best


def dominated_by(cost: float, wait: int, pts: list[Point], measure: str) -> Point | None:
    """A field point that waits strictly less and is faster by more than the tie tolerance."""
    for p in pts:
        if p.wait < wait and p.measure(measure) < cost * (1 - RATIO_TIE):
            return p
    return None


def horizon(pts: list[Point], measure: str) -> tuple[float, int]:
    """Past this cost and this wait, a completion is beaten by every field point."""
    return max(p.measure(measure) for p in pts) / (1 - RATIO_TIE), max(p.wait for p in pts)


@dataclass
class Tree:
    """Every schedule of one instance in the abstraction, with the cost of each step.

    A state is (step, the running requests as (adapter, steps left), the set of
    requests admitted so far as a bit mask over the requests in arrival
    order). Any set of arrived requests may be admitted in a step that the
    seats and the LoRA cap allow, in any order across and within adapters;
    `fifo` keeps to arrival order within an adapter (`experiments.optimum`'s
    space, for the cross-check)."""

    config: Config
    requests: list[Request]
    measure: str
    # (cost, wait) past which a completion is dropped: past both, where they are the field's worst
    # points (every field point beats it); past either one with `either`, where they are a goal's limits
    horizon: tuple[float, float]
    fifo: bool = False
    either: bool = False
    model: CostModel = DEFAULT
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        inside_abstraction(self.config, self.requests)
        self.order = sorted(self.requests, key=lambda r: r.arrival)  # the driver's arrival order
        self.start = self.order[0].arrival
        self.full = (1 << len(self.order)) - 1

    def step_cost(self, tokens: int, seqs: int, adapters: int) -> float:
        return 1 if self.measure == "steps" else self.model.step_time(StepFeatures(tokens, seqs, adapters))

    def offset(self) -> float:
        """What precedes the first step: nothing in steps; in seconds the cost
        model's clock runs from step 1, an empty forward pass per step."""
        return 0 if self.measure == "steps" else (self.start - 1) * self.model.t0

    def _pending(self, t: int, admitted: int) -> list[int]:
        return [i for i, r in enumerate(self.order) if not admitted >> i & 1 and r.arrival <= t]

    def _choices(self, pending: list[int]):
        if not self.fifo:
            for k in range(len(pending) + 1):
                yield from combinations(pending, k)
            return
        per: dict[int, list[int]] = {}
        for i in pending:
            per.setdefault(self.order[i].adapter, []).append(i)
        for ks in product(*(range(len(q) + 1) for q in per.values())):
            yield tuple(i for q, k in zip(per.values(), ks, strict=True) for i in q[:k])

    def moves(self, t: int, running: Running, admitted: int):
        """Each admission allowed at step t: (running after, admitted after, worst
        wait of the admitted, the step's cost, all done)."""
        for chosen in self._choices(self._pending(t, admitted)):
            if len(running) + len(chosen) > self.config.max_num_seqs:
                continue
            new = list(running)
            loras = {a for a, _ in running if a > 0}
            tokens, wait, mask = len(running), 0, admitted  # one decode token per running request
            for i in chosen:
                r = self.order[i]
                new.append((r.adapter, r.max_tokens))
                tokens += r.prompt_tokens
                wait = max(wait, t - r.arrival)
                mask |= 1 << i
                if r.adapter > 0:
                    loras.add(r.adapter)
            if len(loras) > self.config.max_loras:
                continue
            after = tuple(sorted((a, left - 1) for a, left in new if left > 1))
            cost = self.step_cost(tokens, len(new), len(loras))
            yield after, mask, wait, cost, not after and mask == self.full

    def completions(self, t: int, running: Running, admitted: int) -> list[tuple[float, int]]:
        """Pareto set of (cost from step t on, worst wait of those admitted from t on)."""
        key = (t, running, admitted)
        if key in self.memo:
            return self.memo[key]
        pending = self._pending(t, admitted)
        if not running and not pending:  # idle until the next arrival: an empty forward pass a step
            nxt = min(r.arrival for i, r in enumerate(self.order) if not admitted >> i & 1)
            gap = (nxt - t) * self.step_cost(0, 0, 0)
            res = [(c + gap, w) for c, w in self.completions(nxt, running, admitted)]
        elif pending and self._past(t, pending):
            res = []  # every completion is past the horizon: in cost and wait (`either`: in one of the two)
        else:
            outs = []
            for after, mask, wait, cost, done in self.moves(t, running, admitted):
                if done:
                    outs.append((cost, wait))
                else:
                    outs += [(cost + c, max(w, wait)) for c, w in self.completions(t + 1, after, mask)]
            res = pareto(outs)
        self.memo[key] = res
        return res

    def _past(self, t: int, pending: list[int]) -> bool:
        slower = self.offset() + (t - self.start + 1) * self.step_cost(0, 0, 0) > self.horizon[0]
        longer = max(t - self.order[i].arrival for i in pending) > self.horizon[1]
        return slower or longer if self.either else slower and longer

    def best(self) -> list[tuple[float, int]]:
        """The best (cost, worst wait) pairs over every schedule, from the start."""
        return [(self.offset() + c, w) for c, w in self.completions(self.start, (), 0)]

    def prefixes(self, split: int) -> dict[tuple[Running, int], list[tuple[float, int]]]:
        """Every state at the start of step split + 1 that some admissions reach,
        with the Pareto set of (cost, worst wait) of the admissions reaching it."""
        layer: dict[tuple[Running, int], list[tuple[float, int]]] = {((), 0): [(self.offset(), 0)]}
        for t in range(self.start, split + 1):
            nxt: dict[tuple[Running, int], list[tuple[float, int]]] = {}
            for (running, admitted), outs in layer.items():
                for after, mask, wait, cost, done in self.moves(t, running, admitted):
                    if done:
                        raise AbstractionError("an instance of the pair finishes by the split: it needs a tail")
                    nxt.setdefault((after, mask), []).extend((c + cost, max(w, wait)) for c, w in outs)
            layer = {s: pareto(o) for s, o in nxt.items()}
        return layer

    def replay(self, result: RunResult) -> tuple[int, float, int]:
        """Walk a run of the real core through the tree: each step's admissions must
        be a move of the tree; returns (steps, cost, worst wait) as the tree counts them."""
        running: Running = ()
        admitted, cost, worst, t = 0, self.offset(), 0, self.start
        by_step = {rec.step: rec for rec in result.records}
        index = {r.id: i for i, r in enumerate(self.order)}
        while True:
            rec = by_step.get(t)
            want = admitted
            for rid in rec.admitted if rec is not None else ():
                want |= 1 << index[rid]
            move = next((m for m in self.moves(t, running, admitted) if m[1] == want), None)
            if move is None:
                raise AbstractionError(f"step {t}: admitting {rec.admitted if rec else []} is not a move of the tree")
            running, admitted, wait, step_cost, done = move
            cost, worst = cost + step_cost, max(worst, wait)
            if done:
                return t - self.start + 1, cost, worst
            t += 1


def replays(cfg: Config, reqs: list[Request]) -> list[str]:
    """Each policy of the project (`POLICIES` and the field's) at each knob of
    the frontier, run through the real core and walked through the tree in both
    measures: the runs whose steps, cost or worst wait the tree counts
    differently from the run (empty: the abstraction holds every run)."""
    bad = []
    for policy in (*POLICIES, *REFERENCE_POLICIES):
        for knob in KNOBS if policy in KNOBBED else (None,):
            pt, res = run_point(cfg, reqs, policy, knob)
            for m in MEASURES:
                steps, cost, wait = Tree(cfg, reqs, m, (0, 0)).replay(res)
                if (steps, wait) != (pt.steps, pt.wait) or not math.isclose(cost, pt.measure(m), rel_tol=1e-12):
                    bad.append(f"{policy}@{knob} ({m}): tree {(steps, cost, wait)}, "
                               f"run {(pt.steps, pt.measure(m), pt.wait)}")
    return bad


@dataclass(frozen=True)
class Verdict:
    measure: str
    states: int  # states reachable at split + 1
    escapes: int  # states from which some completion is undominated on both instances
    field_x: list[Point]
    field_y: list[Point]
    pareto_x: list[tuple[float, int]]  # the best completions over all schedules of X (from the start; [] unless asked)
    pareto_y: list[tuple[float, int]]
    wall_s: float


def judge(cfg: Config, x: list[Request], y: list[Request], split: int, measure: str = "steps",
          knobs: tuple[int, ...] = KNOBS, *, best: bool = True) -> Verdict:
    """How many states reachable at split + 1 let a rule stay undominated on both X and Y
    (against the field at `knobs`); with `best`, also the best completions of each from the start."""
    t0 = time.perf_counter()
    if [r for r in x if r.arrival <= split] != [r for r in y if r.arrival <= split]:
        raise ValueError(f"the instances differ in what arrives by step {split} (or in its order)")
    fx, fy = field_points(cfg, x, knobs=knobs), field_points(cfg, y, knobs=knobs)
    tx, ty = Tree(cfg, x, measure, horizon(fx, measure)), Tree(cfg, y, measure, horizon(fy, measure))
    states = tx.prefixes(split)
    escapes = 0
    for (running, admitted), prefixes in states.items():
        cx, cy = tx.completions(split + 1, running, admitted), ty.completions(split + 1, running, admitted)
        for c0, w0 in prefixes:
            if (any(dominated_by(c0 + c, max(w0, w), fx, measure) is None for c, w in cx)
                    and any(dominated_by(c0 + c, max(w0, w), fy, measure) is None for c, w in cy)):
                escapes += 1
                break
    px, py = (tx.best(), ty.best()) if best else ([], [])
    return Verdict(measure, len(states), escapes, fx, fy, px, py, time.perf_counter() - t0)


def pair_split(x: list[Request], y: list[Request]) -> int:
    """The last step through which the two instances agree (their common arrivals)."""
    ids_x, ids_y = {r.id: r for r in x}, {r.id: r for r in y}
    tail = [r.arrival for r in x if ids_y.get(r.id) != r] + [r.arrival for r in y if ids_x.get(r.id) != r]
    return min(tail) - 1


def load_pair(pair: tuple[str, str] = PAIRS[0],
              directory: Path = FAMILY_DIR) -> tuple[Config, list[Request], list[Request], int]:
    _, cfg_x, x, _ = load(directory / f"{pair[0]}.json")
    _, cfg_y, y, _ = load(directory / f"{pair[1]}.json")
    if cfg_x != cfg_y:
        raise ValueError(f"{pair[0]} and {pair[1]} must share their configuration")
    return cfg_x, x, y, pair_split(x, y)


# ---- the search that found the pair -------------------------------------------------------------


def _request(rng: random.Random, rid: str, lo: int, hi: int) -> Request:
    return Request(rid, rng.randint(0, 3), rng.randint(1, 4), rng.randint(1, 8), rng.randint(lo, hi))


def random_pair(rng: random.Random):
    """A random start for the pair searches: (config, split, shared prefix, X's tail, Y's tail)."""
    seats = rng.randint(2, 4)
    cfg = Config(max_loras=rng.randint(1, 2), max_num_seqs=seats, max_num_batched_tokens=seats * 4)
    t = rng.randint(2, 8)
    pre = [_request(rng, f"r{i}", 1, t) for i in range(rng.randint(2, 5))]
    tx = [_request(rng, f"r{10 + i}", t + 1, t + 6) for i in range(rng.randint(1, 3))]
    ty = [_request(rng, f"r{20 + i}", t + 1, t + 6) for i in range(rng.randint(1, 3))]
    return cfg, t, pre, tx, ty


def mutate_pair(rng: random.Random, s):
    """One change to a pair: seats, max_loras, or a request added, dropped or moved in one of its parts."""
    cfg, t, pre, tx, ty = s
    pre, tx, ty = list(pre), list(tx), list(ty)
    k = rng.random()
    if k < 0.08:
        seats = max(2, min(4, cfg.max_num_seqs + rng.choice([-1, 1])))
        cfg = replace(cfg, max_num_seqs=seats, max_num_batched_tokens=seats * 4)
    elif k < 0.12:
        cfg = replace(cfg, max_loras=3 - cfg.max_loras)
    else:
        lst, lo, hi, base = rng.choice([(pre, 1, t, 0), (tx, t + 1, t + 8, 10), (ty, t + 1, t + 8, 20)])
        k2 = rng.random()
        if k2 < 0.15 and len(lst) < (6 if base == 0 else 4):
            ids, i = {r.id for r in lst}, base
            while f"r{i}" in ids:
                i += 1
            lst.append(_request(rng, f"r{i}", lo, hi))
        elif k2 < 0.3 and len(lst) > 1:
            lst.pop(rng.randrange(len(lst)))
        else:
            i = rng.randrange(len(lst))
            f = rng.choice(["adapter", "max_tokens", "arrival", "prompt_tokens"])
            lim = {"adapter": (0, 3), "max_tokens": (1, 8), "arrival": (lo, hi), "prompt_tokens": (1, 4)}[f]
            lst[i] = replace(lst[i], **{f: max(lim[0], min(lim[1], getattr(lst[i], f) + rng.choice([-2, -1, 1, 2])))})
    return cfg, t, pre, tx, ty


def search(seed: str, *, restarts: int = 6, iters: int = 400, knobs: tuple[int, ...] = KNOBS):
    """Hill-climb pairs (a shared prefix through a split step, two tails) for the
    fewest escaping states (in steps); stops at the first pair with none."""
    rng = random.Random(seed)
    for restart in range(restarts):
        s = random_pair(rng)
        v = judge(s[0], s[2] + s[3], s[2] + s[4], s[1], knobs=knobs, best=False)
        for _ in range(iters):
            s2 = mutate_pair(rng, s)
            try:
                v2 = judge(s2[0], s2[2] + s2[3], s2[2] + s2[4], s2[1], knobs=knobs, best=False)
            except AbstractionError:
                continue
            if (v2.escapes, v2.escapes / v2.states) <= (v.escapes, v.escapes / v.states):
                s, v = s2, v2
            if v.escapes == 0:
                break
        progress(f"restart {restart}: {v.escapes} escaping states of {v.states}")
        if v.escapes == 0:
            return s
    return None


def field_name(knobs: tuple[int, ...]) -> str:
    return "the field at every knob" if knobs == KNOBS else f"the field at knob {', '.join(map(str, knobs))}"


def print_verdict(v: Verdict, knobs: tuple[int, ...] = KNOBS) -> None:
    ok = "ok" if v.escapes == 0 else f"FAILS: {v.escapes} states escape"
    print(f"  every online rule is beaten on X or Y by {field_name(knobs)} ({v.measure}; "
          f"{v.states} states at the split)... {ok}. ({v.wall_s:.2f} s)")


def report(out: Path | None = None) -> int:
    """Judge every saved pair against its fields (`CASES`) in both measures; print
    one line each (and write `online.json` under `out`). Exit 0 when no state
    escapes anywhere."""
    rows, last = [], None
    for pair, knobs in CASES:
        cfg, x, y, split = load_pair(pair)
        if pair != last:
            print(f"pair {pair[0]} / {pair[1]}: {len(x)} and {len(y)} requests, the same through step {split}")
            last = pair
        for m in MEASURES:
            v = judge(cfg, x, y, split, m, knobs)
            print_verdict(v, knobs)
            rows.append({"pair": pair, "split": split, "knobs": knobs, **asdict(v)})
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "online.json").write_text(json.dumps({"verdicts": rows}, indent=1))
        progress(f"verdicts in {out / 'online.json'}")
    return 0 if all(r["escapes"] == 0 for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.online", description=__doc__.split("\n")[0])
    ap.add_argument("--search", metavar="SEED", default=None, help="hill-climb for a new pair instead")
    ap.add_argument("--restarts", type=int, default=6, help="--search: restarts (400 steps each)")
    ap.add_argument("--defaults", action="store_true",
                    help=f"--search: against the field at knob {DEFAULT_KNOB} only (default: every knob)")
    ap.add_argument("--out", default=None, help="also write online.json here")
    args = ap.parse_args(argv)
    if args.search is not None:
        found = search(args.search, restarts=args.restarts, knobs=(DEFAULT_KNOB,) if args.defaults else KNOBS)
        print("no pair found" if found is None else f"pair: {found}")
        return 0 if found is not None else 1
    return report(Path(args.out) if args.out else None)


if __name__ == "__main__":
    raise SystemExit(main())
