"""`lora-sched bench --live`: the seed's benchmark on the tiny model, inside vLLM.

One CPU vLLM OpenAI server per policy (`conformance.server.LiveServer`), on
the generated model and adapters (`conformance.assets`), driven by `vllm
bench serve` (`bench.vllm_client`) with the seed's shape scaled down. The
table is vLLM's result block next to the seed's columns; the recorded trace
gives each adapter's wait in steps before first admission and, for `fair`,
how often the guard acted (`policy.check.FairHolds`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lora_sched.bench.popularity import tail_head_ratio
from lora_sched.bench.simulate import progress
from lora_sched.bench.table import ROWS, table
from lora_sched.conformance.assets import ensure_assets
from lora_sched.conformance.cli import check
from lora_sched.policy.check import FairHolds, observe_trace
from lora_sched.policy.costmodel import SEED_BLOCKING, SEED_PR
from lora_sched.policy.driver import Workload, run
from lora_sched.policy.scenarios import Scenario
from lora_sched.spec.config import POLICIES, Config
from lora_sched.spec.observe import Observer
from lora_sched.spec.properties import StepView
from lora_sched.spec.request import Request
from lora_sched.spec.trace import Abort, Trace, read_trace

LIVE_PROMPTS = 200
LIVE_OUTPUT = 32
LIVE_INPUT_MEAN = 60  # tokens per prompt on average (the seed: 249)
# vLLM's random dataset: prompt lengths uniform in mean * [0.5, 1.5], output lengths exact.
LIVE_RANGE_RATIO = '{"input": 0.5, "output": 0.0}'
LIVE_STARVATION_STEPS = 16  # the value the simulated tuning recommends
LIVE_SEED = 0
RESULT_BLOCK_START = " Serving Benchmark Result "


def adapter_waits(requests: dict[str, Request], first_admitted: dict[str, int]) -> dict[int, dict[str, float]]:
    """Per adapter: mean and max steps from arrival to first admission."""
    per: dict[int, list[int]] = {}
    for rid, req in requests.items():
        if rid in first_admitted:
            per.setdefault(req.adapter, []).append(first_admitted[rid] - req.arrival)
    return {a: {"requests": len(v), "mean_wait_steps": float(statistics.fmean(v)),
                "max_wait_steps": int(max(v))} for a, v in sorted(per.items())}


def trace_summary(path: Path) -> dict:
    """Steps, per-adapter waits, tail/head and, for `fair`, the guard's activity, from a recorded trace.

    Also `busy_steps` (steps that scheduled something) and `vllm_busy_steps`
    (with `vllm_tail_head`): the reference `vllm`'s on the trace's own
    arrivals, so that the rules are compared on the same arrivals."""
    trace = read_trace(path, allow_truncated_tail=True)
    steps = trace.steps()
    first: dict[str, int] = {}
    for rec in steps:
        for rid in rec.admitted:
            first.setdefault(rid, rec.step)
    reqs = trace.requests()
    waits = {r: first[r] - q.arrival for r, q in reqs.items() if r in first}
    adapter_of = {r: q.adapter for r, q in reqs.items()}
    ref = _vllm_same_arrivals(trace)
    out: dict = {"steps": len(steps), "adapters": adapter_waits(reqs, first),
                 "max_wait_steps": max(waits.values(), default=0),
                 "busy_steps": sum(1 for rec in steps if rec.scheduled),
                 "vllm_busy_steps": None if ref is None else ref[0],
                 "tail_head": tail_head_ratio(waits, adapter_of, trace.config.max_loras),
                 "vllm_tail_head": None if ref is None else tail_head_ratio(ref[1], adapter_of,
                                                                            trace.config.max_loras)}
    if trace.config.policy == "fair":
        holds = _CountingHolds(trace.config)
        for _ in observe_trace(trace, Observer(trace.config, holds)):
            pass
        out["starving_steps"] = len(holds.starving)
        out["guard_steps"] = len(holds.held)
        out["starvation_steps"] = trace.config.starvation_steps
    return out


def _vllm_same_arrivals(trace: Trace) -> tuple[int, dict[str, int]] | None:
    """Busy steps and waits of the reference `vllm` on the trace's requests and
    arrival steps (aborts are not replayed: None when the trace has any, or is cut)."""
    if not trace.complete or any(isinstance(e, Abort) for e in trace.events):
        return None
    res = run(replace(trace.config, policy="vllm"), Workload(list(trace.requests().values())))
    return sum(1 for rec in res.records if rec.scheduled), res.waits()


class _CountingHolds(FairHolds):
    """FairHolds that remembers the steps with an r* and those with a victim adapter held."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.starving: set[int] = set()
        self.held: set[int] = set()

    def begin(self, view: StepView) -> str | None:
        star = super().begin(view)
        if star is not None:
            self.starving.add(view.rec.step)
            if self.guard.victims:  # rule 4: a victim adapter is held for r*
                self.held.add(view.rec.step)
        return star


