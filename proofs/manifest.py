"""proofs/manifest.json: expected verdicts per small configuration.

Like tlaplus/Examples' manifest.json: each entry names a policy, a property,
the method (kind = k-induction, bmc, wait = bounded_wait with worst case),
the bounds and the expected verdict. `lora-sched prove --manifest` re-runs
them and exits 1 on any drift (`drift`); so does
`tests/test_proofs_manifest.py`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.checks import Check

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


def drift(check: Check, r: engine.Result) -> str | None:
    """Why the result `r` of `check` departs from the manifest, or None.

    A verdict other than the expected one is drift; so is a counterexample
    that does not replay in `policy/`, or a worst wait other than the recorded
    one (or whose witness does not replay)."""
    if r.verdict != check.expect:
        return f"verdict {r.verdict}, manifest expects {check.expect} ({r.detail or r.reason})".replace(" ()", "")
    if r.verdict == "cex" and (r.cex is None or not r.replay_ok):
        return f"the counterexample does not replay in policy/: {r.detail}"
    if check.worst is not None:
        if r.worst != check.worst:
            return f"worst wait {r.worst}, manifest expects {check.worst}"
        if not r.replay_ok:
            return f"the worst-wait witness does not replay in policy/: {r.detail}"
    return None
