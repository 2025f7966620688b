"""Counterexamples: extraction from a Z3 model, table, ITF JSON, replay, pytest.

A counterexample is turned into a `policy.driver.Workload` (requests with
arrival steps, aborts, skipped running requests) and replayed through the
Python reference; `spec.observe.Observer` (via `policy.check.check_trace`) must
report the same violation. That is the "one source of truth" rule.
"""

from __future__ import annotations

import json
import os
import pprint
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

import z3
from lora_sched.policy import make_gate
from lora_sched.policy.bound import fair_bound
from lora_sched.policy.check import check_trace
from lora_sched.policy.core import Scheduler
from lora_sched.policy.driver import Workload, run
from lora_sched.proofs.unroll import Path
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

STATE_VARS = ("waiting", "running", "finished", "aborted", "computed", "generated", "scheduled", "admitted",
              "preempted")


@dataclass
class Cex:
    """A concrete trace of the encoding."""

    policy: str
    property: str
    config: dict[str, int | bool | str]
    requests: list[dict[str, int]]  # id, adapter, prompt_tokens, max_tokens, arrival (, priority)
    aborts: dict[str, int]
    skips: dict[int, list[str]]
    states: list[dict[str, Any]]  # per step (index 0 = empty initial state)
    bound: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- conversion to the reference -----------------------------------
    def config_obj(self) -> Config:
        return Config(policy=self.policy, **self.config)

    def workload(self, *, truncate: bool = False) -> Any:
        """The workload; with `truncate`, every request is aborted right after
        the last step of the trace, so that the reference stops there (what
        happens later is not part of the counterexample)."""
        reqs = [Request(r["id"], r["adapter"], r["prompt_tokens"], r["max_tokens"], r["arrival"],
                        r.get("priority", 0)) for r in self.requests]
        aborts = dict(self.aborts)
        if truncate and self.states:
            end = self.states[-1]["step"] + 1
            for r in reqs:
                aborts.setdefault(r.id, end)
        return Workload(reqs, aborts, {k: frozenset(v) for k, v in self.skips.items()})

    # ---- rendering -------------------------------------------------------
    def table(self) -> str:
        """One row per step, only what changed."""
        lines = [f"{self.policy}: {self.property} counterexample ({self.note})",
                 "  config: " + " ".join(f"{k}={v}" for k, v in self.config.items()),
                 "  requests: " + ", ".join(
                     f"{r['id']}(adapter={r['adapter']} prompt={r['prompt_tokens']} "
                     f"max_tokens={r['max_tokens']} arrival={r['arrival']}"
                     + (f" priority={r['priority']}" if r.get("priority") else "") + ")" for r in self.requests)]
        if self.aborts:
            lines.append("  aborts: " + ", ".join(f"{k}@{v}" for k, v in self.aborts.items()))
        prev: dict[str, Any] = self.states[0]
        for st in self.states[1:]:
            changes = []
            for k in STATE_VARS:
                if st.get(k) != prev.get(k) or k in ("scheduled", "admitted") and st.get(k):
                    changes.append(f"{k}={_fmt(st.get(k))}")
            if st.get("skipped"):
                changes.append(f"skipped={_fmt(st['skipped'])}")
            if st.get("throttle"):
                changes.append("THROTTLED")
            lines.append(f"  step {st['step']:>3}: " + ("; ".join(changes) or "(no change)"))
            prev = st
        return "\n".join(lines)

    def to_itf(self) -> dict[str, Any]:
        """Apalache / Quint ITF trace (https://apalache-mc.org/docs/adr/015adr-trace.html)."""
        vars_ = ["step", *STATE_VARS, "skipped", "throttle"]

        def conv(v: Any) -> Any:
            if isinstance(v, bool):
                return v
            if isinstance(v, int):
                return v if abs(v) < 2**53 else {"#bigint": str(v)}
            if isinstance(v, dict):
                return {"#map": [[conv(a), conv(b)] for a, b in v.items()]}
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        states = []
        for i, st in enumerate(self.states):
            row: dict[str, Any] = {"#meta": {"index": i}}
            for k in vars_:
                row[k] = conv(st.get(k, False if k == "throttle" else []))
            states.append(row)
        return {
            "#meta": {"format": "ITF", "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
                      "source": "lora-sched prove", "policy": self.policy, "property": self.property,
                      "config": self.config, "requests": self.requests, "aborts": self.aborts,
                      "skips": {str(k): v for k, v in self.skips.items()}, "bound": self.bound,
                      "note": self.note, **({"lasso": self.extra} if self.extra else {})},
            "vars": vars_,
            "states": states,
        }

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "property": self.property, "config": self.config,
                "requests": self.requests, "aborts": self.aborts,
                "skips": {str(k): v for k, v in self.skips.items()}, "bound": self.bound,
                "depth": self.states[-1]["step"] if self.states else None,
                **({"throttled": self.throttled()} if self.throttled() else {}),
                **({"extra": self.extra} if self.extra else {})}

    def throttled(self) -> list[int]:
        """Steps the DP engine core throttled in the counterexample."""
        return [st["step"] for st in self.states if st.get("throttle")]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cex:
        return cls(d["policy"], d["property"], d["config"], d["requests"], d["aborts"],
                   {int(k): v for k, v in d["skips"].items()},
                   [{"step": d["depth"]}] if d.get("depth") is not None else [], d.get("bound"),
                   extra=d.get("extra", {}))


