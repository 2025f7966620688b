"""The properties of DESIGN section 3, each a named predicate.

A step predicate takes a `StepView` (the state when `schedule()` started,
the step record, and the KV blocks held after it) and returns `None` when
the property holds or a `Violation` naming the step, the property and the
clause that failed. `bounded_wait` is judged over a whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from lora_sched.spec import releases
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.state import StepRecord, blocks_for


@dataclass(frozen=True)
class Violation:
    property: str
    step: int
    message: str
    line: int | None = None  # the trace line of the step, when judged on a trace file

    def where(self) -> str:
        return f"step {self.step}" + (f" (line {self.line})" if self.line is not None else "")

    def __str__(self) -> str:
        return f"{self.property}: VIOLATED at {self.where()}: {self.message}"


@dataclass(slots=True)
class StepView:
    """The per-request mappings cover at least every request the step names
    and every request waiting or running when it starts (the observer keeps
    no more: finished and aborted requests it is not asked about are not in
    `status`)."""

    config: Config
    rec: StepRecord
    adapter: Mapping[str, int]
    num_tokens: Mapping[str, int]  # prompt + sampled tokens, when the step starts
    computed: Mapping[str, int]
    waiting_since: Mapping[str, int]
    arrival: Mapping[str, int]
    priority: Mapping[str, int]
    seq: Mapping[str, int]  # arrival order
    ever_admitted: Container[str]  # first-admitted before this step
    status: Mapping[str, str]  # waiting | running | finished | aborted, before the step
    running_after: list[str]  # running once the step is scheduled
    blocks_after: dict[str, int]  # KV blocks of running_after (the observer leaves it empty when KV is unlimited)
    used_before_scan: int  # KV blocks held when the waiting scan starts (read only when KV is limited)
    in_flight: Container[str]  # async: requests whose previous output is not applied
    outputs_left: Mapping[str, int] = field(default_factory=dict)  # max_tokens - outputs applied, at the start
    # Optional, for speed: the requests whose `status` is "waiting" and
    # "running" (the observer keeps them); `conservation` then compares sets
    # instead of walking `status`, and reads `status` only to name a culprit.
    by_status: Mapping[str, AbstractSet[str]] | None = None


def _loras(view: StepView, ids: list[str] | dict[str, int]) -> set[int]:
    adapter = view.adapter
    return {a for r in ids if (a := adapter[r]) > 0}


def _within(view: StepView, ids: list[str] | dict[str, int]) -> bool:
    """At most `max_loras` adapters (> 0) among `ids`, told without a Python
    loop: the distinct adapters less the base model bound those above 0."""
    if len(ids) <= view.config.max_loras:
        return True
    adapters = set(map(view.adapter.__getitem__, ids))
    return len(adapters) - (0 in adapters) <= view.config.max_loras


def batch_lora_cap(view: StepView) -> Violation | None:
    """Distinct adapters (> 0) among the requests scheduled in one step are at
    most `max_loras`: the batch fits the LoRA slots of the model runner."""
    if _within(view, view.rec.scheduled):
        return None
    loras = _loras(view, view.rec.scheduled)
    if len(loras) > view.config.max_loras:
        return Violation("batch_lora_cap", view.rec.step,
                         f"{len(loras)} adapters {sorted(loras)} scheduled > max_loras {view.config.max_loras}")
    return None


def running_lora_cap(view: StepView) -> Violation | None:
    """Distinct adapters (> 0) among all running requests (scheduled or not)
    are at most `max_loras` once the step is scheduled."""
    if _within(view, view.running_after):
        return None
    loras = _loras(view, view.running_after)
    if len(loras) > view.config.max_loras:
        return Violation("running_lora_cap", view.rec.step,
                         f"{len(loras)} adapters {sorted(loras)} running > max_loras {view.config.max_loras}")
    return None


def capacity(view: StepView) -> Violation | None:
    """Running requests <= `max_num_seqs`; scheduled tokens <=
    `max_num_batched_tokens`; KV blocks held <= `kv_blocks` (when limited)."""
    cfg, step = view.config, view.rec.step
    if len(view.running_after) > cfg.max_num_seqs:
        return Violation("capacity", step,
                         f"clause running: {len(view.running_after)} running > max_num_seqs {cfg.max_num_seqs}")
    tokens = sum(view.rec.scheduled.values())
    if tokens > cfg.max_num_batched_tokens:
        return Violation("capacity", step, f"clause tokens: {tokens} scheduled > "
                         f"max_num_batched_tokens {cfg.max_num_batched_tokens}")
    if cfg.kv_blocks is not None:
        used = sum(view.blocks_after.values())
        if used > cfg.kv_blocks:
            return Violation("capacity", step, f"clause kv: {used} blocks held > kv_blocks {cfg.kv_blocks}")
    return None


def conservation(view: StepView) -> Violation | None:
    """Every request is in exactly one of waiting / running / finished /
    aborted, and moves only by the transitions the steps record: the queues a
    step lists when `schedule()` starts are those its events imply (arrivals
    and preemptions join `waiting`, admissions join `running`, finishes and
    aborts leave), and the step admits only waiting requests, preempts only
    running ones, schedules only running or admitted ones (every admitted
    one), and finishes only scheduled ones. A request that leaves `running`
    without finishing, being preempted or aborted is lost; one that comes
    back after finishing is duplicated."""
    rec = view.rec
    by = view.by_status
    if by is not None:
        # The common case, told by set operations: listed as they were (none
        # lost, none listed wrongly), and every move is one the lists allow.
        waiting, running = set(rec.waiting), set(rec.running)
        if waiting.isdisjoint(running) and by["waiting"] == waiting and by["running"] == running:
            keys = rec.scheduled.keys()
            after = running - set(rec.preempted) if rec.preempted else running
            if ((not rec.admitted or (waiting.issuperset(rec.admitted) and keys >= set(rec.admitted)))
                    and (not rec.preempted or running.issuperset(rec.preempted))
                    and (not (extra := keys - after) or extra.issubset(rec.admitted))
                    and (not rec.finished or keys >= set(rec.finished))):
                return None
    return _conservation(view)


def _conservation(view: StepView) -> Violation | None:
    """`conservation` clause by clause, naming the first that fails."""
    rec, step = view.rec, view.rec.step

    def bad(clause: str, msg: str) -> Violation:
        return Violation("conservation", step, f"clause {clause}: {msg}")

    sets = {"waiting": set(rec.waiting), "running": set(rec.running)}
    both = sets["waiting"] & sets["running"]
    if both:
        return bad("duplicated", f"request {min(both)!r} is listed both waiting and running")
    lost: dict[str, str] = {}  # where -> the first request (arrival order) that was there and is not listed
    for rid, st in view.status.items():
        if st in sets and st not in lost and rid not in sets[st]:
            lost[st] = rid
    for where in ("waiting", "running"):
        listed = getattr(rec, where)
        gone = lost.get(where)
        if gone is not None:
            other = "running" if where == "waiting" else "waiting"
            fate = f"listed {other}" if gone in sets[other] else "gone"
            return bad("lost", f"request {gone!r} was {where} and is {fate} without a recorded "
                       "admission, preemption, finish or abort")
        for rid in listed:
            if view.status.get(rid) != where:
                return bad("listed", f"request {rid!r} is listed {where} but was {view.status.get(rid)}")
    running = sets["running"] - set(rec.preempted)
    for rid in rec.admitted:
        if rid not in sets["waiting"]:
            return bad("admitted", f"request {rid!r} admitted while not waiting")
        if rid not in rec.scheduled:
            return bad("admitted", f"request {rid!r} admitted but not scheduled")
    for rid in rec.preempted:
        if rid not in sets["running"]:
            return bad("preempted", f"request {rid!r} preempted while not running")
    for rid in rec.scheduled:
        if rid not in running and rid not in rec.admitted:
            return bad("scheduled", f"request {rid!r} scheduled while not running")
    for rid in rec.finished:
        if rid not in rec.scheduled:
            return bad("finished", f"request {rid!r} finished without being scheduled this step")
    return None


def fifo_within_adapter(view: StepView) -> Violation | None:
    """Two requests of one adapter and one priority are first admitted in
    arrival order: none is first admitted while an earlier-arrived request of
    its adapter and priority is still waiting, never admitted."""
    rec = view.rec
    if not rec.admitted:
        return None
    admitted_now: set[str] = set()
    by = view.by_status
    for rid in rec.admitted:
        if rid in view.ever_admitted:
            continue
        key = (view.adapter[rid], view.priority[rid])
        if by is not None and not any(
            other not in view.ever_admitted and other not in admitted_now
            and (view.adapter[other], view.priority[other]) == key and view.seq[other] < view.seq[rid]
            for other in by["waiting"]
        ):
            admitted_now.add(rid)  # no earlier request of its key waits (told on the waiting ones only)
            continue
        for other, st in view.status.items():
            if (
                st == "waiting"
                and other not in view.ever_admitted
                and other not in admitted_now
                and (view.adapter[other], view.priority[other]) == key
                and view.seq[other] < view.seq[rid]
            ):
                return Violation("fifo_within_adapter", rec.step,
                                 f"{rid!r} first admitted before {other!r}, which arrived earlier "
                                 f"with the same adapter {key[0]} and priority {key[1]}")
        admitted_now.add(rid)
    return None


class PolicyHolds(Protocol):
    """What a policy declares beyond vLLM's own holds (see `no_hol_blocking`).

    Called in step order: `begin` once when a step's waiting scan starts (not
    in a step that preempted), `hold` for requests left waiting, `end` after
    every step."""

    def begin(self, view: StepView) -> str | None:
        """Start judging a scan; returns a request visited before queue order, if any."""
        ...

    def hold(self, view: StepView, rid: str) -> str | None:
        """The reason the policy leaves `rid` waiting on purpose, or None."""
        ...

    def end(self, view: StepView) -> None:
        """The step is over (scan or not)."""
        ...


def no_hol_blocking(view: StepView, holds: PolicyHolds | None = None) -> Violation | None:
    """A step leaves no waiting request unadmitted that the LoRA cap and
    capacity would have let in, modulo the holds vLLM declares (no scan in a
    step that preempted; the scan stops at the first request that does not
    fit the seats, the token budget, the KV blocks for its whole sequence, or,
    without chunked prefill, the budget for its prompt, and, on a step the DP
    engine core throttles, at the first request needing more than one token;
    async output still in flight) and those the policy declares (`holds`).
    On a throttled step vLLM stops only while something decodes and no request
    waits for capacity; the property allows the stop on every throttled step,
    since a trace does not say which.

    The scan is replayed in queue order: each request is judged against the
    capacity left when the scan reached it, not at the end of the step."""
    cfg, rec = view.config, view.rec
    if rec.preempted:
        return None
    sched, admitted = rec.scheduled, set(rec.admitted)
    budget = cfg.max_num_batched_tokens - (
        sum(n for r, n in sched.items() if r not in admitted) if admitted else sum(sched.values()))
    seats = len(rec.running)
    # The set vLLM counts before its scan (spec.releases, cap_counts): the
    # running requests it scheduled (0.32), or every running one (0.33).
    counted = rec.running if releases.get(cfg.vllm).cap_counts == "running" else \
        [r for r in sched if r not in admitted] if admitted else sched
    adapter = view.adapter
    loras = {a for r in counted if (a := adapter[r]) > 0}
    used = view.used_before_scan
    order = rec.waiting
    first = holds.begin(view) if holds is not None else None
    if first is not None and first in order:
        order = list(order)
        order.remove(first)
        order.insert(0, first)
    for rid in order:
        if budget <= 0 or seats >= cfg.max_num_seqs:
            return None
        if rid in admitted:
            budget -= rec.scheduled.get(rid, 0)
            seats += 1
            used += view.blocks_after.get(rid, 0)
            if view.adapter[rid] > 0:
                loras.add(view.adapter[rid])
            continue
        if rid in view.in_flight:
            continue  # stale async output: vLLM skips it
        a = view.adapter[rid]
        if cap_blocks(loras, a, cfg.max_loras):
            continue  # the LoRA cap forbids it
        if holds is not None and holds.hold(view, rid):
            continue
        need = view.num_tokens[rid] - view.computed[rid]
        if rec.throttle and need > 1:
            return None  # declared stop: a throttled step defers prefills (DP prefill balancing)
        threshold = releases.prefill_threshold(releases.get(cfg.vllm), cfg.long_prefill_token_threshold,
                                               cfg.chunked_prefill)
        if len(rec.running) + len(rec.waiting) > 1 and 0 < threshold < need:
            need = threshold  # vLLM caps the chunk before this check
        if not cfg.chunked_prefill and need > budget:
            return None  # declared stop: prefill does not fit without chunking
        if cfg.kv_blocks is not None and blocks_for(view.num_tokens[rid], cfg.block_size) > cfg.kv_blocks - used:
            return None  # declared stop: whole sequence does not fit the KV blocks
        return Violation("no_hol_blocking", rec.step,
                         f"{rid!r} (adapter {a}) left waiting although the LoRA cap "
                         f"({sorted(loras)} of {cfg.max_loras}) and capacity ({budget} tokens, "
                         f"{cfg.max_num_seqs - seats} seats) let it in")
    return None


def bounded_wait(
    requests: dict[str, tuple[int, int | None, str]], last_step: int, bound: int
) -> Violation | None:
    """Every request is first admitted within `bound` steps of arriving; a
    request never admitted (and not aborted) has waited `last_step - arrival`.
    `requests` maps id -> (arrival, first admitted step or None, status)."""
    worst: tuple[int, str, int] | None = None
    for rid, (arrival, first, status) in requests.items():
        if first is not None:
            wait = first - arrival
        elif status == "aborted":
            continue
        else:
            wait = last_step - arrival
        if wait > bound and (worst is None or wait > worst[0]):
            worst = (wait, rid, arrival + bound + 1)
    if worst is not None:
        wait, rid, step = worst
        return Violation("bounded_wait", step, f"{rid!r} waited {wait} steps > B = {bound}")
    return None


STEP_PROPERTIES: dict[str, Callable[..., Violation | None]] = {
    "batch_lora_cap": batch_lora_cap,
    "running_lora_cap": running_lora_cap,
    "capacity": capacity,
    "conservation": conservation,
    "fifo_within_adapter": fifo_within_adapter,
    "no_hol_blocking": no_hol_blocking,
}
ALL_PROPERTIES = [*STEP_PROPERTIES, "bounded_wait"]
