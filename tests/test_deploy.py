"""The shipped scheduler classes: structural hook, refusal on unknown vLLM, settings.

Runs on each supported release (`make test` runs it under .venv, vLLM 0.32,
and each release venv, 0.33 and 0.34), so the hooks are tested on every real
source and on synthetic changes of each.

The classes' behaviour is checked step for step against the reference by the
in-process conformance tests and, with the README's own command line, by
`tests/test_conformance_live.py::test_readme_deploy_command`.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from inprocess_cases import run_sync

pytestmark = pytest.mark.vllm  # drives vLLM's own scheduler



@pytest.fixture(scope="module")
def deploy():
    return importlib.import_module("lora_sched.scheduler")  # imports vLLM: only when these tests run


@pytest.fixture(scope="module")
def vllm_schedule():
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.schedule


@pytest.fixture(scope="module")
def source(vllm_schedule):
    return inspect.getsource(vllm_schedule)


def test_hook_adds_two_calls_and_keeps_every_other_statement(deploy, source, vllm_schedule):
    fn = deploy.hook_schedule(source)
    names = set(fn.__code__.co_names)
    assert {"_lora_gate", "_before_waiting_scan"} <= names
    assert not {"_lora_gate", "_before_waiting_scan"} & set(vllm_schedule.__code__.co_names)
    # Every global and attribute vLLM's schedule() reads is still read.
    assert set(vllm_schedule.__code__.co_names) <= names


@pytest.mark.parametrize("change, what", [
    (("# Scheduling would exceed max_loras, skip.\n                    skip_request(request_queue)",
      "self._skip_for_lora(request_queue)"), "LoRA-cap"),
    (("if not preempted_reqs and self._pause_state", "if not _preempted and self._pause_state"), "waiting-scan"),
])
def test_unknown_schedule_shape_refuses_to_load(deploy, source, change, what):
    """A vLLM whose schedule() no longer has the shapes the hooks need makes
    the import fail, naming the vLLM version and the supported range."""
    old, new = change
    assert old in source
    with pytest.raises(deploy.UnsupportedVllm) as info:
        deploy.hook_schedule(source.replace(old, new), version="0.99.0")
    msg = str(info.value)
    assert "vLLM 0.99.0" in msg and deploy.SUPPORTED_VLLM in msg and what in msg and "has 0" in msg


@pytest.mark.parametrize("version, release", [
    ("0.32.0", "0.32"), ("0.32.3", "0.32"), ("0.33.0", "0.33"), ("0.33.1+cpu", "0.33"), ("0.34.0", "0.34"),
])
def test_supported_releases_load(deploy, version, release):
    assert deploy.check_version(version) == release


@pytest.mark.parametrize("version", ["0.31.2", "0.35.0", "1.0.0", "0.3", "nightly"])
def test_other_releases_refuse_to_load(deploy, version):
    """Any vLLM outside the registry is refused, naming it and the supported range."""
    with pytest.raises(deploy.UnsupportedVllm) as info:
        deploy.check_version(version)
    msg = str(info.value)
    assert f"vLLM {version}" in msg and "0.32.x, 0.33.x, 0.34.x" in msg


def test_installed_vllm_is_the_release_the_classes_run():
    import vllm

    deploy = importlib.import_module("lora_sched.scheduler")
    assert deploy.RELEASE == vllm.__version__.rsplit(".", vllm.__version__.count(".") - 1)[0]
    assert deploy.RELEASE in ("0.32", "0.33", "0.34")


def test_duplicated_shape_refuses_to_load(deploy, source):
    body = source.split("\n", 1)[1]
    twice = source + "\n" + "    def schedule2(self):\n" + body
    with pytest.raises(deploy.UnsupportedVllm, match="has 2"):
        deploy.hook_schedule(twice, version="0.32.0")


class _Cfg:
    def __init__(self, extra):
        self.additional_config = extra


@pytest.mark.parametrize("extra, want", [
    ({}, 16),
    ({"lora_sched": {}}, 16),
    ({"lora_sched": {"starvation_steps": 0}}, 0),
    ({"lora_sched": {"starvation_steps": 40}, "other_plugin": {"x": 1}}, 40),
])
def test_settings(deploy, extra, want):
    assert deploy.settings_from(_Cfg(extra))["starvation_steps"] == want


@pytest.mark.parametrize("extra, needle", [
    ({"lora_sched": {"starvation_step": 4}}, "unknown lora_sched setting(s) ['starvation_step']"),
    ({"lora_sched": {"starvation_steps": -1}}, "lora_sched.starvation_steps must be an integer >= 0, got -1"),
    ({"lora_sched": {"starvation_steps": "16"}}, "got '16'"),
    ({"lora_sched": {"starvation_steps": True}}, "got True"),
    ({"lora_sched": 16}, "'lora_sched' must be an object"),
])
def test_bad_settings_are_named(deploy, extra, needle):
    with pytest.raises(ValueError) as info:
        deploy.settings_from(_Cfg(extra))
    assert needle in str(info.value)


def test_fair_forgets_every_request_it_served():
    """A long-running server must not keep per-request state: once every
    request has finished (or been aborted), fair holds no entry for any."""
    from lora_sched.conformance.inprocess import _vllm_request, make_scheduler
    from lora_sched.policy.scenarios import SCENARIOS
    from lora_sched.spec.config import Config
    from vllm.v1.request import RequestStatus

    sc = SCENARIOS["starvation"]
    cfg = Config(**{**sc.config.to_dict(), "policy": "fair"})
    sched = make_scheduler(cfg, "fair")
    reqs = sorted(sc.workload.requests, key=lambda r: r.arrival)
    for i, r in enumerate(reqs[:30]):
        sched.add_request(_vllm_request(r, i))
    sched.finish_requests(reqs[0].id, RequestStatus.FINISHED_ABORTED)
    run_sync(sched, max_steps=5000)
    sched.schedule()  # the mirror drops what was freed before a schedule()
    guard = sched.gate.guard
    assert sched.mirror.reqs == {} and guard._waiting == {} and guard.backlog == {}
    assert not any(guard._heaps.values()), guard._heaps


# ---- r* first in vLLM's own FCFS deque: `GateMixin._put_first` / `_put_back` ---------------

def _scan_like_vllm(sched, outcomes: list[str]) -> list[str]:
    """Run one waiting scan over `sched.waiting` as vLLM 0.32-0.34 do: peek
    the head; skip (pop it, `appendleft` to the step's skipped deque), admit
    (pop it) or stop; then `prepend_requests` the skipped ones (`extendleft`,
    so they come back in visit order). Returns the admitted ids."""
    from collections import deque

    skipped: deque = deque()
    admitted = []
    for what in outcomes:
        if not sched.waiting:
            break
        head = sched.waiting[0]
        if what == "stop":
            break
        sched.waiting.popleft()
        if what == "skip":
            skipped.appendleft(head)
        else:
            admitted.append(head)
    sched.waiting.extendleft(skipped)
    return admitted


@given(n=st.integers(1, 12), data=st.data())
@settings(max_examples=300, deadline=None)
def test_star_first_keeps_the_queue_order(n: int, data: st.DataObject) -> None:
    """Whatever the scan does after r* was moved to the front of vLLM's FCFS
    deque (admit it, skip it, stop at it; admit or skip the requests ahead
    of and behind it), the queue afterwards is the queue before the scan less
    the admitted requests, in the same order: the order the reference keeps."""
    from collections import deque
    from types import SimpleNamespace

    from lora_sched.scheduler import GateMixin

    queue = [f"q{i}" for i in range(n)]
    star = data.draw(st.sampled_from(queue))
    outcomes = data.draw(st.lists(st.sampled_from(["skip", "admit", "stop"]), max_size=n + 1))
    from lora_sched.scheduler import PassOverQueue

    sched = SimpleNamespace(waiting=deque(queue), _indexed=True, _star_front=None, pass_over_queue=PassOverQueue)
    GateMixin._put_first(sched, star)
    assert sched.waiting[0] == star
    admitted = _scan_like_vllm(sched, outcomes)
    GateMixin._put_back(sched)
    assert list(sched.waiting) == [r for r in queue if r not in admitted]
    assert sched._star_front is None


# ---- what the full cap skips, passed over: `PassOverQueue` ----------------------------------

def _vllm_loop(queue, owner, skips, outcomes: list[str]) -> tuple[list[tuple[str, str]], list]:
    """One waiting scan as vLLM's loop runs it over `queue` (vLLM's own queue,
    or a `PassOverQueue` over it): peek the head (the visit promotes a
    blocked status, its grammar being ready, and flushes a pending
    admission, `owner._candidate`); skip it when `skips(head)` (pop it, add
    it to `deferred_waiting`, `appendleft` it to the step's skipped deque),
    else take the next of `outcomes`: admit (pop it, out of
    `deferred_waiting`, as vLLM's admission discards it) or stop (also when
    `outcomes` run out); then `prepend_requests` the skipped ones. Returns
    the visits ((id, outcome), in order) and the admitted requests."""
    from collections import deque

    from vllm.v1.request import RequestStatus

    skipped: deque = deque()
    visits, admitted, todo = [], [], list(outcomes)
    while queue:
        head = queue.peek_request()
        head.status = RequestStatus.WAITING
        owner._candidate = None
        what = "skip" if skips(head) else (todo.pop(0) if todo else "stop")
        visits.append((head.request_id, what))
        if what == "stop":
            break
        queue.pop_request()
        if what == "skip":
            owner.deferred_waiting.add(head)
            skipped.appendleft(head)
        else:
            admitted.append(head)
            owner._candidate = head
            owner.deferred_waiting.discard(head)
    if skipped:
        queue.prepend_requests(skipped)
    return visits, admitted


def _model_scan(policy: str, adapters: list[int], plain: list[bool], deferred: list[bool], priority: list[int],
                held: frozenset[int], tail_len: int, outcomes: list[str]):
    """One waiting scan as vLLM 0.32-0.34's loop runs it (ask, peek, decide,
    pop; the skipped requests prepended at the end), over vLLM's own queue
    bare and through `PassOverQueue` (tally and tail as the driver gives
    them): returns (bare queue, its owner, wrapped queue, its owner, admitted
    bare, admitted wrapped). The cap is closed on adapters 1-2, `held` is
    fair's hold: a request of an adapter in `held` or of 3-4 is skipped at
    every visit; the others take `outcomes` in turn (then stop). An
    admission is pending until the next visit, as the driver's `_candidate`
    is. The last `tail_len` requests arrived since the last scan (not
    deferred)."""
    from collections import Counter
    from types import SimpleNamespace

    from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue
    from vllm.v1.request import RequestStatus

    from lora_sched.scheduler import PassOverQueue

    n = len(adapters)
    deferred = [d and i < n - tail_len for i, d in enumerate(deferred)]

    class Req:  # hashed by identity, as vLLM's Request in `deferred_waiting`; ordered as its heap orders
        def __init__(self, i: int, adapter: int) -> None:
            self.request_id = f"q{i}"
            self.lora_request = SimpleNamespace(lora_int_id=adapter) if adapter else None
            self.status = (RequestStatus.WAITING if plain[i]
                           else RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR)
            self.num_computed_tokens = 0
            self.key = (priority[i], i)

        def __lt__(self, other: Req) -> bool:
            return self.key < other.key

    closed = {1, 2}

    def blocked(r) -> bool:
        a = r.lora_request.lora_int_id if r.lora_request else 0
        return a > 0 and (a in held or a not in closed)

    def scan(queue, owner) -> list[str]:
        return [r.request_id for r in _vllm_loop(queue, owner, blocked, outcomes)[1]]

    def built():  # fresh requests for each run (a visit changes their status), their queue, their owner
        reqs = [Req(i, a) for i, a in enumerate(adapters)]
        q = create_request_queue(SchedulingPolicy(policy))
        for r in reqs:
            q.add_request(r)
        by_adapter: dict[int, set] = {}
        for r in reqs:
            by_adapter.setdefault(r.lora_request.lora_int_id if r.lora_request else 0, set()).add(r)
        owner = SimpleNamespace(_closed=closed, _held=held, _candidate=None, _first=set(), passed=0, tails_first=0,
                                _blocked={r for r, p in zip(reqs, plain, strict=True) if not p},
                                deferred_waiting={r for r, d in zip(reqs, deferred, strict=True) if d},
                                _by_adapter=by_adapter, _stop_back={})
        return reqs, q, owner

    _, bare, bare_owner = built()
    want = scan(bare, bare_owner)
    reqs, inner, pass_owner = built()
    wrapped = PassOverQueue(inner, pass_owner)
    wrapped.count(dict(Counter(adapters)), [])
    wrapped.tail = reqs[n - tail_len:] if tail_len else []
    got = scan(wrapped, pass_owner)
    return bare, bare_owner, wrapped, pass_owner, want, got


@st.composite
def _scan_cases(draw: st.DrawFn) -> tuple:
    """(adapters, plain, deferred, priority, held, tail length, outcomes) for `_model_scan`."""
    adapters = draw(st.lists(st.sampled_from([0, 1, 2, 3, 3, 4, 4]), min_size=1, max_size=14))
    n = len(adapters)
    flags = st.lists(st.sampled_from([True, True, True, False]), min_size=n, max_size=n)
    return (adapters, draw(flags), draw(flags), draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
            draw(st.sampled_from([frozenset(), frozenset({1})])), draw(st.integers(0, n)),
            draw(st.lists(st.sampled_from(["skip", "admit", "stop"]), max_size=n + 1)))


@given(case=_scan_cases())
@settings(max_examples=400, deadline=None)
# a deferred request visited before the tally says the rest passes: it must not count as undeferred
@example(case=([1, 3, 3, 3], [True] * 4, [True, True, False, True], [0] * 4, frozenset(), 0, ["skip"]))
# a blocked status ahead (structured output's grammar): its visit promotes it, so it must be visited
@example(case=([3, 3], [True, False], [True, True], [0, 0], frozenset(), 0, []))
# the jump (`_jump`): runs of 3-4 passed over at once, each ending at a request of 1 or 2, which is visited
@example(case=([3, 3, 1, 3, 4, 2, 4], [True] * 7, [True] * 7, [0] * 7, frozenset(), 0, ["admit", "admit"]))
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_pass_over_leaves_the_queue_as_vllm_skips_do(policy: str, case: tuple) -> None:
    """A scan through `PassOverQueue` leaves vLLM's waiting queue (its own
    FCFS deque or priority heap), its `deferred_waiting`, the requests'
    statuses and its admissions exactly as vLLM's own scan over the bare
    queue does (`_model_scan`), whatever the scan admits, skips or stops at,
    whether requests are passed over one by one or the scan ends after the
    tail."""
    bare, bare_owner, wrapped, pass_owner, want, got = _model_scan(policy, *case)
    assert len(wrapped) == len(bare)
    after = wrapped.restore()
    assert got == want
    assert [(r.request_id, r.status) for r in after] == [(r.request_id, r.status) for r in bare]
    assert {r.request_id for r in pass_owner.deferred_waiting} == {r.request_id for r in bare_owner.deferred_waiting}


@pytest.mark.parametrize("outcomes", [[], ["skip"], ["admit", "admit"], ["admit", "skip", "admit"]])
def test_the_scan_ends_after_the_tail(outcomes: list[str]) -> None:
    """Ten deferred requests of blocked adapters (3, 4, and 1 while it is
    held) ahead of three new arrivals: the scan visits the arrivals first,
    and once it has visited all three it ends (the other ten pass,
    untouched); the queue ends in vLLM's order either way."""
    adapters = [3, 4, 1, 3, 3, 4, 1, 4, 3, 4, 1, 0, 2]
    n = len(adapters)
    bare, _, wrapped, pass_owner, want, got = _model_scan(
        "fcfs", adapters, [True] * n, [True] * n, [0] * n, frozenset({1}), 3, outcomes)
    assert pass_owner.tails_first == 1
    assert pass_owner.passed == (10 if len(outcomes) >= 2 else 0)  # the 0 and the 2 take an outcome each
    assert got == want and [r.request_id for r in wrapped.restore()] == [r.request_id for r in bare]


