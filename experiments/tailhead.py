"""The best tail/head any schedule reaches on a small instance, by exhaustive search.

Why: issue 20 asks `fair`, on realistic traffic where `vllm`'s tail/head
(`bench.realistic.tail_head`) exceeds 3, for tail/head <= 2 while keeping
>= 0.97 of `vllm`'s throughput and a max wait no longer than `vllm`'s, and
asks that a goal that proves unreachable be shown so on a small instance.
This module computes, for a small instance, the smallest tail/head over
*every* schedule that meets the other two goals: if it exceeds 2, no rule
(fair or any other, online or with hindsight) meets the three goals together
there, and the gap to each policy is its ratio against that optimum.

Abstraction: `experiments.optimum`'s (FCFS arrivals, synchronous scheduling,
unlimited KV, a budget that holds every seat's prompt, so a request holds
its seat for exactly `max_tokens` steps from admission), with any set of
arrived requests admissible at any step in any order (as `experiments.online`:
idle steps included, no order within an adapter imposed), subject to the
seats and the LoRA cap. `vllm`'s own schedule is one path of the tree: the
search asserts that its optimum is no worse than `vllm`'s own tail/head
under `vllm`'s own makespan and max wait (`Frontier.vllm_inside`).

Measures, as `bench.realistic`: a request's wait is its admission step less
its arrival step; tail/head is (mean tail wait + 1) / (mean head wait + 1),
head the `max_loras` lowest adapter numbers that sent a request, tail the
bottom half (`bench.realistic.head_tail`); throughput against `vllm` is the
ratio of makespans in steps (`vllm`'s / the schedule's).

The same search shows where issue 20's other realistic goal, that fair
*dominate* the drainer, the time slice and VTC on (tail/head, throughput)
(`bench.popularity.dominates`), cannot be met: a schedule dominates all
three at once only if it finishes by the earliest of their last steps with
a tail/head no larger than the least of theirs. `Frontier.field_best` is
the smallest tail/head of the schedules that finish by then (no wait
limit); where it exceeds the field's least tail/head, no schedule of the
abstraction below, and so no rule that admits without preempting, dominates
the field on that instance, in steps (this module's throughput). It holds in
cost-model seconds too (the grid's throughput, `policy.costmodel`) where
`seconds_follow_steps`: every schedule of the abstraction computes the same
tokens and schedules the same sequences in all, so a run's duration is its
steps x t0 plus k_lora per adapter-step plus a constant, and one more step
(t0) costs more than the adapter term can save (k_lora x max_loras a step).

Search: step by step over every admission choice (breadth first); states
that agree on the running requests (adapter, steps left, head/tail group)
and the set admitted are merged, each keeping the Pareto set of (tail wait
sum, head wait sum) reached so far (less tail, more head: a pair with more
tail and less head can never give a smaller ratio on any completion).
Requests whose wait would pass the max-wait limit must be admitted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import combinations

from lora_sched.bench.popularity import head_tail, tail_head_ratio
from lora_sched.policy.costmodel import DEFAULT as DEFAULT_MODEL
from lora_sched.policy.costmodel import CostModel
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

from experiments.dominance import FIELD, dominates
from experiments.optimum import AbstractionError, check_abstraction, inside_abstraction, small_mutate


class SearchTooLarge(ValueError):
    """The instance has more states than the search may explore."""


@dataclass(frozen=True)
class PolicyPoint:
    policy: str
    last_step: int
    max_wait: int
    tail_head: float
    throughput: float  # vllm's makespan / this one's (steps)


def policy_point(cfg: Config, reqs: list[Request], policy: str, vllm_span: int | None = None) -> PolicyPoint:
    """`policy`'s run through the reference core, with the module's measures."""
    res = run(cfg, Workload(list(reqs)), policy=policy)
    waits = res.waits()
    start = min(r.arrival for r in reqs)
    span = res.last_step - start + 1
    ratio = tail_head_ratio(waits, {r.id: r.adapter for r in reqs}, cfg.max_loras)
    return PolicyPoint(policy, res.last_step, max(waits.values()), ratio,
                       1.0 if vllm_span is None else vllm_span / span)


def best_tail_head(cfg: Config, reqs: list[Request], *, last_step: int, max_wait: int | None,
                   max_states: int = 3_000_000) -> float | None:
    """The smallest tail/head over the schedules that finish by `last_step`
    with every wait <= `max_wait` (None: no such schedule)."""
    inside_abstraction(cfg, reqs)
    head, tail = head_tail((r.adapter for r in reqs), cfg.max_loras)
    n_head = sum(r.adapter in head for r in reqs)
    n_tail = sum(r.adapter in tail for r in reqs)
    if not n_head or not n_tail:
        return 1.0
    order = sorted(reqs, key=lambda r: (r.arrival, r.id))
    group = [1 if r.adapter in tail else 2 if r.adapter in head else 0 for r in order]
    full = (1 << len(order)) - 1
    # state: (running: sorted tuple of (adapter, steps left), admitted bitmask) -> Pareto [(tail sum, head sum)]
    layer: dict[tuple[tuple[tuple[int, int], ...], int], list[tuple[int, int]]] = {((), 0): [(0, 0)]}
    t = min(r.arrival for r in reqs)
    best: float | None = None
    explored = 0
    while layer and t <= last_step:
        nxt: dict[tuple[tuple[tuple[int, int], ...], int], list[tuple[int, int]]] = {}
        for (running, done), pareto in layer.items():
            explored += 1
            if explored > max_states:
                raise SearchTooLarge(f"more than {max_states} states")
            ready = [i for i, r in enumerate(order) if not done >> i & 1 and r.arrival <= t]
            must = [i for i in ready if max_wait is not None and t + 1 - order[i].arrival > max_wait]
            free = [i for i in ready if i not in must]
            active = {a for a, _ in running if a > 0}
            room = cfg.max_num_seqs - len(running)
            for k in range(len(free) + 1):
                if len(must) + k > room:
                    break
                for extra in combinations(free, k):
                    chosen = must + list(extra)
                    loras = set(active)
                    ok = True
                    for i in chosen:
                        a = order[i].adapter
                        if cap_blocks(loras, a, cfg.max_loras):
                            ok = False
                            break
                        if a > 0:
                            loras.add(a)
                    if not ok:
                        continue
                    dt = sum(t - order[i].arrival for i in chosen if group[i] == 1)
                    dh = sum(t - order[i].arrival for i in chosen if group[i] == 2)
                    new = list(running) + [(order[i].adapter, order[i].max_tokens) for i in chosen]
                    after = tuple(sorted((a, left - 1) for a, left in new if left > 1))
                    ndone = done
                    for i in chosen:
                        ndone |= 1 << i
                    if ndone == full and not after:
                        for ts, hs in pareto:
                            r = (ts + dt) / n_tail + 1
                            r /= (hs + dh) / n_head + 1
                            best = r if best is None else min(best, r)
                        continue
                    key = (after, ndone)
                    nxt[key] = _merge(nxt.get(key, []), [(ts + dt, hs + dh) for ts, hs in pareto])
        layer = nxt
        t += 1
    return best


def _merge(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The Pareto set (less tail sum, more head sum) of a + b."""
    pts = sorted(set(a) | set(b), key=lambda p: (p[0], -p[1]))
    out: list[tuple[int, int]] = []
    for ts, hs in pts:
        if not out or hs > out[-1][1]:
            out.append((ts, hs))
    return out


