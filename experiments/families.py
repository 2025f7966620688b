"""Named workload families: the seed, the tuning set, the starvation stream,
the known max_loras-1 family, and the adversarial ones found by search.

A family is a (config, requests) pair. The first ones are built by code
(`bench.simulate.seed_requests`, `bench.sweeps.tuning_workloads`,
`policy.workloads.starvation_stream`); the adversarial ones are JSON files
under `experiments/families/` written by `python -m experiments.cli --adversarial`
(`experiments.adversarial`), one file per family:

    {"name": ..., "description": ..., "found_by": {...},
     "config": {Config fields}, "requests": [{"id", "adapter", "prompt_tokens",
     "max_tokens", "arrival", "priority"}, ...]}

A malformed file is rejected with its path and the field at fault.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from lora_sched.bench.sweeps import tuning_workloads
from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request

FAMILY_DIR = Path(__file__).resolve().parent / "families"
REQUEST_FIELDS = ("id", "adapter", "prompt_tokens", "max_tokens", "arrival")


class FamilyError(ValueError):
    """A family file that cannot be read; the message names the file and field."""


def known_family(seed: int = 1, *, seats: int = 12, adapters: int = 3, n: int = 36) -> tuple[Config, list[Request]]:
    """The issue's family: max_loras 1, a few adapters, 10-15 seats, a 16-token
    budget, requests with short prompts and outputs arriving over 4 steps."""
    rng = random.Random(seed)
    cfg = Config(max_loras=1, max_num_seqs=seats, max_num_batched_tokens=16)
    reqs = [Request(f"r{i}", rng.randint(1, adapters), rng.randint(1, 8), rng.randint(1, 16), 1 + rng.randint(0, 3))
            for i in range(n)]
    return cfg, reqs


def to_json(name: str, cfg: Config, reqs: list[Request], *, description: str = "",
            found_by: dict | None = None) -> dict:
    return {"name": name, "description": description, "found_by": found_by or {},
            "config": cfg.to_dict(),
            "requests": [{"id": r.id, "adapter": r.adapter, "prompt_tokens": r.prompt_tokens,
                          "max_tokens": r.max_tokens, "arrival": r.arrival, "priority": r.priority}
                         for r in reqs]}


def save(path: Path, family: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(family, indent=1) + "\n")
    return path


def load(path: Path) -> tuple[str, Config, list[Request], dict]:
    """Read one family file: (name, config, requests, the whole object)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FamilyError(f"{path}: {exc}") from None
    if not isinstance(raw, dict):
        raise FamilyError(f"{path}: expected an object")
    for key in ("name", "config", "requests"):
        if key not in raw:
            raise FamilyError(f"{path}: missing field {key!r}")
    try:
        cfg = Config.from_dict(raw["config"], where=f"{path}: config")
    except ConfigError as exc:
        raise FamilyError(str(exc)) from None
    if not isinstance(raw["requests"], list) or not raw["requests"]:
        raise FamilyError(f"{path}: requests must be a non-empty list")
    reqs = []
    for i, r in enumerate(raw["requests"]):
        missing = [f for f in REQUEST_FIELDS if not isinstance(r, dict) or f not in r]
        if missing:
            raise FamilyError(f"{path}: requests[{i}]: missing field {missing[0]!r}")
        try:
            reqs.append(Request(str(r["id"]), int(r["adapter"]), int(r["prompt_tokens"]), int(r["max_tokens"]),
                                int(r["arrival"]), int(r.get("priority", 0))))
        except (TypeError, ValueError) as exc:
            raise FamilyError(f"{path}: requests[{i}]: {exc}") from None
    return str(raw["name"]), cfg, reqs, raw


def coded_families() -> dict[str, tuple[Config, list[Request]]]:
    """The families built by code: the tuning set (seed shapes, the stream) and the known family."""
    fams = dict(tuning_workloads())
    fams["known max_loras 1 (issue 11)"] = known_family()
    return fams


def found_families(directory: Path = FAMILY_DIR) -> dict[str, tuple[Config, list[Request]]]:
    out = {}
    for path in sorted(directory.glob("*.json")):
        name, cfg, reqs, _ = load(path)
        out[name] = (cfg, reqs)
    return out


def all_families(directory: Path = FAMILY_DIR) -> dict[str, tuple[Config, list[Request]]]:
    return {**coded_families(), **found_families(directory)}
