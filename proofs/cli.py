"""`lora-sched prove`: BMC, k-induction and the worst-case wait with Z3.

One line per check, then a summary table. Its modes (`--manifest`,
`--mutants`, `--unbounded`, `--json`), fields and exit codes: docs/proofs.md,
"CLI" and "Manifest".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Any

from lora_sched.policy.check import json_envelope
from lora_sched.proofs import encoding as enc
from lora_sched.proofs import engine, mutants, unbounded
from lora_sched.proofs.cex import emit_test, write_itf
from lora_sched.proofs.checks import Check, default_checks, run_check
from lora_sched.proofs.manifest import MANIFEST, drift, load
from lora_sched.proofs.unbounded import POLICIES as UNBOUNDED_POLICIES

VERDICT_WORDS = {"cex": "violated"}  # engine verdict -> the word `check --json` uses too


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=[*enc.POLICIES, *(q for q in UNBOUNDED_POLICIES if q not in enc.POLICIES)],
                   help="only this policy (drainer, timeslice, vtc: with --unbounded only)")
    p.add_argument("--property", choices=[*enc.STEP_PROPS, "bounded_wait"], help="only this property")
    p.add_argument("--depth", type=int, default=4, help="BMC depth (default 4)")
    p.add_argument("--requests", type=int, default=4, help="request slots R (default 4)")
    p.add_argument("--adapters", type=int, default=2, help="LoRA adapters A (default 2)")
    p.add_argument("--skip", action="store_true", help="enable the nondeterministic skip of running requests")
    p.add_argument("--kv-blocks", type=int, metavar="N", help="a finite KV pool of 1..N blocks (preemption)")
    p.add_argument("--block-size", type=int, default=1, help="tokens per KV block with --kv-blocks (default 1)")
    p.add_argument("--priority", action="store_true", help="the priority queue (priorities 0..1 per request)")
    p.add_argument("--timeout", type=int, default=120, help="Z3 timeout per query, seconds")
    p.add_argument("--manifest", nargs="?", const=MANIFEST, metavar="PATH",
                   help="re-run the manifest's checks and exit 1 on any drift from their recorded verdicts")
    p.add_argument("--itf-dir", help="write each counterexample as <dir>/<policy>_<property>.itf.json")
    p.add_argument("--emit-test", help="write the (last) counterexample as a pytest replay case here")
    p.add_argument("--json", action="store_true", help="print one versioned JSON object (a result per check)")
    p.add_argument("--mutants", nargs="*", metavar="NAME",
                   help="run the planted-bug catalogue (all, or the named ones): exit 1 if a mutant survives")
    p.add_argument("-v", "--verbose", action="store_true", help="progress per depth / k")
    p.add_argument("--unbounded", action="store_true",
                   help="inductive invariants over uninterpreted sorts: any number of requests and adapters")


def select(args: argparse.Namespace) -> list[Check]:
    if args.manifest:
        checks = load(args.manifest)
    else:
        checks = default_checks(bounds(args), args.depth)
        if args.skip:
            checks = [replace(c, bounds=replace(c.bounds, skip=True)) for c in checks]
    if args.policy:
        checks = [c for c in checks if c.policy == args.policy]
    if args.property:
        checks = [c for c in checks if c.property == args.property]
        if not checks and args.policy and not args.manifest:
            method = "kind" if args.property in enc.SAFETY else ("wait" if args.property == "bounded_wait" else "bmc")
            b = replace(bounds(args), skip=args.skip)
            checks = [Check(args.policy, args.property, method, b, args.depth, "holds")]
    return checks


def bounds(args: argparse.Namespace) -> enc.Bounds:
    """The default checks' bounds from the command line (`--skip` excluded)."""
    kv = getattr(args, "kv_blocks", None)
    return enc.Bounds(requests=args.requests, adapters=args.adapters, max_loras=(1, max(1, min(2, args.adapters))),
                      kv_blocks=None if kv is None else (1, kv), block_size=getattr(args, "block_size", 1),
                      priority=getattr(args, "priority", False))