@dataclass(frozen=True)
class Frontier:
    """The optimum and the policies on one instance."""

    vllm: PolicyPoint
    points: dict[str, PolicyPoint]
    rows: list[tuple[float, bool, float | None]]  # (throughput floor, max wait <= vllm's, best tail/head)
    at_policy: dict[str, float | None]  # best tail/head at the policy's own makespan, max wait <= vllm's
    vllm_inside: float | None  # the optimum under vllm's own makespan and max wait (<= vllm's tail/head)
    # the best tail/head of the schedules as fast as every policy of FIELD (no wait limit); None when
    # `policies` leaves one of them out
    field_best: float | None = None

    def field_least(self) -> str:
        """The policy of FIELD with the least tail/head."""
        return min(FIELD, key=lambda p: self.points[p].tail_head)

    def field_dominated(self) -> bool | None:
        """Whether some schedule dominates every policy of FIELD at once (None: not searched)."""
        if self.field_best is None:
            return None
        # throughput 1.0 on both sides: finishing by the fastest's last step is as fast as each of them
        return dominates(self.field_best, 1.0, self.points[self.field_least()].tail_head, 1.0)


def frontier(cfg: Config, reqs: list[Request], *, floors: tuple[float, ...] = (1.0, 0.97, 0.9, 0.8),
             policies: tuple[str, ...] = ("fair", "drainer", "timeslice", "vtc", "blocking")) -> Frontier:
    """The smallest tail/head at each throughput floor, with and without the
    max-wait goal, and at each policy's own makespan, next to `vllm` and
    `policies` on the same instance."""
    check_abstraction(cfg, reqs)
    start = min(r.arrival for r in reqs)
    v = policy_point(cfg, reqs, "vllm")
    span = v.last_step - start + 1
    pts = {p: policy_point(cfg, reqs, p, span) for p in policies}
    inside = best_tail_head(cfg, reqs, last_step=v.last_step, max_wait=v.max_wait)
    if inside is None or inside > v.tail_head + 1e-9:
        raise AssertionError(f"vllm's own schedule (tail/head {v.tail_head:.3f}) is not in the tree "
                             f"(optimum under its makespan and max wait: {inside})")
    rows = []
    for floor in floors:
        last = floor_last_step(start, span, floor)
        for capped in (True, False):
            rows.append((floor, capped, best_tail_head(cfg, reqs, last_step=last,
                                                       max_wait=v.max_wait if capped else None)))
    at = {p: best_tail_head(cfg, reqs, last_step=max(pt.last_step, v.last_step), max_wait=v.max_wait)
          for p, pt in pts.items()}
    field_best = None
    if all(p in pts for p in FIELD):
        fastest = min((pts[p] for p in FIELD), key=lambda pt: (pt.last_step, pt.tail_head))
        field_best = best_tail_head(cfg, reqs, last_step=fastest.last_step, max_wait=None)
        if field_best is None or field_best > fastest.tail_head + 1e-9:
            raise AssertionError(f"{fastest.policy}'s own schedule (tail/head {fastest.tail_head:.3f}) is not in "
                                 f"the tree (optimum by its last step: {field_best})")
    return Frontier(v, pts, rows, at, inside, field_best)


