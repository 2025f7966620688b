"""Imports go only downward, through every package of the project.

The rule in English. The project's modules sit in layers, in this order
(`LAYERS`, lowest first):

    lora_sched (the empty package) < palette < spec < policy < deploy
        < proofs < conformance < fuzz < bench < view < cli

- `spec` is the model: config, requests, states, traces, properties. It imports
  nothing of the project above it.
- `policy` executes the spec: the reference gates and core, their one registry
  (`policy.GATES`), the driver, replay, the step-time cost model, and the
  trace checker (`policy.check`, which needs fair's bound and holds, the
  replay and the cost model).
- `deploy` is what vLLM loads with `--scheduler-cls`: `lora_sched.scheduler`, its
  hook and queues (`lora_sched.hook`, `lora_sched.queues`) and the trace recorder
  it uses, `lora_sched.recorder`; it imports spec and
  policy only (and vLLM).
- `proofs`, `conformance`, `fuzz`, `bench` and `view` are tools over them: fuzz
  uses proofs' counterexamples and conformance's in-process vLLM; conformance
  and bench drive the deploy classes. Their order is what the code needs; two
  tools with no edge between them could swap.
- `lora_sched.cli` dispatches every command; it may import anything and nothing
  imports it. `lora_sched.palette` is a leaf (colours, no imports).

A module may import modules of its own layer or of a lower one, never of a
higher one. Every import counts: top-level ones (those under
`if TYPE_CHECKING:` included), function-local ones, relative `from . import`
forms, `importlib.import_module` of a string literal, and, in a module that
calls `import_module` on a computed name, every string literal in it that names
a project module (the CLI's command table).

The module graph, all those imports included, has no cycle, so neither has
the graph of packages (this subsumes the cycle test bench/ had alone).

A function-local import of a project module is allowed only when it defers
a heavy or optional dependency (`HEAVY`: vLLM, torch, Ray, Z3, matplotlib,
the vllm extra's libraries) that the module imported pulls in at import time
(itself or through its top-level imports) and the importing module does not
already: deferring it keeps e.g. `lora-sched check` from paying for Z3 or
vLLM. A project module whose import has a side effect on the process
(`SIDE_EFFECTS`, every module writing `os.environ` when imported: e.g.
`conformance.inprocess` quiets vLLM's log, which a live server started
later would inherit) counts as heavy. It is
never the way around a cycle or an upward edge, and the two rules above see
through it anyway.

`check_tree` returns every breach as a line; the planted cases below show
that each rule can fail.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: (layer, the modules it holds, each with its submodules).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lora_sched", ("lora_sched",)),  # the package itself: exactly lora_sched/__init__.py
    ("palette", ("lora_sched.palette",)),
    ("spec", ("lora_sched.spec",)),
    ("policy", ("lora_sched.policy",)),
    ("deploy", ("lora_sched.scheduler", "lora_sched.hook", "lora_sched.queues", "lora_sched.recorder")),
    ("proofs", ("lora_sched.proofs",)),
    ("conformance", ("lora_sched.conformance",)),
    ("fuzz", ("lora_sched.fuzz",)),
    ("bench", ("lora_sched.bench",)),
    ("view", ("lora_sched.view",)),
    ("cli", ("lora_sched.cli", "lora_sched.__main__")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}

# Top-level distributions whose import is worth deferring to the function that needs it.
HEAVY = {"vllm", "torch", "ray", "z3", "matplotlib", "transformers", "tokenizers", "peft", "openai", "pandas"}
# Project modules whose import changes the process for what it does later: deferring
# them is deferring that, as with a heavy dependency (module -> what it changes).
SIDE_EFFECTS = {
    # A live vLLM server started later by the same process would inherit it (its log goes quiet).
    "lora_sched.conformance.inprocess": "VLLM_LOGGING_LEVEL=ERROR in os.environ",
    "lora_sched.bench.overhead": "VLLM_LOGGING_LEVEL=ERROR in os.environ",
    # Ray, imported later, takes 127.0.0.1 as the node address.
    "lora_sched.fuzz": "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in os.environ",
}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported project module
    line: int
    local: bool  # inside a function


def layer_of(module: str) -> str | None:
    """The layer holding `module` (its longest listed prefix), or None."""
    best: tuple[int, str] | None = None
    for name, members in LAYERS:
        for m in members:
            if module == m or (module.startswith(m + ".") and m != "lora_sched"):
                if best is None or len(m) > best[0]:
                    best = (len(m), name)
    return None if best is None else best[1]


def project_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the installed packages (pyproject's package-dir), by dotted name."""
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {pkg: root / tool.get("package-dir", {}).get(pkg, pkg.replace(".", "/")) for pkg in tool["packages"]}
    out: dict[str, Path] = {}
    for pkg, d in dirs.items():
        for f in sorted(d.glob("*.py")):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
    return out


def _is_package(module: str, modules: Iterable[str]) -> bool:
    return any(m.startswith(module + ".") for m in modules)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The deepest project module `name` imports (`a.b.C` -> `a.b` when C is not a module)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in modules:
            return cand
    return None


