"""The any-size proofs (`proofs.unbounded`): verdicts, non-vacuity, planted
bugs, and the bounded instance checked against the reference.

Every check here can fail: a proof that stops going through, a sat trace
that becomes unsat (a vacuous model), a planted bug that survives, or a real
step of `policy.core.Scheduler` that the model does not admit.
"""

from __future__ import annotations

import functools
import json

import pytest
from lora_sched.proofs import unbounded as u
from unbounded_crosscheck import CrossResult, crosscheck

from lora_sched.cli import main as cli_main


def violates(cti: dict, prop: str) -> bool:
    """Judge a CTI JSON object in plain Python (independently of Z3): does
    its step break `prop`? Running after the scan = (running - aborted -
    preempted) + admitted; scheduled = scheduled running + admitted."""
    pre, post, st, cfg, ad = cti["states"][0], cti["states"][1], cti["step"], cti["config"], cti["rigid"]["adapter"]
    base = cti["rigid"]["base"]
    running = (set(pre["R"]) - set(st["abort"]) - set(st["preempt"])) | set(st["adm"])
    scheduled = set(st["sched"]) | set(st["adm"])
    if prop in ("running_lora_cap", "batch_lora_cap"):
        members = running if prop == "running_lora_cap" else scheduled
        return len({ad[r] for r in members if ad[r] != base}) > cfg["max_loras"]
    if prop == "capacity":
        return len(running) > cfg["max_num_seqs"] or any(
            st["before"][r] + st["tok"][r] > cfg["max_num_batched_tokens"] for r in scheduled)
    if prop == "conservation":
        return any(sum(r in post[k] for k in ("W", "R", "F", "X")) != (r in post["arrived"])
                   for r in cti["universes"]["Req"])
    if prop == "fifo_within_adapter":
        waiting = (set(pre["W"]) | set(st["arrive"])) - set(st["abort"])
        seq, prio = cti["rigid"]["seq"], cti["rigid"]["prio"]
        return any(r1 not in pre["ever"] and r2 in waiting and r2 not in st["adm"] and r2 not in pre["ever"]
                   and ad[r1] == ad[r2] and prio[r1] == prio[r2] and seq[r2] < seq[r1]
                   for r1 in st["adm"] for r2 in cti["universes"]["Req"])
    raise ValueError(prop)


@pytest.mark.parametrize("model,good,bad", u.MODELS, ids=[m.label for m, _, _ in u.MODELS])
def test_any_size_verdicts(model: u.Model, good: tuple[str, ...], bad: tuple[str, ...]) -> None:
    """Every invariant holds initially and is preserved; every property in
    `good` is implied; every property in `bad` fails with an exact violation
    (M = 1 and two adapters) from a state satisfying the invariant."""
    outs = u.prove(model, props=good + bad)
    for o in outs:
        if o.kind == "trace":  # non-vacuity: the step admits a new adapter beside a running one
            assert o.verdict == "sat", o.line()
        elif o.kind == "safety" and o.name in bad:
            assert o.verdict == "fail", o.line()
            assert o.exact is not None, o.line()
            assert violates(u.cti_json(o), o.name), o.line()
        else:
            assert o.verdict == "ok", o.line()
    assert {o.name for o in outs if o.kind == "safety"} == set(good + bad)
    assert {o.name for o in outs if o.kind == "preserves"} == set(u.invariants(u.System(model).g,
                                                                              u.System(model).s0, model))


@pytest.mark.parametrize("policy,skip,mutant", u.MUTANT_RUNS, ids=[f"{p}-{mu}" for p, _, mu in u.MUTANT_RUNS])
def test_planted_bug_is_caught(policy: str, skip: bool, mutant: str) -> None:
    """Each planted bug breaks every property it names, with an exact
    violation from a state satisfying the invariant (not only a bad ghost)."""
    outs = u.run_mutant(policy, skip, mutant)
    assert [o.name for o in outs] == list(u.MUTANTS[mutant][1])
    for o in outs:
        assert o.verdict == "fail", f"mutant {mutant} survived: {o.line()}"
        assert o.exact is not None, o.line()
        assert violates(u.cti_json(o), o.name), f"the countermodel does not break {o.name}: {o.line()}"