def live_config(starvation_steps: int = LIVE_STARVATION_STEPS) -> Config:
    """The seed's flags scaled with the workload: max_loras 4 (as the seed),
    max_num_seqs 64, max_num_batched_tokens 1024; block size 32 (vLLM's CPU
    attention needs multiples of 32)."""
    return Config(max_loras=4, max_num_seqs=64, max_num_batched_tokens=1024, block_size=32,
                  starvation_steps=starvation_steps)


def client_command(port: int, tokenizer: str, lora_names: list[str], *, prompts: int, input_len: int,
                   output_len: int, result_dir: Path, result_file: str) -> list[str]:
    """`vllm bench serve`'s command line for one server (run as `bench.vllm_client`)."""
    return [sys.executable, "-m", "lora_sched.bench.vllm_client",
            "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
            "--model", "base", "--tokenizer", tokenizer,
            "--dataset-name", "random", "--num-prompts", str(prompts),
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--random-range-ratio", LIVE_RANGE_RATIO, "--ignore-eos",
            "--request-rate", "inf", "--seed", str(LIVE_SEED),
            "--lora-modules", *lora_names, "--lora-assignment", "random",
            "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "99",
            "--ready-check-timeout-sec", "0", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_file]


def result_block(result: dict) -> dict[str, float]:
    """The table's cells from vLLM's `--save-result` JSON (its keys, `duration` -> `duration_s`)."""
    block = {key: result[key] for _, key, _ in ROWS if key in result}
    block["duration_s"] = result["duration"]
    block["failed"] = result.get("failed", 0)
    return block


def printed_block(stdout: str) -> str:
    """vLLM's own printed result block, cut from the client's output."""
    lines = stdout.splitlines()
    start = next((i for i, ln in enumerate(lines) if RESULT_BLOCK_START in ln), None)
    if start is None:
        return ""
    end = next((i for i in range(len(lines) - 1, start, -1) if set(lines[i].strip()) == {"="}), len(lines) - 1)
    return "\n".join(lines[start:end + 1])