# ---- `PassOverQueue` over several scans: the places kept from one scan to the next ----------

def _model_scans(policy: str, init: list[tuple[int, bool]], scans: list[tuple]) -> list[tuple]:
    """Several waiting scans as vLLM's loop runs them (`_vllm_loop`),
    over vLLM's own queue bare (`wrap=False`) or through a fresh
    `PassOverQueue` each scan with one owner throughout (its tally, the
    driver's tail and per-adapter sets, and `_stop_back`, which `_places`
    keeps from one scan to the next). `init`: (adapter, deferred) of the
    backlog, all plain; each scan: (held, outcomes, events after it), an
    event being ("arrive", adapter), ("preempt", i) (a request admitted
    earlier comes back to the front, not deferred) or ("abort", i) (a
    waiting request leaves). Returns, per scan and for each way, (the
    requests visited with their outcome, in order; the queue after; the
    deferred requests)."""
    from collections import Counter
    from types import SimpleNamespace

    from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue
    from vllm.v1.request import RequestStatus

    from lora_sched.scheduler import PassOverQueue

    class Req:
        def __init__(self, i: int, adapter: int) -> None:
            self.request_id = f"q{i}"
            self.lora_request = SimpleNamespace(lora_int_id=adapter) if adapter else None
            self.status = RequestStatus.WAITING
            self.num_computed_tokens = 0
            self.key = (0, i)

        def __lt__(self, other: Req) -> bool:
            return self.key < other.key

    closed = {1, 2}

    def adapter(r) -> int:
        return r.lora_request.lora_int_id if r.lora_request else 0

    def run(wrap: bool) -> list[tuple]:
        q = create_request_queue(SchedulingPolicy(policy))
        owner = SimpleNamespace(_closed=closed, _held=frozenset(), _candidate=None, _first=set(), passed=0,
                                tails_first=0, _blocked=set(), deferred_waiting=set(), _by_adapter={}, _stop_back={})
        made = 0

        def join(a: int, deferred: bool) -> Req:
            nonlocal made
            r = Req(made, a)
            made += 1
            q.add_request(r)
            owner._by_adapter.setdefault(a, set()).add(r)
            if deferred:
                owner.deferred_waiting.add(r)
            return r

        for a, d in init:
            join(a, d)
        tail: list[Req] = []
        running: list[Req] = []
        out = []
        for held, outcomes, events in scans:
            owner._held = frozenset(held)
            queue = q
            if wrap:
                queue = PassOverQueue(q, owner)
                queue.count(dict(Counter(adapter(r) for r in q)), [])
                queue.tail = tail
            tail = []
            visits, admitted = _vllm_loop(
                queue, owner, lambda r: adapter(r) > 0 and (adapter(r) in owner._held or adapter(r) not in closed),
                outcomes)
            if wrap:
                q = queue.restore()
            owner._candidate = None
            for r in admitted:
                owner._by_adapter[adapter(r)].discard(r)
                running.append(r)
            out.append((visits, [r.request_id for r in q], sorted(r.request_id for r in owner.deferred_waiting)))
            for kind, x in events:
                if kind == "arrive":
                    tail.append(join(x, False))
                elif kind == "preempt" and running:
                    r = running.pop(x % len(running))
                    r.status = RequestStatus.PREEMPTED
                    q.prepend_request(r)
                    owner._by_adapter.setdefault(adapter(r), set()).add(r)
                elif kind == "abort" and len(q):
                    r = list(q)[x % len(q)]
                    q.remove_requests([r])
                    owner.deferred_waiting.discard(r)
                    owner._by_adapter[adapter(r)].discard(r)
                    if r in tail:
                        tail.remove(r)
        return out

    return list(zip(run(False), run(True), strict=True))


