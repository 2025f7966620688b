"""The suite's Hypothesis profiles (`profiles`): `default`, `ci` and `deep`."""

from __future__ import annotations

import profiles  # noqa: F401  (registers and loads the profile HYPOTHESIS_PROFILE names)
