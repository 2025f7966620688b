"""`python -m experiments.cli --field`: the frontier's top policies on vLLM's live server.

Each (workload, policy) pair gets its own CPU vLLM OpenAI server (one at a
time, stopped before the next starts) running the policy's scheduler class
(`conformance.server.SCHEDULER_CLASSES`: `vllm` is vLLM's own scheduler,
recorded; `fair`, `timeslice`, `drainer`, `vtc`, `blocking` the classes of
`lora_sched.scheduler`), driven by vLLM's own benchmark client
(`vllm bench serve`, `bench.vllm_client`) at request rate inf. The table
puts vLLM's own result figures (its `--save-result` JSON) side by side per
workload, with the worst wait before first admission (engine steps) and the
step count read from the trace each server recorded; every trace is also
checked against the properties the policy claims and replayed through its
reference (`conformance.cli.check`). vLLM's printed result blocks are
printed too. The client runs `--live-rounds` times (default 3) on each
server, one run after the other; vLLM's figures are those of the round with
the median request throughput (every round's is printed): on a shared
machine the wall-clock figures move with the load, the engine steps do not.

Workloads (`--family NAME`, repeatable; default `seed`, issue 11's
max_loras-1 family and `adv-drainer-throughput`):

- `seed`: the seed's shape as `bench --live` runs it (`bench.live`):
  random prompts, 8 adapters assigned at random by the client (seeded),
  max_loras 4, but 500 prompts (the seed's count) unless `--live-prompts`;
- any family of `experiments.families.all_families` by name: its config (max_loras,
  seats, token budget) on the server, and its requests as a `custom` dataset
  for vLLM's client, in arrival order, each with its prompt length (the tiny
  model's tokenizer maps a word to a token), its output length
  (`--ignore-eos`) and its adapter (`--lora-modules` one name per request,
  `--lora-assignment round-robin`); `--family-repeat K` sends the family K
  times over (default 16, so that a run lasts long enough to time). All requests
  are sent at once: the family's arrival steps are not replayed (a live
  server has no steps to send at), its order is;
- `realistic`: `live_requests`, the realistic grid's shape
  scaled to the tiny model (Zipf 1.5 over the 8 adapters, 20% base model,
  lognormal lengths clipped to 256; max_loras 2, 32 seats, budget 1024),
  sent by vLLM's client at `REALISTIC_RATE` requests a second with Poisson
  arrivals (`--request-rate`, burstiness 1, seeded) instead of at once;
  `--family-repeat` does not apply. The table adds tail/head
  (`lora_sched.bench.realistic.tail_head`) from the trace's waits, and the reference
  `vllm`'s on the trace's own arrivals.

vLLM refuses configs whose token budget is below the seat count
(`max_num_batched_tokens >= max_num_seqs`); such a family is reported and
skipped. Results: `OUT/live-field/` (traces, logs, vLLM's JSON) and
`--live-results` (default `experiments/results/live-field.json`).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from lora_sched.bench import realistic as R
from lora_sched.bench.live import client_command, live_config, run_policy
from lora_sched.bench.simulate import progress
from lora_sched.conformance.assets import ensure_assets
from lora_sched.spec.config import IN_VLLM, Config
from lora_sched.spec.request import Request

from experiments.families import all_families

SEED = "seed"
# The live server's version (`python -m experiments.live_field --family realistic`): the
# tiny model on vLLM's CPU server has 8 adapters and serves a few dozen steps
# a second, so the mix keeps the shape (Zipf 1.5 over 8 adapters, 20% base
# model, lognormal lengths with sigma 1) scaled down: medians 40 / 24 tokens
# clipped to 256, 32 seats, a 1024-token budget, 2 LoRA slots.
LIVE_ADAPTERS, LIVE_ALPHA, LIVE_BASE, LIVE_REQUESTS, LIVE_SEED = 8, 1.5, 0.2, 300, 2000
LIVE_PROMPT_MEDIAN, LIVE_OUTPUT_MEDIAN, LIVE_CLIP = 40, 24, 256
LIVE_CONFIG = dict(max_loras=2, max_num_seqs=32, max_num_batched_tokens=1024)


def live_requests() -> list[Request]:
    """The live realistic mix, in order (the client draws the arrival times)."""
    rng = random.Random(LIVE_SEED)
    weights = [r ** -LIVE_ALPHA for r in range(1, LIVE_ADAPTERS + 1)]
    return [Request(f"q{i}", 0 if rng.random() < LIVE_BASE else rng.choices(range(1, LIVE_ADAPTERS + 1), weights)[0],
                    R._lognormal(rng, LIVE_PROMPT_MEDIAN, LIVE_CLIP),
                    R._lognormal(rng, LIVE_OUTPUT_MEDIAN, LIVE_CLIP), 1)
            for i in range(LIVE_REQUESTS)]


REALISTIC = "realistic"
REALISTIC_RATE = 16.0  # requests/s: about 0.4 a step at the tiny model's pace, near the LoRA slots' capacity
KNOWN = "known max_loras 1 (issue 11)"
# The seed shape, issue 11's family, and the adversarial family vLLM accepts
# (budget >= seats) on which fair and the drainer lose most to vllm.
FIELD_FAMILIES = (SEED, KNOWN, "adv-drainer-throughput")
FIELD_POLICIES = ("vllm", "fair", "timeslice", "drainer")
FAMILY_REPEAT = 16
ROUNDS = 3
RESULTS = Path(__file__).resolve().parent / "results" / "live-field.json"
BLOCK_SIZE = 32  # vLLM's CPU attention needs multiples of 32 (KV is unlimited: the size changes nothing)
COLUMNS = (("req/s", "request_throughput", "{:.2f}"), ("out tok/s", "output_throughput", "{:.1f}"),
           ("mean TTFT ms", "mean_ttft_ms", "{:.0f}"), ("p99 TTFT ms", "p99_ttft_ms", "{:.0f}"))


class LiveFieldError(ValueError):
    """A workload or policy the live field bench cannot run; the message names it."""


@dataclass
class LiveWorkload:
    name: str
    config: Config
    about: str
    requests: list[Request] | None  # None: the seed shape (vLLM's random dataset)
    rate: float | None = None  # requests/s the client sends at (Poisson); None: all at once


def workload(name: str, *, starvation_steps: int, repeat: int) -> LiveWorkload:
    """The named workload, with the server config it runs under."""
    if name == SEED:
        return LiveWorkload(SEED, live_config(starvation_steps),
                            "the seed's shape: random prompts, 8 adapters at random, max_loras 4", None)
    if name == REALISTIC:
        reqs = live_requests()
        cfg = Config(**LIVE_CONFIG, block_size=BLOCK_SIZE, starvation_steps=starvation_steps)
        return LiveWorkload(REALISTIC, cfg, f"{len(reqs)} requests, Zipf 1.5 over 8 adapters, max_loras "
                            f"{cfg.max_loras}, {cfg.max_num_seqs} seats, Poisson at {REALISTIC_RATE:g} req/s",
                            reqs, REALISTIC_RATE)

    fams = all_families()
    if name not in fams:
        raise LiveFieldError(f"--family: unknown family {name!r}; known: {SEED!r}, {REALISTIC!r}, "
                             + ", ".join(repr(n) for n in fams))
    cfg, reqs = fams[name]
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        raise LiveFieldError(f"--family {name!r}: vLLM refuses max_num_batched_tokens "
                             f"{cfg.max_num_batched_tokens} < max_num_seqs {cfg.max_num_seqs}")
    if max(r.adapter for r in reqs) > 8:
        raise LiveFieldError(f"--family {name!r}: uses adapter {max(r.adapter for r in reqs)}; the assets have 8")
    cfg = Config(max_loras=cfg.max_loras, max_num_seqs=cfg.max_num_seqs,
                 max_num_batched_tokens=cfg.max_num_batched_tokens, chunked_prefill=cfg.chunked_prefill,
                 long_prefill_token_threshold=cfg.long_prefill_token_threshold, block_size=BLOCK_SIZE,
                 starvation_steps=starvation_steps)
    ordered = sorted(reqs, key=lambda r: r.arrival)  # stable: ties keep the family's order
    about = (f"{len(reqs)} requests x {repeat}, max_loras {cfg.max_loras}, {cfg.max_num_seqs} seats, "
             f"{cfg.max_num_batched_tokens}-token budget, all sent at once in arrival order")
    return LiveWorkload(name, cfg, about, ordered * repeat)


def write_dataset(reqs: list[Request], path: Path) -> list[str]:
    """vLLM's `custom` dataset for `reqs` (one JSON line each); returns each request's model name."""
    from lora_sched.conformance.server import _prompt

    with open(path, "w") as f:
        for i, r in enumerate(reqs):
            f.write(json.dumps({"prompt": _prompt(r.prompt_tokens, i), "output_tokens": r.max_tokens}) + "\n")
    return [f"lora{r.adapter}" if r.adapter > 0 else "base" for r in reqs]


def family_client_command(port: int, tokenizer: str, dataset: Path, models: list[str], *, result_dir: Path,
                          result_file: str, rate: float | None = None) -> list[str]:
    """`vllm bench serve` on a custom dataset, one model name per request, in
    order; all at once, or at `rate` requests a second (Poisson, seeded)."""
    base = client_command(port, tokenizer, models, prompts=len(models), input_len=1, output_len=1,
                          result_dir=result_dir, result_file=result_file)
    drop = {"--dataset-name": 1, "--random-input-len": 1, "--random-output-len": 1, "--random-range-ratio": 1,
            "--lora-assignment": 1, "--request-rate": 1}
    cmd: list[str] = []
    i = 0
    while i < len(base):
        if base[i] in drop:
            i += 1 + drop[base[i]]
            continue
        cmd.append(base[i])
        i += 1
    return cmd + ["--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
                  "--skip-chat-template", "--disable-shuffle", "--lora-assignment", "round-robin",
                  "--request-rate", "inf" if rate is None else f"{rate:g}"] + \
        ([] if rate is None else ["--burstiness", "1.0"])


def short_command(cmd: list[str], keep: int = 8) -> list[str]:
    """`cmd` with a long `--lora-modules` list (one name per request) cut to its
    first `keep` names and a count, for the results file."""
    if "--lora-modules" not in cmd:
        return cmd
    i = cmd.index("--lora-modules") + 1
    j = next((k for k in range(i, len(cmd)) if cmd[k].startswith("--")), len(cmd))
    if j - i <= keep:
        return cmd
    return [*cmd[:i + keep], f"... ({j - i} names in all)", *cmd[j:]]


def row(run: dict) -> dict:
    """The table's cells for one run: vLLM's figures and the trace's worst wait."""
    res, tr = run["result"], run["trace"]
    return {**{key: res.get(key) for _, key, _ in COLUMNS}, "completed": res.get("completed"),
            "failed": res.get("failed", 0), "duration_s": res.get("duration_s"),
            "max_wait_steps": tr["max_wait_steps"], "steps": tr["steps"], "busy_steps": tr.get("busy_steps"),
            "vllm_busy_steps": tr.get("vllm_busy_steps"), "tail_head": tr.get("tail_head"),
            "vllm_tail_head": tr.get("vllm_tail_head"), "trace_check_ok": run["trace_check_ok"],
            "rounds_request_throughput": run["rounds_request_throughput"], "median_round": run["median_round"]}


