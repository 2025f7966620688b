"""Scheduler configuration (DESIGN section 2, "Config").

Every field mirrors a vLLM engine argument; defaults are vLLM's own so
that a trace whose header omits a key means what vLLM would have done.
`vllm` names the release whose scheduling semantics the reference follows
(`spec.releases`); a trace reader sets it from the header's `source`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from lora_sched.spec import releases

QUEUES = ("fcfs", "priority")
POLICIES = ("blocking", "vllm", "fair")
# The field's policies: reference gates for the frontier (`experiments.frontier`),
# checked by the same properties, not in POLICIES (which the harnesses iterate).
REFERENCE_POLICIES = ("drainer", "timeslice", "vtc")
# Policies that also run inside vLLM as scheduler classes (`lora_sched.scheduler`,
# the `vllm` one being conformance's recording class): what `conform` and
# `bench --live` accept. The field's gates are there to be measured, not deployed.
IN_VLLM = (*POLICIES, "drainer", "timeslice", "vtc")


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending field."""


@dataclass(frozen=True)
class Config:
    max_loras: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    kv_blocks: int | None = None  # usable KV blocks; None = unlimited
    block_size: int = 16
    queue: str = "fcfs"
    async_scheduling: bool = False
    policy: str = "vllm"
    # `fair`: how long a waiting request waits before it is put first as r*, the gap
    # after a guard and a victim's slack (policy/fair.py, DESIGN section 3); `drainer`'s
    # wait threshold and `timeslice`'s cycle length (steps); `vtc` ignores it.
    starvation_steps: int = 16
    # vLLM's `--prefill-schedule-interval` (data-parallel prefill balancing):
    # the DP engine core calls `schedule(throttle_prefills=True)` on every step
    # whose counter is not a multiple of it; 1 = never throttle.
    prefill_schedule_interval: int = 1
    # The vLLM release whose scheduler the reference follows (`spec.releases`).
    # The default is the release the Z3 encoding (`proofs/`) and every trace
    # written before the registry model; `simulate --vllm` defaults to the newest.
    vllm: str = releases.LEGACY

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, where: str = "config") -> Config:
        """Build from a trace header: unknown keys ignored, missing keys default."""
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected an object, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in raw.items() if k in known})
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def _int(cfg: Config, name: str, lo: int) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise ConfigError(f"{name} must be >= {lo}, got {value}")


def throttled(cfg: Config, counter: int) -> bool:
    """Does the engine core throttle prefills on a step? vLLM 0.32's
    `DPEngineCoreProc._should_throttle_prefills` (0.33's scheduler keeps its own
    cadence: `spec.releases`): `interval > 1 and step_counter % interval != 0`,
    `counter` being the steps since the current wave started (0, never
    throttled, for the first step after the engine was idle)."""
    k = cfg.prefill_schedule_interval
    return k > 1 and counter % k != 0


def validate(cfg: Config) -> None:
    """Reject a configuration vLLM would reject or that the model cannot mean."""
    _int(cfg, "max_loras", 1)
    _int(cfg, "max_num_seqs", 1)
    _int(cfg, "max_num_batched_tokens", 1)
    _int(cfg, "long_prefill_token_threshold", 0)
    _int(cfg, "block_size", 1)
    _int(cfg, "starvation_steps", 0)
    _int(cfg, "prefill_schedule_interval", 1)
    if cfg.kv_blocks is not None:
        _int(cfg, "kv_blocks", 1)
    for flag in ("chunked_prefill", "async_scheduling"):
        if not isinstance(getattr(cfg, flag), bool):
            raise ConfigError(f"{flag} must be true or false, got {getattr(cfg, flag)!r}")
    if cfg.queue not in QUEUES:
        raise ConfigError(f"queue must be one of {', '.join(QUEUES)}, got {cfg.queue!r}")
    if cfg.vllm not in releases.RELEASES:
        raise ConfigError(f"vllm must be a supported release ({', '.join(releases.RELEASES)}), got {cfg.vllm!r}")
    if cfg.policy not in POLICIES + REFERENCE_POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES + REFERENCE_POLICIES)}, got {cfg.policy!r}")
