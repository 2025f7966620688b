"""`python -m experiments.cli`: the experiments' modes, one flag each.

`--adversarial` (hill climbs for each policy's worst workloads, saved under
`experiments/families/`; `--goals` judges fair on them), `--frontier`
(worst wait against throughput per policy and knob, per family),
`--optimum POLICY` (the best schedule of a small instance under a wait
bound), `--realistic` (the realistic grid with its goals, `experiments.goals`;
with `--knob-goals`, the goals at each S), `--knob-goals` (the goals at each
value of S), `--bound-gap` (fair's B against witnesses), `--online` (the
online and relief pairs), `--field` (the frontier's top policies on vLLM's
live server, `experiments.live_field`). Each experiment module runs its mode
as `python -m experiments.NAME` too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

from lora_sched.bench.live import LIVE_INPUT_MEAN, LIVE_OUTPUT, LIVE_STARVATION_STEPS
from lora_sched.bench.realistic import GRID_DRAW as realistic_grid_draw
from lora_sched.bench.simulate import SEED_PROMPTS, progress
from lora_sched.policy.driver import release
from lora_sched.spec import releases
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

from experiments.adversarial import (
    SEARCH_POLICIES,
    goal_rows,
    print_goals,
    print_rows,
    reevaluate,
    search,
    widened,
)
from experiments.bound import main_gap
from experiments.families import FAMILY_DIR, FamilyError, all_families
from experiments.frontier import frontier, print_table
from experiments.goals import parse_draw
from experiments.goals import report as realistic_report
from experiments.knobs import KNOBS, SEEDS
from experiments.knobs import realistic_report as knob_realistic_report
from experiments.knobs import report as knob_report
from experiments.live_field import FAMILY_REPEAT, ROUNDS, main_live_field
from experiments.online import report as online_report
from experiments.optimum import gap_table, small_adversarial
from experiments.relief import ADVERSARIAL_PAIRS
from experiments.relief import conflicts as relief_conflicts
from experiments.relief import report as relief_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/experiments", help="output directory (JSON + plots)")
    parser.add_argument("--docs-img", default=None, help="also copy the plots into this directory")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--adversarial", action="store_true",
                        help="hill-climb each policy's worst workloads; save them under bench/families/")
    parser.add_argument("--frontier", action="store_true",
                        help="worst wait vs throughput per policy and knob, per family; table + frontier.png")
    parser.add_argument("--optimum", metavar="POLICY", default=None,
                        help="hill-climb a small instance against POLICY, then the best schedule under "
                             "wait bounds by exhaustive search (bench.optimum)")
    parser.add_argument("--realistic", action="store_true",
                        help="the realistic multi-tenant grid (Zipf adapters, Poisson / on-off arrivals, lognormal "
                             "lengths; bench.realistic): table, goals on design and held-out sets, plots")
    parser.add_argument("--bound-gap", action="store_true",
                        help="fair's B against the worst wait of every family it applies to, and a workload within "
                             "the same figures (Q, Qw, P, L, adapters) that waits longer: is 'B within 4x' "
                             "reachable by any bound in those figures? (bench.bound; --iters climbing steps)")
    parser.add_argument("--vllm", choices=list(releases.RELEASES), default=releases.NEWEST,
                        help=f"the vLLM release every simulated run follows (default {releases.NEWEST}; "
                             "spec/releases.py)")
    parser.add_argument("--large", action="store_true",
                        help="--realistic (alone or with --knob-goals): the 48-workload grid (default 12)")
    parser.add_argument("--draw", type=parse_draw, default=realistic_grid_draw,
                        help=f"--realistic (alone or with --knob-goals): the grid's draw (default "
                             f"{realistic_grid_draw}, the fixed grid with its "
                             "design / held-out split); a larger one draws a fresh grid like it, all held out")
    parser.add_argument("--knob-goals", nargs="?", const=",".join(map(str, KNOBS)), default=None, metavar="S,S,...",
                        help="issue 20's goals at each starvation_steps value (default "
                             f"{','.join(map(str, KNOBS))}): the saved families, fresh searches against fair at "
                             "each value (--knob-seeds, --iters, --restarts) and the realistic grid (bench.knobs); "
                             "with --realistic, only the realistic grid (--large, --draw)")
    parser.add_argument("--knob-seeds", default=",".join(map(str, SEEDS)),
                        help="--knob-goals: the fresh searches' seeds")
    parser.add_argument("--online", action="store_true",
                        help="judge the saved pairs (adv-online*): every online rule is beaten by the field "
                             "on one of each (exhaustive search, experiments.online); and the relief pairs "
                             "(experiments/pairs/adv-relief-*): relieving X misses a goal on Y (experiments.relief)")
    adv = parser.add_argument_group("adversarial / frontier / optimum modes")
    adv.add_argument("--iters", type=int, default=250, help="hill-climbing steps per restart")
    adv.add_argument("--restarts", type=int, default=2, help="restarts per (policy, objective)")
    adv.add_argument("--seed", default="0", help="search seed (any string)")
    adv.add_argument("--search-policies", default=None,
                     help="--adversarial: comma-separated policies (default: all it searches)")
    adv.add_argument("--objectives", default=None,
                     help="--adversarial: comma-separated objectives of throughput,wait,bound (default: all)")
    adv.add_argument("--suffix", default="", help="--adversarial: family names end in -SUFFIX")
    adv.add_argument("--families-dir", default=None, help="where families are saved / read (default bench/families)")
    adv.add_argument("--max-requests", type=int, default=None,
                     help="--adversarial: widen the space to this many requests (default 48)")
    adv.add_argument("--max-arrival", type=int, default=None,
                     help="--adversarial: widen the space to arrivals up to this step (default 40)")
    adv.add_argument("--reevaluate", action="store_true",
                     help="--adversarial: instead of searching, measure again the families kept from earlier "
                          "rules (found_by.found_against) under the current policies")
    adv.add_argument("--space", choices=("base", "kv", "async", "throttle", "priority"), default="base",
                     help="--adversarial: the search space (bench.adversarial.SPACES): base = synchronous, FCFS, "
                          "unlimited KV, no throttle (default); kv = finite KV pools; async = async scheduling; "
                          "throttle = prefill_schedule_interval 2-4; priority = the priority queue, priorities 0-2")
    adv.add_argument("--found-against", default=None, metavar="RULE",
                     help="--adversarial: record the rule searched against (e.g. 'fair v7') in found_by and name "
                          "families adv-RULE-[SPACE-]OBJECTIVE (spaces removed from RULE)")
    adv.add_argument("--goals", action="store_true",
                     help="--adversarial: instead of searching, judge fair at S = 16 on every family against "
                          "issue 20's goal (ratio >= 0.8, wait <= 1.25x vllm's + S), design and held-out sets")
    live = parser.add_argument_group("live field mode (--field)")
    live.add_argument("--live-prompts", type=int, default=None,
                      help="requests per policy on the seed shape (--num-prompts; default 500, the seed's count)")
    live.add_argument("--live-output", type=int, default=LIVE_OUTPUT,
                      help="output tokens per request (--random-output-len, with --ignore-eos)")
    live.add_argument("--live-input-mean", type=int, default=LIVE_INPUT_MEAN,
                      help="mean prompt tokens (--random-input-len; the seed: 249)")
    live.add_argument("--live-starvation-steps", type=int, default=LIVE_STARVATION_STEPS,
                      help="fair's starvation_steps")
    live.add_argument("--live-policies", "--policies", dest="live_policies", default=None,
                      help="comma-separated (default blocking,vllm,fair; with --field vllm,fair,timeslice,drainer)")
    live.add_argument("--field", action="store_true",
                      help="the frontier's top policies on the seed shape, the max_loras-1 family and an adversarial "
                           "one, side by side on vLLM's live server (experiments.live_field); --family and "
                           "--policies narrow or widen it")
    live.add_argument("--family", action="append", default=None, metavar="NAME",
                      help="a workload for the field table ('seed', 'realistic' or a family of "
                           "experiments.families; repeatable; implies --field)")
    live.add_argument("--family-repeat", type=int, default=None, help="send a family's requests K times (default 16)")
    live.add_argument("--live-rounds", type=int, default=None,
                      help="client runs per server; the median round is reported (default 1; with --field 3)")
    live.add_argument("--live-results", default=None,
                      help="the field table's JSON (default experiments/results/live-field.json)")
    live.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for each server")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _main(args: argparse.Namespace) -> int:
    if (args.large or args.draw != realistic_grid_draw) and not args.realistic:
        print("error: --large and --draw choose the grid of --realistic (alone or with --knob-goals)")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.field or args.family:
        if importlib.util.find_spec("vllm") is None:
            raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
        args.family_repeat = FAMILY_REPEAT if args.family_repeat is None else args.family_repeat
        args.live_prompts = SEED_PROMPTS if args.live_prompts is None else args.live_prompts
        args.live_rounds = ROUNDS if args.live_rounds is None else args.live_rounds
        return main_live_field(args)
    if args.optimum:
        return main_optimum(args, out)
    if args.online:
        first = online_report(out)
        print("\nwhere relieving starvation conflicts with a goal for every online rule (experiments.relief):")
        return relief_report(out) or first
    if args.bound_gap:
        return main_gap(out, climb_iters=args.iters)
    if args.realistic and args.knob_goals is not None:
        return knob_realistic_report(out, _ints(args.knob_goals), large=args.large, draw=args.draw,
                                     plots=not args.no_plots)
    if args.realistic:
        return realistic_report(out, large=args.large, plots=not args.no_plots, draw=args.draw)
    if args.knob_goals is not None:
        return knob_report(out, _ints(args.knob_goals), _ints(args.knob_seeds), iters=args.iters,
                           restarts=args.restarts, plots=not args.no_plots)
    if args.adversarial or args.frontier:
        return main_search(args, out)
    print("error: name a mode (python -m experiments.cli --help)")
    return 2


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default `sys.argv[1:]`) and run the mode it names under `--vllm`'s release."""
    parser = argparse.ArgumentParser(prog="python -m experiments.cli", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    name = None if (args.field or args.family) else args.vllm
    with release(name):
        return _main(args)


def run_mode(flag: str) -> int:
    """`python -m experiments.NAME ARGS`: `main` with the module's mode flag before ARGS."""
    return main([flag, *sys.argv[1:]])


def main_search(args: argparse.Namespace, out: Path) -> int:
    """`--adversarial` and/or `--frontier` (`experiments.adversarial`, `experiments.frontier`)."""
    t_start = time.perf_counter()
    fam_dir = Path(args.families_dir) if args.families_dir else FAMILY_DIR
    report: dict = {"command": "bench", "seed": args.seed}
    progress(f"seed {args.seed}, families in {fam_dir}")
    if args.adversarial:
        pols = tuple(args.search_policies.split(",")) if args.search_policies else SEARCH_POLICIES
        objs = tuple(args.objectives.split(",")) if args.objectives else None
        unknown = [p for p in pols if p not in SEARCH_POLICIES] + \
            [o for o in objs or () if o not in ("throughput", "wait", "bound")]
        if unknown:
            print(f"error: --search-policies / --objectives: unknown {', '.join(unknown)}")
            return 2
        seed: int | str = int(args.seed) if args.seed.isdigit() else args.seed
        if args.goals:
            try:
                goals = goal_rows(fam_dir)
            except FamilyError as exc:
                print(f"error: {exc}")
                return 2
            report["goals"] = goals
            print_goals(goals)
            report["unreachable"] = [{"instance": name, "goals_conflict": conflict, "figures": figures}
                                     for name, conflict, figures in relief_conflicts(ADVERSARIAL_PAIRS)]
            for u in report["unreachable"]:
                print(f"goals conflict on {u['instance']}... {'yes' if u['goals_conflict'] else 'no'}. "
                      f"({u['figures']})")
        elif args.reevaluate:
            rows = [reevaluate(p) for p in sorted(fam_dir.glob("adv-*.json"))
                    if "found_against" in json.loads(p.read_text()).get("found_by", {})]
        else:
            with widened(args.max_requests, args.max_arrival):
                rows = search(pols, iters=args.iters, restarts=args.restarts, seed=seed, out_dir=fam_dir,
                              objectives=objs, suffix=args.suffix, space=args.space,
                              found_against=args.found_against)
        if not args.goals:
            report["adversarial"] = rows
            print_rows(rows)
    if args.frontier:
        try:
            fams = all_families(fam_dir)
        except FamilyError as exc:
            print(f"error: {exc}")
            return 2
        result = frontier(fams)
        report["frontier"] = result
        print()
        print_table(result)
        if not args.no_plots:
            from experiments import plots
            path = plots.frontier(result, out / "frontier.png")
            report["plots"] = [str(path)]
            if args.docs_img:
                dest = Path(args.docs_img)
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest / "frontier.png")
    report["wall_s"] = time.perf_counter() - t_start
    name = "search.json"
    (out / name).write_text(json.dumps(report, indent=1, default=str))
    progress(f"done in {report['wall_s']:.1f} s; results in {out / name}")
    return 0


