"""Plots of the benchmark (matplotlib, Agg: no display on the benchmark machines)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.simulate import PolicyRun  # noqa: E402


def wait_distribution(runs: dict[str, PolicyRun], path: Path) -> Path:
    """Per policy: histogram of waits; per adapter: mean and max wait (steps)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in runs.items():
        axes[0].hist(list(r.waits.values()), bins=40, histtype="step", label=name, linewidth=1.5)
    axes[0].set_xlabel("wait before first admission (steps)")
    axes[0].set_ylabel("requests")
    axes[0].set_yscale("log")
    axes[0].legend()
    axes[0].set_title("wait distribution per policy")
    width = 0.8 / max(1, len(runs))
    for i, (name, r) in enumerate(runs.items()):
        adapters = sorted(r.adapters)
        xs = [a + (i - (len(runs) - 1) / 2) * width for a in adapters]
        axes[1].bar(xs, [r.adapters[a]["max_wait_steps"] for a in adapters], width, alpha=0.35)
        axes[1].bar(xs, [r.adapters[a]["mean_wait_steps"] for a in adapters], width, label=name)
    axes[1].set_xlabel("adapter")
    axes[1].set_ylabel("wait (steps): mean solid, max faint")
    axes[1].set_yscale("log")
    axes[1].legend()
    axes[1].set_title("wait per adapter")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def starvation(rows: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["length"] for r in rows]
    for policy, style in (("vllm", "o-"), ("fair", "s-"), ("blocking", "^-")):
        ax.plot(xs, [r[policy] for r in rows], style, label=policy)
    ax.plot(xs, [r["bound"] for r in rows], "k--", label="fair bound B")
    ax.set_xlabel("stream length (steps of arrivals for adapters 1 and 2)")
    ax.set_ylabel("wait of the adapter-3 request (steps)")
    ax.set_xscale("log")
    ax.set_title("starvation stream (max_loras 2)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tuning(sweep: dict, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    xs = [max(v, 0.5) for v in sweep["values"]]
    for name, w in sweep["workloads"].items():
        axes[0].plot(xs, [r["ratio"] for r in w["rows"]], "o-", label=name)
        axes[1].plot(xs, [r["fair_max_wait"] for r in w["rows"]], "o-", label=name)
    axes[0].axhline(sweep["target_ratio"], color="k", linestyle="--", label="0.97 target")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("starvation_steps S (0 plotted at 0.5)")
    axes[0].set_ylabel("throughput(fair) / throughput(vllm)")
    axes[1].set_ylabel("fair: max wait (steps)")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
