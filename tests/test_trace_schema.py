"""`docs/trace.schema.json` against the writer and against the reader.

- The schema is a valid JSON Schema (2020-12) whose config keys, defaults and
  enums are those of `spec.config.Config`.
- Every line the writer produces is valid: simulated traces of every policy
  on every named workload (simulate's scenarios and the conformance
  scenarios, sync and async).
- The async `finished` convention the schema states holds on the writer's
  async traces.
- On the bad-input corpus of `tests/test_bad_input.py`, the schema and the
  reader agree: every trace the reader accepts (good ones and those that
  break a property) is valid line by line, and every trace the reader
  rejects is rejected by the schema too, except exactly the cases the
  schema's description lists as beyond a single line (`BEYOND_SCHEMA`).
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given
from jsonschema import Draft202012Validator
from lora_sched.policy.driver import run
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.spec.config import POLICIES, QUEUES, Config
from lora_sched.spec.trace import TraceError, read_trace
from test_bad_input import BAD_TRACES, GOOD, VIOLATIONS, arbitrary_traces, write

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "trace.schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)

# Malformed traces whose every line is valid on its own: the reader rejects
# them for what the schema cannot see (the numbered checks of its description).
BEYOND_SCHEMA = {
    "missing header": 1, "second header": 1, "empty file": 1,
    "step out of order": 2,
    "arrival after its step line": 3, "abort after its step line": 3,
    "unknown request": 4, "abort unknown": 4, "listed before arrival": 4, "abort before arrival": 4,
    "duplicate arrival": 4,
    "integer written as 1.0": 5,
}


def schema_errors(lines: list) -> list[str]:
    """Why the schema rejects some line of `lines` (a raw string is parsed first)."""
    out = []
    for n, ln in enumerate(lines, 1):
        try:
            obj = json.loads(ln) if isinstance(ln, str) else ln
        except json.JSONDecodeError as exc:
            out.append(f"line {n}: not JSON: {exc.msg}")
            continue
        out += [f"line {n}: {e.message}" for e in VALIDATOR.iter_errors(obj)]
    return out


def file_lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_schema_is_valid_and_matches_config():
    Draft202012Validator.check_schema(SCHEMA)
    props = SCHEMA["$defs"]["config"]["properties"]
    default = Config()
    for f in fields(Config):
        assert f.name in props, f"config key {f.name} missing from the schema"
        assert props[f.name]["default"] == getattr(default, f.name), f.name
    assert props["queue"]["enum"] == list(QUEUES)
    assert props["policy"]["enum"] == list(POLICIES)


def simulated(tmp_path: Path) -> list[tuple[str, Path]]:
    """A trace of every policy on every named workload, sync and async."""
    out = []
    workloads = {k: (s.config, s.workload) for k, s in SCENARIOS.items()}
    for name, (cfg, wl) in workloads.items():
        for policy in POLICIES:
            for async_ in (False, True):
                path = tmp_path / f"{name}-{policy}-{'async' if async_ else 'sync'}.jsonl"
                run(replace(cfg, policy=policy, async_scheduling=async_), wl, trace_path=path)
                out.append((path.name, path))
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[tuple[str, Path]]:
    return simulated(tmp_path_factory.mktemp("sim"))


def test_writer_output_is_valid(traces):
    assert len(traces) == 2 * len(POLICIES) * len(SCENARIOS)
    kinds: set[str] = set()
    for name, path in traces:
        lines = file_lines(path)
        assert schema_errors(lines) == [], name
        kinds |= {ln["kind"] for ln in lines}
        read_trace(path)
    assert kinds == {"header", "arrive", "abort", "step"}


def test_async_finished_convention(traces):
    """Under async scheduling a request in step t's `finished` was scheduled in
    step t, is still in step t+1's `running` (not scheduled there, unless
    aborted), and is gone from `running` at step t+2: as the schema says."""
    seen = 0
    for name, path in traces:
        if "async" not in name:
            continue
        lines = file_lines(path)
        aborted = {(ln["step"], ln["id"]) for ln in lines if ln["kind"] == "abort"}
        steps = [ln for ln in lines if ln["kind"] == "step"]
        for t, nxt, after in zip(steps, steps[1:] + [None], steps[2:] + [None, None], strict=True):
            for rid in t["finished"]:
                seen += 1
                assert rid in t["scheduled"], (name, t["step"], rid)
                if nxt is not None and (nxt["step"], rid) not in aborted:
                    assert nxt["step"] == t["step"] + 1, (name, t["step"])
                    assert rid in nxt["running"] and rid not in nxt["scheduled"], (name, nxt["step"], rid)
                if after is not None:
                    assert rid not in after["running"], (name, after["step"], rid)
    assert seen > 100


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_schema_rejects_what_the_reader_rejects(tmp_path, name):
    lines, _, _ = BAD_TRACES[name]
    with pytest.raises(TraceError):
        read_trace(write(tmp_path, lines))
    errors = schema_errors(lines)
    if name in BEYOND_SCHEMA:
        assert errors == [], f"{name} is listed beyond the schema but the schema rejects it: {errors}"
    else:
        assert errors, f"the schema accepts {name}, which the reader rejects: add a rule or list it"


@pytest.mark.parametrize("name", ["good", *sorted(VIOLATIONS)])
def test_schema_accepts_what_the_reader_accepts(tmp_path, name):
    """Well-formed traces, those that break a property included, are schema-valid."""
    lines = GOOD if name == "good" else VIOLATIONS[name][0]
    read_trace(write(tmp_path, lines))
    assert schema_errors(lines) == []


@given(arbitrary_traces())
def test_schema_accepts_arbitrary_well_formed_traces(tmp_path_factory, lines):
    read_trace(write(tmp_path_factory.mktemp("t"), lines))
    assert schema_errors(lines) == []


def test_verdicts_schema_names_every_property():
    """docs/verdicts.schema.json (the `--json` output) lists exactly the properties `check` reports."""
    from lora_sched.spec.properties import ALL_PROPERTIES
    from verdicts import SCHEMA as VERDICTS

    assert VERDICTS["$defs"]["propertyResult"]["properties"]["property"]["enum"] == ALL_PROPERTIES
