"""`fair` (and `blocking`, and the field's gates) as vLLM scheduler classes: deploy with one flag.

    python -m vllm.entrypoints.openai.api_server ... --enable-lora \\
        --scheduler-cls lora_sched.scheduler.AsyncFairScheduler \\
        --additional-config '{"lora_sched": {"starvation_steps": 16}}'

`AsyncFairScheduler` subclasses vLLM's `AsyncScheduler` (the base vLLM tells
custom schedulers to use, and its default on GPU); `FairScheduler` subclasses
the synchronous `Scheduler`. Every policy class is `GateMixin` driving the
gate object of `policy` (`make_gate`) that the reference core runs, fed from
vLLM's own state: `fair`'s `FairGate` (whose `FairGuard` the trace checker
runs too, so the three cannot drift apart), and the field's reference gates,
`DrainerScheduler` (SGLang's LoRADrainer), `TimesliceScheduler` (LoRAX's
adapter cycle) and `VtcScheduler` (VTC), each with an `Async` twin.

How the policy gets into vLLM. vLLM (0.32, 0.33) decides LoRA admission inline in
`Scheduler.schedule()` (a ~900-line method) and offers no hook. Rather than
copy the method (a fork) or patch its text (brittle), `hook_schedule` parses
vLLM's own `schedule()` with `ast`, finds two nodes by their shape, and adds
two hook calls; every other statement is vLLM's, unchanged:

1. the LoRA-cap `if` (its test reads `max_loras`, `scheduled_loras` and
   `lora_request`; its body is `skip_request(...); continue`) becomes
   `_d = self._lora_gate(request, scheduled_loras)`, then `break` on "stop"
   and vLLM's own skip body on "skip";
2. the `if` that guards the waiting scan (its test reads `preempted_reqs`;
   it holds `while token_budget > 0:`) gets
   `self._before_waiting_scan(scheduled_loras)` as its first statement
   (`scheduled_loras` is vLLM's own set, which its scan then grows).

A gate's scan order (`scan_order`) is applied by `ScanOrderQueue`, a
`RequestQueue` around vLLM's own queue that yields the pinned requests
before the others for one scan and, when the scan puts skipped requests
back, restores the order they had (as the reference keeps it). A gate that
indexes `waiting` itself and puts one request first (`fair`'s r*, through
`Gate.front`) leaves vLLM's FCFS deque in place: r* is moved to its front
for the scan and, if the scan leaves it waiting, moved back to where the
reference keeps it (`_put_first`, `_put_back`), so the scan sees vLLM's
own deque in vLLM's own order. Once the cap is full (`Gate.cap_closed`), or
fair holds an adapter for the rest of the scan (`FairGate.held_for_scan`),
the requests vLLM's scan would only skip are passed over before its loop
reaches them (`PassOverQueue`, for that one scan: in the FCFS deque the
scan reads past them, and nothing moves but the requests that leave it; in
the heap they are popped and pushed back), so they end among its skipped
requests in the order they had; and when a tally of the queue (per
adapter, from the gate's index, and how many are not yet in vLLM's
`deferred_waiting`) shows that all but the requests that arrived since the
last scan would only be skipped, those arrivals are visited first and the
scan ends after them. So vLLM's loop visits the requests that can run, not
the whole backlog. No request field is written.

If the installed vLLM is not a release `spec.releases` lists (0.32.x,
0.33.x), or its `schedule()` does not have exactly one node of each shape,
import fails with `UnsupportedVllm`, naming the installed vLLM version and
the supported range, instead of running a silently different scheduler.

Every class records a `lora-sched-trace` of every step when the engine
process has `LORA_SCHED_TRACE=PATH` in its environment
(`lora_sched.recorder`), and is otherwise inert, so live conformance and
the live benchmark run exactly the classes users deploy.

`starvation_steps` (S of `policy.fair`, in prefill cadences: S steps, or
S x `--prefill-schedule-interval` steps under a prefill throttle; the
drainer's wait threshold and the time slice's length, in steps; default 16)
comes from vLLM's
`--additional-config '{"lora_sched": {"starvation_steps": N}}'`; any other
key, or a value that is not an integer >= 0, stops the engine with an error
naming it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import suppress
from itertools import chain, compress, count, islice
from operator import is_
from typing import Any

import vllm
import vllm.v1.core.sched.scheduler as _vsched
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import PriorityRequestQueue, RequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from lora_sched.policy import make_gate
from lora_sched.policy.gate import Decision, Gate, ScanContext
from lora_sched.recorder import RecorderMixin, config_of
from lora_sched.spec import releases
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request as SpecRequest
from lora_sched.spec.state import ReqState, State

_log = init_logger("vllm.lora_sched")  # under "vllm", whose handlers vLLM configures
# The releases whose schedule() shape this module was built and conformed against (spec.releases).
SUPPORTED_VLLM = releases.SUPPORTED
CONFIG_KEY = "lora_sched"
SETTINGS = {"starvation_steps": Config().starvation_steps}


class UnsupportedVllm(ImportError):
    """vLLM's `schedule()` lacks a shape the hooks need."""


# ---- the AST hook -------------------------------------------------------------

