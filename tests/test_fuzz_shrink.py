"""The fuzz campaign's parts that need no Ray: the space, delta debugging, dedup, resume.

The shrinker is tested against plain predicates on the case (the system under
test is the shrinker, not vLLM); shrinking real vLLM failures is covered by
tests/test_fuzz_campaign.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from lora_sched.fuzz.campaign import merge, uncovered
from lora_sched.fuzz.findings import Findings
from lora_sched.fuzz.shrink import ddmin, shrink
from lora_sched.fuzz.space import FuzzCase, generate, valid


def test_ddmin_finds_the_two_culprits() -> None:
    calls = []

    def fails(xs: list[int]) -> bool:
        calls.append(len(xs))
        return 3 in xs and 17 in xs

    assert ddmin(list(range(40)), fails) == [3, 17]
    assert len(calls) < 60


def test_ddmin_result_is_one_minimal() -> None:
    def fails(xs: list[int]) -> bool:  # a sum threshold: many minimal answers
        return sum(xs) >= 50

    out = ddmin(list(range(1, 21)), fails)
    assert fails(out)
    assert all(not fails(out[:i] + out[i + 1:]) for i in range(len(out)))


def test_ddmin_empty_when_nothing_is_needed() -> None:
    assert ddmin([1, 2, 3], lambda xs: True) == []


def _culprit(case: FuzzCase) -> bool:
    """A stand-in failure: two LoRA adapters whose requests have prompts >= 5 under chunked prefill."""
    big = {r.adapter for r in case.workload.requests if r.adapter > 0 and r.prompt_tokens >= 5}
    return len(big) >= 2 and case.config.chunked_prefill


def test_shrink_keeps_the_failure_and_minimises() -> None:
    seed = next(s for s in range(500) if _culprit(generate(s)) and len(generate(s).workload.requests) >= 10)
    case = generate(seed)
    out = shrink(case, _culprit)
    small = out.case
    assert _culprit(small)
    assert len(small.workload.requests) == 2
    assert sorted(r.prompt_tokens for r in small.workload.requests) == [5, 5]
    assert all(r.max_tokens == 1 and r.priority == 0 for r in small.workload.requests)
    # tidy: ids in arrival order, adapters renumbered from 1, arrivals from step 1
    assert [r.id for r in small.workload.requests] == ["r0", "r1"]
    assert sorted(r.adapter for r in small.workload.requests) == [1, 2]
    assert min(r.arrival for r in small.workload.requests) == 1
    cfg = small.config
    assert (cfg.async_scheduling, cfg.queue, cfg.long_prefill_token_threshold, cfg.kv_blocks) == (
        False, "fcfs", 0, None)
    assert not small.workload.aborts
    assert valid(small)


def test_shrink_respects_its_run_budget() -> None:
    case = generate(next(s for s in range(500) if _culprit(generate(s))))
    calls = []
    out = shrink(case, lambda c: calls.append(1) or _culprit(c), max_runs=7)
    assert len(calls) <= 7 + 1  # the budget, plus the final tidy check
    assert _culprit(out.case)


def test_findings_deduplicate_by_signature() -> None:
    fs = Findings()
    a = {"signature": "crash:AssertionError@scheduler.py:schedule:vllm", "kind": "crash",
         "name": "AssertionError@scheduler.py:schedule", "policy": "vllm", "message": "m"}
    b = dict(a, signature="crash:AssertionError@scheduler.py:schedule:fair", policy="fair")
    assert fs.add(9, a) is not None
    assert fs.add(4, a) is None
    assert fs.add(5, b) is not None
    assert len(fs) == 2
    f = fs.by_sig[a["signature"]]
    assert (f.hits, f.first_seed, f.seeds) == (2, 4, [9, 4])


def test_resume_skips_the_ranges_done() -> None:
    done = merge([[16, 24], [0, 4], [4, 8]])
    assert done == [[0, 8], [16, 24]]
    chunks = uncovered(done, 0, 5)
    assert [next(chunks) for _ in range(4)] == [(8, 13), (13, 16), (24, 29), (29, 34)]
    assert next(uncovered([[0, 10]], 3, 4)) == (10, 14)


def test_generate_is_a_pure_function_of_the_seed() -> None:
    for s in (0, 1, 77, 12345):
        assert generate(s) == generate(s)
        assert FuzzCase.from_json(generate(s).to_json()) == generate(s)
    assert generate(1) != generate(2)


def test_space_covers_every_dimension() -> None:
    """The generator reaches every corner the campaign claims (and only valid cases)."""
    seen: Counter = Counter()
    for s in range(300):
        c = generate(s)
        cfg, reqs = c.config, c.workload.requests
        assert valid(c), s
        seen.update([f"policy:{cfg.policy}", f"queue:{cfg.queue}", f"async:{cfg.async_scheduling}",
                     f"chunked:{cfg.chunked_prefill}", f"max_loras:{cfg.max_loras}"])
        seen["kv-limited" if cfg.kv_blocks is not None else "kv-roomy"] += 1
        seen["long-prefill"] += cfg.long_prefill_token_threshold > 0
        seen["aborts"] += bool(c.workload.aborts)
        seen["single-token"] += any(r.prompt_tokens == 1 for r in reqs)
        seen["base"] += any(r.adapter == 0 for r in reqs)
        seen["16-adapters"] += max(r.adapter for r in reqs) >= 13
        seen["many-requests"] += len(reqs) >= 30
        first = {r.id: r.arrival for r in reqs}
        seen["abort-at-arrival"] += any(v == first[k] for k, v in c.workload.aborts.items())
    for key in ["policy:vllm", "policy:fair", "policy:blocking", "queue:fcfs", "queue:priority", "async:True",
                "async:False", "chunked:True", "chunked:False", "kv-limited", "kv-roomy", "long-prefill", "aborts",
                "single-token", "base", "16-adapters", "many-requests", "abort-at-arrival",
                *(f"max_loras:{m}" for m in range(1, 9))]:
        assert seen[key] >= 3, (key, seen)


def test_case_json_round_trip_keeps_the_reference() -> None:
    c = replace(generate(3), reference="blocking")
    assert FuzzCase.from_json(c.to_json()).reference == "blocking"
