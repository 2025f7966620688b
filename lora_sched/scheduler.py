"""`fair` (and `blocking`, and the field's gates) as vLLM scheduler classes: deploy with one flag,
`--scheduler-cls lora_sched.scheduler.AsyncFairScheduler` (README.md, "Deploy fair in vLLM").

`AsyncFairScheduler` subclasses vLLM's `AsyncScheduler` (its default on
GPU), `FairScheduler` the synchronous `Scheduler`; each field gate
(`DrainerScheduler`, `TimesliceScheduler`, `VtcScheduler`) has an `Async`
twin. Every policy class is `GateMixin` driving the reference's gate
(`policy.make_gate`) from vLLM's own state; `lora_sched.hook` adds the two
calls to vLLM's `schedule()`, `lora_sched.queues` holds the waiting queue as
the scan sees it, and `LORA_SCHED_TRACE=PATH` records a trace
(`lora_sched.recorder`). `starvation_steps`: README, "Deploy fair in vLLM".
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from lora_sched.hook import RELEASE, SCHEDULE, SUPPORTED_VLLM, UnsupportedVllm, check_version, hook_schedule
from lora_sched.policy import make_gate
from lora_sched.policy.gate import Decision, Gate, ScanContext
from lora_sched.queues import PLAIN, PassOverQueue, ScanOrderQueue, adapter_of, salvage
from lora_sched.recorder import RecorderMixin, config_of, unmodelled
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request as SpecRequest
from lora_sched.spec.state import ReqState, State

__all__ = ["CLASSES", "RELEASE", "SUPPORTED_VLLM", "AsyncFairScheduler", "FairScheduler", "GateMixin",
           "PassOverQueue", "ScanOrderQueue", "UnsupportedVllm", "check_version", "hook_schedule", "settings_from"]

_log = init_logger("vllm.lora_sched")  # under "vllm", whose handlers vLLM configures
CONFIG_KEY = "lora_sched"
SETTINGS = {"starvation_steps": Config().starvation_steps}


# ---- settings ---------------------------------------------------------------------

def settings_from(vllm_config: Any) -> dict[str, int]:
    """lora_sched's settings from `--additional-config '{"lora_sched": {...}}'`, validated."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    raw = extra.get(CONFIG_KEY, {}) if isinstance(extra, dict) else {}
    if not isinstance(raw, dict):
        raise ValueError(f"--additional-config: {CONFIG_KEY!r} must be an object, got {raw!r}")
    unknown = sorted(set(raw) - set(SETTINGS))
    if unknown:
        raise ValueError(f"--additional-config: unknown {CONFIG_KEY} setting(s) {unknown}; "
                         f"known: {sorted(SETTINGS)}")
    out = dict(SETTINGS)
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"--additional-config: {CONFIG_KEY}.{key} must be an integer >= 0, got {value!r}")
        out[key] = value
    return out


# ---- the policies ------------------------------------------------------------------

_SKIP = Decision.SKIP.value  # what the hooked `if` reads as vLLM's own skip
_HOLD = "fair_guard"  # `FairGate.decide`'s reason when it holds a request for r*


# `GateMixin._fault`: what each hook expects of the state it reads.
_EXPECTED = {
    "enqueue": "a request vLLM queues to be new or tracked",
    "streaming update": "the session taking its next chunk to be tracked",
    "preempt": "the request vLLM preempts to be tracked",
    "free": "the request vLLM frees to be tracked once",
    "scan start": "the gate's index to hold only requests in vLLM's waiting queues",
    "decide": "every request vLLM's scan reaches to be tracked and indexed",
    "pass-over": "the pass-over tally to match vLLM's waiting queue",
    "scan end": "vLLM's waiting queue to come back whole from the scan",
    "step end": "every running request to be tracked",
}


class Drift(LookupError):
    """The gate names a request vLLM does not hold (`rid`)."""

    def __init__(self, rid: str, what: str) -> None:
        super().__init__(f"{what}: {rid!r}")
        self.rid = rid


