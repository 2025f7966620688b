"""A per-step throttle input (`schedule(throttle_prefills=True)`, a DP rank's
engine core) replays on every release.

vLLM's scheduler defers prefills on a step when the engine core's input says
so or, on a release whose scheduler keeps the cadence itself (0.33, 0.34),
when its own `--prefill-schedule-interval` cadence does: either one, and the
cadence's counters move the same way whether a step was throttled or not
(0.34.0's `scheduler.py` 764-807, 1697-1702). The reference follows it
(`policy.core.Scheduler._schedule`), so a trace whose steps carry throttle
inputs, recorded from the installed vLLM in-process with random DP-style
throttle patterns, replays with no divergence, and a reference that ignores
the input diverges on it. The unit tests need no vLLM; those marked `vllm`
drive the installed one (`make test` runs them on 0.32, 0.33 and 0.34).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from inprocess_cases import random_case
from lora_sched.policy import make_gate
from lora_sched.policy import replay as replay_mod
from lora_sched.policy.core import Scheduler
from lora_sched.policy.driver import Workload
from lora_sched.policy.replay import replay
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.trace import TraceWriter, read_trace

SEEDS = range(4)
INTERVALS = (1, 2, 3)
N_RANDOM = 40  # random conformance cases (KV, preemption, priority, aborts, async) with random throttles


class IgnoresInput(Scheduler):
    """A reference that drops the engine core's throttle input."""

    def step(self, step, skip_running=frozenset(), *, throttle=False):
        return super().step(step, skip_running)


def _ignoring_input(monkeypatch) -> None:
    monkeypatch.setattr(replay_mod, "Scheduler", IgnoresInput)


# ---- the reference alone (no vLLM) ---------------------------------------------

# One request decoding (a one-token prompt admitted at step 1), a 6-token
# prompt arriving at step 2 while it decodes.
DECODE_THEN_PREFILL = [Request("d", 0, 1, 10, 1), Request("p", 0, 6, 2, 2)]


@pytest.mark.parametrize("release", list(releases.RELEASES))
@pytest.mark.parametrize("interval", [1, 3])
def test_the_model_takes_a_throttle_input_on_every_release(release, interval):
    """An input-throttled step defers the arriving prefill on every release
    and is marked throttled; the next unthrottled step admits it."""
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=4, prefill_schedule_interval=interval, vllm=release)
    s = Scheduler(cfg, make_gate(cfg.policy))
    s.add(DECODE_THEN_PREFILL[0])
    first = s.step(1)
    assert first.admitted == ["d"] and not first.throttle
    s.add(DECODE_THEN_PREFILL[1])
    held = s.step(2, throttle=True)
    assert held.throttle and held.scheduled == {"d": 1} and held.admitted == []
    assert held.holds["p"] == "throttle"
    free = s.step(3)
    # d's admission carried no prefill (one token), so no local cadence holds step 3.
    assert not free.throttle and free.admitted == ["p"]


@pytest.mark.parametrize("release", [r for r, rel in releases.RELEASES.items() if rel.prefill_cadence == "scheduler"])
def test_an_input_throttled_step_keeps_the_local_cadence(release):
    """Interval 3: the cadence counts the steps since the last prefill-carrying
    one, whether the input throttled them or not; an input on an on-cadence
    step throttles it, and one on an off-cadence step changes nothing."""
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=4, prefill_schedule_interval=3, vllm=release)

    def marks(inputs: set[int]) -> list[int]:
        s = Scheduler(cfg, make_gate(cfg.policy))
        reqs = [Request("d", 0, 1, 12, 1), Request("p", 0, 6, 2, 2)]
        out = []
        for step in range(1, 10):
            for r in reqs:
                if r.arrival == step:
                    s.add(r)
            if s.state.waiting or s.state.running:
                out.append((step, s.step(step, throttle=step in inputs)))
        return [(n, r.throttle, sorted(r.scheduled.items())) for n, r in out]

    alone = marks(set())
    # p (6 tokens, budget 4) is admitted at step 2 and its last chunk runs at
    # step 5: each restarts the cadence, which holds the two steps after it.
    assert [n for n, off, _ in alone if off] == [3, 4, 6, 7]
    assert marks({3, 4}) == alone  # inputs on off-cadence steps: the same steps
    # An input at step 2 holds p; step 2 counts as executed but carried no
    # prefill, so the cadence does not restart: step 3 admits p.
    early = marks({2})
    assert early[1] == (2, True, [("d", 1)]) and early[2] == (3, False, [("d", 1), ("p", 3)])
    assert [n for n, off, _ in early if off] == [2, 4, 5, 7, 8]
    # An input on the on-cadence step 5 holds p's chunk one step more.
    late = marks({5})
    assert late[4] == (5, True, [("d", 1)]) and late[5] == (6, False, [("d", 1), ("p", 3)])
    assert [n for n, off, _ in late if off] == [3, 4, 5, 7, 8]


def _model_trace(path, cfg: Config, reqs: list[Request], inputs: set[int]) -> None:
    """The reference's own trace with `inputs` as the engine core's throttle."""
    s = Scheduler(cfg, make_gate(cfg.policy))
    held = None
    with TraceWriter(path, cfg, "lora-sched reference") as w:
        step = 0
        todo = sorted(reqs, key=lambda r: r.arrival)
        while todo or s.has_work():
            step += 1
            for r in [r for r in todo if r.arrival == step]:
                s.add(r)
                w.arrive(r, step)
                todo.remove(r)
            if not (s.state.waiting or s.state.running):
                if s.has_work():
                    last = s.drain()
                    if last is not None:
                        w.step(last)
                    held = None
                continue
            rec = s.step(step, throttle=step in inputs)
            if cfg.async_scheduling:
                if held is not None:
                    w.step(held)
                held = rec
            else:
                w.step(rec)
        if cfg.async_scheduling:
            s.drain()
            if held is not None:
                w.step(held)


