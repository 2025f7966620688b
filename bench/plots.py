"""Plots of the benchmark (matplotlib, Agg: no display on the benchmark machines).

Every plot draws a policy in its colour from `COLORS`, the one colour map."""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from lora_sched.bench.simulate import PolicyRun  # noqa: E402

COLORS = {"blocking": "tab:red", "vllm": "tab:blue", "fair": "tab:green", "drainer": "tab:orange",
          "timeslice": "tab:purple", "vtc": "tab:brown"}


def color(policy: str) -> str:
    """The colour of `policy` in every plot."""
    return COLORS[policy]


def _save(fig, path: Path) -> Path:
    """Lay out, write at 110 dpi and close `fig`."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _adapter_bars(ax, per_policy: dict[str, dict], ylabel: str, title: str, floor: float = 0.0) -> None:
    """Per adapter, per policy: max wait faint, mean wait solid (`per_policy`: policy -> adapter -> figures)."""
    width = 0.8 / max(1, len(per_policy))
    for i, (name, ad) in enumerate(per_policy.items()):
        adapters = sorted(ad, key=int)
        xs = [int(a) + (i - (len(per_policy) - 1) / 2) * width for a in adapters]
        ax.bar(xs, [ad[a]["max_wait_steps"] for a in adapters], width, alpha=0.35, color=color(name))
        ax.bar(xs, [max(ad[a]["mean_wait_steps"], floor) for a in adapters], width, label=name, color=color(name))
    ax.set_xlabel("adapter")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.legend()
    ax.set_title(title)


def wait_distribution(runs: dict[str, PolicyRun], path: Path) -> Path:
    """Per policy: histogram of waits; per adapter: mean and max wait (steps)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in runs.items():
        axes[0].hist(list(r.waits.values()), bins=40, histtype="step", label=name, linewidth=1.5,
                     color=color(name))
    axes[0].set_xlabel("wait before first admission (steps)")
    axes[0].set_ylabel("requests")
    axes[0].set_yscale("log")
    axes[0].legend()
    axes[0].set_title("wait distribution per policy")
    _adapter_bars(axes[1], {name: r.adapters for name, r in runs.items()}, "wait (steps): mean solid, max faint",
                  "wait per adapter")
    return _save(fig, path)


def starvation(rows: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["length"] for r in rows]
    for policy, style in (("vllm", "o-"), ("fair", "s-"), ("blocking", "^-")):
        ax.plot(xs, [r[policy] for r in rows], style, label=policy, color=color(policy))
    ax.plot(xs, [r["bound"] for r in rows], "k--", label="fair bound B")
    ax.set_xlabel("stream length (steps of arrivals for adapters 1 and 2)")
    ax.set_ylabel("wait of the adapter-3 request (steps)")
    ax.set_xscale("log")
    ax.set_title("starvation stream (max_loras 2)")
    ax.legend()
    return _save(fig, path)


