"""experiments.live_field: the live field's pure parts (workloads, datasets, client commands)."""

from __future__ import annotations

import re

import pytest


def test_live_field_family_dataset(tmp_path) -> None:
    """A family becomes vLLM's `custom` dataset in arrival order, repeated, one model
    name per request (its adapter), each prompt as many words (tokens) as its prompt."""
    import json

    from experiments.families import known_family
    from experiments.live_field import KNOWN, workload, write_dataset

    wl = workload(KNOWN, starvation_steps=16, repeat=2)
    _, reqs = known_family()
    assert len(wl.requests) == 2 * len(reqs)
    assert (wl.config.max_loras, wl.config.max_num_seqs, wl.config.max_num_batched_tokens) == (1, 12, 16)
    assert [r.arrival for r in wl.requests[:len(reqs)]] == sorted(r.arrival for r in reqs)
    models = write_dataset(wl.requests, tmp_path / "d.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert len(lines) == len(models) == len(wl.requests)
    for line, name, r in zip(lines, models, wl.requests, strict=True):
        assert len(line["prompt"].split()) == r.prompt_tokens and line["output_tokens"] == r.max_tokens
        assert name == (f"lora{r.adapter}" if r.adapter else "base")


@pytest.mark.parametrize("name, needle", [
    ("no such family", "unknown family 'no such family'"),
    ("adv-fair_lrw-throughput", "vLLM refuses max_num_batched_tokens 18 < max_num_seqs 30"),
])
def test_live_field_refuses_what_it_cannot_run(name, needle) -> None:
    from experiments.live_field import LiveFieldError, workload

    with pytest.raises(LiveFieldError, match=re.escape(needle)):
        workload(name, starvation_steps=16, repeat=1)


@pytest.mark.vllm
def test_live_field_client_command_parses_with_vllms_own_parser(tmp_path) -> None:
    """The family's client command is vLLM's `custom` dataset, in order (no shuffle),
    lengths from the file (`--custom-output-len -1`), one LoRA name per request
    assigned round robin, so request i goes to model i."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from experiments.live_field import family_client_command

    models = ["lora2", "base", "lora1"]
    cmd = family_client_command(8123, "/m", tmp_path / "d.jsonl", models, result_dir=tmp_path, result_file="r.json")
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    a = parser.parse_args(cmd[3:])
    assert (a.dataset_name, a.dataset_path, a.custom_output_len, a.num_prompts) == \
        ("custom", str(tmp_path / "d.jsonl"), -1, 3)
    assert a.skip_chat_template and a.disable_shuffle and a.lora_assignment == "round-robin"
    assert a.lora_modules == models and a.request_rate == float("inf") and a.ignore_eos and a.save_result
    paced = parser.parse_args(family_client_command(8123, "/m", tmp_path / "d.jsonl", models, result_dir=tmp_path,
                                                    result_file="r.json", rate=16.0)[3:])
    assert paced.request_rate == 16.0 and paced.burstiness == 1.0  # Poisson arrivals, vLLM's own client


def test_live_field_realistic_workload() -> None:
    """`--family realistic`: the realistic shape on the 8 adapters the assets
    have, max_loras 2, sent at a Poisson rate; Zipf puts most LoRA traffic on
    adapter 1, and the lengths are clipped to 256."""
    from collections import Counter

    from experiments.live_field import REALISTIC, REALISTIC_RATE, workload

    wl = workload(REALISTIC, starvation_steps=16, repeat=16)
    assert wl.rate == REALISTIC_RATE and len(wl.requests) == 300  # --family-repeat does not apply
    assert (wl.config.max_loras, wl.config.max_num_seqs, wl.config.max_num_batched_tokens) == (2, 32, 1024)
    counts = Counter(r.adapter for r in wl.requests)
    assert set(counts) <= set(range(9)) and counts[1] > counts[2] > counts[8]
    assert 0.1 < counts[0] / 300 < 0.3
    assert all(1 <= r.prompt_tokens <= 256 and 1 <= r.max_tokens <= 256 for r in wl.requests)


def test_live_field_short_command_keeps_the_flags() -> None:
    from experiments.live_field import short_command

    cmd = ["x", "--lora-modules", *[f"lora{i}" for i in range(20)], "--seed", "0"]
    assert short_command(cmd, keep=3) == ["x", "--lora-modules", "lora0", "lora1", "lora2", "... (20 names in all)",
                                          "--seed", "0"]
    assert short_command(cmd[:5] + ["--seed", "0"], keep=3) == cmd[:5] + ["--seed", "0"]
