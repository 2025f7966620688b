"""`lora-sched prove`: BMC, k-induction and the worst-case wait with Z3.

One line per check (`fair: bounded_wait (B=13) ... ok (3.2s)`), then a
summary table. Exit 0 when every verdict is the expected one, 1 on a
violation that is not expected, 2 on unknown / timeout / failed induction.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from proofs import encoding as enc
from proofs.cex import emit_test, write_itf
from proofs.checks import Check, default_checks, run_check


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=enc.POLICIES, help="only this policy")
    p.add_argument("--property", choices=[*enc.STEP_PROPS, "bounded_wait"], help="only this property")
    p.add_argument("--depth", type=int, default=4, help="BMC depth (default 4)")
    p.add_argument("--requests", type=int, default=4, help="request slots R (default 4)")
    p.add_argument("--adapters", type=int, default=2, help="LoRA adapters A (default 2)")
    p.add_argument("--skip", action="store_true", help="enable the nondeterministic skip of running requests")
    p.add_argument("--timeout", type=int, default=120, help="Z3 timeout per query, seconds")
    p.add_argument("--itf-dir", help="write each counterexample as <dir>/<policy>_<property>.itf.json")
    p.add_argument("--emit-test", help="write the (last) counterexample as a pytest replay case here")
    p.add_argument("--mutants", nargs="*", metavar="NAME",
                   help="run the planted-bug catalogue (proofs.mutants; all, or the named ones): "
                        "exit 1 if a mutant survives")
    p.add_argument("-v", "--verbose", action="store_true", help="progress per depth / k")


def select(args: argparse.Namespace) -> list[Check]:
    b = enc.Bounds(requests=args.requests, adapters=args.adapters,
                   max_loras=(1, max(1, min(2, args.adapters))))
    checks = default_checks(b, args.depth)
    if args.skip:
        checks = [replace(c, bounds=replace(c.bounds, skip=True)) for c in checks]
    if args.policy:
        checks = [c for c in checks if c.policy == args.policy]
    if args.property:
        checks = [c for c in checks if c.property == args.property]
        if not checks and args.policy:
            method = "kind" if args.property in enc.SAFETY else ("wait" if args.property == "bounded_wait" else "bmc")
            checks = [Check(args.policy, args.property, method, b, args.depth, "holds")]
    return checks


def main(args: argparse.Namespace) -> int:
    if args.mutants is not None:
        from proofs import mutants

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
    checks = select(args)
    rows = []
    code = 0
    last_cex = None
    for c in checks:
        print(f"{c.label} ...", end=" ", flush=True)
        prog = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
        r = run_check(c, prog, args.timeout * 1000)
        if r.verdict in ("proved", "holds"):
            word = "ok" if r.verdict == "proved" else f"ok up to depth {r.depth}"
            if r.worst is not None:
                word += f", worst wait {r.worst} (witness replayed: {r.replay_ok})"
            if c.expect == "cex":
                word += " (expected a violation!)"
                code = max(code, 1)
        elif r.verdict == "cex":
            word = f"VIOLATED at depth {r.depth}{' (expected)' if c.expect == 'cex' else ''}; replay: {r.detail}"
            if c.expect != "cex" or not r.replay_ok:
                code = max(code, 1)
        else:
            word = f"{r.verdict.upper()}: {r.reason or r.detail}"
            code = 2
        print(f"{word} ({r.seconds:.1f}s)", flush=True)
        if r.cex is not None and (r.verdict == "cex" or args.verbose):
            print(r.cex.table())
            last_cex = r.cex
            if args.itf_dir:
                write_itf(r.cex, os.path.join(args.itf_dir, f"{c.policy}_{c.property}.itf.json"))
        rows.append((c.label, c.method, r.verdict, c.expect, r.depth, r.seconds))
    print(f"\n{'check':44s} {'how':5s} {'verdict':8s} {'expected':8s} {'depth':>5s} {'time':>7s}")
    for label, how, verdict, expect, depth, secs in rows:
        print(f"{label:44s} {how:5s} {verdict:8s} {expect:8s} {depth:5d} {secs:6.1f}s")
    if args.emit_test and last_cex is not None:
        emit_test(last_cex, args.emit_test)
        print(f"wrote {args.emit_test}")
    return code
