"""Bad input gets a clear error; a valid trace that breaks a property gets a verdict.

Each invalid config field raises `ConfigError` naming the field; each invalid
request field raises `RequestError` naming it; each kind of malformed trace
(structure, types, references, order) raises `TraceError` with the line that
is wrong and the reason, and `lora-sched check BAD` prints
`error: path:line: reason` and exits 2 without a traceback. A well-formed
trace whose steps break a property (budget, seats, KV, a request vanishing
from `running`, admitting one that is not waiting, ...) is read, and
`lora-sched check` names the property, the step and the line, and exits 1.
Traces may start at step 0 and jump over idle steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lora_sched.policy.check import check_trace
from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request, RequestError
from lora_sched.spec.trace import TraceError, read_trace
from verdicts import verdicts

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("field, value", [
    ("max_loras", 0), ("max_loras", "2"), ("max_loras", True),
    ("max_num_seqs", 0), ("max_num_seqs", 1.5),
    ("max_num_batched_tokens", 0), ("max_num_batched_tokens", None),
    ("long_prefill_token_threshold", -1),
    ("kv_blocks", 0), ("kv_blocks", "lots"),
    ("block_size", 0),
    ("starvation_steps", -1),
    ("chunked_prefill", 1), ("async_scheduling", "yes"),
    ("queue", "lifo"), ("policy", "random"),
])
def test_invalid_config_names_the_field(field, value):
    """Each field's invalid values are rejected, and the message names the field."""
    with pytest.raises(ConfigError, match=field):
        Config(**{field: value})


def test_config_from_dict_rejects_non_object_and_prefixes_where():
    """A trace header's config that is not an object, or has a bad field, says where."""
    with pytest.raises(ConfigError, match="config: expected an object"):
        Config.from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config: max_loras must be >= 1"):
        Config.from_dict({"max_loras": 0})


@pytest.mark.parametrize("field, value", [
    ("adapter", -1), ("adapter", "1"), ("prompt_tokens", 0), ("prompt_tokens", True),
    ("max_tokens", 0), ("arrival", -1), ("priority", 1.0),
])
def test_invalid_request_names_the_field(field, value):
    """Each request field's invalid values raise RequestError naming the request and field."""
    kw = dict(id="r1", adapter=0, prompt_tokens=4, max_tokens=2, arrival=1, priority=0)
    kw[field] = value
    with pytest.raises(RequestError, match=rf"'r1'.*{field}"):
        Request(**kw)


@pytest.mark.parametrize("rid", ["", 7, None])
def test_invalid_request_id(rid):
    """A request id must be a non-empty string."""
    with pytest.raises(RequestError, match="request id"):
        Request(rid, 0, 1, 1, 1)  # type: ignore[arg-type]


# ---- traces -----------------------------------------------------------------

HEADER = {"kind": "header", "format": "lora-sched-trace", "version": 1, "source": "test",
          "config": {"max_loras": 1, "max_num_seqs": 4, "max_num_batched_tokens": 16}}


def arrive(rid, step=1, adapter=0, prompt=4, out=2):
    return {"kind": "arrive", "step": step, "id": rid, "adapter": adapter, "prompt_tokens": prompt,
            "max_tokens": out, "priority": 0}


def stepl(step, waiting=(), running=(), scheduled=None, admitted=(), preempted=(), finished=()):
    return {"kind": "step", "step": step, "waiting": list(waiting), "running": list(running),
            "scheduled": dict(scheduled or {}), "admitted": list(admitted), "preempted": list(preempted),
            "finished": list(finished)}


# A valid trace: a (prompt 4, 2 tokens) is admitted at step 1, decodes at step 2.
GOOD = [HEADER, arrive("a"), stepl(1, waiting=["a"], scheduled={"a": 4}, admitted=["a"]),
        stepl(2, running=["a"], scheduled={"a": 1}, finished=["a"])]


def write(tmp_path: Path, lines) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return str(p)


def test_good_trace_is_accepted(tmp_path):
    """The base trace the malformed ones are derived from is valid."""
    t = read_trace(write(tmp_path, GOOD))
    assert len(t.steps()) == 2 and set(t.requests()) == {"a"}


