"""Tail/head: how much longer the rarely used adapters wait than the popular ones.

An adapter's number is its popularity rank (1 the most popular). Tail/head
is the mean wait of the tail (the bottom half of the ranks that sent a
request, less the head) over the head's (the `max_loras` most popular), each
plus one step so that it is defined where the head waits 0; base-model
requests are in neither.
"""

from __future__ import annotations

from collections.abc import Iterable


def head_tail(adapters: Iterable[int], max_loras: int) -> tuple[set[int], set[int]]:
    """(head, tail) among the adapters (> 0) that sent a request, an adapter's
    number being its popularity rank: head the `max_loras` most popular, tail
    the bottom half of the ranks, less the head."""
    ranks = sorted({a for a in adapters if a > 0})
    head = set(ranks[:max_loras])
    return head, set(ranks[len(ranks) - len(ranks) // 2:]) - head


def tail_head_ratio(waits: dict[str, int], adapter_of: dict[str, int], max_loras: int) -> float:
    """Tail/head of the module docstring over `waits` (request -> steps from
    arrival to first admission); 1.0 when the head or the tail is empty."""
    head, tail = head_tail(adapter_of.values(), max_loras)
    h = [waits[r] for r, a in adapter_of.items() if a in head and r in waits]
    t = [waits[r] for r, a in adapter_of.items() if a in tail and r in waits]
    if not h or not t:
        return 1.0
    return (sum(t) / len(t) + 1) / (sum(h) / len(h) + 1)
