"""A step-time cost model: seconds per scheduler step from what the step holds.

    t(step) = t0 + k_tok * tokens + k_seq * seqs + k_lora * adapters

`DEFAULT` is the least-squares fit to the seed's "This PR" row (vLLM PR
#15422, Llama-2-7b); `k_lora` is assumed. The terms, the fit, what pins each
parameter and the out-of-sample check: docs/bench.md and experiments/README.md
(`calibrate`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lora_sched.spec.config import Config


@dataclass(frozen=True)
class StepFeatures:
    """What the cost of one step depends on."""

    tokens: int
    seqs: int
    adapters: int


@dataclass(frozen=True)
class CostModel:
    """Seconds per step; see the module docstring for the meaning and the fit."""

    t0: float
    k_tok: float
    k_seq: float
    k_lora: float

    def step_time(self, f: StepFeatures) -> float:
        return self.t0 + self.k_tok * f.tokens + self.k_seq * f.seqs + self.k_lora * f.adapters

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def max_step_seconds(self, config: Config) -> float:
        """The longest a step can take under `config`: a full token budget, every
        seat scheduled, `max_loras` adapters (turns a bound in steps into seconds)."""
        return self.step_time(StepFeatures(config.max_num_batched_tokens, config.max_num_seqs, config.max_loras))

    def describe(self) -> str:
        return (f"t = {self.t0 * 1e3:.3f} ms + {self.k_tok * 1e6:.3f} us/token"
                f" + {self.k_seq * 1e6:.3f} us/seq + {self.k_lora * 1e3:.3f} ms/adapter")


# The assumption that stands in for what the seed's row cannot identify.
K_LORA = 0.5e-3

# The seed's three result blocks (vLLM PR #15422), in benchmark_serving's units.
SEED_ROWS: dict[str, dict[str, float]] = {
    "main V1 (blocking)": {
        "completed": 500, "duration_s": 200.71, "total_input_tokens": 124520,
        "total_output_tokens": 60000, "request_throughput": 2.49, "output_throughput": 298.94,
        "total_token_throughput": 919.35, "mean_ttft_ms": 99070.16, "median_ttft_ms": 101450.02,
        "p99_ttft_ms": 195994.95, "mean_tpot_ms": 15.13, "median_tpot_ms": 15.24, "p99_tpot_ms": 16.17,
        "mean_itl_ms": 15.31, "median_itl_ms": 15.22, "p99_itl_ms": 16.88,
    },
    "main V0": {
        "completed": 500, "duration_s": 29.19, "total_input_tokens": 124520,
        "total_output_tokens": 60000, "request_throughput": 17.13, "output_throughput": 2055.28,
        "total_token_throughput": 6320.66, "mean_ttft_ms": 10400.52, "median_ttft_ms": 6083.83,
        "p99_ttft_ms": 26071.17, "mean_tpot_ms": 79.85, "median_tpot_ms": 80.54, "p99_tpot_ms": 106.48,
        "mean_itl_ms": 79.85, "median_itl_ms": 61.96, "p99_itl_ms": 389.40,
    },
    "PR #15422 (vllm)": {
        "completed": 500, "duration_s": 29.84, "total_input_tokens": 124520,
        "total_output_tokens": 60000, "request_throughput": 16.75, "output_throughput": 2010.46,
        "total_token_throughput": 6182.82, "mean_ttft_ms": 11862.28, "median_ttft_ms": 6406.40,
        "p99_ttft_ms": 24552.50, "mean_tpot_ms": 73.55, "median_tpot_ms": 77.75, "p99_tpot_ms": 102.69,
        "mean_itl_ms": 73.55, "median_itl_ms": 50.22, "p99_itl_ms": 346.09,
    },
}
SEED_PR = SEED_ROWS["PR #15422 (vllm)"]
SEED_BLOCKING = SEED_ROWS["main V1 (blocking)"]
SEED_RATIO = SEED_PR["request_throughput"] / SEED_BLOCKING["request_throughput"]  # 6.7x

# The fit on the seed workload (seed 2), rounded (`python -m experiments.calibrate`).
DEFAULT = CostModel(t0=24.73e-3, k_tok=102.33e-6, k_seq=9.16e-6, k_lora=K_LORA)
