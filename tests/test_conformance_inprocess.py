"""In-process conformance: vLLM's real scheduler against the reference.

Runs the installed vLLM's `Scheduler` / `AsyncScheduler` (and our `blocking` /
`fair` classes built on them; `make test` runs this file on vLLM 0.32 in .venv
and on 0.33 and 0.34 in the release venvs) on random workloads and on every scenario, records
the trace and replays it step by step through `policy.core`. Marked `vllm`:
`conformance.inprocess` imports vLLM, so it is imported inside the tests and
`pytest -m "not vllm"` collects this file without vLLM installed.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from inprocess_cases import conform, random_case
from lora_sched.policy import claims
from lora_sched.policy.check import check_trace
from lora_sched.policy.scenarios import SCENARIOS

pytestmark = pytest.mark.vllm

N_RANDOM = 1000


def installed_release() -> str:
    from lora_sched.recorder import installed_release

    return installed_release()


def _check(cfg, wl, tmp_path, policy):
    """vLLM's trace replays through the reference and keeps every property the policy claims."""
    out = conform(cfg, wl, tmp_path / "t.jsonl", policy=policy)
    assert out.replay.ok, f"{cfg}\n{out.replay.describe()}"
    report = check_trace(str(out.trace))
    assert report.trace.config.vllm == installed_release()  # the recorder names the installed vLLM
    broken = {p: str(v) for p, v in report.first.items() if p in claims(policy, report.trace.config)}
    assert not broken, f"{cfg}\n{broken}"
    return out


def test_vllm_random_workloads(tmp_path):
    """>= 1000 random workloads: lengths, budgets, KV with preemption, priorities, aborts, async."""
    features = {"preempted": 0, "aborted": 0, "async": 0, "priority": 0}
    for seed in range(N_RANDOM):
        cfg, wl = random_case(random.Random(seed))
        out = _check(cfg, wl, tmp_path, "vllm")
        text = out.trace.read_text()
        features["preempted"] += '"preempted":["' in text
        features["aborted"] += '"kind":"abort"' in text
        features["async"] += cfg.async_scheduling
        features["priority"] += cfg.queue == "priority"
    # The generator must actually exercise what it claims to.
    assert all(v >= 20 for v in features.values()), features


@pytest.mark.parametrize("policy", ["blocking", "fair"])
def test_policy_classes_random_workloads(tmp_path, policy):
    for seed in range(150):
        cfg, wl = random_case(random.Random(10_000 + seed))
        _check(replace(cfg, policy=policy), wl, tmp_path, policy)


def _pass_over_runs(tmp_path, queue_class=None) -> tuple[int, int, int]:
    """fair's classes on 60 random workloads: (workloads on which `PassOverQueue`
    passed requests over, those on which a scan ended after the tail
    (`_tail_first`), those whose trace diverges from the reference)."""
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace

    from lora_sched.scheduler import AsyncFairScheduler, FairScheduler

    built: list = []

    def counted(base: type) -> type:
        class Counted(base):  # type: ignore[misc,valid-type]
            if queue_class is not None:
                pass_over_queue = queue_class

            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                built.append(self)

        return Counted

    classes = {False: counted(FairScheduler), True: counted(AsyncFairScheduler)}
    exercised = tails = diverged = 0
    for seed in range(60):
        cfg, wl = random_case(random.Random(10_000 + seed))
        cfg = replace(cfg, policy="fair")
        built.clear()
        path = tmp_path / f"pass-{seed}.jsonl"
        run_workload(cfg, wl, path, policy="fair", scheduler_class=classes[cfg.async_scheduling])
        exercised += built[0].passed > 0
        tails += built[0].tails_first > 0
        diverged += not replay(read_trace(str(path)), "fair").ok
    return exercised, tails, diverged


def test_fair_passes_over_what_the_full_cap_skips(tmp_path):
    """Inside vLLM, fair's scan passes over the waiting requests the full cap
    or the hold skips (`PassOverQueue`), and ends after the new arrivals when
    the tally says the rest would only be skipped, on a good share of random
    workloads; every trace still replays step for step: the queue vLLM
    leaves is its own."""
    exercised, tails, diverged = _pass_over_runs(tmp_path)
    assert exercised >= 5 and tails >= 3 and diverged == 0, (exercised, tails, diverged)


def test_planted_pass_over_out_of_order_is_caught(tmp_path):
    """The check above can fail: passed-over requests put back behind vLLM's
    skipped ones, instead of among them in visit order, diverge."""
    from itertools import islice

    from lora_sched.scheduler import PassOverQueue

    class Behind(PassOverQueue):
        """the passed-over requests go back behind the ones vLLM skipped"""

        def _settle(self, skipped) -> None:
            skipped = list(skipped)
            popped = {id(r) for _, r in self.popped}
            end = self.at if self.prefix is None else self.tail_at - self.prefix  # not the prefix: unvisited
            passed = [r for r in islice(self.inner, end) if id(r) not in popped]
            super()._settle(skipped)
            if passed and skipped:  # [vLLM's skipped, in visit order][passed over][the rest]
                self.inner.remove_requests([*passed, *skipped])
                self.inner.extendleft(reversed([*reversed(skipped), *passed]))

    exercised, _, diverged = _pass_over_runs(tmp_path, Behind)
    assert exercised and diverged, f"{Behind.__doc__}: went unnoticed ({exercised} exercised)"