def seconds_follow_steps(cfg: Config, span: int, model: CostModel = DEFAULT_MODEL) -> bool:
    """Whether, in this abstraction, a schedule as fast in cost-model seconds
    as one of `span` steps cannot take more steps: a longer one pays t0 for
    each extra step and saves at most k_lora x `max_loras` on each of the
    `span` steps (the same tokens and sequences are computed in all)."""
    return model.t0 > model.k_lora * cfg.max_loras * span


def floor_last_step(start: int, span: int, floor: float) -> int:
    """The latest last step at >= `floor` of the throughput of a `span`-step run from `start`."""
    return start + int(span / floor + 1e-9) - 1


# ---- the search for an instance where the goals cannot all be met ----------------------------

def random_instance(rng: random.Random, *, n_max: int = 9) -> tuple[Config, list[Request]]:
    """A LoRA-bound instance inside the abstraction: 1-2 slots, 2-4 seats, a
    popular adapter 1 with most requests, rarer adapters after it."""
    seats = rng.randint(2, 4)
    cfg = Config(max_loras=rng.randint(1, 2), max_num_seqs=seats, max_num_batched_tokens=seats * 4,
                 starvation_steps=rng.randint(1, 8))
    n = rng.randint(5, n_max)
    reqs = [Request(f"r{i}", min(rng.choice((1, 1, 1, 2, 2, 3, 4, 5)), 5), rng.randint(1, 4),
                    rng.randint(1, 8), rng.randint(1, 10)) for i in range(n)]
    return cfg, reqs


