"""B: the steps within which `fair` first admits every request that joins `waiting`.

S is `policy.fair.starvation_window` (S x k steps); P the largest prompt, L
the largest `max_tokens`, W = P + L - 1; Q (Qw) the most requests present
(waiting) when a step starts; N = min(`max_num_seqs`, Q, `kv_blocks`)
(`seats`); T = `max_num_batched_tokens`; c the long-prefill threshold the
release applies (`threshold`: 0.34 ignores it without chunked prefill;
chunks = ceil(W / c), 1 when off); k = `prefill_schedule_interval`.

    F  = floor(N W / T), or floor(N P / (T - N + 1)) where KV is
         unlimited, T >= N and that is fewer                   (starved_steps)
    e  = N - 1 where KV can run out under the priority queue,
         else 0                                                (left_out_steps)
    D0 = k (F + chunks + e) + (1 if async scheduling)          (non_decode_steps)
    D  = D0 + L - 1, a request's longest stay in `running`     (drain_steps)
    E  = 1, k (F(N - 1) + 1) or D + 1                          (star_fits_steps)
    G  = D + D0 + S + E + 3 where max_loras < N, else D + 2    (guard_steps)
    p  = N - 1 where KV can run out, else 0                    (unscanned_steps)

    B  = Qw (G + S + p) - S  where the cap can block r*
         (max_loras < N), else Qw (G + S + p)                  (guard_bound)

B holds when every request has one priority and no running request is left
unscheduled for a reason outside the model (`bound_applies`). Where nobody
can be skipped (max_loras >= N, KV unlimited, chunked prefill) B_queue =
floor(M D / N) + F(M) + k - 1 applies too, and where the cap never blocks
(synchronous, FCFS, no DP throttle) B_heads = M H, with M = min(Qw - 1 + N,
Q - 1) and H = ceil(P / t) + L - 1 (t = T, or c where below it);
`fair_bound` is the smallest that applies.

The lemmas (G1 = D + S + 1, G1* = D + D0 + S + 2), each a monitor in
`tests/test_state_machines.py`, and their derivations: docs/fair-bound.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from lora_sched.policy import fair  # S through the module: the guard and B read one window
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.state import StepRecord, peak_present, peak_waiting


def threshold(config: Config) -> int:
    """c of the module docstring: the long-prefill threshold the release applies
    (0 on 0.34 without chunked prefill, `spec.releases.prefill_threshold`)."""
    return releases.prefill_threshold(releases.get(config.vllm), config.long_prefill_token_threshold,
                                      config.chunked_prefill)


def drain_steps(config: Config, *, max_prompt: int, max_output: int, queue: int | None = None) -> int:
    """D of the module docstring: the most steps a request stays in `running`
    (N is `seats`: `max_num_seqs`, or Q or `kv_blocks` where fewer)."""
    return non_decode_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue) + (max_output - 1)


def non_decode_steps(config: Config, *, max_prompt: int, max_output: int, queue: int | None = None) -> int:
    """D0 of the module docstring: D less the L - 1 decodes (a request admitted
    with o outputs left stays in `running` at most D0 + o - 1 steps)."""
    work = max_prompt + max_output - 1
    c = threshold(config)
    chunks = -(-work // c) if c > 0 else 1
    starved = starved_steps(config, seats(config, queue), max_prompt=max_prompt, max_output=max_output, queue=queue)
    return (config.prefill_schedule_interval * (starved + chunks + left_out_steps(config, queue))
            + (1 if config.async_scheduling else 0))


def left_out_steps(config: Config, queue: int | None = None) -> int:
    """e of the module docstring: the steps in which a request ahead of it
    preempts itself and so ends the running loop, N - 1 at most where KV can
    run out under the priority queue (each takes one of the at most N - 1
    requests ahead out of `running`); 0 under FCFS, which preempts the
    last request, and where KV is unlimited."""
    if config.kv_blocks is None or config.queue != "priority":
        return 0
    return max(0, seats(config, queue) - 1)


def starved_steps(config: Config, requests: int, *, max_prompt: int, max_output: int,
                  queue: int | None = None) -> int:
    """F of the module docstring with `requests` requests in place of N: the
    most budget-starved steps they can cause while nobody joins them,
    floor(`requests` W / T), or floor(`requests` P / (T - N + 1)) where KV is
    unlimited, T >= N and that is fewer (docs/fair-bound.md derives both)."""
    t = config.max_num_batched_tokens
    steps = requests * (max_prompt + max_output - 1) // t
    spare = t - seats(config, queue) + 1  # prefill tokens a budget-starved step spends at least
    if config.kv_blocks is None and spare > 0:
        steps = min(steps, requests * max_prompt // spare)
    return steps


def seats(config: Config, queue: int | None = None) -> int:
    """N of the module docstring: the most requests `running` can hold:
    `max_num_seqs`, Q when fewer requests are ever present, and `kv_blocks`
    when fewer blocks are (each request in `running` holds one at least)."""
    n = config.max_num_seqs if queue is None else min(config.max_num_seqs, queue)
    return n if config.kv_blocks is None else min(n, config.kv_blocks)


def cap_can_block(config: Config, queue: int | None = None) -> bool:
    """Can the cap block r* in a scan that admits anyone? Only when
    max_loras < N (the scan stops at a full `running` before it asks the
    cap, which then sees at most N - 1 adapters; where N is `kv_blocks`, a
    cap that sees N adapters sees every block held, and nobody is admitted)."""
    return config.max_loras < seats(config, queue)


def capacity_admits_star(config: Config, *, max_prompt: int, queue: int | None = None) -> bool:
    """Does r* always fit once a seat and a LoRA slot are free? Yes when KV is
    unlimited, no DP throttle defers prefills, and the budget left after the
    other N - 1 requests' largest chunks (a prompt of at most P tokens, or
    c, the long-prefill threshold; a decode's 1 where prompts are never
    split) still holds r*'s first chunk (1 token with chunked prefill, else
    its whole prompt up to c)."""
    if config.kv_blocks is not None or config.prefill_schedule_interval > 1:
        return False
    c, chunked = threshold(config), config.chunked_prefill
    other = min(max_prompt, c) if c > 0 else (max_prompt if chunked else 1)
    first = 1 if chunked else (min(max_prompt, c) if c > 0 else max_prompt)
    return config.max_num_batched_tokens >= (seats(config, queue) - 1) * other + first


def star_fits_steps(config: Config, drain: int, queue: int | None = None, *, max_prompt: int,
                    max_output: int) -> int:
    """E of the module docstring (`star_fits`; `drain` is D): from a step that
    starts with r* waiting, a seat free and a LoRA slot free, r* is admitted
    within E steps, that step included: 1 where `capacity_admits_star`;
    k (F(N - 1) + 1) where KV is unlimited, prefill is chunked and scheduling
    synchronous or not throttled (k = 1); else D + 1 (docs/fair-bound.md)."""
    if capacity_admits_star(config, max_prompt=max_prompt, queue=queue):
        return 1
    if config.kv_blocks is None and config.chunked_prefill and (
            not config.async_scheduling or config.prefill_schedule_interval == 1):
        starved = starved_steps(config, seats(config, queue) - 1, max_prompt=max_prompt, max_output=max_output,
                                queue=queue)
        return config.prefill_schedule_interval * (starved + 1)
    return drain + 1


def guard_steps(config: Config, drain: int, non_decode: int, queue: int | None = None, *, max_prompt: int,
                max_output: int) -> int:
    """G of the module docstring (`drain` is D, `non_decode` D0): r* is
    admitted within G1* + E + 1 = D + D0 + S + E + 3 steps of being chosen
    where the cap can block it (`cap_can_block`; E = `star_fits_steps`),
    else within D + 2."""
    if cap_can_block(config, queue):
        fits = star_fits_steps(config, drain, queue, max_prompt=max_prompt, max_output=max_output)
        return star_victim_steps(drain, non_decode, fair.starvation_window(config)) + fits + 1
    return quiet_guard_steps(drain)  # every guard is quiet (`star_alone`)


def star_victim_steps(drain: int, non_decode: int, window: int) -> int:
    """G1* of the module docstring (`victim_drains`): a victim holds no slot
    D + D0 + S + 2 steps after r* is chosen."""
    return drain + non_decode + window + 2


def quiet_guard_steps(drain: int) -> int:
    """`quiet_guard`: a guard whose steps admit nobody but r* ends within
    D + 2 steps (`drain` is D): `running` empties, then r* is in."""
    return drain + 2


def gap_steps(config: Config) -> int:
    """The gap after a guard (`guards_apart`): no new r* for S steps."""
    return fair.starvation_window(config)


def unscanned_steps(config: Config, queue: int | None = None) -> int:
    """p of the module docstring (`star_chosen`): the most steps in a row that
    scan no waiting request (each preempts): N - 1 where KV can run out, else 0."""
    return seats(config, queue) - 1 if config.kv_blocks is not None else 0


def queue_order_applies(config: Config, queue: int | None = None) -> bool:
    """Does every scan admit a prefix of the waiting queue (`queue_order`)?
    Where the cap cannot block (`cap_can_block` false), KV is unlimited and
    prefill is chunked."""
    return not cap_can_block(config, queue) and config.kv_blocks is None and config.chunked_prefill


def queue_order_steps(config: Config, *, queue: int, waiting: int, max_prompt: int, max_output: int) -> int:
    """B_queue of the module docstring, where `queue_order_applies`: with M =
    min(Qw - 1 + N, Q - 1) requests ahead, floor(M D / N) steps with every
    seat taken, F(M) (`starved_steps`) that spend the budget, k - 1 deferred."""
    n = seats(config, queue)
    ahead = ahead_of(config, queue=queue, waiting=waiting)
    drain = drain_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    full = ahead * drain // n if ahead else 0  # Q = 0 (N = 0): nobody ever waited
    starved = starved_steps(config, ahead, max_prompt=max_prompt, max_output=max_output, queue=queue)
    return full + starved + config.prefill_schedule_interval - 1


def heads_apply(config: Config, queue: int | None = None) -> bool:
    """Are requests first admitted in arrival order with the head of `running`
    scheduled in every step (`arrival_order`, `head_steps`)? Where the cap
    never blocks (max_loras >= min(`max_num_seqs`, Q): the scan stops at a
    full `running` before it asks the cap, which then sees at most
    min(`max_num_seqs`, Q) - 1 adapters), scheduling is synchronous, no DP
    throttle defers prefills and the queue is FCFS; KV may run out."""
    n = config.max_num_seqs if queue is None else min(config.max_num_seqs, queue)
    return (config.max_loras >= n and not config.async_scheduling and config.prefill_schedule_interval == 1
            and config.queue == "fcfs")


def head_steps(config: Config, *, max_prompt: int, max_output: int) -> int:
    """H of the module docstring (`head_steps`): the most steps a request is
    the head of `running`, ceil(P / t) + L - 1 with t = T, or c where the
    long-prefill threshold is below it."""
    c = threshold(config)
    chunk = min(config.max_num_batched_tokens, c) if c > 0 else config.max_num_batched_tokens
    return -(-max_prompt // chunk) + max_output - 1


def heads_bound(config: Config, *, queue: int, waiting: int, max_prompt: int, max_output: int) -> int:
    """B_heads of the module docstring, where `heads_apply`: M H, with M =
    min(Qw - 1 + N, Q - 1) requests present when r arrives and H =
    `head_steps`."""
    return ahead_of(config, queue=queue, waiting=waiting) * head_steps(config, max_prompt=max_prompt,
                                                                     max_output=max_output)


def ahead_of(config: Config, *, queue: int, waiting: int) -> int:
    """M of the module docstring: min(Qw - 1 + N, Q - 1), the most requests
    present (running, or waiting ahead) when a request joins `waiting`."""
    return max(0, min(waiting - 1 + seats(config, queue), queue - 1))


def fair_bound(config: Config, *, queue: int, max_prompt: int, max_output: int, waiting: int | None = None) -> int:
    """B of the module docstring for a configuration and workload bounds
    (`waiting` is Qw; without it, Q stands in for it, as Qw <= Q): the
    guards' bound (`guard_bound`), or B_queue (`queue_order_applies`) or
    B_heads (`heads_apply`) where one applies and is smaller."""
    b = guard_bound(config, queue=queue, max_prompt=max_prompt, max_output=max_output, waiting=waiting)
    qw = queue if waiting is None else waiting
    if queue_order_applies(config, queue):
        b = min(b, queue_order_steps(config, queue=queue, waiting=qw, max_prompt=max_prompt,
                                     max_output=max_output))
    if heads_apply(config, queue):
        b = min(b, heads_bound(config, queue=queue, waiting=qw, max_prompt=max_prompt, max_output=max_output))
    return b


def guard_bound(config: Config, *, queue: int, max_prompt: int, max_output: int, waiting: int | None = None) -> int:
    """The guards' B of the module docstring, Qw (G + S + p) (less S where the
    cap can block r*), which holds wherever B's assumptions do."""
    d = drain_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    d0 = non_decode_steps(config, max_prompt=max_prompt, max_output=max_output, queue=queue)
    qw = queue if waiting is None else waiting
    b = qw * (guard_steps(config, d, d0, queue, max_prompt=max_prompt, max_output=max_output) + gap_steps(config)
              + unscanned_steps(config, queue))
    # Where the cap can block r*, every wait's guards and gaps come to one S less (r's first S
    # inside the first guard, a guard fewer, or a quiet first guard, D + 2 <= G - S steps).
    return b - fair.starvation_window(config) if qw > 0 and cap_can_block(config, queue) else b


def workload_bound(config: Config, requests: Iterable[Request], *, queue: int | None = None,
                   waiting: int | None = None) -> int:
    """B for a workload; Q (and Qw) default to its number of requests (a safe
    upper bound on how many are ever present at once; pass the observed peaks
    for a tighter B, or use `observed_bound`)."""
    reqs = list(requests)
    return fair_bound(config, queue=len(reqs) if queue is None else queue, waiting=waiting,
                      max_prompt=max(r.prompt_tokens for r in reqs),
                      max_output=max(r.max_tokens for r in reqs))


def observed_bound(config: Config, requests: Iterable[Request], records: Iterable[StepRecord]) -> int:
    """B for a run: Q and Qw the peaks its step records show."""
    recs = list(records)
    return workload_bound(config, requests, queue=peak_present(recs), waiting=peak_waiting(recs))


def bound_applies(config: Config, priorities: Iterable[int], *, skipped_running: bool = False) -> str | None:
    """Why B does not apply to a run, or None when it does (B's assumptions)."""
    if len(set(priorities)) > 1:
        return "requests of different priorities (B holds among equal priorities only)"
    if skipped_running:
        return "running requests skipped for reasons outside the model (PP, encoder budget)"
    return None
