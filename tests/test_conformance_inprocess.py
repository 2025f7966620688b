"""In-process conformance: vLLM's real scheduler against the reference.

Runs the installed vLLM's `Scheduler` / `AsyncScheduler` (and our `blocking` /
`fair` classes built on them; `make test` runs this file on vLLM 0.32 in .venv
and on 0.33 in .venv-033) on random workloads and on every scenario, records
the trace and replays it step by step through `policy.core`. Marked `vllm`:
`conformance.inprocess` imports vLLM, so it is imported inside the tests and
`pytest -m "not vllm"` collects this file without vLLM installed.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from lora_sched.policy import claims
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.spec.check import check_trace

pytestmark = pytest.mark.vllm

N_RANDOM = 1000


def conform(*args, **kw):
    from lora_sched.conformance.inprocess import conform

    return conform(*args, **kw)


def installed_release() -> str:
    from lora_sched.conformance.recorder import installed_release

    return installed_release()


def random_case(rnd: random.Random):
    from lora_sched.conformance.inprocess import random_case

    return random_case(rnd)


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
    applies: `spec.check.bound_for` must compute it, not skip it)."""
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


class _ExemptionCounter:
    """fair's gate, counting the victims' requests it lets in while r* waits,
    by kind, and the admissions that move a victim's deadline."""

    def __new__(cls):
        from lora_sched.policy.fair import FairGate

        class Counting(FairGate):
            def __init__(self) -> None:
                super().__init__()
                self.counts = dict.fromkeys(EXEMPTIONS, 0)

            def admitted(self, ctx, rid):
                g = self._guard(ctx)
                a = ctx.state.adapter(rid)
                if g.star is not None and rid != g.star and a in g.victims:
                    w = g._by_id[rid]
                    self.counts["cohort" if rid in g.cohort else g.admission(w)] += 1
                    self.counts["moved"] += ctx.step + w.left > g.deadline[a]
                super().admitted(ctx, rid)

        return Counting()


# fair's exemptions from the guard's hold (a cohort member is never held; the
# others are `FairGuard.admission`'s kinds), and moved deadlines.
EXEMPTIONS = ("cohort", "gated", "switch", "drain", "priced", "moved")
# Searched families on which all of them occur in sync and async runs; vLLM
# accepts both (budget >= seats).
EXEMPTION_FAMILIES = ("adv-fairv5-throughput-overload.json", "adv-fair_cohort-throughput-deep.json")
# Priced admissions are rare under v6 (until the switch is paid, the switch
# price lets in what the price would); this small workload has one (S = 2):
# (adapter, max_tokens, arrival), 1-token prompts.
PRICED_SHAPE = [(1, 1, 1), (1, 8, 2), (2, 3, 3), (1, 8, 7)]
# A family on which a planted guard diverges from the reference (async).
PLANTED_FAMILY = "adv-fair_cohort-throughput-deep.json"


def _family(name: str, async_scheduling: bool):
    from lora_sched.bench.families import FAMILY_DIR, load
    from lora_sched.policy.driver import Workload

    _, cfg, reqs, _ = load(FAMILY_DIR / name)
    return replace(cfg, policy="fair", async_scheduling=async_scheduling), Workload(list(reqs))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_fair_exemptions_inside_vllm(tmp_path, async_scheduling):
    """fair's exemptions from the guard's hold (a victim's requests that were
    waiting when r* was chosen, that come while the switch is unpaid, that end
    by its deadline, or whose hold would cost more than r* has waited; the
    cohort of the last r*) and the deadlines its admissions move decide the
    same inside vLLM as in the reference, on workloads where all occur: zero
    divergences and every claim, no_hol_blocking included (its declared
    holds replay the guard from the trace alone)."""
    from lora_sched.policy.driver import Workload, run
    from lora_sched.spec.config import Config
    from lora_sched.spec.request import Request

    counts = dict.fromkeys(EXEMPTIONS, 0)
    priced = (Config(max_loras=1, max_num_seqs=2, max_num_batched_tokens=4, starvation_steps=2, policy="fair",
                     async_scheduling=async_scheduling),
              Workload([Request(f"r{i}", a, 1, out, arr) for i, (a, out, arr) in enumerate(PRICED_SHAPE)]))
    for cfg, wl in [_family(name, async_scheduling) for name in EXEMPTION_FAMILIES] + [priced]:
        gate = _ExemptionCounter()
        run(cfg, wl, gate=gate)
        counts = {k: counts[k] + gate.counts[k] for k in counts}
        _check(cfg, wl, tmp_path, "fair")
    assert all(counts.values()), counts


def _late_deadline(guard_class):
    class Late(guard_class):
        """each victim's deadline 20 outputs late: lets in requests the reference holds"""

        def visit_star(self, left: dict[int, int]) -> None:
            super().visit_star({a: n + 20 for a, n in left.items()})

    return Late


def _deadline_never_moves(guard_class):
    class Fixed(guard_class):
        """a victim's admissions never move its deadline: holds requests the reference lets in"""

        def admitted(self, rid: str) -> None:
            if rid == self.star:
                super().admitted(rid)

    return Fixed


@pytest.mark.parametrize("plant", [_late_deadline, _deadline_never_moves])
def test_planted_guard_in_vllm_is_caught(tmp_path, plant):
    """The check above can fail: `AsyncFairScheduler` with a planted guard
    (a deadline 20 outputs late; a deadline that admissions never move)
    diverges from the reference on a searched family."""
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.fair import FairGuard
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace

    from lora_sched.scheduler import AsyncFairScheduler

    bug = plant(FairGuard)

    class Planted(AsyncFairScheduler):
        def guard(self) -> FairGuard:
            if self._guard is None:
                g = super().guard()
                self._guard = bug(g.starvation_steps, g.max_loras, g.priority_queue)
            return self._guard

    cfg, wl = _family(PLANTED_FAMILY, True)
    path = tmp_path / "planted.jsonl"
    run_workload(cfg, wl, path, policy="fair", scheduler_class=Planted)
    out = replay(read_trace(str(path)), "fair")
    assert not out.ok, f"{bug.__doc__} inside vLLM went unnoticed"


def test_the_harness_throttles_once_on_each_release(tmp_path):
    """The harness plays the DP engine core's cadence on 0.32 and leaves it to
    0.33's scheduler. On 0.33 the trace's off-cadence steps are the
    scheduler's own and replay compares them: the harness throttling as well
    (twice) diverges. On 0.32 the engine core's throttle is an input of each
    step, so a run without it replays too; there the harness must mark the
    engine core's off-cadence steps, and without it none is marked."""
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace
    from test_releases import CADENCE

    cfg, wl = CADENCE
    release = installed_release()
    runs = {}
    for engine_cadence in (None, release == "0.33"):
        path = tmp_path / f"cadence-{engine_cadence}.jsonl"
        run_workload(cfg, wl, path, engine_cadence=engine_cadence)
        runs[engine_cadence] = trace = read_trace(path)
        assert trace.config.vllm == release
    assert replay(runs[None], "vllm").ok, replay(runs[None], "vllm").describe()
    off = [s.step for s in runs[None].steps() if s.throttle]
    if release == "0.33":
        assert off[:6] == [4, 5, 7, 8, 9, 11]  # the reference's cadence (tests/test_releases.py)
        twice = replay(runs[True], "vllm")
        assert not twice.ok and twice.divergence is not None, twice.describe()
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
    assert step3.scheduled == ({"r1": 1} if installed_release() == "0.33" else {})
