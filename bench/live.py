"""`lora-sched bench --live`: the seed's shape on the tiny model, inside vLLM.

Each policy runs as a scheduler class of vLLM's OpenAI server on the CPU
(`conformance.server.LiveServer`: `vllm` is conformance's recording class,
`blocking` and `fair` the classes of `lora_sched.scheduler`), one server per
policy, all on the same generated model and adapters (`conformance.assets`).
The workload is the seed's, scaled down: 8 adapters round robin, max_loras 4,
`seed_requests`' lognormal prompt lengths rescaled to a smaller total, short
outputs, request rate inf. The client sends every request at once as a
streaming completion (`ignore_eos`, so each gives exactly `max_tokens`
tokens) and stamps every chunk on arrival, as benchmark_serving does:

- TTFT: first chunk minus send time; ITL: every gap between chunks, pooled;
  TPOT: (latency - TTFT) / (output tokens - 1), per request;
- duration: first send to last chunk; throughputs over that duration.

The server's recorded trace gives, per adapter, the wait (in engine steps)
between a request's arrival and its first admission, and for `fair` how
often the guard acted (`policy.fair.FairHolds` replayed on the trace).
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from bench.simulate import POLICIES, _stats, progress, seed_requests
from policy.driver import Workload
from policy.fair import FairHolds
from spec.config import Config
from spec.properties import StepView
from spec.request import Request

MAX_MODEL_LEN = 512  # conformance.server starts vLLM with --max-model-len 512
LIVE_PROMPTS = 200
LIVE_OUTPUT = 32
LIVE_INPUT_MEAN = 60  # tokens per prompt on average (the seed: 249)
LIVE_STARVATION_STEPS = 16  # the value the simulated tuning recommends


@dataclass
class RequestTimeline:
    """One request as the client saw it (monotonic seconds)."""

    id: str
    adapter: int
    prompt_tokens: int
    sent: float
    chunks: list[float] = field(default_factory=list)  # receive time of each non-empty chunk
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunks)


def live_block(reqs: list[RequestTimeline]) -> dict[str, float]:
    """benchmark_serving's result block from per-request client timelines."""
    done = [r for r in reqs if r.ok]
    start = min((r.sent for r in reqs), default=0.0)
    duration = max((r.chunks[-1] for r in done), default=start) - start
    ttft, tpot, itl = [], [], []
    for r in done:
        ttft.append(r.chunks[0] - r.sent)
        if r.output_tokens > 1:
            tpot.append((r.chunks[-1] - r.chunks[0]) / (r.output_tokens - 1))
        itl.extend(b - a for a, b in zip(r.chunks, r.chunks[1:], strict=False))
    in_tokens = sum(r.prompt_tokens for r in done)
    out_tokens = sum(r.output_tokens for r in done)
    d = duration if duration > 0 else float("nan")
    block = {"completed": len(done), "failed": len(reqs) - len(done), "duration_s": duration,
             "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
             "request_throughput": len(done) / d, "output_throughput": out_tokens / d,
             "total_token_throughput": (in_tokens + out_tokens) / d}
    return block | _stats("ttft", ttft) | _stats("tpot", tpot) | _stats("itl", itl)


def adapter_waits(requests: dict[str, Request], first_admitted: dict[str, int]) -> dict[int, dict[str, float]]:
    """Per adapter: mean and max steps from arrival to first admission."""
    per: dict[int, list[int]] = {}
    for rid, req in requests.items():
        if rid in first_admitted:
            per.setdefault(req.adapter, []).append(first_admitted[rid] - req.arrival)
    return {a: {"requests": len(v), "mean_wait_steps": float(statistics.fmean(v)),
                "max_wait_steps": int(max(v))} for a, v in sorted(per.items())}


def trace_summary(path: Path) -> dict:
    """Steps, per-adapter waits and, for `fair`, the guard's activity, from a recorded trace."""
    from spec.check import observe_trace
    from spec.observe import Observer
    from spec.trace import read_trace

    trace = read_trace(path, allow_truncated_tail=True)
    steps = trace.steps()
    first: dict[str, int] = {}
    for rec in steps:
        for rid in rec.admitted:
            first.setdefault(rid, rec.step)
    out: dict = {"steps": len(steps), "adapters": adapter_waits(trace.requests(), first),
                 "max_wait_steps": max((first[r] - q.arrival for r, q in trace.requests().items()
                                        if r in first), default=0)}
    if trace.config.policy == "fair":
        holds = _CountingHolds(trace.config)
        for _ in observe_trace(trace, Observer(trace.config, holds)):
            pass
        out["starving_steps"] = len(holds.starving)
        out["guard_steps"] = len(holds.held)
        out["starvation_steps"] = trace.config.starvation_steps
    return out


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


def live_requests(n: int = LIVE_PROMPTS, *, output: int = LIVE_OUTPUT,
                  input_mean: int = LIVE_INPUT_MEAN) -> list[Request]:
    """seed_requests' prompts at `input_mean` tokens on average, clipped to fit
    the server's context (prompt + output <= 512), all arriving at once."""
    cap = MAX_MODEL_LEN - output - 8
    reqs = seed_requests(n, output=output, total_input=n * input_mean)
    return [replace(r, id=f"live{i}", prompt_tokens=min(cap, r.prompt_tokens), arrival=1)
            for i, r in enumerate(reqs)]


