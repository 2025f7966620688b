"""Do the Z3 verdicts hold across sweeps? (`python -m experiments.prove_sweep`).

The manifest's checks (`proofs/manifest.json`, with their expected verdicts)
plus sweeps of `max_loras`, token budgets, seats and universe sizes, each
point with `proofs.checks.default_checks`'s k-induction and BMC checks, one
Ray task (one CPU) per check, a line as each finishes. Exit codes as
`lora-sched prove`: 0 when every verdict is the expected one, 1 on an
unexpected verdict, 2 on unknown / timeout / failed induction. Ray: a local
instance on 127.0.0.1, or `RAY_ADDRESS`. Figures: experiments/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from typing import Any

from lora_sched.proofs import encoding as enc
from lora_sched.proofs.checks import Check, default_checks, run_check
from lora_sched.proofs.manifest import load

BMC_DEPTH = 4


def _sweep_points() -> list[tuple[str, enc.Bounds]]:
    pts: list[tuple[str, enc.Bounds]] = []
    for m in (1, 2, 3):
        # m running adapters, one blocked, one behind it: blocking's head-of-line case needs m + 2
        # requests, m + 1 seats and a budget for m + 2 tokens.
        pts.append((f"max_loras={m}", enc.Bounds(requests=max(4, m + 2), adapters=m + 1, max_loras=(m, m),
                                                 max_num_seqs=(1, max(3, m + 1)),
                                                 max_num_batched_tokens=(1, max(4, m + 2)))))
    for seqs, budget in ((2, 2), (4, 8), (8, 16)):
        pts.append((f"seqs={seqs},budget={budget}",
                    enc.Bounds(requests=4, adapters=2, max_num_seqs=(1, seqs), max_num_batched_tokens=(1, budget),
                               max_prompt=3, max_output=3)))
    for r, a in ((5, 2), (5, 3), (6, 3)):
        pts.append((f"R={r},A={a}", enc.Bounds(requests=r, adapters=a)))
    return pts


def catalogue() -> list[Check]:
    """The manifest's checks, then every sweep point's."""
    out = list(load())
    for name, b in _sweep_points():
        for c in default_checks(b, BMC_DEPTH):
            if c.method in ("kind", "bmc") and not c.bounds.skip:
                out.append(replace(c, extra={"name": f"sweep {name}"}))
    return out


def _run(check: Check, timeout_ms: int) -> dict[str, Any]:
    r = run_check(check, None, timeout_ms)
    return {"verdict": r.verdict, "depth": r.depth, "seconds": r.seconds, "detail": r.detail, "reason": r.reason,
            "replay_ok": r.replay_ok, "worst": r.worst}


def verdict_code(check: Check, r: dict[str, Any]) -> int:
    """0 expected, 1 unexpected verdict, 2 unknown (as `proofs.cli`)."""
    v = r["verdict"]
    if v in ("proved", "holds"):
        ok = check.expect != "cex"
        if check.worst is not None and r["worst"] != check.worst:
            ok = False
        return 0 if ok else 1
    if v == "cex":
        return 0 if check.expect == "cex" and r["replay_ok"] else 1
    return 2


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on loopback, as `lora_sched.fuzz`
    import ray

    p = argparse.ArgumentParser(prog="python -m experiments.prove_sweep", description=__doc__.splitlines()[0])
    p.add_argument("--policy", help="only this policy's checks")
    p.add_argument("--property", help="only this property's checks")
    p.add_argument("--timeout", type=int, default=120, help="Z3 timeout per query, seconds")
    args = p.parse_args(argv)
    checks = catalogue()
    if args.policy:
        checks = [c for c in checks if c.policy == args.policy]
    if args.property:
        checks = [c for c in checks if c.property == args.property]
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(log_to_driver=False)
        else:
            ray.init(include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    task = ray.remote(num_cpus=1)(_run)
    t0 = time.perf_counter()
    refs = {task.remote(c, args.timeout * 1000): c for c in checks}
    cpus = int(ray.cluster_resources().get("CPU", 1))
    print(f"prove sweep: {len(checks)} checks as Ray tasks on {cpus} CPUs", flush=True)
    code = 0
    counts: dict[str, int] = {}
    while refs:
        done, _ = ray.wait(list(refs), num_returns=1)
        c = refs.pop(done[0])
        r = ray.get(done[0])
        k = verdict_code(c, r)
        code = max(code, k)
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        word = {0: "ok", 1: "UNEXPECTED", 2: "UNKNOWN"}[k]
        print(f"{c.extra.get('name', '?'):24s} {c.label:44s} [{c.bounds.describe()}] {c.method}: {r['verdict']} "
              f"at depth {r['depth']} (expected {c.expect}) ... {word} ({r['seconds']:.1f}s)"
              + (f" {r['reason'] or r['detail']}" if k else ""), flush=True)
    print(f"{len(checks)} checks in {time.perf_counter() - t0:.1f}s: "
          + ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
          + ("; all as expected" if code == 0 else "; some NOT as expected"), file=sys.stdout, flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
