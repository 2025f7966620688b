"""Regenerate the counterexamples kept under tests/cex/ (ITF JSON + pytest replay).

    python -m experiments.emit_cex [--dir tests/cex]

Each entry runs its check (BMC for the shortest counterexample, or the
worst-wait search for its witness), writes `<name>.itf.json` and a pytest
case `test_<name>.py` that replays it through `policy/`.
"""

from __future__ import annotations

import argparse
import os
import pprint

from lora_sched.proofs import engine
from lora_sched.proofs.cex import Cex, emit_test, write_itf
from lora_sched.proofs.checks import ASYNC, THROTTLE, WAIT_FAIR, WAIT_HORIZON, fair_B, wait_bound

from experiments.proofs_benchmark import FAMILY

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "cex")


def _emit_worst(cex: Cex, worst: int, bound: int, path: str, doc: str) -> None:
    """A replay asserting the witness's worst wait in `policy/` is `worst` (<= fair's `bound`)."""
    body = pprint.pformat(cex.to_json(), width=100)
    with open(path, "w") as f:
        f.write(f'"""{doc}"""\n\n'
                "from lora_sched.proofs.cex import Cex, replay\n\n"
                f"CEX = {body}\n\n\n"
                "def test_fair_worst_wait_witness_replays() -> None:\n"
                "    out = replay(Cex.from_json(CEX))\n"
                f"    assert max(out.waits.values()) == {worst} <= {bound}, out.detail\n")


def family_witness(out_dir: str) -> None:
    """fair on `experiments.proofs_benchmark.FAMILY`: a request waits 10 steps (the
    benchmark shows none waits more); written as a replay that must wait
    exactly that long in `policy/`."""
    r = engine.bmc(FAMILY, "fair", "bounded_wait", 17, bound=9, lemmas=True)
    assert r.verdict == "cex" and r.cex is not None and r.replay_ok, (r.verdict, r.detail)
    doc = ("Replay of fair's worst wait on the R=6 family model of `experiments.proofs_benchmark.FAMILY`.\n\n"
           f"B = fair_bound(Q=6) = {fair_B(FAMILY)}. "
           "R=6, A=3, P<=1, L<=2, max_loras 1..2, max_num_seqs 1..2, arrivals by step 7: Z3 finds a\n"
           "request waiting 10 steps (and `python -m experiments.proofs_benchmark --only fair_wait_family` shows\n"
           "none waits more). The witness must wait exactly 10 in `policy/` (written by\n"
           "`python -m experiments.emit_cex --family`).\n")
    write_itf(r.cex, os.path.join(out_dir, "fair_family_worst_wait.itf.json"))
    _emit_worst(r.cex, 10, fair_B(FAMILY), os.path.join(out_dir, "test_fair_family_worst_wait.py"), doc)
    print(f"fair family witness: {r.detail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=HERE)
    ap.add_argument("--family", action="store_true",
                    help="only the witness of fair's worst wait 10 on the R=6 family model (about a minute)")
    a = ap.parse_args()
    if a.family:
        family_witness(a.dir)
        return
    for name, bounds, prop in (("vllm_async_running_lora_cap", ASYNC, "running_lora_cap"),
                               ("vllm_throttle_batch_lora_cap", THROTTLE, "batch_lora_cap")):
        r = engine.bmc(bounds, "vllm", prop, 4)
        assert r.verdict == "cex" and r.cex is not None and r.replay_ok, (name, r.verdict, r.detail)
        write_itf(r.cex, os.path.join(a.dir, f"{name}.itf.json"))
        emit_test(r.cex, os.path.join(a.dir, f"test_{name}.py"))
        print(f"{name}: shortest counterexample at depth {r.depth}, replays: {r.detail}")
        print(r.cex.table())
    B = wait_bound(WAIT_FAIR)
    r = engine.worst_wait(WAIT_FAIR, "fair", WAIT_HORIZON, B)
    assert r.verdict == "proved" and r.cex is not None and r.replay_ok, (r.verdict, r.detail)
    b = WAIT_FAIR
    doc = (f"Replay of `lora-sched prove`'s witness of fair's tight worst wait.\n\n"
           f"For R={b.requests} requests (arrivals in steps 1..{b.last_arrival}), P<={b.max_prompt}, "
           f"L<={b.max_output}, max_loras {b.max_loras[1]},\nmax_num_seqs {b.max_num_seqs[1]}, "
           f"T={b.max_num_batched_tokens[1]}, S={b.starvation_steps[1]}, the solver's worst first-admission wait "
           f"is\n{r.worst}; B = fair_bound(Q={b.requests}) = {B}. The witness must replay in `policy/`\n"
           "with exactly that wait (written by `python -m experiments.emit_cex`).\n")
    write_itf(r.cex, os.path.join(a.dir, "fair_worst_wait.itf.json"))
    _emit_worst(r.cex, r.worst or 0, B, os.path.join(a.dir, "test_fair_worst_wait.py"), doc)
    print(f"fair worst wait {r.worst} <= B {B}: {r.detail}")


if __name__ == "__main__":
    main()
