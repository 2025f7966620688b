"""Replay of a `lora-sched prove` counterexample: vllm violates batch_lora_cap."""

from lora_sched.policy.driver import run
from lora_sched.proofs.cex import Cex, replay

CEX = {'aborts': {},
 'bound': None,
 'config': {'max_loras': 1,
            'max_num_batched_tokens': 3,
            'max_num_seqs': 3,
            'prefill_schedule_interval': 2,
            'starvation_steps': 0},
 'depth': 3,
 'policy': 'vllm',
 'property': 'batch_lora_cap',
 'requests': [{'adapter': 0, 'arrival': 1, 'id': 'r0', 'max_tokens': 2, 'prompt_tokens': 2},
              {'adapter': 1, 'arrival': 1, 'id': 'r1', 'max_tokens': 1, 'prompt_tokens': 2},
              {'adapter': 2, 'arrival': 2, 'id': 'r2', 'max_tokens': 2, 'prompt_tokens': 1}],
 'skips': {},
 'throttled': [2]}


def test_vllm_batch_lora_cap_replays() -> None:
    out = replay(Cex.from_json(CEX))
    assert out.reproduced, out.detail


def test_vllm_batch_lora_cap_throttles_the_same_steps() -> None:
    cex = Cex.from_json(CEX)
    res = run(cex.config_obj(), cex.workload(truncate=True))
    assert [r.step for r in res.records if r.throttle] == CEX['throttled']
