"""`python -m experiments.refspeed`: the reference and vLLM's `Scheduler` run the same schedule."""

from __future__ import annotations

import pytest
from lora_sched.bench.simulate import seed_config, seed_requests

pytestmark = pytest.mark.vllm


def test_reference_and_vllm_take_the_same_steps() -> None:
    from experiments.refspeed import compare, describe

    ref, vl = compare(seed_config(), seed_requests(40), repeat=1)
    assert ref.steps == vl.steps > 0
    assert "the same schedule" in describe(ref, vl)