@pytest.mark.parametrize("release", list(releases.RELEASES))
@pytest.mark.parametrize("interval", [1, 2])
def test_a_trace_with_throttle_inputs_replays_on_every_release(release, interval, tmp_path, monkeypatch):
    rng = random.Random(7)
    reqs = [Request("d0", 1, 2, 30, 1), Request("d1", 2, 1, 25, 1),
            *(Request(f"p{i}", rng.randint(0, 3), rng.randint(2, 20), rng.randint(1, 6), rng.randint(2, 25))
              for i in range(8))]
    for async_scheduling in (False, True):
        cfg = Config(max_num_batched_tokens=8, max_num_seqs=6, max_loras=2, prefill_schedule_interval=interval,
                     async_scheduling=async_scheduling, vllm=release)
        path = tmp_path / f"model-{async_scheduling}.jsonl"
        _model_trace(path, cfg, reqs, {n for n in range(1, 80) if rng.random() < 0.5})
        trace = read_trace(path)
        assert trace.config.vllm == release and any(s.throttle for s in trace.steps())
        out = replay(trace, "vllm")
        assert out.ok, out.describe()
        with monkeypatch.context() as m:
            _ignoring_input(m)
            assert not replay(trace, "vllm").ok


# ---- vLLM in-process ------------------------------------------------------------

def _throttling(base: type, density: float, seed: int) -> type:
    """`base` with the engine core's input: `throttle_prefills=True` on a
    random `density` of its `schedule()` calls (ORed with the harness's own)."""
    rng = random.Random(seed)

    class Throttled(base):
        def schedule(self, throttle_prefills: bool = False):
            return super().schedule(throttle_prefills=throttle_prefills or rng.random() < density)

    return Throttled


def _decode_then_prefill(rng: random.Random) -> tuple[Config, Workload]:
    """Long decodes running early, prefills (some longer than the budget:
    chunked) arriving while they decode, adapters over max_loras."""
    budget = rng.choice([8, 16, 32])
    decoders = [Request(f"d{i}", rng.randint(0, 3), rng.randint(1, 4), rng.randint(15, 40), 1 + i)
                for i in range(rng.randint(1, 3))]
    prefills = [Request(f"p{i}", rng.randint(0, 4), rng.randint(2, 3 * budget), rng.randint(1, 8),
                        rng.randint(2, 30), rng.choice([0, 0, 1])) for i in range(rng.randint(3, 8))]
    cfg = Config(max_num_batched_tokens=budget, max_num_seqs=rng.choice([3, 4, 8]), max_loras=rng.randint(1, 2),
                 long_prefill_token_threshold=rng.choice([0, 0, 4]), queue=rng.choice(["fcfs", "priority"]),
                 async_scheduling=rng.random() < 0.4)
    return cfg, Workload(decoders + prefills)


def _record(cfg: Config, wl: Workload, path, density: float, seed: int):
    from lora_sched.conformance.inprocess import _scheduler_classes, run_workload

    sync_cls, async_cls = _scheduler_classes("vllm")
    cls = _throttling(async_cls if cfg.async_scheduling else sync_cls, density, seed)
    run_workload(cfg, wl, path, policy="vllm", scheduler_class=cls)
    trace = read_trace(path)
    from lora_sched.recorder import installed_release

    assert trace.config.vllm == installed_release()
    return trace


@pytest.mark.vllm
@pytest.mark.parametrize("interval", INTERVALS)
def test_vllm_random_throttle_inputs_replay(interval, tmp_path, monkeypatch):
    """DP-style random throttle patterns on workloads where prefills arrive
    while others decode: vLLM's trace replays with no divergence; a reference
    ignoring the input diverges on most, and with interval 1 (the throttle is
    the input alone) so does the trace with its marks dropped."""
    ran = ignored = stripped = 0
    for seed in SEEDS:
        for density in (0.3, 0.7):
            rng = random.Random(1000 * interval + 10 * seed + int(10 * density))
            cfg, wl = _decode_then_prefill(rng)
            cfg = replace(cfg, prefill_schedule_interval=interval)
            path = tmp_path / f"s{seed}-{density}.jsonl"
            trace = _record(cfg, wl, path, density, seed)
            out = replay(trace, "vllm")
            assert out.ok, f"seed {seed} density {density} {cfg}\n{out.describe()}"
            assert any(s.throttle for s in trace.steps())
            ran += 1
            with monkeypatch.context() as m:
                _ignoring_input(m)
                ignored += not replay(trace, "vllm").ok
            if interval == 1:
                plain = tmp_path / "stripped.jsonl"
                plain.write_text(path.read_text().replace(',"throttle":true', ""))
                bad = replay(read_trace(plain), "vllm")
                # No marks left to compare: what diverges is what vLLM scheduled.
                assert bad.ok or bad.divergence.field != "throttle", bad.describe()
                stripped += not bad.ok
    assert ignored >= ran - 2, (ignored, ran)
    if interval == 1:
        assert stripped >= ran - 2, (stripped, ran)


@pytest.mark.vllm
def test_vllm_random_cases_with_throttle_inputs_replay(tmp_path):
    """The in-process conformance cases (KV preemption, priorities, aborts,
    async, intervals 1-3) with a random throttle input on top replay."""
    for seed in range(N_RANDOM):
        rng = random.Random(50_000 + seed)
        cfg, wl = random_case(rng)
        path = tmp_path / "case.jsonl"
        trace = _record(cfg, wl, path, rng.choice([0.2, 0.5, 0.8]), seed)
        out = replay(trace, "vllm")
        assert out.ok, f"seed {seed} {cfg}\n{out.describe()}"