class HookedMixin:
    """vLLM's `schedule()` with the two hooks; the defaults keep vLLM's behaviour."""

    policy_name = "vllm"
    schedule = SCHEDULE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        why = unmodelled(self)  # type: ignore[arg-type]
        if why is not None:
            raise ValueError(f"lora_sched: {self.policy_name} cannot run: {why}")

    def _lora_gate(self, request: Request, scheduled_loras: set[int]) -> str:
        """'admit', 'skip' (keep scanning) or 'stop' (end the scan): vLLM's rule."""
        s: Any = self
        if s.lora_config is None or request.lora_request is None:
            return "admit"
        if cap_blocks(scheduled_loras, adapter_of(request), s.lora_config.max_loras):
            return self._on_cap(request)
        return "admit"

    def _on_cap(self, request: Request) -> str:
        return "skip"

    def _before_waiting_scan(self, scheduled_loras: set[int]) -> None:
        """Called when vLLM starts its waiting scan (nothing was preempted)."""


class BlockingMixin(HookedMixin):
    """`blocking` (V1 before PR #15422): the LoRA cap ends the scan."""

    policy_name = "blocking"

    def _on_cap(self, request: Request) -> str:
        return "stop"


class GateMixin(HookedMixin):
    """Any reference gate (`policy.gate.Gate`) inside vLLM's `schedule()`.

    The gate is the object `policy.make_gate(policy_name)` builds, the one the
    reference core runs; this class feeds it vLLM's state where the core calls
    it (`mirror`, a `spec.state.State` read from vLLM at each call) and, for
    `fair`, passes over (`PassOverQueue`) the requests `decide` would skip. What
    raises in its own code is logged once and resynced (`resync`, `faults`):
    docs/conformance.md, "The deploy classes never take the engine down".
    """

    pass_over_queue: type[PassOverQueue] = PassOverQueue
    # Read by `_fault` even on an instance built without `__init__` (vLLM's tests do).
    faults = 0  # inconsistencies caught (`_fault`), over the scheduler's life
    _stock = False  # this step runs vLLM's own rule (after a fault)
    _resync_due = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        s: Any = self
        self.starvation_steps = settings_from(s.vllm_config)["starvation_steps"]
        self.gate: Gate = make_gate(self.policy_name)
        # A gate with `front` indexes `waiting` from enqueued / dequeued and
        # pins only the requests it visits first: the mirror's `waiting` is not
        # rebuilt each step (`_sync_running`).
        self._indexed = hasattr(self.gate, "front")
        self.mirror = State(config_of(s, self.policy_name))
        _log.info("lora_sched: %s on %s, starvation_steps=%d, max_loras=%s", self.policy_name,
                  type(self).__name__, self.starvation_steps, s.lora_config.max_loras if s.lora_config else None)
        self._arrivals = 0
        self._ctx: ScanContext | None = None
        self._candidate: Request | None = None  # let through by decide; admitted once it is running
        self._star_front: tuple[Request, list[Request]] | None = None  # r* moved first, what was ahead of it
        # `Gate.cap_closed` (fair): while not None, a request of an adapter (> 0)
        # outside it is skipped without a call to `decide`, unless `front` put it first;
        # so is one of an adapter in `held_for_scan` (fair's holds, for the rest of the scan).
        self._closed: set[int] | None = None
        self._held: set[int] | frozenset[int] = frozenset()
        self._first: set[str] = set()
        # ... and passed over before vLLM's loop reaches them (`PassOverQueue`).
        self._passes_over = self._indexed and hasattr(self.gate, "cap_closed")
        self.passed = 0  # requests passed over, over the scheduler's life
        self.tails_first = 0  # scans that ended after the tail (`PassOverQueue._tail_first`)
        self._stop_back: dict[int, int] = {}  # `PassOverQueue._places`: where the last scan found them
        self._forget()
        if not self._indexed:
            s.waiting = ScanOrderQueue(s.waiting)

    def _forget(self) -> None:
        """No request tracked: what `__init__` and `resync` start from."""
        self._key: dict[Request, str] = {}  # vLLM's request -> its key in the mirror and the gate
        self._req: dict[str, Request] = {}  # ... and back
        self._freed: list[tuple[str, ReqState]] = []  # freed since the last schedule() began
        self._resumed: set[Request] = set()  # preempted, maybe with async output in flight
        self._paused: set[Request] = set()  # streaming sessions waiting for their client
        self._blocked: set[Request] = set()  # queued in a blocked status (structured output's grammar)
        self._tail: list[Request] = []  # arrived since the last waiting scan (`PassOverQueue.tail`)
        self._by_adapter: dict[int, set[Request]] = {}  # waiting requests per adapter (`PassOverQueue._jump`)

    # ---- fail safe ---------------------------------------------------------------
    def _fault(self, where: str, request: Request | None, exc: BaseException) -> None:
        """An exception in this class's own code: logged (once a step), vLLM's
        rule for the rest of the step, and a resync when `schedule()` returns."""
        if not self._resync_due:
            rid = request.request_id if request is not None else getattr(exc, "rid", None)
            _log.warning("lora_sched: %s: inconsistent state at %s (request %r): expected %s; got %s: %s; "
                         "scheduling as stock vLLM until this step ends, then resynchronising from vLLM's "
                         "queues", self.policy_name, where, rid, _EXPECTED[where], type(exc).__name__, exc)
        self.faults += 1
        self._stock = self._resync_due = True
        self._closed, self._held, self._first, self._candidate = None, frozenset(), set(), None

    def resync(self) -> None:
        """Rebuild the mirror and the gate from vLLM's queues (`running`, then
        the waiting queues in vLLM's order), each request keeping its arrival
        order and wait; the gate starts afresh."""
        s: Any = self
        old, old_key = self.mirror.reqs, self._key
        self.gate = make_gate(self.policy_name)
        self.mirror = State(self.mirror.config, step=s.current_step)
        self._forget()
        self._ctx, self._candidate, self._star_front = None, None, None
        self._closed, self._held, self._first = None, frozenset(), set()
        queued = [*s.kv_holding_waiting, *s.waiting]

        def prior_of(r: Request) -> ReqState | None:
            prior = old.get(old_key.get(r, "\x00"))
            return prior if prior is not None and prior.req.id == r.request_id else None

        for r in sorted({*s.running, *queued}, key=lambda r: getattr(prior_of(r), "seq", 1 << 62)):
            prior = prior_of(r)
            rs = self._track(r, s.current_step)
            if prior is not None:
                rs.seq, rs.waiting_since, rs.first_admitted = prior.seq, prior.waiting_since, prior.first_admitted
                rs.preemptions = prior.preemptions
        self.mirror.running = [self._key[r] for r in s.running]
        for r in s.running:
            self.mirror.reqs[self._key[r]].status = "running"
        for r in queued:
            self._queued(r, self.mirror.reqs[self._key[r]].waiting_since)
            if self._indexed and r.num_stale_output_tokens:  # async output of its last run in flight
                self._resumed.add(r)
        for r in self._key:
            self._sync_one(r)
        self._stock = self._resync_due = False

    # ---- the mirror ------------------------------------------------------------
    def _spec_request(self, request: Request, arrival: int) -> SpecRequest:
        """The mirror's request: what a gate reads (adapter, outputs, priority).
        A streaming session's empty first chunk counts one prompt token."""
        sp = request.sampling_params
        return SpecRequest(request.request_id, adapter_of(request), max(1, request.num_prompt_tokens),
                           int(sp.max_tokens if sp is not None and sp.max_tokens else 1), arrival,
                           int(request.priority))

    def _track(self, request: Request, arrival: int) -> ReqState:
        """A mirror entry for `request`, under a key no other entry holds."""
        rid = request.request_id
        key = rid if rid not in self.mirror.reqs else f"{rid}\x00{self._arrivals}"
        rs = ReqState(req=self._spec_request(request, arrival), seq=self._arrivals, waiting_since=arrival)
        self._arrivals += 1
        self.mirror.reqs[key] = rs
        self._key[request], self._req[key] = key, request
        return rs

    def _queued(self, request: Request, since: int) -> None:
        """`request` is in vLLM's waiting queues since step `since`: index it,
        unless it is a session waiting for its client."""
        key = self._key[request]
        rs = self.mirror.reqs[key]
        rs.status, rs.waiting_since = "waiting", since
        if request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:  # out of the index, if it was in
            self._paused.add(request)
            self.gate.dequeued(self.mirror, key)  # (preempted before its turn ended)
            self._by_adapter.get(adapter_of(request), set()).discard(request)
            return
        if request.status not in PLAIN:
            self._blocked.add(request)
        if self._passes_over:
            self._by_adapter.setdefault(adapter_of(request), set()).add(request)
        self.gate.enqueued(self.mirror, self._key[request])

    def _enqueue_waiting_request(self, request: Request) -> None:
        """vLLM queues `request`: an arrival, or a session whose turn ended."""
        super()._enqueue_waiting_request(request)  # type: ignore[misc]
        try:
            s: Any = self
            if request not in self._key:
                self._track(request, s.current_step + 1)
                self._queued(request, s.current_step + 1)
            else:  # a resumable session back from `running`, between two steps
                self._queued(request, s.current_step + 1)
            if self._passes_over:
                self._tail.append(request)
        except Exception as exc:
            self._fault("enqueue", request, exc)

    def _update_request_as_session(self, session: Request, update: Any) -> None:
        """A streaming session takes its next chunk: its prompt and outputs
        change; one waiting for its client is indexed from now."""
        super()._update_request_as_session(session, update)  # type: ignore[misc]
        try:
            s: Any = self
            rs = self.mirror.reqs[self._key[session]]
            rs.req = self._spec_request(session, rs.req.arrival)
            if session in self._paused:
                self._paused.discard(session)
                self._queued(session, s.current_step + 1)
        except Exception as exc:
            self._fault("streaming update", session, exc)

    def _preempt_request(self, request: Request, *args: Any, **kwargs: Any) -> None:
        s: Any = self
        super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        try:
            rs = self.mirror.reqs[self._key[request]]
            rs.preemptions += 1
            if self._indexed:  # `_sync_running` syncs it until it runs again
                self._resumed.add(request)
            self._queued(request, s.current_step)
        except Exception as exc:
            self._fault("preempt", request, exc)

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        try:
            self._untrack(request)
        except Exception as exc:
            self._fault("free", request, exc)
        return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]

    def _untrack(self, request: Request) -> None:
        """vLLM frees `request`: out of the index; its entry stays, finished,
        until the next `schedule()` ends."""
        self._by_adapter.get(adapter_of(request), set()).discard(request)
        self._resumed.discard(request)
        self._blocked.discard(request)
        paused = request in self._paused
        self._paused.discard(request)
        key = self._key.pop(request, None)
        if key is None:
            return
        self._req.pop(key, None)
        rs = self.mirror.reqs[key]
        if rs.status == "waiting" and not paused:
            self.gate.dequeued(self.mirror, key)
        rs.generated = request.num_output_tokens
        rs.status = "aborted" if request.status == RequestStatus.FINISHED_ABORTED else "finished"
        (self.mirror.aborted if rs.status == "aborted" else self.mirror.finished).add(key)
        self._freed.append((key, rs))

    def _sync_one(self, r: Request) -> None:
        rs = self.mirror.reqs[self._key[r]]
        rs.generated = r.num_output_tokens
        rs.computed = r.num_computed_tokens
        rs.stale = r.num_stale_output_tokens
        rs.placeholders = r.num_output_placeholders

    def _sync_running(self) -> None:
        """For a gate that indexes `waiting` itself (`Gate.front`): `running`,
        its counters, and the preempted requests whose async output may be in
        flight, in O(running)."""
        s: Any = self
        st, key = self.mirror, self._key
        st.step = s.current_step
        st.running = [key[r] for r in s.running]
        for r in s.running:
            st.reqs[key[r]].status = "running"
            self._sync_one(r)
        for r in list(self._resumed):
            if r.status == RequestStatus.RUNNING or not r.num_stale_output_tokens:
                self._resumed.discard(r)
            self._sync_one(r)

    def _sync(self) -> None:
        """Queues, statuses and counters from vLLM, as they are now."""
        if self._indexed:
            self._sync_running()
            return
        s: Any = self
        st, key = self.mirror, self._key
        st.step = s.current_step
        waiting = [*s.kv_holding_waiting, *s.waiting]
        st.waiting = [key[r] for r in waiting]
        st.running = [key[r] for r in s.running]
        for r in (*waiting, *s.running):
            st.reqs[key[r]].status = "running" if r.status == RequestStatus.RUNNING else "waiting"
            self._sync_one(r)

    def _flush_admitted(self) -> None:
        """Tell the gate about the request it let through, if it joined `running`."""
        request, self._candidate = self._candidate, None
        if request is None or request.status != RequestStatus.RUNNING or self._ctx is None:
            return
        key = self._key[request]
        self._by_adapter.get(adapter_of(request), set()).discard(request)
        rs = self.mirror.reqs[key]
        rs.status = "running"
        if rs.first_admitted is None:
            rs.first_admitted = self.mirror.step
        self.mirror.running.append(key)
        self.gate.admitted(self._ctx, key)
        self._refresh_closed()

    def _refresh_closed(self) -> None:
        closed: Any = getattr(self.gate, "cap_closed", None)
        self._closed = None if closed is None or self._ctx is None else closed(self._ctx)
        self._refresh_held()

    def _refresh_held(self) -> None:
        held: Any = getattr(self.gate, "held_for_scan", None)
        self._held = frozenset() if held is None else held()

    # ---- the hooks ---------------------------------------------------------------
    def _before_waiting_scan(self, scheduled_loras: set[int]) -> None:
        if self._stock:
            return
        try:
            self._begin_scan(scheduled_loras)
        except Exception as exc:
            self._fault("scan start", None, exc)

    def _begin_scan(self, scheduled_loras: set[int]) -> None:
        s: Any = self
        self._sync()
        self._ctx = ScanContext(self.mirror, s.current_step, scheduled_loras)
        if self._indexed:  # the gate indexes `waiting`: only what it puts first moves
            front: Any = self.gate
            first = []
            for key in front.front(self._ctx):
                if key not in self._req:
                    raise Drift(key, "r* is not a request vLLM holds")
                first.append(self._req[key])
            self._first = {r.request_id for r in first}
            if first:
                self._put_first(first[0])
            self._refresh_closed()
            if self._passes_over:
                if self._blocked:
                    self._blocked = {r for r in self._blocked if s._is_blocked_waiting_status(r.status)}
                s.waiting = queue = self.pass_over_queue(s.waiting, self)
                queue.count(front.waiting_by_adapter(), s.kv_holding_waiting)
                queue.tail, self._tail = self._tail, []
            return
        order = self.gate.scan_order(self._ctx, list(self.mirror.waiting))
        queued = set(s.waiting)
        s.waiting.pin(r for r in map(self._req.__getitem__, order) if r in queued)

    def _put_first(self, request: Request) -> None:
        """`request` (r*) first in this scan: in vLLM's FCFS deque it moves to
        the front, and the requests ahead of it are kept for `_put_back`; in
        a priority heap where it is not the top, a `ScanOrderQueue` yields it
        first; in `kv_holding_waiting` (which vLLM drains first) nothing moves."""
        s: Any = self
        queue = s.waiting
        if isinstance(queue, deque):
            try:
                place = queue.index(request)
            except ValueError:
                return
            ahead = list(islice(queue, place))
            del queue[place]
            queue.appendleft(request)
            self._star_front = (request, ahead)
        elif queue and queue.peek_request() is request:
            return  # the heap's top already: r* is the oldest of the top priority, as a rule
        elif not any(r is request for r in s.kv_holding_waiting):
            pinned = ScanOrderQueue(queue)
            pinned.pin([request], queued=True)
            s.waiting = pinned

    def _put_back(self) -> None:
        """After the scan: r*, if still waiting, goes back to its place before
        the scan less the requests ahead of it that the scan took out (those
        still waiting are the run right behind it: vLLM puts skipped requests
        back at the front in visit order)."""
        s: Any = self
        if isinstance(s.waiting, self.pass_over_queue):
            s.waiting = s.waiting.restore()
        if isinstance(s.waiting, ScanOrderQueue) and self._indexed:
            s.waiting = s.waiting.inner  # the priority heap's pin, for one scan
        moved, self._star_front = self._star_front, None
        if moved is None:
            return
        star, ahead = moved
        queue = s.waiting
        if not queue or queue[0] is not star:
            return  # admitted
        ids = {id(r) for r in ahead}
        place = 0
        for r in islice(queue, 1, None):
            if id(r) not in ids:
                break
            place += 1
        if place:
            del queue[0]
            queue.insert(place, star)

    def _lora_gate(self, request: Request, scheduled_loras: set[int]) -> str:
        if self._stock:
            return HookedMixin._lora_gate(self, request, scheduled_loras)
        try:
            return self._decide(request, scheduled_loras)
        except Exception as exc:
            self._fault("decide", request, exc)
            return HookedMixin._lora_gate(self, request, scheduled_loras)

    def _decide(self, request: Request, scheduled_loras: set[int]) -> str:
        closed, held = self._closed, self._held
        if (closed is not None or held) and self._candidate is None:  # `cap_closed`, `held_for_scan`
            lora = request.lora_request
            if lora is not None and lora.lora_int_id > 0 and request.request_id not in self._first and (
                    lora.lora_int_id in held or (closed is not None and lora.lora_int_id not in closed)):
                return _SKIP
        if self._candidate is not None:
            self._flush_admitted()
        if self._ctx is None or self._ctx.scheduled_loras is not scheduled_loras:
            raise RuntimeError("the LoRA check ran outside the waiting scan the gate was told of")
        if self._resumed and request in self._resumed:  # (indexed gates only: `_preempt_request`)
            self._sync_one(request)  # a request that never ran has nothing to sync
        decision, why = self.gate.decide(self._ctx, self._key[request])
        if why == _HOLD and self._holds_kv_blocks(request):  # type: ignore[attr-defined]
            # Held, it would keep the KV blocks r* may need (a streaming
            # session between turns, a KV load): the gate's cap alone decides.
            a, closed = adapter_of(request), self._closed
            decision = Decision.SKIP if a > 0 and closed is not None and a not in closed else Decision.ADMIT
        if decision is Decision.ADMIT:
            self._candidate = request
        elif self._passes_over:
            self._refresh_held()  # r*'s visit, or a new hold
        return decision.value

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self._resync_due:  # a fault between two steps (`add_request`, `finish_requests`)
            self._resync_safely()
        freed, self._freed = self._freed, []
        self._ctx, self._closed, self._held, self._first = None, None, frozenset(), set()
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._end_scan()
        try:
            self._step_done(out, freed)
        except Exception as exc:
            self._fault("step end", None, exc)
        if self._resync_due:
            self._resync_safely()
        return out

    def _resync_safely(self) -> None:
        try:
            self.resync()
        except Exception as exc:  # vLLM's rule again next step, and another try
            _log.warning("lora_sched: %s: resynchronising failed (%s: %s); scheduling as stock vLLM",
                         self.policy_name, type(exc).__name__, exc)

    def _end_scan(self) -> None:
        """vLLM's own queue back in `waiting`, as its scan leaves it."""
        s: Any = self
        try:
            if self._indexed:
                self._put_back()
            else:
                s.waiting.unpin()
        except Exception as exc:
            self._fault("scan end", None, exc)
            s.waiting = salvage(s.waiting) if self._indexed else s.waiting
            self._star_front = None

    def _step_done(self, out: Any, freed: list[tuple[str, ReqState]]) -> None:
        s: Any = self
        if not self._stock:
            self._flush_admitted()
            self._closed, self._held, self._first = None, frozenset(), set()
            self._sync()
            batch = {adapter_of(s.requests[rid]) for rid in out.num_scheduled_tokens} - {0}
            ctx = self._ctx if self._ctx is not None else ScanContext(self.mirror, s.current_step, set(batch))
            self.gate.step_done(ctx, batch)
        self._ctx = None
        mirror = self.mirror
        for key, rs in freed:  # freed before this schedule() ended: the gate has seen them finished
            if mirror.reqs.get(key) is rs:
                del mirror.reqs[key]
                mirror.finished.discard(key)
                mirror.aborted.discard(key)