def print_table(name: str, about: str, rows: dict[str, dict]) -> None:
    print(f"\n== live: {name} ({about}) ==")
    head = f"{'policy':11}" + "".join(f"{c:>14}" for c, _, _ in COLUMNS) + \
        f"{'worst wait':>12}{'steps':>8}{'req/s vs vllm':>15}{'vllm steps/steps':>18}{'same arrivals':>15}" \
        f"{'tail/head':>10}{'(ref vllm)':>11}{'trace':>8}"
    print(head + "\n" + "-" * len(head))
    base = rows.get("vllm", {}).get("request_throughput")
    base_steps = rows.get("vllm", {}).get("steps")
    for p, r in rows.items():
        cells = "".join(f"{fmt.format(r[key]) if r.get(key) is not None else '-':>14}" for _, key, fmt in COLUMNS)
        rel = f"{r['request_throughput'] / base:.3f}" if base and r.get("request_throughput") else "-"
        rel_steps = f"{base_steps / r['steps']:.3f}" if base_steps and r["steps"] else "-"
        vb, b = r.get("vllm_busy_steps"), r.get("busy_steps")
        same = f"{vb / b:.3f}" if vb and b else "-"
        th, vth = r.get("tail_head"), r.get("vllm_tail_head")
        print(f"{p:11}{cells}{r['max_wait_steps']:>12}{r['steps']:>8}{rel:>15}{rel_steps:>18}{same:>15}"
              f"{'-' if th is None else f'{th:.2f}':>10}{'-' if vth is None else f'{vth:.2f}':>11}"
              f"{'ok' if r['trace_check_ok'] else 'FAILED':>8}")