def run_policy(policy: str, cfg: Config, args, model: str, modules: list[str], out: Path, *,  # noqa: ANN001
               tag: str = "", client: Callable[[int, str], list[str]] | None = None, rounds: int = 1) -> dict:
    """One server with `policy`'s scheduler class: start, drive with vLLM's client, stop, summarize.

    `client(port, result_file)` builds the client's command line (default
    `client_command`); `tag` prefixes the file names. With `rounds` > 1 the
    client runs that many times on the same server; the round with the median
    request throughput is reported (each is kept), the trace covers all."""
    from lora_sched.conformance.server import LiveServer, log_tail

    scenario = Scenario(f"bench-{tag}{policy}", replace(cfg, policy=policy), Workload([]),
                        "the seed's benchmark on the tiny model, vLLM's client, rate inf")
    stem = f"live-{tag}{policy}"
    trace = out / f"{stem}.jsonl"
    server = LiveServer(model, modules, policy, scenario, trace, out / f"{stem}-server.log")
    names = [m.split("=", 1)[0] for m in modules]
    files = [f"{stem}-vllm.json"] if rounds == 1 else [f"{stem}-vllm-r{k + 1}.json" for k in range(rounds)]
    if client is None:
        def client(port: int, result_file: str) -> list[str]:
            return client_command(port, model, names, prompts=args.live_prompts, input_len=args.live_input_mean,
                                  output_len=args.live_output, result_dir=out, result_file=result_file)
    cmds = [client(server.port, f) for f in files]
    client_log = out / f"{stem}-client.log"
    t0 = time.monotonic()
    procs = []
    try:
        progress(f"live {policy}: starting vLLM on 127.0.0.1:{server.port} (log {server.log}) ...")
        server.start(timeout=args.start_timeout)
        started = time.monotonic() - t0
        progress(f"live {policy}: server ready after {started:.0f} s; vLLM's benchmark client "
                 f"({rounds} round{'s' if rounds > 1 else ''}, log {client_log}) ...")
        for cmd in cmds:
            procs.append(subprocess.run(cmd, capture_output=True, text=True, timeout=args.start_timeout + 900))
            if procs[-1].returncode != 0:
                break
    finally:
        server.stop()
    client_log.write_text("".join(p.stdout + p.stderr for p in procs))
    if procs[-1].returncode != 0:
        raise RuntimeError(f"vLLM's benchmark client exited with {procs[-1].returncode}; log {client_log}:\n"
                           f"{log_tail(client_log)}")
    results = [json.loads((out / f).read_text()) for f in files]
    pick = sorted(range(rounds), key=lambda k: results[k]["request_throughput"])[rounds // 2]
    result, proc, cmd = results[pick], procs[pick], cmds[pick]
    block = result_block(result)
    summary = trace_summary(trace)
    ok, lines = check(trace, policy, scenario)
    errors = [e for r in results for e in r.get("errors", []) if e][:5]
    failed = sum(r.get("failed", 0) for r in results)
    rates = ", ".join(f"{r['request_throughput']:.1f}" for r in results)
    progress(f"live {policy}: {block['completed']} done, {failed} failed; req/s by round {rates}; "
             f"{summary['steps']} engine steps; trace check {'ok' if ok else 'FAILED'}")
    return {"policy": policy, "server_start_s": started, "result": {**block, "failed": failed},
            "vllm_block": printed_block(proc.stdout), "rounds_request_throughput": [r["request_throughput"]
                                                                                 for r in results],
            "median_round": pick + 1,
            "ttfts": [t for t, e in zip(result["ttfts"], result["errors"], strict=True) if not e],
            "input_tokens": result["total_input_tokens"], "trace": summary, "trace_path": str(trace),
            "trace_check_ok": ok, "trace_check": lines, "errors": errors, "client": cmd}


def main_live(args) -> int:  # noqa: ANN001 - argparse.Namespace
    t_start = time.monotonic()
    out = Path(args.out) / "live"
    out.mkdir(parents=True, exist_ok=True)
    cfg = live_config(args.live_starvation_steps)
    progress("assets: the tiny Llama and 8 adapters (generated once, cached in .assets/) ...")
    assets = ensure_assets(8)
    policies = [p for p in (args.live_policies or "").split(",") if p] or list(POLICIES)
    runs: dict[str, dict] = {}
    for p in policies:
        runs[p] = run_policy(p, cfg, args, str(assets.model), assets.lora_modules(), out)
    total = time.monotonic() - t_start

    def thr(p: str) -> float:
        return runs[p]["result"]["request_throughput"] if p in runs else float("nan")

    r_vb = thr("vllm") / thr("blocking")
    r_fv = thr("fair") / thr("vllm")
    for p, r in runs.items():
        print(f"== vLLM's result block, live {p} ==\n{r['vllm_block']}\n")
    print(f"== Serving benchmark, live: tiny Llama on vLLM's CPU server, driven by vLLM's own client "
          f"(vllm bench serve): {args.live_prompts} random prompts of {args.live_input_mean} tokens on average, "
          f"{args.live_output} output tokens, 8 adapters, max_loras {cfg.max_loras}, max_num_seqs "
          f"{cfg.max_num_seqs}, max_num_batched_tokens {cfg.max_num_batched_tokens}, rate inf; seed columns "
          "from vLLM PR #15422 ==")
    cols = {"seed main V1": SEED_BLOCKING, **({"live blocking": runs["blocking"]["result"]} if "blocking" in runs
                                              else {}),
            "seed PR #15422": SEED_PR, **{f"live {p}": r["result"] for p, r in runs.items() if p != "blocking"}}
    print(table(cols))
    print(f"\nthroughput vllm/blocking: live {r_vb:.2f}x (seed 6.73x); "
          f"fair/vllm: live {r_fv:.3f} (starvation_steps {cfg.starvation_steps})")
    print("\nwait before first admission per adapter (engine steps, mean/max), from the recorded traces:")
    for p, r in runs.items():
        cells = "  ".join(f"a{a}: {v['mean_wait_steps']:.0f}/{v['max_wait_steps']}"
                          for a, v in r["trace"]["adapters"].items())
        print(f"  {p:9} {cells}   ({r['trace']['steps']} steps)")
    if "fair" in runs:
        t = runs["fair"]["trace"]
        print(f"fair's guard: a starving request on {t['starving_steps']} steps, a victim adapter held on "
              f"{t['guard_steps']} of {t['steps']} steps")
    for p, r in runs.items():
        if r["errors"]:
            print(f"{p}: first errors: {r['errors']}")
        if not r["trace_check_ok"]:
            print(f"{p}: trace check FAILED: " + "; ".join(r["trace_check"]))
    print(f"\nlive bench took {total:.0f} s in all (server starts: "
          + ", ".join(f"{p} {r['server_start_s']:.0f} s" for p, r in runs.items()) + ")")
    report = {"config": cfg.to_dict(), "prompts": args.live_prompts, "output_tokens": args.live_output,
              "input_len": args.live_input_mean, "runs": runs, "ratio_vllm_over_blocking": r_vb,
              "ratio_fair_over_vllm": r_fv, "total_s": total}
    if not args.no_plots:
        from lora_sched.bench import plots

        paths = [plots.live(runs, out / "live.png")]
        plots.publish(paths, args.docs_img)
        report["plots"] = [str(p) for p in paths]
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    progress(f"done in {total:.0f} s; results in {out / 'results.json'}")
    bad = [p for p, r in runs.items() if r["result"]["failed"] or not r["trace_check_ok"]]
    return 1 if bad else 0
