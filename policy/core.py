"""The shared scheduler core: vLLM's V1 `Scheduler`, one step at a time.

`Scheduler.step` is one `schedule()` plus its model output, following
`vllm/v1/core/sched/scheduler.py` and `async_scheduler.py` branch by branch
for the features the model keeps (docs/conformance.md, "The reference core");
running requests the environment declines to schedule are `skip_running`. The
LoRA admission decision is a `Gate`'s (`policy.gate`); `config.vllm` selects
the release (`spec.releases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lora_sched.policy.gate import Decision, Gate, ScanContext
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import ReqState, State, StepRecord, blocks_for


class ScheduleError(ValueError):
    """An event the model cannot apply (unknown or duplicate request id)."""


@dataclass
class _Pending:
    """Model output not yet applied (async scheduling delays it one step)."""

    step: int
    scheduled: dict[str, int]
    samples: set[str]  # requests that sample a token with this output
    record: StepRecord | None = None


@dataclass
class Scheduler:
    """`forget_done`: drop finished and aborted requests from `state` (their
    `reqs` entry and the `finished` / `aborted` sets) once nothing reads them
    any more (no output of theirs pending, and the gate does not list them in
    an optional `remembers` collection), so memory follows the live requests.
    `abort` then takes a forgotten id as already done.

    `all_holds`: every step record's `holds` gives a reason for every
    request left waiting (the default); False: only for those the waiting
    scan reached, so a scan that stops early (seats, budget, ...) costs what
    it visited, not the whole queue (`policy.driver.run(keep_records=False)`,
    whose records nobody reads). Nothing else differs."""

    config: Config
    gate: Gate
    forget_done: bool = False
    all_holds: bool = True
    state: State = field(init=False)
    _pending: _Pending | None = field(default=None, init=False)
    _seq: int = field(default=0, init=False)
    release: releases.Release = field(init=False)
    # The scheduler's own prefill cadence (`prefill_cadence == "scheduler"`):
    # steps that scheduled a token, and the one that last carried a prefill.
    _executed: int = field(default=0, init=False)
    _last_prefill: int = field(default=0, init=False)
    _done: list[str] = field(default_factory=list, init=False)  # retired in this step
    _old: list[str] = field(default_factory=list, init=False)  # retired before, not yet forgotten
    _forgotten: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.state = State(self.config)
        self.release = releases.get(self.config.vllm)
        self._last_prefill = -self.config.prefill_schedule_interval  # the first step is never held

    # ---- events -----------------------------------------------------------
    def add(self, req: Request) -> None:
        if req.id in self.state.reqs:
            raise ScheduleError(f"duplicate request id {req.id!r}")
        # vLLM rejects a request longer than max_model_len, and refuses to start
        # unless one max_model_len sequence fits the KV cache and, without
        # chunked prefill, the token budget. Without these checks a request
        # could wait forever behind a scan that always stops at it.
        seq = req.prompt_tokens + req.max_tokens
        cfg = self.config
        if not cfg.chunked_prefill and seq > cfg.max_num_batched_tokens:
            raise ScheduleError(f"request {req.id!r}: prompt_tokens + max_tokens = {seq} exceeds "
                                f"max_num_batched_tokens {cfg.max_num_batched_tokens} with chunked prefill off")
        if cfg.kv_blocks is not None and blocks_for(seq, cfg.block_size) > cfg.kv_blocks:
            raise ScheduleError(f"request {req.id!r}: prompt_tokens + max_tokens = {seq} needs "
                                f"{blocks_for(seq, cfg.block_size)} KV blocks > kv_blocks {cfg.kv_blocks}")
        rs = ReqState(req=req, seq=self._seq, waiting_since=req.arrival)
        self._seq += 1
        self.state.reqs[req.id] = rs
        self.state.enqueue(req.id, front=False)
        self.gate.enqueued(self.state, req.id)

    def abort(self, rid: str) -> bool:
        """Abort wherever it is (vLLM `finish_requests`); False if already done."""
        rs = self.state.reqs.get(rid)
        if rs is None:
            if self.forget_done and self._forgotten:
                return False  # forgotten: it finished or was aborted
            raise ScheduleError(f"abort of unknown request {rid!r}")
        if rs.status in ("finished", "aborted"):
            return False
        self._retire(rid, "aborted")
        return True

    def _retire(self, rid: str, status: str) -> None:
        """Leave whichever queue holds `rid` (a stale async output can finish a
        preempted request in `waiting`), free its blocks, record the outcome."""
        st, rs = self.state, self.state.reqs[rid]
        (st.running if rs.status == "running" else st.waiting).remove(rid)
        if rs.status == "waiting":
            self.gate.dequeued(st, rid)
        rs.status = status
        rs.blocks = 0
        st.deferred.discard(rid)
        (st.finished if status == "finished" else st.aborted).add(rid)
        if self.forget_done:
            self._done.append(rid)

    def _forget(self) -> None:
        """Drop the requests retired before this step that nothing reads any
        more (`forget_done`); those retired in this step stay one more step,
        so the step's record can still be explained from `state`."""
        st = self.state
        pending = self._pending.scheduled if self._pending is not None else {}
        remembers = getattr(self.gate, "remembers", ())
        keep = []
        for rid in self._old:
            if rid in pending or rid in remembers:
                keep.append(rid)
                continue
            del st.reqs[rid]
            st.finished.discard(rid)
            st.aborted.discard(rid)
            self._forgotten += 1
        self._old, self._done = keep + self._done, []

    def has_work(self) -> bool:
        return bool(self.state.waiting or self.state.running or self._pending)

    # ---- one step ---------------------------------------------------------
    def step(self, step: int, skip_running: frozenset[str] = frozenset(), *, throttle: bool = False) -> StepRecord:
        """Schedule step `step` and apply model output (DESIGN section 2, Step).

        `throttle` is vLLM's `schedule(throttle_prefills=...)` argument, which
        the data-parallel engine core sets on off-cadence steps
        (`spec.config.throttled`). Where the release's scheduler keeps its own
        cadence too (`prefill_cadence == "scheduler"`, 0.33 and 0.34) a step is
        also off-cadence while fewer than `prefill_schedule_interval` executed
        steps have passed since the last one that carried a prefill; the
        record's `throttle` says whether the step was off-cadence either way."""
        st = self.state
        if step <= st.step and st.step != 0:
            raise ScheduleError(f"step {step} does not follow step {st.step}")
        st.step = step
        rec = self._schedule(step, skip_running, throttle)
        samples = self._update_after_schedule(rec.scheduled)
        pending = _Pending(step, rec.scheduled, samples, rec)
        if self.config.async_scheduling:
            # AsyncScheduler: step t's output is applied after step t+1 is scheduled.
            previous, self._pending = self._pending, pending
            if previous is not None:
                self._apply_output(previous)
        else:
            self._apply_output(pending)
        if self._done or self._old:
            self._forget()
        return rec

    def drain(self) -> StepRecord | None:
        """Apply the last pending async output (the engine's final step)."""
        previous, self._pending = self._pending, None
        if previous is not None:
            self._apply_output(previous)
            return previous.record
        return None

    # ---- schedule() -------------------------------------------------------
    def _schedule(self, step: int, skip_running: frozenset[str], throttle: bool) -> StepRecord:
        st, cfg = self.state, self.config
        k = cfg.prefill_schedule_interval
        if self.release.prefill_cadence == "scheduler":
            # The engine core's `throttle_prefills` (a DP rank's input) or the
            # scheduler's own cadence (0.33.0's scheduler.py 748-791): either
            # defers prefills, and the cadence's state (`_executed`,
            # `_last_prefill`) moves the same way on every step, input or not.
            throttle = throttle or (k > 1 and (self._executed + 1) - self._last_prefill < k)
        rec = StepRecord(step, list(st.waiting), list(st.running), {}, [], [], [], throttle)
        prefill = False  # a prefill chunk scheduled, or a prefill admitted (0.33's cadence restart)
        # DP prefill balancing: on a throttled step defer prefill compute,
        # unless requests wait for capacity or nothing is decoding.
        defer = (throttle and not st.prefill_capacity_bound
                 and any(not st.reqs[r].is_prefill_chunk for r in st.running))
        budget = cfg.max_num_batched_tokens
        n_eligible = len(st.running) + len(st.waiting)
        threshold = releases.prefill_threshold(self.release, cfg.long_prefill_token_threshold,
                                               cfg.chunked_prefill) if n_eligible > 1 else 0
        scheduled_running: list[str] = []

        # First, schedule the RUNNING requests.
        reqs, running, sched = st.reqs, st.running, rec.scheduled
        kv_unlimited, bs = cfg.kv_blocks is None, cfg.block_size
        # KV blocks `running` holds (`State.used_blocks`), kept as allocations
        # and preemptions change it rather than summed for every request.
        used = 0 if kv_unlimited else st.used_blocks()
        i = 0
        while i < len(running) and budget > 0:
            rid = running[i]
            rs = reqs[rid]
            if (
                rs.placeholders > 0
                and rs.computed + 2 - rs.placeholders >= rs.req.prompt_tokens + rs.req.max_tokens
            ):
                i += 1  # async: already sure to reach max_tokens
                continue
            if defer and rs.is_prefill_chunk:
                i += 1  # DP throttle: this prefill chunk waits for a cadence step
                continue
            if skip_running and rid in skip_running:
                i += 1  # abstracted reasons (PP, encoder budget)
                continue
            n = rs.req.prompt_tokens + rs.generated + rs.placeholders - rs.computed  # num_tokens + ...
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            if n == 0:
                i += 1
                continue
            ok = True
            if kv_unlimited:  # `_allocate` always succeeds
                need = -(-(rs.computed + n) // bs)
                if need > rs.blocks:
                    rs.blocks = need
            else:
                while True:
                    held = rs.blocks
                    if self._allocate(rs, rs.computed + n, cfg.kv_blocks - used):
                        used += rs.blocks - held
                        break
                    if cfg.queue == "priority":
                        victim = max(st.running, key=lambda r: st.reqs[r].priority_key())
                        vi = st.running.index(victim)
                        del st.running[vi]
                        if vi < i:
                            i -= 1
                        if victim in rec.scheduled:
                            scheduled_running.remove(victim)
                            budget += rec.scheduled.pop(victim)
                    else:
                        victim = st.running.pop()
                    used -= reqs[victim].blocks  # it leaves `running`, freeing them
                    self._preempt(victim, step)
                    rec.preempted.append(victim)
                    if victim == rid:
                        ok = False
                        break
            if not ok:
                if cfg.queue == "priority" and self.release.priority_self_preempt == "skip":
                    continue  # it left `running`, so index i is already the next request
                break
            if rs.is_prefill_chunk:
                prefill = True
            scheduled_running.append(rid)
            sched[rid] = n
            budget -= n
            i += 1

        counted = scheduled_running if self.release.cap_counts == "scheduled" else st.running
        scheduled_loras = {a for r in counted if (a := reqs[r].req.adapter) > 0}
        # vLLM asserts `len(scheduled_loras) <= max_loras` here. On 0.32 it can
        # fail: a running request left unscheduled for a reason other than the
        # budget (PP, encoder budget: DESIGN's nondeterministic skip) does not
        # count, so the scan may admit another adapter, and the next step
        # schedules both. The reference goes on and lets `batch_lora_cap`
        # report the batch instead of stopping (tests/test_search_violations.py).

        # Next, schedule the WAITING requests (only if nothing was preempted).
        if rec.preempted:
            if self.all_holds:  # `holds` is empty so far: one reason for every waiting request
                rec.holds.update(dict.fromkeys(st.waiting, "preemption"))
        else:
            prefill |= self._scan_waiting(step, rec, budget, threshold, scheduled_loras, defer, used)
        if rec.scheduled:
            self._executed += 1
        if prefill:
            self._last_prefill = self._executed
        batch = {a for r in rec.scheduled if (a := reqs[r].req.adapter) > 0}
        self.gate.step_done(ScanContext(st, step, scheduled_loras), batch)
        return rec

    def _scan_waiting(
        self, step: int, rec: StepRecord, budget: int, threshold: int, scheduled_loras: set[int], defer: bool,
        used: int,
    ) -> bool:
        """The waiting scan; returns whether it admitted a request with prefill left.
        `used`: the KV blocks `running` holds when it starts (0 when KV is unlimited)."""
        st, cfg = self.state, self.config
        prefill = False
        ctx = ScanContext(st, step, scheduled_loras)
        order = self.gate.scan_order(ctx, list(st.waiting))
        admitted: set[str] = set()
        stop_reason: str | None = None
        running, reqs, max_seqs = st.running, st.reqs, cfg.max_num_seqs
        holds, defer_add, decide, skip = rec.holds, st.deferred.add, self.gate.decide, Decision.SKIP
        for rid in order:
            if budget <= 0:
                stop_reason = "budget"
                break
            if len(running) >= max_seqs:
                stop_reason = "max_num_seqs"
                break
            rs = reqs[rid]
            if rs.stale > 0:
                holds[rid] = "stale_output"  # async: output still in flight
                defer_add(rid)
                continue
            decision, why = decide(ctx, rid)
            if decision is skip:
                holds[rid] = why or "skip"
                defer_add(rid)
                continue
            if decision is Decision.STOP:
                rec.holds[rid] = why or "stop"
                stop_reason = why or "stop"
                break
            if defer and rs.num_tokens - rs.computed > 1:
                rec.holds[rid] = "throttle"  # DP throttle: prefills wait for a cadence step
                stop_reason = "throttle"
                break
            n = rs.num_tokens - rs.computed
            if n == 0:
                # Unreachable in the model (a waiting request always has a token
                # left); vLLM reaches it through caches and connectors.
                rec.holds[rid] = "no_tokens"
                if self.release.zero_token_waiting == "skip":
                    st.deferred.add(rid)
                    continue
                stop_reason = "no_tokens"
                break
            if 0 < threshold < n:
                n = threshold
            if not cfg.chunked_prefill and n > budget:
                rec.holds[rid] = "no_chunk"
                stop_reason = "no_chunk"
                break
            n = min(n, budget)
            # Whole current sequence must fit (scheduler_reserve_full_isl).
            free = None if cfg.kv_blocks is None else cfg.kv_blocks - used
            if free is not None and blocks_for(rs.num_tokens, cfg.block_size) - rs.blocks > free:
                rec.holds[rid] = "kv"
                stop_reason = "kv"
                break
            if not self._allocate(rs, rs.computed + n, free):
                rec.holds[rid] = "kv"
                stop_reason = "kv"
                break
            st.running.append(rid)
            used += rs.blocks
            st.deferred.discard(rid)
            admitted.add(rid)
            rec.admitted.append(rid)
            rec.scheduled[rid] = n
            budget -= n
            rs.status = "running"
            prefill |= rs.computed < rs.num_tokens - 1
            if rs.first_admitted is None:
                rs.first_admitted = step
            if rs.req.adapter > 0:
                scheduled_loras.add(rs.req.adapter)
            self.gate.admitted(ctx, rid)
        if stop_reason is not None and self.all_holds:
            # Every request the scan reached was admitted or is in `holds`;
            # the rest (from the one it stopped before, or after the one it
            # stopped at) is left waiting for the stop's reason.
            k = order.index(rid) + (rid in holds)
            holds.update(dict.fromkeys(order[k:], stop_reason))
        # Skipped requests go back to the head in their original order, so
        # `waiting` keeps its order minus the admitted requests.
        if admitted:
            waiting = list(st.waiting)
            try:
                for r in admitted:  # each id is in `waiting` once
                    waiting.remove(r)
            except ValueError:  # one that was not waiting (a gate's own order): filter instead
                waiting = [r for r in st.waiting if r not in admitted]
            st.waiting = waiting
        if not defer:
            # A scan that could admit prefills records whether requests are
            # left waiting for capacity rather than skipped.
            st.prefill_capacity_bound = len(st.waiting) > len(st.deferred)
        return prefill

    def _allocate(self, rs: ReqState, tokens: int, free: int | None) -> bool:
        """Grow `rs` to hold `tokens` if the blocks it adds fit the `free` ones
        (None: unlimited); False when they do not."""
        need = blocks_for(tokens, self.config.block_size)
        if free is not None and need - rs.blocks > free:
            return False
        rs.blocks = max(rs.blocks, need)
        return True

    def _preempt(self, rid: str, step: int) -> None:
        rs = self.state.reqs[rid]
        rs.blocks = 0
        rs.computed = 0
        rs.status = "waiting"
        rs.stale = rs.in_flight
        rs.placeholders = 0
        rs.preemptions += 1
        rs.waiting_since = step
        self.state.enqueue(rid, front=True)
        self.gate.enqueued(self.state, rid)

    # ---- _update_after_schedule / update_from_output ---------------------
    def _update_after_schedule(self, scheduled: dict[str, int]) -> set[str]:
        samples: set[str] = set()
        reqs, async_ = self.state.reqs, self.config.async_scheduling
        for rid, n in scheduled.items():
            rs = reqs[rid]
            rs.computed += n
            rs.in_flight += n
            rs.is_prefill_chunk = rs.computed < rs.req.prompt_tokens + rs.generated + rs.placeholders
            if not rs.is_prefill_chunk:
                samples.add(rid)
                if async_:
                    rs.placeholders += 1
        return samples

    def _apply_output(self, out: _Pending) -> None:
        reqs, samples, async_ = self.state.reqs, out.samples, self.config.async_scheduling
        finished: list[str] = []
        for rid, n in out.scheduled.items():
            rs = reqs[rid]
            rs.in_flight -= n
            stale = False
            if rs.stale > 0:
                stale = True
                rs.stale -= n
            if rid not in samples or rs.status == "finished" or rs.status == "aborted":
                continue
            rs.generated += 1
            if async_ and not stale:
                rs.placeholders -= 1
            if rs.generated >= rs.req.max_tokens:
                self._retire(rid, "finished")
                finished.append(rid)
        if out.record is not None:
            out.record.finished = finished
