"""`blocking` and `fair` inside vLLM: scheduler classes for `--scheduler-cls`.

vLLM 0.32 makes the LoRA admission decision inline in `Scheduler.schedule()`
(a ~900-line method): when a waiting request's adapter would exceed
`max_loras`, `skip_request(...); continue`. No hook exists, and overriding
`schedule()` by copying it would fork vLLM's scheduler. The least invasive
correct change is a *source patch* of that one decision: we take vLLM's own
`schedule()` source, replace exactly the LoRA-check block with a call to
`self._lora_decision(request, scheduled_loras)` (admit / skip / stop), add one
call before and one after the waiting scan (for `fair`'s scan order), and
compile the result in vLLM's module namespace. Everything else (budgets, KV,
preemption, async, chunking) is vLLM's code, byte for byte. If vLLM's source
no longer contains the block exactly once, import fails loudly instead of
running a silently different scheduler.

The decisions mirror `policy.blocking` and `policy.fair`:
- `blocking`: the cap stops the scan (`break`), as V1 did before PR #15422;
- `fair`: the starving request r* (first waiting LoRA request of an inactive
  adapter that has waited >= `starvation_steps` since it arrived or was last
  preempted, with no stale output in flight) is visited first; until it is
  admitted, LoRA requests of other adapters are skipped; otherwise vLLM's rule.
  After the scan the waiting queue is put back in its original order (minus
  admitted requests), as the reference keeps it.
"""

from __future__ import annotations

import inspect
import os
import re
import textwrap
from typing import Any

import vllm.v1.core.sched.scheduler as _vsched
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from conformance.recorder import STARVATION_ENV, RecorderMixin
from policy.fair import FairGuard, Waiting
from spec.config import Config

_LORA_CHECK = re.compile(
    r"(?P<indent>[ ]+)# Check that adding the request still respects the max_loras constraint\.\n"
    r".*?# Scheduling would exceed max_loras, skip\.\n"
    r"[ ]+skip_request\(request_queue\)\n"
    r"[ ]+continue\n",
    re.S,
)
_WAITING_LOOP = "            while token_budget > 0:\n"
_AFTER_LOOP = "            if step_skipped_kv_holding:\n"


def _patched_schedule() -> Any:
    src = textwrap.dedent(inspect.getsource(Scheduler.schedule))
    # Dedent shifts the body by the class indentation (4 spaces).
    found = list(_LORA_CHECK.finditer(src))
    if len(found) != 1:
        raise RuntimeError("conformance.policies: vLLM's schedule() no longer has the LoRA check "
                           f"this patch replaces (found {len(found)}); update the patch")
    ind = found[0].group("indent")
    hook = (f"{ind}_decision = self._lora_decision(request, scheduled_loras)\n"
            f"{ind}if _decision == 'skip':\n{ind}    skip_request(request_queue)\n{ind}    continue\n"
            f"{ind}if _decision == 'stop':\n{ind}    break\n")
    src = src[:found[0].start()] + hook + src[found[0].end():]
    loop, after = _WAITING_LOOP[4:], _AFTER_LOOP[4:]
    if src.count(loop) != 1 or src.count(after) != 1:
        raise RuntimeError("conformance.policies: vLLM's waiting scan changed shape; update the patch")
    src = src.replace(loop, "        self._before_waiting_scan(scheduled_loras)\n" + loop)
    src = src.replace(after, "        self._after_waiting_scan()\n" + after)
    namespace: dict[str, Any] = {}
    exec(compile(src, f"<patched {_vsched.__file__}:schedule>", "exec"), vars(_vsched), namespace)
    return namespace["schedule"]


_SCHEDULE = _patched_schedule()


class GatedMixin(RecorderMixin):
    """vLLM's `schedule()` with the LoRA decision delegated to `_lora_decision`."""

    def _lora_decision(self, request: Any, scheduled_loras: set[int]) -> str:
        s: Any = self
        lora = request.lora_request
        if lora is None or s.lora_config is None:
            return "admit"
        if len(scheduled_loras) == s.lora_config.max_loras and lora.lora_int_id not in scheduled_loras:
            return self._on_cap(request)
        return "admit"

    def _on_cap(self, request: Any) -> str:
        return "skip"

    def _before_waiting_scan(self, scheduled_loras: set[int]) -> None:
        pass

    def _after_waiting_scan(self) -> None:
        pass



class _PatchedScheduler(Scheduler):
    schedule = _SCHEDULE  # type: ignore[assignment]


class _PatchedAsyncScheduler(AsyncScheduler):
    schedule = _SCHEDULE  # type: ignore[assignment]


class BlockingMixin(GatedMixin):
    policy_name = "blocking"

    def _on_cap(self, request: Any) -> str:
        return "stop"


