"""The deploy classes under every request lifecycle vLLM has, inside vLLM's real scheduler.

An operator's engine must never go down because of `--scheduler-cls`: the
fair classes must serve on wherever stock vLLM does. These tests drive
vLLM's own `Scheduler` / `AsyncScheduler` subclasses (`FairScheduler`,
`AsyncFairScheduler`) through its public interface, as the engine core
does, with LoRA on: arrivals, aborts, ids reused after a finish or an
abort, streaming-input sessions opened, continued and closed, preemption
under KV pressure, and outputs applied one step late (async scheduling).

After every step they check, from vLLM's own queues and outputs (not from
the classes' bookkeeping):
- no exception, and no fault caught by the fail-safe path (`faults == 0`):
  the state did not drift, it was not just covered up;
- the guard's index holds exactly the requests in vLLM's waiting queues
  (less streaming sessions waiting for their client), with vLLM's ids, and
  its per-adapter counts are vLLM's;
- no batch has more than `max_loras` adapters;
- FIFO within an adapter: no request is first admitted while an older
  request of its adapter that was never admitted still waits.

The planted-inconsistency tests break the index on purpose and check that
the engine keeps serving: a warning names the request, the step runs
vLLM's rule, the index is rebuilt from vLLM's queues, and every request
finishes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

pytestmark = pytest.mark.vllm

TOKEN = 7


@dataclass
class Case:
    """One scheduler under test, driven as vLLM's engine core drives it."""

    sched: object
    late: bool  # outputs applied one step late (async scheduling)
    max_loras: int
    pending: list = field(default_factory=list)  # scheduled, output not applied yet
    arrival: dict = field(default_factory=dict)  # vLLM request object -> arrival number
    admitted: set = field(default_factory=set)  # request objects ever scheduled
    n: int = 0
    stock: Callable | None = None  # builds stock vLLM's class under the same config
    ops: list = field(default_factory=list)  # what the engine did: ("add", ...), ("abort", id), ("step",)


def _fair(async_class: bool, *, max_loras: int = 1, kv_blocks: int | None = None, starvation_steps: int = 2,
          chunked: bool = True, cls: type | None = None, max_num_seqs: int = 4, budget: int = 64):
    from lora_sched.conformance.inprocess import make_scheduler
    from lora_sched.spec.config import Config

    from lora_sched.scheduler import AsyncFairScheduler, FairScheduler

    cfg = Config(max_loras=max_loras, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked_prefill=chunked,
                 kv_blocks=kv_blocks, block_size=16, policy="fair", starvation_steps=starvation_steps)
    return make_scheduler(cfg, "fair", plenty_blocks=256,
                          scheduler_class=cls or (AsyncFairScheduler if async_class else FairScheduler))


def _stock(async_class: bool) -> type:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    return AsyncScheduler if async_class else Scheduler


def _request(rid: str, adapter: int, prompt: int, max_tokens: int, *, resumable: bool = False):
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    lora = LoRARequest(f"lora{adapter}", adapter, f"/nonexistent/lora{adapter}") if adapter else None
    return Request(request_id=rid, prompt_token_ids=[TOKEN] * prompt,
                   sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True), pooling_params=None,
                   lora_request=lora, resumable=resumable)


def _sampled(sched, out) -> set[str]:
    """The requests of a batch that sample a token: those not mid-prefill, decided
    when the batch is scheduled (as the model runner does), not when applied."""
    return {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}


def _output(out, sampled: set[str]):
    from lora_sched.conformance.inprocess import model_output

    return model_output(list(out.num_scheduled_tokens), sampled)


def add(case: Case, request) -> None:
    """`add_request` as the engine calls it; a new request gets an arrival number."""
    sched = case.sched
    case.ops.append(("add", request.request_id, _adapter(request), request.num_prompt_tokens,
                     request.sampling_params.max_tokens, request.resumable))
    sched.add_request(request)
    if sched.requests.get(request.request_id) is request:
        case.arrival[request] = case.n
        case.n += 1