@st.composite
def _backlogs(draw: st.DrawFn) -> tuple:
    """A backlog mostly of blocked adapters (3, 4) with a few requests of the
    admissible ones (0, 1, 2) among them, then 2-5 scans with events."""
    n = draw(st.integers(20, 300))
    init = [(draw(st.sampled_from([3, 4])), draw(st.sampled_from([True] * 9 + [False]))) for _ in range(n)]
    for _ in range(draw(st.integers(0, 8))):
        init[draw(st.integers(0, n - 1))] = (draw(st.sampled_from([0, 1, 1, 2])), True)
    event = st.one_of(st.tuples(st.just("arrive"), st.sampled_from([0, 1, 2, 3, 3, 4, 4])),
                      st.tuples(st.just("preempt"), st.integers(0, 50)),
                      st.tuples(st.just("abort"), st.integers(0, 400)))
    scans = [(draw(st.sampled_from([(), (), (1,)])),
              draw(st.lists(st.sampled_from(["skip", "admit", "admit", "stop"]), max_size=4)),
              draw(st.lists(event, max_size=4))) for _ in range(draw(st.integers(2, 5)))]
    return init, scans


_RUN = [(3, True)] * 100  # a run longer than `_pass_over`'s first stretch (64)


@given(case=_backlogs())
@settings(max_examples=150, deadline=None)
# the second scan finds the stops (1, 2 and the arrival) where the first left them (`_stop_back`)
@example(case=([*_RUN, (1, True), *_RUN, (2, True), (4, True)],
               [((), ["skip"], [("arrive", 1)]), ((), ["skip", "skip"], []), ((), [], [])]))
