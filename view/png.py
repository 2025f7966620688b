"""The timeline as a PNG (matplotlib, Agg), drawn from a `view.layout.Layout`.

Two axes sharing x (steps): above, the adapter slots in use per step (hollow
for adapters running but not scheduled), `max_loras` dashed, throttled steps
shaded, fair's held victim adapter in a strip; below, one row per request.
Segments are one `PolyCollection` per axis.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from lora_sched.view.layout import KIND_LABELS, KINDS, Layout, kind_color  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from lora_sched.palette import BASE_COLOR, VIOLATION_COLOR, adapter_color  # noqa: E402

LABEL_ROWS = 80  # label each request up to this many rows; above, label the adapter groups


@dataclass
class Drawn:
    """What `render` put on the figure, counted: the structural record tests compare with the layout."""

    segments: int = 0
    marks: dict[str, int] = field(default_factory=dict)
    violation_labels: list[str] = field(default_factory=list)
    row_labels: list[str] = field(default_factory=list)
    star_spans: int = 0
    victim_blocks: int = 0


def _rect(x0: float, x1: float, y0: float, y1: float) -> list[tuple[float, float]]:
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def render(layout: Layout, path: str | os.PathLike[str], *, dpi: int = 110) -> Drawn:
    """Draw `layout` into the PNG file `path`; returns what was drawn."""
    fig, drawn = figure(layout, dpi=dpi)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return drawn


def figure(layout: Layout, *, dpi: int = 110) -> tuple[Figure, Drawn]:
    """The figure of `layout` (axes: the band, then the rows) and what was put on it."""
    drawn = Drawn()
    n = len(layout.rows)
    row_h = 0.22 if n <= 40 else max(0.02, min(0.22, 10.0 / max(n, 1)))
    height_rows = max(1.2, n * row_h)
    peak = max([len(set(s.running) | set(s.batch)) for s in layout.steps] + [layout.max_loras])
    band_h = 1.3 + 0.08 * peak
    fig = plt.figure(figsize=(13, band_h + height_rows + 1.6), dpi=dpi)
    gs = fig.add_gridspec(2, 1, height_ratios=[band_h, height_rows], hspace=0.06)
    band = fig.add_subplot(gs[0])
    ax = fig.add_subplot(gs[1], sharex=band)
    x0, x1 = layout.first_step - 0.5, layout.last_step + 1.0

    # ---- band: adapter slots per step ----
    polys, faces, edges = [], [], []
    for s in layout.steps:
        for i, a in enumerate(s.batch):
            polys.append(_rect(s.step - 0.5, s.step + 0.5, i, i + 1))
            faces.append(adapter_color(a))
            edges.append("none")
        for j, a in enumerate(x for x in s.running if x not in s.batch):
            k = len(s.batch) + j
            polys.append(_rect(s.step - 0.45, s.step + 0.45, k + 0.05, k + 0.95))
            faces.append("#ffffff")
            edges.append(adapter_color(a))
        if s.throttle:
            band.axvspan(s.step - 0.5, s.step + 0.5, color="#dddddd", zorder=0)
        for v in s.victims:
            polys.append(_rect(s.step - 0.5, s.step + 0.5, -1.0, -0.25))
            faces.append(adapter_color(v))
            edges.append("none")
            drawn.victim_blocks += 1
    band.add_collection(PolyCollection(polys, facecolors=faces, edgecolors=edges, linewidths=0.8))
    band.axhline(layout.max_loras, color="black", linestyle="--", linewidth=1)
    band.text(x1, layout.max_loras, f" max_loras {layout.max_loras}", va="center", ha="left", fontsize=8)
    if any(s.victims for s in layout.steps):
        band.text(x1, -0.6, " victim held for r*", va="center", ha="left", fontsize=8)
    band.set_ylim(-1.1 if any(s.victims for s in layout.steps) else 0, peak + 1.3)
    band.set_ylabel("adapters\nin batch", fontsize=8)
    band.yaxis.set_major_locator(MaxNLocator(integer=True))
    band.tick_params(labelbottom=False, labelsize=8)
    band.set_title(f"{layout.title}\n" + textwrap.fill(layout.subtitle, 150), fontsize=9, loc="left")
    for reg in layout.regions:
        for a in (band, ax):
            a.axvspan(reg["start"] - 0.5, reg["end"] + 0.5, color="#fff2b3", zorder=0)
        band.text(reg["start"] - 0.5, peak + 1.1, reg["label"], fontsize=8, va="top")

    # ---- rows ----
    polys, faces, edges = [], [], []
    for y, row in enumerate(layout.rows):
        for seg in row.segments:
            polys.append(_rect(seg.start - 0.5, seg.end + 0.5, y + 0.1, y + 0.9))
            faces.append(kind_color(row.adapter, seg.kind))
            edges.append(adapter_color(row.adapter) if seg.kind == "idle" else "none")
    drawn.segments = len(polys)
    ax.add_collection(PolyCollection(polys, facecolors=faces, edgecolors=edges, linewidths=0.6))
    y_of = {row.id: y for y, row in enumerate(layout.rows)}
    style = {"finished": ("|", "black"), "aborted": ("x", "black"), "preempted": ("v", "black"),
             "violation": ("o", VIOLATION_COLOR)}
    ms = 7 if n <= LABEL_ROWS else 3
    for kind, (marker, color) in style.items():
        pts = [(m.step + (0.5 if kind == "finished" else 0), y_of[r.id] + 0.5)
               for r in layout.rows for m in r.marks if m.kind == kind]
        drawn.marks[kind] = len(pts)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="none", marker=marker, color=color,
                    markersize=ms, markerfacecolor="none" if kind == "violation" else color, zorder=4)
    for rid, a, b in layout.star_spans():
        y = y_of[rid]
        ax.add_patch(plt.Rectangle((a - 0.5, y), b - a + 1, 1, fill=False, edgecolor="black",
                                   linewidth=1.2, zorder=5))
        ax.plot([a], [y + 0.5], marker="*", color="black", markersize=ms + 2, zorder=6)
        drawn.star_spans += 1
    seen: set[str] = set()
    for v in layout.violations:
        for a in (band, ax):
            a.axvline(v.step, color=VIOLATION_COLOR, linewidth=0.8, alpha=0.7, zorder=3)
        if v.property not in seen:
            seen.add(v.property)
            band.text(v.step, peak + 0.2 + 0.55 * len(drawn.violation_labels), f" {v.property} (step {v.step})",
                      color=VIOLATION_COLOR, fontsize=8, va="bottom", ha="left")
            drawn.violation_labels.append(v.property)
    band.set_ylim(band.get_ylim()[0], peak + 1.3 + 0.55 * max(0, len(seen) - 1))

    ax.set_xlim(x0, x1)
    ax.set_ylim(n, 0)
    ax.set_xlabel("step")
    if n <= LABEL_ROWS:
        ax.set_yticks([y + 0.5 for y in range(n)])
        ax.set_yticklabels([r.id for r in layout.rows], fontsize=7 if n > 30 else 8)
        for lab, row in zip(ax.get_yticklabels(), layout.rows, strict=True):
            lab.set_color(adapter_color(row.adapter) if row.adapter else BASE_COLOR)
        drawn.row_labels = [r.id for r in layout.rows]
    else:
        groups: dict[int, list[int]] = {}
        for y, r in enumerate(layout.rows):
            groups.setdefault(r.adapter, []).append(y)
        ax.set_yticks([(ys[0] + ys[-1] + 1) / 2 for ys in groups.values()])
        ax.set_yticklabels([f"{'base' if a == 0 else f'adapter {a}'} ({len(ys)})" for a, ys in groups.items()],
                           fontsize=8)
        for lab, a in zip(ax.get_yticklabels(), groups, strict=True):
            lab.set_color(adapter_color(a))
        for ys in groups.values():
            ax.axhline(ys[0], color="#cccccc", linewidth=0.5)
        drawn.row_labels = [f"adapter {a}" for a in groups]
    ax.tick_params(axis="x", labelsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    handles = [Patch(facecolor=kind_color(1, k), edgecolor=adapter_color(1) if k == "idle" else "none",
                     label=KIND_LABELS[k]) for k in KINDS]
    handles += [Line2D([], [], linestyle="none", marker=m, color=c, markerfacecolor="none" if k == "violation" else c,
                       label=k) for k, (m, c) in style.items()]
    if any(s.throttle for s in layout.steps):
        handles.append(Patch(facecolor="#dddddd", label="throttled step (band)"))
    if layout.policy == "fair":
        handles.append(Line2D([], [], linestyle="none", marker="*", color="black", label="r* (boxed while r*)"))
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=7, frameon=False,
               title="segments in the adapter's colour (shown: adapter 1)", title_fontsize=7)
    fig.subplots_adjust(left=0.1, right=0.9, top=1 - 0.55 / fig.get_figheight(), bottom=1.0 / fig.get_figheight())
    return fig, drawn
