"""SMT encoding (Z3, linear integer arithmetic) of one scheduler step.

The step relation of `policy.core.Scheduler` with the `blocking`, `vllm` and
`fair` gates, over R request slots (slot i is the i-th request to arrive),
adapters 1..A (0 = base model) and K steps, every request's and config
value symbolic within `Bounds`. The fast path, the general mode (KV pool,
priority queue), async scheduling, the DP prefill throttle, fair's guard and
the four membership booleans per request: docs/proofs.md, "What is encoded".
The state variable `arrival` holds waiting_since; an idle step changes
nothing, as `policy.driver.run` jumps over idle steps: step numbers agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3

POLICIES = ("blocking", "vllm", "fair")


@dataclass(frozen=True)
class Bounds:
    """The finite universe of one check."""

    requests: int = 4
    adapters: int = 2
    max_prompt: int = 2
    max_output: int = 2
    max_loras: tuple[int, int] = (1, 2)
    max_num_seqs: tuple[int, int] = (1, 3)
    max_num_batched_tokens: tuple[int, int] = (1, 4)
    starvation_steps: tuple[int, int] = (0, 3)
    skip: bool = False
    # Arrivals only at steps <= last_arrival (None: any step). bounded_wait
    # uses it so that every request's wait is observed within the horizon.
    last_arrival: int | None = None
    async_scheduling: bool = False
    prefill_interval: int = 1  # vLLM's prefill_schedule_interval; 1 = no DP throttling
    # A finite KV pool (`Config.kv_blocks`, symbolic within the range; None:
    # unlimited) of blocks of `block_size` tokens, with whole-sequence
    # admission and preemption; and the priority queue (per-request symbolic
    # priority 0..max_priority). Either one switches on the general mode
    # (`Bounds.general`): explicit queue orders and the positional running phase.
    kv_blocks: tuple[int, int] | None = None
    block_size: int = 1
    priority: bool = False
    max_priority: int = 1
    # A planted bug (`proofs.mutants`); None: the real step relation.
    mutant: str | None = None

    @property
    def general(self) -> bool:
        """Explicit queue orders (KV preemption or the priority queue); else the
        fast path: `waiting` in slot order, `running` in admission order."""
        return self.kv_blocks is not None or self.priority

    def describe(self) -> str:
        def rng(v: tuple[int, int]) -> str:
            return str(v[0]) if v[0] == v[1] else f"{v[0]}..{v[1]}"

        return (f"R={self.requests} A={self.adapters} P<={self.max_prompt} L<={self.max_output} "
                f"max_loras={rng(self.max_loras)} max_num_seqs={rng(self.max_num_seqs)} "
                f"T={rng(self.max_num_batched_tokens)} S={rng(self.starvation_steps)}"
                + (" skip" if self.skip else "") + (" async" if self.async_scheduling else "")
                + (f" throttle/{self.prefill_interval}" if self.prefill_interval > 1 else "")
                + (f" kv={rng(self.kv_blocks)}x{self.block_size}" if self.kv_blocks is not None else "")
                + (f" priority<={self.max_priority}" if self.priority else "")
                + (f" mutant={self.mutant}" if self.mutant else ""))


@dataclass
class Params:
    """Frozen symbols: per-request parameters and config values."""

    b: Bounds
    adapter: list[z3.ArithRef]
    prompt: list[z3.ArithRef]
    max_tokens: list[z3.ArithRef]
    M: z3.ArithRef  # max_loras
    N: z3.ArithRef  # max_num_seqs
    T: z3.ArithRef  # max_num_batched_tokens
    S: z3.ArithRef  # starvation_steps (the guard counts `window` steps)
    prio: list[z3.ArithRef] = field(default_factory=list)  # per-request priority (0 under FCFS)
    K: z3.ArithRef = field(default_factory=lambda: z3.IntVal(0))  # kv_blocks (general mode with KV)
    is_a: list[list[z3.BoolRef]] = field(default_factory=list)  # is_a[i][a-1]
    m_eq: dict[int, z3.BoolRef] = field(default_factory=dict)

    @property
    def window(self) -> z3.ArithRef:
        """`policy.fair.starvation_window`: S prefill cadences, S * k steps
        (k = `Bounds.prefill_interval`)."""
        return self.S * self.b.prefill_interval

    def constraints(self) -> list[z3.BoolRef]:
        b = self.b
        cs: list[z3.BoolRef] = []
        for i in range(b.requests):
            cs += [self.adapter[i] >= 0, self.adapter[i] <= b.adapters,
                   self.prompt[i] >= 1, self.prompt[i] <= b.max_prompt,
                   self.max_tokens[i] >= 1, self.max_tokens[i] <= b.max_output]
        for v, (lo, hi) in ((self.M, b.max_loras), (self.N, b.max_num_seqs),
                            (self.T, b.max_num_batched_tokens), (self.S, b.starvation_steps)):
            cs += [v >= lo, v <= hi]
        for i in range(b.requests):
            cs += [self.prio[i] >= 0, self.prio[i] <= b.max_priority] if b.priority else []
        if b.kv_blocks is not None:
            cs += [self.K >= b.kv_blocks[0], self.K <= b.kv_blocks[1]]
            # `policy.core.Scheduler.add` rejects a request whose longest
            # sequence cannot fit the pool (vLLM refuses such a config).
            cs += [blocks_for(b, self.prompt[i] + self.max_tokens[i]) <= self.K for i in range(b.requests)]
        return cs


def blocks_for(b: Bounds, tokens: z3.ArithRef) -> z3.ArithRef:
    """`spec.state.blocks_for` with the concrete block size of `b`."""
    k = b.block_size
    return tokens if k == 1 else (tokens + (k - 1)) / k


def make_params(b: Bounds) -> Params:
    R = range(b.requests)
    p = Params(
        b,
        [z3.Int(f"adapter_{i}") for i in R],
        [z3.Int(f"prompt_{i}") for i in R],
        [z3.Int(f"max_tokens_{i}") for i in R],
        z3.Int("max_loras"), z3.Int("max_num_seqs"), z3.Int("max_num_batched_tokens"),
        z3.Int("starvation_steps"),
        # constants in the fast path, so that it carries no extra symbols
        [z3.Int(f"priority_{i}") if b.priority else z3.IntVal(0) for i in R],
        z3.Int("kv_blocks") if b.kv_blocks is not None else z3.IntVal(0),
    )
    p.is_a = [[p.adapter[i] == a for a in range(1, b.adapters + 1)] for i in R]
    p.m_eq = {m: p.M == m for m in range(b.max_loras[0], b.max_loras[1] + 1)}
    return p


@dataclass
class StateVars:
    """The scheduler state at the start of a step (before its arrivals)."""

    step: z3.ArithRef
    W: list[z3.BoolRef]  # waiting
    R: list[z3.BoolRef]  # running
    F: list[z3.BoolRef]  # finished
    X: list[z3.BoolRef]  # aborted
    computed: list[z3.ArithRef]
    generated: list[z3.ArithRef]
    admitted_at: list[z3.ArithRef]  # step of (first and only) admission
    ever: list[z3.BoolRef]  # admitted at least once
    arrival: list[z3.ArithRef]
    # fair's FairGuard memory (constant for the other policies):
    Z: list[z3.BoolRef]  # Z[i]: slot i is r* (`FairGuard.star`); at most one
    V: list[z3.BoolRef]  # V[a-1]: adapter a is a victim (`FairGuard.victims`)
    DL: list[z3.ArithRef]  # DL[a-1]: `FairGuard.deadline[a]`, 0 = absent (steps start at 1)
    ZT: z3.ArithRef  # `FairGuard.chosen_at`: the step r* was chosen, 0 = no r*
    # async scheduling and DP throttling (constant when off):
    pend: list[z3.BoolRef]  # a sampled token's output is in flight (num_output_placeholders = 1)
    D: list[z3.BoolRef]  # vLLM's `deferred_waiting`
    pcb: z3.BoolRef  # vLLM's `prefill_capacity_bound`
    wave: z3.ArithRef  # steps since the engine was idle (DP `step_counter`)
    pa: z3.BoolRef  # async: a step's output is pending (`Scheduler._pending`)
    # general mode (KV preemption, priority queue; constant otherwise):
    wkey: list[z3.ArithRef]  # FCFS: place in `waiting` (smaller = ahead); arrivals append, preemptions prepend
    rkey: list[z3.ArithRef]  # place in `running` (admission order; a re-admission appends)
    pf: list[z3.BoolRef]  # vLLM's `is_prefill_chunk` (set when scheduled)
    CU: z3.ArithRef = field(default_factory=lambda: z3.IntVal(0))  # `FairGuard.cool_until`

    def arrived(self, i: int) -> z3.BoolRef:
        return z3.Or(self.W[i], self.R[i], self.F[i], self.X[i])

    def has_work(self) -> z3.BoolRef:
        """`policy.core.Scheduler.has_work`."""
        return z3.Or(*self.W, *self.R, self.pa)


def make_state(b: Bounds, tag: str) -> StateVars:
    R = range(b.requests)
    return StateVars(
        z3.Int(f"step@{tag}"),
        [z3.Bool(f"W_{i}@{tag}") for i in R],
        [z3.Bool(f"R_{i}@{tag}") for i in R],
        [z3.Bool(f"F_{i}@{tag}") for i in R],
        [z3.Bool(f"X_{i}@{tag}") for i in R],
        [z3.Int(f"computed_{i}@{tag}") for i in R],
        [z3.Int(f"generated_{i}@{tag}") for i in R],
        [z3.Int(f"admitted_at_{i}@{tag}") for i in R],
        [z3.Bool(f"ever_{i}@{tag}") for i in R],
        [z3.Int(f"arrival_{i}@{tag}") for i in R],
        [z3.Bool(f"Z_{i}@{tag}") for i in R],
        [z3.Bool(f"V_{a}@{tag}") for a in range(1, b.adapters + 1)],
        [z3.Int(f"DL_{a}@{tag}") for a in range(1, b.adapters + 1)],
        z3.Int(f"ZT@{tag}"),
        [z3.Bool(f"pend_{i}@{tag}") for i in R],
        [z3.Bool(f"D_{i}@{tag}") for i in R],
        z3.Bool(f"pcb@{tag}"),
        z3.Int(f"wave@{tag}"),
        z3.Bool(f"pa@{tag}"),
        # the general mode's state; constants in the fast path
        [z3.Int(f"wkey_{i}@{tag}") if b.general else z3.IntVal(0) for i in R],
        [z3.Int(f"rkey_{i}@{tag}") if b.general else z3.IntVal(0) for i in R],
        [z3.Bool(f"pf_{i}@{tag}") if b.general else z3.BoolVal(False) for i in R],
        z3.Int(f"CU@{tag}"),
    )


def init(b: Bounds, s: StateVars) -> list[z3.BoolRef]:
    """The empty scheduler before step 1."""
    cs: list[z3.BoolRef] = [s.step == 0]
    for i in range(b.requests):
        cs += [z3.Not(s.W[i]), z3.Not(s.R[i]), z3.Not(s.F[i]), z3.Not(s.X[i]), z3.Not(s.ever[i]),
               s.computed[i] == 0, s.generated[i] == 0, s.admitted_at[i] == 0, s.arrival[i] == 0,
               z3.Not(s.Z[i])]
        if b.general:
            cs += [s.wkey[i] == 0, s.rkey[i] == 0, z3.Not(s.pf[i])]
    for a in range(b.adapters):
        cs += [z3.Not(s.V[a]), s.DL[a] == 0]
    cs += [z3.Not(x) for x in s.pend + s.D] + [z3.Not(s.pcb), s.wave == 0, z3.Not(s.pa), s.ZT == 0, s.CU == 0]
    return cs


@dataclass
class Inputs:
    """The environment's choices in one step."""

    arrive: list[z3.BoolRef]
    abort: list[z3.BoolRef]
    skip: list[z3.BoolRef]


