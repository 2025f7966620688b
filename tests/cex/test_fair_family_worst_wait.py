"""Replay of fair's worst wait on the R=6 family model of `experiments.proofs_benchmark.FAMILY`.

B = fair_bound(Q=6) = 30. R=6, A=3, P<=1, L<=2, max_loras 1..2, max_num_seqs 1..2, arrivals by step 7: Z3 finds a
request waiting 10 steps (and `python -m experiments.proofs_benchmark --only fair_wait_family` shows
none waits more). The witness must wait exactly 10 in `policy/` (written by
`python -m experiments.emit_cex --family`).
"""

from lora_sched.proofs.cex import Cex, replay

CEX = {'aborts': {},
 'bound': 9,
 'config': {'max_loras': 2, 'max_num_batched_tokens': 2, 'max_num_seqs': 1, 'starvation_steps': 0},
 'depth': 10,
 'policy': 'fair',
 'property': 'bounded_wait',
 'requests': [{'adapter': 0, 'arrival': 1, 'id': 'r0', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 1, 'id': 'r1', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 1, 'id': 'r2', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 1, 'id': 'r3', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 3, 'arrival': 1, 'id': 'r4', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 3, 'arrival': 1, 'id': 'r5', 'max_tokens': 2, 'prompt_tokens': 1}],
 'skips': {}}


def test_fair_worst_wait_witness_replays() -> None:
    out = replay(Cex.from_json(CEX))
    assert max(out.waits.values()) == 10 <= 30, out.detail
