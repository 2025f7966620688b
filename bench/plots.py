"""Plots of the benchmark (matplotlib, Agg: no display on the benchmark machines).

Every plot draws a policy in its colour from `COLORS`, the one colour map."""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from lora_sched.bench.frontier import DEFAULT_KNOB, KNOBBED
from lora_sched.bench.simulate import PolicyRun  # noqa: E402

COLORS = {"blocking": "tab:red", "vllm": "tab:blue", "fair": "tab:green", "drainer": "tab:orange",
          "timeslice": "tab:purple", "vtc": "tab:brown"}


def color(policy: str) -> str:
    """The colour of `policy` in every plot."""
    return COLORS[policy]


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
    width = 0.8 / max(1, len(runs))
    for i, (name, r) in enumerate(runs.items()):
        adapters = sorted(r.adapters)
        xs = [a + (i - (len(runs) - 1) / 2) * width for a in adapters]
        axes[1].bar(xs, [r.adapters[a]["max_wait_steps"] for a in adapters], width, alpha=0.35, color=color(name))
        axes[1].bar(xs, [r.adapters[a]["mean_wait_steps"] for a in adapters], width, label=name,
                    color=color(name))
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
        ax.plot(xs, [r[policy] for r in rows], style, label=policy, color=color(policy))
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    width = 0.8 / max(1, len(runs))
    for i, (name, r) in enumerate(runs.items()):
        ad = r["trace"]["adapters"]
        adapters = sorted(ad)
        xs = [int(a) + (i - (len(runs) - 1) / 2) * width for a in adapters]
        axes[1].bar(xs, [ad[a]["max_wait_steps"] for a in adapters], width, alpha=0.35, color=color(name))
        axes[1].bar(xs, [max(ad[a]["mean_wait_steps"], 0.5) for a in adapters], width, label=name,
                    color=color(name))
    axes[1].set_xlabel("adapter")
    axes[1].set_ylabel("wait (engine steps): mean solid, max faint")
    axes[1].set_yscale("log")
    axes[1].set_title("live: wait before first admission per adapter")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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
    """`bench.preemption`: on each workload where vllm's tail/head exceeds 3,
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
