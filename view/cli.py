"""`lora-sched view TRACE [--out FILE.html|FILE.png ...]`: draw a trace's timeline.

TRACE is a `lora-sched-trace` JSONL file or an ITF counterexample from `prove
--itf-dir`. `--out` may be repeated, the format following the extension;
without it the page is `TRACE.html` next to TRACE. Exit 0 when drawn
(violations are drawn, not failed on), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lora_sched.spec.config import ConfigError
from lora_sched.spec.trace import TraceError
from lora_sched.view import html
from lora_sched.view.itf import ItfError
from lora_sched.view.layout import layout_file

FORMATS = (".html", ".png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a lora-sched-trace JSONL file or an ITF counterexample (.itf.json)")
    p.add_argument("--out", action="append", default=[], metavar="FILE.html|FILE.png",
                   help="where to draw it (repeatable; default: TRACE.html next to TRACE)")


def main(args: argparse.Namespace) -> int:
    outs = [Path(o) for o in args.out] or [Path(str(args.trace) + ".html")]
    for o in outs:
        if o.suffix.lower() not in FORMATS:
            print(f"error: --out {o}: unknown format {o.suffix or '(none)'!r}; use .html or .png", file=sys.stderr)
            return 2

    t0 = time.perf_counter()
    try:
        layout = layout_file(args.trace)
    except (TraceError, ItfError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t1 = time.perf_counter()
    print(f"{layout.title}: {len(layout.rows)} requests, {len(layout.steps)} steps, "
          f"{len(layout.violations)} violations ({t1 - t0:.2f}s to lay out)")
    for o in outs:
        o.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        if o.suffix.lower() == ".html":
            size = html.render(layout, o)
            what = f"{size // 1024} KiB"
        else:
            from lora_sched.view import png

            drawn = png.render(layout, o)
            what = f"{drawn.segments} segments"
        print(f"wrote {o} ({what}, {time.perf_counter() - t:.2f}s)")
    return 0