def _names(node: ast.AST) -> set[str]:
    """Every identifier and attribute name read in `node`."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _is_lora_cap_if(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or node.orelse:
        return False
    body = node.body
    return (
        {"max_loras", "scheduled_loras", "lora_request"} <= _names(node.test)
        and len(body) == 2
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Call)
        and isinstance(body[0].value.func, ast.Name)
        and body[0].value.func.id == "skip_request"
        and isinstance(body[1], ast.Continue)
    )


def _is_budget_loop(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.While)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "token_budget"
        and isinstance(node.test.ops[0], ast.Gt)
    )


def _is_waiting_scan_if(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and "preempted_reqs" in _names(node.test)
        and any(_is_budget_loop(n) for n in node.body)
    )


def _find(tree: ast.AST, pred: Any, what: str, version: str) -> tuple[list[ast.stmt], int]:
    """The one statement list and index holding a node matching `pred`."""
    found = []
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, field, None)
            if isinstance(stmts, list):
                found += [(stmts, i) for i, s in enumerate(stmts) if pred(s)]
    if len(found) != 1:
        raise UnsupportedVllm(
            f"lora_sched.scheduler: vLLM {version}'s Scheduler.schedule() has {len(found)} {what} "
            f"(expected exactly 1); lora_sched supports vLLM {SUPPORTED_VLLM}. Install a supported vLLM "
            f"or update lora_sched.scheduler.hook_schedule for this one."
        )
    return found[0]


def hook_schedule(source: str, *, version: str = vllm.__version__, filename: str = _vsched.__file__) -> Any:
    """vLLM's `schedule()` (its source text) with the two hooks added; returns the function."""
    tree = ast.parse(textwrap.dedent(source))
    stmts, i = _find(tree, _is_lora_cap_if, "LoRA-cap `if` blocks (`skip_request(...); continue` "
                     "under a test of max_loras / scheduled_loras)", version)
    original = stmts[i]
    hook = ast.parse(
        "_lora_decision = self._lora_gate(request, scheduled_loras)\n"
        "if _lora_decision == 'stop':\n    break\n"
        "if _lora_decision == 'skip':\n    pass\n"
    ).body
    assert isinstance(original, ast.If) and isinstance(hook[2], ast.If)
    hook[2].body = original.body  # vLLM's own skip: skip_request(request_queue); continue
    for node in hook:
        ast.copy_location(node, original)
    stmts[i:i + 1] = hook
    stmts, i = _find(tree, _is_waiting_scan_if, "waiting-scan blocks (`if not preempted_reqs ...:` "
                     "holding `while token_budget > 0:`)", version)
    scan = stmts[i]
    assert isinstance(scan, ast.If)
    call = ast.parse("self._before_waiting_scan(scheduled_loras)").body[0]
    scan.body.insert(0, ast.copy_location(call, scan.body[0]))
    ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {}
    # Compile under vLLM's module's __future__ flags, not this module's.
    flags = getattr(vars(_vsched).get("annotations"), "compiler_flag", 0)
    code = compile(tree, f"{filename} (lora_sched hooks)", "exec", flags=flags, dont_inherit=True)
    exec(code, vars(_vsched), namespace)  # noqa: S102
    return namespace["schedule"]


def check_version(version: str) -> str:
    """The registry's release for vLLM `version` (`0.33.0` -> `0.33`), or
    `UnsupportedVllm` naming the version and the supported range."""
    try:
        return releases.get(version).name
    except releases.UnknownRelease:
        raise UnsupportedVllm(
            f"lora_sched.scheduler: vLLM {version} is not a supported release; lora_sched supports vLLM "
            f"{SUPPORTED_VLLM}. Install a supported vLLM, or add the release to lora_sched.spec.releases "
            f"once the conformance suite passes on it."
        ) from None


RELEASE = check_version(vllm.__version__)
_SCHEDULE = hook_schedule(inspect.getsource(Scheduler.schedule))


# ---- the scan order ---------------------------------------------------------------

