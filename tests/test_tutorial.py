"""docs/verify-your-scheduler.md's commands run as written and exit as the tutorial says.

Every ```sh block preceded by `<!-- tutorial: exit N -->` is run from the
repository root, in order, with `lora-sched` and `python` meaning this
interpreter (`python -m lora_sched`), and must exit N; the blocks without the
marker (installing a vLLM checkout, a user's own package) are illustrations.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# vLLM and the fuzz extra (Ray); minutes: make test-full, one Ray cluster at a time
pytestmark = [pytest.mark.vllm, pytest.mark.full]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "verify-your-scheduler.md"
STEP = re.compile(r"<!-- tutorial: exit (\d+) -->\n```sh\n(.*?)```", re.S)


def steps() -> list[tuple[int, str]]:
    return [(int(code), body.strip()) for code, body in STEP.findall(DOC.read_text())]


def test_the_tutorial_marks_its_commands():
    found = steps()
    assert len(found) >= 5 and {code for code, _ in found} == {0, 1}
    assert any("--expect bounded_wait" in cmd for _, cmd in found)
    assert any("--expect no_hol_blocking" in cmd for _, cmd in found)


def test_the_tutorial_commands_run_as_written():
    shutil.rmtree(ROOT / "out" / "tutorial", ignore_errors=True)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for code, cmd in steps():
        argv = shlex.split(cmd)
        if argv[0] == "lora-sched":
            argv = [sys.executable, "-m", "lora_sched", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == code, (cmd, done.stdout[-3000:], done.stderr[-3000:])
        if "--scheduler-cls" in cmd and "fuzz" in argv[:4]:
            assert "replay: off: no reference model for" in done.stdout, done.stdout
