"""vLLM's own `schedule()`, with the two hook calls the deploy classes need.

`hook_schedule` parses vLLM's own `schedule()` with `ast`, finds two nodes by
their shape and adds two calls; every other statement is vLLM's. The shapes,
per release: docs/conformance.md, "How `blocking`, `fair` and the field's
gates enter vLLM". A vLLM outside `spec.releases`, or a `schedule()` without
exactly one node of each shape, fails the import with `UnsupportedVllm`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

import vllm
import vllm.v1.core.sched.scheduler as _vsched
from vllm.v1.core.sched.scheduler import Scheduler

from lora_sched.spec import releases

# The releases whose schedule() shape this module was built and conformed against (spec.releases).
SUPPORTED_VLLM = releases.SUPPORTED


class UnsupportedVllm(ImportError):
    """vLLM's `schedule()` lacks a shape the hooks need."""


# ---- the AST hook -------------------------------------------------------------

def _names(node: ast.AST) -> set[str]:
    """Every identifier and attribute name read in `node`."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _is_lora_cap_if(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or node.orelse:
        return False
    body = node.body
    return (
        {"max_loras", "scheduled_loras", "lora_request"} <= _names(node.test)
        and len(body) == 2
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Call)
        and isinstance(body[0].value.func, ast.Name)
        and body[0].value.func.id == "skip_request"
        and isinstance(body[1], ast.Continue)
    )


def _is_scan_loop(node: ast.AST) -> bool:
    return isinstance(node, ast.While) and any(_is_lora_cap_if(n) for n in ast.walk(node))


def _is_waiting_scan_if(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and "preempted_reqs" in _names(node.test)
        and any(_is_scan_loop(n) for n in node.body)
    )


def _find(tree: ast.AST, pred: Any, what: str, version: str) -> tuple[list[ast.stmt], int]:
    """The one statement list and index holding a node matching `pred`."""
    found = []
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, field, None)
            if isinstance(stmts, list):
                found += [(stmts, i) for i, s in enumerate(stmts) if pred(s)]
    if len(found) != 1:
        raise UnsupportedVllm(
            f"lora_sched: vLLM {version}'s Scheduler.schedule() has {len(found)} {what} "
            f"(expected exactly 1); lora_sched supports vLLM {SUPPORTED_VLLM}. Install a supported vLLM "
            f"or update lora_sched.hook.hook_schedule for this one."
        )
    return found[0]


def hook_schedule(source: str, *, version: str = vllm.__version__, filename: str = _vsched.__file__) -> Any:
    """vLLM's `schedule()` (its source text) with the two hooks added; returns the function."""
    tree = ast.parse(textwrap.dedent(source))
    # The scan first: its loop is found by the LoRA-cap `if` it holds.
    stmts, i = _find(tree, _is_waiting_scan_if, "waiting-scan blocks (`if not preempted_reqs ...:` "
                     "holding the `while` loop of the LoRA-cap check)", version)
    scan = stmts[i]
    assert isinstance(scan, ast.If)
    loop = next(j for j, n in enumerate(scan.body) if _is_scan_loop(n))
    call = ast.parse("self._before_waiting_scan(scheduled_loras)").body[0]
    scan.body.insert(loop, ast.copy_location(call, scan.body[loop]))
    stmts, i = _find(tree, _is_lora_cap_if, "LoRA-cap `if` blocks (`skip_request(...); continue` "
                     "under a test of max_loras / scheduled_loras)", version)
    original = stmts[i]
    hook = ast.parse(
        "_lora_decision = self._lora_gate(request, scheduled_loras)\n"
        "if _lora_decision == 'stop':\n    break\n"
        "if _lora_decision == 'skip':\n    pass\n"
    ).body
    assert isinstance(original, ast.If) and isinstance(hook[2], ast.If)
    hook[2].body = original.body  # vLLM's own skip: skip_request(request_queue); continue
    for node in hook:
        ast.copy_location(node, original)
    stmts[i:i + 1] = hook
    ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {}
    # Compile under vLLM's module's __future__ flags, not this module's.
    flags = getattr(vars(_vsched).get("annotations"), "compiler_flag", 0)
    code = compile(tree, f"{filename} (lora_sched hooks)", "exec", flags=flags, dont_inherit=True)
    exec(code, vars(_vsched), namespace)  # noqa: S102
    return namespace["schedule"]


def check_version(version: str) -> str:
    """The registry's release for vLLM `version` (`0.33.0` -> `0.33`), or
    `UnsupportedVllm` naming the version and the supported range."""
    try:
        return releases.get(version).name
    except releases.UnknownRelease:
        raise UnsupportedVllm(
            f"lora_sched: vLLM {version} is not a supported release; lora_sched supports vLLM "
            f"{SUPPORTED_VLLM}. Install a supported vLLM, or add the release to lora_sched.spec.releases "
            f"once the conformance suite passes on it."
        ) from None


RELEASE = check_version(vllm.__version__)
SCHEDULE = hook_schedule(inspect.getsource(Scheduler.schedule))