def test_cti_json_file(tmp_path: pytest.TempPathFactory) -> None:
    """`--itf-dir` writes a versioned CTI file per failed obligation; the
    blocking+skip running_lora_cap one loads and shows the excess."""
    rc = cli_main(["prove", "--unbounded", "--policy", "blocking", "--property", "running_lora_cap",
                   "--itf-dir", str(tmp_path)])
    assert rc == 0
    cti = json.loads((tmp_path / "unbounded_blocking+skip_running_lora_cap.cti.json").read_text())
    assert cti["version"] == u.CTI_VERSION and cti["type"] == "cti" and cti["exact"]
    assert violates(cti, "running_lora_cap")


def test_vacuous_step_is_caught() -> None:
    """A gate that never admits a new adapter proves both caps vacuously; the
    non-vacuity check (a new adapter joins a running one) must fail."""
    outs = u.prove(u.Model("fair", True, u.VACUOUS_MUTANT), props=u.CAP_PROPERTIES)
    assert all(o.verdict == "ok" for o in outs if o.kind == "safety")
    assert [o.verdict for o in outs if o.kind == "trace"] == ["fail"]


@functools.cache
def _traced(i: int) -> u.Outcome:
    return u.run_trace(u.TRACES[i])


@pytest.mark.parametrize("i", range(len(u.TRACES)), ids=[t.name for t in u.TRACES])
def test_sat_traces(i: int) -> None:
    """Reachability from init: the cap is reached and blocks a third adapter
    (the model is not vacuous); vLLM's scheduled-only cap set under a skipped
    running request reaches two adapters with max_loras 1 (depth 2) and the
    crash shape, two adapters in one batch (depth 3); fair and vllm without
    the skip do not within depth 2. The field's gates: each reaches the cap;
    timeslice cycles an adapter; vtc stops behind its least-served client;
    drainer breaks FIFO, drainer and vtc break the caps with skips (all
    replayed in `policy/`); timeslice keeps them with skips."""
    o = _traced(i)
    assert o.verdict in ("ok", "sat"), o.line()


def test_cap_countermodel_is_counted() -> None:
    """The vllm+skip running_lora_cap countermodel, evaluated in Python in
    its finite universe, has more distinct adapters than max_loras."""
    r, _dt, mod, sy, steps = u.trace(u.Model("vllm", True), 2, u.two_adapters("R3"), extra=u.max_loras_is(1))
    assert mod is not None
    g, st = sy.g, steps[-1]
    reqs = mod.get_universe(g.req)
    running = [x for x in reqs if mod.eval(st.R3(x), model_completion=True)]
    loras = {str(mod.eval(g.adapter(x), model_completion=True)) for x in running
             if mod.eval(g.lora(x), model_completion=True)}
    assert mod.eval(g.M).as_long() == 1 and len(loras) >= 2


# Bounded instances against the reference. fair's skip rows hold because its cap
# set counts every running request; a scheduled-only set is what the model
# excludes (it fails them).
CROSS = [
    ("vllm", dict()),
    ("blocking", dict()),
    ("fair", dict()),
    ("vllm", dict(skip=True, async_scheduling=True, kv_blocks=3, seed=1)),
    ("vllm", dict(queue="priority", kv_blocks=3, seed=1)),
    ("fair", dict(skip=True, async_scheduling=True, kv_blocks=3, seed=1)),
    ("fair", dict(skip=True, queue="priority", kv_blocks=4, seed=1)),
    ("fair", dict(skip=True, max_prompt=8, seed=4)),  # long prompts: the DP throttle stops scans
    ("fair", dict(crowd=True, seed=3)),  # victims with queues: drain admissions
    # the field's gates, on seeds whose runs hit each gate's own rule (drains, tolerance holds,
    # inactive adapters, vtc's stop): with async scheduling and skips, and the drainer (whose
    # model adds the most) synchronous too
    ("drainer", dict(requests=7, adapters=2, max_output=8, last_arrival=10, horizon=16, seed=20)),
    ("drainer", dict(skip=True, async_scheduling=True, kv_blocks=6, requests=7, adapters=2, max_output=8,
                     last_arrival=10, horizon=16, seed=29)),
    ("timeslice", dict(skip=True, async_scheduling=True, kv_blocks=6, requests=8, seed=3)),
    ("vtc", dict(skip=True, async_scheduling=True, kv_blocks=8, requests=8, seed=3)),
]


