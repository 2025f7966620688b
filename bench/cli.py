"""`lora-sched bench`: the seed's table, reproduced and extended to `fair`.

Simulated by default (reference policies + the cost model, well under a
minute); `--speed` adds the reference-vs-vLLM scheduler speed (imports vLLM,
which alone takes tens of seconds); `--live` runs the policies inside the CPU
vLLM server, driven by vLLM's own benchmark client (`bench.live`). Results go
to `--out` as JSON and PNG; stdout gets the tables.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lora_sched.bench.costmodel import DEFAULT, SEED_BLOCKING, SEED_PR, SEED_RATIO, SEED_ROWS
from lora_sched.bench.live import LIVE_INPUT_MEAN, LIVE_OUTPUT, LIVE_PROMPTS, LIVE_STARVATION_STEPS
from lora_sched.bench.simulate import progress, ratio, seed_config, seed_requests, simulate_policy
from lora_sched.bench.sweeps import STARVATION_STEPS, STREAM_LENGTHS, starvation_sweep, tuning_sweep
from lora_sched.bench.table import table
from lora_sched.spec.config import POLICIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/bench", help="output directory (JSON + plots)")
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
    live = parser.add_argument_group("live mode (--live)")
    live.add_argument("--live-prompts", type=int, default=LIVE_PROMPTS, help="requests per policy (--num-prompts)")
    live.add_argument("--live-output", type=int, default=LIVE_OUTPUT,
                      help="output tokens per request (--random-output-len, with --ignore-eos)")
    live.add_argument("--live-input-mean", type=int, default=LIVE_INPUT_MEAN,
                      help="mean prompt tokens (--random-input-len; the seed: 249)")
    live.add_argument("--live-starvation-steps", type=int, default=LIVE_STARVATION_STEPS,
                      help="fair's starvation_steps")
    live.add_argument("--live-policies", default="blocking,vllm,fair")
    live.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for each server")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.live:
        from lora_sched.bench.live import main_live

        return main_live(args)
    t_start = time.perf_counter()
    report: dict = {"cost_model": DEFAULT.to_dict(), "seed": SEED_ROWS}
    model = DEFAULT
    if args.calibrate:
        from lora_sched.bench.simulate import calibrate
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
        from lora_sched.bench.refspeed import reference_speed, vllm_speed
        progress("reference speed: importing vLLM and timing its Scheduler ...")
        ref = reference_speed(cfg, reqs)
        vl = vllm_speed(cfg, reqs)
        report["speed"] = {"reference": {"steps": ref.steps, "seconds": ref.seconds,
                                         "steps_per_s": ref.steps_per_s},
                           "vllm": {"steps": vl.steps, "seconds": vl.seconds, "steps_per_s": vl.steps_per_s},
                           "ratio_reference_over_vllm": ref.steps_per_s / vl.steps_per_s}
        print(f"\nreference `vllm` policy: {ref.steps_per_s:.0f} steps/s ({ref.steps} steps);"
              f" vLLM Scheduler: {vl.steps_per_s:.0f} steps/s ({vl.steps} steps);"
              f" ratio {ref.steps_per_s / vl.steps_per_s:.2f}x")

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
