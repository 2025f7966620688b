"""Bad input gets a clear error: configs, requests, traces, and the CLI.

Each invalid config field raises `ConfigError` naming the field; each invalid
request field raises `RequestError` naming it; each kind of malformed trace
raises `TraceError` with the line that is wrong and the reason; and
`lora-sched check BAD` prints `error: path:line: reason` and exits 2 without
a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec.config import Config, ConfigError
from spec.request import Request, RequestError
from spec.trace import TraceError, read_trace

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
    "admitted twice": ([*GOOD[:3], stepl(2, running=["a"], scheduled={"a": 1}, admitted=["a"])], 4,
                       "'a' admitted twice"),
    "tokens over budget": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={"a": 17}, admitted=["a"])], 3,
                           "tokens over budget: 17 scheduled > max_num_batched_tokens 16"),
    "step out of order": ([*GOOD[:3], stepl(1, running=["a"], scheduled={"a": 1}, finished=["a"])], 4,
                          "step 1 out of order: it follows step 1"),
    "duplicate arrival": ([*GOOD[:2], arrive("a"), *GOOD[2:]], 3, "'a' arrives twice"),
    "wrong type step": ([*GOOD[:2], {**GOOD[2], "step": "1"}], 3, "field 'step' must be an integer"),
    "wrong type list": ([*GOOD[:2], {**GOOD[2], "waiting": "a"}], 3, "field 'waiting' must be a list"),
    "wrong type tokens": ([*GOOD[:2], {**GOOD[2], "scheduled": {"a": "4"}}], 3,
                          "scheduled tokens for 'a' must be a positive integer"),
    "wrong type adapter": ([HEADER, {**arrive("a"), "adapter": 1.5}, *GOOD[2:]], 2,
                           "field 'adapter' must be an integer"),
    "invalid request": ([HEADER, arrive("a", prompt=0), *GOOD[2:]], 2, "prompt_tokens must be >= 1"),
    "missing field": ([HEADER, {k: v for k, v in arrive("a").items() if k != "id"}], 2, "missing field 'id'"),
    "not an object": ([HEADER, "[1, 2]"], 2, "expected a JSON object"),
    "inconsistent waiting": ([*GOOD[:2], stepl(1, waiting=[], scheduled={}, admitted=[])], 3,
                             "inconsistent waiting"),
    "admitted not scheduled": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={}, admitted=["a"])], 3,
                               "'a' admitted but not scheduled"),
    "scheduled while waiting": ([*GOOD[:2], stepl(1, waiting=["a"], scheduled={"a": 4})], 3,
                                "'a' scheduled while not running"),
    "finished unscheduled": ([*GOOD[:3], stepl(2, running=["a"], finished=["a"])], 4,
                             "'a' finished without being scheduled"),
    "abort unknown": ([*GOOD[:3], {"kind": "abort", "step": 3, "id": "zz"}], 4, "abort of unknown request 'zz'"),
    "listed before arrival": ([HEADER, arrive("a", step=2), stepl(1, waiting=["a"])], 3,
                              "listed before its arrival step 2"),
}


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


@pytest.mark.parametrize("name", ["bad JSON", "admitted twice", "tokens over budget", "missing header"])
def test_cli_check_reports_bad_trace(tmp_path, name):
    """`lora-sched check BAD` prints `error: path:line: reason` on stderr, exits 2, no traceback."""
    lines, line_no, reason = BAD_TRACES[name]
    path = write(tmp_path, lines)
    proc = subprocess.run([sys.executable, "-m", "lora_sched.cli", "check", path],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:{line_no}: "), proc.stderr
    assert reason in err[0]
