"""Replay of a `lora-sched prove` counterexample: vllm violates batch_lora_cap."""

from lora_sched.proofs.cex import Cex, replay

CEX = {'aborts': {},
 'bound': None,
 'config': {'max_loras': 1, 'max_num_batched_tokens': 3, 'max_num_seqs': 3, 'starvation_steps': 0},
 'depth': 3,
 'policy': 'vllm',
 'property': 'batch_lora_cap',
 'requests': [{'adapter': 2, 'arrival': 1, 'id': 'r0', 'max_tokens': 1, 'prompt_tokens': 2},
              {'adapter': 2, 'arrival': 1, 'id': 'r1', 'max_tokens': 1, 'prompt_tokens': 2},
              {'adapter': 1, 'arrival': 2, 'id': 'r2', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 2, 'arrival': 2, 'id': 'r3', 'max_tokens': 1, 'prompt_tokens': 1}],
 'skips': {'2': ['r1']}}


def test_vllm_batch_lora_cap_replays() -> None:
    out = replay(Cex.from_json(CEX))
    assert out.reproduced, out.detail