def make_inputs(b: Bounds, tag: str) -> Inputs:
    R = range(b.requests)
    return Inputs([z3.Bool(f"arrive_{i}@{tag}") for i in R],
                  [z3.Bool(f"abort_{i}@{tag}") for i in R],
                  [z3.Bool(f"skip_{i}@{tag}") for i in R])


@dataclass
class Mid:
    """The state once the step's arrivals and aborts are applied."""

    step: z3.ArithRef  # number of this step
    W: list[z3.BoolRef]
    R: list[z3.BoolRef]
    F: list[z3.BoolRef]
    X: list[z3.BoolRef]
    computed: list[z3.ArithRef]
    generated: list[z3.ArithRef]
    admitted_at: list[z3.ArithRef]
    ever: list[z3.BoolRef]
    arrival: list[z3.ArithRef]
    Z: list[z3.BoolRef]
    V: list[z3.BoolRef]
    DL: list[z3.ArithRef]
    pend: list[z3.BoolRef]
    D: list[z3.BoolRef]
    pcb: z3.BoolRef
    wave: z3.ArithRef  # the wave counter this step is scheduled with
    throttle: z3.BoolRef  # the DP engine core throttles this step
    wkey: list[z3.ArithRef] = field(default_factory=list)
    rkey: list[z3.ArithRef] = field(default_factory=list)
    pf: list[z3.BoolRef] = field(default_factory=list)
    ZT: z3.ArithRef = field(default_factory=lambda: z3.IntVal(0))  # `FairGuard.chosen_at`
    CU: z3.ArithRef = field(default_factory=lambda: z3.IntVal(0))  # `FairGuard.cool_until`


@dataclass
class StepAux:
    """Quantities of one `schedule()` that the properties talk about."""

    mid: Mid
    n: list[z3.ArithRef]  # tokens scheduled per request
    admitted: list[z3.BoolRef]
    running_after: list[z3.BoolRef]
    finished: list[z3.BoolRef]
    policy: str
    preempted: list[z3.BoolRef] = field(default_factory=list)


def _atleast(bs: list[z3.BoolRef], k: int) -> z3.BoolRef:
    if k <= 0:
        return z3.BoolVal(True)
    if k > len(bs):
        return z3.BoolVal(False)
    return z3.AtLeast(*bs, k)


def _atmost(bs: list[z3.BoolRef], k: int) -> z3.BoolRef:
    if k >= len(bs):
        return z3.BoolVal(True)
    return z3.AtMost(*bs, k)


def count_le_M(p: Params, bs: list[z3.BoolRef]) -> z3.BoolRef:
    """At most `max_loras` of `bs` hold (cardinality, per value of M)."""
    return z3.Or([z3.And(eq, _atmost(bs, m)) for m, eq in p.m_eq.items()])


def count_ge_M(p: Params, bs: list[z3.BoolRef], shift: int = 0) -> z3.BoolRef:
    """At least `max_loras` (+ `shift`, for mutants) of `bs` hold: the adapter slots are full."""
    return z3.Or([z3.And(eq, _atleast(bs, m + shift)) for m, eq in p.m_eq.items()])


def _in(p: Params, i: int, L: list[z3.BoolRef]) -> z3.BoolRef:
    return z3.Or([z3.And(p.is_a[i][a], L[a]) for a in range(p.b.adapters)])


def _min(x: z3.ArithRef, y: z3.ArithRef) -> z3.ArithRef:
    return z3.If(x <= y, x, y)


def _count(bs: list[z3.BoolRef]) -> z3.ArithRef:
    return z3.Sum([z3.If(x, 1, 0) for x in bs]) if bs else z3.IntVal(0)


def events(b: Bounds, s: StateVars, inp: Inputs) -> tuple[Mid, list[z3.BoolRef]]:
    """Arrivals join the tail of waiting (in slot order), aborts remove."""
    cs: list[z3.BoolRef] = []
    t = s.step + 1
    n = b.requests
    for i in range(n):
        cs.append(z3.Implies(inp.arrive[i], z3.Not(s.arrived(i))))
        for j in range(i):
            cs.append(z3.Implies(inp.arrive[i], z3.Or(s.arrived(j), inp.arrive[j])))
        if b.last_arrival is not None:
            cs.append(z3.Implies(inp.arrive[i], t <= b.last_arrival))
        cs.append(z3.Implies(inp.abort[i], z3.Or(s.W[i], s.R[i], inp.arrive[i])))
        if not b.skip:
            cs.append(z3.Not(inp.skip[i]))
    W = [z3.And(z3.Or(s.W[i], inp.arrive[i]), z3.Not(inp.abort[i])) for i in range(n)]
    R = [z3.And(s.R[i], z3.Not(inp.abort[i])) for i in range(n)]
    X = [z3.Or(s.X[i], inp.abort[i]) for i in range(n)]
    arrival = [z3.If(inp.arrive[i], t, s.arrival[i]) for i in range(n)]
    D = [z3.And(s.D[i], z3.Not(inp.abort[i])) for i in range(n)]
    # policy.driver.run: the wave counter restarts when the engine was idle.
    wave = z3.If(s.has_work(), s.wave, 0)
    throttle = throttled(b, wave)
    # FCFS general mode: an arrival joins the tail of `waiting` (`order_keys`).
    wkey = [z3.If(inp.arrive[i], t * (n + 1) + i, s.wkey[i]) for i in range(n)] if b.general else list(s.wkey)
    return Mid(t, W, R, list(s.F), X, list(s.computed), list(s.generated),
               list(s.admitted_at), list(s.ever), arrival, list(s.Z), list(s.V), list(s.DL),
               list(s.pend), D, s.pcb, wave, throttle, wkey, list(s.rkey), list(s.pf), s.ZT, s.CU), cs


