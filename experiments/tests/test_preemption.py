"""`experiments.preemption`: the experiment's preemption rule does what its docstring says.

Each check reads the step records, not the scheduler's own account of its
preemptions, and fails if the rule were a no-op (r* would wait for the
victim to drain), ignored its S floor, or overspent its budget.
"""

from __future__ import annotations

import functools

import pytest
from lora_sched.bench import realistic as R
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

from experiments import goals as G
from experiments import preemption as P

CFG = Config(max_loras=1, max_num_seqs=4, max_num_batched_tokens=64, starvation_steps=4)


def _run(reqs: list[Request], budget: float | None, preempt: bool = True, cfg: Config = CFG):
    sched = functools.partial(P.PreemptingScheduler, budget=budget) if preempt else None
    kw = {"scheduler": sched} if preempt else {}
    return run(cfg, Workload(reqs), policy="fair", **kw)


def _work(result, reqs: list[Request]) -> dict[str, int]:
    """Tokens scheduled per request over the run, from the step records."""
    done = {r.id: 0 for r in reqs}
    for rec in result.records:
        for rid, n in rec.scheduled.items():
            done[rid] += n
    return done


def _blocked_pair(outputs: int) -> list[Request]:
    """Adapter 1 holds the one slot with a request of `outputs` outputs; adapter 2 arrives a step later."""
    return [Request("a", 1, 8, outputs, 1), Request("b", 2, 8, 4, 2)]


def test_a_long_victim_is_preempted_and_r_star_takes_its_slot():
    reqs = _blocked_pair(200)
    held = _run(reqs, None, preempt=False).waits()
    result = _run(reqs, None)
    waits = result.waits()
    assert held["b"] > 150  # fair alone: b waits for a's 200 outputs
    assert waits["b"] <= CFG.starvation_steps + 2  # chosen as r* after S steps, in the step a is preempted
    evictions = [rec.step for rec in result.records if "a" in rec.preempted]
    assert len(evictions) == 1 and evictions[0] == waits["b"] + 2  # the step b is admitted in
    admitted_b = next(rec.step for rec in result.records if "b" in rec.admitted)
    assert admitted_b == evictions[0]
    work = _work(result, reqs)
    assert work["a"] > 8 + 200 - 1  # a recomputed what it had done
    assert all(rs.status == "finished" for rs in result.scheduler.state.reqs.values())


def test_the_request_that_ends_the_run_is_the_one_recorded():
    """`_last` names the request whose last output is the run's last, with
    its preemptions and first admission: here the restarted victim `a`,
    which finishes after `b` (4 outputs) does; a wrong pick (first to finish,
    or the counts of another request) fails."""
    reqs = _blocked_pair(200)
    result = _run(reqs, None)
    last = P._last(result, P.finish_steps(result))
    final = result.records[-1]
    assert last["last"] == "a" and "a" in final.finished and "b" not in final.finished
    assert last["last_preempted"] == 1 and last["last_outputs"] == 200
    assert last["last_admitted"] == next(rec.step for rec in result.records if "a" in rec.admitted)


def test_a_victim_that_frees_within_s_steps_is_left_to_drain():
    reqs = _blocked_pair(8)  # a has <= S outputs left when b becomes r*
    result = _run(reqs, None)
    assert not any(rec.preempted for rec in result.records)
    assert result.scheduler.evicted == []
    assert result.waits() == _run(reqs, None, preempt=False).waits()


def test_the_budget_caps_what_is_recomputed():
    """Recomputed tokens (the work beyond each request's prompt + outputs - 1,
    from the records) stay within eps of the tokens scheduled, on a realistic
    workload where the rule preempts; without a budget it recomputes more."""
    spec = R.grid(requests=150)[5]
    reqs = R.workload(spec)
    cfg = spec.config(starvation_steps=P.S)
    extra = {}
    for budget in (0.03, None):
        result = _run(reqs, budget, cfg=cfg)
        work = _work(result, reqs)
        extra[budget] = sum(work[r.id] - (r.prompt_tokens + r.max_tokens - 1) for r in reqs)
        total = sum(work.values())
        assert extra[budget] > 0
        if budget is not None:
            assert extra[budget] <= budget * total
    assert extra[None] > extra[0.03]


def test_the_experiment_reports_every_point_side_by_side():
    specs = R.grid(requests=60)[:2]
    rows = P.run_grid(specs, processes=1)
    assert [r["point"] for r in rows[:len(P.points())]] == (["vllm"] + P.fair_points()
                                                            + ["drainer S=16", "timeslice S=16", "vtc"])
    for r in rows:
        assert r["finish_max"] >= r["max"] and r["ratio_s"] > 0
        # the head's and the tail's means, taken apart, give back bench.popularity's ratio
        assert r["tail_head"] == pytest.approx((r["tail_mean"] + 1) / (r["head_mean"] + 1))
        # the run's last request, and when it and vllm first admitted it
        assert r["last_admitted"] is not None and r["last_admitted_vllm"] is not None
        assert r["finish_max"] >= r["last_outputs"]
        assert 0 < r["tokens_p99_s"] <= r["seconds"]  # the 99th-percentile output token comes out by the last
        if r["point"] == "vllm":
            assert r["last_admitted"] == r["last_admitted_vllm"] and r["last_preempted"] == 0
            assert r["ratio_p99_tokens"] == 1.0
    for b in P.BUDGETS:  # bench.realistic's goals judge every preemption point
        assert len(G.goals(rows, point=(P.preempt_name(b), P.S))) == 4 + len(G.FIELD)