def main_live_field(args) -> int:  # noqa: ANN001 - argparse.Namespace
    t_start = time.monotonic()
    names = list(args.family or FIELD_FAMILIES)
    policies = [p for p in (args.live_policies or ",".join(FIELD_POLICIES)).split(",") if p]
    if args.live_rounds < 1 or args.family_repeat < 1:
        print("error: --live-rounds and --family-repeat must be >= 1")
        return 2
    unknown = [p for p in policies if p not in IN_VLLM]
    if unknown:
        print(f"error: --policies: {', '.join(unknown)} not run inside vLLM; choose from {', '.join(IN_VLLM)}")
        return 2
    try:
        loads = [workload(n, starvation_steps=args.live_starvation_steps, repeat=args.family_repeat) for n in names]
    except LiveFieldError as exc:
        print(f"error: {exc}")
        return 2
    out = Path(args.out) / "live-field"
    out.mkdir(parents=True, exist_ok=True)
    progress("assets: the tiny Llama and 8 adapters (generated once, cached in .assets/) ...")
    assets = ensure_assets(8)
    model, modules = str(assets.model), assets.lora_modules()
    report: dict = {"command": "bench --live --field", "policies": policies, "family_repeat": args.family_repeat,
                    "rounds": args.live_rounds,
                    "starvation_steps": args.live_starvation_steps, "workloads": {}}
    bad = []
    for k, wl in enumerate(loads):
        tag = f"w{k}-"
        client = None
        if wl.requests is not None:
            dataset = out / f"{tag}dataset.jsonl"
            models = write_dataset(wl.requests, dataset)

            def client(port: int, result_file: str, dataset: Path = dataset, models: list[str] = models,
                       rate: float | None = wl.rate) -> list[str]:
                return family_client_command(port, model, dataset, models, result_dir=out, result_file=result_file,
                                             rate=rate)
        runs = {}
        for p in policies:
            runs[p] = run_policy(p, wl.config, args, model, modules, out, tag=tag, client=client,
                                 rounds=args.live_rounds)
            if runs[p]["result"]["failed"] or not runs[p]["trace_check_ok"]:
                bad.append(f"{wl.name}/{p}")
        report["workloads"][wl.name] = {
            "about": wl.about, "config": wl.config.to_dict(),
            "requests": len(wl.requests) if wl.requests is not None else args.live_prompts,
            "rows": {p: row(r) for p, r in runs.items()},
            "vllm_blocks": {p: r["vllm_block"] for p, r in runs.items()},
            "trace_check": {p: r["trace_check"] for p, r in runs.items()},
            "server_start_s": {p: r["server_start_s"] for p, r in runs.items()},
            "client": {p: short_command(r["client"]) for p, r in runs.items()}}
    for name, w in report["workloads"].items():
        for p, block in w["vllm_blocks"].items():
            print(f"== vLLM's result block, live {p}, {name} ==\n{block}\n")
    for name, w in report["workloads"].items():
        print_table(name, w["about"], w["rows"])
    report["total_s"] = time.monotonic() - t_start
    print(f"\n(vLLM's figures: the round with the median req/s of {args.live_rounds} on one server; worst wait: "
          f"engine steps from arrival to first admission, from the trace the server recorded over all rounds; "
          f"vllm steps/steps: engine steps to serve all rounds, vllm's server's over the policy's (the machine's "
          f"load moves it: the client's burst reaches each server over a different number of steps); same "
          f"arrivals: the busy steps of the reference vllm on this trace's own arrivals over the policy's busy "
          f"steps (the rules alone); trace: its claimed properties and its replay through the reference; "
          f"starvation_steps "
          f"{args.live_starvation_steps}; {report['total_s']:.0f} s in all)")
    for name, w in report["workloads"].items():
        print(f"req/s by round, {name}: " + "; ".join(
            f"{p} " + ", ".join(f"{x:.1f}" for x in r["rounds_request_throughput"]) for p, r in w["rows"].items()))
    if bad:
        print("FAILED runs (client failures or trace check): " + ", ".join(bad))
    results = Path(args.live_results) if args.live_results else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(report, indent=1, default=str) + "\n")
    progress(f"done in {report['total_s']:.0f} s; results in {results}")
    return 1 if bad else 0


if __name__ == "__main__":
    from experiments.cli import run_mode

    raise SystemExit(run_mode("--field"))