def throttled(b: Bounds, wave: z3.ArithRef) -> z3.BoolRef:
    """`spec.config.throttled`: k > 1 and the wave counter is not a multiple of k."""
    k = b.prefill_interval
    return z3.BoolVal(False) if k <= 1 else (wave % k) != 0


def fair_guard(p: Params, m: Mid, C0: list[z3.BoolRef], B0: z3.ArithRef, seats0: z3.ArithRef,
               mutant: str | None = None, ahead: Callable[[int, int], z3.BoolRef] | None = None) -> FairStart:
    """`policy.fair.FairGuard` when a waiting scan starts, on the state `m`
    after arrivals, the adapters `C0` of every running request, and the
    budget `B0` and seats `seats0` the running phase left: r* (`begin_scan`),
    its victims and deadline (`visit_star`) and the holds (`FairStart.held`),
    as docs/proofs.md, "What is encoded" (fair), states them; S is
    `Params.window`. Shared, like `FairGuard`, by the encoded scan and by the
    declared holds of `no_hol_blocking`; `mutant` plants a bug in the scan's
    copy only (`proofs.mutants`)."""
    b = p.b
    rng, A, t = range(b.requests), b.adapters, m.step
    if ahead is None:
        def ahead(j: int, i: int) -> z3.BoolRef:
            return queue_before(p, m, j, i)
    sticky = z3.Or([z3.And(m.Z[i], m.W[i]) for i in rng])
    gap_over = t >= m.CU  # guards are S apart: no new r* before `cool_until`
    if mutant == "gap_forever":  # after the first guard, no r* is ever chosen again
        gap_over = m.CU == 0
    cand = [z3.And(m.W[i], t - m.arrival[i] >= p.window, gap_over) for i in rng]
    if mutant == "star_lora_only":  # only LoRA requests can be r*: a base-model request never is
        cand = [z3.And(c, p.adapter[i] > 0) for i, c in enumerate(cand)]
    if b.priority and mutant != "star_kept_over_urgent":  # a more urgent starving request replaces r*
        urgent = z3.Or([z3.And(m.Z[i], m.W[i], cand[j], p.prio[j] < p.prio[i]) for i in rng for j in rng if j != i])
        sticky = z3.And(sticky, z3.Not(urgent))
    if b.general:  # `FairGuard._oldest_starving`: (priority under the priority queue, waiting_since, seq)
        def older(j: int, i: int) -> z3.BoolRef:
            if mutant == "star_youngest":
                j, i = i, j
            by_prio = b.priority and mutant != "star_priority_ignored"
            key = [(p.prio[x] if by_prio else z3.IntVal(0), m.arrival[x]) for x in (j, i)]
            return z3.Or(key[0][0] < key[1][0], z3.And(key[0][0] == key[1][0], z3.Or(
                key[0][1] < key[1][1], z3.And(key[0][1] == key[1][1], z3.BoolVal(j < i)))))
        first = [z3.And(cand[i], *[z3.Not(z3.And(cand[j], older(j, i))) for j in rng if j != i]) for i in rng]
    elif mutant == "star_youngest":
        first = [z3.And(cand[i], *[z3.Not(cand[j]) for j in range(i + 1, b.requests)]) for i in rng]
    else:
        first = [z3.And(cand[i], *[z3.Not(cand[j]) for j in range(i)]) for i in rng]
    r_star = [z3.If(sticky, m.Z[i], first[i]) for i in rng]
    has_star = z3.Or(r_star)
    V1 = [z3.And(m.V[a], sticky) for a in range(A)]
    DL1 = [z3.If(sticky, m.DL[a], 0) for a in range(A)]
    reach = z3.And(has_star, B0 > 0, seats0 < p.N)
    star_in_C0 = z3.Or([z3.And(r_star[i], _in(p, i, C0)) for i in rng])
    full0 = count_ge_M(p, C0)
    star_pos = z3.Or([z3.And(r_star[i], p.adapter[i] > 0) for i in rng])
    blocked = z3.And(star_pos, z3.Not(star_in_C0), full0)
    add = z3.And(reach, blocked, z3.Not(z3.Or([z3.And(V1[a], C0[a]) for a in range(A)])))
    if mutant == "guard_off":
        add = z3.BoolVal(False)
    left = [p.max_tokens[i] - m.generated[i] for i in rng]  # outputs still to produce
    slot_left: list[z3.ArithRef] = []
    for a in range(A):
        best: z3.ArithRef = z3.IntVal(0)
        for i in rng:
            here = z3.And(m.R[i], p.is_a[i][a])
            best = z3.If(z3.And(here, left[i] > best), left[i], best)
        slot_left.append(best)
    fewest: z3.ArithRef = z3.IntVal(NO_SLOT)
    for a in range(A):
        fewest = z3.If(z3.And(C0[a], slot_left[a] < fewest), slot_left[a], fewest)
    dl = t + fewest + p.window
    V2 = [z3.If(add, z3.And(C0[a], t + slot_left[a] <= dl), V1[a]) for a in range(A)]
    DL2 = [z3.If(add, z3.If(V2[a], dl, 0), DL1[a]) for a in range(A)]
    dl_of = [z3.Sum([z3.If(p.is_a[i][a], DL2[a], 0) for a in range(A)]) for i in rng]  # deadline of i's adapter
    fits = [z3.And(dl_of[i] > 0, t + left[i] <= dl_of[i]) for i in rng]
    if mutant == "drain_unbounded":  # every request of the victim drains, whatever its length
        fits = [z3.BoolVal(True) for _ in rng]
    late = [z3.And(m.W[i], z3.Not(r_star[i]), z3.Not(fits[i])) for i in rng]
    behind = [z3.And(has_star, z3.Not(r_star[i]),
                     z3.Or(late[i], *[z3.And(late[j], p.adapter[j] == p.adapter[i], ahead(j, i))
                                      for j in rng if j != i]))
              for i in rng]
    chosen_at = z3.If(sticky, m.ZT, t)  # `FairGuard.chosen_at`
    return FairStart(p, r_star, has_star, V2, reach, blocked, late, behind, DL2, chosen_at,
                     keep_late=mutant == "late_kept")


@dataclass
class FairStart:
    """fair's guard once r* is chosen and visited (see `fair_guard`)."""

    p: Params
    r_star: list[z3.BoolRef]
    has_star: z3.BoolRef
    victims: list[z3.BoolRef]  # after visit_star, before the scan admits
    reach: z3.BoolRef  # the scan reaches r* (budget and a seat left)
    cap_blocked: z3.BoolRef  # the LoRA cap blocks r*
    late: list[z3.BoolRef]  # late[i]: i waits and cannot end by its adapter's deadline (if a victim's)
    behind: list[z3.BoolRef]  # behind[i]: i or one of its adapter ahead of it is late
    deadline: list[z3.ArithRef]  # per adapter after visit_star, 0 = none
    chosen_at: z3.ArithRef  # the step r* was chosen (this one when it is new)
    keep_late: bool = False  # mutant late_kept: a late admission does not drop its adapter

    def victims_after(self, admitted: list[tuple[int, z3.BoolRef]]) -> list[z3.BoolRef]:
        """The victims once the requests `admitted` (j, admitted) are in: an
        adapter with a late request admitted stops being a victim."""
        p = self.p
        if self.keep_late:
            return list(self.victims)
        return [z3.And(self.victims[a], *[z3.Not(z3.And(c, self.late[j], p.is_a[j][a])) for j, c in admitted])
                for a in range(p.b.adapters)]

    def held(self, i: int, admitted: list[tuple[int, z3.BoolRef]]) -> z3.BoolRef:
        """`FairGuard.holds` for i, the requests `admitted` (j, admitted)
        ahead of it in the scan: i's adapter is the last victim left, and i
        or one of its adapter ahead of it is late."""
        vs = self.victims_after(admitted)
        return z3.And(self.behind[i], _in(self.p, i, vs), _count(vs) == 1)