def test_planted_tail_left_in_front_is_caught(tmp_path):
    """...and a scan that ends after the tail but leaves the tail's skipped
    requests in front of the prefix, instead of behind it, diverges."""
    from lora_sched.scheduler import PassOverQueue

    class TailAhead(PassOverQueue):
        """the tail's skipped requests stay ahead of the prefix"""

        def _settle(self, skipped) -> None:
            skipped = list(skipped)
            head = self.inner[self.tail_at - self.prefix] if self.prefix else None  # the prefix's first
            super()._settle(skipped)
            back = {id(r) for r in skipped}
            tail = [r for r in self.tail if id(r) in back]
            if head is not None and tail:  # [before][the tail's skipped][prefix][the tail's unvisited]
                moved = {id(r) for r in tail}
                rest = [r for r in self.inner if id(r) not in moved]
                i = next(i for i, r in enumerate(rest) if r is head)
                self.inner.clear()
                self.inner.extend([*rest[:i], *tail, *rest[i:]])

    _, tails, diverged = _pass_over_runs(tmp_path, TailAhead)
    assert tails and diverged, f"{TailAhead.__doc__}: went unnoticed ({tails} exercised)"


@pytest.mark.parametrize("policy", ["vllm", "blocking", "fair"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_scenarios(tmp_path, name, policy, async_scheduling):
    sc = SCENARIOS[name]
    cfg = replace(sc.config, policy=policy, async_scheduling=async_scheduling)
    _check(cfg, sc.workload, tmp_path, policy)


def test_starvation_fair_beats_vllm(tmp_path):
    """The starvation stream: adapter 3 waits for the stream under vllm, not under fair."""
    from lora_sched.spec.trace import read_trace

    sc = SCENARIOS["starvation"]
    waits = {}
    for policy in ("vllm", "fair"):
        out = _check(replace(sc.config, policy=policy), sc.workload, tmp_path, policy)
        steps = read_trace(out.trace).steps()
        first = next(r.step for r in steps if "victim-a3" in r.admitted)
        waits[policy] = first - 2
    assert waits["fair"] < waits["vllm"], waits


def test_fair_under_vllm_defaults_async_kv_throttle(tmp_path):
    """fair inside vLLM's `AsyncScheduler` with a KV pool that preempts and DP
    prefill throttling: zero divergences from the reference, and every claim
    holds on vLLM's own trace, bounded_wait included (one priority, so B
    applies: `policy.check.bound_for` must compute it, not skip it)."""
    preempted = throttled = 0
    for seed in range(150):
        cfg, wl = random_case(random.Random(20_000 + seed))
        longest = max(r.prompt_tokens + r.max_tokens for r in wl.requests)
        kv = -(-longest // cfg.block_size) + seed % 3  # the longest request, plus 0-2 blocks
        cfg = replace(cfg, policy="fair", async_scheduling=True, kv_blocks=kv, queue="fcfs",
                      prefill_schedule_interval=2 + seed % 2)
        wl = replace(wl, requests=[replace(r, priority=0) for r in wl.requests])
        out = _check(cfg, wl, tmp_path, "fair")
        report = check_trace(str(out.trace))
        assert report.bound is not None, report.bound_note
        text = out.trace.read_text()
        preempted += '"preempted":["' in text
        throttled += '"throttle":true' in text
    assert preempted >= 20 and throttled >= 20, (preempted, throttled)


class _MechanismCounter:
    """fair's gate, counting how often each mechanism decides: r* admitted
    first, a victim's request held, a victim's request let in because it ends
    by the deadline (a drain admission), or one that does not, let in while
    another victim remains (a late admission)."""

    def __new__(cls):
        from lora_sched.policy.fair import FairGate

        class Counting(FairGate):
            def __init__(self) -> None:
                super().__init__()
                self.counts = dict.fromkeys(MECHANISMS, 0)

            def decide(self, ctx, rid):
                decision, why = super().decide(ctx, rid)
                self.counts["held"] += why == "fair_guard"
                return decision, why

            def admitted(self, ctx, rid):
                g = self._guard(ctx.state)
                if g.star is not None:
                    self.counts["star" if rid == g.star else "late" if rid in g._late
                                else "drain" if ctx.state.adapter(rid) in g.victims else "other"] += 1
                super().admitted(ctx, rid)

        return Counting()


MECHANISMS = ("star", "held", "drain", "late", "other")
# Searched families on which every mechanism decides in sync and async runs
# (late admissions on the burst v10 was designed on); vLLM accepts them
# (budget >= seats).
MECHANISM_FAMILIES = ("adv-fairv5-throughput-overload.json", "adv-fair_cohort-throughput-deep.json",
                      "adv-fairv5-throughput-attack.json")
# A family on which a planted guard diverges from the reference (async).
PLANTED_FAMILY = "adv-fair_cohort-throughput.json"


def _family(name: str, async_scheduling: bool):
    from lora_sched.policy.driver import Workload

    from experiments.families import FAMILY_DIR, load

    _, cfg, reqs, _ = load(FAMILY_DIR / name)
    return replace(cfg, policy="fair", async_scheduling=async_scheduling), Workload(list(reqs))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_fair_mechanisms_inside_vllm(tmp_path, async_scheduling):
    """fair's three mechanisms (r* admitted first, the last victim's late
    requests held, the victims' drain admissions and late admissions while
    another victim remains) decide the same inside vLLM as in the
    reference, on workloads where all occur: zero divergences and every
    claim, no_hol_blocking included (its declared holds run the guard on the
    trace alone)."""
    from lora_sched.policy.driver import run

    counts = dict.fromkeys(MECHANISMS, 0)
    for cfg, wl in [_family(name, async_scheduling) for name in MECHANISM_FAMILIES]:
        gate = _MechanismCounter()
        run(cfg, wl, gate=gate)
        counts = {k: counts[k] + gate.counts[k] for k in counts}
        _check(cfg, wl, tmp_path, "fair")
    assert all(counts[k] for k in ("star", "held", "drain", "late")), counts


def _late_deadline(guard_class):
    class Late(guard_class):
        """the victim's deadline 20 outputs late: lets in requests the reference holds"""

        def visit_star(self, left: dict[int, int]) -> None:
            super().visit_star(left)
            self.deadline = {a: d + 20 for a, d in self.deadline.items()}

    return Late


def _oldest_not_first(guard_class):
    class Youngest(guard_class):
        """r* is the *youngest* starving request: admits requests the reference holds"""

        def _oldest_starving(self, step, stale):
            ready = [rid for rid, (since, _a) in self._waiting.items()
                     if step - since >= self.window_steps and not stale(rid)]
            return ready[-1] if ready else None

    return Youngest


@pytest.mark.parametrize("plant", [_late_deadline, _oldest_not_first])
def test_planted_guard_in_vllm_is_caught(tmp_path, plant):
    """The check above can fail: `AsyncFairScheduler` with a planted guard
    (a deadline 20 outputs late; r* the youngest starving request) diverges
    from the reference on a searched family."""
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.fair import FairGate, FairGuard
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace

    from lora_sched.scheduler import AsyncFairScheduler

    class PlantedGate(FairGate):
        guard_class = plant(FairGuard)

    class Planted(AsyncFairScheduler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.gate = PlantedGate()

    cfg, wl = _family(PLANTED_FAMILY, True)
    path = tmp_path / "planted.jsonl"
    run_workload(cfg, wl, path, policy="fair", scheduler_class=Planted)
    out = replay(read_trace(str(path)), "fair")
    assert not out.ok, f"{PlantedGate.guard_class.__doc__} inside vLLM went unnoticed"


def test_the_harness_throttles_once_on_each_release(tmp_path):
    """The harness plays the DP engine core's cadence on 0.32 and leaves it to
    the scheduler from 0.33 on. There the trace's off-cadence steps are the
    scheduler's own, and a harness throttling as well (a DP rank's input)
    defers on either, which replays too. On 0.32 the engine core's
    throttle is an input of each step, so a run without it replays too; there
    the harness must mark the engine core's off-cadence steps, and without it
    none is marked."""
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace
    from test_releases import CADENCE

    cfg, wl = CADENCE
    release = installed_release()
    runs = {}
    for engine_cadence in (None, release != "0.32"):
        path = tmp_path / f"cadence-{engine_cadence}.jsonl"
        run_workload(cfg, wl, path, engine_cadence=engine_cadence)
        runs[engine_cadence] = trace = read_trace(path)
        assert trace.config.vllm == release
    assert replay(runs[None], "vllm").ok, replay(runs[None], "vllm").describe()
    off = [s.step for s in runs[None].steps() if s.throttle]
    if release != "0.32":
        assert off[:6] == [4, 5, 7, 8, 9, 11]  # the reference's cadence (tests/test_releases.py)
        twice = replay(runs[True], "vllm")
        assert twice.ok, twice.describe()
        both = {s.step for s in runs[True].steps() if s.throttle}
        assert {2, 3} <= both and not {2, 3} & set(off)  # the engine core's steps 2 and 3 as well
    else:
        assert off[:7] == [2, 3, 5, 6, 8, 9, 11]
        assert not any(s.throttle for s in runs[False].steps())


def test_priority_self_preemption_on_each_release(tmp_path):
    """The workload on which 0.33 goes on past a self-preempting request
    (tests/test_releases.py) conforms on each release, and vLLM's own
    scheduler does what the registry says: r1 runs at step 3 on 0.33 only."""
    from test_releases import SELF_PREEMPT

    cfg, wl = SELF_PREEMPT
    out = _check(cfg, wl, tmp_path, "vllm")
    from lora_sched.spec.trace import read_trace

    step3 = next(s for s in read_trace(out.trace).steps() if s.step == 3)
    assert step3.preempted == ["r0"]
    assert step3.scheduled == ({"r1": 1} if installed_release() != "0.32" else {})
