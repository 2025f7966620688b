"""Replay of `lora-sched prove`'s witness of fair's tight worst wait.

For R=4 requests (arrivals in steps 1..3), P<=1, L<=2, max_loras 1,
max_num_seqs 2, T=4, S=0 (`proofs.checks.WAIT_FAIR`), the solver's worst
first-admission wait is `proofs.checks.FAIR_WORST`. The witness must
replay in `policy/` with exactly that wait, and `lora-sched check` on the
replayed trace must find it within fair's B for the trace's own config,
requests and peak Q (`spec.check.bound_for`).
"""

from lora_sched.policy.driver import run
from lora_sched.proofs.cex import Cex, replay
from lora_sched.proofs.checks import FAIR_WORST, WAIT_FAIR
from lora_sched.spec.check import check_trace

CEX = {'aborts': {},
 'bound': 30,
 'config': {'max_loras': 1, 'max_num_batched_tokens': 4, 'max_num_seqs': 2, 'starvation_steps': 0},
 'depth': 10,
 'policy': 'fair',
 'property': 'bounded_wait',
 'requests': [{'adapter': 2, 'arrival': 2, 'id': 'r0', 'max_tokens': 2, 'prompt_tokens': 1},
              {'adapter': 2, 'arrival': 2, 'id': 'r1', 'max_tokens': 1, 'prompt_tokens': 1},
              {'adapter': 2, 'arrival': 2, 'id': 'r2', 'max_tokens': 1, 'prompt_tokens': 1},
              {'adapter': 1, 'arrival': 3, 'id': 'r3', 'max_tokens': 2, 'prompt_tokens': 1}],
 'skips': {}}


def test_fair_worst_wait_witness_replays(tmp_path) -> None:
    cex = Cex.from_json(CEX)
    b = WAIT_FAIR
    assert cex.config == {"max_loras": b.max_loras[1], "max_num_seqs": b.max_num_seqs[1],
                          "max_num_batched_tokens": b.max_num_batched_tokens[1],
                          "starvation_steps": b.starvation_steps[1]}, "witness of another configuration"
    out = replay(cex)
    assert max(out.waits.values()) == FAIR_WORST, out.waits
    path = tmp_path / "witness.jsonl"
    run(cex.config_obj(), cex.workload(), trace_path=path)
    report = check_trace(str(path))
    assert report.bound is not None, report.bound_note
    assert max(report.waits.values()) == FAIR_WORST <= report.bound, (report.waits, report.bound_note)
    assert "bounded_wait" not in report.first
