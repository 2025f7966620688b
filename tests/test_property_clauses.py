"""Every clause of every property in `spec/properties.py` fires.

Each test plants a bad step (a hand-built `StepRecord` / `StepView`) that
breaks exactly one clause and asserts that the property reports that clause;
each declared hold of `no_hol_blocking` is shown to matter by a pair of
views: with the hold the step passes, with the hold's condition removed the
same step is a violation. A property whose clause cannot fire would pass
these tests only by being wrong.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from lora_sched.spec import properties as P
from lora_sched.spec.config import Config
from lora_sched.spec.state import StepRecord

ADAPTER = {"a": 1, "b": 2, "c": 3, "base": 0}


def view(rec: StepRecord, *, config: Config | None = None, running_after: list[str] | None = None,
         status: dict[str, str] | None = None, num_tokens: dict[str, int] | None = None,
         computed: dict[str, int] | None = None, blocks_after: dict[str, int] | None = None,
         used_before_scan: int = 0, in_flight: set[str] | None = None, ever: set[str] | None = None,
         seq: dict[str, int] | None = None, priority: dict[str, int] | None = None) -> P.StepView:
    ids = list(ADAPTER)
    if running_after is None:
        running_after = [r for r in rec.running if r not in rec.preempted] + list(rec.admitted)
    if status is None:
        status = {r: "waiting" for r in rec.waiting} | {r: "running" for r in rec.running}
    return P.StepView(
        config=config or Config(max_loras=1, max_num_seqs=4, max_num_batched_tokens=8),
        rec=rec,
        adapter=dict(ADAPTER),
        num_tokens=num_tokens or {r: 2 for r in ids},
        computed=computed or {r: 0 for r in ids},
        waiting_since={r: 0 for r in ids},
        arrival={r: 0 for r in ids},
        priority=priority or {r: 0 for r in ids},
        seq=seq or {r: i for i, r in enumerate(ids)},
        ever_admitted=ever or set(),
        status=status,
        running_after=running_after,
        blocks_after=blocks_after or {},
        used_before_scan=used_before_scan,
        in_flight=in_flight or set(),
    )


def rec(waiting: list[str], running: list[str], scheduled: dict[str, int], admitted: list[str],
        preempted: list[str] | None = None) -> StepRecord:
    return StepRecord(1, waiting, running, scheduled, admitted, preempted or [], [])


def fires(v: P.Violation | None, prop: str, clause: str = "") -> None:
    assert v is not None, f"{prop} did not fire"
    assert v.property == prop and clause in v.message, v


# ---- batch_lora_cap / running_lora_cap -------------------------------------

def test_batch_lora_cap_fires_and_ignores_base() -> None:
    fires(P.batch_lora_cap(view(rec([], ["a", "b"], {"a": 1, "b": 1}, [])), ), "batch_lora_cap", "[1, 2]")
    assert P.batch_lora_cap(view(rec([], ["a", "base"], {"a": 1, "base": 1}, []))) is None
    # an unscheduled running request does not count toward the batch
    assert P.batch_lora_cap(view(rec([], ["a", "b"], {"a": 1}, []))) is None


def test_running_lora_cap_fires_on_unscheduled_running() -> None:
    fires(P.running_lora_cap(view(rec([], ["a", "b"], {"a": 1}, []))), "running_lora_cap", "[1, 2]")
    assert P.running_lora_cap(view(rec([], ["a", "base"], {"a": 1}, []))) is None


# ---- capacity ----------------------------------------------------------------

def test_capacity_running_clause() -> None:
    cfg = Config(max_loras=3, max_num_seqs=1, max_num_batched_tokens=8)
    fires(P.capacity(view(rec(["b"], ["a"], {"a": 1, "b": 1}, ["b"]), config=cfg)), "capacity", "clause running")


def test_capacity_tokens_clause() -> None:
    cfg = Config(max_loras=3, max_num_seqs=4, max_num_batched_tokens=2)
    fires(P.capacity(view(rec([], ["a", "b"], {"a": 2, "b": 1}, []), config=cfg)), "capacity", "clause tokens")
    assert P.capacity(view(rec([], ["a", "b"], {"a": 1, "b": 1}, []), config=cfg)) is None


def test_capacity_kv_clause() -> None:
    cfg = Config(max_loras=3, max_num_seqs=4, max_num_batched_tokens=8, kv_blocks=2, block_size=1)
    r = rec([], ["a", "b"], {"a": 1, "b": 1}, [])
    fires(P.capacity(view(r, config=cfg, blocks_after={"a": 2, "b": 1})), "capacity", "clause kv")
    assert P.capacity(view(r, config=cfg, blocks_after={"a": 1, "b": 1})) is None


# ---- conservation ------------------------------------------------------------

def test_conservation_duplicated_clause() -> None:
    r = rec(["a"], ["a"], {"a": 1}, [])
    fires(P.conservation(view(r, status={"a": "running"})), "conservation", "clause duplicated")


def test_conservation_lost_clause() -> None:
    # "b" was running and the step does not list it: gone without a record
    r = rec([], ["a"], {"a": 1}, [])
    fires(P.conservation(view(r, status={"a": "running", "b": "running"})), "conservation", "clause lost")


def test_conservation_listed_clause() -> None:
    # "b" finished earlier and is listed running again
    r = rec([], ["a", "b"], {"a": 1, "b": 1}, [])
    fires(P.conservation(view(r, status={"a": "running", "b": "finished"})), "conservation", "clause listed")


def test_conservation_admitted_clauses() -> None:
    r = rec([], ["a"], {"a": 1, "b": 1}, ["b"])
    fires(P.conservation(view(r, status={"a": "running"})), "conservation", "admitted while not waiting")
    r = rec(["b"], ["a"], {"a": 1}, ["b"])
    fires(P.conservation(view(r)), "conservation", "admitted but not scheduled")
    # the same step with "b" scheduled is fine
    assert P.conservation(view(rec(["b"], ["a"], {"a": 1, "b": 1}, ["b"]))) is None


def test_conservation_preempted_clause() -> None:
    r = rec(["a"], [], {}, [], preempted=["a"])
    fires(P.conservation(view(r)), "conservation", "clause preempted")


def test_conservation_scheduled_clause() -> None:
    r = rec(["b"], ["a"], {"a": 1, "b": 1}, [])
    fires(P.conservation(view(r)), "conservation", "clause scheduled")


def test_conservation_finished_clause() -> None:
    r = rec([], ["a", "c"], {"a": 1}, [])
    r.finished = ["c"]
    fires(P.conservation(view(r)), "conservation", "clause finished")


# ---- fifo_within_adapter -----------------------------------------------------

def test_fifo_clause_and_its_scope() -> None:
    adapter_two = {"x": 1, "y": 1}
    r = rec(["x", "y"], [], {"y": 1}, ["y"])
    v = view(r, seq={"x": 0, "y": 1, **{k: 9 for k in ADAPTER}})
    v.adapter.update(adapter_two)
    v.priority.update({"x": 0, "y": 0})
    fires(P.fifo_within_adapter(v), "fifo_within_adapter", "first admitted before 'x'")
    # different priority, or 'x' admitted earlier, or 'y' only resumed: no violation
    v2 = replace(v, priority={**v.priority, "x": 1})
    assert P.fifo_within_adapter(v2) is None
    assert P.fifo_within_adapter(replace(v, ever_admitted={"x"})) is None
    assert P.fifo_within_adapter(replace(v, ever_admitted={"y"})) is None


# ---- no_hol_blocking -----------------------------------------------------------
# One base step: "a" (adapter 1) runs with 1 token, "b" (adapter 2) is cap-blocked
# (max_loras 1), "base" fits and is left waiting: a violation. Each declared
# hold, applied to "base", makes the step pass.

def _hol(**kw: object) -> P.StepView:
    r = rec(["b", "base"], ["a"], {"a": 1}, [])
    return view(r, **kw)  # type: ignore[arg-type]


def test_no_hol_fires_on_a_request_that_fits() -> None:
    fires(P.no_hol_blocking(_hol()), "no_hol_blocking", "'base'")


def test_no_hol_lora_cap_is_a_hold_only_when_full() -> None:
    # with max_loras 2 "b" fits too and is the first left waiting
    cfg = Config(max_loras=2, max_num_seqs=4, max_num_batched_tokens=8)
    fires(P.no_hol_blocking(_hol(config=cfg)), "no_hol_blocking", "'b'")


def test_no_hol_declared_stops() -> None:
    base = Config(max_loras=1, max_num_seqs=4, max_num_batched_tokens=8)
    # seats full
    assert P.no_hol_blocking(_hol(config=replace(base, max_num_seqs=1))) is None
    # budget spent by the running phase
    r = rec(["b", "base"], ["a"], {"a": 8}, [])
    assert P.no_hol_blocking(view(r, config=base)) is None
    # no chunking and the prompt does not fit the budget left (7)
    nochunk = replace(base, chunked_prefill=False)
    assert P.no_hol_blocking(_hol(config=nochunk, num_tokens={**{k: 2 for k in ADAPTER}, "base": 8})) is None
    fires(P.no_hol_blocking(_hol(config=nochunk)), "no_hol_blocking", "'base'")
    # the whole sequence does not fit the free KV blocks
    kv = replace(base, kv_blocks=3, block_size=1)
    assert P.no_hol_blocking(_hol(config=kv, used_before_scan=2)) is None
    fires(P.no_hol_blocking(_hol(config=kv, used_before_scan=1)), "no_hol_blocking", "'base'")
    # a step that preempted has no waiting scan
    r = rec(["b", "base"], ["a"], {"a": 1}, [], preempted=["c"])
    assert P.no_hol_blocking(view(r, config=base, running_after=["a"])) is None


def test_no_hol_throttle_stop() -> None:
    # on a throttled step the scan stops at a request needing more than one token...
    r = rec(["b", "base"], ["a"], {"a": 1}, [])
    r.throttle = True
    assert P.no_hol_blocking(view(r)) is None
    # ...but a one-token prompt is still admitted: leaving it is a violation
    fires(P.no_hol_blocking(view(r, num_tokens={**{k: 2 for k in ADAPTER}, "base": 1})), "no_hol_blocking",
          "'base'")


def test_no_hol_async_output_in_flight_is_a_hold() -> None:
    assert P.no_hol_blocking(_hol(in_flight={"base"})) is None


def test_no_hol_long_prefill_threshold_caps_the_chunk_before_the_no_chunk_stop() -> None:
    cfg = Config(max_loras=1, max_num_seqs=4, max_num_batched_tokens=8, chunked_prefill=False,
                 long_prefill_token_threshold=2)
    # the prompt (20) does not fit, but vLLM caps the chunk at 2 first: it fits
    fires(P.no_hol_blocking(_hol(config=cfg, num_tokens={**{k: 2 for k in ADAPTER}, "base": 20})),
          "no_hol_blocking", "'base'")


class _HoldBase:
    """A policy that declares "base" held and visits "base" first."""

    def __init__(self, first: str | None = None) -> None:
        self.first = first

    def begin(self, view: P.StepView) -> str | None:
        return self.first

    def hold(self, view: P.StepView, rid: str) -> str | None:
        return "held" if rid == "base" else None

    def end(self, view: P.StepView) -> None:
        pass


def test_no_hol_policy_holds_and_first_visit() -> None:
    assert P.no_hol_blocking(_hol(), _HoldBase()) is None
    # seats for one admission: "c" (adapter 3, not full: max_loras 2) admitted
    # though "base" came first in queue order: a violation unless the policy
    # visits "c" first
    cfg = Config(max_loras=2, max_num_seqs=2, max_num_batched_tokens=8)
    r = rec(["base", "c"], ["a"], {"a": 1, "c": 2}, ["c"])
    fires(P.no_hol_blocking(view(r, config=cfg)), "no_hol_blocking", "'base'")
    assert P.no_hol_blocking(view(r, config=cfg), _HoldBase(first="c")) is None


def test_no_hol_judges_each_request_at_its_turn() -> None:
    # "c" admitted takes the last seat after "base" was passed over: the
    # replay in queue order finds "base" while a seat was still free
    cfg = Config(max_loras=2, max_num_seqs=2, max_num_batched_tokens=8)
    r = rec(["base", "c"], ["a"], {"a": 1, "c": 2}, ["c"])
    fires(P.no_hol_blocking(view(r, config=cfg)), "no_hol_blocking", "1 seats")
    # judged at the end of the step (no seat left) it would pass
    r2 = rec(["c", "base"], ["a"], {"a": 1, "c": 2}, ["c"])
    assert P.no_hol_blocking(view(r2, config=cfg)) is None


# ---- bounded_wait ------------------------------------------------------------

@pytest.mark.parametrize(("reqs", "last", "fire"), [
    ({"x": (1, 5, "running")}, 9, True),  # first admitted after 4 > 3 steps
    ({"x": (1, 4, "running")}, 9, False),  # exactly B
    ({"x": (1, None, "waiting")}, 5, True),  # never admitted, waited 4 so far
    ({"x": (1, None, "waiting")}, 4, False),
    ({"x": (1, None, "aborted")}, 9, False),  # an aborted request is not judged
])
def test_bounded_wait_clauses(reqs: dict, last: int, fire: bool) -> None:
    v = P.bounded_wait(reqs, last, 3)
    assert (v is not None) == fire, v
    if fire:
        assert v is not None and "'x' waited 4 steps > B = 3" in v.message and v.step == 5
