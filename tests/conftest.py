"""Hypothesis profiles for the suite, selected with `pytest --hypothesis-profile NAME`.

- `default`: fast, for the edit-test loop (the whole suite in a few minutes on 2 cores).
- `ci`: what `.ci/run` uses; more examples, derandomized so CI is reproducible.
- `deep`: many more examples and longer state-machine runs, for a soak run.

Deadlines are off in every profile: a step of the reference is cheap but a
whole drained run is not, and wall-clock assertions would make tests flaky.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("default", max_examples=40, stateful_step_count=30, **_COMMON)
settings.register_profile("ci", max_examples=60, stateful_step_count=40, derandomize=True, **_COMMON)
settings.register_profile("deep", max_examples=600, stateful_step_count=80, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def bench_online(tmp_path_factory) -> tuple[int, str, Path]:
    """`lora-sched bench --online --out DIR` run once for the session: (exit
    code, stdout, DIR). tests/test_online.py reads the online pairs' part and
    tests/test_relief.py the relief pairs' part (minutes: the ceiling pair is
    long), so the command is not paid twice."""
    from lora_sched.cli import main as cli_main

    out = tmp_path_factory.mktemp("bench-online")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli_main(["bench", "--online", "--out", str(out)])
    return rc, buf.getvalue(), out