def main_optimum(args: argparse.Namespace, out: Path) -> int:
    """`--optimum POLICY`: the policy's worst small instance, and the best schedule
    of it under each wait bound (`experiments.optimum`)."""
    if args.optimum not in ("fair", "drainer", "timeslice", "vtc"):
        print(f"error: --optimum: unknown policy {args.optimum!r}")
        return 2
    progress(f"seed {args.seed}: hill climbing a small instance against {args.optimum} ({args.iters} steps)")
    found = small_adversarial(args.optimum, iters=args.iters, seed=args.seed)
    cfg = Config.from_dict(found["config"])
    reqs = [Request(**q) for q in found["requests"]]
    hi = max(found["wait"], found["vllm"]["wait"]) + 2
    gap = gap_table(cfg, reqs, list(range(0, hi + 1, 2)),
                    policies=("fair", "drainer", "timeslice", "vtc"))
    print(f"== Best schedule under a wait bound (exhaustive search), worst small instance for {args.optimum} ==")
    print(f"config: max_loras {cfg.max_loras}, max_num_seqs {cfg.max_num_seqs}, "
          f"max_num_batched_tokens {cfg.max_num_batched_tokens}, knob (starvation_steps) {cfg.starvation_steps}")
    print("requests (id, adapter, prompt, max_tokens, arrival): "
          + " ".join(f"({q.id},{q.adapter},{q.prompt_tokens},{q.max_tokens},{q.arrival})" for q in reqs))
    v = gap["vllm"]
    print(f"vllm: last step {v['last_step']}, worst wait {v['wait']}")
    for p, r in gap["policies"].items():
        print(f"{p:12} last step {r['last_step']:>4}, worst wait {r['wait']:>4}, ratio vs vllm {r['ratio']:.3f}")
    print(f"{'wait bound W':>13}{'optimum last step':>19}{'best ratio vs vllm':>20}{'states':>9}")
    for row in gap["rows"]:
        opt = "infeasible" if row["optimum_last_step"] is None else row["optimum_last_step"]
        cap = "-" if row["ratio_cap"] is None else f"{row['ratio_cap']:.3f}"
        print(f"{row['wait_bound']:>13}{opt:>19}{cap:>20}{row['states']:>9}")
    (out / "optimum.json").write_text(json.dumps({"instance": found, "gap": gap}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
