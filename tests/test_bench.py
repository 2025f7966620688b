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