def _fmt(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}:{x}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


def _iv(m: z3.ModelRef, e: z3.ExprRef) -> int:
    return m.eval(e, model_completion=True).as_long()


def _bv(m: z3.ModelRef, e: z3.ExprRef) -> bool:
    return z3.is_true(m.eval(e, model_completion=True))


def extract(path: Path, m: z3.ModelRef, depth: int, prop: str, note: str = "",
            bound: int | None = None) -> Cex:
    """Read the first `depth` steps of `path` from model `m`."""
    p, b = path.params, path.bounds
    rid = [f"r{i}" for i in range(b.requests)]
    cfg: dict[str, int | bool] = {"max_loras": _iv(m, p.M), "max_num_seqs": _iv(m, p.N),
                                  "max_num_batched_tokens": _iv(m, p.T), "starvation_steps": _iv(m, p.S)}
    if b.async_scheduling:
        cfg["async_scheduling"] = True
    if b.prefill_interval > 1:
        cfg["prefill_schedule_interval"] = b.prefill_interval
    if b.kv_blocks is not None:
        cfg["kv_blocks"] = _iv(m, p.K)
        cfg["block_size"] = b.block_size
    if b.priority:
        cfg["queue"] = "priority"
    arrival: dict[int, int] = {}
    aborts: dict[str, int] = {}
    skips: dict[int, list[str]] = {}
    states: list[dict[str, Any]] = [{"step": 0, **{k: [] for k in ("waiting", "running", "finished", "aborted")},
                                      "computed": {}, "generated": {}, "scheduled": {}, "admitted": []}]
    for k in range(1, depth + 1):
        sv = path.steps[k - 1]
        post, aux = sv.post, sv.aux
        for i in range(b.requests):
            if _bv(m, sv.inputs.arrive[i]):
                arrival[i] = k
            if _bv(m, sv.inputs.abort[i]):
                aborts[rid[i]] = k
        sk = [rid[i] for i in range(b.requests) if _bv(m, sv.inputs.skip[i]) and _bv(m, aux.mid.R[i])]
        if sk:
            skips[k] = sk
        live = [i for i in range(b.requests) if i in arrival]
        states.append({
            "step": k,
            "waiting": [rid[i] for i in live if _bv(m, post.W[i])],
            "running": [rid[i] for i in live if _bv(m, post.R[i])],
            "finished": [rid[i] for i in live if _bv(m, post.F[i])],
            "aborted": [rid[i] for i in live if _bv(m, post.X[i])],
            "computed": {rid[i]: _iv(m, post.computed[i]) for i in live},
            "generated": {rid[i]: _iv(m, post.generated[i]) for i in live},
            "scheduled": {rid[i]: _iv(m, aux.n[i]) for i in live if _iv(m, aux.n[i]) > 0},
            "admitted": [rid[i] for i in live if _bv(m, aux.admitted[i])],
            "preempted": [rid[i] for i in live if aux.preempted and _bv(m, aux.preempted[i])],
            "skipped": sk,
            **({"throttle": True} if _bv(m, aux.mid.throttle) else {}),
        })
    requests = [{"id": rid[i], "adapter": _iv(m, p.adapter[i]), "prompt_tokens": _iv(m, p.prompt[i]),
                 "max_tokens": _iv(m, p.max_tokens[i]), "arrival": arrival[i],
                 **({"priority": _iv(m, p.prio[i])} if b.priority else {})} for i in sorted(arrival)]
    return Cex(path.policy, prop, cfg, requests, aborts, skips, states, bound, note)


@dataclass
class ReplayOutcome:
    reproduced: bool
    detail: str
    waits: dict[str, int] = field(default_factory=dict)


