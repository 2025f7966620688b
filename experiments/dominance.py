"""The goals' comparison on (tail/head, throughput), written once.

The realistic goals (`experiments.goals`) ask fair to *dominate* the
drainer, the time slice and VTC on (tail/head, throughput), with a
throughput floor of `THROUGHPUT_GOAL` of vllm's; `experiments.relief` and
`experiments.tailhead` read the same figures.
"""

from __future__ import annotations

THROUGHPUT_GOAL = 0.97  # fair's throughput >= this share of vllm's on every realistic workload
FIELD = ("drainer", "timeslice", "vtc")  # the policies fair is asked to dominate
TIE = 1e-9  # relative: two runs of one schedule give equal figures up to float order


def dominates(tail_head: float, throughput: float, other_tail_head: float, other_throughput: float) -> bool:
    """A point (tail/head, throughput) dominates another when its tail/head is
    no larger and its throughput no smaller (equal within `TIE`, relative):
    the other is no better on either. Equal points dominate each other, so a
    policy that runs the other's schedule meets the goal."""
    return (tail_head <= other_tail_head * (1 + TIE)) and (throughput >= other_throughput * (1 - TIE))