def tuning(sweep: dict, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    xs = [max(v, 0.5) for v in sweep["values"]]
    for name, w in sweep["workloads"].items():
        for ax, key in ((axes[0], "ratio"), (axes[1], "fair_max_wait")):
            ys = [r[key] for r in w["rows"]]
            (line,) = ax.plot(xs, ys, "-", label=name)
            # Filled markers: the guard held a victim adapter at this S; hollow: it never did.
            fired = [r.get("guard_steps", 1) > 0 for r in w["rows"]]
            ax.scatter([x for x, f in zip(xs, fired, strict=True) if f],
                       [y for y, f in zip(ys, fired, strict=True) if f], color=line.get_color(), zorder=3)
            ax.scatter([x for x, f in zip(xs, fired, strict=True) if not f],
                       [y for y, f in zip(ys, fired, strict=True) if not f], facecolors="none",
                       edgecolors=line.get_color(), zorder=3)
    axes[0].axhline(sweep["target_ratio"], color="k", linestyle="--", label="0.97 target")
    axes[0].set_title("filled: guard fired; hollow: guard never fired")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("starvation_steps S (0 plotted at 0.5)")
    axes[0].set_ylabel("throughput(fair) / throughput(vllm)")
    axes[1].set_ylabel("fair: max wait (steps)")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def live(runs: dict[str, dict], path: Path) -> Path:
    """Live runs: TTFT distribution per policy (vLLM's client); wait per adapter from the traces."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in runs.items():
        v = sorted(r["ttfts"])
        if v:
            axes[0].plot(v, [(i + 1) / len(v) for i in range(len(v))], label=name, color=color(name))
    axes[0].set_xlabel("TTFT (s), vLLM's benchmark client")
    axes[0].set_ylabel("fraction of requests")
    axes[0].set_title("live: TTFT distribution per policy")
    axes[0].legend()
    _adapter_bars(axes[1], {name: r["trace"]["adapters"] for name, r in runs.items()},
                  "wait (engine steps): mean solid, max faint", "live: wait before first admission per adapter",
                  floor=0.5)
    return _save(fig, path)


def publish(paths: list[Path], docs_img: str | None) -> None:
    """Copy plots into the docs folder (`--docs-img`) as `bench-NAME.png`."""
    if not docs_img:
        return
    dest = Path(docs_img)
    dest.mkdir(parents=True, exist_ok=True)
    for p in paths:
        shutil.copy(p, dest / f"bench-{p.name}")


def realistic_adapters(rows: list[dict], path: Path) -> Path:
    """Per-adapter p99 wait against popularity rank, on the workloads where
    vllm's tail/head ratio is largest (up to four panels)."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["workload"], {})[r["point"]] = r
    worst = sorted(by, key=lambda w: -by[w]["vllm"]["tail_head"])[:4]
    fig, axes = plt.subplots(1, len(worst), figsize=(4.5 * len(worst), 4), squeeze=False)
    for ax, w in zip(axes[0], worst, strict=True):
        for point in ("vllm", "fair S=16", "drainer S=16", "timeslice S=16", "vtc"):
            r = by[w].get(point)
            if r is None:
                continue
            ranks = sorted(int(a) for a in r["adapter_p99"] if int(a) > 0)
            ax.plot(ranks, [r["adapter_p99"][str(a)] + 1 for a in ranks], ".-", ms=3, lw=1, label=point,
                    color=color(r["policy"]))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("adapter popularity rank (1 = most popular)")
        ax.set_ylabel("p99 wait + 1 (steps)")
        ax.set_title(w, fontsize=8)
        ax.legend(fontsize=7)
    return _save(fig, path)


def realistic_tradeoff(rows: list[dict], path: Path) -> Path:
    """Tail/head mean wait against throughput (vs vllm, cost-model seconds), one
    point per (workload, policy point); design set filled, held-out hollow."""
    fig, ax = plt.subplots(figsize=(7, 5))
    seen: set[str] = set()
    for r in rows:
        if r["policy"] == "blocking":
            continue  # head-of-line blocking: off the chart's throughput range
        lab = r["point"] if r["point"] not in seen else None
        seen.add(r["point"])
        marker = {"fair S=4": "v", "fair S=16": "o", "fair S=64": "^"}.get(r["point"], "s")
        ax.scatter(r["ratio_s"], r["tail_head"], marker=marker, s=22, label=lab, color=color(r["policy"]),
                   facecolors=color(r["policy"]) if r["design"] else "none")
    ax.set_yscale("log")
    ax.axhline(2.0, color="gray", lw=0.8, ls="--")
    ax.axvline(0.97, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("throughput / vllm's (cost-model seconds)")
    ax.set_ylabel("tail / head mean wait")
    ax.set_title("realistic grid: filled = design set, hollow = held out")
    ax.legend(fontsize=7)
    return _save(fig, path)
