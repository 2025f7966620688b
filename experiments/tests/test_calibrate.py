"""The cost model's fit (`experiments.calibrate`): its vectorised evaluator matches `bench.simulate.result_block`."""

from __future__ import annotations

import pytest
from lora_sched.bench.simulate import apply_model, result_block, seed_config, seed_requests, simulate_policy
from lora_sched.policy.costmodel import DEFAULT, CostModel

from experiments.calibrate import FastBlock


def test_fast_block_equals_result_block() -> None:
    reqs = seed_requests(40, output=12)
    runs = {"vllm": simulate_policy(seed_config(), reqs, "vllm", DEFAULT)}
    prompts = {r.id: r.prompt_tokens for r in reqs}
    model = CostModel(0.01, 2e-4, 3e-5, 1e-3)
    tl = apply_model(runs["vllm"].timeline, model)
    fast, slow = FastBlock(tl, prompts)(model), result_block(tl, prompts)
    for key, value in slow.items():
        assert fast[key] == pytest.approx(value)
