"""The seed's running example (vLLM PR #15422), checked step by step.

max_loras = 4 and sixteen requests wait in this order:
R1, R2, R3, R4-L1, R5-L3, R6-L2, R7-L4, R8-L5, R9-L5, R10-L5, R11-L5, R12,
R13, R14-L1, R15-L2, R16-L3 (Rx-Ly needs LoRA y; Rx needs none).

The expected sets below are written by hand from the seed text, not computed
by the code under test. The seed's sets are the *scheduled* requests of a
step (running requests plus newly admitted ones).
"""

from __future__ import annotations

from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

QUEUE = ["R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4", "R8-L5", "R9-L5",
         "R10-L5", "R11-L5", "R12", "R13", "R14-L1", "R15-L2", "R16-L3"]
ADAPTER = {"R1": 0, "R2": 0, "R3": 0, "R4-L1": 1, "R5-L3": 3, "R6-L2": 2, "R7-L4": 4,
           "R8-L5": 5, "R9-L5": 5, "R10-L5": 5, "R11-L5": 5, "R12": 0, "R13": 0,
           "R14-L1": 1, "R15-L2": 2, "R16-L3": 3}
LONG = 30  # output length of every request not chosen to finish early
PROMPT = 8
# Large enough that only the LoRA cap limits admission, as in the seed.
CONFIG = Config(max_loras=4, max_num_seqs=256, max_num_batched_tokens=4096)


def seed_run(policy: str, short: dict[str, int]):
    """Run the seed queue (all arriving at step 1) with `short` output lengths."""
    reqs = [Request(rid, ADAPTER[rid], PROMPT, short.get(rid, LONG), 1) for rid in QUEUE]
    result = run(CONFIG, Workload(reqs), policy=policy)
    return result.records


def step_after_finish(records, rid: str):
    """The first step scheduled after the step whose output finished `rid`."""
    for i, rec in enumerate(records):
        if rid in rec.finished:
            return records[i + 1]
    raise AssertionError(f"{rid} never finished")


def test_blocking_first_step_schedules_r1_to_r7():
    """`blocking` stops the scan at R8-L5 (a fifth adapter): {R1..R7} are scheduled."""
    records = seed_run("blocking", {"R4-L1": 2})
    first = records[0]
    assert set(first.scheduled) == {"R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4"}
    assert first.admitted == ["R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4"]
    # Head-of-line blocking: R12 and R13 need no LoRA and still wait.
    assert {"R12", "R13"} <= set(records[1].waiting)


def test_blocking_no_admission_until_an_adapter_completes():
    """Before R4-L1 completes, `blocking` admits nothing new (the seed's
    "can't schedule additional requests until one ... completes")."""
    records = seed_run("blocking", {"R4-L1": 4})
    until = next(i for i, r in enumerate(records) if "R4-L1" in r.finished)
    assert until >= 2
    for rec in records[1:until + 1]:
        assert rec.admitted == []
        assert set(rec.scheduled) == {"R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4"}


def test_blocking_when_r4_completes():
    """When R4-L1 completes, `blocking` schedules {R1, R2, R3, R5-L3, R6-L2,
    R7-L4, R8-L5 .. R11-L5, R12, R13}: L5 takes L1's slot and the scan stops
    again at R14-L1."""
    records = seed_run("blocking", {"R4-L1": 2})
    nxt = step_after_finish(records, "R4-L1")
    assert set(nxt.scheduled) == {"R1", "R2", "R3", "R5-L3", "R6-L2", "R7-L4", "R8-L5", "R9-L5",
                                  "R10-L5", "R11-L5", "R12", "R13"}
    assert nxt.admitted == ["R8-L5", "R9-L5", "R10-L5", "R11-L5", "R12", "R13"]


def test_vllm_first_step_skips_l5():
    """`vllm` skips the L5 requests and keeps scanning: it schedules {R1, R2,
    R3, R4-L1, R5-L3, R6-L2, R7-L4, R12, R13, R14-L1, R15-L2, R16-L3} and
    leaves R8..R11 waiting."""
    records = seed_run("vllm", {})
    first = records[0]
    assert set(first.scheduled) == {"R1", "R2", "R3", "R4-L1", "R5-L3", "R6-L2", "R7-L4", "R12",
                                    "R13", "R14-L1", "R15-L2", "R16-L3"}
    assert set(records[1].waiting) == {"R8-L5", "R9-L5", "R10-L5", "R11-L5"}
    # ... and they keep waiting while every L-set is still running.
    for rec in records[1:LONG - 1]:
        assert rec.admitted == []


def test_vllm_l5_scheduled_when_an_l_set_completes():
    """When one LoRA set completes ({R4-L1, R14-L1}, {R5-L3, R16-L3} or
    {R6-L2, R15-L2}) `vllm` schedules R8..R11."""
    l5 = {"R8-L5", "R9-L5", "R10-L5", "R11-L5"}
    for pair in (("R4-L1", "R14-L1"), ("R5-L3", "R16-L3"), ("R6-L2", "R15-L2")):
        records = seed_run("vllm", {pair[0]: 2, pair[1]: 3})
        # Only one of the pair done: the adapter is still running, L5 waits.
        partial = step_after_finish(records, pair[0])
        assert partial.admitted == [], pair
        nxt = step_after_finish(records, pair[1])
        assert nxt.admitted == ["R8-L5", "R9-L5", "R10-L5", "R11-L5"], pair
        assert l5 <= set(nxt.scheduled)
