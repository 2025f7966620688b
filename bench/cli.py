"""`lora-sched bench`: the seed's table, reproduced and extended to `fair`.

Simulated by default (reference policies + the cost model): the seed's
serving benchmark, the starvation stream and the tuning of fair's
`starvation_steps`. `--live` runs the policies inside the CPU vLLM server
(`bench.live`); `--realistic` the realistic grid (`bench.realistic`);
`--overhead` times vLLM's `schedule()` + `update_from_output()` per step,
stock vs lora_sched's classes (`bench.overhead`; finer flags with `python
-m lora_sched.bench.overhead`). JSON and PNG go to `--out`, tables to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

from lora_sched.bench import overhead
from lora_sched.bench.live import LIVE_INPUT_MEAN, LIVE_OUTPUT, LIVE_PROMPTS, LIVE_STARVATION_STEPS, main_live
from lora_sched.bench.realistic import report as realistic_report
from lora_sched.bench.simulate import SEED_PROMPTS, progress, ratio, seed_config, seed_requests, simulate_policy
from lora_sched.bench.sweeps import STARVATION_STEPS, STREAM_LENGTHS, starvation_sweep, tuning_sweep
from lora_sched.bench.table import table
from lora_sched.policy.costmodel import DEFAULT, SEED_BLOCKING, SEED_PR, SEED_RATIO, SEED_ROWS
from lora_sched.policy.driver import release
from lora_sched.spec import releases
from lora_sched.spec.config import POLICIES

START_TIMEOUT = 300.0  # seconds to wait for each live server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None,
                        help="output directory (JSON + plots; default out/bench); with --overhead, where its JSON "
                             "goes (PATH/overhead.json unless PATH ends in .json; none without --out)")
    parser.add_argument("--prompts", type=int, default=None,
                        help=f"requests per policy (default {SEED_PROMPTS}, the seed's; with --live {LIVE_PROMPTS})")
    parser.add_argument("--vllm", choices=list(releases.RELEASES), default=releases.NEWEST,
                        help=f"the vLLM release every simulated run follows (default {releases.NEWEST})")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--docs-img", default=None, help="also copy the plots into this directory")
    parser.add_argument("--live", action="store_true", help="run the policies inside the CPU vLLM server")
    parser.add_argument("--policies", default=None, metavar="P,Q",
                        help="--live: the policies served (default blocking,vllm,fair); --overhead: those timed")
    parser.add_argument("--realistic", action="store_true",
                        help="the realistic multi-tenant grid (bench.realistic): table, fair's worst wait / B, plots")
    parser.add_argument("--large", action="store_true", help="--realistic: the 48-workload grid (default 12)")
    parser.add_argument("--overhead", action="store_true",
                        help="time vLLM's schedule() + update_from_output() per step, stock vs ours (bench.overhead)")
    parser.add_argument("--quick", action="store_true", help="--overhead: the tiny grid (tests)")


def _overhead_args(args: argparse.Namespace) -> argparse.Namespace:
    """`bench.overhead`'s own defaults, with --quick, --out and --policies from `args`."""
    parser = argparse.ArgumentParser()
    overhead.add_arguments(parser)
    ns = parser.parse_args([])
    ns.quick, ns.out, ns.overhead_policies = args.quick, args.out, args.policies
    return ns


def _live_args(args: argparse.Namespace) -> argparse.Namespace:
    """`bench.live`'s settings: the seed's shape scaled to the tiny model."""
    return argparse.Namespace(out=args.out, live_prompts=args.prompts or LIVE_PROMPTS, live_output=LIVE_OUTPUT,
                              live_input_mean=LIVE_INPUT_MEAN, live_starvation_steps=LIVE_STARVATION_STEPS,
                              live_policies=args.policies, start_timeout=START_TIMEOUT, no_plots=args.no_plots,
                              docs_img=args.docs_img)


def main(args: argparse.Namespace) -> int:
    # The live and overhead modes run the installed vLLM, whose traces
    # name their release; --vllm is for the simulated runs.
    name = None if (args.live or args.overhead) else args.vllm
    if name is not None:
        print(f"[bench] simulated runs follow vLLM {name}'s scheduler (--vllm)", flush=True)
    with release(name):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.large and not args.realistic:
        print("error: --large chooses the grid of --realistic; no other mode reads it")
        return 2
    if args.overhead:
        return overhead.main(_overhead_args(args))
    if args.live and importlib.util.find_spec("vllm") is None:
        # Before a minute of simulation, not after: `lora_sched.cli` names the extra.
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
    args.out = args.out or "out/bench"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.live:
        return main_live(_live_args(args))
    if args.realistic:
        return realistic_report(out, large=args.large, plots=not args.no_plots)
    t_start = time.perf_counter()
    report: dict = {"cost_model": DEFAULT.to_dict(), "seed": SEED_ROWS}
    model = DEFAULT
    progress(f"cost model: {model.describe()}")

    cfg = seed_config()
    reqs = seed_requests(args.prompts or SEED_PROMPTS)
    runs = {}
    for p in POLICIES:
        progress(f"simulating {p} on {len(reqs)} requests ...")
        runs[p] = simulate_policy(cfg, reqs, p, model)
        progress(f"  {p}: {len(runs[p].timeline.steps)} steps, reference ran {runs[p].sim_seconds:.2f} s")
    r_vb = ratio(runs, "vllm", "blocking")
    r_fv = ratio(runs, "fair", "vllm")
    report["simulated"] = {"config": cfg.to_dict(), "assign": "random",
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
    rows = starvation_sweep(STREAM_LENGTHS)
    report["starvation"] = rows
    print("\n== Starvation stream (max_loras 2; adapters 1, 2 stream; one adapter-3 request) ==")
    print(f"{'length':>8}{'blocking':>10}{'vllm':>8}{'fair':>8}{'bound B':>9}")
    for r in rows:
        print(f"{r['length']:>8}{r['blocking']:>10}{r['vllm']:>8}{r['fair']:>8}{r['bound']:>9}")

    values = STARVATION_STEPS
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

    if not args.no_plots:
        from lora_sched.bench import plots
        progress("plots ...")
        paths = [plots.wait_distribution(runs, out / "waits.png"),
                 plots.starvation(rows, out / "starvation.png"), plots.tuning(sweep, out / "tuning.png")]
        plots.publish(paths, args.docs_img)
        report["plots"] = [str(p) for p in paths]
    report["wall_s"] = time.perf_counter() - t_start
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    progress(f"done in {report['wall_s']:.1f} s; results in {out / 'results.json'}")
    return 0
