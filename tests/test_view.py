"""`lora-sched view`: the layout, the PNG (structurally) and the HTML in headless Chromium.

The expectations come from the inputs, not from the viewer: the ITF
counterexamples' own metadata (property, skipped request), the step records of
the traces (preemptions, aborts, admissions), and `lora-sched check`'s report.
The PNG is compared through the figure's artists and pixels at the places the
layout puts segments; the HTML is loaded in Debian's `chromium` (installed by
`make install`), which must report no script error, draw every segment, answer
a hover with the request's details, zoom, and paint a non-empty screenshot.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.policy.scenarios import SCENARIOS
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request
from lora_sched.spec.trace import read_trace
from lora_sched.view import html, png
from lora_sched.view.layout import Layout, kind_color, layout_file

from lora_sched.palette import adapter_color

ROOT = Path(__file__).resolve().parent.parent
CEX = ROOT / "tests" / "cex"


def simulate(tmp_path: Path, scenario: str, policy: str) -> Path:
    config, workload = SCENARIOS[scenario].config, SCENARIOS[scenario].workload
    out = tmp_path / f"{scenario}-{policy}.jsonl"
    run(config, workload, policy=policy, trace_path=out)
    return out


def rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def colours_in(path: Path) -> set[tuple[int, int, int]]:
    img = mpimg.imread(str(path))
    px = img[..., :3] if img.dtype == np.uint8 else (img[..., :3] * 255).round().astype(np.uint8)
    packed = np.unique((px[..., 0].astype(np.uint32) << 16) | (px[..., 1].astype(np.uint32) << 8) | px[..., 2])
    return {(int(v) >> 16, (int(v) >> 8) & 255, int(v) & 255) for v in packed}


# ---- the layout ---------------------------------------------------------------------------------


def test_itf_skip_counterexample_layout():
    """The Z3 skip counterexample: the skipped request idles, the batch breaks the cap where check says."""
    itf = json.loads((CEX / "vllm_batch_lora_cap.itf.json").read_text())
    meta = itf["#meta"]
    layout = layout_file(CEX / "vllm_batch_lora_cap.itf.json")
    assert {r.id for r in layout.rows} == {r["id"] for r in meta["requests"]}
    rows = {r.id: r for r in layout.rows}
    for step, ids in meta["skips"].items():
        for rid in ids:
            assert any(s.kind == "idle" and s.start <= int(step) <= s.end for s in rows[rid].segments), rid
    props = {v.property for v in layout.violations}
    assert meta["property"] in props
    cap = next(v for v in layout.violations if v.property == meta["property"])
    assert cap.step == len(itf["states"]) - 1  # a BMC counterexample breaks the property in its last state
    step = next(s for s in layout.steps if s.step == cap.step)
    assert len(step.batch) > layout.max_loras
    for rid in cap.requests:
        assert any(m.kind == "violation" and m.label == meta["property"] and m.step == cap.step
                   for m in rows[rid].marks)


def test_itf_rows_grouped_by_adapter_base_first():
    layout = layout_file(CEX / "blocking_no_hol_blocking.itf.json")
    adapters = [r.adapter for r in layout.rows]
    assert adapters == sorted(adapters) and adapters[0] == 0
    assert [v.property for v in layout.violations] == ["no_hol_blocking"]


def test_fair_starvation_shows_star_victim_and_held(tmp_path):
    """fair on the starvation stream: the adapter-3 request is r*, an adapter is held for it, then it runs."""
    layout = layout_file(simulate(tmp_path, "starvation", "fair"))
    spans = layout.star_spans()
    # The adapter-3 request is the first r*; requests held for it may starve
    # long enough (S = 8 here) to be r* in turn, whatever their kind.
    assert spans[0][0] == "victim-a3"
    victims = {a for s in layout.steps for a in s.victims}
    first = next(s.victims for s in layout.steps if s.victims)
    assert first and set(first) <= {1, 2}  # for the adapter-3 request, a stream adapter drains
    held = [r for r in layout.rows if any(s.kind == "held" for s in r.segments)]
    assert held and all(r.adapter in victims for r in held)
    a3 = next(r for r in layout.rows if r.id == "victim-a3")
    assert a3.first_admitted is not None and spans[0][2] == a3.first_admitted
    assert a3.wait == a3.first_admitted - a3.arrival


def test_vllm_starvation_wait_matches_check(tmp_path):
    trace = simulate(tmp_path, "starvation", "vllm")
    layout = layout_file(trace)
    waits = check_trace(str(trace)).waits
    rows = {r.id: r for r in layout.rows}
    assert {rid: r.wait for rid, r in rows.items() if rid in waits} == waits
    assert rows["victim-a3"].wait == max(waits.values())
    assert not layout.star_spans() and not any(s.victims for s in layout.steps)


def test_preemptions_aborts_and_decodes_follow_the_trace(tmp_path):
    cfg = Config(max_loras=2, max_num_seqs=8, max_num_batched_tokens=16, kv_blocks=8, block_size=4)
    reqs = [Request(f"r{i}", i % 3, 10, 10, 1 + i) for i in range(6)]
    out = tmp_path / "kv.jsonl"
    run(cfg, Workload(reqs, aborts={"r5": 9}), trace_path=out)
    trace = read_trace(out)
    layout = layout_file(out)
    marks = Counter(m.kind for r in layout.rows for m in r.marks)
    preempted = sum(len(s.preempted) for s in trace.steps())
    assert preempted > 0 and marks["preempted"] == preempted
    assert marks["finished"] == sum(len(s.finished) for s in trace.steps())
    assert marks["aborted"] == 1
    rows = {r.id: r for r in layout.rows}
    for rec in trace.steps():
        for rid, n in rec.scheduled.items():
            seg = next(s for s in rows[rid].segments if s.start <= rec.step <= s.end)
            assert seg.kind in ("prefill", "decode")
            if seg.kind == "decode":
                assert n == 1
    # every request decodes max_tokens - 1 times after its prefill's sampled token (no decode when preempted)
    for r in layout.rows:
        if r.outcome == "finished" and not any(m.kind == "preempted" for m in r.marks):
            assert sum(s.steps for s in r.segments if s.kind == "decode") == r.max_tokens - 1


def test_throttled_steps_are_shown(tmp_path):
    """A step line with `"throttle": true` (the DP prefill throttle) is shaded in the band; others are not."""
    src = simulate(tmp_path, "seed", "vllm")
    lines = src.read_text().splitlines()
    steps = [i for i, line in enumerate(lines) if json.loads(line)["kind"] == "step"]
    throttled = []
    for i in steps[1::2]:
        obj = json.loads(lines[i])
        obj["throttle"] = True
        throttled.append(obj["step"])
        lines[i] = json.dumps(obj)
    out = tmp_path / "throttle.jsonl"
    out.write_text("\n".join(lines) + "\n")
    layout = layout_file(out)
    assert throttled and [s.step for s in layout.steps if s.throttle] == throttled
    fig, _ = png.figure(layout)
    band = fig.axes[0]
    shaded = [p for p in band.patches if p.get_facecolor()[:3] == tuple(c / 255 for c in rgb("#dddddd"))]
    assert len(shaded) == len(throttled)


def test_docs_throttle_crash_pictures_tell_the_truth():
    """The traces behind docs/img/view-throttle-crash-*.png: under vllm a request of a new adapter is
    admitted in a throttled step and the batch later breaks the cap; fair keeps both caps."""
    vllm = layout_file(ROOT / "docs" / "traces" / "throttle-crash-vllm.jsonl")
    first = {v.property: v for v in reversed(vllm.violations)}
    assert {"running_lora_cap", "batch_lora_cap"} <= set(first)
    steps = {s.step: s for s in vllm.steps}
    assert steps[first["running_lora_cap"].step].throttle
    assert len(steps[first["batch_lora_cap"].step].batch) > vllm.max_loras
    fair = layout_file(ROOT / "docs" / "traces" / "throttle-crash-fair.jsonl")
    assert any(s.throttle for s in fair.steps)
    assert not {"running_lora_cap", "batch_lora_cap"} & {v.property for v in fair.violations}


# ---- the PNG ------------------------------------------------------------------------------------


def _pixel(img: np.ndarray, fig_h: int, disp: tuple[float, float]) -> tuple[int, int, int]:
    x, y = int(round(disp[0])), fig_h - int(round(disp[1]))
    p = img[y, x, :3]
    return tuple(int(round(c * 255)) for c in p) if img.dtype != np.uint8 else tuple(int(c) for c in p)


def test_png_structure_and_pixels(tmp_path):
    """Rows, segments and marks are on the figure, and each segment's colour is where the layout says."""
    layout = layout_file(CEX / "vllm_batch_lora_cap.itf.json")
    fig, drawn = png.figure(layout)
    band, ax = fig.axes[:2]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [r.id for r in layout.rows]
    n_segments = sum(len(r.segments) for r in layout.rows)
    assert drawn.segments == n_segments
    assert [len(c.get_paths()) for c in ax.collections] == [n_segments]  # one polygon per segment
    band_texts = " ".join(t.get_text() for t in band.texts)
    for v in layout.violations:
        assert v.property in band_texts
    viol_pts = sum(len(line.get_xdata()) for line in ax.lines if line.get_marker() == "o")
    assert viol_pts == sum(1 for r in layout.rows for m in r.marks if m.kind == "violation") > 0
    out = tmp_path / "cex.png"
    fig.savefig(out, dpi=110)
    img = mpimg.imread(str(out))
    h = img.shape[0]
    for y, row in enumerate(layout.rows):
        for seg in row.segments:
            if seg.kind == "idle":
                continue
            disp = ax.transData.transform(((seg.start + seg.end) / 2 + 0.25, y + 0.3))
            assert _pixel(img, h, disp) == rgb(kind_color(row.adapter, seg.kind)), (row.id, seg)


