"""Every command works after a plain install, or names the extra it needs.

`pip install lora-sched` (no extras) brings matplotlib (a runtime dependency:
`bench`'s plots and `view --out F.png`); vLLM (`conform`, `bench --live`)
and Ray (`fuzz`) are extras. A command run
without its extra stops with one line naming it, not a traceback. The
missing extra is simulated in a subprocess by an import hook that refuses
its modules, as an interpreter without them would.

And every `bench` module that docs offer as `python -m lora_sched.bench.X`
runs as one (it has a `__main__` block).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
from lora_sched.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def run_without(blocked: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKER, blocked, *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ("vllm,torch", ["conform", "--in-process", "--scenario", "starvation", "--policy", "vllm"], "vllm"),
    ("ray", ["fuzz", "--minutes", "0.01"], "fuzz"),
    ("vllm,torch", ["bench", "--live", "--no-plots"], "vllm"),
])
def test_a_command_without_its_extra_names_it_in_one_line(tmp_path, blocked, argv, extra):
    out = run_without(blocked, *argv, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"pip install 'lora-sched[{extra}]'" in lines[0] and argv[0] in lines[0], lines[0]


def test_a_missing_module_outside_the_extras_is_not_hidden(tmp_path):
    """Only the extras' modules get the one-line error; a missing runtime
    dependency is a packaging bug and keeps its traceback."""
    out = run_without("numpy", "bench", "--out", str(tmp_path / "b"), "--no-plots", cwd=tmp_path)
    assert out.returncode != 0 and "Traceback" in out.stderr and "ModuleNotFoundError" in out.stderr


def test_plots_are_a_runtime_dependency():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"matplotlib\b", d) for d in deps), deps


def test_every_offered_bench_module_runs_as_a_module():
    offered = set()
    shipped = [p for d in ("bench", "spec", "policy", "proofs", "conformance", "view", "fuzz", "lora_sched")
               for p in (ROOT / d).rglob("*.py")]
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *shipped]:
        offered |= set(re.findall(r"python -m lora_sched\.bench\.([a-z_]+)", path.read_text(errors="replace")))
    assert {"overhead", "checkspeed"} <= offered  # their own docstrings offer them
    for name in offered:
        path = ROOT / "bench" / f"{name}.py"
        assert path.exists(), f"python -m lora_sched.bench.{name} is offered but bench/{name}.py does not exist"
        assert 'if __name__ == "__main__":' in path.read_text(), \
            f"python -m lora_sched.bench.{name} is offered but does nothing"


def test_every_offered_experiment_runs_as_a_module():
    """`python -m experiments.X`, wherever README, docs or the experiments offer it, names a module that runs."""
    offered = set()
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "experiments").rglob("*.md"),
                 *(ROOT / "experiments").glob("*.py")]:
        offered |= set(re.findall(r"python -m experiments\.([a-z_]+)", path.read_text(errors="replace")))
    assert {"cli", "online"} <= offered
    for name in offered:
        path = ROOT / "experiments" / f"{name}.py"
        assert path.exists(), f"python -m experiments.{name} is offered but experiments/{name}.py does not exist"
        assert 'if __name__ == "__main__":' in path.read_text(), f"python -m experiments.{name} does nothing"
