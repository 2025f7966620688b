"""Fast checks of the simulated benchmark (no timing assertions: speed is reported, not tested)."""

from __future__ import annotations

import math

import pytest
from lora_sched.bench.simulate import seed_config, seed_requests, simulate_policy
from lora_sched.bench.sweeps import starvation_sweep
from lora_sched.policy.costmodel import DEFAULT


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


def test_live_adapter_waits() -> None:
    from lora_sched.bench.live import adapter_waits
    from lora_sched.spec.request import Request

    reqs = {"x": Request("x", 1, 8, 4, 1), "y": Request("y", 1, 8, 4, 3), "z": Request("z", 2, 8, 4, 2)}
    waits = adapter_waits(reqs, {"x": 1, "y": 9, "z": 5})
    assert waits[1] == {"requests": 2, "mean_wait_steps": 3.0, "max_wait_steps": 6}
    assert waits[2]["max_wait_steps"] == 3


def test_live_table_reads_vllm_result_keys() -> None:
    """The live columns are vLLM's `--save-result` keys (`duration` renamed to the table's
    `duration_s`); what the table has no row for is dropped."""
    from lora_sched.bench.live import result_block
    from lora_sched.bench.table import ROWS, table

    result = {"duration": 12.5, "completed": 200, "failed": 0, "total_input_tokens": 12000,
              "total_output_tokens": 6400, "request_throughput": 16.0, "output_throughput": 512.0,
              "total_token_throughput": 1472.0, "mean_ttft_ms": 900.0, "median_ttft_ms": 850.0,
              "p99_ttft_ms": 2000.0, "mean_tpot_ms": 30.0, "median_tpot_ms": 29.0, "p99_tpot_ms": 60.0,
              "mean_itl_ms": 31.0, "median_itl_ms": 28.0, "p99_itl_ms": 70.0, "ttfts": [0.9]}
    block = result_block(result)
    assert block["duration_s"] == 12.5 and "ttfts" not in block
    assert {key for _, key, _ in ROWS} <= set(block)
    text = table({"live vllm": block})
    assert "Request throughput (req/s)" in text and "16.00" in text and "12.50" in text


def test_live_printed_block_is_cut_from_the_client_output() -> None:
    from lora_sched.bench.live import printed_block

    out = ("Namespace(...)\nStarting main benchmark run...\n"
           "============ Serving Benchmark Result ============\n"
           "Successful requests:                     200\n"
           "==================================================\nsaved\n")
    block = printed_block(out)
    assert block.splitlines()[0].startswith("====") and block.splitlines()[-1] == "=" * 50
    assert "Successful requests" in block and "saved" not in block
    assert printed_block("no block") == ""


@pytest.mark.vllm
def test_live_client_command_parses_with_vllms_own_parser(tmp_path) -> None:
    """What `bench --live` passes to `vllm bench serve` is accepted by vLLM's own
    parser and means what the bench says: random dataset, rate inf, LoRA
    modules, ignore EOS, the saved result."""
    from lora_sched.bench.live import client_command
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cmd = client_command(8123, "/m", ["lora1", "lora2"], prompts=10, input_len=60, output_len=32,
                         result_dir=tmp_path, result_file="r.json")
    assert cmd[1:3] == ["-m", "lora_sched.bench.vllm_client"]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    a = parser.parse_args(cmd[3:])
    assert (a.dataset_name, a.num_prompts, a.random_input_len, a.random_output_len) == ("random", 10, 60, 32)
    assert a.request_rate == float("inf") and a.ignore_eos and a.save_result and a.save_detailed  # ttfts, errors
    assert a.lora_modules == ["lora1", "lora2"] and a.base_url == "http://127.0.0.1:8123"
    assert (a.result_dir, a.result_filename) == (str(tmp_path), "r.json")


def test_live_trace_summary_counts_the_fair_guard(tmp_path) -> None:
    from lora_sched.bench.live import trace_summary
    from lora_sched.policy.driver import run
    from lora_sched.policy.workloads import starvation_stream

    cfg, wl = starvation_stream(40)
    path = tmp_path / "fair.jsonl"
    res = run(cfg, wl, policy="fair", trace_path=str(path))
    summary = trace_summary(path)
    assert summary["steps"] == len(res.records)
    assert summary["max_wait_steps"] == max(res.waits().values())
    assert summary["guard_steps"] > 0 and summary["starving_steps"] >= summary["guard_steps"]
    assert summary["adapters"][3]["max_wait_steps"] == res.waits()["victim-a3"]
    # the rules compared on the trace's own arrivals: vllm run on the same requests and steps
    vllm = run(cfg, wl, policy="vllm")
    assert summary["busy_steps"] == sum(1 for rec in res.records if rec.scheduled)
    assert summary["vllm_busy_steps"] == sum(1 for rec in vllm.records if rec.scheduled)


def test_live_trace_summary_replays_vllm_on_the_trace_arrivals(tmp_path) -> None:
    """`vllm_busy_steps` is vllm's, not the traced policy's: on the drainer's
    worst family the drainer needs more busy steps than vllm on the same
    arrivals (a summary that re-ran the trace's own policy would give equal
    counts)."""
    from dataclasses import replace

    from lora_sched.bench.live import trace_summary
    from lora_sched.policy.driver import Workload, run

    from experiments.families import FAMILY_DIR, load

    _, cfg, reqs, _ = load(FAMILY_DIR / "adv-drainer-throughput.json")
    path = tmp_path / "drainer.jsonl"
    run(replace(cfg, policy="drainer"), Workload(reqs), trace_path=str(path))
    summary = trace_summary(path)
    vllm = run(replace(cfg, policy="vllm"), Workload(reqs))
    assert summary["vllm_busy_steps"] == sum(1 for rec in vllm.records if rec.scheduled) < summary["busy_steps"]
    from lora_sched.bench.popularity import tail_head_ratio

    adapter_of = {r.id: r.adapter for r in reqs}
    drained = run(replace(cfg, policy="drainer"), Workload(reqs))
    assert summary["tail_head"] == tail_head_ratio(drained.waits(), adapter_of, cfg.max_loras)
    assert summary["vllm_tail_head"] == tail_head_ratio(vllm.waits(), adapter_of, cfg.max_loras)


def test_bench_vllm_choice_reaches_every_simulated_run() -> None:
    """`lora-sched bench --vllm R` (default the newest release) makes every
    `policy.driver.run` inside follow R, whatever config a bench built; an
    unknown release is refused naming the supported ones; the override ends
    with the command."""
    import argparse

    from lora_sched.bench.cli import add_arguments
    from lora_sched.policy.driver import Workload, release, run
    from lora_sched.spec import releases
    from lora_sched.spec.config import Config
    from lora_sched.spec.request import Request

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args([]).vllm == releases.NEWEST
    wl = Workload([Request("r0", 1, 4, 2, 1)])
    cfg = Config(vllm="0.32")
    with release("0.33"):
        assert run(cfg, wl).config.vllm == "0.33"
    assert run(cfg, wl).config.vllm == "0.32"
    with pytest.raises(releases.UnknownRelease, match="0.32"):
        with release("0.99"):
            pass