def mutate(cfg: Config, reqs: list[Request], rng: random.Random, *, n_max: int = 9) -> tuple[Config, list[Request]]:
    """`experiments.optimum.small_mutate` over this search's space: adapters 0-5, S >= 1, at least 4 requests."""
    return small_mutate(cfg, reqs, rng, n_max=n_max, max_adapter=5, min_starvation=1, min_requests=4)


def popular(reqs: list[Request], max_loras: int) -> bool:
    """Adapter numbers are popularity ranks: no adapter sends more requests
    than a lower-numbered one, and the head sends at least half of the LoRA
    requests (as on the realistic grid, where Zipf puts most traffic on it)."""
    counts: dict[int, int] = {}
    for r in reqs:
        if r.adapter > 0:
            counts[r.adapter] = counts.get(r.adapter, 0) + 1
    ranks = sorted(counts)
    head, _ = head_tail(ranks, max_loras)
    return all(counts[a] >= counts[b] for a, b in zip(ranks, ranks[1:], strict=False)) \
        and 2 * sum(counts[a] for a in head) >= sum(counts.values())


def gap_score(cfg: Config, reqs: list[Request], *, floor: float = 0.9, slack: int = 2,
              capped: bool = True) -> float:
    """The smallest tail/head of the schedules with >= `floor` of vllm's
    throughput (and, when `capped`, max wait <= vllm's), where vllm's tail/head exceeds 3 on a
    `popular` instance long enough that `floor` leaves at least `slack` steps;
    0 elsewhere (and outside the abstraction, or too large to search)."""
    if not popular(reqs, cfg.max_loras):
        return 0.0
    try:
        inside_abstraction(cfg, reqs)
        v = policy_point(cfg, reqs, "vllm")
        start = min(r.arrival for r in reqs)
        last = floor_last_step(start, v.last_step - start + 1, floor)
        if v.tail_head <= 3 or last - v.last_step < slack:
            return 0.0
        best = best_tail_head(cfg, reqs, last_step=last, max_wait=v.max_wait if capped else None,
                              max_states=300_000)
    except (AbstractionError, SearchTooLarge):
        return 0.0
    return float("inf") if best is None else best


def search(seed: int, *, iters: int = 400, n_max: int = 10, floor: float = 0.9, capped: bool = True,
           progress: object = None) -> tuple[Config, list[Request], float]:
    """Hill-climb for an instance whose `gap_score` is largest (> 2: the goals conflict there)."""
    rng = random.Random(f"tailhead-{seed}")
    cfg, reqs = random_instance(rng, n_max=n_max)
    score = gap_score(cfg, reqs, floor=floor, capped=capped)
    for it in range(iters):
        c2, q2 = mutate(cfg, reqs, rng, n_max=n_max)
        s2 = gap_score(c2, q2, floor=floor, capped=capped)
        if s2 >= score and s2 != float("inf"):
            cfg, reqs, score = c2, q2, s2
            if progress is not None:
                progress(f"  iter {it}: best tail/head meeting the other goals {score:.3f}")
    return cfg, reqs, score


# ---- instances the search found, and the report ---------------------------------------------

# (about, max_loras, max_num_seqs, starvation_steps, [(adapter, prompt, max_tokens, arrival), ...]);
# the budget is 4 tokens a seat (the abstraction's). Found by `search` (seed and mode in `about`).
INSTANCES: dict[str, tuple[str, int, int, int, list[tuple[int, int, int, int]]]] = {
    "max-wait": ("hill climbing, seed 5, throughput >= 0.9 and max wait <= vllm's (an earlier `mutate`)", 1, 4, 7,
                 [(4, 2, 8, 8), (5, 4, 8, 10), (5, 4, 1, 3), (4, 4, 8, 10), (5, 2, 5, 10), (4, 4, 8, 10),
                  (4, 4, 8, 10)]),
    "throughput": ("hill climbing, seed 3, at 0.97 (the first versions of `gap_score` and `mutate`)", 1, 2, 3,
                   [(1, 3, 5, 5), (0, 2, 3, 11), (0, 1, 4, 10), (4, 4, 2, 6), (1, 2, 3, 6), (1, 1, 7, 9),
                    (4, 4, 1, 6)]),
}


