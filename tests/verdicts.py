"""The `--json` output of `check` and `prove`, validated against `docs/verdicts.schema.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "verdicts.schema.json").read_text())
Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = Draft202012Validator(SCHEMA)


def verdicts(stdout: str, exit_code: int) -> dict[str, Any]:
    """Parse `--json` stdout, validate it against the schema, and check that `ok` agrees with the exit code."""
    obj = json.loads(stdout)
    VALIDATOR.validate(obj)
    assert obj["ok"] == (exit_code == 0), (obj["ok"], exit_code)
    return obj