def imports_of(module: str, source: str, modules: set[str]) -> tuple[list[Edge], set[str]]:
    """The project modules `module` imports (`Edge`s) and the top-level names of the
    outside modules it imports at its top level (not inside a function)."""
    tree = ast.parse(source)
    is_pkg = _is_package(module, modules)
    edges: list[Edge] = []
    outside: set[str] = set()
    dynamic = False

    def add(name: str, line: int, local: bool) -> None:
        target = _resolve(name, modules)
        if target is not None and name.split(".")[0] == "lora_sched":
            edge = Edge(module, target, line, local)
            if target != module and edge not in edges:
                edges.append(edge)
        elif not local:
            outside.add(name.split(".")[0])

    def visit(node: ast.AST, local: bool) -> None:
        nonlocal dynamic
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, child.lineno, local)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                for a in child.names:
                    full = f"{mod}.{a.name}"
                    add(full if full in modules else mod, child.lineno, local)
            elif isinstance(child, ast.Call):
                fn = child.func
                fname = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                if fname in ("import_module", "__import__") and child.args:
                    arg = child.args[0]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        add(arg.value, child.lineno, local)
                    else:
                        dynamic = True
            visit(child, inner)

    visit(tree, False)
    if dynamic:  # a computed import_module: every literal naming a project module is an edge
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
                add(node.value, node.lineno, False)
    return edges, outside


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its nodes, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


@dataclass
class Tree:
    edges: list[Edge]
    outside: dict[str, set[str]]  # module -> outside top-level imports at its top level

    def heavy(self, module: str, modules: set[str]) -> set[str]:
        """The HEAVY dependencies importing `module` pulls in (its parents' `__init__` included),
        and the SIDE_EFFECTS it sets off."""
        top = {}
        for e in self.edges:
            if not e.local:
                top.setdefault(e.source, set()).add(e.target)
        seen: set[str] = set()
        todo = [module]
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            parts = m.split(".")
            todo += [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]
            todo += top.get(m, ())
        return ({d for m in seen for d in self.outside.get(m, ()) if d in HEAVY}
                | {f"{m}: {SIDE_EFFECTS[m]}" for m in seen if m in SIDE_EFFECTS})

    def deferred(self, e: Edge, modules: set[str]) -> set[str]:
        """What the function-local import `e` keeps out of its module's import: the
        HEAVY dependencies of its target that its source does not pull in already."""
        return self.heavy(e.target, modules) - self.heavy(e.source, modules)


def build(sources: dict[str, str]) -> Tree:
    modules = set(sources)
    edges: list[Edge] = []
    outside: dict[str, set[str]] = {}
    for m, src in sources.items():
        e, o = imports_of(m, src, modules)
        edges += e
        outside[m] = o
    return Tree(edges, outside)


def check_tree(sources: dict[str, str]) -> list[str]:
    """Every breach of the rules (module docstring) in `sources` (dotted name -> source)."""
    modules = set(sources)
    tree = build(sources)
    problems = [f"{m}: in no layer of LAYERS" for m in sorted(modules) if layer_of(m) is None]
    for e in tree.edges:
        src, dst = layer_of(e.source), layer_of(e.target)
        if src is None or dst is None:
            continue
        how = "a function-local import" if e.local else "an import"
        if RANK[dst] > RANK[src]:
            problems.append(f"{e.source}:{e.line}: {how} of {e.target} goes up, from {src} to {dst}")
        if e.local and not tree.deferred(e, modules):
            problems.append(f"{e.source}:{e.line}: function-local import of {e.target} defers no heavy "
                            f"dependency {e.source} does not import already: import it at the top")
    graph: dict[str, set[str]] = {}
    for e in tree.edges:
        graph.setdefault(e.source, set()).add(e.target)
    cycle = _find_cycle(graph)
    if cycle:
        problems.append("import cycle: " + " -> ".join(cycle))
    layers: dict[str, set[str]] = {}
    for e in tree.edges:
        src, dst = layer_of(e.source), layer_of(e.target)
        if src is not None and dst is not None and src != dst:
            layers.setdefault(src, set()).add(dst)
    cycle = _find_cycle(layers)
    if cycle:
        problems.append("import cycle between packages: " + " -> ".join(cycle))
    return problems


def project_sources() -> dict[str, str]:
    return {m: f.read_text() for m, f in project_files().items()}


# ---- the project ----------------------------------------------------------------------------------

def test_every_package_is_in_a_layer() -> None:
    """Every module of every installed package is placed, and every layer holds a module."""
    modules = set(project_files())
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(tool["packages"]) <= modules
    assert [m for m in sorted(modules) if layer_of(m) is None] == []
    for name, members in LAYERS:
        assert all(m in modules for m in members), (name, members)


def test_imports_go_only_downward_without_a_cycle() -> None:
    assert check_tree(project_sources()) == []