class DrainerMixin(GateMixin):
    """`drainer`: SGLang's LoRADrainer (`policy.drainer.DrainerGate`)."""

    policy_name = "drainer"


class TimesliceMixin(GateMixin):
    """`timeslice`: LoRAX's adapter cycle (`policy.timeslice.TimesliceGate`)."""

    policy_name = "timeslice"


class FairMixin(GateMixin):
    """`fair`: `policy.fair.FairGate` (the reference gate, its `FairGuard`)."""

    policy_name = "fair"


class VtcMixin(GateMixin):
    """`vtc`: the Virtual Token Counter (`policy.vtc.VtcGate`)."""

    policy_name = "vtc"


class FairScheduler(RecorderMixin, FairMixin, Scheduler):
    """`fair` on vLLM's synchronous `Scheduler`."""


class AsyncFairScheduler(RecorderMixin, FairMixin, AsyncScheduler):
    """`fair` on vLLM's `AsyncScheduler` (recommended: vLLM's default on GPU)."""


class BlockingScheduler(RecorderMixin, BlockingMixin, Scheduler):
    """`blocking` on vLLM's synchronous `Scheduler` (for conformance and benchmarks)."""


class AsyncBlockingScheduler(RecorderMixin, BlockingMixin, AsyncScheduler):
    """`blocking` on vLLM's `AsyncScheduler`."""