@functools.cache
def _cross(i: int) -> CrossResult:
    policy, kw = CROSS[i]
    return crosscheck(policy, runs=2, **kw)


@pytest.mark.parametrize("i", range(len(CROSS)), ids=[f"{p}-{'-'.join(f'{k}={v}' for k, v in kw.items())}"
                                                     for p, kw in CROSS])
def test_reference_steps_are_model_steps(i: int) -> None:
    """Every step of random runs of the reference (6 requests, 3 adapters) is a
    step of the model between states satisfying the invariant."""
    res = _cross(i)
    assert res.failures == []
    assert res.steps >= 10 and res.admissions >= 5


def test_crosscheck_covers_the_mechanisms() -> None:
    """The cross-checked runs include preemptions, skipped running requests,
    running requests the reference itself leaves unscheduled (budget, async),
    scans stopped by the DP throttle, requests left by the LoRA cap or
    fair's guard, and victims' requests fair admits while r* waits (so those
    branches of the model are compared with the reference)."""
    rs = [_cross(i) for i in range(len(CROSS))]
    assert sum(r.preemptions for r in rs) > 0
    assert sum(r.skipped for r in rs) > 0
    assert sum(r.deferred for r in rs) > 0
    assert sum(r.throttle_holds for r in rs) > 0
    assert sum(r.cap_skips for r in rs) > 0
    assert sum(r.guard_exempt for r in rs) > 0


@pytest.mark.parametrize("gate", u.FIELD)
def test_crosscheck_covers_the_field_gates(gate: str) -> None:
    """The cross-checked runs of each field gate include requests held by the
    gate's own rule (drainer's 1.2x tolerance, timeslice's inactive adapters,
    vtc's stop behind a cap-blocked client), and the drainer runs include
    steps with a draining adapter: those branches of the model are compared
    with the reference, with the gate's state (draining set, active set,
    counters) pinned from `policy/`."""
    rs = [_cross(i) for i, (p, _) in enumerate(CROSS) if p == gate]
    assert rs and all(r.failures == [] for r in rs)
    assert sum(r.gate_holds for r in rs) > 0
    if gate == "drainer":
        assert sum(r.drains for r in rs) > 0


def test_crosscheck_catches_a_wrong_model() -> None:
    """The cross-check can fail: `blocking`'s model does not admit vllm's
    skip-and-go-on scan, and the no-skip model does not admit a scan while a
    running request is left unscheduled."""
    assert crosscheck("vllm", runs=2, model=u.Model("blocking")).failures
    assert crosscheck("vllm", runs=2, skip=True, model=u.Model("vllm")).failures


def test_field_gates_claims_are_proved() -> None:
    """What each field gate claims (`policy.claims`) among the step
    properties is proved for any size by its model: synchronous (no skip)
    and with the DP prefill throttle or skipped running requests (the +skip
    model; async scheduling alone skips only sure-to-finish requests, which
    keeps vLLM's batch cap, see `policy.claims`);
    what it does not claim there is shown failing (an expected failure of
    `MODELS`), except where the proof shows the claim could be stronger.
    Every property proved for a gate has a planted bug on that gate's model
    that breaks it."""
    from lora_sched.policy import claims
    from lora_sched.spec.config import Config

    verdicts = {m: (set(good), set(bad)) for m, good, bad in u.MODELS}
    for gate in u.FIELD:
        for skip, cfg, skipped in ((False, Config(policy=gate), False),
                                   (True, Config(policy=gate, prefill_schedule_interval=2), False),
                                   (True, Config(policy=gate, async_scheduling=True), True)):
            good, bad = verdicts[u.Model(gate, skip)]
            claimed = claims(gate, cfg, skipped_running=skipped) & set(u.PROPERTIES)
            assert claimed <= good, (gate, skip, claimed - good)
            assert set(u.PROPERTIES) - claimed == bad, (gate, skip, bad)
        planted = {prop for pol, _skip, mu in u.MUTANT_RUNS if pol == gate for prop in u.MUTANTS[mu][1]}
        assert verdicts[u.Model(gate)][0] | verdicts[u.Model(gate, True)][0] <= planted, gate