def test_the_graph_is_seen_whole() -> None:
    """The parser sees what the rules are about: lazy imports, relative ones, the CLI's table."""
    tree = build(project_sources())
    pairs = {(e.source, e.target) for e in tree.edges}
    assert ("lora_sched.bench.cli", "lora_sched.bench.live") in pairs
    assert ("lora_sched.cli", "lora_sched.proofs.cli") in pairs  # a string of COMMANDS
    assert ("lora_sched.scheduler", "lora_sched.recorder") in pairs
    assert any(e.local for e in tree.edges)
    # nothing imports the CLI but `python -m lora_sched`
    assert all(layer_of(e.target) != "cli" for e in tree.edges if e.source != "lora_sched.__main__")


def test_each_function_local_import_defers_a_heavy_dependency() -> None:
    """The function-local project imports left, each with what it defers."""
    sources = project_sources()
    modules = set(sources)
    tree = build(sources)
    deferred = {(e.source, e.target): tree.deferred(e, modules) for e in tree.edges if e.local}
    assert deferred and all(deferred.values()), {k: v for k, v in deferred.items() if not v}
    # The deploy classes import vLLM at the top; only tools that may run without it defer them.
    assert ("lora_sched.conformance.inprocess", "lora_sched.scheduler") in deferred


def _environ_writes_at_import(source: str) -> bool:
    """Whether the module, outside its functions, writes `os.environ` (setdefault, update, item assignment)."""
    for node in ast.walk(ast.Module(body=[n for n in ast.parse(source).body
                                          if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)],
                                    type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("setdefault", "update", "__setitem__", "pop") and \
                ast.unparse(node.func.value) == "os.environ":
            return True
        if isinstance(node, ast.Assign | ast.AugAssign) and any(
                isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            return True
    return False


def test_side_effects_lists_every_module_that_sets_the_environment_on_import() -> None:
    """SIDE_EFFECTS is complete: a module writing os.environ when imported is in it, and only those."""
    found = {m for m, src in project_sources().items() if _environ_writes_at_import(src)}
    assert found == set(SIDE_EFFECTS)


# ---- planted breaches: each rule can fail ---------------------------------------------------------

def _planted(**sources: str) -> list[str]:
    base = {"lora_sched": "", "lora_sched.spec": "", "lora_sched.policy": "", "lora_sched.fuzz": "",
            "lora_sched.proofs": ""}
    return check_tree({**base, **{k.replace("__", "."): v for k, v in sources.items()}})


def test_planted_upward_import_is_reported() -> None:
    problems = _planted(lora_sched__spec__check="from lora_sched.policy.replay import Replayer\n",
                        lora_sched__policy__replay="from lora_sched.spec import config\n",
                        lora_sched__spec__config="")
    assert problems == ["lora_sched.spec.check:1: an import of lora_sched.policy.replay goes up, from spec to policy",
                        "import cycle between packages: policy -> spec -> policy"]  # no module cycle: a package one


def test_planted_upward_import_hidden_in_a_function_is_reported() -> None:
    problems = _planted(lora_sched__spec__check="def f():\n    from lora_sched.policy import fair\n",
                        lora_sched__policy__fair="import z3\n")  # heavy: only the direction is wrong
    assert problems == ["lora_sched.spec.check:2: a function-local import of lora_sched.policy.fair goes up, "
                        "from spec to policy"]


def test_planted_relative_and_dynamic_imports_are_seen() -> None:
    problems = _planted(lora_sched__spec__a="from .. import policy\n",
                        lora_sched__spec__b="import importlib\nimportlib.import_module('lora_sched.fuzz')\n")
    assert problems == ["lora_sched.spec.a:1: an import of lora_sched.policy goes up, from spec to policy",
                        "lora_sched.spec.b:2: an import of lora_sched.fuzz goes up, from spec to fuzz"]


def test_planted_cycle_is_reported() -> None:
    """A cycle inside one layer (proofs.cli -> proofs.sweep -> proofs.cli), lazily closed."""
    problems = _planted(lora_sched__proofs__cli="def main():\n    from lora_sched.proofs import sweep\n",
                        lora_sched__proofs__sweep="import ray\nfrom lora_sched.proofs import cli\n")
    assert problems == ["import cycle: lora_sched.proofs.cli -> lora_sched.proofs.sweep -> lora_sched.proofs.cli"]


def test_planted_needless_local_import_is_reported() -> None:
    problems = _planted(lora_sched__fuzz__a="def f():\n    from lora_sched.spec.config import Config\n",
                        lora_sched__spec__config="import json\n")
    assert problems == ["lora_sched.fuzz.a:2: function-local import of lora_sched.spec.config defers no heavy "
                        "dependency lora_sched.fuzz.a does not import already: import it at the top"]


def test_planted_local_import_of_what_the_module_has_already_is_reported() -> None:
    """Z3 is imported at the top already: importing the Z3 module lazily defers nothing."""
    problems = _planted(lora_sched__fuzz__a="import z3\ndef f():\n    from lora_sched.proofs import enc\n",
                        lora_sched__proofs__enc="import z3\n")
    assert problems == ["lora_sched.fuzz.a:3: function-local import of lora_sched.proofs.enc defers no heavy "
                        "dependency lora_sched.fuzz.a does not import already: import it at the top"]


def test_planted_module_outside_the_layers_is_reported() -> None:
    assert _planted(lora_sched__extra="") == ["lora_sched.extra: in no layer of LAYERS"]
