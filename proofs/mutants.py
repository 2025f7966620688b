"""Non-vacuity: planted bugs in the encoding, each with the check that must catch it.

Each `Mutant` plants one bug in `proofs.encoding.schedule` (through
`Bounds.mutant`) and names the (property, policy) that BMC must find it by
within `depth` steps (killed: a violation; survives: the property holds); the
unmutated encoding must hold on the same check (the baseline). Environment
mutants make the encoding safer and must lose the baseline's known
counterexample (`expect="cex"`). `lora-sched prove --mutants` prints one timed
line per mutant; docs/proofs.md, "Non-vacuity".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import z3
from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.unroll import Path

# Small bounds: every mutant dies within a few steps on them.
SMALL = enc.Bounds(requests=3, adapters=2, max_prompt=2, max_output=2, max_loras=(1, 2), max_num_seqs=(1, 3),
                   max_num_batched_tokens=(1, 4), starvation_steps=(0, 1))
SKIP = replace(SMALL, skip=True)  # running requests may go unscheduled
# fair's wait with one LoRA slot and seats and budget to spare: with the
# guard no request waits more than `WAIT_WORST` steps (fair's tight worst
# case here: a bound of 2 is broken); without it an adapter-1 stream keeps
# an adapter-2 request out longer.
WAIT = enc.Bounds(requests=4, adapters=2, max_prompt=1, max_output=2, max_loras=(1, 1), max_num_seqs=(4, 4),
                  max_num_batched_tokens=(8, 8), starvation_steps=(0, 0), last_arrival=3)
WAIT_WORST = 3
# The same with S = 1: every part of fair's rule active (r* only after S steps,
# the victim's deadline S past its slot's freeing). At S = 2 the deadline's
# slack lets a victim's 2-output requests in for as long as R = 4 requests
# last, so the rule's worst wait there (4) is also the mutants'.
WAIT_S1 = replace(WAIT, starvation_steps=(1, 1))
WAIT_S1_WORST = 3  # the real rule's tight worst wait there (proofs/manifest.json, fair-wait-S1)
# Two LoRA slots, three adapters: both slot holders can free by the deadline,
# so both are victims, and each gets a late request (2 outputs, past the
# deadline at S = 0). The rule lets one in (its adapter stops being a victim)
# and holds the other, whose slot frees for r*: no request waits more than
# `VICTIMS_WORST` steps (the tight worst case here, a bound of 1 is broken).
VICTIMS = enc.Bounds(requests=5, adapters=3, max_prompt=1, max_output=2, max_loras=(2, 2), max_num_seqs=(5, 5),
                     max_num_batched_tokens=(8, 8), starvation_steps=(0, 0), last_arrival=2)
VICTIMS_WORST = 2
# A finite KV pool (preemption) and the priority queue: the general mode.
KV = replace(SMALL, kv_blocks=(1, 4))
PRIO = replace(SMALL, priority=True)


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # what is planted, in English
    policy: str
    property: str  # the step property, or bounded_wait (with `bound`)
    bounds: enc.Bounds
    depth: int
    bound: int | None = None
    expect: str = "holds"  # what the real encoding does on this check: holds | cex


CATALOGUE: tuple[Mutant, ...] = (
    Mutant("cap_early", "the LoRA cap blocks one slot early (count >= max_loras - 1)",
           "vllm", "no_hol_blocking", SMALL, 3),
    Mutant("cap_late", "the LoRA cap blocks one slot late (count >= max_loras + 1)",
           "vllm", "batch_lora_cap", SMALL, 3),
    Mutant("seats_unchecked", "the waiting scan does not check max_num_seqs",
           "vllm", "capacity", SMALL, 3),
    Mutant("budget_plus_one", "an admitted prefill takes one token more than the budget left",
           "vllm", "capacity", SMALL, 3),
    Mutant("fifo_reversed", "the waiting scan visits the queue from its tail",
           "vllm", "fifo_within_adapter", SMALL, 3),
    Mutant("drop_running", "a running request left unscheduled in a step drops out of running",
           "vllm", "conservation", SKIP, 3),
    Mutant("cap_late_fair", "fair: the LoRA cap blocks one slot late",
           "fair", "running_lora_cap", SMALL, 3),
    Mutant("guard_off", "fair's guard never fires (no victim, no hold)",
           "fair", "bounded_wait", WAIT, 10, WAIT_WORST),
    Mutant("drain_unbounded", "fair's drain admission lets in every request of the victim, whatever its "
           "outputs left (the victim never drains)",
           "fair", "bounded_wait", WAIT, 10, WAIT_WORST),
    Mutant("guard_off_s1", "fair's guard never fires, at S = 1",
           "fair", "bounded_wait", WAIT_S1, 12, WAIT_S1_WORST),
    Mutant("drain_unbounded_s1", "fair's drain admission lets in every request of the victim, at S = 1",
           "fair", "bounded_wait", WAIT_S1, 12, WAIT_S1_WORST),
    Mutant("late_kept", "fair's victims stay victims when they let a late request in (so every victim may "
           "let one in, and no slot frees by the deadline)",
           "fair", "bounded_wait", VICTIMS, 8, VICTIMS_WORST),
    Mutant("gap_forever", "fair's gap after a guard never ends (after the first r*, no request is put first again)",
           "fair", "bounded_wait", WAIT, 10, WAIT_WORST),
    Mutant("star_youngest", "fair's r* is the youngest starving request instead of the oldest",
           "fair", "no_hol_blocking", replace(SMALL, max_loras=(1, 1)), 4),
    Mutant("throttle_ignored", "the DP throttle defers nothing",
           "vllm", "batch_lora_cap", replace(SMALL, max_loras=(1, 1), prefill_interval=2), 3, expect="cex"),
    Mutant("async_no_skip", "async scheduling schedules a running request sure to finish",
           "vllm", "running_lora_cap", replace(SMALL, async_scheduling=True), 2, expect="cex"),
    Mutant("kv_unchecked", "the waiting scan admits without checking the KV blocks (whole sequence or chunk)",
           "vllm", "capacity", KV, 3),
    Mutant("victim_head", "FCFS preemption takes the head of running (already scheduled) instead of the tail",
           "vllm", "conservation", KV, 3),
    Mutant("preempt_to_tail", "a preempted request rejoins waiting at the tail instead of the front",
           "vllm", "no_hol_blocking", KV, 4),
    Mutant("priority_ignored", "the priority queue is scanned in arrival order",
           "vllm", "no_hol_blocking", PRIO, 2),
    Mutant("star_priority_ignored", "fair's r* ignores priorities under the priority queue (oldest by waiting time)",
           "fair", "no_hol_blocking", replace(PRIO, max_loras=(1, 1)), 4),
    Mutant("star_kept_over_urgent", "fair keeps r* while a request of a more urgent priority starves (the guard "
           "keeps a freeing slot from it)", "fair", "no_hol_blocking", replace(PRIO, max_loras=(1, 1)), 5),
)
# cap_late_fair plants the same bug as cap_late under the other policy.
_BUG = {"cap_late_fair": "cap_late", "guard_off_s1": "guard_off", "drain_unbounded_s1": "drain_unbounded"}


@dataclass
class Outcome:
    mutant: Mutant
    killed: bool
    depth: int  # depth of the violation (killed) or depth searched (survived)
    seconds: float
    baseline_ok: bool  # the unmutated encoding holds on the same check
    detail: str = ""

    def line(self) -> str:
        m = self.mutant
        secs = time.strftime("%H:%M:%S", time.gmtime(self.seconds))[1:] + f"{self.seconds % 1:.1f}"[1:]
        prop = m.property + (f" (B={m.bound})" if m.bound is not None else "")
        if not self.baseline_ok:
            want = "violated" if m.expect == "holds" else "not violated"
            word = f"BASELINE FAILS: {prop} ({m.policy}) is {want} without the bug: {self.detail}"
        elif self.killed and m.expect == "cex":
            word = f"killed by {prop} ({m.policy}): its counterexample at depth {m.depth} is lost."
        elif self.killed:
            word = f"killed by {prop} ({m.policy}) at depth {self.depth}."
        elif m.expect == "cex":
            word = f"SURVIVED: {prop} ({m.policy}) still violated at depth {self.depth}!"
        else:
            word = f"SURVIVED {prop} ({m.policy}) up to depth {self.depth}!"
        return f"mutant {m.name} ... {word} ({secs})"


def _first_violation(b: enc.Bounds, policy: str, prop: str, depth: int, bound: int | None,
                     timeout_ms: int) -> tuple[str, int]:
    """Incremental BMC without replay (a mutant's trace is not the reference's)."""
    path = Path(b, policy)
    s = engine.solver(timeout_ms)
    s.add(*path.base(), *path.init())
    for k in range(1, depth + 1):
        s.add(path.extend())
        s.push()
        s.add(z3.Not(path.prop(prop, k, bound)))
        r = s.check()
        s.pop()
        if r == z3.sat:
            return "cex", k
        if r == z3.unknown:
            return f"unknown ({s.reason_unknown()})", k
        s.add(path.prop(prop, k, bound))  # earlier depths hold: assume them
    return "holds", depth


def run_mutant(m: Mutant, *, timeout_ms: int = 60_000, baselines: dict | None = None) -> Outcome:
    t0 = time.monotonic()
    key = (m.policy, m.property, m.bounds, m.depth, m.bound)
    cache = baselines if baselines is not None else {}
    if key not in cache:
        cache[key] = _first_violation(m.bounds, m.policy, m.property, m.depth, m.bound, timeout_ms)
    base, base_k = cache[key]
    bugged = replace(m.bounds, mutant=_BUG.get(m.name, m.name))
    verdict, k = _first_violation(bugged, m.policy, m.property, m.depth, m.bound, timeout_ms)
    if m.expect == "cex":  # the real encoding's shortest counterexample must be lost
        return Outcome(m, verdict == "holds", k, time.monotonic() - t0, (base, base_k) == ("cex", m.depth),
                       f"{base} at depth {base_k}")
    return Outcome(m, verdict == "cex", k, time.monotonic() - t0, base == "holds",
                   f"{base} at depth {base_k}" if base != "holds" else verdict)


def run_all(select: list[str] | None = None, *, progress: Callable[[str], None] | None = print,
            timeout_ms: int = 60_000) -> list[Outcome]:
    """Run the catalogue (or the named mutants), one line each."""
    out = []
    baselines: dict = {}
    for m in CATALOGUE:
        if select and m.name not in select:
            continue
        o = run_mutant(m, timeout_ms=timeout_ms, baselines=baselines)
        if progress:
            progress(o.line())
        out.append(o)
    return out


def all_killed(outcomes: list[Outcome]) -> bool:
    return all(o.killed and o.baseline_ok for o in outcomes)