def step(case: Case) -> None:
    """One `schedule()`; its output applied now, or after the next one (`late`)."""
    from vllm.v1.request import RequestStatus

    sched = case.sched
    case.ops.append(("step",))
    waiting = [*sched.kv_holding_waiting, *sched.waiting]
    never = [r for r in waiting if r not in case.admitted and r.status == RequestStatus.WAITING]
    out = sched.schedule()
    first = [sched.requests[rid] for rid in out.num_scheduled_tokens
             if sched.requests[rid] not in case.admitted]
    adapters = {sched.requests[rid].lora_request.lora_int_id for rid in out.num_scheduled_tokens
                if sched.requests[rid].lora_request is not None}
    assert len(adapters) <= case.max_loras, f"batch adapters {sorted(adapters)} > max_loras {case.max_loras}"
    for r in first:
        older = [o for o in never if o is not r and _adapter(o) == _adapter(r) and o in case.arrival
                 and case.arrival[o] < case.arrival.get(r, 1 << 60) and o not in first]
        assert not older, (f"FIFO within adapter {_adapter(r)}: {r.request_id} first admitted while the older "
                           f"{[o.request_id for o in older]} wait")
    case.admitted.update(first)
    case.pending.append((out, _sampled(sched, out)))
    while len(case.pending) > (1 if case.late else 0):
        done, sampled = case.pending.pop(0)
        sched.update_from_output(done, _output(done, sampled))


def abort(case: Case, rid: str) -> None:
    """An abort as the engine sends it."""
    from vllm.v1.request import RequestStatus

    case.ops.append(("abort", rid))
    case.sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)


def flush(case: Case) -> None:
    while case.pending:
        done, sampled = case.pending.pop(0)
        case.sched.update_from_output(done, _output(done, sampled))


def _adapter(request) -> int:
    return request.lora_request.lora_int_id if request.lora_request is not None else 0


def index_drift(sched) -> str | None:
    """How the guard's index differs from vLLM's waiting queues, by request id
    and per adapter; None when they agree. Sessions waiting for their client
    (`WAITING_FOR_STREAMING_REQ`) wait for it, not for the scheduler."""
    from vllm.v1.request import RequestStatus

    queued = [r for r in (*sched.kv_holding_waiting, *sched.waiting)
              if r.status != RequestStatus.WAITING_FOR_STREAMING_REQ]
    want_ids = Counter(r.request_id for r in queued)
    want_backlog = Counter(_adapter(r) for r in queued)
    guard = sched.gate.guard
    index = guard._waiting if guard is not None else {}
    missing = [key for key in index if key not in sched.mirror.reqs]
    if missing:
        return f"indexed keys {missing} have no entry in the mirror"
    got_ids = Counter(sched.mirror.reqs[key].req.id for key in index)
    got_backlog = Counter({a: n for a, n in (guard.backlog if guard is not None else {}).items() if n})
    if got_ids != want_ids:
        return f"index ids {dict(got_ids)} != vLLM's queued {dict(want_ids)}"
    if got_backlog != want_backlog:
        return f"index per adapter {dict(got_backlog)} != vLLM's {dict(want_backlog)}"
    # The mirror's `running` is read from vLLM at each scan; between steps
    # the requests vLLM freed are marked finished there.
    entries = [sched.mirror.reqs.get(key) for key in sched.mirror.running]
    running = Counter(rs.req.id for rs in entries if rs is not None and rs.status == "running")
    if running != Counter(r.request_id for r in sched.running):
        return f"mirror running {dict(running)} != vLLM's {[r.request_id for r in sched.running]}"
    return None


def drain(case: Case, limit: int = 400) -> None:
    """Close every session and step until vLLM holds no request, or none
    that stock vLLM does not hold after the same engine calls (`case.stock`)."""
    sched = case.sched
    for rid, r in list(sched.requests.items()):
        if r.resumable:
            add(case, _request(rid, _adapter(r), 1, 1, resumable=False))
    for _ in range(limit):
        if not sched.has_requests() and not case.pending:
            break
        step(case)
        assert index_drift(sched) is None, index_drift(sched)
    flush(case)
    held = sorted(sched.requests)
    assert not held or set(held) <= set(stock_holds(case, limit)), \
        f"still held after {limit} steps: {held}; stock vLLM holds {stock_holds(case, limit)}"


