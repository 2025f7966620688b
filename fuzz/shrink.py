"""Shrink a failing case to a minimal one that fails the same way.

Delta debugging (ddmin) over the requests, then the aborts, then one
simplification at a time over the config and over each request, repeated
until nothing more goes; `tidy` puts ids, adapters and arrivals in canonical
form. A candidate is kept only if it is valid (`fuzz.space.valid`) and
`still_fails`. Ending within its budget, the result is 1-minimal in its
requests: removing any single request loses the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from lora_sched.fuzz.space import FuzzCase, try_case, valid
from lora_sched.spec.request import Request

T = TypeVar("T")


class Budget:
    """At most `runs` calls of the predicate (each one is a vLLM run)."""

    def __init__(self, test: Callable[[FuzzCase], bool], runs: int) -> None:
        self.test, self.left, self.used = test, runs, 0

    def __call__(self, case: FuzzCase) -> bool:
        if self.left <= 0 or not valid(case):
            return False
        self.left -= 1
        self.used += 1
        return self.test(case)


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of `items` (order kept) on which `fails` holds.

    `fails(list(items))` is assumed; subsets then complements at growing
    granularity, as in Zeller and Hildebrandt (2002)."""
    cur = list(items)
    n = 2
    while len(cur) >= 2:
        size = len(cur) // n
        chunks = [cur[i * size:(i + 1) * size] if i < n - 1 else cur[i * size:] for i in range(n)]
        for chunk in chunks:
            if chunk and fails(chunk):
                cur, n = chunk, 2
                break
        else:
            for i in range(n):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if rest and len(rest) < len(cur) and fails(rest):
                    cur, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(cur):
                    break
                n = min(len(cur), 2 * n)
    if len(cur) == 1 and fails([]):
        return []
    return cur


def _config_changes(case: FuzzCase) -> list[dict]:
    """Simplifications of `case`'s config, simplest first."""
    cfg = case.config
    out: list[dict] = [{"async_scheduling": False}, {"chunked_prefill": True}, {"long_prefill_token_threshold": 0},
                       {"kv_blocks": None}, {"queue": "fcfs"}, {"starvation_steps": 0}]
    k = cfg.prefill_schedule_interval
    out.append({"prefill_schedule_interval": 1})  # the throttle off; else a shorter cadence
    out.extend({"prefill_schedule_interval": s} for s in sorted({2, k // 2, k - 1}) if 2 <= s < k)
    for name in ("max_loras", "max_num_seqs", "max_num_batched_tokens", "kv_blocks", "block_size"):
        v = getattr(cfg, name)
        if v is not None:
            out.extend({name: s} for s in sorted({1, v // 2, v - 1}) if 1 <= s < v)
    return [ch for ch in out if any(getattr(cfg, k) != v for k, v in ch.items())]


def _request_steps(case: FuzzCase, i: int) -> Iterator[FuzzCase]:
    reqs = case.workload.requests
    r = reqs[i]
    cands: list[Request] = []
    for p in sorted({1, r.prompt_tokens // 2, r.prompt_tokens - 1}):
        if 1 <= p < r.prompt_tokens:
            cands.append(replace(r, prompt_tokens=p))
    for m in sorted({1, r.max_tokens // 2, r.max_tokens - 1}):
        if 1 <= m < r.max_tokens:
            cands.append(replace(r, max_tokens=m))
    earliest = min(x.arrival for x in reqs)
    prev = reqs[i - 1].arrival if i > 0 else earliest
    for a in sorted({earliest, prev, r.arrival - 1}):
        if earliest <= a < r.arrival:
            cands.append(replace(r, arrival=a))
    if r.priority:
        cands.append(replace(r, priority=0))
    if r.adapter > 1:
        cands.append(replace(r, adapter=r.adapter - 1))
    for c in cands:
        yield case.with_workload([*reqs[:i], c, *reqs[i + 1:]])
    if r.id in case.workload.aborts and case.workload.aborts[r.id] > r.arrival:
        aborts = dict(case.workload.aborts)
        aborts[r.id] -= 1
        yield case.with_workload(list(reqs), aborts)


def tidy(case: FuzzCase) -> FuzzCase:
    """Cosmetic canonical form: ids r0.. in arrival order, adapters 1.. in first-use order,
    arrivals shifted to start at step 1. The caller re-checks that it still fails."""
    reqs = sorted(case.workload.requests, key=lambda r: r.arrival)
    shift = (reqs[0].arrival - 1) if reqs else 0
    ids = {r.id: f"r{i}" for i, r in enumerate(reqs)}
    adapters: dict[int, int] = {0: 0}
    for r in reqs:
        adapters.setdefault(r.adapter, len(adapters))
    new = [replace(r, id=ids[r.id], adapter=adapters[r.adapter], arrival=r.arrival - shift) for r in reqs]
    aborts = {ids[k]: v - shift for k, v in case.workload.aborts.items()}
    return case.with_workload(new, aborts)


@dataclass
class ShrinkResult:
    case: FuzzCase
    runs: int


def shrink(case: FuzzCase, still_fails: Callable[[FuzzCase], bool], *, max_runs: int = 600) -> ShrinkResult:
    """A minimal case that `still_fails`, within `max_runs` predicate calls."""
    test = Budget(still_fails, max_runs)
    cur = case
    while True:
        before = cur.size(), cur.config
        reqs = ddmin(cur.workload.requests, lambda rs, c=cur: test(c.with_workload(rs)))
        if len(reqs) < len(cur.workload.requests):
            cur = cur.with_workload(reqs)
        ab = ddmin(sorted(cur.workload.aborts.items()),
                   lambda items, c=cur: test(c.with_workload(c.workload.requests, dict(items))))
        if len(ab) < len(cur.workload.aborts):
            cur = cur.with_workload(cur.workload.requests, dict(ab))
        progress = True
        while progress:
            progress = False
            for ch in _config_changes(cur):
                cand = try_case(cur, **ch)
                if cand is not None and test(cand):
                    cur, progress = cand, True
                    break
        for i in range(len(cur.workload.requests)):
            progress = True
            while progress:
                progress = False
                for cand in _request_steps(cur, i):
                    if test(cand):
                        cur, progress = cand, True
                        break
        if (cur.size(), cur.config) == before or test.left <= 0:
            break
    neat = tidy(cur)
    if neat != cur and valid(neat) and still_fails(neat):  # one run past the budget: the canonical form
        cur = neat
        test.used += 1
    return ShrinkResult(cur, test.used)
