"""`lora-sched check` in one pass: the same verdicts as the whole-trace check, in memory that follows the live requests.

- `check_file` (what the command runs: read, judge and replay line by
  line) gives exactly the report of `check_trace` (the trace read whole) on
  arbitrary well-formed traces, plain, gzip-compressed, or split into
  rotated segments in a directory;
- the observer and the replay keep only live requests: on a long simulated
  trace neither ever holds more than the peak of requests present at once;
- a gzip trace cut short by a crash is read up to the cut; a segment with a
  different header is rejected naming the segment;
- long checks print progress; the simulator without records
  (`keep_records=False`) summarises the same waits as with them.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lora_sched.policy import check as check_mod
from lora_sched.policy.check import TraceCheck, check_file, check_trace, format_report, verdicts
from lora_sched.policy.driver import Workload, run
from lora_sched.policy.replay import replay
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import peak_present
from lora_sched.spec.trace import Trace, TraceError, TraceReader, TraceWriter, read_trace
from test_bad_input import arbitrary_traces


def write_lines(path: Path, lines: list) -> Path:
    text = "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def split(path: Path, lines: list, parts: int) -> Path:
    """The trace as a directory of `parts` segments, each starting with the header (as the rotating writer does)."""
    path.mkdir()
    head, body = lines[0], lines[1:]
    size = max(1, -(-len(body) // parts))
    for i in range(max(1, parts)):
        write_lines(path / f"trace-{i + 1:06d}.jsonl{'.gz' if i % 2 else ''}", [head, *body[i * size:(i + 1) * size]])
    return path


def same_report(a, b, *, lines: bool = True) -> None:
    """Equal reports but for the path; `lines=False`: and the line numbers,
    which count within its segment in a directory of segments."""
    va, vb = verdicts(a), verdicts(b)
    va.pop("trace"), vb.pop("trace")
    ta, tb = format_report(a).split("\n", 1)[1], format_report(b).split("\n", 1)[1]
    if not lines:
        def strip(v):
            return json.loads(re.sub(r'"line": \d+', '"line": 0', json.dumps(v)))
        va, vb = strip(va), strip(vb)
        ta, tb = (re.sub(r"line \d+", "line L", t) for t in (ta, tb))
    assert va == vb
    assert ta == tb


@settings(max_examples=60, deadline=None)
@given(arbitrary_traces(), st.sampled_from([None, "blocking", "vllm", "fair"]), st.sampled_from(["plain", "gz", "dir"]),
       st.integers(1, 4))
def test_streaming_check_reports_what_the_whole_trace_check_does(tmp_path_factory, lines, policy, form, parts):
    d = tmp_path_factory.mktemp("s")
    whole = check_trace(str(write_lines(d / "t.jsonl", lines)), policy)
    if form == "plain":
        path = d / "t.jsonl"
    elif form == "gz":
        path = write_lines(d / "t.jsonl.gz", lines)
    else:
        path = split(d / "segments", lines, parts)
    streamed = check_file(str(path), policy)
    same_report(whole, streamed, lines=form != "dir")
    assert streamed.worst_wait == whole.worst_wait


def serving_trace(path: Path, n: int = 1500, *, policy: str = "vllm") -> Config:
    rng = random.Random(7)
    reqs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(0.5)
        reqs.append(Request(f"r{i}", rng.choice([0, 1, 2, 3, 4, 5, 6]), rng.randint(4, 80), rng.randint(2, 12), int(t)))
    cfg = Config(max_loras=2, max_num_seqs=8, max_num_batched_tokens=128, policy=policy)
    run(cfg, Workload(reqs), trace_path=path)
    return cfg


@pytest.mark.parametrize("policy", ["vllm", "fair", "vtc"])
def test_memory_follows_the_live_requests(tmp_path, policy):
    """Fed a 1500-request trace, the observer's live set and the replay's
    scheduler state never exceed the requests present at a step (plus those
    retired in the last step, kept one step for the divergence report)."""
    path = tmp_path / "t.jsonl"
    serving_trace(path, policy=policy)
    reader = TraceReader(path)
    check = TraceCheck(Trace(reader.path, reader.config, reader.source, reader.header), policy, keep_waits=False)
    most_live = most_replay = most_present = 0
    for ev in reader:
        check.feed(ev)
        if hasattr(ev, "rec"):
            most_present = max(most_present, peak_present((ev.rec,)))
            most_live = max(most_live, len(check.obs.reqs))
            most_replay = max(most_replay, len(check.replayer.sched.state.reqs))
    report = check.finish(reader.complete, lambda step: None)
    assert report.replay is not None and report.replay.ok, format_report(report)  # vtc breaks no_hol_blocking
    assert report.requests == 1500 and most_present < 1500 // 4
    assert most_live <= most_present + 1  # + an arrival of the next step read ahead
    assert most_replay <= 2 * most_present + 1


def test_gzip_cut_short_is_read_up_to_the_cut(tmp_path):
    path = tmp_path / "t.jsonl"
    serving_trace(path, 300)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes())[:-2000])
    with pytest.raises(TraceError, match="t.jsonl.gz"):
        read_trace(gz)
    t = read_trace(gz, allow_truncated_tail=True)
    assert not t.complete and 0 < len(t.steps()) < len(read_trace(path).steps())
    report = check_file(str(gz), "vllm")
    assert not report.trace.complete and report.replay is not None and report.replay.ok


def test_rotating_writer_segments_check_as_one_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    cfg = serving_trace(path, 400)
    whole = read_trace(path)
    w = TraceWriter(tmp_path / "rot", cfg, whole.source, max_bytes=4000, flush_every=16)
    for ev in whole.events:
        if hasattr(ev, "req"):
            w.arrive(ev.req, ev.step)
        elif hasattr(ev, "rec"):
            w.step(ev.rec)
        else:
            w.abort(ev.id, ev.step)
    w.close()
    files = sorted((tmp_path / "rot").iterdir())
    assert len(files) > 3 and all(f.name.endswith(".jsonl.gz") for f in files)
    same_report(check_file(str(path), "vllm"), check_file(str(tmp_path / "rot"), "vllm"), lines=False)
    # A segment from another trace is refused, naming that segment.
    other = json.loads(gzip.decompress(files[1].read_bytes()).decode().splitlines()[0])
    other["config"]["max_loras"] = 3
    body = gzip.decompress(files[1].read_bytes()).decode().splitlines()[1:]
    files[1].write_bytes(gzip.compress(("\n".join([json.dumps(other), *body]) + "\n").encode()))
    with pytest.raises(TraceError, match=f"{files[1].name}:1: a segment must start with the trace's header"):
        check_file(str(tmp_path / "rot"))


def test_long_checks_print_progress(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    serving_trace(path, 300)
    monkeypatch.setattr(check_mod, "PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    check_file(str(path), "vllm", progress=lines.append)
    assert lines and all(ln.startswith("check: ") and "steps/s" in ln for ln in lines)


@pytest.mark.parametrize("name", ["seed", "aborts", "kv", "priority"])
@pytest.mark.parametrize("policy", ["vllm", "fair", "vtc"])
def test_simulator_without_records_summarises_the_same_run(tmp_path, name, policy):
    sc = SCENARIOS[name]
    kept = run(sc.config, sc.workload, policy=policy, trace_path=tmp_path / "a.jsonl")
    lean = run(sc.config, sc.workload, policy=policy, trace_path=tmp_path / "b.jsonl", keep_records=False)
    assert lean.records == [] and lean.steps == len(kept.records)
    assert lean.waits() == kept.waits() and lean.first_admitted() == kept.first_admitted()
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert len(lean.scheduler.state.reqs) < len(kept.scheduler.state.reqs)
    assert replay(read_trace(tmp_path / "b.jsonl"), policy).ok


@pytest.mark.parametrize("policy", ["vllm", "fair"])
def test_a_late_finish_divergence_is_reported_not_crashed(tmp_path, policy):
    """Async: a step's finishes are compared one step late, when the
    reference may have forgotten them (`forget_done`); a trace whose step
    drops its `finished` list still gets a divergence report naming them
    (it crashed with a KeyError while building the report's context)."""
    sc = SCENARIOS["aborts"]
    cfg = Config(**{**sc.config.to_dict(), "async_scheduling": True})
    path = tmp_path / "t.jsonl"
    run(cfg, sc.workload, policy="fair", trace_path=path)
    lines = path.read_text().splitlines()
    finishing = [i for i, ln in enumerate(lines) if json.loads(ln).get("kind") == "step" and json.loads(ln)["finished"]]
    assert finishing
    for i in finishing:
        obj = json.loads(lines[i])
        obj["finished"] = []
        write_lines(tmp_path / "m.jsonl", [*lines[:i], json.dumps(obj), *lines[i + 1:]])
        report = check_file(str(tmp_path / "m.jsonl"), policy)
        assert report.replay is not None and not report.replay.ok, format_report(report)
        assert "finished" in str(report.replay.divergence)
