"""The field's policies as references: what each fails, found by search.

`drainer` (SGLang's LoRADrainer), `timeslice` (LoRAX's adapter cycle) and
`vtc` (the Virtual Token Counter) are checked every step by the state machines
(`tests/test_state_machines.py`) for what they claim (`policy.claims`). Here,
what they do not claim is shown failing by `hypothesis.find`, and the test
asserts on the run it found (no `xfail`):

- `drainer` and `timeslice` starve a request past any fixed bound on an
  adapter stream, while `fair` admits it within B on the same workload;
- `drainer` admits a short request of a draining adapter before a long one
  that arrived earlier (`fifo_within_adapter`);
- all three leave a request waiting that the LoRA cap and capacity let in
  (`no_hol_blocking`, judged in queue order; none of them declares its holds
  or its scan order on a trace).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import replace

from hypothesis import find, given
from hypothesis import strategies as st
from lora_sched.policy.bound import workload_bound
from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import REFERENCE_POLICIES, Config
from lora_sched.spec.request import Request
from lora_sched.spec.trace import read_trace
from strategies import scenarios
from test_search_violations import SEARCH, STARVE_BOUND, adapter_streams
from test_state_machines import _round_trip


def _worst(cfg, wl, policy):
    waits = run(cfg, wl, policy=policy).waits()
    rid = max(waits, key=lambda r: waits[r])
    return rid, waits[rid]


def _lengthen(wl: Workload, factor: int) -> Workload:
    """`adapter_streams`' workload with its stream (`s{adapter}-{step}`, one
    request per stream adapter every period) `factor` times as long."""
    stream = [r for r in wl.requests if r.id.startswith("s")]
    steps = sorted({r.arrival for r in stream})
    period = steps[1] - steps[0] if len(steps) > 1 else 1
    first = [r for r in stream if r.arrival == steps[0]]
    more = [replace(r, id=f"s{r.adapter}-{t}", arrival=t)
            for t in range(steps[-1] + period, factor * steps[-1] + 1, period) for r in first]
    return Workload(list(wl.requests) + more)


def _starves(policy: str):
    cfg, wl = find(adapter_streams(), lambda s: _worst(s[0], s[1], policy)[1] > STARVE_BOUND, settings=SEARCH)
    adapter = {r.id: r.adapter for r in wl.requests}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "starve.jsonl")
        result = run(cfg, wl, policy=policy, trace_path=path)
        trace = read_trace(path)
    victim, wait = max(result.waits().items(), key=lambda kv: kv[1])
    arrival = trace.requests()[victim].arrival
    assert wait > STARVE_BOUND
    window = [r for r in trace.steps() if arrival <= r.step < arrival + STARVE_BOUND]
    assert len(window) == STARVE_BOUND  # busy every step of the wait
    overtaken = 0
    for rec in window:
        assert victim in rec.waiting and victim not in rec.admitted
        batch = {adapter[r] for r in rec.scheduled if adapter[r] > 0}
        assert adapter[victim] not in batch and len(batch) == cfg.max_loras
        overtaken += sum(1 for r in rec.admitted if trace.requests()[r].arrival > arrival)
    assert overtaken > 0, "later requests are admitted while the victim waits"
    fair_waits = run(cfg, wl, policy="fair").waits()
    assert max(fair_waits.values()) <= workload_bound(cfg, wl.requests)
    # Four times the stream: the victim's wait grows under `policy`, while fair,
    # which holds a victim's request once r* has waited S/2 steps per output it
    # has left (so a short stream may end first), admits it sooner.
    longer = _lengthen(wl, 4)
    _, wait4 = _worst(cfg, longer, policy)
    fair4 = run(cfg, longer, policy="fair").waits()
    assert wait4 > wait and fair4[victim] < wait4, (wait, wait4, fair4[victim])
    return cfg, wl, victim


def test_drainer_starves_a_request():
    """SGLang's drainer marks the adapter with the fewest remaining tokens
    draining, but keeps admitting its requests whose max_tokens is within 1.2x
    of its remaining tokens: with a steady stream such requests keep coming and
    the adapter never drains (lora_drainer.py `can_schedule`)."""
    cfg, wl, victim = _starves("drainer")
    outs = {r.max_tokens for r in wl.requests if not r.id.startswith("x")}
    assert max(outs) >= 2  # a single-token stream drains: 1 > 1.2 * 0


def test_timeslice_starves_a_request():
    """LoRAX cycles out only an active adapter that is not in use
    (queue.rs `update_adapters`): an adapter that always has a running request
    keeps its slot past any time slice."""
    _starves("timeslice")


_FIFO = re.compile(r"^'(?P<late>[^']+)' first admitted before '(?P<early>[^']+)'")


def _fifo_broken(scenario) -> bool:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fifo.jsonl")
        run(*scenario, trace_path=path)
        return "fifo_within_adapter" in check_trace(path).first


@st.composite
def drain_queues(draw):
    """One slot; adapter 1 runs, adapter 2 waits for it, adapter 1 keeps
    sending requests of random lengths (random workloads rarely make an
    adapter drain while it has both long and short requests queued)."""
    cfg = Config(max_loras=1, max_num_seqs=draw(st.integers(2, 8)), max_num_batched_tokens=64,
                 starvation_steps=draw(st.integers(0, 4)), policy="drainer")
    reqs = [Request("a1-0", 1, draw(st.integers(1, 8)), draw(st.integers(1, 16)), 1),
            Request("a2", 2, 4, 4, 1)]
    for i in range(draw(st.integers(1, 4))):
        reqs.append(Request(f"a1-{i + 1}", 1, draw(st.integers(1, 8)), draw(st.integers(1, 40)),
                            draw(st.integers(1, 6))))
    return cfg, Workload(reqs)


def test_drainer_breaks_fifo_within_adapter():
    """The drainer's tolerance (`max_tokens <= 1.2 * remaining`) lets a short
    request of a draining adapter in while a longer one, queued before it,
    is refused: first admissions of one adapter leave arrival order."""
    scenario = find(drain_queues(), _fifo_broken, settings=SEARCH)
    cfg, wl = scenario
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fifo.jsonl")
        result = run(cfg, wl, trace_path=path)
        report = check_trace(path)
    v = report.first["fifo_within_adapter"]
    m = _FIFO.match(v.message)
    assert m, v.message
    reqs = {r.id: r for r in wl.requests}
    late, early = reqs[m["late"]], reqs[m["early"]]
    assert late.adapter == early.adapter and late.max_tokens < early.max_tokens
    rec = next(r for r in result.records if r.step == v.step)
    assert rec.holds.get(early.id) == "drainer"


def _hol_broken(scenario) -> bool:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hol.jsonl")
        run(*scenario, trace_path=path)
        return "no_hol_blocking" in check_trace(path).first


def _hol(policy: str, reason: str) -> None:
    scenario = find(scenarios(policy=policy, async_scheduling=False), _hol_broken, settings=SEARCH)
    cfg, wl = scenario
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hol.jsonl")
        result = run(cfg, wl, trace_path=path)
        report = check_trace(path)
    v = report.first["no_hol_blocking"]
    rid = v.message.split("'")[1]
    rec = next(r for r in result.records if r.step == v.step)
    assert rid in rec.waiting and rid not in rec.admitted and not rec.preempted
    # The policy kept it out, not the cap: its own hold (or a stop after one),
    # or its scan order gave the seat or budget to a request queued behind it.
    behind = rec.waiting[rec.waiting.index(rid) + 1:]
    assert reason in rec.holds.values() or any(r in rec.admitted for r in behind), rec


def test_drainer_holds_past_the_cap():
    _hol("drainer", "drainer")


def test_timeslice_holds_inactive_adapters():
    _hol("timeslice", "timeslice")


def test_vtc_stops_behind_a_blocked_client():
    _hol("vtc", "vtc_stop")


@given(st.sampled_from(REFERENCE_POLICIES).flatmap(lambda p: scenarios(policy=p)))
def test_reference_gate_traces_round_trip(scenario):
    """The reference gates' traces go through the strict reader, replay through
    their own gate with zero divergence, and the checker finds no violation of
    what they claim (as `test_state_machines` does for the shipped policies)."""
    _round_trip(scenario)