def drive_streaming(port: int, reqs: list[Request], *, show: bool = True) -> list[RequestTimeline]:
    """Send every request at once (rate inf), streamed; stamp each chunk."""
    from openai import OpenAI

    from conformance.server import _prompt

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=900.0)
    lock = threading.Lock()
    done = [0]
    barrier = threading.Barrier(len(reqs))

    def one(i: int) -> RequestTimeline:
        req = reqs[i]
        prompt = _prompt(req.prompt_tokens, i)
        model = f"lora{req.adapter}" if req.adapter > 0 else "base"
        barrier.wait()
        tl = RequestTimeline(req.id, req.adapter, req.prompt_tokens, time.monotonic())
        try:
            stream = client.completions.create(
                model=model, prompt=prompt, max_tokens=req.max_tokens, temperature=0.0, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            for chunk in stream:
                now = time.monotonic()
                if chunk.choices and chunk.choices[0].text:
                    tl.chunks.append(now)
                if chunk.usage is not None:
                    tl.output_tokens = chunk.usage.completion_tokens
                    tl.prompt_tokens = chunk.usage.prompt_tokens
            if not tl.output_tokens:
                tl.output_tokens = len(tl.chunks)
        except Exception as exc:  # noqa: BLE001 - counted as a failed request
            tl.error = f"{type(exc).__name__}: {exc}"
        with lock:
            done[0] += 1
            if show:
                bar = "#" * (30 * done[0] // len(reqs))
                print(f"\r  [{bar:<30}] {done[0]}/{len(reqs)} requests", end="", file=sys.stderr, flush=True)
        return tl

    with ThreadPoolExecutor(max_workers=len(reqs)) as pool:
        out = list(pool.map(one, range(len(reqs))))
    if show:
        print(file=sys.stderr)
    return out


def run_policy(policy: str, cfg: Config, reqs: list[Request], model: str, modules: list[str],
               out: Path, start_timeout: float) -> dict:
    """One server with `policy`'s scheduler class: start, drive, stop, summarize."""
    from conformance.cli import check
    from conformance.scenarios import Scenario
    from conformance.server import LiveServer

    scenario = Scenario(f"bench-{policy}", replace(cfg, policy=policy), Workload(list(reqs)),
                        "seed shape on the tiny model, rate inf")
    trace = out / f"live-{policy}.jsonl"
    server = LiveServer(model, modules, policy, scenario, trace, out / f"live-{policy}-server.log")
    t0 = time.monotonic()
    try:
        progress(f"live {policy}: starting vLLM on 127.0.0.1:{server.port} (log {server.log}) ...")
        server.start(timeout=start_timeout)
        started = time.monotonic() - t0
        progress(f"live {policy}: server ready after {started:.0f} s; sending {len(reqs)} requests at once")
        timelines = drive_streaming(server.port, reqs)
    finally:
        server.stop()
    block = live_block(timelines)
    summary = trace_summary(trace)
    ok, lines = check(trace, policy, scenario)
    errors = [t.error for t in timelines if t.error][:5]
    progress(f"live {policy}: {block['completed']} done, {block['failed']} failed in "
             f"{block['duration_s']:.1f} s, {summary['steps']} engine steps; trace check "
             f"{'ok' if ok else 'FAILED'}")
    return {"policy": policy, "server_start_s": started, "result": block, "trace": summary,
            "trace_path": str(trace), "trace_check_ok": ok, "trace_check": lines, "errors": errors,
            "timelines": [asdict(t) for t in timelines]}


def main_live(args) -> int:  # noqa: ANN001 - argparse.Namespace
    from bench.cli import table
    from conformance.assets import ensure_assets

    t_start = time.monotonic()
    out = Path(args.out) / "live"
    out.mkdir(parents=True, exist_ok=True)
    cfg = live_config(args.live_starvation_steps)
    reqs = live_requests(args.live_prompts, output=args.live_output, input_mean=args.live_input_mean)
    progress("assets: the tiny Llama and 8 adapters (generated once, cached in .assets/) ...")
    assets = ensure_assets(8)
    policies = [p for p in args.live_policies.split(",") if p] or list(POLICIES)
    runs: dict[str, dict] = {}
    for p in policies:
        runs[p] = run_policy(p, cfg, reqs, str(assets.model), assets.lora_modules(), out, args.start_timeout)
    total = time.monotonic() - t_start

    def thr(p: str) -> float:
        return runs[p]["result"]["request_throughput"] if p in runs else float("nan")

    r_vb = thr("vllm") / thr("blocking")
    r_fv = thr("fair") / thr("vllm")
    print(f"== Serving benchmark, live: tiny Llama on vLLM's CPU server, {len(reqs)} prompts "
          f"({sum(r.prompt_tokens for r in reqs)} input tokens), {args.live_output} output tokens, "
          f"8 adapters round robin, max_loras {cfg.max_loras}, max_num_seqs {cfg.max_num_seqs}, "
          f"max_num_batched_tokens {cfg.max_num_batched_tokens}, rate inf ==")
    print(table({f"live {p}": r["result"] for p, r in runs.items()}))
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
    report = {"config": cfg.to_dict(), "prompts": len(reqs), "output_tokens": args.live_output,
              "input_tokens": sum(r.prompt_tokens for r in reqs), "runs": runs,
              "ratio_vllm_over_blocking": r_vb, "ratio_fair_over_vllm": r_fv, "total_s": total}
    if not args.no_plots:
        from bench import plots

        paths = [plots.live(runs, out / "live.png")]
        plots.publish(paths, args.docs_img)
        report["plots"] = [str(p) for p in paths]
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    progress(f"done in {total:.0f} s; results in {out / 'results.json'}")
    bad = [p for p, r in runs.items() if r["result"]["failed"] or not r["trace_check_ok"]]
    return 1 if bad else 0


def ttft_quantiles(runs: dict[str, dict]) -> dict[str, np.ndarray]:
    """Sorted TTFTs (s) per policy, for the plot."""
    return {p: np.sort([t["chunks"][0] - t["sent"] for t in r["timelines"] if t["chunks"] and not t["error"]])
            for p, r in runs.items()}
