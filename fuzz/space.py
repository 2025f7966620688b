"""The fuzz workload space: a case is a config plus a workload, a pure function of its seed.

`generate(seed)` draws from the whole space the model covers (docs/fuzz.md,
"What runs"); aborts tied to admission are placed with the reference's own
deterministic run, so the case stays a pure function of the seed.
`valid(case)` states what vLLM accepts: every request fits `max_model_len`
and the KV pool, and without chunked prefill the budget.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from lora_sched.conformance.inprocess import MAX_MODEL_LEN
from lora_sched.policy.driver import Workload, run
from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request, RequestError
from lora_sched.spec.state import blocks_for

POLICY_WEIGHTS = {"vllm": 2, "fair": 1, "blocking": 1}


@dataclass(frozen=True)
class FuzzCase:
    """One workload of the campaign: run `config.policy` inside vLLM, replay
    through `reference` (the same policy unless a campaign plants a wrong one)."""

    seed: int
    config: Config
    workload: Workload
    reference: str
    # A user's scheduler class (`conformance.target`), run instead of the
    # policy's class and judged without a replay; `expect`: the properties
    # beyond the safety ones whose violation is a finding.
    scheduler_cls: str | None = None
    expect: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = {"seed": self.seed, "config": self.config.to_dict(), "reference": self.reference,
             "requests": [asdict(r) for r in self.workload.requests],
             "aborts": dict(self.workload.aborts)}
        if self.scheduler_cls is not None:
            d |= {"scheduler_cls": self.scheduler_cls, "expect": list(self.expect)}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FuzzCase:
        return cls(int(d["seed"]), Config.from_dict(d["config"]),
                   Workload([Request(**r) for r in d["requests"]], {k: int(v) for k, v in d["aborts"].items()}),
                   str(d["reference"]), d.get("scheduler_cls"), tuple(d.get("expect", ())))

    def with_workload(self, requests: list[Request], aborts: dict[str, int] | None = None) -> FuzzCase:
        keep = {r.id for r in requests}
        src = self.workload.aborts if aborts is None else aborts
        return replace(self, workload=Workload(list(requests), {k: v for k, v in src.items() if k in keep}))

    def size(self) -> tuple[int, int, int]:
        """What the shrinker minimises: requests, aborts, total tokens."""
        reqs = self.workload.requests
        return len(reqs), len(self.workload.aborts), sum(r.prompt_tokens + r.max_tokens for r in reqs)


def max_len(cfg: Config) -> int:
    """vLLM's max_model_len for `cfg` in the in-process harness (the budget without chunked prefill)."""
    return MAX_MODEL_LEN if cfg.chunked_prefill else min(MAX_MODEL_LEN, cfg.max_num_batched_tokens)


def valid(case: FuzzCase) -> bool:
    """vLLM accepts every request of the case (see the module docstring)."""
    cfg = case.config
    limit = max_len(cfg)
    if cfg.long_prefill_token_threshold > limit:
        return False
    for r in case.workload.requests:
        seq = r.prompt_tokens + r.max_tokens
        if seq > limit or (cfg.kv_blocks is not None and blocks_for(seq, cfg.block_size) >= cfg.kv_blocks):
            return False
    return True


