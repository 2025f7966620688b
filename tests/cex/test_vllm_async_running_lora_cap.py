"""Replay of a `lora-sched prove` counterexample: vllm violates running_lora_cap."""

from lora_sched.proofs.cex import Cex, replay

CEX = {'aborts': {'r1': 2},
 'bound': None,
 'config': {'async_scheduling': True,
            'max_loras': 1,
            'max_num_batched_tokens': 1,
            'max_num_seqs': 2,
            'starvation_steps': 0},
 'depth': 2,
 'policy': 'vllm',
 'property': 'running_lora_cap',
 'requests': [{'adapter': 2, 'arrival': 1, 'id': 'r0', 'max_tokens': 1, 'prompt_tokens': 1},
              {'adapter': 0, 'arrival': 2, 'id': 'r1', 'max_tokens': 1, 'prompt_tokens': 2},
              {'adapter': 1, 'arrival': 2, 'id': 'r2', 'max_tokens': 1, 'prompt_tokens': 2}],
 'skips': {}}


def test_vllm_running_lora_cap_replays() -> None:
    out = replay(Cex.from_json(CEX))
    assert out.reproduced, out.detail
