"""The field's gates inside vLLM: `drainer`, `timeslice` and `vtc` as scheduler classes.

`lora_sched.scheduler.GateMixin` drives the reference gate object
(`policy.make_gate`) from inside vLLM 0.32's own `schedule()`. Each class's
traces, recorded from vLLM in-process, replay step for step through the
reference core (zero divergences) and keep every property the gate claims
(`policy.claims`): on random workloads (KV preemption, priorities, aborts,
async scheduling, DP prefill throttling), on every scenario sync and async,
and on every workload family vLLM accepts (the coded ones, the seed shape
included, and the adversarial ones of `experiments/families/`). vLLM refuses the
families whose token budget is below their seat count; that refusal is
asserted, not skipped.

What a gate does not claim is not asserted to hold. Where the reference shows
a gate starving (`tests/test_reference_gates.py`), the same starvation is
shown inside vLLM: the victim's wait grows with the stream. Each check can
fail: a planted bug in the mixin (a mirror off by one step, a scan order not
applied, an admission not reported) is caught by the same replay.

Marked `vllm`: vLLM is imported inside the tests only.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import replace

import pytest
from inprocess_cases import random_case, run_sync
from lora_sched.policy import claims
from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload
from lora_sched.policy.replay import replay
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.policy.workloads import starvation_stream
from lora_sched.spec.trace import read_trace

from experiments.crash import first_cap_break
from experiments.families import FAMILY_DIR, all_families, coded_families, load

pytestmark = pytest.mark.vllm

FIELD = ("drainer", "timeslice", "vtc")
N_RANDOM = 200
# The seed-shaped tuning workloads hold 500 requests; vtc runs 6000+ steps on
# each (it stops the scan behind the least-served blocked adapter), so it gets
# the first one only (the seed at rate inf) to keep CI time down.
VTC_SEED_ONLY = "seed (rate inf)"


def _conform(cfg, wl, tmp_path, policy, **kw):
    from inprocess_cases import conform

    return conform(cfg, wl, tmp_path / "t.jsonl", policy=policy, **kw)


def _check(cfg, wl, tmp_path, policy, *, crash_ok=False):
    """vLLM's trace replays through the reference and keeps every property the
    gate claims. With `crash_ok`, vLLM may instead die on its own max_loras
    assert, but only where the reference predicts it (`_predicted_crash`);
    then (None, None)."""
    try:
        out = _conform(replace(cfg, policy=policy), wl, tmp_path, policy)
    except AssertionError as exc:
        if not crash_ok:
            raise
        _predicted_crash(exc, replace(cfg, policy=policy), wl, tmp_path / "t.jsonl")
        return None, None
    assert out.replay.ok, f"{cfg}\n{out.replay.describe()}"
    report = check_trace(str(out.trace))
    broken = {p: str(v) for p, v in report.first.items() if p in claims(policy, report.trace.config)}
    assert not broken, f"{cfg}\n{broken}"
    assert out.replay.matched > 0
    return out, report


def _predicted_crash(exc, cfg, wl, path):
    """vLLM died in its own `schedule()` (the max_loras assert) on a gate that
    keeps vLLM's cap and does not claim `batch_lora_cap` on the installed
    release (vLLM 0.32 under the DP throttle, `policy.claims`): the reference
    run's first batch over the cap is the step vLLM was scheduling, and the
    partial trace replays step for step up to it."""
    from lora_sched.recorder import installed_release  # imports vLLM

    where = traceback.extract_tb(exc.__traceback__)[-1].filename
    assert "vllm/v1/core/sched/scheduler.py" in where, f"not vLLM's scheduler: {where}\n{exc!r}"
    release = replace(cfg, vllm=installed_release())
    assert "batch_lora_cap" not in claims(cfg.policy, release), f"{cfg.policy} claims batch_lora_cap: {release}"
    hit = first_cap_break(release, wl)
    trace = read_trace(path, allow_truncated_tail=True)
    steps = trace.steps()
    # A step's line is written when its output is processed; under async
    # scheduling that comes after the next step is scheduled.
    last = hit[0] - (2 if cfg.async_scheduling else 1) if hit is not None else None
    assert steps and steps[-1].step == last, (hit, steps[-1].step if steps else None)
    result = replay(trace, cfg.policy)
    assert result.ok and result.matched == len(steps), result.describe()


def _vllm_accepts(cfg) -> bool:
    return cfg.max_num_batched_tokens >= cfg.max_num_seqs


@pytest.mark.parametrize("policy", FIELD)
def test_field_gate_random_workloads(tmp_path, policy):
    seen = {"preempted": 0, "aborted": 0, "async": 0, "throttle": 0, "priority": 0}
    for seed in range(N_RANDOM):
        cfg, wl = random_case(random.Random(40_000 + seed))
        out, _ = _check(cfg, wl, tmp_path, policy)
        text = out.trace.read_text()
        seen["preempted"] += '"preempted":["' in text
        seen["aborted"] += '"kind":"abort"' in text
        seen["async"] += cfg.async_scheduling
        seen["throttle"] += '"throttle":true' in text
        seen["priority"] += cfg.queue == "priority"
    assert all(v >= 10 for v in seen.values()), seen


@pytest.mark.parametrize("policy", FIELD)
def test_field_gate_scenarios(tmp_path, policy):
    for _name, sc in sorted(SCENARIOS.items()):
        for async_scheduling in (False, True):
            _check(replace(sc.config, async_scheduling=async_scheduling), sc.workload, tmp_path, policy)


# The family on which the drainer crashes vLLM 0.32 (async, DP throttle every 2nd step).
CRASH_FAMILY = "adv-fairv9-throttle-wait.json"


def test_a_crash_is_accepted_only_where_the_reference_predicts_it(tmp_path):
    """`_predicted_crash` can fail: the drainer's crash of vLLM 0.32 on
    `CRASH_FAMILY` passes it, and the same crash judged as fair's (which
    claims `batch_lora_cap`) or as a synchronous run's (whose reference
    breaks the cap elsewhere, its lines not one step behind) does not. On
    0.33, whose cap counts every running request, the run completes and
    keeps the drainer's claims."""
    from lora_sched.recorder import installed_release  # imports vLLM

    _, cfg, reqs, _ = load(FAMILY_DIR / CRASH_FAMILY)
    cfg, wl = replace(cfg, policy="drainer", async_scheduling=True), Workload(reqs)
    if installed_release() != "0.32":
        _check(cfg, wl, tmp_path, "drainer")
        return
    with pytest.raises(AssertionError) as info:
        _conform(cfg, wl, tmp_path, "drainer")
    _predicted_crash(info.value, cfg, wl, tmp_path / "t.jsonl")
    for planted in (replace(cfg, policy="fair"), replace(cfg, async_scheduling=False)):
        with pytest.raises(AssertionError):
            _predicted_crash(info.value, planted, wl, tmp_path / "t.jsonl")


