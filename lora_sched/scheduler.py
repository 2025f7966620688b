"""`fair` (and `blocking`) as vLLM scheduler classes: deploy with one flag.

    python -m vllm.entrypoints.openai.api_server ... --enable-lora \\
        --scheduler-cls lora_sched.scheduler.AsyncFairScheduler \\
        --additional-config '{"lora_sched": {"starvation_steps": 16}}'

`AsyncFairScheduler` subclasses vLLM's `AsyncScheduler` (the base vLLM tells
custom schedulers to use, and its default on GPU); `FairScheduler` subclasses
the synchronous `Scheduler`. Both run `policy.fair.FairGuard`, the object the
reference policy and the trace checker run, so the three cannot drift apart.

How the policy gets into vLLM. vLLM 0.32 decides LoRA admission inline in
`Scheduler.schedule()` (a ~900-line method) and offers no hook. Rather than
copy the method (a fork) or patch its text (brittle), `hook_schedule` parses
vLLM's own `schedule()` with `ast`, finds two nodes by their shape, and adds
two hook calls; every other statement is vLLM's, unchanged:

1. the LoRA-cap `if` (its test reads `max_loras`, `scheduled_loras` and
   `lora_request`; its body is `skip_request(...); continue`) becomes
   `_d = self._lora_gate(request, scheduled_loras)`, then `break` on "stop"
   and vLLM's own skip body on "skip";
2. the `if` that guards the waiting scan (its test reads `preempted_reqs`;
   it holds `while token_budget > 0:`) gets `self._before_waiting_scan()` as
   its first statement.

r* is visited first by `StarFirstQueue`, a `RequestQueue` around vLLM's own
queue that yields r* before the others for one scan and, when the scan puts
skipped requests back, restores the order they had (as the reference keeps
it). No request field is written.

If vLLM's `schedule()` does not have exactly one node of each shape, import
fails with `UnsupportedVllm`, naming the installed vLLM version and the
supported range, instead of running a silently different scheduler.

Every class records a `lora-sched-trace` of every step when the engine
process has `LORA_SCHED_TRACE=PATH` in its environment
(`conformance.recorder`), and is otherwise inert, so live conformance and
the live benchmark run exactly the classes users deploy.

`starvation_steps` (S of `policy.fair`, default 16) comes from vLLM's
`--additional-config '{"lora_sched": {"starvation_steps": N}}'`; any other
key, or a value that is not an integer >= 0, stops the engine with an error
naming it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable, Iterator
from typing import Any

import vllm
import vllm.v1.core.sched.scheduler as _vsched
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import PriorityRequestQueue, RequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from lora_sched.conformance.recorder import RecorderMixin
from lora_sched.policy.fair import FairGuard, Waiting, slot_outputs_left
from lora_sched.spec.cap import cap_blocks
from lora_sched.spec.config import Config

_log = init_logger("vllm.lora_sched")  # under "vllm", whose handlers vLLM configures
SUPPORTED_VLLM = "0.32.x"  # versions whose schedule() shape this module was built and tested against
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
    call = ast.parse("self._before_waiting_scan()").body[0]
    scan.body.insert(0, ast.copy_location(call, scan.body[0]))
    ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {}
    # Compile under vLLM's module's __future__ flags, not this module's.
    flags = getattr(vars(_vsched).get("annotations"), "compiler_flag", 0)
    code = compile(tree, f"{filename} (lora_sched hooks)", "exec", flags=flags, dont_inherit=True)
    exec(code, vars(_vsched), namespace)  # noqa: S102
    return namespace["schedule"]


_SCHEDULE = hook_schedule(inspect.getsource(Scheduler.schedule))
if not vllm.__version__.startswith("0.32."):
    _log.warning("lora_sched.scheduler: built and tested against vLLM %s; this is vLLM %s. The hooks found "
                 "their shapes, but run the conformance tests before trusting it.", SUPPORTED_VLLM, vllm.__version__)


# ---- r* first -------------------------------------------------------------------

class StarFirstQueue(RequestQueue):
    """vLLM's waiting queue, yielding a pinned request (r*) first for one scan.

    Everything else is delegated to the queue vLLM built (FCFS deque or
    priority heap). While a scan is pinned, requests vLLM puts back
    (`prepend_requests`, its skipped requests) are restored to the order the
    queue had when the scan started, so visiting r* first reorders nothing
    that outlives the scan."""

    def __init__(self, inner: RequestQueue) -> None:
        self.inner = inner
        self.star: Request | None = None
        self._order: dict[str, int] | None = None

    def pin(self, star: Request) -> None:
        self.star = star
        self._order = {r.request_id: i for i, r in enumerate(self.inner)}

    def unpin(self) -> None:
        self.star, self._order = None, None

    def _star_here(self) -> bool:
        return self.star is not None and self.star in self.inner

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def pop_request(self) -> Request:
        if self._star_here():
            star, self.star = self.star, None
            assert star is not None
            self.inner.remove_request(star)
            return star
        return self.inner.pop_request()

    def peek_request(self) -> Request:
        if self._star_here():
            assert self.star is not None
            return self.star
        return self.inner.peek_request()

    def prepend_request(self, request: Request) -> None:
        self.inner.prepend_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        self.inner.prepend_requests(requests)
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

def _outputs_left(request: Request) -> int:
    """max_tokens - outputs applied (in-flight async outputs not counted), as
    `policy.fair.Waiting.left` and `StepView.outputs_left` count them."""
    return request.max_tokens - request.num_output_tokens


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

    def _before_waiting_scan(self) -> None:
        pass


class BlockingMixin(HookedMixin):
    """`blocking` (V1 before PR #15422): the LoRA cap ends the scan."""

    policy_name = "blocking"

    def _on_cap(self, request: Request) -> str:
        return "stop"


class FairMixin(HookedMixin):
    """`policy.fair` inside vLLM: this class only feeds `FairGuard` vLLM's
    state and applies its answers."""

    policy_name = "fair"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        s: Any = self
        self.starvation_steps = settings_from(s.vllm_config)["starvation_steps"]
        _log.info("lora_sched: fair on %s, starvation_steps=%d, max_loras=%s", type(self).__name__,
                  self.starvation_steps, s.lora_config.max_loras if s.lora_config else None)
        self._since: dict[str, int] = {}  # request id -> step it last joined waiting
        self._seq: dict[str, int] = {}  # request id -> arrival order (of requests not yet freed)
        self._arrivals = 0
        self._guard: FairGuard | None = None
        self._star: Request | None = None
        s.waiting = StarFirstQueue(s.waiting)

    def guard(self) -> FairGuard:
        if self._guard is None:
            s: Any = self
            self._guard = FairGuard(self.starvation_steps, s.lora_config.max_loras if s.lora_config else 1,
                                    s.policy == SchedulingPolicy.PRIORITY)
        return self._guard

    def _active(self) -> set[int]:
        s: Any = self
        return {a for a in (_adapter(r) for r in s.running) if a > 0}

    def add_request(self, request: Request) -> None:
        s: Any = self
        super().add_request(request)  # type: ignore[misc]
        self._since[request.request_id] = s.current_step + 1
        self._seq[request.request_id] = self._arrivals
        self._arrivals += 1

    def _preempt_request(self, request: Request, *args: Any, **kwargs: Any) -> None:
        s: Any = self
        super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        self._since[request.request_id] = s.current_step

    def _before_waiting_scan(self) -> None:
        s: Any = self
        step = s.current_step
        queue = list(s.waiting)
        waiting = [Waiting(r.request_id, _adapter(r), self._since.get(r.request_id, step),
                           self._seq.get(r.request_id, 0), r.priority, r.num_stale_output_tokens > 0,
                           _outputs_left(r))
                   for r in queue]
        star_id = self.guard().begin_scan(step, waiting)
        self._star = next((r for r in queue if r.request_id == star_id), None)
        if self._star is not None:
            s.waiting.pin(self._star)

    def _lora_gate(self, request: Request, scheduled_loras: set[int]) -> str:
        s: Any = self
        g = self.guard()
        star = self._star
        if star is not None and g.star == star.request_id and star.status == RequestStatus.RUNNING:
            g.admitted(star.request_id)  # r* got in earlier in this scan: its victims flow again
        active = self._active()  # every running request, admitted ones included
        if star is not None and request is star:
            g.visit_star(slot_outputs_left((_adapter(r), _outputs_left(r)) for r in s.running))
        adapter = _adapter(request)
        if g.holds(request.request_id, adapter):
            return "skip"
        if s.lora_config is not None and cap_blocks(active, adapter, s.lora_config.max_loras):
            return "skip"
        return "admit"

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        s: Any = self
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            s.waiting.unpin()
        star, self._star = self._star, None
        g = self.guard()
        if star is not None and g.star == star.request_id and star.status == RequestStatus.RUNNING:
            g.admitted(star.request_id)
        return out

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        """Every finished or aborted request passes here: forget it (a long-running
        server must not keep one entry per request ever served)."""
        self._since.pop(request.request_id, None)
        self._seq.pop(request.request_id, None)
        return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]


class FairScheduler(RecorderMixin, FairMixin, Scheduler):
    """`fair` on vLLM's synchronous `Scheduler`."""


class AsyncFairScheduler(RecorderMixin, FairMixin, AsyncScheduler):
    """`fair` on vLLM's `AsyncScheduler` (recommended: vLLM's default on GPU)."""


class BlockingScheduler(RecorderMixin, BlockingMixin, Scheduler):
    """`blocking` on vLLM's synchronous `Scheduler` (for conformance and benchmarks)."""


class AsyncBlockingScheduler(RecorderMixin, BlockingMixin, AsyncScheduler):
    """`blocking` on vLLM's `AsyncScheduler`."""


CLASSES: dict[str, tuple[type, type]] = {
    "blocking": (BlockingScheduler, AsyncBlockingScheduler),
    "fair": (FairScheduler, AsyncFairScheduler),
}