def replay(cex: Cex) -> ReplayOutcome:
    """Run the counterexample's workload through `policy.driver.run` and judge
    it with `policy.check.check_trace` (the Observer) or the waits."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "cex.jsonl")
        res = run(cex.config_obj(), cex.workload(truncate=cex.property != "bounded_wait"), trace_path=trace)
        report = check_trace(trace) if cex.property != "bounded_wait" else None
    waits = res.waits()
    if report is None:
        assert cex.bound is not None
        worst = max(waits.values(), default=0)
        return ReplayOutcome(worst > cex.bound, f"worst wait {worst} vs bound {cex.bound}", waits)
    assert report is not None
    v = report.first.get(cex.property)
    return ReplayOutcome(v is not None, str(v) if v else "no violation in the reference", waits)


def write_itf(cex: Cex, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(cex.to_itf(), f, indent=1)


def emit_test(cex: Cex, path: str) -> None:
    """Write a pytest case that replays `cex` through the reference."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    name = f"{cex.policy}_{cex.property}".replace("-", "_")
    body = pprint.pformat(cex.to_json(), width=100)
    throttled = cex.throttled()
    with open(path, "w") as f:
        f.write(f'"""Replay of a `lora-sched prove` counterexample: {cex.policy} violates {cex.property}."""\n\n'
                + ("from lora_sched.policy.driver import run\n" if throttled else "")
                + "from lora_sched.proofs.cex import Cex, replay\n\n"
                f"CEX = {body}\n\n\n"
                f"def test_{name}_replays() -> None:\n"
                "    out = replay(Cex.from_json(CEX))\n"
                "    assert out.reproduced, out.detail\n")
        if throttled:  # the reference's DP engine cadence throttles the same steps as the solver's trace
            f.write(f"\n\ndef test_{name}_throttles_the_same_steps() -> None:\n"
                    "    cex = Cex.from_json(CEX)\n"
                    "    res = run(cex.config_obj(), cex.workload(truncate=True))\n"
                    "    assert [r.step for r in res.records if r.throttle] == CEX['throttled']\n")


@dataclass
class LassoOutcome:
    reproduced: bool  # the reference repeats the loop and the victim is never admitted
    detail: str
    victim_wait: int  # steps the victim waited when the replay stopped (still waiting)
    queue: int  # Q: the most requests present (waiting or running) at any step
    bound: int  # fair's B for the configuration and Q (`policy.bound.fair_bound`)
    fair_worst: int | None = None  # `fair`'s worst wait on the same workload


def lasso_workload(cex: Cex, periods: int) -> list[Request]:
    """The lasso's requests plus `periods` copies of the arrivals of its loop
    (steps k1+1..k2), each shifted by a multiple of k2 - k1."""
    k1, k2 = cex.extra["loop"]
    reqs = [Request(r["id"], r["adapter"], r["prompt_tokens"], r["max_tokens"], r["arrival"]) for r in cex.requests]
    loop = [r for r in reqs if k1 < r.arrival <= k2]
    for n in range(1, periods + 1):
        reqs += [Request(f"{r.id}~{n}", r.adapter, r.prompt_tokens, r.max_tokens, r.arrival + n * (k2 - k1))
                 for r in loop]
    return reqs


def replay_lasso(cex: Cex, periods: int) -> LassoOutcome:
    """Run the lasso's workload with `periods` repetitions of the loop through
    `policy.core.Scheduler` (as `policy.driver.run` does: idle steps skipped),
    check that the state after every k1 + n(k2 - k1) steps has the same shape
    (waiting and running in order: adapter, lengths, progress, victim or not)
    and that the victim is still waiting; compare its wait with fair's B for
    the configuration and the observed Q, and run `fair` on the same workload."""
    k1, k2 = cex.extra["loop"]
    victim = cex.extra["victim"]
    reqs = lasso_workload(cex, periods)
    end = k2 + periods * (k2 - k1)
    cfg = cex.config_obj()
    sched = Scheduler(cfg, make_gate(cfg.policy))
    by_step: dict[int, list[Request]] = {}
    for r in reqs:
        by_step.setdefault(r.arrival, []).append(r)
    shapes: dict[int, Any] = {}
    queue = 0
    for step in range(1, end + 1):
        for r in by_step.get(step, []):
            sched.add(r)
        st = sched.state
        queue = max(queue, len(st.waiting) + len(st.running))
        if st.waiting or st.running:
            sched.step(step)

        shapes[step] = tuple(tuple((st.adapter(r), st.reqs[r].req.prompt_tokens, st.reqs[r].req.max_tokens,
                                    st.reqs[r].computed, st.reqs[r].generated, r == victim) for r in ids)
                             for ids in (st.waiting, st.running))
    vs = sched.state.reqs[victim]
    waits_at = [shapes[k1 + n * (k2 - k1)] == shapes[k1] for n in range(periods + 1)]
    arrival = next(r["arrival"] for r in cex.requests if r["id"] == victim)
    wait = end - arrival
    P = max(r.prompt_tokens for r in reqs)
    L = max(r.max_tokens for r in reqs)
    B = fair_bound(replace(cfg, policy="fair"), queue=queue, max_prompt=P, max_output=L)
    ok = all(waits_at) and vs.status == "waiting" and vs.first_admitted is None
    fair_res = run(replace(cfg, policy="fair"), Workload(reqs))
    fair_worst = max(fair_res.waits().values(), default=0)
    detail = (f"loop {k1}->{k2} repeated {periods} times: same shape every {k2 - k1} steps: {all(waits_at)}; "
              f"{victim} still waiting after {wait} steps (Q={queue}, fair's B={B}); "
              f"fair on the same workload: worst wait {fair_worst}")
    return LassoOutcome(ok, detail, wait, queue, B, fair_worst)