class DrainerScheduler(RecorderMixin, DrainerMixin, Scheduler):
    """`drainer` on vLLM's synchronous `Scheduler` (a reference: it starves)."""


class AsyncDrainerScheduler(RecorderMixin, DrainerMixin, AsyncScheduler):
    """`drainer` on vLLM's `AsyncScheduler`."""


class TimesliceScheduler(RecorderMixin, TimesliceMixin, Scheduler):
    """`timeslice` on vLLM's synchronous `Scheduler` (a reference: it starves)."""


class AsyncTimesliceScheduler(RecorderMixin, TimesliceMixin, AsyncScheduler):
    """`timeslice` on vLLM's `AsyncScheduler`."""


class VtcScheduler(RecorderMixin, VtcMixin, Scheduler):
    """`vtc` on vLLM's synchronous `Scheduler` (a reference: it blocks behind the cap)."""


class AsyncVtcScheduler(RecorderMixin, VtcMixin, AsyncScheduler):
    """`vtc` on vLLM's `AsyncScheduler`."""


CLASSES: dict[str, tuple[type, type]] = {
    "blocking": (BlockingScheduler, AsyncBlockingScheduler),
    "fair": (FairScheduler, AsyncFairScheduler),
    "drainer": (DrainerScheduler, AsyncDrainerScheduler),
    "timeslice": (TimesliceScheduler, AsyncTimesliceScheduler),
    "vtc": (VtcScheduler, AsyncVtcScheduler),
}
