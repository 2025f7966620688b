"""The catalogue of checks `lora-sched prove` runs, with expected verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lora_sched.policy.bound import fair_bound, guard_bound
from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine, unbounded
from lora_sched.proofs.cex import replay_lasso
from lora_sched.spec.config import Config


def fair_B(b: enc.Bounds, queue: int | None = None) -> int:
    """fair's bound B for the checks of `b`, with Q and Qw both R by default:
    `policy.bound.fair_bound` where `b` pins one configuration, else the guards'
    bound at the corner of `b` that makes it smallest, the stricter test
    (docs/proofs.md, "bounded_wait and B")."""
    cfg = Config(max_loras=b.max_loras[1], max_num_seqs=b.max_num_seqs[0],
                 max_num_batched_tokens=b.max_num_batched_tokens[1], starvation_steps=b.starvation_steps[1],
                 prefill_schedule_interval=b.prefill_interval, policy="fair")
    one = all(lo == hi for lo, hi in (b.max_loras, b.max_num_seqs, b.max_num_batched_tokens, b.starvation_steps))
    bound = fair_bound if one and not b.async_scheduling and b.kv_blocks is None else guard_bound
    return bound(cfg, queue=b.requests if queue is None else queue, max_prompt=b.max_prompt,
                 max_output=b.max_output)


# bounded_wait configuration: concrete config, symbolic requests (adapter,
# lengths, arrival steps 1..last_arrival, aborts).
WAIT_FAIR = enc.Bounds(requests=4, adapters=2, max_prompt=1, max_output=2, max_loras=(1, 1),
                       max_num_seqs=(2, 2), max_num_batched_tokens=(4, 4), starvation_steps=(0, 0),
                       last_arrival=3)
WAIT_HORIZON = 10  # every request is admitted or aborted by then (checked)
FAIR_WORST = 4
# vllm's starvation on the same configuration, as a lasso (any number of requests).
LASSO_VLLM = replace(WAIT_FAIR, last_arrival=None)


# vLLM's mechanisms that leave a running request unscheduled (small bounds).
ASYNC = enc.Bounds(requests=3, adapters=2, async_scheduling=True)
THROTTLE = enc.Bounds(requests=3, adapters=2, max_loras=(1, 1), prefill_interval=2)
ASYNC_THROTTLE = enc.Bounds(requests=4, adapters=2, async_scheduling=True, prefill_interval=2)


def wait_bound(b: enc.Bounds) -> int:
    return fair_B(b)


@dataclass(frozen=True)
class Check:
    policy: str
    property: str
    method: str  # kind | bmc | wait | lasso | unbounded (proofs.unbounded: any size, bounds only for skip)
    bounds: enc.Bounds
    depth: int
    expect: str  # proved | holds | cex
    bound: int | None = None  # bounded_wait: the bound checked (default: fair's B)
    worst: int | None = None  # bounded_wait: the expected tight worst case
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def wait_bound(self) -> int:
        return self.bound if self.bound is not None else wait_bound(self.bounds)

    @property
    def label(self) -> str:
        b = self.bounds
        extra = "".join(f" [{w}]" for w, on in (("skip", b.skip), ("async", b.async_scheduling),
                                                 (f"throttle/{b.prefill_interval}", b.prefill_interval > 1),
                                                 (f"kv<={b.kv_blocks[1] if b.kv_blocks else 0}", b.kv_blocks),
                                                 ("priority", b.priority)) if on)
        if self.method == "unbounded":
            extra += " (any size)"
        elif self.property == "bounded_wait" and self.method == "lasso":
            extra += " (lasso)"
        elif self.property == "bounded_wait":
            extra += f" (B={self.wait_bound()})"
        return f"{self.policy}: {self.property}{extra}"


def default_checks(bounds: enc.Bounds, depth: int) -> list[Check]:
    out: list[Check] = []
    for pol in ("vllm", "fair"):
        for prop in enc.SAFETY:
            out.append(Check(pol, prop, "kind", bounds, 3, "proved"))
    out.append(Check("blocking", "no_hol_blocking", "bmc", bounds, depth, "cex"))
    for pol in ("vllm", "fair"):
        out.append(Check(pol, "no_hol_blocking", "bmc", bounds, depth, "holds"))
    out.append(Check("fair", "bounded_wait", "wait", WAIT_FAIR, WAIT_HORIZON, "proved", worst=FAIR_WORST))
    out.append(Check("vllm", "bounded_wait", "lasso", LASSO_VLLM, 4, "cex"))
    sk = replace(bounds, skip=True)
    out.append(Check("vllm", "running_lora_cap", "kind", sk, 3, "cex"))
    out.append(Check("vllm", "batch_lora_cap", "kind", sk, 3, "cex"))
    # What vLLM runs: async scheduling and the DP prefill throttle.
    out.append(Check("vllm", "running_lora_cap", "bmc", ASYNC, 4, "cex"))
    out.append(Check("vllm", "batch_lora_cap", "bmc", THROTTLE, 4, "cex"))
    for prop in ("batch_lora_cap", "running_lora_cap"):
        out.append(Check("fair", prop, "kind", ASYNC_THROTTLE, 2, "proved"))
    return out


def run_check(c: Check, progress: engine.Progress | None = None, timeout_ms: int = 120_000) -> engine.Result:
    if c.method == "unbounded":
        return unbounded.manifest_result(c.policy, c.property, skip=c.bounds.skip, timeout_ms=timeout_ms)
    if c.method == "kind":
        return engine.kinduction(c.bounds, c.policy, c.property, c.depth, timeout_ms=timeout_ms, progress=progress)
    if c.method == "wait":
        return engine.worst_wait(c.bounds, c.policy, c.depth, c.wait_bound(), progress=progress,
                                 timeout_ms=max(timeout_ms, 300_000), expect=c.worst)
    if c.method == "lasso":
        r = engine.lasso(c.bounds, c.policy, c.depth, timeout_ms=timeout_ms, progress=progress)
        if r.cex is not None:
            # Unroll the loop until the victim has waited longer than fair's B
            # (Q = R is at least the Q the replay observes).
            out = replay_lasso(r.cex, periods=wait_bound(c.bounds) + 1)
            r.replay_ok = out.reproduced and out.victim_wait > out.bound
            r.bound, r.detail = out.bound, out.detail
        return r
    return engine.bmc(c.bounds, c.policy, c.property, c.depth, timeout_ms=timeout_ms, progress=progress)