class ScanOrderQueue(RequestQueue):
    """vLLM's waiting queue, yielding pinned requests first, for one scan.

    A policy pins the order its scan visits (`fair`: r* alone; a reference
    gate: its `scan_order`). Each `peek_request` / `pop_request` yields the
    first pinned request still queued, then the queue's own order.
    Everything else is delegated to the queue vLLM built (FCFS deque or
    priority heap). While a scan is pinned, requests vLLM puts back
    (`prepend_requests`, its skipped requests) are restored to the order the
    queue had when the scan started, so the scan order reorders nothing that
    outlives the scan. One pinned request in an FCFS queue (`fair`'s r*) is
    put back in O(visited): its place then is its place when the scan began
    less the requests ahead of it that the scan took out (the skipped ones
    come back in visit order, which is queue order); otherwise the queue is
    re-sorted by the order it had when the scan began."""

    def __init__(self, inner: RequestQueue) -> None:
        self.inner = inner
        self.front: list[Request] = []
        self._order: dict[str, int] | None = None
        self._pinned: Request | None = None  # the one pinned request of the O(visited) path
        self._place = 0  # its index in the FCFS queue when the scan began
        self._popped: list[Request] = []  # requests the scan took out, in visit order
        self._queued = False  # `pin(queued=True)`

    def pin(self, order: Iterable[Request], *, queued: bool = False) -> None:
        """Yield `order` first. `queued`: its requests are in the queue until
        the scan pops them (no membership test per peek)."""
        self.front = list(order)
        self._popped = []
        self._queued = queued
        if len(self.front) == 1 and isinstance(self.inner, deque):
            self._pinned, self._order = self.front[0], None
            self._place = self.inner.index(self._pinned) if self._pinned in self.inner else 0
        elif self.front and not isinstance(self.inner, PriorityRequestQueue):
            self._pinned, self._order = None, {r.request_id: i for i, r in enumerate(self.inner)}
        else:  # the heap puts back by its own key: no order to restore
            self._pinned, self._order = None, None

    def unpin(self) -> None:
        self.front, self._order, self._pinned, self._popped = [], None, None, []

    def _head(self) -> Request | None:
        while self.front and not self._queued and self.front[0] not in self.inner:
            self.front.pop(0)
        return self.front[0] if self.front else None

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def pop_request(self) -> Request:
        head = self._head()
        if head is not None:
            self.front.pop(0)
            self.inner.remove_request(head)
            out = head
        else:
            out = self.inner.pop_request()
        if self._pinned is not None:
            self._popped.append(out)
        return out

    def peek_request(self) -> Request:
        head = self._head()
        return head if head is not None else self.inner.peek_request()

    def prepend_request(self, request: Request) -> None:
        self.inner.prepend_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        requests = list(requests)
        self.inner.prepend_requests(requests)
        star = self._pinned
        if star is not None and any(r is star for r in requests):
            back = {id(r) for r in requests}
            ahead = [r for r in self._popped if r is not star][:self._place]
            place = self._place - sum(1 for r in ahead if id(r) not in back)
            if place:
                inner: Any = self.inner
                inner.remove(star)
                inner.insert(place, star)
            return
        order = self._order
        if order is not None and not isinstance(self.inner, PriorityRequestQueue):
            rest = list(self.inner)
            self.inner.remove_requests(rest)
            rest.sort(key=lambda r: order.get(r.request_id, len(order)))
            for r in rest:
                self.inner.add_request(r)

    def remove_request(self, request: Request) -> None:
        self.inner.remove_request(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        self.inner.remove_requests(requests)

    def __bool__(self) -> bool:
        return bool(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.inner)


class PassOverQueue(RequestQueue):
    """vLLM's waiting queue (FCFS deque or priority heap) for one scan of a
    gate with `cap_closed` (`fair`), passing over the requests the full cap
    (or fair's hold) skips.

    Once the cap is full, vLLM's scan visits every waiting request of another
    adapter only to skip it (its loop's checks, the hooked LoRA check,
    `skip_request`): under a backlog over many adapters that is most of
    `schedule()`'s time. This queue passes such a request over before vLLM's
    loop reaches it (in `__bool__`, which the loop asks right before each
    `peek_request`) when vLLM's own visit would skip it and do nothing else:
    the driver's `_lora_gate` shortcut skips it (an adapter (> 0) outside
    `cap_closed` or in `held_for_scan`, not put first, no admission
    pending), its status is plain WAITING or PREEMPTED
    (`_handle_blocked_waiting_request` changes nothing), it holds no KV
    blocks (the skip would queue it in `waiting`, not
    `kv_holding_waiting`), and it is already in vLLM's `deferred_waiting`
    (the skip's `deferred_waiting.add` is a no-op).

    In the FCFS deque nothing moves while the scan runs: the scan reads the
    deque from a place (`at`), which a run passed over moves on by its
    length and each `pop_request` by one (noting the place, `popped`).
    vLLM's own skips leave a FCFS deque in the order it had, less the
    requests that left it; so when vLLM puts its skipped requests back
    (`prepend_requests`), or after the scan (`restore`), the popped requests
    it did not put back (admitted, or queued in `kv_holding_waiting`) are
    deleted from their places (`_settle`: one `del` each, at C speed),
    however long the runs passed over. In the heap the passed-over requests
    are popped and pushed back by their key (where vLLM's own put-back
    pushes too). Either way the queue ends as vLLM's own skips leave it:
    every request still waiting, in the order it had.

    A long backlog would still cost a visit per request here. So the queue
    also keeps a tally (`count`): per adapter, the requests not yet visited
    (from the gate's index), and how many are not yet deferred. When it
    shows that everything but the requests that arrived since the last scan
    (the driver's `tail`, still at the deque's back) would only be skipped,
    the scan's place moves to the tail (`_tail_first`, O(1)), vLLM visits
    it, and the scan ends (`__bool__` answers False once) before the
    prefix, which stays where it was, ahead of the tail. When requests of
    adapters the scan may still admit stand in the way, the run up to the
    next of them is read off their places (`_jump`), found at C speed from
    the driver's waiting requests per adapter: when they are few, where the
    last scan found them (`_places`), checked request by request; else by
    one pass over the deque, after a stretch of the run is walked (a short
    run costs less to walk than the pass). `passed` and `tails_first` (on
    the owner) count over the scheduler's life."""

    def __init__(self, inner: Any, owner: Any) -> None:
        self.inner = inner
        self.owner = owner
        self.fcfs = isinstance(inner, deque)
        # FCFS: the place of the next request the scan reads (all before it were
        # passed over or popped), the places vLLM's loop popped (in visit order),
        # and an iterator over the deque that yields the request at `_it_at` next
        self.at = 0
        self.popped: list[tuple[int, Request]] = []
        self._it: Iterator[Request] | None = None
        self._it_at = 0
        self.taken: list[Request] = []  # heap: out of the queue this scan, in visit order
        self.aside: set[Request] = set()  # heap: those passed over, not yet put back (hashed by identity)
        self.scanning = True
        # The tally that lets the scan end at once (`count`): None, or the
        # queue's requests not yet visited per adapter, ...
        self.left: dict[int, int] | None = None
        self.undeferred = 0  # ... how many of them are not in `deferred_waiting`,
        self.first_left: set[str] = set()  # ... and the requests put first not yet visited.
        self.tail: list[Request] = []  # arrived since the last scan (the driver's), for `_tail_first`
        self.prefix: int | None = None  # `_tail_first`: the prefix's length while the tail goes first
        self.tail_at = 0  # ... and the tail's place
        self._tail_stats: tuple[dict[int, int], int] | None = None  # per adapter, not deferred
        # `_jump`: the places where a run must end, when they were found (the
        # adapters that may still be admitted), the next one
        self._stops_key: tuple[tuple[int, ...], int] | None = None
        self._stop_at: list[int] = []
        self._stop_next = 0

    def count(self, waiting_by_adapter: dict[int, int], kv_holding: Iterable[Request]) -> None:
        """Start the tally from the gate's count of waiting requests per adapter
        (both of vLLM's queues) less `kv_holding_waiting`'s. It is kept only
        if it adds up to this queue's length and `deferred_waiting` (which
        vLLM keeps within its two queues) leaves a count >= 0 outside it."""
        left = dict(waiting_by_adapter)
        deferred = self.owner.deferred_waiting
        held_deferred = 0
        for r in kv_holding:
            a = _adapter(r)
            left[a] = left.get(a, 0) - 1
            held_deferred += r in deferred
        n = self._unvisited()
        undeferred = n - (len(deferred) - held_deferred)
        if sum(left.values()) == n and undeferred >= 0 and min(left.values(), default=0) >= 0:
            self.left, self.undeferred = left, undeferred
            self.first_left = set(self.owner._first)

    def _unvisited(self) -> int:
        """The requests the scan has not reached (in the heap, all it holds)."""
        return len(self.inner) - self.at

    def _passes_but(self, k: int, tail_left: dict[int, int], tail_undeferred: int) -> bool:
        """Every request not yet visited but the last `k` (of which `tail_left`
        per adapter, `tail_undeferred` not deferred) would be skipped with
        nothing else done, by the tally, in O(max_loras): all deferred, plain
        (the driver knows no blocked status is waiting), of an adapter (> 0)
        outside `cap_closed` or in `held_for_scan`; none put first; and none
        holds KV blocks, as vLLM queues those in `kv_holding_waiting`."""
        owner, left = self.owner, self.left
        m = self._unvisited() - k
        if left is None or m <= 0 or owner._candidate is not None or self.first_left or owner._blocked \
                or self.undeferred != tail_undeferred:
            return False
        closed, held = owner._closed, owner._held
        if closed is None:
            return bool(held) and m == sum(left.get(a, 0) - tail_left.get(a, 0) for a in held if a > 0)
        return left.get(0, 0) == tail_left.get(0, 0) and all(
            left.get(a, 0) == tail_left.get(a, 0) for a in closed if a not in held)

    def _tail_first(self) -> bool:
        """If the requests not yet visited are those that arrived since the
        last scan (the driver's `tail`, appended in order, not yet deferred)
        behind a prefix that would only be skipped, move the scan's place to
        the tail and end the scan when it has been visited (O(1)): `prefix`
        is the prefix's length, `tail_at` the tail's place; the prefix stays
        where it is, ahead of the tail, as vLLM's own skips would leave it."""
        tail = self.tail
        k = len(tail)
        if not self.fcfs or self.left is None or k > self._unvisited() \
                or self.owner._candidate is not None or self.first_left:
            return False
        if self._tail_stats is None:  # once a scan: the tail is unvisited while k <= the unvisited
            if k and any(x is not y for x, y in zip(reversed(self.inner), reversed(tail), strict=False)):
                self.left = None  # something else joined behind them, or one left: no tally
                return False
            tail_left: dict[int, int] = {}
            for r in tail:
                a = _adapter(r)
                tail_left[a] = tail_left.get(a, 0) + 1
            deferred = self.owner.deferred_waiting
            self._tail_stats = (tail_left, sum(r not in deferred for r in tail))
        if not self._passes_but(k, *self._tail_stats):
            return False
        self.prefix = self._unvisited() - k
        self.at = self.tail_at = len(self.inner) - k
        self.owner.tails_first += 1
        return True

    def _settle(self, skipped: Iterable[Request]) -> None:
        """The deque as vLLM's own skips leave it, once its scan is over: the
        requests vLLM popped and did not put back (`skipped`) are deleted
        from their places, the last first (O(their distance to the nearer
        end), at C speed). Everything else never moved: the requests passed
        over, those vLLM skipped, and, after `_tail_first`, the prefix ahead
        of the tail. A request put back that this scan did not pop (vLLM's
        loop puts back only what it popped) goes to the front, as vLLM's
        own put-back would put it."""
        skipped = list(skipped)
        back = set(skipped)
        popped, self.popped = self.popped, []
        self._it = None
        q = self.inner
        for place, r in reversed(popped):
            if r in back:
                back.discard(r)
            else:
                del q[place]
        if back:
            q.extendleft([r for r in skipped if r in back])

    def _visited(self, r: Request) -> None:
        left = self.left
        if left is not None:
            left[_adapter(r)] -= 1
            self.undeferred -= r not in self.owner.deferred_waiting
            self.first_left.discard(r.request_id)

    @staticmethod
    def _passes(r: Request, closed: set[int] | None, held: set[int] | frozenset[int], first: set[str],
                deferred: set[Request]) -> bool:
        lora = r.lora_request
        if lora is None or lora.lora_int_id <= 0:
            return False
        a = lora.lora_int_id
        return ((a in held or (closed is not None and a not in closed)) and r.request_id not in first
                and r.status in _PLAIN and not r.num_computed_tokens and r in deferred)

    def _pass_over(self) -> None:
        owner = self.owner
        closed, held = owner._closed, owner._held
        if (closed is None and not held) or owner._candidate is not None or not self.scanning:
            return
        first, deferred = owner._first, owner.deferred_waiting
        if self.fcfs:  # the run at the scan's place that vLLM's visits would skip: read past it
            if self.at >= len(self.inner) or not self._passes(self.inner[self.at], closed, held, first, deferred):
                return  # no run: nothing to find
            n = self._jump(eager=False)
            if n is None:  # walk; a stretch first when the tally could place the run's end after all
                stretch = max(_STRETCH, self._unvisited() // 16)
                n = self._walk(closed, held, first, deferred, stretch)
                if n == stretch:
                    self.at += n
                    owner.passed += n
                    n = self._jump()
                    if n is None:
                        n = self._walk(closed, held, first, deferred)
            self.at += n
            owner.passed += n
            # After a jump the run holds no request of an adapter the scan may
            # still admit, whose counts are all the tally reads from then on
            # (the cap stays closed to the scan's end, and the held adapters
            # only grow), so the others' counts are left as they were.
            return
        q, passes = self.inner, self._passes  # the heap's order: its top, while it passes
        run = []
        while q and passes(q.peek_request(), closed, held, first, deferred):
            run.append(q.pop_request())
        if run:
            self.taken += run
            self.aside.update(run)
            owner.passed += len(run)
            left = self.left
            if left is not None:  # all deferred: only the adapters' counts move
                for r in run:
                    left[r.lora_request.lora_int_id] -= 1

    def _iter_at(self) -> Iterator[Request]:
        """An iterator over the deque from the scan's place: one, kept through
        the scan (nothing changes the deque while it runs), moved on at C
        speed; a new one when the deque changed or it is past the place."""
        it, k = self._it, self.at - self._it_at
        if it is None or k < -1:
            it, k = iter(self.inner), self.at
        elif k == -1:  # the request read last, not passed over, is the place's
            it, k = chain((self.inner[self.at],), it), 0
        if k:
            next(islice(it, k, k), None)
        self._it, self._it_at = it, self.at
        return it

    def _walk(self, closed: set[int] | None, held: set[int] | frozenset[int], first: set[str],
              deferred: set[Request], limit: int | None = None) -> int:
        """The run's length, request by request from the scan's place (each
        one's adapter counted off the tally, all being deferred), or `limit`
        when the run is at least that long."""
        n, plain, left = 0, _PLAIN, self.left
        it = self._iter_at()
        for r in it if limit is None else islice(it, limit):  # `_passes`, inlined: most of a long backlog's scan
            lora = r.lora_request
            if lora is None:
                break
            a = lora.lora_int_id
            if a <= 0 or not (a in held or (closed is not None and a not in closed)) \
                    or r.status not in plain or r.num_computed_tokens or r not in deferred \
                    or r.request_id in first:
                break
            n += 1
            if left is not None:
                left[a] -= 1
        else:
            self._it_at = self.at + n
            return n
        self._it_at = self.at + n + 1  # read, not passed over
        return n

    def _jump(self, *, eager: bool = True) -> int | None:
        """The run's length by the tally, at C speed, or None when the tally
        cannot tell (or, not `eager`, when the places would have to be found
        and they are many: more than a tenth of the requests not yet
        visited, where a short run is walked for less; `_pass_over` walks a
        stretch first). When every request not yet visited but the tail is
        deferred and plain and none is put first, the run ends at the first
        request of an adapter the scan may still admit (the base model, and
        those in `cap_closed` not held) or of the tail: their places are
        found once (again only when a hold narrows the adapters) from the
        driver's waiting requests of those adapters (`_places`), and their
        count there must match the tally's; then, as nothing moves in the
        deque while the scan runs, the next place less the scan's is the
        run's length."""
        owner, left, tail = self.owner, self.left, self.tail
        closed, held = owner._closed, owner._held
        if left is None or closed is None or owner._blocked or self.first_left or self.prefix is not None:
            return None
        if self._tail_stats is None or self._unvisited() < len(tail):
            return None
        tail_left, tail_undeferred = self._tail_stats
        if self.undeferred != tail_undeferred:
            return None
        admissible = [0, *(a for a in closed if a not in held)]
        key = (tuple(admissible), len(held))
        if self._stops_key != key:
            want = sum(left.get(a, 0) for a in admissible) + sum(
                v for a, v in tail_left.items() if a not in admissible)
            if not eager and 10 * want > self._unvisited():
                return None
            by = owner._by_adapter
            stops = set(tail).union(*(by.get(a, ()) for a in admissible))
            places = self._places(stops, want)
            if places is None:
                self.left = None  # the driver's sets and the tally disagree: walk, this scan
                return None
            self._stops_key, self._stop_at, self._stop_next = key, places, 0
        at, here = self._stop_at, self.at
        i = self._stop_next
        while i < len(at) and at[i] < here:
            i += 1
        self._stop_next = i
        return at[i] - here if i < len(at) else len(self.inner) - here

    def _places(self, stops: set[Request], want: int) -> list[int] | None:
        """The places of `stops` in the deque from the scan's place on, in
        order, or None when they are not `want`. The tail's are at the back.
        When the others are few (with the tail, a tenth of the requests not
        yet visited, or less), each is first looked for where the last scan
        found it (`owner._stop_back`: its distance from the deque's back
        then; a request joining at the back is the `tail`, so only one
        joining elsewhere behind it, or one before the scan's place, could
        leave it short of that place): read there (`deque[i] is r`, at C
        speed), and where it is not, by `deque.index` from there on. That
        answer is exact (each place holds that very request) and complete
        when all but the ones the scan popped are found (so none of them is
        elsewhere in the deque) and they are `want`; else one
        `map(set.__contains__, ...)` over the deque from the scan's place
        finds them. The places found, when few, are kept for the next
        scan."""
        q, here, owner, tail = self.inner, self.at, self.owner, self.tail
        n, k = len(q), len(tail)
        few = 10 * len(stops) <= n - here
        places: list[int] | None = None
        found: list[Request] = []
        if few and owner._stop_back:
            found = list(stops.difference(tail, [r for _, r in self.popped]))
            back = list(map(owner._stop_back.get, map(id, found)))
            if None not in back:
                m = n - k
                places = [m - d for d in back]
                if min(places, default=here) < here or not all(map(is_, map(q.__getitem__, places), found)):
                    places = None
                    with suppress(ValueError):  # not found from its place on: look everywhere
                        places = list(map(q.index, found, [max(p, here) for p in [m - d for d in back]]))
                if places is not None:
                    found += tail
                    places += range(m, n)
        if places is None:
            flags = list(map(stops.__contains__, self._iter_at()))
            self._it = None  # read to the end
            places = list(compress(count(here), flags))
            found = list(map(q.__getitem__, places)) if few else []
        if len(places) != want:
            return None
        if few:
            owner._stop_back = {id(r): n - p for r, p in zip(found, places, strict=True)}
            places.sort()
        return places

    def __bool__(self) -> bool:
        """What vLLM's loop asks before each visit: the run at the scan's place
        it would only skip is passed over first; and when the tally shows
        that it would only skip the rest, the scan ends here (False, once),
        which leaves the queue as those skips would: in place, in order.
        Should that fail, the owner falls back to vLLM's rule (`_fault`),
        which passes nothing over, and the scan reads on from its place."""
        if not self.scanning:
            return len(self) > 0
        try:
            return self._ask()
        except Exception as exc:
            self.owner._fault("pass-over", None, exc)
            self.left = None
            return self._unvisited() > 0

    def _ask(self) -> bool:
        if self.prefix is None and not self._tail_first():
            self._pass_over()
            return self._unvisited() > 0
        if self.at < len(self.inner):  # the tail, first
            return True
        self.scanning = False  # the prefix, which would only be skipped
        self.owner.passed += self.prefix
        return False

    # What vLLM peeks right after asking is what it pops: nothing is passed over between.
    def peek_request(self) -> Request:
        return self.inner[self.at] if self.fcfs else self.inner.peek_request()

    def pop_request(self) -> Request:
        if self.fcfs:
            out = self.inner[self.at]
            self.popped.append((self.at, out))
            self.at += 1
        else:
            out = self.inner.pop_request()
            self.taken.append(out)
        self._visited(out)
        return out

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """vLLM's skipped requests back (its scan is over): in the FCFS deque,
        the ones it took and did not put back leave their places (`_settle`);
        in the heap, the passed-over ones are pushed back with them."""
        self.scanning = False
        if self.fcfs:
            self._settle(requests)
            return
        if not self.aside:
            self.inner.prepend_requests(requests)
            return
        aside, self.aside = self._aside(), set()
        self.inner.prepend_requests([*requests, *aside])

    def restore(self) -> Any:
        """After the scan: vLLM's own queue, as its skips leave it (vLLM put
        nothing back when it skipped none of its own)."""
        if self.popped or self.aside:
            self.prepend_requests(())
        self.scanning = False
        return self.inner

    def _aside(self) -> list[Request]:
        return list(filter(self.aside.__contains__, self.taken))

    # vLLM's loop only asks, peeks and pops until it puts its skipped requests
    # back; the rest keeps the passed-over requests waiting, where they were.
    # In the FCFS deque a change while the scan runs (none comes from vLLM's
    # loop) drops the tally and the places found, and moves the scan's place
    # and the popped ones' with it.
    def _changed(self) -> None:
        self._it, self._stops_key, self.left = None, None, None

    def prepend_request(self, request: Request) -> None:
        if self.fcfs and (self.scanning or self.popped):  # ahead of what the scan has not visited
            self._changed()
            self.inner.insert(self.at, request)
            return
        self.inner.prepend_request(request)

    def add_request(self, request: Request) -> None:
        if self.fcfs and (self.scanning or self.popped):
            self._changed()
        self.inner.add_request(request)

    def remove_request(self, request: Request) -> None:
        self.remove_requests([request])

    def remove_requests(self, requests: Iterable[Request]) -> None:
        requests = list(requests)
        self._stops_key = None  # `_jump`'s places move
        if self.fcfs:
            if self.scanning or self.popped:
                self._changed()
                gone = set(requests)
                places = [i for i, r in enumerate(self.inner) if r in gone]  # O(queue): no scan calls this

                def moved(p: int) -> int:
                    return p - sum(1 for i in places if i < p)

                if self.prefix is not None:
                    start = self.tail_at - self.prefix
                    self.prefix -= sum(1 for i in places if start <= i < self.tail_at)
                    self.tail_at = moved(self.tail_at)
                self.popped = [(moved(p), r) for p, r in self.popped if r not in gone]
                self.at = moved(self.at)
            self.inner.remove_requests(requests)
            return
        out = self.aside.intersection(requests)
        if out:
            self.aside -= out
            self.taken = [r for r in self.taken if r not in out]
        self.inner.remove_requests([r for r in requests if r not in out])

    def __len__(self) -> int:
        return len(self.inner) - len(self.popped) + len(self.aside)

    def __iter__(self) -> Iterator[Request]:
        """The requests waiting, in the order the queue will have if the scan
        ends now (vLLM's popped ones are not waiting until put back)."""
        if self.popped:
            out = {id(r) for _, r in self.popped}
            return iter([r for r in self.inner if id(r) not in out])
        return iter([*self._aside(), *self.inner])


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
_PLAIN = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
_STRETCH = 64  # `PassOverQueue._pass_over`: the least stretch walked before the places are found


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


def _salvage(queue: Any) -> Any:
    """vLLM's own queue under the scan's wrappers, after one of them failed:
    every request still waiting, once (a pass-over's requests set aside go
    back; those its scan popped and admitted leave)."""
    while isinstance(queue, (PassOverQueue, ScanOrderQueue)):
        if isinstance(queue, PassOverQueue) and queue.aside:
            queue.inner.prepend_requests(queue._aside())
        queue = queue.inner
    if isinstance(queue, deque):
        seen: set[Request] = set()
        keep = [r for r in queue if r.status != RequestStatus.RUNNING and not r.is_finished()
                and not (r in seen or seen.add(r))]
        queue.clear()
        queue.extend(keep)
    return queue


def _adapter(request: Request) -> int:
    lora = request.lora_request
    return lora.lora_int_id if lora is not None else 0


class HookedMixin:
    """vLLM's `schedule()` with the two hooks; the defaults keep vLLM's behaviour."""

    policy_name = "vllm"
    schedule = _SCHEDULE

    def _lora_gate(self, request: Request, scheduled_loras: set[int]) -> str:
        """'admit', 'skip' (keep scanning) or 'stop' (end the scan): vLLM's rule."""
        s: Any = self
        if s.lora_config is None or request.lora_request is None:
            return "admit"
        if cap_blocks(scheduled_loras, _adapter(request), s.lora_config.max_loras):
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
    reference core (`policy.core`) runs; this class only feeds it vLLM's state
    and applies its answers, at the points where the core calls it:

    - `scan_order(ctx, waiting)` when vLLM starts its waiting scan
      (`_before_waiting_scan`); the order is pinned on `ScanOrderQueue`;
    - `decide(ctx, key)` for every request the scan reaches the LoRA check
      with (`_lora_gate`): ADMIT, SKIP (vLLM's own skip) or STOP (`break`);
    - `admitted(ctx, key)` once a request it let through has joined
      `running` (seen at the next LoRA check, or when `schedule()` returns),
      before any later request is decided, as the core tells it;
    - `step_done(ctx, batch_loras)` after every `schedule()`;
    - `enqueued(state, key)` when a request joins vLLM's waiting queues and
      `dequeued(state, key)` when one leaves them without being admitted, so
      a gate can index the queue (`fair`'s r* in O(log W));
    - `cap_closed(ctx)`, `held_for_scan()` and `waiting_by_adapter()`, where
      the gate has them (`fair`): the adapters whose requests `decide`
      would skip for the rest of the scan, and the index's counts, so that
      the scan skips and passes over those requests without a call
      (`PassOverQueue`).

    The index follows vLLM's own queue operations, not the engine's calls:
    a request is indexed when vLLM queues it (`_enqueue_waiting_request`: an
    arrival, or a streaming-input session whose turn ended) or puts it back
    (`_preempt_request`), and leaves the index when vLLM admits or frees it.
    What vLLM does not queue is not indexed: a streaming session's next
    chunk or its close (an `add_request` with the session's id) only changes
    the session vLLM already holds. A session waiting for its client's next
    chunk (`WAITING_FOR_STREAMING_REQ`) sits in vLLM's queue but waits for
    the client, not the scheduler: it is indexed from the step that chunk
    arrives. Every request vLLM holds has its own key, the request id, or
    the id and its arrival number while a freed request of the same id is
    still in the mirror, so an id reused after a finish or an abort is a new
    request.

    `ctx.scheduled_loras` is vLLM's own `scheduled_loras` set, which its scan
    grows. `ctx.state` is `mirror`, a `spec.state.State` kept from vLLM's
    requests: queue orders, statuses and token counters (`generated` =
    `num_output_tokens`, `computed`, `stale` = `num_stale_output_tokens`,
    `placeholders`) are read from vLLM at each call; what vLLM does not keep
    the mixin records as the core does (arrival order `seq`; `waiting_since`,
    the step a request last joined `waiting`; `first_admitted`). KV blocks
    held are not mirrored (no gate reads them). A request vLLM frees stays in
    the mirror through the next `schedule()` (a gate sees it finished once,
    as in the core) and is then dropped, so a long-running server keeps no
    entry per request served.

    Fail safe: no exception from this class's own code reaches the engine.
    Whatever raises in a hook (an inconsistency between the index and
    vLLM's queues) is logged once with the request and what was expected;
    the rest of that step runs vLLM's own rule (`HookedMixin._lora_gate`,
    no pass-over), and when `schedule()` returns the mirror and the gate are
    rebuilt from vLLM's queues (`resync`), keeping each request's arrival
    order and wait. `faults` counts these over the scheduler's life.
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
        """Rebuild the mirror and the gate from vLLM's queues: `running`, then
        the waiting queues in vLLM's order. A request tracked before keeps
        its arrival order and the step it joined `waiting`; the gate starts
        afresh (fair: no r* until one has waited S steps)."""
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
        self._stock = self._resync_due = False

    # ---- the mirror ------------------------------------------------------------
    def _spec_request(self, request: Request, arrival: int) -> SpecRequest:
        """The mirror's request: what a gate reads (adapter, outputs, priority).
        A streaming session's empty first chunk counts one prompt token."""
        sp = request.sampling_params
        return SpecRequest(request.request_id, _adapter(request), max(1, request.num_prompt_tokens),
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
        rs = self.mirror.reqs[self._key[request]]
        rs.status, rs.waiting_since = "waiting", since
        if request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:
            self._paused.add(request)
            return
        if request.status not in _PLAIN:
            self._blocked.add(request)
        if self._passes_over:
            self._by_adapter.setdefault(_adapter(request), set()).add(request)
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
        self._by_adapter.get(_adapter(request), set()).discard(request)
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
        """For a gate that indexes `waiting` itself (`Gate.front`): `running`, its
        counters, and the waiting requests whose async output may be in flight
        (preempted since they last ran), in O(running); a preempted request
        is synced again when the scan decides it (`_lora_gate`), and one that
        never ran has nothing to sync."""
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
        self._by_adapter.get(_adapter(request), set()).discard(request)
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
        """`request` (r*) first in this scan. In vLLM's FCFS deque it moves to
        the front, and the requests ahead of it are kept for `_put_back`
        (O(its place), and r*, the oldest starving request, sits near the
        front); in a priority heap it is most often the top already (the heap
        is ordered by priority, then arrival), and otherwise a
        `ScanOrderQueue` yields it first for this scan. Not in `waiting` (in
        `kv_holding_waiting`, which vLLM drains first): nothing moves."""
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
        """After the scan: r*, if it is still waiting (skipped, or a stop at it),
        goes back to its place before the scan less the requests ahead of it
        that the scan took out. vLLM puts the skipped requests back at the
        front in visit order, and the scan visits r* first and then the
        queue from its front, so those still waiting of the ones ahead of r*
        are the run of them right behind r*: that run's length is its place."""
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
        decision, _why = self.gate.decide(self._ctx, self._key[request])
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
            s.waiting = _salvage(s.waiting) if self._indexed else s.waiting
            self._star_front = None

    def _step_done(self, out: Any, freed: list[tuple[str, ReqState]]) -> None:
        s: Any = self
        if not self._stock:
            self._flush_admitted()
            self._closed, self._held, self._first = None, frozenset(), set()
            self._sync()
            batch = {_adapter(s.requests[rid]) for rid in out.num_scheduled_tokens} - {0}
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
