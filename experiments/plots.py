"""Plots of the experiments (matplotlib, Agg), in the benchmark's colours (`lora_sched.bench.plots.COLORS`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from lora_sched.bench.plots import color  # noqa: E402

from experiments.frontier import DEFAULT_KNOB, KNOBBED  # noqa: E402


def frontier(result: dict[str, list[dict]], path: Path) -> Path:
    """Per family: worst wait (x, log) against throughput vs vllm (y), one colour
    per policy, its knob values joined by a line; a ring marks the default knob."""
    names = list(result)
    cols = 3
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        pts = result[name]
        for policy in dict.fromkeys(p["policy"] for p in pts):
            mine = sorted((p for p in pts if p["policy"] == policy), key=lambda p: p["knob"] or 0)
            c = color(policy)
            ax.plot([max(p["wait"], 1) for p in mine], [p["ratio"] for p in mine], "o-", color=c,
                    label=policy, markersize=3, linewidth=1)
            d = next((p for p in mine if p["knob"] == (DEFAULT_KNOB if policy in KNOBBED else None)), None)
            if d is not None:
                ax.scatter([max(d["wait"], 1)], [d["ratio"]], s=70, facecolors="none", edgecolors=c, zorder=3)
        ax.axhline(0.8, color="k", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("worst wait (steps)")
        ax.set_ylabel("throughput / vllm")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("frontier: knob values joined, ring = default knob (16); dotted = 0.8 of vllm", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def knob_goals(doc: dict, path: Path) -> Path:
    """`bench --knob-goals`: the share of each goal set met at each S (left),
    and fair's tail/head on the realistic workloads where vllm's exceeds 3,
    against S, vllm's as dashed lines (right)."""
    knobs = doc["knobs"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sets = (("saved_design", "adversarial, saved, design"), ("saved_held_out", "adversarial, saved, held out"),
            ("fresh", "adversarial, fresh searches at S"))
    for key, title in sets:
        axes[0].plot(knobs, [doc["by_knob"][str(k)][key]["ok"] / max(1, doc["by_knob"][str(k)][key]["of"])
                             for k in knobs], marker="o", label=title)
    for key, title in (("realistic_design", "realistic goals, design"),
                       ("realistic_held_out", "realistic goals, held out")):
        if key not in doc["by_knob"][str(knobs[0])]:  # a set with no workloads has no goals
            continue
        axes[0].plot(knobs, [sum(g["met"] for g in doc["by_knob"][str(k)][key]) / len(doc["by_knob"][str(k)][key])
                             for k in knobs], marker="s", linestyle="--", label=title)
    axes[0].set_xlabel("S (starvation_steps)")
    axes[0].set_ylabel("share met")
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(fontsize=7)
    axes[0].set_title("issue 20's goals met, by S")
    _tail_head_by_knob(axes[1], doc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def knob_tail_head(doc: dict, path: Path) -> Path:
    """`bench --realistic --knob-goals`: fair's tail/head against S on each
    workload where vllm's exceeds 3."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _tail_head_by_knob(ax, doc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tail_head_by_knob(ax: plt.Axes, doc: dict) -> None:
    """fair's tail/head against S, one line per workload where vllm's
    exceeds 3, vllm's as a dotted line in the same colour."""
    knobs = doc["knobs"]
    base = doc["realistic_vllm_tail_head"]
    starving = sorted(w for w, v in base.items() if v > 3)
    for i, w in enumerate(starving):
        c = f"C{i % 10}"
        ax.plot(knobs, [doc["by_knob"][str(k)]["realistic_tail_head"][w] for k in knobs], marker="o",
                color=c, label=_short(w))
        ax.axhline(base[w], color=c, linestyle=":", linewidth=1)
    ax.axhline(2.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("S (starvation_steps)")
    ax.set_ylabel("tail/head mean wait (fair; dotted: vllm)")
    if starving:
        ax.legend(fontsize=6, ncol=2 if len(starving) > 12 else 1)
    ax.set_title("realistic, where vllm's tail/head > 3 (goal: <= 2)")


def _short(workload: str) -> str:
    """A realistic workload's short name: `real05`, or `d21-real05` for a fresh draw's."""
    head, _, rest = workload.partition("-")
    return f"{head}-{rest.split('-')[0]}" if head[0] == "d" and head[1:].isdigit() else head


def preemption(rows: list[dict], fair_points: list[str], field_points: list[str], path: Path) -> Path:
    """`experiments.preemption`: on each workload where vllm's tail/head exceeds 3,
    the tail adapters' mean wait over vllm's (each plus one step, as
    tail/head counts them) against throughput, for fair and
    fair with preemption at each budget (`fair_points`, in order, joined by a
    line) and the field (`field_points`) as single points (left: the tail's
    own wait, which the tail/head ratio hides when the head moves); each fair
    point's p99 time to finish over vllm's, per workload (right)."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["workload"], {})[r["point"]] = r
    starving = [w for w, ps in by.items() if ps["vllm"]["tail_head"] > 3]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    cmap = plt.get_cmap("tab20")

    def tail(ps: dict, p: str) -> float:
        return (ps[p]["tail_mean"] + 1) / (ps["vllm"]["tail_mean"] + 1)

    for i, w in enumerate(starving):
        ps, c = by[w], cmap(i % 20)
        xs, ys = [ps[p]["ratio_s"] for p in fair_points], [tail(ps, p) for p in fair_points]
        axes[0].plot(xs, ys, color=c, marker="o", ms=4, lw=1, label=_short(w))
        axes[0].scatter(xs[0], ys[0], color=c, s=60, facecolors="none")  # fair itself
        for other, m in zip(field_points, "s^D", strict=False):
            axes[0].scatter([ps[other]["ratio_s"]], [tail(ps, other)], color=c, marker=m, s=14)
    axes[0].set_yscale("log")
    axes[0].axhline(1.0, color="gray", lw=0.8, ls="--")
    axes[0].axvline(0.97, color="gray", lw=0.8, ls="--")
    axes[0].set_xlabel("throughput / vllm's (cost-model seconds)")
    axes[0].set_ylabel("tail adapters' mean wait / vllm's (first admission)")
    steps = " -> ".join(p.removeprefix("fair+preempt ") for p in fair_points[1:])
    marks = ", ".join(f"{m} {p}" for m, p in zip(("square", "triangle", "diamond"), field_points, strict=False))
    axes[0].set_title(f"starving workloads (vllm's tail/head > 3): {fair_points[0]} (hollow) -> {steps}\n{marks}",
                      fontsize=8)
    axes[0].legend(fontsize=6, ncol=2)
    names = list(by)
    width = 0.8 / len(fair_points)
    for j, p in enumerate(fair_points):
        axes[1].bar([i + j * width for i in range(len(names))],
                    [by[w][p]["finish_p99"] / max(1.0, by[w]["vllm"]["finish_p99"]) for w in names],
                    width=width, label=p)
    axes[1].axhline(1.0, color="gray", lw=0.8, ls="--")
    axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
    axes[1].set_xticklabels([_short(w) for w in names], rotation=45, fontsize=7)
    axes[1].set_ylabel("p99 time to finish / vllm's")
    axes[1].set_title("what preemption costs the requests it restarts", fontsize=9)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
