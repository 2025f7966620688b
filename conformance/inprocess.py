"""vLLM's real scheduler driven in-process: no model, no server.

`make_scheduler` builds the installed vLLM's `Scheduler` (or `AsyncScheduler`)
as vLLM's own tests do (`tests/v1/core/utils.py::create_scheduler`), its
model config pointing at the tiny Llama of `conformance.assets` (no weights
loaded). `run_workload` feeds a `policy.driver.Workload` step by step, fakes
the runner's output (one never-EOS token for each request not mid-prefill),
applies aborts between two steps, as the reference does, and records the trace.
"""

from __future__ import annotations

import copy
import os

# Quiet vLLM (read at its first import). A live server started later inherits it:
# tools that may start one import this module only where they drive vLLM in-process.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from lora_sched.conformance.assets import ensure_assets
from lora_sched.policy.driver import Workload
from lora_sched.spec import releases
from lora_sched.spec.config import Config, throttled
from lora_sched.spec.request import Request

TOKEN = 7  # any id but EOS (2) of the tiny model
MAX_MODEL_LEN = 2048


def _scheduler_classes(policy: str) -> tuple[type, type]:
    if policy == "vllm":
        from lora_sched.recorder import AsyncRecordingScheduler, RecordingScheduler
        return RecordingScheduler, AsyncRecordingScheduler
    from lora_sched.scheduler import CLASSES
    return CLASSES[policy]


_VLLM_CONFIG_CACHE: dict[tuple, object] = {}
_MODEL_CONFIG_CACHE: dict[tuple[str, int], object] = {}


def make_scheduler(cfg: Config, policy: str | None = None, *, model: str | None = None,
                   plenty_blocks: int = 4096, scheduler_class: type | None = None):
    """A recording vLLM scheduler configured like `cfg`.

    `kv_blocks=None` (unlimited) becomes `plenty_blocks`, a number the workload
    cannot exhaust (vLLM builds every block eagerly). `scheduler_class`
    replaces the policy's recording class (e.g. a patched vLLM scheduler)."""
    import torch
    from vllm.config import CacheConfig, LoRAConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    policy = policy or cfg.policy
    if model is None:
        model = str(ensure_assets(0).model)
    max_len = MAX_MODEL_LEN
    if not cfg.chunked_prefill:
        max_len = min(max_len, cfg.max_num_batched_tokens)
    key = (model, cfg.max_loras, cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.chunked_prefill,
           cfg.long_prefill_token_threshold, cfg.block_size, cfg.queue, cfg.async_scheduling, max_len,
           cfg.starvation_steps, cfg.prefill_schedule_interval)
    vllm_config = _VLLM_CONFIG_CACHE.get(key)
    if vllm_config is None:
        scheduler_config = SchedulerConfig(
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_model_len=max_len,
            long_prefill_token_threshold=cfg.long_prefill_token_threshold,
            enable_chunked_prefill=cfg.chunked_prefill,
            async_scheduling=cfg.async_scheduling,
            policy=cfg.queue,
            prefill_schedule_interval=cfg.prefill_schedule_interval,
            is_encoder_decoder=False,
        )
        # A copy of one ModelConfig per (model, length): building one parses the HF config.
        if (model, max_len) not in _MODEL_CONFIG_CACHE:
            _MODEL_CONFIG_CACHE[model, max_len] = ModelConfig(model=model, dtype="float32", seed=0,
                                                              max_model_len=max_len, skip_tokenizer_init=True)
        model_config = copy.deepcopy(_MODEL_CONFIG_CACHE[model, max_len])
        cache_config = CacheConfig(block_size=cfg.block_size, enable_prefix_caching=False)
        vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                                 cache_config=cache_config,
                                 lora_config=LoRAConfig(max_loras=cfg.max_loras, max_lora_rank=8),
                                 additional_config={"lora_sched": {"starvation_steps": cfg.starvation_steps}})
        _VLLM_CONFIG_CACHE[key] = vllm_config
    num_blocks = (cfg.kv_blocks if cfg.kv_blocks is not None else plenty_blocks) + 1
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=cfg.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    vllm_config.cache_config.num_gpu_blocks = num_blocks  # type: ignore[attr-defined]
    sync_cls, async_cls = _scheduler_classes(policy)
    cls = scheduler_class or (async_cls if cfg.async_scheduling else sync_cls)
    sched = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=cfg.block_size, log_stats=False)
    return sched