def stock_holds(case: Case, limit: int) -> list[str]:
    """The requests stock vLLM still holds after the same engine calls and
    `limit` more steps (a streaming session whose prompt outgrew the KV pool
    stops stock vLLM's FCFS queue too)."""
    if case.stock is None:
        return []
    sched = case.stock()
    ref = Case(sched, late=case.late, max_loras=case.max_loras)
    for op in case.ops:
        if op[0] == "add":
            _, rid, adapter, prompt, max_tokens, resumable = op
            sched.add_request(_request(rid, adapter, prompt, max_tokens, resumable=resumable))
        elif op[0] == "abort":
            abort(ref, op[1])
        else:
            _raw_step(ref)
    for _ in range(limit):
        if not sched.has_requests() and not ref.pending:
            break
        _raw_step(ref)
    flush(ref)
    return sorted(sched.requests)


def _raw_step(case: Case) -> None:
    """`step` without its checks (stock vLLM is the reference here, not the subject)."""
    out = case.sched.schedule()
    case.pending.append((out, _sampled(case.sched, out)))
    while len(case.pending) > (1 if case.late else 0):
        done, sampled = case.pending.pop(0)
        case.sched.update_from_output(done, _output(done, sampled))


# ---- the three reproductions, pinned --------------------------------------------------