class FairMixin(GatedMixin):
    """`fair` through `policy.fair.FairGuard`, the very object the reference
    gate uses, so the decisions cannot drift apart; this class only feeds it
    vLLM's state and applies its answers."""

    policy_name = "fair"
    # The server's engine process gets it from the harness through the environment.
    starvation_steps = int(os.environ.get(STARVATION_ENV, Config().starvation_steps))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._since: dict[str, int] = {}  # request id -> step it last joined waiting
        self._guard: FairGuard | None = None
        self._star: Any = None  # r* as a vLLM Request, during one scan
        self._scan_order: list[Any] | None = None
        self._saved_priority: int | None = None

    def guard(self) -> FairGuard:
        if self._guard is None:
            s: Any = self
            self._guard = FairGuard(self.starvation_steps, s.lora_config.max_loras if s.lora_config else 1)
        return self._guard

    def add_request(self, request: Any) -> None:
        super().add_request(request)
        self._since[request.request_id] = self._rec_step + 1

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        self._since[request.request_id] = self._rec_step

    def _before_waiting_scan(self, scheduled_loras: set[int]) -> None:
        s: Any = self
        step = self._rec_step
        queue = list(s.waiting)
        waiting = [Waiting(r.request_id, r.lora_request.lora_int_id if r.lora_request else 0,
                           self._since.get(r.request_id, step), r.num_stale_output_tokens > 0)
                   for r in queue]
        star_id = self.guard().begin_scan(step, waiting, scheduled_loras)
        self._star = None
        if star_id is None:
            return
        r = next(x for x in queue if x.request_id == star_id)
        self._star = r
        self._scan_order = queue
        # Visit r* first: FCFS moves it to the head of the deque; the priority
        # heap is ordered by Request.__lt__, so r* gets the smallest priority
        # for this scan only (restored in `schedule`).
        s.waiting.remove_request(r)
        if s.policy == SchedulingPolicy.PRIORITY:
            self._saved_priority = r.priority
            r.priority = -(2**62)
            s.waiting.add_request(r)
        else:
            s.waiting.prepend_request(r)

    def _lora_decision(self, request: Any, scheduled_loras: set[int]) -> str:
        g = self.guard()
        r = self._star
        if r is not None and r.status == RequestStatus.RUNNING and g.star == r.request_id:
            g.admitted(r.request_id)  # r* got in earlier in this scan
        if r is not None and request is r:
            g.visit_star(scheduled_loras)
        adapter = request.lora_request.lora_int_id if request.lora_request else 0
        if g.holds(request.request_id, adapter):
            return "skip"
        return super()._lora_decision(request, scheduled_loras)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        out = super().schedule(*args, **kwargs)
        s: Any = self
        r = self._star
        if r is not None:
            g = self.guard()
            if r.request_id in out.num_scheduled_tokens and g.star == r.request_id:
                g.admitted(r.request_id)
            if self._saved_priority is not None:
                if r.status != RequestStatus.RUNNING:
                    s.waiting.remove_request(r)
                    r.priority = self._saved_priority
                    s.waiting.add_request(r)
                else:
                    r.priority = self._saved_priority
                self._saved_priority = None
            else:
                order = {id(x): i for i, x in enumerate(self._scan_order or [])}
                rest = list(s.waiting)
                s.waiting.remove_requests(rest)
                rest.sort(key=lambda x: order.get(id(x), len(order)))
                for x in rest:
                    s.waiting.add_request(x)
            self._star = None
            self._scan_order = None
        batch = {s.requests[rid].lora_request.lora_int_id for rid in out.num_scheduled_tokens
                 if rid in s.requests and s.requests[rid].lora_request is not None
                 and s.requests[rid].lora_request.lora_int_id > 0}
        self.guard().end_step(self._rec_step, batch)
        return out


class BlockingScheduler(BlockingMixin, _PatchedScheduler):
    """`blocking` (V1 before PR #15422) inside vLLM's synchronous scheduler, recorded."""


class AsyncBlockingScheduler(BlockingMixin, _PatchedAsyncScheduler):
    """`blocking` inside vLLM's `AsyncScheduler`, recorded."""


class FairScheduler(FairMixin, _PatchedScheduler):
    """`fair` (this project's) inside vLLM's synchronous scheduler, recorded."""


class AsyncFairScheduler(FairMixin, _PatchedAsyncScheduler):
    """`fair` inside vLLM's `AsyncScheduler`, recorded."""


CLASSES: dict[str, tuple[type, type]] = {
    "blocking": (BlockingScheduler, AsyncBlockingScheduler),
    "fair": (FairScheduler, AsyncFairScheduler),
}