def test_drainer_fifo_counterexample_replays() -> None:
    """Z3 finds, from init in two steps, the drainer admitting a short
    request of a draining adapter past a long one that arrived earlier; the
    workload read off the trace, run through `policy/`'s DrainerGate, breaks
    `fifo_within_adapter` in the Observer (and drainer does not claim it)."""
    from lora_sched.policy import claims
    from lora_sched.spec.config import Config

    i = next(i for i, t in enumerate(u.TRACES) if t.model == u.Model("drainer") and t.replay == "fifo_within_adapter")
    o = _traced(i)
    assert o.verdict == "sat", o.line()
    assert "fifo_within_adapter: VIOLATED" in o.detail, o.detail
    assert "fifo_within_adapter" not in claims("drainer", Config(policy="drainer"))


def test_timeslice_keeps_the_caps_where_vllm_breaks_them() -> None:
    """The reference side of the timeslice+skip proof: on the same random
    workloads with async scheduling, the DP throttle and skipped running
    requests, vLLM's gate breaks a LoRA cap and timeslice's never does."""
    import os
    import random
    import tempfile

    from lora_sched.policy.check import check_trace
    from lora_sched.policy.driver import Workload, run
    from lora_sched.spec.config import Config
    from lora_sched.spec.request import Request

    broken: dict[str, int] = {"vllm": 0, "timeslice": 0}
    for seed in range(60):
        for policy in broken:
            rng = random.Random(seed)
            cfg = Config(max_loras=rng.randint(1, 2), max_num_seqs=rng.randint(1, 6),
                         max_num_batched_tokens=rng.randint(2, 16), async_scheduling=rng.random() < 0.7,
                         kv_blocks=rng.choice([None, 6, 12]), block_size=2, starvation_steps=rng.randint(0, 4),
                         prefill_schedule_interval=rng.choice([1, 1, 2]), policy=policy)
            reqs = sorted((Request(f"r{k}", rng.randint(0, 3), rng.randint(1, 6), rng.randint(1, 6),
                                   rng.randint(1, 8)) for k in range(rng.randint(2, 10))), key=lambda q: q.arrival)
            skips = {t: frozenset(q.id for q in reqs if rng.random() < 0.3) for t in range(1, 40)}
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "t.jsonl")
                run(cfg, Workload(reqs, {}, skips), trace_path=path)
                report = check_trace(path)
            broken[policy] += any(p in report.first for p in u.CAP_PROPERTIES)
    assert broken["vllm"] > 0 and broken["timeslice"] == 0, broken


def test_cli_unbounded_refuses_json() -> None:
    assert cli_main(["prove", "--unbounded", "--json"]) == 2


def test_cli_unbounded(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["prove", "--unbounded", "--policy", "vllm", "--property", "fifo_within_adapter"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "preserves invariant fifo_state ... ok." in out
    assert "mutant scan_order_free on vllm: safety fifo_within_adapter ... caught (fails)." in out
    assert "all ok!" in out


def test_cli_unbounded_field_gate(capsys: pytest.CaptureFixture[str]) -> None:
    """`prove --unbounded --policy timeslice` checks the gate's two models,
    its traces and its planted bugs; without --unbounded the bounded
    checker refuses the gate (exit 2)."""
    rc = cli_main(["prove", "--unbounded", "--policy", "timeslice"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "checking timeslice+skip (any number of requests and adapters):" in out
    assert "preserves invariant active_running ... ok." in out
    assert "mutant evict_in_use on timeslice+skip: safety running_lora_cap ... caught (fails)." in out
    assert "all ok!" in out
    assert cli_main(["prove", "--policy", "timeslice"]) == 2