def test_png_file_of_the_500_request_seed(tmp_path):
    from lora_sched.bench.simulate import seed_config, seed_requests
    from lora_sched.policy.driver import Workload, run

    trace = str(tmp_path / "seed.jsonl")
    run(seed_config(policy="vllm"), Workload(seed_requests(500)), trace_path=trace)
    layout = layout_file(trace)
    assert len(layout.rows) == 500
    out = tmp_path / "seed.png"
    drawn = png.render(layout, out)
    assert drawn.segments == sum(len(r.segments) for r in layout.rows)
    assert drawn.row_labels == [f"adapter {a}" for a in range(1, 9)]
    img = mpimg.imread(str(out))
    assert img.shape[0] > 800 and img.shape[1] > 800
    found = colours_in(out)
    for a in range(1, 9):
        assert rgb(kind_color(a, "decode")) in found, a


# ---- the HTML in a browser ----------------------------------------------------------------------


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is missing: `make install` installs Debian's package (apt-get install chromium)"
    return exe


def browse(args: list[str]) -> str:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--window-size=1280,900", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def status(dom: str) -> dict[str, str]:
    m = re.search(r'<div id="view-status"([^>]*)>', dom)
    assert m, dom[:500]
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', m[1]))


def html_errors(dom: str) -> str | None:
    m = re.search(r"<html[^>]*data-errors=\"(\d+)\"", dom)
    return m[1] if m else None


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[Layout, Path]]:
    d = tmp_path_factory.mktemp("pages")
    out = {}
    for name, layout in (("cex", layout_file(CEX / "vllm_batch_lora_cap.itf.json")),
                         ("fair", layout_file(simulate(d, "starvation", "fair")))):
        path = d / f"{name}.html"
        html.render(layout, path)
        out[name] = (layout, path)
    return out


