"""The experiments' tests (`make test-experiments`): tests/'s helpers and Hypothesis profiles, and shared fixtures."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # planted, strategies, profiles

import profiles  # noqa: E402, F401  (registers and loads the profile HYPOTHESIS_PROFILE names)


@pytest.fixture(scope="session")
def bench_online(tmp_path_factory) -> tuple[int, str, Path]:
    """`python -m experiments.cli --online --out DIR` run once for the session:
    (exit code, stdout, DIR). test_online.py reads the online pairs' part and
    test_relief.py the relief pairs' part (minutes: the ceiling pair is long),
    so the command is not paid twice."""
    from experiments.cli import main

    out = tmp_path_factory.mktemp("bench-online")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["--online", "--out", str(out)])
    return rc, buf.getvalue(), out