@pytest.mark.parametrize("async_class", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("end", ["finish", "abort"])
def test_an_id_reused_after_its_request_ends_is_a_new_request(async_class, end):
    """Finish-then-resubmit and abort-then-resubmit with the same id: the next
    steps serve the new request (the freed one is forgotten, not the new one)."""
    case = Case(_fair(async_class), late=False, max_loras=1)
    add(case, _request("0", 1, 4, 2))
    add(case, _request("other", 2, 4, 6))
    if end == "abort":
        abort(case, "0")
    else:
        while "0" in case.sched.requests:
            step(case)
    add(case, _request("0", 2, 4, 3))
    for _ in range(3):
        step(case)
        assert index_drift(case.sched) is None, index_drift(case.sched)
    drain(case)
    assert case.sched.faults == 0


@pytest.mark.parametrize("async_class", [False, True], ids=["sync", "async"])
def test_a_streaming_session_with_an_empty_first_chunk_is_accepted(async_class):
    """vLLM's `test_scheduler_streaming.py::test_add_request`: an empty prompt
    is queued, as stock vLLM queues it, and indexed."""
    sched = _fair(async_class)
    sched.add_request(_request("session", 0, 0, 4, resumable=True))
    assert "session" in sched.requests and index_drift(sched) is None and sched.faults == 0


@pytest.mark.parametrize("async_class", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("lora", [False, True], ids=["base", "lora"])
@pytest.mark.parametrize("when", ["paused", "mid-turn"])
def test_a_closed_streaming_session_leaves_nothing_indexed(async_class, lora, when):
    """Closing a session (a non-resumable request with its id) aborts it at
    once when it waits for its client, or queues the close for the end of
    its turn; either way the closing request is not a new waiting request.
    Run well past S steps (fair picks r* among requests that waited S) with
    others waiting."""
    from vllm.v1.request import RequestStatus

    case = Case(_fair(async_class, starvation_steps=16), late=False, max_loras=1)
    adapter = 1 if lora else 0
    add(case, _request("session", adapter, 3, 2, resumable=True))
    for i in range(3):
        add(case, _request(f"w{i}", 1 + i, 8, 30))
    step(case)
    paused = RequestStatus.WAITING_FOR_STREAMING_REQ
    while when == "paused" and case.sched.requests["session"].status != paused:
        step(case)
    assert (case.sched.requests["session"].status == paused) == (when == "paused")
    add(case, _request("session", adapter, 1, 1, resumable=False))
    assert ("session" in case.sched.requests) == (when == "mid-turn")
    for _ in range(40):
        step(case)
        assert index_drift(case.sched) is None, index_drift(case.sched)
    drain(case)
    assert case.sched.faults == 0


def test_a_session_preempted_with_output_in_flight_leaves_the_index_when_its_turn_ends():
    """KV pressure preempts a session while its decode output is in flight, and
    that output ends its turn: vLLM re-queues it waiting for its client, so it
    leaves the index (else it would be r* forever, or a ghost once closed)."""
    case = Case(_fair(True, max_loras=2, kv_blocks=4, starvation_steps=8), late=True, max_loras=2)
    add(case, _request("s1", 2, 8, 3, resumable=True))
    add(case, _request("r1", 1, 27, 8))
    for _ in range(3):
        step(case)
    add(case, _request("s2", 0, 11, 3, resumable=True))
    for _ in range(4):
        step(case)
        assert index_drift(case.sched) is None, index_drift(case.sched)
    add(case, _request("s2", 0, 1, 1, resumable=False))
    add(case, _request("r3", 1, 8, 4))
    for _ in range(10):
        step(case)
        assert index_drift(case.sched) is None, index_drift(case.sched)
    drain(case)
    assert case.sched.faults == 0


def test_a_held_session_holding_kv_blocks_does_not_deadlock():
    """A session between turns holds KV blocks in `kv_holding_waiting`; held for
    r* it would keep the blocks r* needs, and nothing would ever run again
    (4 blocks, max_loras 1, S = 0, outputs a step late). The cap alone
    decides for such a request: every request finishes, as on stock vLLM."""
    case = Case(_fair(True, max_loras=1, kv_blocks=4, starvation_steps=0, max_num_seqs=2, budget=32),
                late=True, max_loras=1)

    def chunk(prompt, out):
        rid = sorted(r for r, q in case.sched.requests.items() if q.resumable and not q.is_finished())[0]
        add(case, _request(rid, _adapter(case.sched.requests[rid]), prompt, out, resumable=True))

    def steps(n):
        for _ in range(n):
            step(case)
            assert index_drift(case.sched) is None, index_drift(case.sched)

    steps(3)
    add(case, _request("s1", 2, 15, 3, resumable=True))
    chunk(5, 2)
    steps(5)
    chunk(9, 2)
    for i, (adapter, prompt, out) in enumerate([(3, 36, 7), (2, 33, 23)]):
        add(case, _request(f"a{i}", adapter, prompt, out))
    chunk(11, 2)
    steps(1)
    for i, (adapter, prompt, out) in enumerate([(0, 17, 9), (0, 23, 21), (0, 12, 17)]):
        add(case, _request(f"b{i}", adapter, prompt, out))
    add(case, _request("s2", 3, 18, 2, resumable=True))
    add(case, _request("c0", 1, 16, 22))
    steps(3)
    add(case, _request("s3", 2, 10, 1, resumable=True))
    drain(case, limit=1000)
    assert case.sched.faults == 0


@pytest.mark.parametrize("async_class", [False, True], ids=["sync", "async"])
def test_a_session_that_outgrows_the_kv_pool_holds_no_more_than_stock(async_class):
    """A streaming session whose prompt grows past the KV pool (4 blocks of
    16 tokens) can never be prefilled: stock vLLM's FCFS scan stops at it and
    every later request waits too. The fair classes hold just what stock does."""
    from vllm.v1.request import RequestStatus

    case = Case(_fair(async_class, kv_blocks=4), late=async_class, max_loras=1,
                stock=lambda: _fair(async_class, kv_blocks=4, cls=_stock(async_class)))
    add(case, _request("s", 0, 20, 2, resumable=True))
    for chunk in (20, 20, 20):
        while case.sched.requests["s"].status != RequestStatus.WAITING_FOR_STREAMING_REQ:
            step(case)
        add(case, _request("s", 0, chunk, 2, resumable=True))
    add(case, _request("after", 1, 4, 2))
    drain(case)
    assert sorted(case.sched.requests) == stock_holds(case, 400) == ["after", "s"]
    assert case.sched.faults == 0


def test_a_continued_session_is_indexed_from_its_next_chunk():
    """A session whose turn ended waits for its client outside the index; its
    next chunk puts it back, waiting since that step."""
    from vllm.v1.request import RequestStatus

    case = Case(_fair(False), late=False, max_loras=1)
    add(case, _request("s", 1, 3, 1, resumable=True))
    while case.sched.requests["s"].status != RequestStatus.WAITING_FOR_STREAMING_REQ:
        step(case)
    assert index_drift(case.sched) is None
    assert "s" not in {case.sched.mirror.reqs[k].req.id for k in case.sched.gate.guard._waiting}
    for _ in range(5):
        step(case)
    add(case, _request("s", 1, 2, 1, resumable=True))
    key = case.sched._key[case.sched.requests["s"]]
    assert key in case.sched.gate.guard._waiting
    assert case.sched.mirror.reqs[key].waiting_since == case.sched.current_step + 1
    drain(case)
    assert case.sched.faults == 0


# ---- the lifecycle machine -------------------------------------------------------------

class Lifecycle(RuleBasedStateMachine):
    """Random interleavings of every lifecycle above on one fair class."""

    async_class = False
    planted: type | None = None  # a class with a planted drift, for the test that the machine finds it

    def __init__(self):
        super().__init__()
        self.case: Case | None = None
        self.freed: list[str] = []  # ids vLLM freed: free to reuse
        self.sessions = 0

    @precondition(lambda self: self.case is None)
    @rule(max_loras=st.integers(1, 2), kv=st.sampled_from([None, 4, 12, 24]), late=st.booleans(),
          chunked=st.booleans(), s=st.sampled_from([0, 2, 8]))
    def setup(self, max_loras, kv, late, chunked, s):
        def build(cls: type | None) -> object:
            return _fair(self.async_class, max_loras=max_loras, kv_blocks=kv, starvation_steps=s, chunked=chunked,
                         cls=cls)

        self.case = Case(build(self.planted), late=late and self.async_class, max_loras=max_loras,
                         stock=lambda: build(_stock(self.async_class)))

    def _live(self, resumable: bool | None = None) -> list[str]:
        from vllm.v1.request import RequestStatus

        return sorted(rid for rid, r in self.case.sched.requests.items()
                      if not r.is_finished() and r.status != RequestStatus.FINISHED_ABORTED
                      and (resumable is None or r.resumable == resumable))

    @precondition(lambda self: self.case is not None)
    @rule(adapter=st.integers(0, 4), prompt=st.integers(1, 40), out=st.integers(1, 12), reuse=st.booleans(),
          data=st.data())
    def arrive(self, adapter, prompt, out, reuse, data):
        free = [rid for rid in self.freed if rid not in self.case.sched.requests]
        if reuse and free:
            rid = data.draw(st.sampled_from(free))
            self.freed.remove(rid)
        else:
            rid = f"r{self.case.n}"
        add(self.case, _request(rid, adapter, prompt, out))

    @precondition(lambda self: self.case is not None)
    @rule(data=st.data())
    def abort(self, data):
        live = self._live()
        if live:
            abort(self.case, data.draw(st.sampled_from(live)))

    @precondition(lambda self: self.case is not None)
    @rule(adapter=st.integers(0, 4), prompt=st.integers(1, 20), out=st.integers(1, 4))
    def open_session(self, adapter, prompt, out):
        self.sessions += 1
        add(self.case, _request(f"s{self.sessions}", adapter, prompt, out, resumable=True))

    @precondition(lambda self: self.case is not None)
    @rule(data=st.data(), prompt=st.integers(1, 20), out=st.integers(1, 4), close=st.booleans())
    def next_chunk(self, data, prompt, out, close):
        sessions = self._live(resumable=True)
        if sessions:
            rid = data.draw(st.sampled_from(sessions))
            adapter = _adapter(self.case.sched.requests[rid])
            add(self.case, _request(rid, adapter, prompt, out, resumable=not close))

    @precondition(lambda self: self.case is not None)
    @rule(n=st.integers(1, 6))
    def steps(self, n):
        for _ in range(n):
            before = set(self.case.sched.requests)
            step(self.case)
            self.freed += sorted(before - set(self.case.sched.requests))

    @invariant()
    def index_follows_vllm(self):
        if self.case is not None:
            assert self.case.sched.faults == 0, "the fail-safe path caught a fault: the state drifted"
            drift = index_drift(self.case.sched)
            assert drift is None, drift

    def teardown(self):
        if self.case is not None:
            drain(self.case)
            self.case.sched.schedule()  # the mirror drops what was freed before a schedule()
            assert self.case.sched.faults == 0
            mirror = sorted(rs.req.id for rs in self.case.sched.mirror.reqs.values())
            assert mirror == sorted(self.case.sched.requests), f"mirror keeps entries {mirror}"


class AsyncLifecycle(Lifecycle):
    async_class = True


TestLifecycleSync = Lifecycle.TestCase
TestLifecycleAsync = AsyncLifecycle.TestCase


def _planted_drift(kind: str) -> type:
    from lora_sched.scheduler import FairScheduler

    if kind == "freed by id":
        class ForgetsById(FairScheduler):
            """Drops a freed request's entry by its id: a new request that reused the id goes with it."""

            def _step_done(self, out, freed):
                super()._step_done(out, [])
                for key, _rs in freed:
                    self.mirror.reqs.pop(key.split("\x00")[0], None)
        return ForgetsById

    class IndexesEveryArrival(FairScheduler):
        """Indexes every `add_request`, a session's close and next chunk included."""

        def add_request(self, request):
            known = request.request_id in self.requests
            super().add_request(request)
            if known:
                self._track(request, self.current_step + 1)
                self._queued(request, self.current_step + 1)
    return IndexesEveryArrival


@pytest.mark.release_slow  # the drift is planted in the project's class, not in vLLM
@pytest.mark.parametrize("kind", ["freed by id", "session chunk indexed"])
def test_the_lifecycle_machine_finds_a_planted_drift(kind):
    """Each drift the machine guards against, planted, is found."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    class Planted(Lifecycle):
        planted = _planted_drift(kind)

    # Found is enough: no shrinking (its time depends on the example found, minutes at worst).
    with pytest.raises(AssertionError, match="fail-safe path caught a fault|index ids|mirror keeps"):
        run_state_machine_as_test(Planted, settings=settings(max_examples=300, stateful_step_count=40, deadline=None,
                                                             database=None, report_multiple_bugs=False,
                                                             phases=[Phase.explicit, Phase.generate]))


# ---- planted inconsistencies: fail safe ------------------------------------------------

class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings_logged():
    handler = _Lines()
    log = logging.getLogger("vllm.lora_sched")
    log.addHandler(handler)
    yield handler.lines
    log.removeHandler(handler)


def _loaded(async_class: bool, trace) -> Case:
    case = Case(_fair(async_class, starvation_steps=2), late=False, max_loras=1)
    case.sched.start_recording(trace, async_scheduling=False)
    for i in range(12):
        add(case, _request(f"q{i}", 1 + i % 3, 12, 6))
    step(case)
    return case


@pytest.mark.parametrize("async_class", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("plant", ["ghost in the index", "request unknown to the mirror", "gate raises"])
def test_a_planted_inconsistency_is_logged_and_the_engine_serves_on(async_class, plant, warnings_logged,
                                                                     monkeypatch, tmp_path):
    """Break the classes' state on purpose: the step runs (vLLM's rule), one
    warning names the request and what was expected, the index is rebuilt
    from vLLM's queues, every request finishes, and the trace keeps every
    safety property and FIFO within adapter."""
    from lora_sched.policy.check import check_trace
    from lora_sched.policy.fair import Waiting

    trace = tmp_path / "planted.jsonl"
    case = _loaded(async_class, trace)
    sched = case.sched
    victim = sched.waiting[len(sched.waiting) - 1]
    if plant == "ghost in the index":
        sched.gate.guard.enqueue(Waiting("ghost", 1, 0, -1))
        where = "ghost"
    elif plant == "request unknown to the mirror":
        del sched._key[victim]
        where = victim.request_id
    else:
        def broken(ctx, key):
            raise KeyError(key)
        monkeypatch.setattr(sched.gate, "decide", broken)
        where = sched.waiting[0].request_id
    for _ in range(30):  # to the step the inconsistency meets (the ghost: once fair picks r* again)
        step(case)
        if sched.faults:
            break
    if plant == "gate raises":
        monkeypatch.undo()
    assert sched.faults >= 1, "the planted inconsistency was never met"
    faults = sched.faults
    assert index_drift(sched) is None, index_drift(sched)
    drain(case)
    assert sched.faults == faults, "the resync left the state inconsistent"
    sched.stop_recording()
    assert len(warnings_logged) == 1, warnings_logged
    line = warnings_logged[0]
    assert "inconsistent state" in line and "expected" in line and "stock vLLM" in line, line
    if plant != "ghost in the index":
        assert repr(where) in line, line
    report = check_trace(str(trace))
    assert report.steps > 10
    broken = {name: v for name, v in report.first.items() if name not in ("bounded_wait", "no_hol_blocking")}
    assert not broken, broken