def result_json(c: Check, r: engine.Result, itf: str | None, drifted: str | None, manifest: bool) -> dict[str, Any]:
    """One check's verdict as `prove --json` reports it."""
    out: dict[str, Any] = {
        "policy": c.policy, "property": c.property, "method": c.method, "label": c.label,
        "verdict": VERDICT_WORDS.get(r.verdict, r.verdict), "depth": r.depth, "seconds": round(r.seconds, 3),
        "message": r.detail or r.reason, "replayed": r.replay_ok,
    }
    if c.property == "bounded_wait":
        out.update(bound=r.bound if r.bound is not None else c.wait_bound(), worst=r.worst)
    if r.cex is not None and itf:
        out["itf"] = itf
    elif r.cex is not None:
        out["witness"] = r.cex.to_itf()
    if manifest:
        out.update(name=c.extra.get("name"), expected=VERDICT_WORDS.get(c.expect, c.expect), drift=drifted)
    return out


def run_mutants(args: argparse.Namespace) -> int:
    """`prove --mutants`: every mutant must be killed by the check it names."""
    unknown = sorted(set(args.mutants) - {m.name for m in mutants.CATALOGUE})
    if unknown:
        print(f"lora-sched prove: --mutants: unknown mutant(s) {unknown}; "
              f"known: {[m.name for m in mutants.CATALOGUE]}", file=sys.stderr)
        return 2
    outcomes = mutants.run_all(args.mutants or None, timeout_ms=args.timeout * 1000)
    ok = mutants.all_killed(outcomes)
    print(f"{sum(o.killed for o in outcomes)}/{len(outcomes)} mutants killed: "
          + ("all ok!" if ok else "program has errors."))
    return 0 if ok else 1


def main(args: argparse.Namespace) -> int:
    if getattr(args, "unbounded", False):
        return unbounded.cli_main(args)
    if args.policy is not None and args.policy not in enc.POLICIES and not args.manifest:
        print(f"lora-sched prove: --policy {args.policy} is checked only by --unbounded (or --manifest)",
              file=sys.stderr)
        return 2
    if args.mutants is not None:
        return run_mutants(args)
    checks = select(args)
    say = (lambda *a, **k: print(*a, **k, file=sys.stderr)) if args.json else print
    rows, results = [], []
    violated = inconclusive = drifted_any = False
    last_cex = None
    for c in checks:
        say(f"{c.label} ...", end=" ", flush=True)
        prog = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
        r = run_check(c, prog, args.timeout * 1000)
        if r.verdict in ("proved", "holds"):
            word = "ok" if r.verdict == "proved" else f"ok up to depth {r.depth}"
            if r.worst is not None:
                word += f", worst wait {r.worst} (witness replayed: {r.replay_ok})"
        elif r.verdict == "cex":
            word = f"VIOLATED at depth {r.depth}; replay: {r.detail}"
            violated = True
        else:
            word = f"{r.verdict.upper()}: {r.reason or r.detail}"
            inconclusive = True
        d = drift(c, r) if args.manifest else None
        if args.manifest:
            word += f"; DRIFT: {d}" if d else "; matches the manifest"
            drifted_any = drifted_any or d is not None
        say(f"{word} ({r.seconds:.1f}s)", flush=True)
        itf = None
        if r.cex is not None and (r.verdict == "cex" or args.verbose):
            say(r.cex.table())
            last_cex = r.cex
            if args.itf_dir:
                itf = os.path.join(args.itf_dir, f"{c.policy}_{c.property}.itf.json")
                write_itf(r.cex, itf)
        rows.append((c.label, c.method, r.verdict, c.expect, r.depth, r.seconds))
        results.append(result_json(c, r, itf, d, bool(args.manifest)))
    say(f"\n{'check':44s} {'how':5s} {'verdict':8s} {'expected':8s} {'depth':>5s} {'time':>7s}")
    for label, how, verdict, expect, depth, secs in rows:
        say(f"{label:44s} {how:5s} {verdict:8s} {expect:8s} {depth:5d} {secs:6.1f}s")
    if args.emit_test and last_cex is not None:
        emit_test(last_cex, args.emit_test)
        say(f"wrote {args.emit_test}")
    if args.manifest:
        code = 1 if drifted_any else 0
        say(f"manifest {args.manifest}: " + ("DRIFT" if drifted_any else f"all {len(rows)} verdicts as recorded"))
    else:
        code = 1 if violated else (2 if inconclusive else 0)
    if args.json:
        print(json.dumps({**json_envelope("prove"), "mode": "manifest" if args.manifest else "checks",
                          **({"manifest": args.manifest} if args.manifest else {}),
                          "ok": code == 0, "results": results}, indent=1))
    return code
