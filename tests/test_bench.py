"""Fast checks of the simulated benchmark (no timing assertions: speed is reported, not tested)."""

from __future__ import annotations

import math

import pytest

from bench.costmodel import DEFAULT, CostModel
from bench.simulate import FastBlock, result_block, seed_config, seed_requests, simulate_policy
from bench.sweeps import starvation_sweep


@pytest.fixture(scope="module")
def small_runs():
    reqs = seed_requests(40, output=12)
    return reqs, {p: simulate_policy(seed_config(), reqs, p, DEFAULT) for p in ("blocking", "vllm", "fair")}


def test_seed_requests_match_the_seed_totals() -> None:
    reqs = seed_requests()
    assert len(reqs) == 500
    assert sum(r.prompt_tokens for r in reqs) == 124520


def test_result_block_is_consistent_with_the_timeline(small_runs) -> None:
    reqs, runs = small_runs
    for run in runs.values():
        b, tl = run.block, run.timeline
        assert b["completed"] == len(reqs)
        assert b["duration_s"] > 0
        # Independently from the per-request timeline: last token minus first arrival.
        end = max(ts[-1] for ts in tl.tokens.values())
        start = min(tl.arrival.values())
        assert b["duration_s"] == pytest.approx(end - start)
        assert b["request_throughput"] == pytest.approx(len(reqs) / (end - start))
        assert b["total_output_tokens"] == sum(r.max_tokens for r in reqs)
        assert b["output_throughput"] == pytest.approx(b["total_output_tokens"] / (end - start))
        # The step times add up to the last step's end.
        assert tl.step_end[-1] == pytest.approx(sum(DEFAULT.step_time(f) for f in tl.features))
        assert b["median_ttft_ms"] <= b["p99_ttft_ms"]
        assert b["mean_tpot_ms"] > 0 and not math.isnan(b["mean_itl_ms"])


def test_fast_block_equals_result_block(small_runs) -> None:
    reqs, runs = small_runs
    prompts = {r.id: r.prompt_tokens for r in reqs}
    model = CostModel(0.01, 2e-4, 3e-5, 1e-3)
    from bench.simulate import apply_model
    tl = apply_model(runs["vllm"].timeline, model)
    fast, slow = FastBlock(tl, prompts)(model), result_block(tl, prompts)
    for key, value in slow.items():
        assert fast[key] == pytest.approx(value)


def test_blocking_is_slower_than_vllm(small_runs) -> None:
    _, runs = small_runs
    assert runs["blocking"].block["request_throughput"] < runs["vllm"].block["request_throughput"]


def test_starvation_sweep_vllm_grows_and_fair_stays_bounded() -> None:
    rows = starvation_sweep((10, 40, 160))
    vllm = [r["vllm"] for r in rows]
    assert vllm == sorted(vllm) and vllm[-1] > vllm[0] + 100
    for r in rows:
        assert r["fair"] is not None and r["fair"] <= r["bound"]
        assert r["fair_max"] <= r["bound"]


# ---- live mode: the pure parts (no server) ---------------------------------------------------


def test_live_block_follows_benchmark_serving_definitions() -> None:
    from bench.live import RequestTimeline, live_block

    a = RequestTimeline("a", 1, 10, sent=100.0, chunks=[100.5, 100.7, 101.0], output_tokens=3)
    b = RequestTimeline("b", 2, 20, sent=100.0, chunks=[101.0, 102.0], output_tokens=2)
    bad = RequestTimeline("c", 3, 30, sent=100.0, error="boom")
    blk = live_block([a, b, bad])
    assert blk["completed"] == 2 and blk["failed"] == 1
    assert blk["duration_s"] == pytest.approx(2.0)  # first send to last chunk
    assert blk["total_input_tokens"] == 30 and blk["total_output_tokens"] == 5
    assert blk["request_throughput"] == pytest.approx(1.0)
    assert blk["total_token_throughput"] == pytest.approx(17.5)
    assert blk["mean_ttft_ms"] == pytest.approx(750.0)  # (0.5 + 1.0) / 2
    assert blk["mean_tpot_ms"] == pytest.approx((250.0 + 1000.0) / 2)  # per request, then averaged
    assert blk["mean_itl_ms"] == pytest.approx((200.0 + 300.0 + 1000.0) / 3)  # gaps pooled
    assert blk["median_itl_ms"] == pytest.approx(300.0)


def test_live_adapter_waits_and_requests() -> None:
    from bench.live import MAX_MODEL_LEN, adapter_waits, live_requests
    from spec.request import Request

    reqs = {"x": Request("x", 1, 8, 4, 1), "y": Request("y", 1, 8, 4, 3), "z": Request("z", 2, 8, 4, 2)}
    waits = adapter_waits(reqs, {"x": 1, "y": 9, "z": 5})
    assert waits[1] == {"requests": 2, "mean_wait_steps": 3.0, "max_wait_steps": 6}
    assert waits[2]["max_wait_steps"] == 3
    live = live_requests(64, output=16, input_mean=40)
    assert len(live) == 64 and {r.arrival for r in live} == {1}
    assert all(r.prompt_tokens + r.max_tokens <= MAX_MODEL_LEN for r in live)
    assert sorted({r.adapter for r in live}) == list(range(1, 9))


def test_live_trace_summary_counts_the_fair_guard(tmp_path) -> None:
    from bench.live import trace_summary
    from policy.driver import run
    from policy.workloads import starvation_stream

    cfg, wl = starvation_stream(40)
    path = tmp_path / "fair.jsonl"
    res = run(cfg, wl, policy="fair", trace_path=str(path))
    summary = trace_summary(path)
    assert summary["steps"] == len(res.records)
    assert summary["max_wait_steps"] == max(res.waits().values())
    assert summary["guard_steps"] > 0 and summary["starving_steps"] >= summary["guard_steps"]
    assert summary["adapters"][3]["max_wait_steps"] == res.waits()["victim-a3"]
