"""The catalogue `examples/`: each class's defect is found, shrunk and written; nothing else is found.

For every entry of `examples/manifest.json` a short campaign (`fuzz
--scheduler-cls`, the entry's `--expect` flags, seed and count, one Ray
worker) runs on the class; the manifest must hold both ways: every expected
finding found (an item with alternatives by any of them), no finding it does
not list. Each campaign finding is shrunk and written with its reproducer,
trace and view, and a reproducer passes when run as pytest would. The
catalogue benchmark (`python -m examples.benchmark`) runs with tiny
limits and prints its table. Longer campaigns
(2 minutes an entry by default) are the benchmark's.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported, as fuzz/__init__.py does

import pytest  # noqa: E402

from examples.benchmark import judge, load_manifest, main, run_entry  # noqa: E402

pytestmark = pytest.mark.vllm  # and the fuzz extra (ray)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENTRIES = load_manifest(EXAMPLES)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    yield
    ray.shutdown()


def test_the_manifest_lists_each_kind_of_example():
    names = {e.name for e in ENTRIES}
    assert {"admitted_only_cap", "blocking_scan", "shortest_prompt_first", "adapter_affinity", "step_counter",
            "fair"} <= names
    assert sum(e.clean for e in ENTRIES) >= 2 and all(Path(e.cls.split(":")[0]).is_file() for e in ENTRIES
                                                      if ":" in e.cls)


def test_judge_holds_the_manifest_both_ways():
    e = next(e for e in ENTRIES if e.name == "admitted_only_cap")
    assert judge(e, ["property:batch_lora_cap:A", "property:running_lora_cap:A"]).ok
    assert judge(e, ["crash:AssertionError@scheduler.py:schedule:A"]).ok  # one finding may stand for both items
    v = judge(e, ["property:batch_lora_cap:A", "property:capacity:A"])
    assert v.missing == [e.findings[1]] and v.unexpected == ["property:capacity:A"]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_each_entry_is_found_as_the_manifest_says(ray_session, entry, tmp_path):
    res = run_entry(entry, tmp_path, count=entry.count)
    v = res.verdict
    assert v.ok, (f"missing {v.missing}, unexpected {v.unexpected}",
                  [(f.signature, f.message[:200]) for f in res.report.findings])
    assert res.report.workloads == entry.count
    for f in res.report.findings:
        assert f.status in ("shrunk", "growth"), (f.signature, f.status)
        for key in ("trace", "test", "view"):
            assert (tmp_path / f.files[key]).is_file(), f.files
        if f.kind != "growth":
            assert f.minimal is not None and f.minimal["scheduler_cls"] == entry.cls
            assert len(f.minimal["requests"]) <= 4, f.minimal
    first = next(iter(res.report.findings), None)
    if first is not None:  # its reproducer passes as pytest would run it
        path = tmp_path / first.files["test"]
        spec = importlib.util.spec_from_file_location(f"repro_{entry.name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        next(getattr(mod, n) for n in dir(mod) if n.startswith("test_"))()


def test_the_catalogue_benchmark_prints_its_table(ray_session, tmp_path, capsys):
    rc = main([str(EXAMPLES), "--minutes", "0.05", "--out", str(tmp_path), "--only", "blocking_scan",
               "--only", "step_counter"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "blocking_scan          property:no_hol_blocking" in out and "step_counter           (clean)" in out
    assert "2/2 entries as the manifest says" in out
