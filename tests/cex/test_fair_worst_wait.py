"""Replay of `lora-sched prove`'s witness of fair's tight worst wait.

For R=4 requests (arrivals in steps 1..3), P<=1, L<=2, max_loras 1,
max_num_seqs 2, T=4, S=0, the solver's worst first-admission wait is
4; B = fair_bound(Q=4) = 36. The witness must replay in `policy/`
with exactly that wait (written by `python -m experiments.emit_cex`).
"""

from lora_sched.proofs.cex import Cex, replay

CEX = {'aborts': {'r3': 8},
 'bound': 56,
 'config': {'max_loras': 1, 'max_num_batched_tokens': 4, 'max_num_seqs': 2, 'starvation_steps': 0},
 'depth': 10,
 'policy': 'fair',
 'property': 'bounded_wait',
 'requests': [{'adapter': 1, 'arrival': 2, 'id': 'r0', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 3, 'id': 'r1', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 2, 'arrival': 3, 'id': 'r2', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 3, 'id': 'r3', 'max_tokens': 2, 'prompt_tokens': 1}],
 'skips': {}}


def test_fair_worst_wait_witness_replays() -> None:
    out = replay(Cex.from_json(CEX))
    assert max(out.waits.values()) == 4 <= 36, out.detail