@pytest.mark.full  # every family on each field gate: minutes (make test-full); random workloads run in make test
@pytest.mark.parametrize("policy", FIELD)
def test_field_gate_families(tmp_path, policy):
    """Every family vLLM accepts: the seed shape, the tuning set, the starvation
    stream, issue 11's max_loras-1 family and the adversarial families (the
    small ones also under async scheduling). A family may crash vLLM 0.32's
    max_loras assert where the gate keeps vLLM's cap and the reference
    predicts it (`_predicted_crash`: `CRASH_FAMILY` under async for the
    drainer on 0.32; never on 0.33, where every gate claims both caps)."""
    coded = set(coded_families())
    ran = []
    for name, (cfg, reqs) in all_families().items():
        if not _vllm_accepts(cfg):
            continue
        if policy == "vtc" and name in coded and len(reqs) >= 500 and name != VTC_SEED_ONLY:
            continue
        _check(cfg, Workload(reqs), tmp_path, policy, crash_ok=True)
        if len(reqs) < 100:
            _check(replace(cfg, async_scheduling=True), Workload(reqs), tmp_path, policy, crash_ok=True)
        ran.append(name)
    assert VTC_SEED_ONLY in ran and "known max_loras 1 (issue 11)" in ran
    assert sum(name.startswith("adv-") for name in ran) >= 10, ran


def test_vllm_refuses_the_families_it_cannot_run(tmp_path):
    """The adversarial search explores budgets below the seat count; vLLM's
    SchedulerConfig rejects those (max_num_batched_tokens >= max_num_seqs), so
    they are not conformance cases: the refusal is vLLM's, checked here."""
    from lora_sched.conformance.inprocess import make_scheduler

    refused = {name: cfg for name, (cfg, _) in all_families().items() if not _vllm_accepts(cfg)}
    assert refused, "no family below vLLM's limit: drop this test and the filter"
    for _name, cfg in refused.items():
        with pytest.raises(ValueError, match="must be greater than or equal to max_num_seqs"):
            make_scheduler(replace(cfg, policy="drainer"), "drainer")


