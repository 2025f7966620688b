"""proofs/manifest.json: expected verdicts and fingerprints per small configuration.

Each entry names a policy, a property, the method, the bounds, the expected
verdict and its fingerprint (docs/proofs.md, "Manifest"). `drift` is the one
rule `lora-sched prove --manifest` and `tests/test_proofs_manifest.py` apply.
Fingerprints come from a tool, never from a hand edit:

    python -m lora_sched.proofs.manifest --record   # re-run every entry, rewrite its fingerprint
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine
from lora_sched.proofs.checks import Check, run_check

MANIFEST = os.path.join(os.path.dirname(__file__), "manifest.json")


def _bounds(d: dict[str, Any]) -> enc.Bounds:
    d = dict(d)
    for k in ("max_loras", "max_num_seqs", "max_num_batched_tokens", "starvation_steps", "kv_blocks"):
        if k in d:
            d[k] = tuple(d[k])
    return enc.Bounds(**d)


def load(path: str = MANIFEST) -> list[Check]:
    with open(path) as f:
        raw = json.load(f)
    return [Check(e["policy"], e["property"], e["method"], _bounds(e["bounds"]), e["depth"], e["expect"],
                  e.get("bound"), e.get("worst"), {"name": e["name"], "fingerprint": e.get("fingerprint", {})})
            for e in raw["checks"]]


def fingerprint(r: engine.Result) -> dict[str, int]:
    """What pins a verdict beyond its word: the shortest counterexample depth,
    the k of an induction, the worst wait."""
    fp: dict[str, int] = {}
    if r.verdict == "cex":
        fp["depth"] = r.depth
    elif r.verdict == "proved" and r.worst is None:
        fp["k"] = r.depth
    if r.worst is not None:
        fp["worst"] = r.worst
    return fp


def drift(check: Check, r: engine.Result) -> str | None:
    """Why the result `r` of `check` departs from the manifest, or None.

    A verdict other than the expected one is drift; so is a counterexample
    that does not replay in `policy/`, a worst wait other than the recorded
    one (or whose witness does not replay), and a fingerprint other than the
    recorded one (a shortest counterexample found at another depth, a proof
    needing another k)."""
    if r.verdict != check.expect:
        return f"verdict {r.verdict}, manifest expects {check.expect} ({r.detail or r.reason})".replace(" ()", "")
    # (an `unbounded` entry's witness is its sat trace from init, replayed
    # by `proofs.unbounded.manifest_result`; it has no bounded Cex)
    if r.verdict == "cex" and ((r.cex is None and check.method != "unbounded") or not r.replay_ok):
        return f"the counterexample does not replay in policy/: {r.detail}"
    if check.worst is not None:
        if r.worst != check.worst:
            return f"worst wait {r.worst}, manifest expects {check.worst}"
        if not r.replay_ok:
            return f"the worst-wait witness does not replay in policy/: {r.detail}"
    want = check.extra.get("fingerprint") or {}
    got = fingerprint(r)
    for key, value in want.items():
        if got.get(key) != value:
            return f"fingerprint {key} = {got.get(key)}, manifest records {value}"
    return None


def record(path: str = MANIFEST) -> None:
    """Re-run every entry and write its fingerprint (and worst wait) into the file."""
    with open(path) as f:
        raw = json.load(f)
    by_name = {c.extra["name"]: c for c in load(path)}

    for e in raw["checks"]:
        c = by_name[e["name"]]
        r = run_check(c)
        if r.verdict != c.expect:
            raise SystemExit(f"{e['name']}: verdict {r.verdict}, manifest expects {c.expect}: not recorded")
        e["fingerprint"] = fingerprint(r)
        if r.worst is not None:
            e["worst"] = r.worst
        print(f"{e['name']}: {r.verdict} {e['fingerprint']} ({r.seconds:.1f}s)")
    with open(path, "w") as f:
        json.dump(raw, f, indent=1)
        f.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="rewrite the fingerprints from a fresh run")
    ap.add_argument("path", nargs="?", default=MANIFEST)
    a = ap.parse_args()
    if not a.record:
        ap.error("--record rewrites the fingerprints; `lora-sched prove --manifest` checks them")
    record(a.path)


if __name__ == "__main__":
    main()