NO_SLOT = 1 << 30  # above any outputs left: the fewest outputs left over no slot


MUTANTS = ("cap_early", "cap_late", "seats_unchecked", "budget_plus_one", "fifo_reversed",
           "drop_running", "guard_off", "star_youngest", "star_lora_only", "throttle_ignored", "async_no_skip",
           "kv_unchecked", "victim_head", "preempt_to_tail", "priority_ignored", "star_priority_ignored",
           "star_kept_over_urgent", "drain_unbounded", "gap_forever", "late_kept")


def decoding(p: Params, m: Mid, i: int) -> z3.BoolRef:
    """Not vLLM's `is_prefill_chunk` for a running request. In the fast path
    (no preemption) a request that has sampled is decoding; a re-admitted
    request recomputes prompt + output in prefill chunks, so the general mode
    keeps the flag as state (`pf`)."""
    if p.b.general:
        return z3.Not(m.pf[i])
    return z3.Or(m.generated[i] >= 1, m.pend[i])


def priority_before(p: Params, j: int, i: int) -> z3.BoolRef:
    """vLLM's `PriorityRequestQueue` order (`Request.__lt__`): smaller
    (priority, arrival_time, request id); arrival time and id follow slot order."""
    return p.prio[j] <= p.prio[i] if j < i else p.prio[j] < p.prio[i]


def queue_before(p: Params, m: Mid, j: int, i: int) -> z3.BoolRef:
    """j is ahead of i in `waiting` as the encoding keeps it: slot order in the
    fast path, `priority_before` under the priority queue, the key `wkey`
    under FCFS with preemption."""
    b = p.b
    if not b.general or (b.priority and b.mutant == "priority_ignored"):
        return z3.BoolVal(j < i)
    if b.priority:
        return priority_before(p, j, i)
    return m.wkey[j] < m.wkey[i]


def running_before(p: Params, m: Mid, j: int, i: int) -> z3.BoolRef:
    """j is ahead of i in `running` (admission order): by admission step, then
    slot, in the fast path; by `rkey` in the general mode."""
    if p.b.general:
        return m.rkey[j] < m.rkey[i]
    return (m.admitted_at[j] < m.admitted_at[i]) if j > i else (m.admitted_at[j] <= m.admitted_at[i])


@dataclass
class RunPhase:
    nr: list[z3.ArithRef]  # tokens scheduled per running request
    preempted: list[z3.BoolRef]
    pidx: list[z3.ArithRef]  # order of preemption within the step (0 = first)
    budget: z3.ArithRef  # budget left for the waiting scan


def _running_general(p: Params, m: Mid, go: list[z3.BoolRef], need: list[z3.ArithRef], tag: str,
                     cs: list[z3.BoolRef]) -> RunPhase:
    """The running loop of `policy.core.Scheduler._schedule` over positions in
    `running` (a symbolic permutation: `sel[q][i]`, slot i is q-th), with KV
    allocation and preemption.

    At position q the request gets n = min(need, budget); if the blocks for
    computed + n do not fit the free blocks, victims are preempted in
    decreasing victim key (FCFS: the tail of `running`; priority: the largest
    (priority, arrival, id) anywhere in `running`, whose scheduled tokens
    return to the budget) until it fits; if the request itself is the victim,
    the loop stops. The victims of one position are those for which the
    blocks of the larger-keyed victims before them are not enough (closed
    form of the inner `while`)."""
    b = p.b
    rng = range(b.requests)
    mut = b.mutant
    before = {(j, i): running_before(p, m, j, i) for j in rng for i in rng if j != i}
    pos = [_count([z3.And(m.R[j], before[j, i]) for j in rng if j != i]) for i in rng]
    held = [blocks_for(b, m.computed[i]) for i in rng]

    def larger(u: int, v: int) -> z3.BoolRef:  # u is preempted before v
        if b.priority:
            return p.prio[u] > p.prio[v] if u < v else p.prio[u] >= p.prio[v]
        return before[u, v] if mut == "victim_head" else before[v, u]

    pre: list[z3.BoolRef] = [z3.BoolVal(False) for _ in rng]
    nn: list[z3.ArithRef] = [z3.IntVal(0) for _ in rng]
    pidx: list[z3.ArithRef] = [z3.IntVal(0) for _ in rng]
    budget: z3.ArithRef = p.T
    alive: z3.BoolRef = z3.BoolVal(True)
    cnt: z3.ArithRef = z3.IntVal(0)
    for q in rng:
        cur = [z3.And(m.R[i], pos[i] == q, z3.Not(pre[i])) for i in rng]
        alive_q = z3.And(alive, budget > 0)
        n_q = z3.Int(f"nq_{q}@{tag}")
        cs.append(n_q == _min(z3.Sum([z3.If(cur[i], need[i], 0) for i in rng]), budget))
        try_ = z3.And(alive_q, z3.Or([z3.And(cur[i], go[i]) for i in rng]), n_q > 0)
        vict = [z3.BoolVal(False) for _ in rng]
        if b.kv_blocks is not None:
            live = [z3.And(m.R[i], z3.Not(pre[i])) for i in rng]
            blk = [z3.If(nn[i] > 0, blocks_for(b, m.computed[i] + nn[i]), held[i]) for i in rng]
            free = p.K - z3.Sum([z3.If(live[i], blk[i], 0) for i in rng])
            nb = (blocks_for(b, z3.Sum([z3.If(cur[i], m.computed[i], 0) for i in rng]) + n_q)
                  - z3.Sum([z3.If(cur[i], held[i], 0) for i in rng]))
            fits = nb <= free
            vict = [z3.And(try_, z3.Not(fits), live[v],
                           free + z3.Sum([z3.If(z3.And(live[u], larger(u, v)), blk[u], 0) for u in rng if u != v])
                           < nb,
                           z3.Not(z3.Or([z3.And(cur[u], larger(u, v)) for u in rng if u != v])))
                    for v in rng]
        selfp = z3.Or([z3.And(cur[i], vict[i]) for i in rng])
        sched = z3.And(try_, z3.Not(selfp))
        # priority: a victim already scheduled this step gives its tokens back
        # (FCFS victims come from the tail, never scheduled yet: no refund in vLLM).
        refund = z3.Sum([z3.If(vict[v], nn[v], 0) for v in rng]) if b.priority else z3.IntVal(0)
        nb_ = z3.Int(f"bud_{q}@{tag}")
        cs.append(nb_ == budget + refund - z3.If(sched, n_q, 0))
        new_pre, new_nn = [], []
        for i in rng:
            pv, nv = z3.Bool(f"pre_{q}_{i}@{tag}"), z3.Int(f"nn_{q}_{i}@{tag}")
            keep = z3.If(z3.And(vict[i], b.priority), 0, nn[i])
            cs += [pv == z3.Or(pre[i], vict[i]), nv == z3.If(z3.And(cur[i], sched), n_q, keep)]
            new_pre.append(pv)
            new_nn.append(nv)
        pidx = [z3.If(vict[v], cnt + _count([z3.And(vict[u], larger(u, v)) for u in rng if u != v]), pidx[v])
                for v in rng]
        cnt = cnt + _count(vict)
        pre, nn, budget = new_pre, new_nn, nb_
        alive = z3.And(alive_q, z3.Not(selfp))
    return RunPhase(nn, pre, pidx, budget)


