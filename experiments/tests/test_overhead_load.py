"""`python -m experiments.overhead_load`: the overhead benchmark under other loads, and its profile."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.vllm  # drives vLLM's own scheduler


def test_profile_prints_the_top_functions(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.overhead_load import main

    assert main(["--quick", "--profile", "fair", "--steps", "2", "--cell", "100,8,4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== FairScheduler on W=100 A=8 max_loras=4: 2 steps")
    assert "Ordered by: cumulative time" in out and "schedule" in out


def test_the_priority_queue_is_vllms_heap(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--queue priority` builds every class on vLLM's priority heap
    (`--scheduling-policy priority`), says so in the table and the results,
    and fair passes requests over there too (its scan's shortcut is not
    FCFS-only)."""
    from lora_sched.bench.overhead import Cell, entries
    from vllm.v1.core.sched.request_queue import PriorityRequestQueue

    from experiments.overhead_load import Load, build, main

    out = tmp_path / "o.json"
    assert main(["--quick", "--waiting", "100", "--overhead-policies", "fair",
                 "--queue", "priority", "--out", str(out)]) == 0
    assert ", priority queue ==" in capsys.readouterr().out
    assert json.loads(out.read_text())["config"]["queue"] == "priority"
    fair = next(e for e in entries() if e.name == "FairScheduler")
    runner = build(fair, Cell(100, 8, 2), starvation_steps=2, seed=0, load=Load(queue="priority"))
    assert isinstance(runner.sched.waiting, PriorityRequestQueue)
    for _ in range(12):
        runner.refill()
        runner.step(measured=False)
    assert runner.sched.passed > 0


def test_base_model_share_and_kv_shape_the_load(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--base-share` sends that share of the backlog to the base
    model, `--kv` 0.3 makes stock vLLM preempt, both are said in
    the table and the results, and out-of-range values are refused (exit 2)."""
    from lora_sched.bench.overhead import Cell, entries

    from experiments.overhead_load import Load, build, main

    out = tmp_path / "o.json"
    assert main(["--quick", "--waiting", "100", "--overhead-policies", "fair",
                 "--base-share", "0.3", "--kv", "0.3", "--out", str(out)]) == 0
    assert ", base model 30%, KV 30% ==" in capsys.readouterr().out
    config = json.loads(out.read_text())["config"]
    assert (config["base_share"], config["kv_fraction"]) == (0.3, 0.3)
    stock = next(e for e in entries() if e.name == "Scheduler")
    runner = build(stock, Cell(100, 8, 4), starvation_steps=2, seed=0, load=Load(base_share=0.3, kv_fraction=0.3))
    base = sum(1 for a in list(runner.adapter_of.values())[256:] if a == 0)
    assert 15 <= base <= 45, base  # of the 100 drawn for the backlog
    for _ in range(120):  # the batch's staggered lengths grow into the pool's limit
        runner.refill()
        runner.step(measured=False)
    assert any(r.num_preemptions for r in runner.sched.requests.values()), "a KV pool at 30% never preempted"
    for bad in (["--base-share", "1"], ["--kv", "0"]):
        assert main(["--quick", *bad]) == 2
