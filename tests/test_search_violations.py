"""Properties a policy must fail, shown by a search that finds the counterexample.

No `xfail`: each test runs `hypothesis.find` over workloads until the
property breaks, then asserts on the run it found, so the test fails if the
policy stops failing the property (or the search space no longer reaches it).

- `vllm` starves: a request waits past a fixed bound (`STARVE_BOUND` steps)
  while the active adapters keep being scheduled.
- `blocking` blocks the head of the line: a step leaves waiting a request
  that the LoRA cap and capacity let in (`no_hol_blocking`).
- `running_lora_cap` is not claimed under async scheduling nor with skipped
  running requests: both are searched for here, and the skip case is shown
  to end in vLLM's own `assert len(scheduled_loras) <= max_loras`.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import replace

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from lora_sched.policy.bound import workload_bound
from lora_sched.policy.check import check_trace, observe_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.observe import Observer
from lora_sched.spec.request import Request
from lora_sched.spec.trace import read_trace
from strategies import scenarios

STARVE_BOUND = 50  # steps; any fixed bound works, the search scales the stream
# Generation only: the first counterexample found is asserted on as is;
# shrinking it to a minimal one costs minutes and changes nothing asserted.
# Derandomized in every profile, so each search asserts on the same example
# everywhere (a flaky search would say nothing about the policy).
SEARCH = settings(max_examples=2000, deadline=None, database=None, phases=[Phase.generate], derandomize=True,
                  suppress_health_check=list(HealthCheck))


def _lora_set(ids, adapter) -> set[int]:
    return {adapter[r] for r in ids if adapter[r] > 0}


@st.composite
def adapter_streams(draw) -> tuple[Config, Workload]:
    """A stream of requests for a few adapters plus single requests of others.

    `max_loras` adapters get a request every `period` steps for `length`
    steps; each of the `extra` other adapters sends one request early on.
    Budgets are ample: only the LoRA cap limits admission.
    """
    max_loras = draw(st.integers(1, 3))
    period = draw(st.integers(1, 4))
    length = draw(st.integers(10, 90))
    prompt = draw(st.integers(1, 8))
    out = draw(st.integers(1, 12))
    extra = draw(st.integers(1, 2))
    cfg = Config(max_loras=max_loras, max_num_seqs=64, max_num_batched_tokens=512, policy="vllm")
    reqs = []
    for t in range(1, length + 1, period):
        for a in range(1, max_loras + 1):
            reqs.append(Request(f"s{a}-{t}", a, prompt, out, t))
    for k in range(extra):
        a = max_loras + 1 + k
        reqs.append(Request(f"x{a}", a, prompt, out, draw(st.integers(1, 5))))
    return cfg, Workload(reqs)


def _worst_wait(cfg: Config, wl: Workload, policy: str) -> tuple[str, int]:
    waits = run(cfg, wl, policy=policy).waits()
    rid = max(waits, key=lambda r: waits[r])
    return rid, waits[rid]


def test_vllm_starves_a_request_past_any_fixed_bound():
    """Search finds a workload where `vllm` keeps a request waiting more than
    STARVE_BOUND steps: in every step of that wait the batch is full of other
    adapters (max_loras of them), the victim's adapter is never scheduled, and
    later requests are admitted ahead of it. `fair` admits the same victim
    within its bound B on the same workload."""
    cfg, wl = find(adapter_streams(), lambda s: _worst_wait(s[0], s[1], "vllm")[1] > STARVE_BOUND,
                   settings=SEARCH)
    adapter = {r.id: r.adapter for r in wl.requests}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "starve.jsonl")
        result = run(cfg, wl, policy="vllm", trace_path=path)
        trace = read_trace(path)
    victim, wait = max(result.waits().items(), key=lambda kv: kv[1])
    arrival = trace.requests()[victim].arrival
    assert wait > STARVE_BOUND
    window = [r for r in trace.steps() if arrival <= r.step < arrival + STARVE_BOUND]
    assert len(window) == STARVE_BOUND  # the engine is busy every step of the wait
    overtaken_by = []
    for rec in window:
        assert victim in rec.waiting and victim not in rec.admitted
        batch = _lora_set(rec.scheduled, adapter)
        assert adapter[victim] not in batch
        assert len(batch) == cfg.max_loras  # the cap, not capacity, keeps it out
        overtaken_by += [r for r in rec.admitted if trace.requests()[r].arrival > arrival]
    assert overtaken_by, "later requests must be admitted while the victim waits"
    # The trace checker sees the same starvation with B = STARVE_BOUND.
    obs = Observer(trace.config)
    for _ in observe_trace(trace, obs):
        pass
    found = obs.close(STARVE_BOUND)
    assert [v.property for v in found] == ["bounded_wait"]
    # fair on the same workload: within B (its assumptions hold here).
    reqs = wl.requests
    b = workload_bound(cfg, reqs)
    fair_waits = run(cfg, wl, policy="fair").waits()
    assert max(fair_waits.values()) <= b
    assert fair_waits[victim] < wait


_HOL = re.compile(r"^'(?P<rid>[^']+)' \(adapter (?P<a>\d+)\) left waiting")


def _hol_report(scenario):
    cfg, wl = scenario
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hol.jsonl")
        run(cfg, wl, trace_path=path)
        return check_trace(path)


def test_blocking_head_of_line_blocking_found_by_search():
    """Search over random (synchronous) workloads finds a step where `blocking`
    violates no_hol_blocking. In that step the scan stopped at a request
    whose new adapter the full LoRA cap refused, and left waiting behind it a
    request the cap allowed (a base-model request or one of an adapter already
    in the batch), which `vllm` would have admitted."""
    scenario = find(scenarios(policy="blocking", async_scheduling=False),
                    lambda s: "no_hol_blocking" in _hol_report(s).first, settings=SEARCH)
    cfg, _ = scenario
    report = _hol_report(scenario)
    v = report.first["no_hol_blocking"]
    m = _HOL.match(v.message)
    assert m, v.message
    victim = m["rid"]
    rec = next(r for r in report.trace.steps() if r.step == v.step)
    adapter = {rid: r.adapter for rid, r in report.trace.requests().items()}
    assert victim in rec.waiting and victim not in rec.admitted and not rec.preempted
    batch = _lora_set(rec.scheduled, adapter)
    assert adapter[victim] == 0 or adapter[victim] in batch or len(batch) < cfg.max_loras
    ahead = rec.waiting[:rec.waiting.index(victim)]
    blockers = [r for r in ahead if r not in rec.admitted and adapter[r] > 0
                and adapter[r] not in batch and len(batch) >= cfg.max_loras]
    assert blockers, "the scan stopped at a LoRA request the full cap refused"
    # The other step properties hold on that trace: only the gate is at fault.
    assert set(report.first) <= {"no_hol_blocking", "bounded_wait"}


def _running_lora_cap_broken(cfg: Config, wl: Workload) -> bool:
    adapter = {r.id: r.adapter for r in wl.requests}
    for rec in run(cfg, wl).records:
        after = [r for r in rec.running if r not in rec.preempted] + rec.admitted
        if len(_lora_set(after, adapter)) > cfg.max_loras:
            return True
    return False


def test_async_scheduling_breaks_running_lora_cap():
    """Why running_lora_cap is not claimed under async scheduling: a running
    request sure to finish is not scheduled, so its adapter does not count,
    and a request of another adapter is admitted while it still runs."""
    cfg, wl = find(scenarios(policy="vllm", async_scheduling=True),
                   lambda s: _running_lora_cap_broken(*s), settings=SEARCH)
    assert cfg.async_scheduling
    # The same workload without async scheduling keeps the cap.
    assert not _running_lora_cap_broken(Config(**{**cfg.to_dict(), "async_scheduling": False}), wl)


@st.composite
def lora_skips(draw) -> tuple[Config, Workload]:
    """Small sync workloads in which some running LoRA requests are skipped."""
    cfg = Config(max_loras=draw(st.integers(1, 2)), max_num_seqs=8, max_num_batched_tokens=64, policy="vllm")
    n = draw(st.integers(2, 5))
    reqs = [Request(f"r{i}", draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 8)),
                    draw(st.integers(1, 4))) for i in range(n)]
    skips = {t: frozenset(draw(st.sets(st.sampled_from([r.id for r in reqs]), max_size=2)))
             for t in range(1, draw(st.integers(2, 6)))}
    return cfg, Workload(reqs, skips={t: s for t, s in skips.items() if s})


def _breaks_batch_cap(scenario) -> bool:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "skip.jsonl")
        run(*scenario, trace_path=path)
        return "batch_lora_cap" in check_trace(path).first


def test_skipping_a_lora_request_breaks_the_lora_cap():
    """Why no policy can claim the LoRA caps when running LoRA requests may be
    skipped (DESIGN's nondeterministic skip): the skipped request's adapter
    does not count, another adapter is admitted (running_lora_cap broken),
    and once both are scheduled together the batch exceeds max_loras. vLLM
    stops there with `assert len(scheduled_loras) <= max_loras`; the
    reference goes on so that the property reports it."""
    scenario = find(lora_skips(), _breaks_batch_cap, settings=SEARCH)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "skip.jsonl")
        run(*scenario, trace_path=path)
        report = check_trace(path)
    cap, run_cap = report.first["batch_lora_cap"], report.first["running_lora_cap"]
    assert run_cap.step < cap.step  # the extra adapter is admitted first, scheduled together later
    cfg = scenario[0]
    assert f"> max_loras {cfg.max_loras}" in cap.message


@st.composite
def throttled_streams(draw) -> tuple[Config, Workload]:
    """Small sync workloads under DP prefill throttling (max_loras 1) with the
    three ingredients the throttle needs, at random sizes and times: a
    base-model request that decodes (the throttle defers prefills only while
    something decodes), a LoRA request with a long prompt (chunked, so
    deferred), a one-token-prompt request of another adapter (the only kind a
    throttled step admits), plus up to two random others."""
    cfg = Config(max_loras=1, max_num_seqs=draw(st.integers(3, 8)),
                 max_num_batched_tokens=draw(st.sampled_from([3, 4, 6])),
                 prefill_schedule_interval=draw(st.integers(2, 3)), policy="vllm")
    reqs = [Request("decoder", 0, draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 3))),
            Request("long", 1, draw(st.integers(2, 9)), draw(st.integers(1, 4)), draw(st.integers(1, 3))),
            Request("short", 2, 1, draw(st.integers(1, 4)), draw(st.integers(1, 4)))]
    reqs += [Request(f"x{i}", draw(st.integers(0, 2)), draw(st.integers(1, 9)), draw(st.integers(1, 4)),
                     draw(st.integers(1, 4))) for i in range(draw(st.integers(0, 2)))]
    return cfg, Workload(reqs)


def test_dp_throttle_breaks_the_lora_cap_and_fair_keeps_it():
    """vLLM 0.32's DP prefill throttle defers running prefill chunks, so their
    adapters are not counted, a one-token-prompt request of another adapter
    is admitted, and the next step schedules both: batch_lora_cap broken,
    which in vLLM is `assert len(scheduled_loras) <= max_loras`
    (`tests/test_throttle_crash.py` shows the crash in vLLM itself). fair
    counts every running request's adapter and keeps both caps on the same
    workload."""
    scenario = find(throttled_streams(), _breaks_batch_cap, settings=SEARCH)
    cfg, wl = scenario
    assert cfg.prefill_schedule_interval > 1
    no_throttle = (replace(cfg, prefill_schedule_interval=1), wl)
    assert not _breaks_batch_cap(no_throttle)  # the throttle is the cause
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fair.jsonl")
        run(replace(cfg, policy="fair"), wl, trace_path=path)
        report = check_trace(path)
    assert not {"batch_lora_cap", "running_lora_cap"} & set(report.first), report.first


def test_fair_keeps_the_caps_where_vllm_breaks_them():
    """The skip and async counterexamples found above, run under fair: its
    cap counts the adapters of running requests left unscheduled, so both
    caps hold."""
    skip = find(lora_skips(), _breaks_batch_cap, settings=SEARCH)
    cfg, wl = find(scenarios(policy="vllm", async_scheduling=True),
                   lambda s: _running_lora_cap_broken(*s), settings=SEARCH)
    for c, w in (skip, (cfg, wl)):
        fair = replace(c, policy="fair")
        assert not _running_lora_cap_broken(fair, w)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fair.jsonl")
            run(fair, w, trace_path=path)
            assert not {"batch_lora_cap", "running_lora_cap"} & set(check_trace(path).first)