def _arrivals(rng: random.Random, n: int) -> list[int]:
    shape = rng.choice(["burst", "stream", "bursts", "mixed"])
    if shape == "burst":
        return [1 + rng.randint(0, 2) for _ in range(n)]
    if shape == "stream":
        gap = rng.choice([1, 2, 3, 5])
        return [1 + i * gap + rng.randint(0, 1) for i in range(n)]
    if shape == "bursts":
        every = rng.choice([4, 8, 16, 32])
        return [1 + (i // rng.choice([2, 4, 8])) * every for i in range(n)]
    return [rng.randint(1, 3 * n + 1) for _ in range(n)]


def _config(rng: random.Random) -> tuple[Config, int]:
    policy = rng.choices(list(POLICY_WEIGHTS), weights=list(POLICY_WEIGHTS.values()))[0]
    budget = rng.choice([4, 8, 16, 32, 64, 128, 512, 2048])
    chunked = rng.random() < 0.75
    limit = MAX_MODEL_LEN if chunked else budget
    extra: dict[str, Any] = {"prefill_schedule_interval": rng.choice([1, 1, 1, 2, 3, 4])}  # the DP throttle
    cfg = Config(
        max_loras=rng.randint(1, 8),
        max_num_seqs=min(budget, rng.choice([1, 2, 3, 4, 8, 16, 64, 256])),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        long_prefill_token_threshold=min(limit, rng.choice([0, 0, 0, 1, 4, 16, 64])),
        kv_blocks=None,
        block_size=rng.choice([4, 8, 16, 32]),
        queue=rng.choice(["fcfs", "fcfs", "priority"]),
        async_scheduling=rng.random() < 0.4,
        policy=policy,
        starvation_steps=rng.choice([0, 1, 2, 4, 8, 16]),
        **extra,
    )
    return cfg, rng.randint(1, 16)


def _requests(rng: random.Random, cfg: Config, n_adapters: int) -> list[Request]:
    limit = max_len(cfg)
    n = rng.choice([rng.randint(1, 6), rng.randint(4, 16), rng.randint(10, 40)])
    base_share = rng.choice([0.0, 0.1, 0.3, 0.6])
    # A few hot adapters and a long tail, as benchmark_serving's draws produce.
    weights = [1.0 / (i + 1) ** rng.choice([0.0, 1.0, 2.0]) for i in range(n_adapters)]
    max_prompt = rng.choice([1, 4, 16, 64, 300])
    max_out = rng.choice([1, 4, 16, 48])
    single = rng.choice([0.0, 0.2, 0.5])  # share of single-token prompts (DP throttle admits those)
    out = []
    for i, arrival in enumerate(_arrivals(rng, n)):
        adapter = 0 if rng.random() < base_share else rng.choices(range(1, n_adapters + 1), weights=weights)[0]
        prompt = 1 if rng.random() < single else rng.randint(1, max(1, min(max_prompt, limit - 1)))
        tokens = rng.randint(1, max(1, min(max_out, limit - prompt)))
        prio = rng.choice([0, 0, 1, 2]) if cfg.queue == "priority" else 0
        out.append(Request(f"r{i}", adapter, prompt, tokens, arrival, prio))
    return out


def _admissions(cfg: Config, requests: list[Request]) -> dict[str, int | None]:
    """First admission step of each request in the reference's run (no aborts)."""
    try:
        return run(cfg, Workload(requests), max_steps=20_000).first_admitted()
    except (ValueError, RuntimeError):
        return {}


def _aborts(rng: random.Random, cfg: Config, requests: list[Request]) -> dict[str, int]:
    share = rng.choice([0.0, 0.0, 0.1, 0.3])
    chosen = [r for r in requests if rng.random() < share]
    if not chosen:
        return {}
    modes = {r.id: rng.choice(["arrival", "admission", "in-flight", "later"]) for r in chosen}
    admitted = _admissions(cfg, requests) if any(m != "arrival" for m in modes.values()) else {}
    aborts = {}
    for r in chosen:
        first = admitted.get(r.id)
        mode = modes[r.id] if first is not None else "arrival"
        # An abort at step s lands before that step's schedule(): at the
        # admission step it races the admission, one later it lands while the
        # admission step's output is still in flight under async scheduling.
        aborts[r.id] = {"arrival": r.arrival + rng.randint(0, 3),
                        "admission": first, "in-flight": (first or 0) + 1,
                        "later": (first or 0) + rng.randint(2, 12)}[mode]
    return aborts


def generate(seed: int, *, reference: str | None = None) -> FuzzCase:
    """The case of `seed` (the same on every machine and run)."""
    rng = random.Random(f"lora-sched-fuzz/{seed}")
    cfg, n_adapters = _config(rng)
    requests = _requests(rng, cfg, n_adapters)
    longest = max(r.prompt_tokens + r.max_tokens for r in requests)
    need = blocks_for(longest, cfg.block_size)
    if rng.random() < 0.55:  # a finite pool, from roomy to preempting
        cfg = replace(cfg, kv_blocks=rng.randint(need + 1, need * rng.choice([1, 2, 3, 8]) + 2))
    aborts = _aborts(rng, cfg, requests)
    return FuzzCase(seed, cfg, Workload(requests, aborts), reference or cfg.policy)


def try_case(case: FuzzCase, **changes: Any) -> FuzzCase | None:
    """`case` with config fields changed, or None if that config or case is invalid."""
    try:
        new = replace(case, config=replace(case.config, **changes))
    except (ConfigError, RequestError, TypeError):
        return None
    return new if valid(new) else None