def instance(name: str) -> tuple[Config, list[Request]]:
    _, loras, seats, s, rows = INSTANCES[name]
    cfg = Config(max_loras=loras, max_num_seqs=seats, max_num_batched_tokens=4 * seats, starvation_steps=s)
    return cfg, [Request(f"r{i}", a, p, o, t) for i, (a, p, o, t) in enumerate(rows)]


def report_lines(name: str, f: Frontier) -> list[str]:
    """The frontier of one instance as lines: policies, then the optimum by floor."""
    v = f.vllm
    lines = [f"instance {name} ({INSTANCES[name][0]}): vllm tail/head {v.tail_head:.2f}, "
             f"max wait {v.max_wait}, last step {v.last_step}",
             f"  {'policy':10s} {'thr':>6s} {'max wait':>8s} {'tail/head':>9s} {'best at its thr, max <= vllm':>29s}"]
    for p, pt in f.points.items():
        best = f.at_policy[p]
        lines.append(f"  {p:10s} {pt.throughput:6.3f} {pt.max_wait:8d} {pt.tail_head:9.2f} "
                     f"{'none' if best is None else f'{best:.2f}':>29s}")
    for floor, capped, best in f.rows:
        lines.append(f"  best tail/head of any schedule at throughput >= {floor:.2f}"
                     f"{', max wait <= vllm' + chr(39) + 's' if capped else ''}: "
                     f"{'none' if best is None else f'{best:.2f}'}")
    if f.field_best is not None:
        least = f.field_least()
        lines.append(f"  best tail/head of any schedule as fast as {', '.join(FIELD)} all: {f.field_best:.2f} "
                     f"(least of theirs: {least} {f.points[least].tail_head:.2f})")
    return lines


def report() -> list[tuple[str, bool, str]]:
    """Print each instance's frontier; returns, per instance, whether the
    three goals (tail/head <= 2, throughput >= 0.97, max wait <= vllm's)
    conflict on it, i.e. no schedule meets them together, and then, per
    instance, whether no schedule dominates the field (`FIELD`) at once."""
    out, field = [], []
    for name in INSTANCES:
        cfg, reqs = instance(name)
        f = frontier(cfg, reqs)
        for line in report_lines(name, f):
            print(line)
        best = next(b for fl, capped, b in f.rows if fl == 0.97 and capped)
        out.append((name, best is None or best > 2.0,
                    f"vllm {f.vllm.tail_head:.2f}; best of any schedule {best:.2f}; "
                    f"fair {f.points['fair'].tail_head:.2f} at {f.points['fair'].throughput:.3f}"))
        least = f.field_least()
        fastest = min(FIELD, key=lambda p: f.points[p].last_step)
        span = f.points[fastest].last_step - min(r.arrival for r in reqs) + 1
        field.append((f"{name}, dominating {', '.join(FIELD)}", not f.field_dominated(),
                      f"as fast as {fastest} ({f.points[fastest].throughput:.3f}) the best tail/head is "
                      f"{f.field_best:.2f}, {least}'s {f.points[least].tail_head:.2f}; in cost-model seconds "
                      f"too: {'yes' if seconds_follow_steps(cfg, span) else 'not shown'}"))
    return out + field


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m experiments.tailhead", description=__doc__.splitlines()[0])
    ap.add_argument("--search", type=int, metavar="SEED", help="hill-climb for a new instance instead")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--free", action="store_true", help="--search without the max-wait goal")
    args = ap.parse_args(argv)
    if args.search is not None:
        cfg, reqs, score = search(args.search, iters=args.iters, capped=not args.free,
                                  progress=lambda m: print(m, flush=True))
        print(f"best tail/head of any schedule meeting the other goals: {score:.3f}\n"
              f"max_loras {cfg.max_loras}, seats {cfg.max_num_seqs}, S {cfg.starvation_steps}: "
              f"{[(r.adapter, r.prompt_tokens, r.max_tokens, r.arrival) for r in reqs]}")
        return 0
    for name, conflict, figures in report():
        print(f"goals conflict on {name}... {'yes' if conflict else 'no'}. ({figures})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