def test_first_step_zero_and_gaps_check_like_step_one(tmp_path):
    """vLLM counts steps from 0: GOOD shifted to start at step 0, or with a
    jump over idle steps, is read and judged exactly like GOOD."""
    base = check_trace(write(tmp_path, GOOD))
    assert base.ok and not base.first
    for shift in ({1: 0, 2: 1}, {1: 0, 2: 7}, {1: 5, 2: 6}):
        lines = [GOOD[0], {**GOOD[1], "step": shift[1]}, {**GOOD[2], "step": shift[1]},
                 {**GOOD[3], "step": shift[2]}]
        report = check_trace(write(tmp_path, lines))
        assert report.ok and not report.first, shift
        assert [r.step for r in report.trace.steps()] == [shift[1], shift[2]]
        assert report.waits == base.waits


# Malformed: structure, types, references and order. The reader rejects these (exit 2).
BAD_TRACES = {
    "bad JSON": ([HEADER, arrive("a"), '{"kind": "step", "step": 1,'], 3, "bad JSON"),
    "missing header": ([arrive("a"), GOOD[2]], 1, "first line must be the header"),
    "empty file": ([], 1, "empty file"),
    "wrong format": ([{**HEADER, "format": "other"}, *GOOD[1:]], 1, "format must be"),
    "wrong version": ([{**HEADER, "version": 2}, *GOOD[1:]], 1, "unsupported version 2"),
    "bad config": ([{**HEADER, "config": {"max_loras": 0}}, *GOOD[1:]], 1, "max_loras must be >= 1"),
    "second header": ([*GOOD, HEADER], 5, "a second header"),
    "unknown kind": ([*GOOD[:2], {"kind": "teleport", "step": 1}, *GOOD[2:]], 3, "unknown event kind 'teleport'"),
    "unknown request": ([*GOOD[:2], stepl(1, waiting=["a", "zz"], scheduled={"a": 4}, admitted=["a"])], 3,
                        "unknown request 'zz'"),
    "step out of order": ([*GOOD[:3], stepl(1, running=["a"], scheduled={"a": 1}, finished=["a"])], 4,
                          "step 1 out of order: it follows step 1"),
    "negative step": ([HEADER, arrive("a", step=-1)], 2, "field 'step' must be >= 0, got -1"),
    "arrival after its step line": ([*GOOD[:3], arrive("b", step=1), *GOOD[3:]], 4,
                                    "arrival at step 1 comes after the line of step 1"),
    "abort after its step line": ([*GOOD[:3], {"kind": "abort", "step": 1, "id": "a"}], 4,
                                  "abort at step 1 comes after the line of step 1"),
    "abort before arrival": ([HEADER, arrive("a", step=3), {"kind": "abort", "step": 2, "id": "a"}], 3,
                             "before its arrival step 3"),
    "duplicate arrival": ([*GOOD[:2], arrive("a"), *GOOD[2:]], 3, "'a' arrives twice"),
    "duplicate in a list": ([*GOOD[:2], stepl(1, waiting=["a", "a"], scheduled={"a": 4}, admitted=["a"])], 3,
                            "field 'waiting' lists request 'a' twice"),
    "wrong type step": ([*GOOD[:2], {**GOOD[2], "step": "1"}], 3, "field 'step' must be an integer"),
    "integer written as 1.0": ([*GOOD[:2], {**GOOD[2], "step": 1.0}], 3, "field 'step' must be an integer"),
    "wrong type list": ([*GOOD[:2], {**GOOD[2], "waiting": "a"}], 3, "field 'waiting' must be a list"),
    "wrong type tokens": ([*GOOD[:2], {**GOOD[2], "scheduled": {"a": "4"}}], 3,
                          "scheduled tokens for 'a' must be a positive integer"),
    "wrong type throttle": ([*GOOD[:2], {**GOOD[2], "throttle": 1}], 3, "field 'throttle' must be true or false"),
    "wrong type adapter": ([HEADER, {**arrive("a"), "adapter": 1.5}, *GOOD[2:]], 2,
                           "field 'adapter' must be an integer"),
    "invalid request": ([HEADER, arrive("a", prompt=0), *GOOD[2:]], 2, "prompt_tokens must be >= 1"),
    "missing field": ([HEADER, {k: v for k, v in arrive("a").items() if k != "id"}], 2, "missing field 'id'"),
    "not an object": ([HEADER, "[1, 2]"], 2, "expected a JSON object"),
    "abort unknown": ([*GOOD[:3], {"kind": "abort", "step": 3, "id": "zz"}], 4, "abort of unknown request 'zz'"),
    "listed before arrival": ([HEADER, arrive("a", step=2), stepl(1, waiting=["a"])], 3,
                              "listed before its arrival step 2"),
}