def schedule(p: Params, policy: str, m: Mid, skip: list[z3.BoolRef], tag: str,
             ) -> tuple[StateVars, StepAux, list[z3.BoolRef]]:
    """One `schedule()` plus its model output, from the post-event state `m`.

    Returns the next state (fresh variables), the step's aux quantities and
    the constraints defining them. `p.b.mutant` plants one bug of
    `proofs.mutants` (None: the real step).
    """
    b = p.b
    mut = b.mutant
    n_req, A = b.requests, b.adapters
    rng = range(n_req)
    cs: list[z3.BoolRef] = []
    t = m.step
    ph = [z3.If(m.pend[i], 1, 0) for i in rng]  # num_output_placeholders
    need = [p.prompt[i] + m.generated[i] + ph[i] - m.computed[i] for i in rng]
    # DP throttle: defer prefills unless capacity-bound or nothing decodes.
    defer = z3.And(m.throttle, z3.Not(m.pcb), z3.Or([z3.And(m.R[i], decoding(p, m, i)) for i in rng]))
    if mut == "throttle_ignored":
        defer = z3.BoolVal(False)

    # --- running phase.
    go = []
    for i in rng:
        sure = z3.And(m.pend[i], m.computed[i] + 1 >= p.prompt[i] + p.max_tokens[i])  # async: sure to finish
        if mut == "async_no_skip":
            sure = z3.BoolVal(False)
        go.append(z3.And(m.R[i], z3.Not(skip[i]), z3.Not(sure), z3.Not(z3.And(defer, z3.Not(decoding(p, m, i))))))
    pre: list[z3.BoolRef] = [z3.BoolVal(False) for _ in rng]
    pidx: list[z3.ArithRef] = [z3.IntVal(0) for _ in rng]
    if b.general:
        rp = _running_general(p, m, go, need, tag, cs)
        nr, pre, pidx, B0 = rp.nr, rp.preempted, rp.pidx, rp.budget
    else:  # fast path: running order is admission order (step, then slot), nothing is preempted
        nr = [z3.Int(f"nrun_{i}@{tag}") for i in rng]
        for i in rng:
            ahead = [z3.If(z3.And(m.R[j], running_before(p, m, j, i)), nr[j], 0) for j in rng if j != i]
            rem = p.T - z3.Sum(ahead) if ahead else p.T
            cs.append(nr[i] == z3.If(z3.And(go[i], rem > 0), _min(need[i], rem), 0))
        B0 = p.T - z3.Sum(nr)
    any_pre = z3.Or(pre)
    sched_run = [nr[i] > 0 for i in rng]
    L0 = [z3.Or([z3.And(sched_run[i], p.is_a[i][a]) for i in rng]) for a in range(A)]
    C0 = [z3.Or([z3.And(m.R[i], p.is_a[i][a]) for i in rng]) for a in range(A)]
    seats0 = _count(m.R)
    shift = {"cap_early": -1, "cap_late": 1}.get(mut or "", 0)

    def cap(i: int, L: list[z3.BoolRef]) -> z3.BoolRef:
        return z3.And(p.adapter[i] > 0, z3.Not(_in(p, i, L)), count_ge_M(p, L, shift))

    def seat_free(seats: z3.ArithRef) -> z3.BoolRef:
        return z3.BoolVal(True) if mut == "seats_unchecked" else seats < p.N

    def take(i: int, budget: z3.ArithRef) -> z3.ArithRef:
        return _min(need[i], budget + 1) if mut == "budget_plus_one" else _min(need[i], budget)

    def throttle_stop(i: int) -> z3.BoolRef:  # a waiting request needing more than 1 token
        return z3.And(defer, need[i] > 1)

    # --- fair (`policy.fair.FairGuard`): the cap counts every running
    # request's adapter; r* is sticky, visited first; while r* waits the last
    # victim's late requests are held (`FairStart.held`, from the admissions
    # ahead in the scan: a late admission drops its adapter from the victims).
    r_star = [z3.BoolVal(False) for _ in rng]
    held_on: z3.BoolRef = z3.BoolVal(False)
    B, seats = B0, seats0
    L = C0 if policy == "fair" else L0
    adm0 = [z3.BoolVal(False) for _ in rng]
    ok0: z3.BoolRef = z3.BoolVal(False)
    skipped = [z3.BoolVal(False) for _ in rng]
    stop: z3.BoolRef = z3.BoolVal(False)
    g = None
    if policy == "fair":
        g = fair_guard(p, m, C0, B0, seats0, mut)
        r_star = g.r_star
    if policy == "fair" and not b.general:
        reach = z3.And(g.has_star, B0 > 0, seat_free(seats0))
        blocked = z3.And(g.has_star, z3.Not(z3.Or([z3.And(r_star[i], z3.Not(cap(i, C0))) for i in rng])))
        tstop = z3.Or([z3.And(r_star[i], throttle_stop(i)) for i in rng])
        ok0 = z3.And(reach, z3.Not(blocked), z3.Not(tstop))
        # capacity (or the throttle) stops r*: the scan stops there.
        stop = z3.And(g.has_star, z3.Not(ok0), z3.Not(z3.And(reach, blocked)))
        skipped = [z3.And(r_star[i], reach, blocked) for i in rng]
        adm0 = [z3.And(r_star[i], ok0) for i in rng]
        n0 = z3.Sum([z3.If(adm0[i], take(i, B0), 0) for i in rng])
        B = B0 - n0
        seats = seats0 + z3.If(ok0, 1, 0)
        L = [z3.Or(C0[a], z3.Or([z3.And(adm0[i], p.is_a[i][a]) for i in rng])) for a in range(A)]
        # holds: r* not admitted (admitted() clears r* and the victims).
        held_on = z3.And(g.has_star, z3.Not(ok0))
        if mut == "guard_off":
            held_on = z3.BoolVal(False)

    adm = list(adm0)
    nw: list[z3.ArithRef] = [z3.If(adm0[i], take(i, B0), 0) for i in rng]
    scan_idx: list[z3.ArithRef] = [z3.IntVal(0) for _ in rng]
    seen: list[tuple[int, z3.BoolRef]] = []  # (request, admitted) in scan order, for the guard's holds
    if not b.general:
        # --- waiting scan in queue (slot) order.
        for i in (reversed(rng) if mut == "fifo_reversed" else rng):
            bi = z3.Int(f"budget_{i}@{tag}")
            cs.append(bi == B)
            visited = z3.And(m.W[i], z3.Not(r_star[i]), z3.Not(stop), bi > 0, seat_free(seats))
            capb = cap(i, L)
            guard = z3.And(held_on, g.held(i, seen)) if g is not None else z3.BoolVal(False)
            gate_skip = z3.Or(guard, capb) if policy != "blocking" else z3.BoolVal(False)
            gate_stop = capb if policy == "blocking" else z3.BoolVal(False)
            a_i = z3.And(visited, z3.Not(gate_skip), z3.Not(gate_stop), z3.Not(throttle_stop(i)))
            seen.append((i, a_i))
            skipped[i] = z3.Or(skipped[i], z3.And(visited, gate_skip))
            stop = z3.Or(stop, z3.And(visited, z3.Not(gate_skip), z3.Or(gate_stop, throttle_stop(i))))
            n_i = z3.If(a_i, take(i, bi), 0)
            adm[i] = z3.Or(a_i, adm0[i])
            nw[i] = z3.If(adm0[i], nw[i], n_i)
            B = bi - n_i
            seats = seats + z3.If(a_i, 1, 0)
            L = [z3.Or(L[a], z3.And(a_i, p.is_a[i][a])) for a in range(A)]
    else:
        # --- waiting scan (general mode), only if nothing was preempted: each
        # request is judged on what the requests ahead of it in the scan
        # order (r* first under fair, then `queue_before`) left.
        if policy == "fair":
            star_adm = z3.Bool(f"star_adm@{tag}")
            held_on = z3.And(g.has_star, z3.Not(star_adm))
            if mut == "guard_off":
                held_on = z3.BoolVal(False)
        if mut == "fifo_reversed":
            scan_b = {(j, i): queue_before(p, m, i, j) for j in rng for i in rng if j != i}
        else:
            scan_b = {(j, i): queue_before(p, m, j, i) for j in rng for i in rng if j != i}
        if policy == "fair":
            scan_b = {(j, i): z3.Or(r_star[j], z3.And(z3.Not(r_star[i]), v)) for (j, i), v in scan_b.items()}
        adm = [z3.Bool(f"adm_{i}@{tag}") for i in rng]
        nw = [z3.Int(f"nw_{i}@{tag}") for i in rng]
        stp = [z3.Bool(f"stp_{i}@{tag}") for i in rng]
        used0 = z3.Sum([z3.If(z3.And(m.R[i], z3.Not(pre[i])), blocks_for(b, m.computed[i] + nr[i]), 0) for i in rng])
        for i in rng:
            bef = [(j, scan_b[j, i]) for j in rng if j != i]
            ab = [(j, z3.And(c, adm[j])) for j, c in bef]
            bi = B0 - z3.Sum([z3.If(c, nw[j], 0) for j, c in bef])
            seats_i = seats0 + _count([c for _, c in ab])
            L_i = [z3.Or(L[a], *[z3.And(c, p.is_a[j][a]) for j, c in ab]) for a in range(A)]
            stopped = z3.Or([z3.And(c, stp[j]) for j, c in bef])
            visited = z3.And(z3.Not(any_pre), m.W[i], z3.Not(stopped), bi > 0, seat_free(seats_i))
            capb = cap(i, L_i)
            guard = z3.And(held_on, g.held(i, ab)) if g is not None else z3.BoolVal(False)
            gate_skip = z3.Or(guard, capb) if policy != "blocking" else z3.BoolVal(False)
            gate_stop = capb if policy == "blocking" else z3.BoolVal(False)
            kvstop = z3.BoolVal(False)
            if b.kv_blocks is not None and mut != "kv_unchecked":
                used_i = used0 + z3.Sum([z3.If(c, blocks_for(b, nw[j]), 0) for j, c in ab])
                kvstop = blocks_for(b, p.prompt[i] + m.generated[i]) > p.K - used_i
            passes = z3.And(visited, z3.Not(gate_skip))
            halt = z3.Or(gate_stop, throttle_stop(i), kvstop)
            cs += [stp[i] == z3.And(passes, halt), adm[i] == z3.And(passes, z3.Not(halt)),
                   nw[i] == z3.If(adm[i], take(i, bi), 0)]
            skipped[i] = z3.And(visited, gate_skip)
            scan_idx[i] = _count([c for _, c in ab])
        if policy == "fair":
            cs.append(star_adm == z3.Or([z3.And(r_star[i], adm[i]) for i in rng]))
            ok0 = star_adm

    # --- model output (async: the previous step's output lands now).
    s2 = make_state(b, tag)
    n = [nr[i] + nw[i] for i in rng]
    idle = z3.Not(z3.Or(*m.W, *m.R))  # the driver does not call schedule()
    fin = []
    W_sched = [z3.Or(z3.And(m.W[i], z3.Not(adm[i])), pre[i]) for i in rng]  # `waiting` once scheduled
    R_sched = [z3.Or(z3.And(m.R[i], z3.Not(pre[i])), adm[i]) for i in rng]
    R1 = n_req + 1
    for i in rng:
        sample = z3.And(n[i] > 0, m.computed[i] + n[i] >= p.prompt[i] + m.generated[i] + ph[i])
        if b.async_scheduling:
            # the output of the previous step lands, a preempted request's too
            # (it keeps the token; `_apply_output` retires it if it is the last).
            g2 = m.generated[i] + z3.If(z3.And(m.pend[i], m.R[i]), 1, 0)
            f_i = z3.And(m.pend[i], m.R[i], g2 >= p.max_tokens[i])
            cs.append(s2.pend[i] == z3.And(sample, z3.Not(idle)))
        else:
            g2 = m.generated[i] + z3.If(sample, 1, 0)
            f_i = z3.And(sample, g2 >= p.max_tokens[i])
            cs.append(z3.Not(s2.pend[i]))
        fin.append(f_i)
        stays = R_sched[i]
        if mut == "drop_running":
            stays = z3.Or(z3.And(m.R[i], n[i] > 0), adm[i])
        # (fast path: a finishing request is never waiting; as before the general mode)
        W2 = z3.And(W_sched[i], z3.Not(f_i)) if b.general else z3.And(m.W[i], z3.Not(adm[i]))
        cs += [
            s2.computed[i] == z3.If(pre[i], 0, m.computed[i] + n[i]),
            s2.generated[i] == g2,
            s2.R[i] == z3.And(stays, z3.Not(f_i)),
            s2.W[i] == W2,
            s2.F[i] == z3.Or(m.F[i], f_i),
            s2.X[i] == m.X[i],
            s2.ever[i] == z3.Or(m.ever[i], adm[i]),
            s2.admitted_at[i] == z3.If(adm[i], t, m.admitted_at[i]),
            s2.arrival[i] == z3.If(pre[i], t, m.arrival[i]),  # waiting_since
            s2.D[i] == z3.And(z3.Or(m.D[i], skipped[i]), m.W[i], z3.Not(adm[i])),
        ]
        if b.general:
            front = -(t * R1 + pidx[i])  # each victim prepended in turn
            if mut == "preempt_to_tail":
                front = t * R1 + n_req + pidx[i]
            cs += [s2.wkey[i] == (z3.If(pre[i], front, m.wkey[i]) if not b.priority else m.wkey[i]),
                   s2.rkey[i] == z3.If(adm[i], t * R1 + scan_idx[i], m.rkey[i]),
                   s2.pf[i] == z3.If(n[i] > 0, z3.Not(sample), m.pf[i])]
    cs.append(s2.step == t)
    # A scan that could admit prefills records whether requests are left
    # waiting for capacity rather than skipped (vLLM's prefill_capacity_bound).
    if b.general:
        D2 = [z3.And(z3.Or(m.D[i], skipped[i]), m.W[i], z3.Not(adm[i])) for i in rng]
        left = _count([z3.And(m.W[i], z3.Not(adm[i])) for i in rng]) > _count(D2)
    else:
        left = _count(s2.W) > _count(s2.D)
    cs.append(s2.pcb == z3.If(z3.Or(idle, defer, any_pre), m.pcb, left))
    cs.append(s2.wave == z3.If(idle, m.wave, m.wave + 1))
    cs.append(s2.pa == z3.And(z3.Not(idle), b.async_scheduling))  # an idle step drains
    if policy == "fair":
        # FairGuard runs only in a step that scans (none after a preemption).
        frozen = z3.Or(idle, any_pre)
        V3 = g.victims_after([(i, adm[i]) for i in rng])  # late admissions drop their adapters
        for i in rng:
            cs.append(s2.Z[i] == z3.If(frozen, m.Z[i], z3.And(r_star[i], z3.Not(ok0))))
        for a in range(A):
            cs.append(s2.V[a] == z3.If(frozen, m.V[a], z3.And(V3[a], z3.Not(ok0))))
            cs.append(s2.DL[a] == z3.If(frozen, m.DL[a], z3.If(z3.And(V3[a], z3.Not(ok0)), g.deadline[a], 0)))
        cs.append(s2.ZT == z3.If(frozen, m.ZT, z3.If(z3.And(g.has_star, z3.Not(ok0)), g.chosen_at, 0)))
        cs.append(s2.CU == z3.If(frozen, m.CU, z3.If(z3.And(g.has_star, ok0), t + p.window, m.CU)))
    else:
        cs.append(s2.ZT == m.ZT)
        cs.append(s2.CU == m.CU)
        cs += [s2.Z[i] == m.Z[i] for i in rng]
        cs += [s2.V[a] == m.V[a] for a in range(A)] + [s2.DL[a] == m.DL[a] for a in range(A)]
    aux = StepAux(m, n, adm, R_sched, fin, policy, pre)
    return s2, aux, cs