# ... but not when a request behind one left since (here the 2, admitted): the 1 is one place on,
# where its old place now holds a 3 (a pass-over that trusted the old place would pass the 1 over)
@example(case=([*_RUN, (1, True), *_RUN, (2, True), *_RUN[:10], (1, True), (4, True)],
               [((), ["skip", "admit", "stop"], [("arrive", 3)]), ((), ["skip", "admit"], []), ((), [], [])]))
# many stops (nearly half the backlog): a stretch of the run is walked before they are placed, and
# here the run ends right after the stretch, at a request the scan admits
@example(case=([*_RUN[:64], *[(1, True)] * 50, (4, True)], [((), ["admit", "skip"], [("arrive", 1)]), ((1,), [], [])]))
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_pass_over_sees_what_vllm_would_see_scan_after_scan(policy: str, case: tuple) -> None:
    """Scan after scan (arrivals, preemptions and aborts between), vLLM's loop
    through `PassOverQueue` visits exactly the requests it visits over the
    bare queue, in the same order and with the same outcomes, less some
    whose visit would only skip them; and it leaves the queue and
    `deferred_waiting` as the bare scans do. So the scan order cannot drift
    whether a run is walked, jumped to places found by the map or where
    the last scan found them (`PassOverQueue._places`), or ends after the
    tail."""
    for bare, wrapped in _model_scans(policy, *case):
        (b_visits, b_queue, b_deferred), (w_visits, w_queue, w_deferred) = bare, wrapped
        seen = {rid for rid, _ in w_visits}
        assert [v for v in b_visits if v[0] in seen] == w_visits
        assert all(what == "skip" for rid, what in b_visits if rid not in seen)
        assert (w_queue, w_deferred) == (b_queue, b_deferred)


