"""fair under the priority queue: a more urgent starving request replaces r*.

The instance is one a search against the planted rule (r* kept) finds
(`python -m experiments.knobs`, S = 16, seed 1, priority space, wait objective): `r13`
(priority 1) starves at step 20 and becomes r*; `r10` (priority 0, the
most urgent level) starves at 21. Kept as r*, `r13` takes the slot that
frees at 21 and `r10` waits 51 steps; vLLM's priority scan gives that slot
to `r10` (16). The planted rule must be caught by the trace checker's
`no_hol_blocking` (its declared holds come from the real `FairGuard`), as
the SMT mutant `star_kept_over_urgent` is by the encoding's.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace

from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.policy.fair import FairGuard, Waiting
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from planted import KeptOverUrgentGate

CFG = Config(max_loras=2, max_num_seqs=14, max_num_batched_tokens=29, chunked_prefill=True, queue="priority",
             policy="fair", starvation_steps=16, vllm="0.33")
# (id, adapter, prompt, max_tokens, arrival, priority)
REQS = [Request(*r) for r in (
    ("r0", 4, 20, 32, 7, 2), ("r1", 2, 12, 1, 3, 2), ("r3", 2, 32, 18, 1, 2), ("r4", 1, 4, 9, 1, 0),
    ("r5", 2, 25, 32, 19, 1), ("r6", 0, 32, 16, 11, 1), ("r9", 0, 32, 32, 5, 0), ("r10", 6, 16, 1, 5, 0),
    ("r13", 4, 7, 23, 4, 1), ("r14", 1, 18, 5, 12, 0), ("r16", 2, 19, 16, 1, 2), ("r17", 2, 28, 21, 11, 0),
    ("r18", 1, 13, 10, 5, 1), ("r19", 2, 19, 32, 16, 1), ("r20", 0, 32, 21, 14, 1), ("r21", 0, 29, 21, 7, 1),
    ("r24", 0, 32, 12, 19, 1), ("r25", 1, 29, 13, 5, 2), ("r26", 0, 31, 16, 8, 0), ("r22", 2, 25, 21, 19, 0),
    ("r23", 2, 25, 22, 19, 0), ("r27", 2, 20, 32, 14, 1), ("r28", 2, 26, 16, 1, 2), ("r29", 1, 18, 5, 13, 1),
    ("r30", 1, 4, 11, 1, 0))]


def _run(gate=None):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        result = run(CFG, Workload(REQS), trace_path=path, gate=gate)
        return result.waits(), check_trace(path)


def test_the_more_urgent_starving_request_gets_the_slot():
    waits, report = _run()
    vllm = run(replace(CFG, policy="vllm"), Workload(REQS)).waits()
    assert not any(report.first.values()), report.first
    assert waits["r10"] == vllm["r10"] == 16
    assert max(waits.values()) == max(vllm.values()) == 19


def test_the_v10_rule_is_caught_as_a_planted_bug():
    waits, report = _run(KeptOverUrgentGate())
    assert waits["r10"] == 51
    broken = report.first.get("no_hol_blocking")
    assert broken is not None and broken.step == 21 and "'r10'" in str(broken), report.first


def test_replacement_needs_a_more_urgent_level():
    """Guard level: r* (priority 1) is replaced by a priority-0 request once
    that one has waited S steps, not before; a later request of r*'s own
    level never replaces it; without the priority queue nothing does."""
    for priority_queue in (True, False):
        g = FairGuard(window_steps=2, max_loras=1, priority_queue=priority_queue)
        g.enqueue(Waiting("low", 1, 0, 0, priority=1))
        g.enqueue(Waiting("same", 2, 1, 1, priority=1))
        g.enqueue(Waiting("urgent", 3, 1, 2, priority=0))
        assert g.begin_scan(2) == "low"  # only `low` has waited 2 steps
        want = "urgent" if priority_queue else "low"
        assert g.begin_scan(3) == want and g.chosen_at == (3 if priority_queue else 2)
        assert g.begin_scan(4) == want
