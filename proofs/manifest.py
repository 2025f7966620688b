"""proofs/manifest.json: expected verdicts per small configuration.

Like tlaplus/Examples' manifest.json: each entry names a policy, a property,
the method (kind = k-induction, bmc, wait = bounded_wait with worst case),
the bounds and the expected verdict; `tests/test_proofs_manifest.py` re-runs
them and fails on any drift.
"""

from __future__ import annotations

import json
import os
from typing import Any

from proofs import encoding as enc
from proofs.checks import Check

MANIFEST = os.path.join(os.path.dirname(__file__), "manifest.json")


def _bounds(d: dict[str, Any]) -> enc.Bounds:
    d = dict(d)
    for k in ("max_loras", "max_num_seqs", "max_num_batched_tokens", "starvation_steps"):
        if k in d:
            d[k] = tuple(d[k])
    return enc.Bounds(**d)


def load(path: str = MANIFEST) -> list[Check]:
    with open(path) as f:
        raw = json.load(f)
    return [Check(e["policy"], e["property"], e["method"], _bounds(e["bounds"]), e["depth"], e["expect"],
                  e.get("bound"), e.get("worst"), {"name": e["name"]}) for e in raw["checks"]]