@pytest.mark.parametrize("name", ["cex", "fair"])
def test_html_runs_hovers_and_zooms_in_chromium(pages, name):
    layout, path = pages[name]
    text = path.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the page must not fetch anything"
    dom = browse(["--dump-dom", path.as_uri() + "#selftest"])
    assert html_errors(dom) is None, re.findall(r"<li>(.*?)</li>", dom)
    st = status(dom)
    assert st["ready"] == "1" and st["selftest"] == "1"
    assert int(st["rows"]) == len(layout.rows)
    assert int(st["segments"]) == sum(len(r.segments) for r in layout.rows)
    assert int(st["marks"]) == sum(len(r.marks) for r in layout.rows)
    target = next(r for r in layout.rows if r.id == st["target"])
    for key in ("hover", "hover-zoomed"):
        hover = st[key]
        assert hover.startswith(f"{target.id} · adapter {target.adapter}"), hover
        assert f"prompt {target.prompt_tokens}, max_tokens {target.max_tokens}" in hover
        assert f"wait {target.wait} steps" in hover
    assert st["zoomed"] == "true"
    assert st["hover-band"].startswith("step ") and f"(max_loras {layout.max_loras})" in st["hover-band"]


def test_html_screenshot_is_drawn(pages, tmp_path):
    layout, path = pages["fair"]
    shot = tmp_path / "shot.png"
    browse([f"--screenshot={shot}", path.as_uri()])
    assert shot.stat().st_size > 10_000
    found = colours_in(shot)
    assert len(found) > 50
    for a in layout.adapters():
        assert rgb(adapter_color(a)) in found, a  # the band's blocks and the decode segments
    assert rgb(kind_color(1, "held")) in found


def test_html_error_collector_reports_a_broken_page(pages, tmp_path):
    """The planted bug: a page whose data does not parse must show up as a script error."""
    _, path = pages["cex"]
    broken = tmp_path / "broken.html"
    text = path.read_text()
    broken.write_text(re.sub(r'(<script type="application/json" id="layout-data">).*?(</script>)',
                             r"\1{not json\2", text, flags=re.S))
    dom = browse(["--dump-dom", broken.as_uri()])
    assert html_errors(dom) == "1"
    assert status(dom)["ready"] == "0"


# ---- the command --------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lora_sched.cli", "view", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_cli_writes_both_outputs(tmp_path):
    res = cli(str(CEX / "vllm_starvation_lasso.itf.json"), "--out", str(tmp_path / "a.html"),
              "--out", str(tmp_path / "a.png"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "a.html").stat().st_size > 1000 and (tmp_path / "a.png").stat().st_size > 1000
    assert "lasso" in (tmp_path / "a.html").read_text()


def test_cli_bad_inputs_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind":"header","format":"lora-sched-trace","version":1,"config":{}}\n{"kind":"step"}\n')
    res = cli(str(bad))
    assert res.returncode == 2 and f"{bad}:2: missing field 'step'" in res.stderr, res.stderr
    itf = json.loads((CEX / "vllm_batch_lora_cap.itf.json").read_text())
    itf["states"][2]["scheduled"] = {"#map": [["r99", 1]]}  # no such request: malformed, not a violation
    broken = tmp_path / "broken.itf.json"
    broken.write_text(json.dumps(itf))
    res = cli(str(broken))
    assert res.returncode == 2 and "states[2]" in res.stderr and "r99" in res.stderr, res.stderr
    res = cli(str(CEX / "vllm_batch_lora_cap.itf.json"), "--out", str(tmp_path / "x.svg"))
    assert res.returncode == 2 and "use .html or .png" in res.stderr
