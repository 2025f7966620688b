#!/usr/bin/env python3
"""vLLM 0.34: the cache-aware admission window breaks FIFO within an adapter
and starves a cold request.

Usage:
    python vllm-0.34-cache-aware-admission.py MODEL_DIR [--window N] [--streams 10,20,40] [--fixed]

MODEL_DIR is any local Hugging Face model directory (a config.json is all the
scheduler reads; no weights are loaded, nothing is downloaded). The script
builds vLLM's own `Scheduler` in-process on CPU (no model runner: it fakes the
runner's output, one token per request per step), with prefix caching on, the
FCFS policy, LoRA (max_loras 2) and `--cache-aware-admission-window N`
(default 8; `--window 0` is vLLM's default, strict arrival order). The KV
cache is sized small (block_size 16, 60 usable blocks) so that a resident
512-token request keeps usage above `cache_aware_admission_threshold` (0.5,
the default), which is when the window engages.

Exit status: 1 when the hazard reproduces (FIFO within an adapter broken, or
a cold request's wait growing with the length of a stream of cached
arrivals), 0 when it does not (also on a vLLM without the window), so the
script doubles as the regression test of a fix. `--fixed` replaces
`Scheduler._reorder_waiting_by_cached_prefix` with the proposed fix below and
must exit 0 with the window on.

The code (vllm/v1/core/sched/scheduler.py, 0.34.0)
--------------------------------------------------
* 428-438: `self.cache_aware_window` is the configured window when the policy
  is FCFS and prefix caching is on, else 0.
* 1066-1068: in `schedule()`, before the waiting scan (and unless prefills are
  deferred), `self._reorder_waiting_by_cached_prefix()`.
* 2790-2828: `_reorder_waiting_by_cached_prefix`: when KV usage is at least the
  threshold (2801) and at least 2 of the first N entries of `waiting` are fresh
  WAITING requests (2804-2812), it sorts those entries by
  `kv_cache_manager.get_num_cached_tokens` descending, arrival order breaking
  ties only (2814-2817, `sorted(slots, key=lambda i: (-cached[i], i))`), and
  re-inserts the head of the queue in that order (2821-2828).

The sort key has no adapter and no age in it. Block hashes carry the LoRA
(`kv_cache_utils._gen_lora_extra_hash_keys`: the adapter's name and path), so
a request's cached length depends on its adapter: a request of an adapter
whose prefix is resident goes ahead, and one of another adapter, even with the
very same tokens, is cold.

Expected vs actual
------------------
(1) FIFO within an adapter. Expected: two requests of the same adapter are
    admitted in arrival order (FCFS; "reordering among peers" per the
    docstring). Actual: an older cold request of adapter 1 is admitted after a
    newer request of adapter 1 that has a cached prefix.
(2) Bounded wait. Expected: a cold request is admitted at the first free slot
    after the requests that arrived before it, whatever arrives after it (its
    wait does not depend on later arrivals). Actual: every later cached
    arrival that is in the window when a slot frees is admitted first; the
    cold request stays at the back of the window and waits until the stream
    of cached arrivals ends, about two steps per arrival here. No bound holds.

Measured (0.34.0, window 8): (1) `old` arrives at step 2, `new` at step 3;
`new` is admitted at step 5, `old` at step 7 (window 0: `old` 5, `new` 7).
(2) the cold request waits 20, 40, 80 steps behind streams of 10, 20, 40
cached arrivals, every one of them admitted ahead of it (window 0: 0 steps
at every length; the fix below: 8 steps at every length).

Proposed fix
------------
Keep the reorder, but (a) never move a request past an older request of its
own adapter (per-adapter FIFO: the candidates at each position are the oldest
remaining request of each adapter), and (b) age: a request that has been
passed over (a younger request placed ahead of it) `max_passes` times becomes
a barrier that nothing moves past, so a cold request is passed over at most
`max_passes` times and then admitted in arrival order. `fixed_reorder` below is
that code (max_passes 4 here; upstream, a `SchedulerConfig` field next to the
window). Its test is this script: `--fixed` with the window on exits 0 (FIFO
kept, the wait the same at every stream length), the stock code exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

BLOCK = 16
NUM_BLOCKS = 61  # 60 usable + vLLM's null block; the resident request holds 33 (usage 0.55)
MAX_MODEL_LEN = 2048
MAX_PASSES = 4  # the fix's bound on how often a request may be passed over
TOKEN = 7  # the token every fake step samples


def _has_window() -> bool:
    from vllm.config import SchedulerConfig

    return "cache_aware_admission_window" in {f.name for f in dataclasses.fields(SchedulerConfig)}


def fixed_reorder(self) -> None:
    """The proposed `Scheduler._reorder_waiting_by_cached_prefix`: deepest
    cached prefix first, but never past an older request of the same adapter,
    and never past a request already passed over MAX_PASSES times."""
    from vllm.v1.request import RequestStatus

    if len(self.waiting) < 2 or self.kv_cache_manager.usage < self.cache_aware_threshold:
        return
    head = list(itertools.islice(self.waiting, self.cache_aware_window))
    slots = [i for i, r in enumerate(head)
             if r.status == RequestStatus.WAITING and not r.num_computed_tokens]
    if len(slots) < 2:
        return
    cached = {i: self.kv_cache_manager.get_num_cached_tokens(head[i]) for i in slots}

    def adapter(i: int) -> int:
        lora = head[i].lora_request
        return lora.lora_int_id if lora else 0

    remaining, order = list(slots), []
    while remaining:
        candidates, seen = [], set()
        for i in remaining:  # arrival order
            if adapter(i) not in seen:  # (a) the oldest of each adapter only
                seen.add(adapter(i))
                candidates.append(i)
            if getattr(head[i], "cache_aware_passes", 0) >= MAX_PASSES:
                break  # (b) an aged request: nothing moves past it
        pick = min(candidates, key=lambda i: (-cached[i], i))
        order.append(pick)
        remaining.remove(pick)
    if order == slots:
        return
    for pos, i in enumerate(order):
        if any(j > i for j in order[:pos]):  # a younger request placed ahead of it
            head[i].cache_aware_passes = getattr(head[i], "cache_aware_passes", 0) + 1
    reordered = list(head)
    for slot, source in zip(slots, order, strict=True):
        reordered[slot] = head[source]
    self.waiting.remove_requests(head)
    for request in reversed(reordered):
        self.waiting.prepend_request(request)


class Harness:
    """vLLM's `Scheduler` with a fake model runner, stepped by hand."""

    def __init__(self, model: str, window: int):
        import torch
        from vllm.config import CacheConfig, LoRAConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        scheduler_config = SchedulerConfig(
            max_num_seqs=2, max_num_batched_tokens=1024, max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True, policy="fcfs", is_encoder_decoder=False,
            cache_aware_admission_window=window)
        model_config = ModelConfig(model=model, dtype="float32", seed=0, max_model_len=MAX_MODEL_LEN,
                                   skip_tokenizer_init=True)
        cache_config = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
        vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                                 cache_config=cache_config,
                                 lora_config=LoRAConfig(max_loras=2, max_lora_rank=8))
        kv_cache_config = KVCacheConfig(
            num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
                block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32))])
        vllm_config.cache_config.num_gpu_blocks = NUM_BLOCKS
        # As EngineCore does with prefix caching on.
        hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(BLOCK, hash_fn)
        self.sched = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                               structured_output_manager=StructuredOutputManager(vllm_config),
                               block_size=BLOCK, log_stats=False)
        self.step_no = 0
        self.seq = 0
        self.arrived: dict[str, int] = {}
        self.admitted: dict[str, int] = {}
        self.admission_order: list[str] = []
        self.usage_at_admission: dict[str, float] = {}

    def add(self, rid: str, adapter: int, prompt: list[int], max_tokens: int) -> None:
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        self.seq += 1
        self.arrived[rid] = self.step_no + 1  # it takes part in the next step
        self.sched.add_request(Request(
            request_id=rid, prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            pooling_params=None, arrival_time=float(self.seq),
            lora_request=LoRARequest(f"lora{adapter}", adapter, f"/nonexistent/lora{adapter}"),
            block_hasher=self.block_hasher))

    def step(self) -> None:
        from vllm.v1.outputs import ModelRunnerOutput

        self.step_no += 1
        usage = self.sched.kv_cache_manager.usage
        out = self.sched.schedule()
        for new in out.scheduled_new_reqs:
            self.admitted[new.req_id] = self.step_no
            self.admission_order.append(new.req_id)
            self.usage_at_admission[new.req_id] = usage
        req_ids = list(out.num_scheduled_tokens)
        sampled = [[] if self.sched.requests[r].is_prefill_chunk else [TOKEN] for r in req_ids]
        extra = {}
        if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
            extra["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}  # before 0.34
        self.sched.update_from_output(out, ModelRunnerOutput(
            req_ids=req_ids, sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
            pooler_output=[], **extra))


# Prompts: the resident prompt P (32 blocks) of adapter 1 stays in the KV
# cache; "cached" requests are P plus a 16-token suffix of their own.
P = [100 + i % 300 for i in range(32 * BLOCK)]


def _suffix(k: int) -> list[int]:
    return [400 + (k * 7 + j) % 97 for j in range(BLOCK)]


def fifo_case(model: str, window: int) -> dict:
    """Adapter 1 only. Step 1: the resident R (P, decoding throughout) and a
    filler F (cold, 4 tokens out) take both slots (max_num_seqs 2). Step 2:
    `old` arrives (adapter 1, cold 32-token prompt). Step 3: `new` arrives
    (adapter 1, P + suffix: 512 tokens cached). F finishes at step 4; one slot
    frees at step 5 with both waiting."""
    h = Harness(model, window)
    h.add("R", 1, P, 1024)
    h.add("F", 1, [900 + j for j in range(2 * BLOCK)], 4)
    h.step()
    h.add("old", 1, [950 + j for j in range(2 * BLOCK)], 2)
    h.step()
    h.add("new", 1, P + _suffix(0), 2)
    while not {"old", "new"} <= h.admitted.keys():
        h.step()
        if h.step_no > 100:
            raise RuntimeError("old/new not admitted in 100 steps")
    return {
        "order": [r for r in h.admission_order if r in ("old", "new")],
        "arrived": {r: h.arrived[r] for r in ("old", "new")},
        "admitted": {r: h.admitted[r] for r in ("old", "new")},
        "usage": h.usage_at_admission["new"],
        "threshold": h.sched.cache_aware_threshold,
    }


def wait_case(model: str, window: int, stream: int) -> dict:
    """Step 1: R (adapter 1, P) takes a slot. Step 2: C arrives (adapter 2,
    prompt P[:32]: tokens R has cached, but under adapter 2 its hashes differ,
    so it is cold), then s0 (adapter 1, P + suffix, 2 tokens out); one more
    s_k arrives each step, `stream` in all. C's wait: the step it is admitted
    minus the step it arrived."""
    h = Harness(model, window)
    h.add("R", 1, P, 1024)
    h.step()
    h.add("C", 2, P[:2 * BLOCK], 2)
    for k in range(stream):
        h.add(f"s{k}", 1, P + _suffix(k + 1), 2)
        h.step()
        if "C" in h.admitted:
            break
    while "C" not in h.admitted:
        h.step()
        if h.step_no > 20 * stream + 100:
            raise RuntimeError("C not admitted")
    ahead = sum(1 for r in h.admission_order if r.startswith("s") and h.admitted[r] <= h.admitted["C"])
    return {"wait": h.admitted["C"] - h.arrived["C"], "admitted_ahead": ahead}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s MODEL_DIR [--window N] [--streams 10,20,40] [--fixed]")
    ap.add_argument("model", metavar="MODEL_DIR",
                    help="a local Hugging Face model directory (config.json); nothing is downloaded")
    ap.add_argument("--window", type=int, default=8,
                    help="cache_aware_admission_window (default 8; 0 = vLLM's default, arrival order)")
    ap.add_argument("--streams", default="10,20,40",
                    help="stream lengths (cached arrivals after the cold request) to measure")
    ap.add_argument("--fixed", action="store_true",
                    help="run the proposed fix of _reorder_waiting_by_cached_prefix instead of vLLM's")
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"{args.model}: no config.json (pass a local model directory)")
    streams = [int(s) for s in args.streams.split(",")]
    if not streams or min(streams) < 1 or max(streams) > 150:
        ap.error("--streams: lengths between 1 and 150")

    import vllm

    if not _has_window():
        print(f"vLLM {vllm.__version__}: SchedulerConfig has no cache_aware_admission_window; "
              "admission is in arrival order, nothing to reproduce")
        return 0
    if args.fixed:
        from vllm.v1.core.sched.scheduler import Scheduler
        Scheduler._reorder_waiting_by_cached_prefix = fixed_reorder

    code = "proposed fix" if args.fixed else "stock"
    print(f"vLLM {vllm.__version__} ({code} scheduler), cache_aware_admission_window={args.window}, "
          f"prefix caching on, FCFS, max_num_seqs 2, max_loras 2, {NUM_BLOCKS - 1} KV blocks of {BLOCK}")

    f = fifo_case(args.model, args.window)
    fifo_broken = f["order"] != ["old", "new"]
    print("(1) FIFO within adapter 1: `old` (cold 32-token prompt) arrives at step "
          f"{f['arrived']['old']}, `new` (512 of its 528 tokens cached) at step {f['arrived']['new']}; "
          f"KV usage {f['usage']:.2f} (threshold {f['threshold']}) when one slot frees")
    print("    expected: old admitted before new")
    print(f"    actual:   {f['order'][0]} admitted first (old at step {f['admitted']['old']}, "
          f"new at step {f['admitted']['new']})")
    print(f"    FIFO within an adapter: {'BROKEN' if fifo_broken else 'kept'}")

    waits = {}
    print("(2) a cold request C (adapter 2) arrives with a slot free, with a stream of cached arrivals "
          "(adapter 1, one per step, 2 tokens out each) behind it")
    for n in streams:
        w = wait_case(args.model, args.window, n)
        waits[n] = w["wait"]
        print(f"    stream {n:3d}: C waits {w['wait']:3d} steps; "
              f"{w['admitted_ahead']} later arrivals admitted ahead of it")
    ordered = [waits[n] for n in sorted(waits)]
    grows = len(ordered) > 1 and ordered[-1] > ordered[0]
    print("    expected: the same wait at every stream length (later arrivals do not delay C)")
    print(f"    actual:   waits {', '.join(str(w) for w in ordered)} steps at streams "
          f"{', '.join(str(n) for n in sorted(waits))}")
    print(f"    bounded wait: {'BROKEN (grows with the stream)' if grows else 'kept'}")
    print(f"RESULT fifo={'broken' if fifo_broken else 'kept'} "
          f"waits={','.join(f'{n}:{waits[n]}' for n in sorted(waits))} "
          f"wait={'grows' if grows else 'flat'}")
    return 1 if fifo_broken or grows else 0


if __name__ == "__main__":
    sys.exit(main())