@pytest.mark.parametrize("policy", ["drainer", "timeslice"])
def test_starvation_inside_vllm(tmp_path, policy):
    """The starvation the reference search finds for drainer and timeslice
    (tests/test_reference_gates.py) happens inside vLLM: on the starvation
    stream the adapter-3 request waits about as long as the stream lasts,
    twice as long on a stream twice as long, while fair's wait stays put."""
    waits: dict[str, dict[int, int]] = {policy: {}, "fair": {}}
    for length in (40, 80):
        cfg, wl = starvation_stream(length)
        cfg = replace(cfg, starvation_steps=8)
        for p in waits:
            out, report = _check(cfg, wl, tmp_path, p)
            waits[p][length] = report.waits["victim-a3"]
    mine, fair = waits[policy], waits["fair"]
    assert mine[40] >= 35 and mine[80] >= mine[40] + 35, waits
    assert fair[80] == fair[40] < mine[40], waits


def _first_divergence(cls, policy: str, tmp_path, seeds: range) -> int | None:
    from lora_sched.conformance.inprocess import run_workload
    from lora_sched.policy.replay import replay
    from lora_sched.spec.trace import read_trace

    for seed in seeds:
        cfg, wl = random_case(random.Random(40_000 + seed))
        # Sync, no DP throttle: the gates keep vLLM's LoRA-cap assert there,
        # so a planted bug shows as a divergence, not as a crash of vLLM.
        cfg = replace(cfg, policy=policy, async_scheduling=False, prefill_schedule_interval=1)
        path = tmp_path / "planted.jsonl"
        run_workload(cfg, wl, path, policy=policy, scheduler_class=cls)
        if not replay(read_trace(path), policy).ok:
            return seed
    return None


def _planted(kind: str):
    from lora_sched import scheduler as ls

    if kind == "mirror":
        class LateArrival(ls.DrainerScheduler):
            """The mirror stamps arrivals one step late: the drainer's waits are short by one."""

            def add_request(self, request):
                super().add_request(request)
                self.mirror.reqs[request.request_id].waiting_since += 1
        return "drainer", LateArrival
    if kind == "order":
        class UnorderedScan(ls.TimesliceScheduler):
            """The gate's scan order is computed but not applied: vLLM scans in queue order."""

            def _before_waiting_scan(self, scheduled_loras):
                super()._before_waiting_scan(scheduled_loras)
                self.waiting.unpin()
        return "timeslice", UnorderedScan

    class Unreported(ls.VtcScheduler):
        """Admissions are never reported to the gate: vtc never charges a prompt."""

        def _flush_admitted(self):
            self._candidate = None
    return "vtc", Unreported


@pytest.mark.parametrize("kind", ["mirror", "order", "admitted"])
def test_planted_mixin_bug_is_caught(tmp_path, kind):
    policy, cls = _planted(kind)
    seed = _first_divergence(cls, policy, tmp_path, range(N_RANDOM))
    assert seed is not None, f"planted {kind} bug in the {policy} class went unnoticed"


def test_gate_classes_forget_every_request_they_served():
    """A long-running server must not keep per-request state: once every request
    has finished or been aborted, neither the mirror nor the gate (vtc's
    counters) holds an entry for any."""
    from lora_sched.conformance.inprocess import _vllm_request, make_scheduler
    from vllm.v1.request import RequestStatus

    sc = SCENARIOS["starvation"]
    for policy in FIELD:
        cfg = replace(sc.config, policy=policy)
        sched = make_scheduler(cfg, policy)
        reqs = sorted(sc.workload.requests, key=lambda r: r.arrival)
        for i, r in enumerate(reqs[:30]):
            sched.add_request(_vllm_request(r, i))
        sched.finish_requests(reqs[0].id, RequestStatus.FINISHED_ABORTED)
        # The engine runs one more schedule() after the last request finishes
        # (to report it finished): the gate sees it finished there, then it goes.
        run_sync(sched, max_steps=5000)
        assert not sched.mirror.reqs and not sched.mirror.finished and not sched.mirror.aborted
        if policy == "vtc":
            assert not sched.gate.charged and not sched.gate._admits


@pytest.mark.parametrize("policy", FIELD)
def test_conform_cli_in_process(tmp_path, policy, capsys):
    """`lora-sched conform --in-process --policy P` for the field's gates."""
    from lora_sched.cli import main

    rc = main(["conform", "--in-process", "--policy", policy, "--scenario", "seed", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"replay against {policy} ... ok" in out and "conform: ok" in out
