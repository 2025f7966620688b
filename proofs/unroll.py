"""Unrolling the step relation of `proofs.encoding` into a path of K steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import z3
from lora_sched.proofs import encoding as enc


@dataclass
class StepVars:
    inputs: enc.Inputs
    aux: enc.StepAux
    post: enc.StateVars


@dataclass
class Path:
    """s_0 --step 1--> s_1 ... --step k--> s_k, constraints kept per step."""

    bounds: enc.Bounds
    policy: str
    tag: str = "p"
    params: enc.Params = field(init=False)
    states: list[enc.StateVars] = field(init=False)
    steps: list[StepVars] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params = enc.make_params(self.bounds)
        self.states = [enc.make_state(self.bounds, f"{self.tag}0")]

    def base(self) -> list[z3.BoolRef]:
        return self.params.constraints()

    def init(self) -> list[z3.BoolRef]:
        return enc.init(self.bounds, self.states[0])

    def extend(self) -> list[z3.BoolRef]:
        """Add one step; return its constraints."""
        k = len(self.steps) + 1
        tag = f"{self.tag}{k}"
        inp = enc.make_inputs(self.bounds, tag)
        mid, cs = enc.events(self.bounds, self.states[-1], inp)
        post, aux, cs2 = enc.schedule(self.params, self.policy, mid, inp.skip, tag)
        self.steps.append(StepVars(inp, aux, post))
        self.states.append(post)
        return cs + cs2

    def prop(self, name: str, k: int, bound: int | None = None) -> z3.BoolRef:
        """Property `name` on step k (1-based); bounded_wait needs `bound`."""
        sv = self.steps[k - 1]
        if name == "bounded_wait":
            assert bound is not None
            return z3.Not(enc.waiting_too_long(self.params, sv.aux, sv.post, bound))
        return enc.step_property(name, self.params, sv.aux, sv.post)

    def invariants(self, k: int) -> dict[str, z3.BoolRef]:
        b = self.bounds
        # fair's cap counts every running adapter, so running_loras holds for it
        # everywhere; vllm's and blocking's only when every running request is
        # scheduled (no skip, no async sure-to-finish skip, no DP throttle).
        unscheduled = b.skip or b.async_scheduling or b.prefill_interval > 1
        return enc.invariants(self.params, self.states[k], running_cap=self.policy == "fair" or not unscheduled,
                              fair=self.policy == "fair")
