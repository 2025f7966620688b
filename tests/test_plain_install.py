"""A plain `pip install lora-sched` (no extras) runs every command, or names the extra it needs.

A fresh venv gets this repository installed the way a user installs it
(`pip install .`: the runtime dependencies z3-solver, numpy and matplotlib,
no vLLM, Ray, msgspec or test tools). Then, from that venv's own console
script: `simulate`, `check` (whose trace reader falls back to json without
msgspec), `prove`, `bench` with its plots, `view` to HTML and PNG, and a
`python -m lora_sched.bench.X` module run to completion; `conform`,
`bench --live` and `fuzz` stop with exit 2 and one line
naming `pip install 'lora-sched[vllm]'` / `'lora-sched[fuzz]'`.
(`tests/test_extras.py` covers more commands with an import blocker, in
this venv.)
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A fresh venv and a pip install: a minute of the two cores (make test-full);
# tests/test_extras.py covers the extras' messages in make test.
pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with `pip install ROOT` and nothing else; its bin directory."""
    d = tmp_path_factory.mktemp("plain") / "venv"
    venv.EnvBuilder(with_pip=True).create(d)
    out = subprocess.run([str(d / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return d / "bin"


def run(plain: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(plain / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=900)


def test_the_plain_venv_has_no_extra(plain, tmp_path):
    """The venv is plain: none of the extras' modules import, and the package is not this checkout's."""
    probe = ("import importlib.util, json, lora_sched; print(json.dumps({'file': lora_sched.__file__, "
             "'found': [m for m in ('vllm', 'torch', 'ray', 'msgspec', 'hypothesis', 'pytest') "
             "if importlib.util.find_spec(m)]}))")
    out = run(plain, "python", "-c", probe, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["found"] == [] and not got["file"].startswith(str(ROOT)), got


def test_core_commands_run_after_a_plain_install(plain, tmp_path):
    trace = tmp_path / "seed.jsonl"
    steps = [
        ("lora-sched", "simulate", "--scenario", "seed", "--policy", "vllm", "--out", str(trace)),
        ("lora-sched", "check", str(trace), "--policy", "vllm"),
        ("lora-sched", "prove", "--policy", "fair", "--property", "batch_lora_cap", "--depth", "2"),
        ("lora-sched", "bench", "--out", str(tmp_path / "bench")),
        ("lora-sched", "view", str(trace), "--out", str(tmp_path / "seed.html")),
        ("lora-sched", "view", str(trace), "--out", str(tmp_path / "seed.png")),
        ("python", "-m", "lora_sched.bench.checkspeed", "--steps", "2000", "--dir", str(tmp_path / "cs")),
    ]
    for argv in steps:
        out = run(plain, *argv, cwd=tmp_path)
        said = f"{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        assert out.returncode == 0, f"{' '.join(argv)} exited {out.returncode}:\n{said}"
        assert "Traceback" not in out.stderr, out.stderr
    assert (tmp_path / "seed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<html" in (tmp_path / "seed.html").read_text().lower()
    assert list((tmp_path / "bench").glob("*.png")), sorted(p.name for p in (tmp_path / "bench").iterdir())


@pytest.mark.parametrize(("argv", "extra"), [
    (("conform", "--in-process", "--scenario", "starvation", "--policy", "vllm"), "vllm"),
    (("bench", "--live", "--no-plots"), "vllm"),
    (("fuzz", "--minutes", "0.01"), "fuzz"),
])
def test_a_command_needing_an_extra_names_it_after_a_plain_install(plain, tmp_path, argv, extra):
    out = run(plain, "lora-sched", *argv, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"error: lora-sched {argv[0]} needs "), lines[0]
    assert f"pip install 'lora-sched[{extra}]'" in lines[0], lines[0]