# ---- properties (over one step) -----------------------------------------

def prop_batch_lora_cap(p: Params, aux: StepAux) -> z3.BoolRef:
    """Distinct adapters among the scheduled requests <= max_loras: the batch
    must fit the LoRA slots of the model runner."""
    rng = range(p.b.requests)
    U = [z3.Or([z3.And(aux.n[i] > 0, p.is_a[i][a]) for i in rng]) for a in range(p.b.adapters)]
    return count_le_M(p, U)


def prop_running_lora_cap(p: Params, aux: StepAux) -> z3.BoolRef:
    """Distinct adapters among all running requests (scheduled or not) <=
    max_loras once the step is scheduled."""
    rng = range(p.b.requests)
    U = [z3.Or([z3.And(aux.running_after[i], p.is_a[i][a]) for i in rng]) for a in range(p.b.adapters)]
    return count_le_M(p, U)


def prop_capacity(p: Params, aux: StepAux) -> z3.BoolRef:
    """Running <= max_num_seqs, scheduled tokens <= max_num_batched_tokens and,
    with a finite KV pool, the blocks held once the step is scheduled (each
    request running after it holds blocks for its computed + scheduled
    tokens, as `spec.observe.Observer` counts them) <= kv_blocks."""
    cs = [_count(aux.running_after) <= p.N, z3.Sum(aux.n) <= p.T]
    if p.b.kv_blocks is not None:
        m = aux.mid
        cs.append(z3.Sum([z3.If(aux.running_after[i], blocks_for(p.b, m.computed[i] + aux.n[i]), 0)
                          for i in range(p.b.requests)]) <= p.K)
    return z3.And(cs)