# Well-formed, but the steps break a property: read, then judged (exit 1).
# name -> (lines, property, step, line, words of the message)
SMALL = {**HEADER, "config": {"max_loras": 1, "max_num_seqs": 1, "max_num_batched_tokens": 16,
                              "kv_blocks": 1, "block_size": 16}}
VIOLATIONS = {
    "tokens over budget": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={"a": 17}, admitted=["a"])],
                           "capacity", 1, 3, "clause tokens: 17 scheduled > max_num_batched_tokens 16"),
    "seats over": ([SMALL, arrive("a"), arrive("b"),
                    stepl(1, waiting=["a", "b"], scheduled={"a": 4, "b": 4}, admitted=["a", "b"])],
                   "capacity", 1, 4, "clause running: 2 running > max_num_seqs 1"),
    "KV over": ([{**SMALL, "config": {**SMALL["config"], "max_num_seqs": 2}}, arrive("a"), arrive("b"),
                 stepl(1, waiting=["a", "b"], scheduled={"a": 4, "b": 4}, admitted=["a", "b"])],
                "capacity", 1, 4, "clause kv: 2 blocks held > kv_blocks 1"),
    "vanished from running": ([*GOOD[:3], stepl(2)], "conservation", 2, 4,
                              "'a' was running and is gone without a recorded admission, preemption, finish"),
    "lost from waiting": ([*GOOD[:2], stepl(1)], "conservation", 1, 3, "'a' was waiting and is gone"),
    "back after finishing": ([*GOOD, stepl(3, running=["a"], scheduled={"a": 1})], "conservation", 3, 5,
                             "'a' is listed running but was finished"),
    "admitted twice": ([*GOOD[:3], stepl(2, running=["a"], scheduled={"a": 1}, admitted=["a"])],
                       "conservation", 2, 4, "'a' admitted while not waiting"),
    "admitted not scheduled": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={}, admitted=["a"])],
                               "conservation", 1, 3, "'a' admitted but not scheduled"),
    "scheduled while waiting": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={"a": 4})],
                                "conservation", 1, 3, "'a' scheduled while not running"),
    "preempted while waiting": ([*GOOD[:2], stepl(1, waiting=["a"], preempted=["a"])],
                                "conservation", 1, 3, "'a' preempted while not running"),
    "finished unscheduled": ([*GOOD[:3], stepl(2, running=["a"], finished=["a"])],
                             "conservation", 2, 4, "'a' finished without being scheduled"),
    "both queues": ([*GOOD[:2], stepl(1, waiting=["a"], running=["a"], scheduled={"a": 4}, admitted=["a"])],
                    "conservation", 1, 3, "'a' is listed both waiting and running"),
}


def test_malformed_and_violation_cases_are_disjoint():
    assert not set(BAD_TRACES) & set(VIOLATIONS)


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_violation_is_read_and_judged_by_its_property(tmp_path, name):
    """The reader accepts the trace; the observer judges every step without
    crashing; the first violation of the named property is at the step and
    line given, with the clause that failed."""
    lines, prop, step, line_no, words = VIOLATIONS[name]
    path = write(tmp_path, lines)
    read_trace(path)  # well-formed
    report = check_trace(path)
    assert not report.ok
    v = report.first.get(prop)
    assert v is not None, report.first
    assert (v.step, v.line) == (step, line_no), str(v)
    assert words in v.message, str(v)
    assert str(v).startswith(f"{prop}: VIOLATED at step {step} (line {line_no}): ")


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_malformed_trace_names_line_and_reason(tmp_path, name):
    """Each malformed trace raises TraceError at the offending line with its reason."""
    lines, line_no, reason = BAD_TRACES[name]
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    err = info.value
    assert (err.path, err.line) == (path, line_no), str(err)
    assert reason in err.reason, str(err)
    assert str(err) == f"{path}:{line_no}: {err.reason}"