@pytest.mark.release_slow  # an import check; every test here loads the classes on each release
def test_the_deploy_classes_load_no_tool_dependency():
    """What vLLM loads with `--scheduler-cls` imports vLLM, spec and policy only:
    no matplotlib, Z3, Hypothesis or Ray enters the engine process."""
    import os
    import subprocess
    import sys

    code = ("import sys, lora_sched.scheduler, lora_sched.recorder; "
            "print([m for m in ('matplotlib', 'z3', 'hypothesis', 'ray') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


# ---- vLLM 0.34's admission features the model does not follow ----------------------

_UNMODELLED = [  # (scheduler config, prefix caching, the classes' flag, the recorder's)
    ({"cache_aware_admission_window": 4}, True, "--cache-aware-admission-window 4", "--no-enable-prefix-caching"),
    ({"max_num_inflight_kv_loads": 2}, False, "--max-num-inflight-kv-loads 2", "--max-num-inflight-kv-loads 2"),
]


@pytest.mark.parametrize("scheduler, prefix_caching, flag, recorder_flag", _UNMODELLED)
def test_unmodelled_admission_features_refuse_to_start(scheduler, prefix_caching, flag, recorder_flag):
    """With a 0.34 feature on that reorders or splits `waiting` behind fair's
    back, the deploy classes and the recorder refuse to start in one line
    naming the flag; stock vLLM builds the same config. Releases before 0.34
    have no such setting (so nothing to refuse)."""
    import copy

    from lora_sched.conformance.inprocess import make_scheduler
    from lora_sched.spec.config import Config
    from vllm.config import SchedulerConfig

    from lora_sched.scheduler import CLASSES

    field = next(iter(scheduler))
    if field not in SchedulerConfig.__dataclass_fields__:
        from lora_sched.recorder import installed_release

        assert installed_release() in ("0.32", "0.33")
        return
    stock = make_scheduler(Config(), "vllm")
    vllm_config = copy.deepcopy(stock.vllm_config)
    for key, value in scheduler.items():
        setattr(vllm_config.scheduler_config, key, value)
    vllm_config.cache_config.enable_prefix_caching = prefix_caching
    args = dict(vllm_config=vllm_config, kv_cache_config=stock.kv_cache_config,
                structured_output_manager=stock.structured_output_manager, block_size=stock.block_size,
                log_stats=False)
    from vllm.v1.core.sched.scheduler import Scheduler

    Scheduler(**args)  # stock vLLM starts with it
    for cls in (c for pair in CLASSES.values() for c in pair):
        with pytest.raises(ValueError) as info:
            cls(**args)
        msg = str(info.value)
        assert "\n" not in msg and flag in msg and msg.startswith("lora_sched: "), msg
    recorder = type(stock)(**args)
    with pytest.raises(RuntimeError, match=recorder_flag):
        recorder.start_recording("/dev/null")
