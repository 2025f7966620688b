"""The timeline as one self-contained HTML file, drawn from a `view.layout.Layout`.

The layout travels as JSON inside the page and the inlined `timeline.js` draws
it on a canvas (no fetch, no external script or font). A first inline script
collects script errors into `<html data-errors>` and `#view-errors`.
"""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from typing import Any

from lora_sched.view.layout import KIND_LABELS, KINDS, Layout, kind_color

_ERRORS = """<script>
(function () {
  var n = 0;
  function report(msg) {
    n++;
    document.documentElement.setAttribute("data-errors", String(n));
    var ul = document.getElementById("view-errors");
    if (ul) { var li = document.createElement("li"); li.textContent = msg; ul.appendChild(li); }
  }
  window.addEventListener("error", function (e) { report(String(e.message) + " (line " + e.lineno + ")"); });
  window.addEventListener("unhandledrejection", function (e) { report("unhandled rejection: " + e.reason); });
})();
</script>"""

_STYLE = """<style>
body { font-family: sans-serif; margin: 8px; color: #222; }
#head h1 { font-size: 15px; margin: 0 0 2px 0; }
#head .sub { font-size: 12px; color: #555; }
#head .controls { font-size: 12px; margin: 4px 0; }
#head button { font-size: 12px; }
#wrap { position: relative; }
#timeline { display: block; cursor: crosshair; border-top: 1px solid #eee; }
#tip { position: absolute; display: none; background: #fffff4; border: 1px solid #999; padding: 4px 6px;
       font-size: 12px; pointer-events: none; max-width: 420px; box-shadow: 1px 1px 4px #aaa; z-index: 2; }
#legend { font-size: 12px; margin-top: 4px; }
#legend span.sw { display: inline-block; width: 14px; height: 10px; margin: 0 3px 0 10px; vertical-align: middle; }
#view-errors { color: #d62728; font-size: 12px; }
</style>"""


def _swatch(color: str, label: str, border: str = "none") -> str:
    return (f'<span class="sw" style="background:{color};border:1px solid {border}"></span>'
            f"{html.escape(label)}")


def page(layout: Layout) -> str:
    """The HTML text of the page."""
    data: dict[str, Any] = layout.to_json()
    for row in data["rows"]:
        for seg in row["segments"]:
            if seg["kind"] == "decode":
                seg["tokens"] = []  # one token a step: the page knows
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    script = resources.files(__package__).joinpath("timeline.js").read_text(encoding="utf-8")
    legend = " ".join(_swatch(kind_color(1, k), KIND_LABELS[k], "#1f77b4" if k == "idle" else "transparent")
                      for k in KINDS)
    adapters = " ".join(_swatch(data["adapter_colors"][str(a)], "base model" if a == 0 else f"adapter {a}")
                        for a in layout.adapters())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(layout.title)}</title>
{_ERRORS}
{_STYLE}
</head><body>
<div id="head"><h1>{html.escape(layout.title)}</h1><div class="sub">{html.escape(layout.subtitle)}</div>
<div class="controls"><button id="zoom-in">zoom in</button> <button id="zoom-out">zoom out</button>
<button id="zoom-rows">zoom rows</button> <button id="reset">reset</button>
&nbsp; wheel: zoom steps, shift+wheel: zoom rows, drag: pan, double-click: reset; hover for details</div></div>
<div id="wrap"><canvas id="timeline"></canvas><div id="tip"></div></div>
<div id="legend">{legend}<br>{adapters} &nbsp; | finished &nbsp; &#9660; preempted &nbsp; &#10005; aborted
&nbsp; <span style="color:#d62728">&#9675; violation</span> &nbsp; &#9733; r* (boxed while r*)
{_swatch("#dddddd", "throttled step (band)")}</div>
<ul id="view-errors"></ul>
<div id="view-status" data-ready="0"></div>
<script type="application/json" id="layout-data">{payload}</script>
<script>
{script}
</script>
</body></html>
"""


def render(layout: Layout, path: str | os.PathLike[str]) -> int:
    """Write the page to `path`; returns its size in bytes."""
    text = page(layout)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode("utf-8"))
