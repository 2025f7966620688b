"""Hypothesis profiles for the suite, selected with `HYPOTHESIS_PROFILE=NAME` (or `--hypothesis-profile NAME`).

- `default`: fast, for the edit-test loop (`make test`).
- `ci`: what `.ci/run` uses; more examples, derandomized so CI is reproducible.
- `deep`: many more examples and longer state-machine runs (`make test-full`).

Deadlines are off in every profile: a step of the reference is cheap but a
whole drained run is not, and wall-clock assertions would make tests flaky.
Both conftests (tests/ and experiments/tests/) import this module.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("default", max_examples=40, stateful_step_count=30, **_COMMON)
settings.register_profile("ci", max_examples=60, stateful_step_count=40, derandomize=True, **_COMMON)
settings.register_profile("deep", max_examples=600, stateful_step_count=80, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
