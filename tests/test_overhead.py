"""`bench.overhead` (`lora-sched bench --overhead`): the structure of its results, never its times.

The quick grid runs once per module (about half a minute on 2 cores); the
tests then check that every class of `lora_sched.scheduler.CLASSES` and both
stock bases were measured, that every ratio is a positive finite number, that
the schedulers admitted requests, and that every measured step really started
with the cell's backlog: W requests waiting, 256 + W in the scheduler. A
harness that lets the queue drain fails here (`test_a_drained_queue_fails`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

pytestmark = pytest.mark.vllm  # drives vLLM's own scheduler


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    from lora_sched.cli import main

    out = tmp_path_factory.mktemp("overhead") / "o.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["bench", "--overhead", "--quick", "--out", str(out)]) == 0
    return json.loads(out.read_text()), buf.getvalue()


def _check_backlog(report: dict[str, Any]) -> None:
    """Every measured step of every class began with W waiting and 256 + W in the scheduler."""
    running = report["config"]["running"]
    for cell in report["cells"]:
        w = cell["waiting"]
        for name, c in cell["classes"].items():
            assert c["waiting"]["min"] >= w, f"{name}: a measured step began with {c['waiting']['min']} waiting < W={w}"
            assert c["in_system"]["min"] == c["in_system"]["max"] == running + w, \
                f"{name}: {c['in_system']} requests in the scheduler, not {running} + W={w}"


def test_every_class_is_measured_in_every_cell(quick: tuple[dict[str, Any], str]) -> None:
    from lora_sched.scheduler import CLASSES

    report, _ = quick
    expected = {"Scheduler", "AsyncScheduler"} | {cls.__name__ for pair in CLASSES.values() for cls in pair}
    assert {c["class"] for c in report["classes"]} == expected
    assert [(c["waiting"], c["adapters"], c["max_loras"]) for c in report["cells"]] == [(0, 8, 4), (100, 8, 4)]
    steps = report["config"]["steps"]
    for cell in report["cells"]:
        assert set(cell["classes"]) == expected
        for name, c in cell["classes"].items():
            assert c["steps"] == steps
            assert c["base"] == ("AsyncScheduler" if c["async"] else "Scheduler"), name
            for key in ("ms_per_step", "ratio", "schedule_ms", "update_ms"):
                assert math.isfinite(c[key]) and c[key] > 0, (name, key, c[key])
            if c["policy"] == "stock":
                assert c["ratio"] == 1.0
        assert cell["over"] == [n for n, c in cell["classes"].items()
                                if c["policy"] != "stock" and c["ratio"] > report["limit"]]


def test_the_schedulers_admit_and_finish_requests(quick: tuple[dict[str, Any], str]) -> None:
    report, _ = quick
    for cell in report["cells"]:
        for name, c in cell["classes"].items():
            assert c["admitted_warmup"] + c["admitted"] > 0, name
            if c["policy"] == "stock":  # the steady state: a request finishes and one is admitted, every step
                assert c["admitted"] >= c["steps"] and c["finished"] >= c["steps"], (name, c)
                assert c["running"]["max"] == report["config"]["running"], (name, c["running"])


def test_every_measured_step_had_the_backlog(quick: tuple[dict[str, Any], str]) -> None:
    report, _ = quick
    _check_backlog(report)
    assert max(c["waiting"]["min"] for cell in report["cells"] for c in cell["classes"].values()) >= 100


def test_a_drained_queue_fails() -> None:
    """Without the refill the backlog drains during the measured steps, and the check catches it."""
    from lora_sched.bench.overhead import Cell, run_grid

    report = run_grid([Cell(100, 8, 4)], steps=3, warmup=6, starvation_steps=2, broken_refill=True)
    with pytest.raises(AssertionError, match="waiting < W=100"):
        _check_backlog(report)


def test_the_table_lists_every_class_and_flags_none_silently(quick: tuple[dict[str, Any], str]) -> None:
    report, printed = quick
    lines = printed.splitlines()
    assert lines[0].startswith("== Scheduler overhead: vLLM ")
    head = lines[1].split()
    assert head[:7] == ["W", "A", "loras", "sync", "ms", "async", "ms"]
    for c in report["classes"]:
        if c["policy"] != "stock":
            short = c["class"].removesuffix("Scheduler").removeprefix("Async") + ("/a" if c["async"] else "/s")
            assert short in head, short
    rows = lines[2:2 + len(report["cells"])]
    for row, cell in zip(rows, report["cells"], strict=True):
        assert row.count("*") == len(cell["over"]) + len(cell["over_cpu"]), (row, cell["over"], cell["over_cpu"])
        for c in cell["classes"].values():
            assert c["cpu_ms_per_step"] > 0 and c["cpu_ms_per_step"] <= c["ms_per_step"] * 1.5  # a thread's CPU time
    assert "over 1.2x" in lines[2 + len(report["cells"])]


def test_settings_reach_the_classes_as_a_server_passes_them() -> None:
    """starvation_steps goes in as `--additional-config '{"lora_sched": {...}}'` puts it, and every class reads it."""
    from lora_sched.bench.overhead import Cell, build, entries

    readers = []
    for entry in entries():
        if entry.policy == "stock":
            continue
        sched = build(entry, Cell(0, 8, 4), starvation_steps=3, seed=0).sched
        assert sched.vllm_config.additional_config == {"lora_sched": {"starvation_steps": 3}}, entry.name
        if hasattr(sched, "starvation_steps"):  # `blocking` has no setting
            assert sched.starvation_steps == 3, entry.name
            readers.append(entry.policy)
    assert readers.count("fair") == 2, readers


def test_overhead_policies_narrow_the_classes(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--overhead-policies fair` times stock's classes and fair's only; an
    unknown policy is refused with exit 2, naming the shipped ones."""
    from lora_sched.bench.overhead import cli as main

    out = tmp_path / "o.json"
    assert main(["--quick", "--waiting", "100", "--overhead-policies", "fair",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {c["class"] for c in report["classes"]} == {"Scheduler", "AsyncScheduler", "FairScheduler",
                                                        "AsyncFairScheduler"}
    capsys.readouterr()
    assert main(["--quick", "--overhead-policies", "nope"]) == 2
    assert "--overhead-policies: nope not shipped" in capsys.readouterr().out
