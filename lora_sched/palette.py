"""Colours shared by every plot: one colour per adapter, the same everywhere.

Adapter 0 (the base model) is grey; LoRA adapters cycle through matplotlib's
`tab10` without its red (kept for violations) and grey (the base model), then
`tab20`'s light variants. Plain hex strings, so the HTML viewer and matplotlib
use the very same values without importing matplotlib.
"""

from __future__ import annotations

BASE_COLOR = "#7f7f7f"
VIOLATION_COLOR = "#d62728"
_LORA_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5",
)


def adapter_color(adapter: int) -> str:
    """The colour of `adapter` (0 = base model) in every plot."""
    if adapter <= 0:
        return BASE_COLOR
    return _LORA_COLORS[(adapter - 1) % len(_LORA_COLORS)]


def mix(color: str, other: str, t: float) -> str:
    """`color` moved a fraction `t` (0..1) toward `other`, both `#rrggbb`."""
    a = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(other[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=True))
