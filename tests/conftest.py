"""Hypothesis profiles for the suite, selected with `pytest --hypothesis-profile NAME`.

- `default`: fast, for the edit-test loop (the whole suite in a few minutes on 2 cores).
- `ci`: what `.ci/run` uses; more examples, derandomized so CI is reproducible.
- `deep`: many more examples and longer state-machine runs, for a soak run.

Deadlines are off in every profile: a step of the reference is cheap but a
whole drained run is not, and wall-clock assertions would make tests flaky.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("default", max_examples=40, stateful_step_count=30, **_COMMON)
settings.register_profile("ci", max_examples=60, stateful_step_count=40, derandomize=True, **_COMMON)
settings.register_profile("deep", max_examples=600, stateful_step_count=80, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