def state_partition(s: StateVars | Mid, i: int) -> z3.BoolRef:
    return z3.AtMost(s.W[i], s.R[i], s.F[i], s.X[i], 1)


def prop_conservation(p: Params, aux: StepAux, s2: StateVars) -> z3.BoolRef:
    """Every arrived request is in exactly one of waiting / running /
    finished / aborted after the step; only waiting requests are admitted,
    only running ones preempted, and only running (not preempted) or
    admitted ones scheduled."""
    m = aux.mid
    cs = []
    for i in range(p.b.requests):
        was = z3.Or(m.W[i], m.R[i], m.F[i], m.X[i])
        cs += [state_partition(s2, i), s2.arrived(i) == was, z3.Implies(aux.admitted[i], m.W[i])]
        if aux.preempted:
            cs += [z3.Implies(aux.preempted[i], m.R[i]),
                   z3.Implies(aux.n[i] > 0, z3.Or(z3.And(m.R[i], z3.Not(aux.preempted[i])), aux.admitted[i]))]
    return z3.And(cs)


def prop_fifo_within_adapter(p: Params, aux: StepAux) -> z3.BoolRef:
    """No request is first admitted while an earlier-arrived request of its
    adapter and priority is still waiting, never admitted."""
    m = aux.mid
    cs = []
    for i in range(p.b.requests):
        for j in range(i):
            cs.append(z3.Not(z3.And(
                aux.admitted[i], z3.Not(m.ever[i]), p.adapter[j] == p.adapter[i], p.prio[j] == p.prio[i],
                m.W[j], z3.Not(m.ever[j]), z3.Not(aux.admitted[j]))))
    return z3.And(cs)


def prop_no_hol_blocking(p: Params, aux: StepAux) -> z3.BoolRef:
    """A step leaves no waiting request unadmitted that the LoRA cap and
    capacity would have let in, modulo the holds vLLM and the policy declare:
    the scan replayed in queue order from the state before the step and what the
    step did, never from the encoded scan (docs/proofs.md, "Properties: defined
    from the step, not from the scan"). Chunking is on in this encoding."""
    b, m = p.b, aux.mid
    if b.general:
        return _no_hol_general(p, aux)
    rng, A = range(b.requests), b.adapters
    running_sched = [z3.And(m.R[i], aux.n[i] > 0) for i in rng]
    budget: z3.ArithRef = p.T - z3.Sum([z3.If(m.R[i], aux.n[i], 0) for i in rng])
    seats: z3.ArithRef = _count(m.R)
    loras = [z3.Or([z3.And(running_sched[i], p.is_a[i][a]) for i in rng]) for a in range(A)]
    active = [z3.Or([z3.And(m.R[i], p.is_a[i][a]) for i in rng]) for a in range(A)]  # fair's cap set
    first = [z3.BoolVal(False) for _ in rng]
    fair = aux.policy == "fair"
    g: FairStart | None = None
    on: z3.BoolRef = z3.BoolVal(False)
    if fair:
        g = fair_guard(p, m, active, budget, seats)
        first = g.r_star
        star_admitted = z3.Or([z3.And(first[i], aux.admitted[i]) for i in rng])
        on = z3.And(g.has_star, z3.Not(star_admitted))
    seen: list[tuple[int, z3.BoolRef]] = []  # (request, admitted) replayed so far, for the guard's holds
    bad: list[z3.BoolRef] = []
    stopped: z3.BoolRef = z3.BoolVal(False)

    def blocks(i: int, L: list[z3.BoolRef]) -> z3.BoolRef:
        return z3.And(p.adapter[i] > 0, z3.Not(_in(p, i, L)), count_ge_M(p, L))

    def visit(i: int, here: z3.BoolRef) -> None:
        nonlocal budget, seats, loras, active, stopped
        alive = z3.And(z3.Not(stopped), budget > 0, seats < p.N)
        guard_held = z3.And(on, g.held(i, seen)) if g is not None else z3.BoolVal(False)
        passed = z3.And(here, alive, m.W[i], z3.Not(aux.admitted[i]), z3.Not(blocks(i, loras)),
                        z3.Not(guard_held), z3.Not(blocks(i, active)) if fair else z3.BoolVal(True))
        throttle_stop = z3.And(m.throttle, p.prompt[i] + m.generated[i] - m.computed[i] > 1)
        bad.append(z3.And(passed, z3.Not(throttle_stop)))
        stopped = z3.Or(stopped, z3.And(passed, throttle_stop))
        adm = z3.And(here, aux.admitted[i])
        seen.append((i, adm))
        budget = budget - z3.If(adm, aux.n[i], 0)
        seats = seats + z3.If(adm, 1, 0)
        loras = [z3.Or(loras[a], z3.And(adm, p.is_a[i][a])) for a in range(A)]
        active = [z3.Or(active[a], z3.And(adm, p.is_a[i][a])) for a in range(A)]

    if fair:
        # r* first: at most one slot; visit it through a symbolic choice.
        for i in rng:
            visit(i, first[i])
    for i in rng:
        visit(i, z3.Not(first[i]))
    return z3.Not(z3.Or(bad))


def spec_queue_before(p: Params, m: Mid, j: int, i: int) -> z3.BoolRef:
    """j is ahead of i in `waiting`, as DESIGN defines the queue, from the state
    alone (not from the encoding's `wkey` bookkeeping): by (priority, arrival,
    id) under the priority queue; under FCFS as docs/proofs.md, "Properties",
    states it (preempted requests first, latest preemption first)."""
    b = p.b
    if b.priority:
        return priority_before(p, j, i)
    ej, ei = m.ever[j], m.ever[i]
    return z3.Or(z3.And(ej, z3.Not(ei)),
                 z3.And(ej, ei, z3.Or(m.arrival[j] > m.arrival[i],
                                      z3.And(m.arrival[j] == m.arrival[i], m.rkey[j] < m.rkey[i]))),
                 z3.And(z3.Not(ej), z3.Not(ei), z3.BoolVal(j < i)))


def _no_hol_general(p: Params, aux: StepAux) -> z3.BoolRef:
    """`prop_no_hol_blocking` in the general mode: a step that preempted is a
    declared hold, else the scan is replayed in `spec_queue_before`'s order with
    the KV blocks among what each request is judged against (docs/proofs.md)."""
    b, m = p.b, aux.mid
    rng, A = range(b.requests), b.adapters
    n = aux.n
    running_sched = [z3.And(m.R[i], n[i] > 0) for i in rng]
    budget0 = p.T - z3.Sum([z3.If(m.R[i], n[i], 0) for i in rng])
    seats0 = _count(m.R)
    loras0 = [z3.Or([z3.And(running_sched[i], p.is_a[i][a]) for i in rng]) for a in range(A)]
    active0 = [z3.Or([z3.And(m.R[i], p.is_a[i][a]) for i in rng]) for a in range(A)]
    used0 = z3.Sum([z3.If(m.R[i], blocks_for(b, m.computed[i] + n[i]), 0) for i in rng])
    fair = aux.policy == "fair"
    first = [z3.BoolVal(False) for _ in rng]
    g: FairStart | None = None
    on: z3.BoolRef = z3.BoolVal(False)
    if fair:
        g = fair_guard(p, m, active0, budget0, seats0, ahead=lambda j, i: spec_queue_before(p, m, j, i))
        first = g.r_star
        star_admitted = z3.Or([z3.And(first[i], aux.admitted[i]) for i in rng])
        on = z3.And(g.has_star, z3.Not(star_admitted))

    def before(j: int, i: int) -> z3.BoolRef:
        v = spec_queue_before(p, m, j, i)
        return z3.Or(first[j], z3.And(z3.Not(first[i]), v)) if fair else v

    def blocked(i: int, L: list[z3.BoolRef]) -> z3.BoolRef:
        return z3.And(p.adapter[i] > 0, z3.Not(_in(p, i, L)), count_ge_M(p, L))

    passed, dstop, reach = [], [], []
    for i in rng:
        ab = [(j, z3.And(before(j, i), aux.admitted[j])) for j in rng if j != i]
        budget = budget0 - z3.Sum([z3.If(c, n[j], 0) for j, c in ab])
        seats = seats0 + _count([c for _, c in ab])
        loras = [z3.Or(loras0[a], *[z3.And(c, p.is_a[j][a]) for j, c in ab]) for a in range(A)]
        active = [z3.Or(active0[a], *[z3.And(c, p.is_a[j][a]) for j, c in ab]) for a in range(A)]
        guard_held = z3.And(on, g.held(i, ab)) if g is not None else z3.BoolVal(False)
        ok = z3.And(m.W[i], z3.Not(aux.admitted[i]), z3.Not(blocked(i, loras)), z3.Not(guard_held),
                    z3.Not(blocked(i, active)) if fair else z3.BoolVal(True))
        stop = z3.And(m.throttle, p.prompt[i] + m.generated[i] - m.computed[i] > 1)
        if b.kv_blocks is not None:
            used = used0 + z3.Sum([z3.If(c, blocks_for(b, m.computed[j] + n[j]), 0) for j, c in ab])
            stop = z3.Or(stop, blocks_for(b, p.prompt[i] + m.generated[i]) > p.K - used)
        passed.append(z3.And(ok, z3.Not(stop)))
        dstop.append(z3.And(ok, stop))
        reach.append(z3.And(budget > 0, seats < p.N))
    bad = [z3.And(passed[i], reach[i], *[z3.Not(z3.And(before(j, i), dstop[j])) for j in rng if j != i])
           for i in rng]
    return z3.Or(z3.Or(aux.preempted), z3.Not(z3.Or(bad)))


