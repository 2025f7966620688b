"""The trace reader's fast paths read every line as its line-by-line checks do.

`spec.trace.TraceReader` reads a step or arrival line in one of three ways:
msgspec's typed decoding (when msgspec is installed, the `fast` extra), a
bulk check of json's object (`_well_formed_step` / `_well_formed_arrival`),
or the field-by-field checks that name what is wrong. The first two may only
accept what the third accepts, build the same events from it, and hand
everything else to the third, so that a bad line's error is always the
field-by-field one. Here the three are compared on every malformed and
violating trace of `test_bad_input`, on arbitrary well-formed traces, and on
those traces with one line mutated (a field's type, sign, an id, a key
dropped or repeated).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lora_sched.spec import trace as trace_mod
from lora_sched.spec.trace import TraceError, TraceReader
from test_bad_input import BAD_TRACES, VIOLATIONS, arbitrary_traces

TIERS = ("default", "json-bulk", "field-by-field")


def _read(path: Path, tier: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """Every event the reader yields (as plain tuples), or its error, in `tier`."""
    with monkeypatch.context() as m:
        if tier != "default":
            m.setattr(trace_mod, "_typed", None)
            m.setattr(trace_mod, "_decode", trace_mod._decode_json)
        if tier == "field-by-field":
            m.setattr(trace_mod, "_well_formed_step", lambda *a: None)
            m.setattr(trace_mod, "_well_formed_arrival", lambda *a: None)
        try:
            reader = TraceReader(path, allow_truncated_tail=True)
            events = [(type(e).__name__, dataclasses.astuple(e)) for e in reader]
            return events, reader.complete, reader.steps, reader.requests
        except TraceError as exc:
            return "error", exc.line, exc.reason


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def _same_in_every_tier(path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    results = [_read(path, t, monkeypatch) for t in TIERS]
    assert results[0] == results[2], f"default reader differs from the field-by-field checks on {path.read_text()}"
    assert results[1] == results[2], f"json bulk checks differ from the field-by-field checks on {path.read_text()}"
    return results[2]


def test_msgspec_tier_is_live_where_msgspec_is_installed():
    """The default tier is the typed one whenever msgspec imports (so the comparison below covers it)."""
    try:
        import msgspec  # noqa: F401
    except ImportError:
        assert trace_mod._typed is None
    else:
        assert trace_mod._typed is not None


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_malformed_traces_fail_alike_in_every_tier(tmp_path, monkeypatch, name):
    lines, line, words = BAD_TRACES[name]
    out = _same_in_every_tier(_write(tmp_path / "t.jsonl", lines), monkeypatch)
    assert out[0] == "error" and out[1] == line and words in out[2]


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_violating_traces_read_alike_in_every_tier(tmp_path, monkeypatch, name):
    out = _same_in_every_tier(_write(tmp_path / "t.jsonl", VIOLATIONS[name][0]), monkeypatch)
    assert out[0] != "error"


MUTANTS = st.sampled_from([
    ("step", "1"), ("step", 1.0), ("step", -1), ("step", True), ("step", 2**70), ("step", None),
    ("waiting", "r0"), ("waiting", ["r0", "r0"]), ("waiting", ["zz"]), ("waiting", [1]), ("running", [[]]),
    ("scheduled", {"r0": 0}), ("scheduled", {"r0": "2"}), ("scheduled", {"r0": True}), ("scheduled", {"zz": 1}),
    ("scheduled", []), ("finished", None), ("throttle", 1), ("throttle", "yes"), ("throttle", True),
    ("adapter", -1), ("adapter", 1.5), ("adapter", False), ("prompt_tokens", 0), ("max_tokens", "3"), ("max_tokens", 0),
    ("step", 0), ("step", 10**6),
    ("priority", 1.0), ("priority", -3), ("id", ""), ("id", 5), ("id", "r0"), ("extra", {"nested": [1]}),
    ("kind", "teleport"), ("kind", None),
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arbitrary_traces(), st.data())
def test_any_trace_and_any_one_line_mutant_read_alike_in_every_tier(tmp_path, monkeypatch, lines, data):
    _same_in_every_tier(_write(tmp_path / "t.jsonl", lines), monkeypatch)
    i = data.draw(st.integers(1, len(lines) - 1), label="line")
    key, value = data.draw(MUTANTS, label="mutation")
    mutated = dict(lines[i])
    if data.draw(st.booleans(), label="drop instead"):
        mutated.pop(key, None)
    else:
        mutated[key] = value
    text = json.dumps(mutated)
    if data.draw(st.booleans(), label="repeat the key"):  # json and msgspec both keep the last
        text = text[:-1] + f', {json.dumps(key)}: {json.dumps(value)}}}'
    _same_in_every_tier(_write(tmp_path / "t.jsonl", [*lines[:i], text, *lines[i + 1:]]), monkeypatch)