def test_truncated_tail_only_when_allowed(tmp_path):
    """A last line cut short (no newline) is dropped only with allow_truncated_tail."""
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in GOOD[:3]) + '{"kind": "st')
    with pytest.raises(TraceError) as info:
        read_trace(p)
    assert info.value.line == 4 and "bad JSON" in info.value.reason
    t = read_trace(p, allow_truncated_tail=True)
    assert not t.complete and len(t.steps()) == 1


@pytest.mark.parametrize("name", ["bad JSON", "negative step", "unknown request", "missing header"])
def test_cli_check_reports_bad_trace(tmp_path, name):
    """`lora-sched check BAD` prints `error: path:line: reason` on stderr, exits 2, no traceback;
    with `--json` it also prints the error as a versioned object."""
    lines, line_no, reason = BAD_TRACES[name]
    path = write(tmp_path, lines)
    proc = subprocess.run([sys.executable, "-m", "lora_sched.cli", "check", path, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:{line_no}: "), proc.stderr
    assert reason in err[0]
    out = verdicts(proc.stdout, proc.returncode)
    assert (out["version"], out["tool"], out["command"], out["ok"]) == (1, "lora-sched", "check", False)
    assert out["error"]["line"] == line_no and reason in out["error"]["reason"]


@pytest.mark.parametrize("name", ["tokens over budget", "vanished from running", "KV over"])
def test_cli_check_reports_violation(tmp_path, name):
    """`lora-sched check` on a well-formed trace that breaks a property exits 1
    and names the property, step and line, in text and in `--json`."""
    lines, prop, step, line_no, words = VIOLATIONS[name]
    path = write(tmp_path, lines)
    text = subprocess.run([sys.executable, "-m", "lora_sched.cli", "check", path],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert text.returncode == 1, text.stdout + text.stderr
    assert "Traceback" not in text.stderr + text.stdout
    assert f"{prop} ... VIOLATED at step {step} (line {line_no}): " in text.stdout
    proc = subprocess.run([sys.executable, "-m", "lora_sched.cli", "check", path, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = verdicts(proc.stdout, proc.returncode)
    res = {r["property"]: r for r in out["results"]}
    assert res[prop]["verdict"] == "violated"
    assert (res[prop]["step"], res[prop]["line"]) == (step, line_no)
    assert words in res[prop]["message"]
    assert out["ok"] is False


@st.composite
def arbitrary_traces(draw):
    """Well-formed traces whose steps list arbitrary arrived requests in arbitrary roles."""
    cfg = {"max_loras": draw(st.integers(1, 2)), "max_num_seqs": draw(st.integers(1, 3)),
           "max_num_batched_tokens": draw(st.integers(1, 8)), "async_scheduling": draw(st.booleans()),
           "kv_blocks": draw(st.sampled_from([None, 2, 4])), "block_size": 2,
           "policy": draw(st.sampled_from(["blocking", "vllm", "fair"])), "starvation_steps": 1}
    lines: list = [{**HEADER, "config": cfg}]
    ids: list[str] = []
    step = draw(st.integers(0, 2))
    for _ in range(draw(st.integers(1, 6))):
        for _ in range(draw(st.integers(0, 2))):
            rid = f"r{len(ids)}"
            lines.append(arrive(rid, step=step, adapter=draw(st.integers(0, 3)), prompt=draw(st.integers(1, 5)),
                                out=draw(st.integers(1, 3))))
            ids.append(rid)
        if ids and draw(st.booleans()):
            lines.append({"kind": "abort", "step": step, "id": draw(st.sampled_from(ids))})
        some = st.lists(st.sampled_from(ids), unique=True) if ids else st.just([])
        lines.append(stepl(step, waiting=draw(some), running=draw(some),
                           scheduled={r: draw(st.integers(1, 6)) for r in draw(some)},
                           admitted=draw(some), preempted=draw(some), finished=draw(some)))
        step += draw(st.integers(1, 3))
    return lines


@given(arbitrary_traces(), st.sampled_from([None, "blocking", "vllm", "fair"]))
def test_any_well_formed_trace_is_judged_not_crashed(tmp_path_factory, lines, policy):
    """Every well-formed trace is read, and check (properties, then the replay)
    gives a verdict on it: no exception, whatever the steps claim."""
    path = write(tmp_path_factory.mktemp("t"), lines)
    report = check_trace(path, policy)
    assert all(v.line is not None for v in report.first.values())
    assert report.ok == (not report.first and (report.replay is None or report.replay.ok))