def waiting_too_long(p: Params, aux: StepAux, s2: StateVars, bound: int) -> z3.BoolRef:
    """Some request is still not admitted at step arrival + bound: its wait
    (first admission - arrival) exceeds `bound`."""
    m = aux.mid
    return z3.Or([z3.And(s2.W[i], z3.Not(s2.ever[i]), m.step - m.arrival[i] >= bound)
                  for i in range(p.b.requests)])


SAFETY = ("batch_lora_cap", "running_lora_cap", "capacity", "conservation", "fifo_within_adapter")
STEP_PROPS = (*SAFETY, "no_hol_blocking")


def step_property(name: str, p: Params, aux: StepAux, s2: StateVars) -> z3.BoolRef:
    if name == "batch_lora_cap":
        return prop_batch_lora_cap(p, aux)
    if name == "running_lora_cap":
        return prop_running_lora_cap(p, aux)
    if name == "capacity":
        return prop_capacity(p, aux)
    if name == "conservation":
        return prop_conservation(p, aux, s2)
    if name == "fifo_within_adapter":
        return prop_fifo_within_adapter(p, aux)
    if name == "no_hol_blocking":
        return prop_no_hol_blocking(p, aux)
    raise ValueError(f"unknown step property {name!r}")


# ---- strengthening invariants (named state predicates) -------------------

def invariants(p: Params, s: StateVars, *, running_cap: bool, fair: bool = False) -> dict[str, z3.BoolRef]:
    """State predicates that make the safety properties inductive, one per name:
    partition, arrival_prefix, unarrived_blank, arrival_steps, fresh_waiting,
    running_counters, async_state, seats, running_loras (only when every running
    request is scheduled), fifo_state, star_first (fair), order_keys (general
    mode), kv_state (finite KV). Each in English: docs/proofs.md, "Checks and verdicts"."""
    b = p.b
    rng = range(b.requests)
    gen = b.general
    inv: dict[str, z3.BoolRef] = {}
    inv["partition"] = z3.And([state_partition(s, i) for i in rng])
    inv["arrival_prefix"] = z3.And([z3.Implies(s.arrived(i), s.arrived(j)) for i in rng for j in range(i)]
                                   + [s.step >= 0])
    inv["unarrived_blank"] = z3.And([z3.Implies(z3.Not(s.arrived(i)), z3.And(
        z3.Not(s.ever[i]), s.computed[i] == 0, s.generated[i] == 0)) for i in rng])
    fresh2 = [z3.Not(z3.Or(s.ever[i], s.ever[j])) if gen else z3.BoolVal(True) for i in rng for j in range(i)]
    inv["arrival_steps"] = z3.And([z3.Implies(s.arrived(i), z3.And(s.arrival[i] >= 1, s.arrival[i] <= s.step))
                                   for i in rng]
                                  + [z3.Implies(z3.And(s.arrived(i), c), s.arrival[j] <= s.arrival[i])
                                     for c, (i, j) in zip(fresh2, [(i, j) for i in rng for j in range(i)],
                                                          strict=True)])
    if gen:
        inv["fresh_waiting"] = z3.And([z3.Implies(s.W[i], z3.And(
            s.computed[i] == 0, s.generated[i] >= 0, s.generated[i] < p.max_tokens[i],
            z3.Implies(z3.Not(s.ever[i]), s.generated[i] == 0))) for i in rng])
    else:
        inv["fresh_waiting"] = z3.And([z3.Implies(s.W[i], z3.And(z3.Not(s.ever[i]), s.computed[i] == 0,
                                                                 s.generated[i] == 0)) for i in rng])
    ph = [z3.If(s.pend[i], 1, 0) for i in rng]

    def prefill(i: int) -> z3.BoolRef:
        if gen:
            return z3.And(s.pf[i], s.computed[i] >= 1, s.computed[i] < p.prompt[i] + s.generated[i],
                          s.generated[i] >= 0, z3.Not(s.pend[i]))
        return z3.And(s.computed[i] >= 1, s.computed[i] < p.prompt[i], s.generated[i] == 0, z3.Not(s.pend[i]))

    def decode(i: int) -> z3.BoolRef:
        d = z3.And(s.generated[i] + ph[i] >= 1, s.computed[i] == p.prompt[i] + s.generated[i] + ph[i] - 1)
        return z3.And(z3.Not(s.pf[i]), s.generated[i] >= 0, d) if gen else d

    inv["running_counters"] = z3.And([z3.Implies(s.R[i], z3.And(
        s.ever[i], s.admitted_at[i] <= s.step, s.admitted_at[i] >= 1,
        s.generated[i] < p.max_tokens[i], s.generated[i] + ph[i] <= p.max_tokens[i],
        z3.Or(prefill(i), decode(i)))) for i in rng])
    inv["async_state"] = z3.And([z3.Implies(s.pend[i], z3.And(s.R[i], b.async_scheduling)) for i in rng]
                                + [z3.Implies(s.D[i], s.W[i]) for i in rng] + [s.wave >= 0]
                                + ([] if b.async_scheduling else [z3.Not(s.pa)]))
    inv["seats"] = _count(s.R) <= p.N
    if running_cap:
        U = [z3.Or([z3.And(s.R[i], p.is_a[i][a]) for i in rng]) for a in range(b.adapters)]
        inv["running_loras"] = count_le_M(p, U)

    def fresh_w(j: int) -> z3.BoolRef:
        return z3.And(s.W[j], z3.Not(s.ever[j])) if gen else s.W[j]

    inv["fifo_state"] = z3.And([z3.Not(z3.And(s.ever[i], p.adapter[j] == p.adapter[i], p.prio[j] == p.prio[i],
                                              fresh_w(j)))
                                for i in rng for j in range(i)])
    if fair:
        star_w = [z3.And(s.Z[i], s.W[i], z3.Not(s.ever[i])) if gen else z3.And(s.Z[i], s.W[i]) for i in rng]
        inv["star_first"] = z3.And([_atmost(list(s.Z), 1)] + [z3.Implies(s.Z[i], s.arrived(i)) for i in rng]
                                   + [z3.Not(z3.And(star_w[i], fresh_w(j), p.adapter[j] == p.adapter[i],
                                                    p.prio[j] == p.prio[i]))
                                      for i in rng for j in range(i)])
    if gen:
        R1 = b.requests + 1
        hi = (s.step + 1) * R1
        keys = [z3.Implies(s.R[i], s.rkey[i] < hi) for i in rng]
        keys += [z3.Implies(z3.And(s.R[i], s.R[j]), s.rkey[i] != s.rkey[j]) for i in rng for j in range(i)]
        if not b.priority:
            keys += [z3.Implies(s.W[i], z3.And(s.wkey[i] < hi, s.wkey[i] > -hi)) for i in rng]
            keys += [z3.Implies(z3.And(s.W[i], s.W[j]), s.wkey[i] != s.wkey[j]) for i in rng for j in range(i)]
            keys += [z3.Implies(z3.And(fresh_w(i), fresh_w(j)), s.wkey[j] < s.wkey[i])
                     for i in rng for j in range(i)]
        inv["order_keys"] = z3.And(keys)
    if b.kv_blocks is not None:
        inv["kv_state"] = z3.Sum([z3.If(s.R[i], blocks_for(b, s.computed[i]), 0) for i in rng]) <= p.K
    return inv
