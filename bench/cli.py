"""`lora-sched bench`: the seed's table, reproduced and extended to `fair`.

Simulated by default (reference policies + the cost model, well under a
minute); `--speed` adds the reference-vs-vLLM scheduler speed (imports vLLM,
which alone takes tens of seconds); `--live` runs the policies inside the CPU
vLLM server, driven by vLLM's own benchmark client (`bench.live`); `--live
--field` puts the frontier's top policies side by side on the seed shape and
an adversarial family (`bench.live_field`); `--overhead` times vLLM's real
`schedule()` + `update_from_output()` per step, stock vs lora_sched's classes,
in-process (`bench.overhead`). Results go
to `--out` as JSON and PNG; stdout gets the tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

from lora_sched.bench import overhead
from lora_sched.bench.adversarial import (
    SEARCH_POLICIES,
    goal_rows,
    print_goals,
    print_rows,
    reevaluate,
    search,
    widened,
)
from lora_sched.bench.bound import main_gap
from lora_sched.bench.families import FAMILY_DIR, FamilyError, all_families
from lora_sched.bench.frontier import frontier, print_table
from lora_sched.bench.knobs import KNOBS, SEEDS
from lora_sched.bench.knobs import realistic_report as knob_realistic_report
from lora_sched.bench.knobs import report as knob_report
from lora_sched.bench.live import LIVE_INPUT_MEAN, LIVE_OUTPUT, LIVE_PROMPTS, LIVE_STARVATION_STEPS, main_live
from lora_sched.bench.live_field import FAMILY_REPEAT, ROUNDS, main_live_field
from lora_sched.bench.online import report as online_report
from lora_sched.bench.optimum import gap_table, small_adversarial
from lora_sched.bench.realistic import GRID_DRAW as realistic_grid_draw
from lora_sched.bench.realistic import parse_draw
from lora_sched.bench.realistic import report as realistic_report
from lora_sched.bench.refspeed import compare, describe
from lora_sched.bench.relief import ADVERSARIAL_PAIRS
from lora_sched.bench.relief import conflicts as relief_conflicts
from lora_sched.bench.relief import report as relief_report
from lora_sched.bench.simulate import (
    SEED_PROMPTS,
    calibrate,
    progress,
    ratio,
    seed_config,
    seed_requests,
    simulate_policy,
)
from lora_sched.bench.sweeps import STARVATION_STEPS, STREAM_LENGTHS, starvation_sweep, tuning_sweep
from lora_sched.bench.table import table
from lora_sched.policy.costmodel import DEFAULT, SEED_BLOCKING, SEED_PR, SEED_RATIO, SEED_ROWS
from lora_sched.policy.driver import release
from lora_sched.spec import releases
from lora_sched.spec.config import POLICIES, Config
from lora_sched.spec.request import Request


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None,
                        help="output directory (JSON + plots; default out/bench); with --overhead, where its JSON goes "
                             "(PATH/overhead.json unless PATH ends in .json; none without --out)")
    parser.add_argument("--prompts", type=int, default=500, help="number of requests (seed: 500)")
    parser.add_argument("--assign", choices=("round_robin", "random"), default="random",
                        help="adapter per request: benchmark_serving's random.choice (the seed's setup) or round robin")
    parser.add_argument("--tune-values", default=",".join(map(str, STARVATION_STEPS)),
                        help="starvation_steps values for the fair tuning sweep ('' to skip)")
    parser.add_argument("--stream-lengths", default=",".join(map(str, STREAM_LENGTHS)))
    parser.add_argument("--calibrate", action="store_true", help="refit the cost model (~20 s)")
    parser.add_argument("--speed", action="store_true",
                        help="also time the reference vs vLLM's Scheduler in-process (imports vLLM)")
    parser.add_argument("--docs-img", default=None, help="also copy the plots into this directory")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--live", action="store_true", help="run the policies inside the CPU vLLM server")
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
                             "on one of each (exhaustive search, bench.online); and the relief pairs "
                             "(bench/pairs/adv-relief-*): relieving X misses a goal on Y (bench.relief)")
    parser.add_argument("--overhead", action="store_true",
                        help="time vLLM's real schedule() + update_from_output() per step in-process, stock vs "
                             "lora_sched.scheduler.CLASSES, over a W x A x max_loras grid (bench.overhead)")
    overhead.add_arguments(parser.add_argument_group("overhead mode (--overhead)"), standalone=False)
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
    live = parser.add_argument_group("live mode (--live)")
    live.add_argument("--live-prompts", type=int, default=None,
                      help=f"requests per policy on the seed shape (--num-prompts; default {LIVE_PROMPTS}, "
                           "with --field 500, the seed's count)")
    live.add_argument("--live-output", type=int, default=LIVE_OUTPUT,
                      help="output tokens per request (--random-output-len, with --ignore-eos)")
    live.add_argument("--live-input-mean", type=int, default=LIVE_INPUT_MEAN,
                      help="mean prompt tokens (--random-input-len; the seed: 249)")
    live.add_argument("--live-starvation-steps", type=int, default=LIVE_STARVATION_STEPS,
                      help="fair's starvation_steps")
    live.add_argument("--live-policies", "--policies", dest="live_policies", default=None,
                      help="comma-separated (default blocking,vllm,fair; with --field vllm,fair,timeslice,drainer)")
    live.add_argument("--field", action="store_true",
                      help="the frontier's top policies on the seed shape, issue 11's family and an adversarial one, "
                           "side by side "
                           "(bench.live_field); --family and --policies narrow or widen it")
    live.add_argument("--family", action="append", default=None, metavar="NAME",
                      help="with --live: a workload for the field table ('seed' or a family of "
                           "bench.families; repeatable; implies --field)")
    live.add_argument("--family-repeat", type=int, default=None, help="send a family's requests K times (default 16)")
    live.add_argument("--live-rounds", type=int, default=None,
                      help="client runs per server; the median round is reported (default 1; with --field 3)")
    live.add_argument("--live-results", default=None,
                      help="the field table's JSON (default bench/results/live-field.json)")
    live.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for each server")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(args: argparse.Namespace) -> int:
    # The live, speed and overhead modes run the installed vLLM, whose traces
    # name their release; --vllm is for the simulated runs.
    name = None if (args.live or args.speed or args.overhead) else args.vllm
    if name is not None:
        print(f"[bench] simulated runs follow vLLM {name}'s scheduler (--vllm)", flush=True)
    with release(name):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if (args.large or args.draw != realistic_grid_draw) and not args.realistic:
        print("error: --large and --draw choose the grid of --realistic (alone or with --knob-goals); "
              "no other mode reads them")
        return 2
    if args.overhead:
        return overhead.main(args)
    if (args.live or args.speed) and importlib.util.find_spec("vllm") is None:
        # Before a minute of simulation, not after: `lora_sched.cli` names the extra.
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
    args.out = args.out or "out/bench"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.live and (args.field or args.family):
        if args.family_repeat is None:
            args.family_repeat = FAMILY_REPEAT
        if args.live_prompts is None:
            args.live_prompts = SEED_PROMPTS
        if args.live_rounds is None:
            args.live_rounds = ROUNDS
        return main_live_field(args)
    if args.live:
        if args.live_prompts is None:
            args.live_prompts = LIVE_PROMPTS
        if args.live_rounds is not None and args.live_rounds != 1:
            print("error: --live-rounds applies to --live --field only")
            return 2
        return main_live(args)
    if args.optimum:
        return main_optimum(args, out)
    if args.online:
        first = online_report(out)
        print("\nwhere relieving starvation conflicts with a goal for every online rule (bench.relief):")
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
    t_start = time.perf_counter()
    report: dict = {"cost_model": DEFAULT.to_dict(), "seed": SEED_ROWS}
    model = DEFAULT
    if args.calibrate:
        progress("calibrating the cost model on the seed's PR row ...")
        model = calibrate()
        report["cost_model"] = model.to_dict()
    progress(f"cost model: {model.describe()}")

    cfg = seed_config()
    reqs = seed_requests(args.prompts, assign=args.assign)
    runs = {}
    for p in POLICIES:
        progress(f"simulating {p} on {len(reqs)} requests ...")
        runs[p] = simulate_policy(cfg, reqs, p, model)
        progress(f"  {p}: {len(runs[p].timeline.steps)} steps, reference ran {runs[p].sim_seconds:.2f} s")
    r_vb = ratio(runs, "vllm", "blocking")
    r_fv = ratio(runs, "fair", "vllm")
    report["simulated"] = {"config": cfg.to_dict(), "assign": args.assign,
                           "runs": {p: r.summary() for p, r in runs.items()},
                           "ratio_vllm_over_blocking": r_vb, "ratio_fair_over_vllm": r_fv,
                           "seed_ratio": SEED_RATIO}

    cols = {"seed main V1": SEED_BLOCKING, "sim blocking": runs["blocking"].block,
            "seed PR #15422": SEED_PR, "sim vllm": runs["vllm"].block, "sim fair": runs["fair"].block}
    print("== Serving benchmark, seed configuration (simulated; seed columns from vLLM PR #15422) ==")
    print(table(cols))
    print(f"\nthroughput vllm/blocking: simulated {r_vb:.2f}x, seed {SEED_RATIO:.2f}x (16.75 / 2.49)")
    print(f"throughput fair/vllm: simulated {r_fv:.3f} (starvation_steps {cfg.starvation_steps})")
    # vLLM's GPU default: async scheduling (fair's cap then also counts the
    # sure-to-finish requests vLLM leaves unscheduled).
    acfg = seed_config(async_scheduling=True)
    aruns = {p: simulate_policy(acfg, reqs, p, model) for p in ("vllm", "fair")}
    r_fv_async = ratio(aruns, "fair", "vllm")
    report["simulated_async"] = {"runs": {p: r.summary() for p, r in aruns.items()},
                                 "ratio_fair_over_vllm": r_fv_async}
    print(f"throughput fair/vllm with async scheduling: simulated {r_fv_async:.3f} "
          f"(vllm {aruns['vllm'].block['request_throughput']:.2f} req/s, "
          f"fair {aruns['fair'].block['request_throughput']:.2f} req/s)")
    print("\nwait before first admission per adapter (steps mean/max | seconds mean/max):")
    for p, r in runs.items():
        cells = "  ".join(f"a{a}: {v['mean_wait_steps']:.0f}/{v['max_wait_steps']} | "
                          f"{v['mean_wait_s']:.1f}/{v['max_wait_s']:.1f}" for a, v in r.adapters.items())
        print(f"  {p:9} {cells}")

    progress("starvation sweep ...")
    rows = starvation_sweep(_ints(args.stream_lengths))
    report["starvation"] = rows
    print("\n== Starvation stream (max_loras 2; adapters 1, 2 stream; one adapter-3 request) ==")
    print(f"{'length':>8}{'blocking':>10}{'vllm':>8}{'fair':>8}{'bound B':>9}")
    for r in rows:
        print(f"{r['length']:>8}{r['blocking']:>10}{r['vllm']:>8}{r['fair']:>8}{r['bound']:>9}")

    sweep = None
    values = _ints(args.tune_values)
    if values:
        progress("tuning fair's starvation_steps ...")
        sweep = tuning_sweep(values, model)
        report["tuning"] = sweep
        print("\n== fair: throughput(fair)/throughput(vllm) and max wait (steps) vs starvation_steps ==")
        print(f"{'S':>6}" + "".join(f"{n[:26]:>28}" for n in sweep["workloads"]))
        for i, s in enumerate(values):
            cells = "".join(f"{w['rows'][i]['ratio']:>12.3f} {w['rows'][i]['fair_max_wait']:>6} "
                            f"{w['rows'][i]['guard_steps']:>4}/{w['rows'][i]['steps']:<4}"
                            for w in sweep["workloads"].values())
            print(f"{s:>6}{cells}")
        print("(cells: fair/vllm throughput, fair's max wait in steps, steps with a guard hold / steps)")
        print("vllm max wait: " + ", ".join(f"{n}: {w['vllm_max_wait']}" for n, w in sweep["workloads"].items()))
        print("bound B at the largest S: " + ", ".join(
            f"{n}: {w['rows'][-1]['bound']}" for n, w in sweep["workloads"].items()))
        rec, fire = sweep["recommended"], sweep["recommended_firing"]
        print(f"smallest S with fair >= {sweep['target_ratio']} of vllm on every workload: "
              f"{rec if rec is not None else 'none in the sweep'}; with the guard firing on some workload: "
              f"{fire if fire is not None else 'none in the sweep'}")

    if args.speed:
        progress("reference speed: importing vLLM and timing its Scheduler ...")
        ref, vl = compare(cfg, reqs)
        report["speed"] = {"reference": {"steps": ref.steps, "seconds": ref.seconds,
                                         "steps_per_s": ref.steps_per_s},
                           "vllm": {"steps": vl.steps, "seconds": vl.seconds, "steps_per_s": vl.steps_per_s},
                           "ratio_reference_over_vllm": ref.steps_per_s / vl.steps_per_s}
        print("\n" + describe(ref, vl))

    if not args.no_plots:
        from lora_sched.bench import plots
        progress("plots ...")
        paths = [plots.wait_distribution(runs, out / "waits.png"),
                 plots.starvation(rows, out / "starvation.png")]
        if sweep is not None:
            paths.append(plots.tuning(sweep, out / "tuning.png"))
        plots.publish(paths, args.docs_img)
        report["plots"] = [str(p) for p in paths]
    report["wall_s"] = time.perf_counter() - t_start
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    progress(f"done in {report['wall_s']:.1f} s; results in {out / 'results.json'}")
    return 0


def main_search(args: argparse.Namespace, out: Path) -> int:
    """`--adversarial` and/or `--frontier` (`bench.adversarial`, `bench.frontier`)."""
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
            from lora_sched.bench import plots
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
    of it under each wait bound (`bench.optimum`)."""
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
