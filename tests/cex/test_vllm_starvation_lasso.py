"""Replay of `lora-sched prove`'s starvation lasso for vllm (bounded_wait).

The trace's last step repeats an earlier one (same waiting and running
requests up to renaming, the victim still waiting); repeating the loop's
arrivals keeps the victim waiting forever. The replay unrolls the loop
through `policy.core.Scheduler` until the victim has waited longer than
fair's bound B for the same configuration and observed Q, and runs `fair`
on the same workload.
"""

from lora_sched.policy.bound import fair_bound
from lora_sched.proofs.cex import Cex, replay_lasso

CEX = {'aborts': {},
 'bound': None,
 'config': {'max_loras': 1, 'max_num_batched_tokens': 4, 'max_num_seqs': 2, 'starvation_steps': 0},
 'depth': 2,
 'extra': {'loop': [1, 2], 'victim': 'r1'},
 'policy': 'vllm',
 'property': 'bounded_wait',
 'requests': [{'adapter': 1, 'arrival': 1, 'id': 'r0', 'max_tokens': 1, 'prompt_tokens': 1},
              {'adapter': 2, 'arrival': 1, 'id': 'r1', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 1, 'id': 'r2', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 2, 'id': 'r3', 'max_tokens': 2, 'prompt_tokens': 1}],
 'skips': {}}


def test_vllm_starvation_lasso_replays() -> None:
    cex = Cex.from_json(CEX)
    # enough loop periods for the victim to outwait fair's B (at most the 4 requests present)
    out = replay_lasso(cex, periods=fair_bound(cex.config_obj(), queue=4, max_prompt=1, max_output=2) + 1)
    assert out.reproduced, out.detail
    assert out.victim_wait > out.bound, out.detail
    # fair admits everyone within its bound on the same workload.
    assert out.fair_worst is not None and out.fair_worst <= fair_bound(
        cex.config_obj(), queue=out.queue, max_prompt=1, max_output=2), out.detail
