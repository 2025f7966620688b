"""`lora-sched`: one console script, one subcommand per concept.

Each subcommand lives beside the concept it runs (`policy.check`, `proofs.cli`,
`conformance.cli`, `bench.cli`, `fuzz.cli`) and exposes `add_arguments(parser)` and
`main(args) -> int`; this module only dispatches, importing lazily so that
`lora-sched check` does not pay for Z3 or vLLM.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Top-level modules an optional extra provides -> the extra (pyproject.toml).
# A command that needs one and runs without it stops with one line naming
# the extra, not a traceback.
EXTRA_OF = {
    "vllm": "vllm", "torch": "vllm", "transformers": "vllm", "tokenizers": "vllm", "peft": "vllm",
    "openai": "vllm", "pandas": "vllm", "ray": "fuzz",
}

COMMANDS = {
    "simulate": ("lora_sched.policy.simulate", "run a workload through a reference policy and write a trace"),
    "check": ("lora_sched.policy.check", "validate every property on a trace; with --policy, replay it"),
    "prove": ("lora_sched.proofs.cli", "Z3: bounded model checking, k-induction, worst-case wait"),
    "conform": ("lora_sched.conformance.cli", "run vLLM (live or in-process) and check it against the reference"),
    "bench": ("lora_sched.bench.cli", "benchmark the three policies (simulated, or --live on vLLM)"),
    "fuzz": ("lora_sched.fuzz.cli", "a fuzz campaign of vLLM's scheduler against the spec, on Ray"),
    "view": ("lora_sched.view.cli", "draw a trace or counterexample as a timeline (HTML or PNG)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="lora-sched", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    modules = {}
    try:
        for name, (module, help_text) in COMMANDS.items():
            p = sub.add_parser(name, help=help_text, description=help_text)
            if name == chosen:
                modules[name] = importlib.import_module(module)
                modules[name].add_arguments(p)
        args = parser.parse_args(argv)
        return int(modules[args.command].main(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"error: lora-sched {chosen} needs {exc.name}, which is not installed: "
              f"pip install 'lora-sched[{extra}]'", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
