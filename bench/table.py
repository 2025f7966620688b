"""The serving benchmark's result block as a table, one column per run.

Rows and keys are those of vLLM's `vllm bench serve` result block, so
simulated, live and the seed's published columns line up.
"""

from __future__ import annotations

ROWS = [
    ("Successful requests", "completed", "{:.0f}"),
    ("Benchmark duration (s)", "duration_s", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:.0f}"),
    ("Total generated tokens", "total_output_tokens", "{:.0f}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total Token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
    ("Mean TTFT (ms)", "mean_ttft_ms", "{:.2f}"),
    ("Median TTFT (ms)", "median_ttft_ms", "{:.2f}"),
    ("P99 TTFT (ms)", "p99_ttft_ms", "{:.2f}"),
    ("Mean TPOT (ms)", "mean_tpot_ms", "{:.2f}"),
    ("Median TPOT (ms)", "median_tpot_ms", "{:.2f}"),
    ("P99 TPOT (ms)", "p99_tpot_ms", "{:.2f}"),
    ("Mean ITL (ms)", "mean_itl_ms", "{:.2f}"),
    ("Median ITL (ms)", "median_itl_ms", "{:.2f}"),
    ("P99 ITL (ms)", "p99_itl_ms", "{:.2f}"),
]


def table(columns: dict[str, dict[str, float]]) -> str:
    """The result block, one column per run; a cell a run lacks is `-`."""
    names = list(columns)
    head = f"{'':34}" + "".join(f"{n[:20]:>21}" for n in names)
    lines = [head, "-" * len(head)]
    for label, key, fmt in ROWS:
        cells = "".join(f"{fmt.format(columns[n][key]) if key in columns[n] else '-':>21}" for n in names)
        lines.append(f"{label:34}{cells}")
    return "\n".join(lines)
