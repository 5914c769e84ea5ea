"""Exact bounded 0-1 knapsack by dynamic programming (the paper's section IV-C).

The paper solves ``V(i, m) = max(V(i-1, m), v_i + V(i-1, m - m_i))`` over a memory grid. Here
identical jobs are grouped into item *types* with a count, and each type is split into
power-of-two pieces (1, 2, 4, ..., rest), so ``c`` copies cost ``log2 c`` rows instead of ``c``
while every count from 0 to ``c`` stays reachable: the result is still the exact optimum.
In strict thread mode the table has a second dimension, the device's free thread cells, so
the declared threads of the chosen jobs never exceed it.

Rows are numpy vector operations over the whole capacity axis; ties keep the earlier item
types (the caller lists them in priority order). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ItemType:
    """``count`` identical items.

    Attributes:
        weight: memory cells of one item (>= 1).
        units: thread cells of one item (>= 0; ignored without a thread capacity).
        value: value of one item (>= 0).
        count: copies available (>= 0).
    """

    weight: int
    units: int
    value: int
    count: int


def _pieces(count: int) -> list[int]:
    """Binary split of ``count``: sizes whose subsets sum to every number 0..count."""
    out, size = [], 1
    while count > 0:
        take = min(size, count)
        out.append(take)
        count -= take
        size *= 2
    return out


def solve(items: Sequence[ItemType], capacity: int, thread_capacity: int | None) -> list[int]:
    """Choose how many copies of each item type to take.

    Maximizes the total value subject to total weight <= ``capacity`` and, when
    ``thread_capacity`` is not ``None``, total units <= ``thread_capacity``.

    Args:
        items: the item types, in tie-breaking order (earlier wins ties).
        capacity: memory cells available (>= 0).
        thread_capacity: thread cells available, or ``None`` for no thread constraint.

    Returns:
        Copies taken of each item type, aligned with ``items``.
    """
    chosen = [0] * len(items)
    if capacity <= 0 or not items:
        return chosen
    two_d = thread_capacity is not None
    cap_u = max(int(thread_capacity), 0) if thread_capacity is not None else 0
    rows: list[tuple[int, int, int, int, int]] = []  # (type, copies, weight, units, value)
    for index, item in enumerate(items):
        limit = item.count
        if item.weight > 0:
            limit = min(limit, capacity // item.weight)
        if two_d and item.units > 0:
            limit = min(limit, cap_u // item.units)
        for copies in _pieces(limit):
            rows.append(
                (index, copies, copies * item.weight, copies * item.units, copies * item.value)
            )
    if not rows:
        return chosen
    shape = (capacity + 1, cap_u + 1) if two_d else (capacity + 1,)
    best = np.zeros(shape, dtype=np.int64)
    took = np.zeros((len(rows), *shape), dtype=np.bool_)
    for r, (_, _, weight, units, value) in enumerate(rows):
        if two_d:
            target = best[weight:, units:]
            candidate = best[: capacity + 1 - weight, : cap_u + 1 - units] + value
            better = candidate > target
            took[r, weight:, units:] = better
        else:
            target = best[weight:]
            candidate = best[: capacity + 1 - weight] + value
            better = candidate > target
            took[r, weight:] = better
        np.copyto(target, candidate, where=better)
    w, u = capacity, cap_u
    for r in range(len(rows) - 1, -1, -1):
        index, copies, weight, units, _ = rows[r]
        if (two_d and took[r, w, u]) or (not two_d and took[r, w]):
            chosen[index] += copies
            w -= weight
            if two_d:
                u -= units
    return chosen


def brute_force(items: Sequence[ItemType], capacity: int, thread_capacity: int | None) -> int:
    """The optimum value by trying every combination (for tests on small instances)."""
    best = 0

    def walk(i: int, weight: int, units: int, value: int) -> None:
        nonlocal best
        if i == len(items):
            best = max(best, value)
            return
        item = items[i]
        for copies in range(item.count + 1):
            w = weight + copies * item.weight
            u = units + copies * item.units
            if w > capacity or (thread_capacity is not None and u > thread_capacity):
                break
            walk(i + 1, w, u, value + copies * item.value)

    walk(0, 0, 0, 0)
    return best