def _vllm_request(req: Request, seq: int):
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request as VRequest

    lora = LoRARequest(f"lora{req.adapter}", req.adapter, f"/nonexistent/lora{req.adapter}") \
        if req.adapter > 0 else None
    return VRequest(
        request_id=req.id,
        prompt_token_ids=[TOKEN] * req.prompt_tokens,
        sampling_params=SamplingParams(max_tokens=req.max_tokens, ignore_eos=True),
        pooling_params=None,
        # vLLM breaks priority ties by (arrival_time, request_id); the
        # reference by (arrival step, arrival order): make them one.
        arrival_time=req.arrival * 1_000_000.0 + seq,
        lora_request=lora,
        priority=req.priority,
    )


def model_output(req_ids: list[str], sampled: set[str]):
    """The model runner's output for a batch: one token for each id in `sampled`.
    0.32 and 0.33 take `req_id_to_index`; 0.34 builds it from `req_ids`."""
    import dataclasses

    from vllm.v1.outputs import ModelRunnerOutput

    extra = {}
    if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
        extra["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=[[TOKEN] if rid in sampled else [] for rid in req_ids],
                             logprobs=None, prompt_logprobs_dict={}, pooler_output=[], **extra)


def _model_output(sched_out, sampled: set[str]):
    return model_output(list(sched_out.num_scheduled_tokens), sampled)


class Stuck(RuntimeError):
    """vLLM made no progress (a request that can never fit, for example)."""


def run_workload(cfg: Config, workload: Workload, trace_path: str | os.PathLike[str], *,
                 policy: str | None = None, max_steps: int = 20_000, scheduler_class: type | None = None,
                 engine_cadence: bool | None = None) -> int:
    """Drive vLLM's scheduler through `workload`, recording to `trace_path`.

    Returns the number of `schedule()` calls: one per step while vLLM has
    requests; idle steps are jumped. An exception inside vLLM propagates after
    the trace up to the step before it is flushed to `trace_path`.
    `engine_cadence`: whether the harness plays the DP engine core, calling
    `schedule(throttle_prefills=...)` on off-cadence steps; by default the
    installed release's rule (`spec.releases`: 0.32 yes, 0.33 no).
    """
    plenty = sum(-(-(r.prompt_tokens + r.max_tokens) // cfg.block_size) for r in workload.requests) + 1
    sched = make_scheduler(cfg, policy, plenty_blocks=plenty, scheduler_class=scheduler_class)
    sched.start_recording(trace_path, async_scheduling=cfg.async_scheduling)
    from lora_sched.recorder import installed_release
    cadence_by_engine = (releases.get(installed_release()).prefill_cadence == "dp_engine"
                         if engine_cadence is None else engine_cadence)
    arrivals = sorted(workload.requests, key=lambda r: r.arrival)
    aborts = sorted(workload.aborts.items(), key=lambda kv: kv[1])
    ai = bi = seq = 0
    step = 0
    wave = 0  # steps since the engine was idle: the DP engine core's step_counter
    queue: list[tuple[object, set[str]]] = []  # async: the batch queue
    try:
        while ai < len(arrivals) or sched.has_requests() or queue:
            step += 1
            if not sched.has_requests() and not queue:
                wave = 0
                if ai < len(arrivals):
                    step = max(step, arrivals[ai].arrival)
            if step > max_steps:
                raise Stuck(f"no completion after {max_steps} steps")
            while ai < len(arrivals) and arrivals[ai].arrival <= step:
                from dataclasses import replace
                req = arrivals[ai]
                if req.arrival < step:
                    req = replace(req, arrival=step)
                sched.add_request(_vllm_request(req, seq))
                seq += 1
                ai += 1
            while bi < len(aborts) and aborts[bi][1] <= step:
                from vllm.v1.request import RequestStatus
                sched.finish_requests(aborts[bi][0], RequestStatus.FINISHED_ABORTED)
                bi += 1
            if sched.has_requests():
                # 0.32: the DP engine core's cadence; 0.33's scheduler keeps
                # its own on an engine without DP coordination (spec.releases).
                out = sched.schedule(cadence_by_engine and throttled(cfg, wave))
                wave += 1
                # `.get`: a scheduler may name an id it never held (a finding of the trace, not a crash here).
                sampled = {rid for rid in out.num_scheduled_tokens
                           if (r := sched.requests.get(rid)) is not None and not r.is_prefill_chunk}
                queue.append((out, sampled))
                if cfg.async_scheduling and len(queue) < 2:
                    continue
            if queue:
                out, sampled = queue.pop(0)
                sched.update_from_output(out, _model_output(out, sampled))
    finally:
        sched.stop_recording()
    return step
