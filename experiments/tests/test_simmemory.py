"""`python -m experiments.simmemory`: each policy's speed beside vllm's."""

from __future__ import annotations


def test_simmemory_prints_each_policys_speed_beside_vllms(capsys) -> None:
    """`python -m experiments.simmemory` measures each policy in its own
    child and prints its speed against `vllm`'s on the same burst, from the
    measured rows (steps per CPU second, and its speed over the whole burst); a size
    with no `vllm` row gets no ratio. Speed is printed, never asserted."""
    from experiments.simmemory import main, speed_ratios

    rows = {("vllm", 10): {"steps": 100, "cpu": 2.0}, ("fair", 10): {"steps": 80, "cpu": 2.0},
            ("fair", 20): {"steps": 5, "cpu": 1.0}}
    assert speed_ratios(rows) == ["fair at 10: 0.80x vllm's steps per CPU second, 1.00x its speed over the whole burst"]
    assert main(["--sizes", "40", "--policies", "vllm", "fair"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("fair at 40: ") and "x vllm's steps per CPU second" in out[-1], out
    assert sum(line.split()[:2] in (["vllm", "40"], ["fair", "40"]) for line in out) == 2, out
