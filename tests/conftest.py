"""The suite's Hypothesis profiles (`profiles`): `default`, `ci` and `deep`; the slowest tests first."""

from __future__ import annotations

import profiles  # noqa: F401  (registers and loads the profile HYPOTHESIS_PROFILE names)

# A minute or more each (`--durations`): started first, so that `make test`'s two
# workers (`-n 2 --dist worksteal`) do not end on one of them alone.
SLOW_FIRST = (
    "test_proofs_manifest.py::test_manifest_verdict[fair-wait-queue-order]",
    "test_proofs_manifest.py::test_manifest_verdict[fair-wait-heads]",
    "test_catalogue.py::",
    "test_target.py::test_conform_judges_a_user_class_without_a_replay",
    "test_proofs_differential.py::",
    "test_conformance_inprocess.py::test_vllm_random_workloads",
    "test_deploy_lifecycle.py::test_the_lifecycle_machine_finds_a_planted_drift",
)


def pytest_collection_modifyitems(items) -> None:
    items.sort(key=lambda item: not any(s in item.nodeid for s in SLOW_FIRST))
