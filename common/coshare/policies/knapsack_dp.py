"""Exact bounded 0-1 knapsack by dynamic programming (the paper's section IV-C).

The paper solves ``V(i, m) = max(V(i-1, m), v_i + V(i-1, m - m_i))`` over a memory grid. Here
identical jobs are grouped into item *types* with a count, and each type is split into
power-of-two pieces (1, 2, 4, ..., rest), so ``c`` copies cost ``log2 c`` rows instead of ``c``
while every count from 0 to ``c`` stays reachable: the result is still the exact optimum.
In strict thread mode the table has a second dimension, the device's free thread cells, so
the declared threads of the chosen jobs never exceed it.

Rows are numpy vector operations over the whole capacity axis; ties keep the earlier item
types (the caller lists them in priority order).

**Bounded work** (:func:`solve_within`). A table costs its rows (item pieces) times its cells
(memory x thread cells) in time, and as many bytes for the choices kept; on an 80 GB device with
thousands of distinct job sizes that is seconds and gigabytes per device. Above a budget of
cells, two steps bring it down:

1. *Dominance* (no loss): an item that at least ``K`` others beat (no more memory, no more
   threads, no less value), ``K`` the most items the device can hold, is never needed: an
   optimal set that used it leaves one of those unused, and swapping them loses nothing.
2. *A coarser memory grid* for this device, doubled until the table fits: item weights are
   rounded up to ``f`` cells and the capacity down, so the set found still fits. What it can
   lose is bounded: any set that fits a device ``k * f`` cells smaller (``k`` the most items
   the device holds) fits the coarse table, so the value found is at least the exact optimum
   of that smaller device.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


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
    # Threads outer, memory inner: each row's vector work runs over long contiguous runs of
    # memory cells; and 32-bit sums where no table value can exceed them (all rows taken at
    # once): the table's rows cost about two thirds of the time of 64-bit, threads inner.
    shape = (cap_u + 1, capacity + 1) if two_d else (capacity + 1,)
    dtype = np.int32 if sum(row[4] for row in rows) < 1 << 31 else np.int64
    best = np.zeros(shape, dtype=dtype)
    took = np.zeros((len(rows), *shape), dtype=np.bool_)
    buffer = np.empty(shape, dtype=dtype)
    for r, (_, _, weight, units, value) in enumerate(rows):
        if two_d:
            target = best[units:, weight:]
            source = best[: cap_u + 1 - units, : capacity + 1 - weight]
            candidate = buffer[: cap_u + 1 - units, : capacity + 1 - weight]
            better = took[r, units:, weight:]
        else:
            target = best[weight:]
            source = best[: capacity + 1 - weight]
            candidate = buffer[: capacity + 1 - weight]
            better = took[r, weight:]
        np.add(source, value, out=candidate)  # source and target overlap: a copy first
        np.greater(candidate, target, out=better)
        # the better cells only: a third less time than a maximum over a table's strided rows
        np.copyto(target, candidate, where=better)
    w, u = capacity, cap_u
    for r in range(len(rows) - 1, -1, -1):
        index, copies, weight, units, _ = rows[r]
        if (two_d and took[r, u, w]) or (not two_d and took[r, w]):
            chosen[index] += copies
            w -= weight
            if two_d:
                u -= units
    return chosen


Ints = npt.NDArray[np.int64]
#: What :func:`solve_within`'s answer depends on (its ``memo``'s keys).
SolveKey = tuple[bytes, bytes, bytes, bytes, int, int, int | None, int]

#: Items are compared for dominance this many at a time (a block x block matrix).
BLOCK = 256
_EARLIER = np.tril(np.ones((BLOCK, BLOCK), dtype=np.bool_), -1)


def table_cells(capacity: int, thread_capacity: int | None) -> int:
    """Cells of a table: memory cells x thread cells."""
    threads = max(thread_capacity, 0) + 1 if thread_capacity is not None else 1
    return (max(capacity, 0) + 1) * threads


def _limits(
    weights: Ints, units: Ints, counts: Ints, capacity: int, thread_capacity: int | None
) -> Ints:
    """The copies of each item a table can use: its count, what fits the memory and threads."""
    limit = np.minimum(counts, max(capacity, 0) // np.maximum(weights, 1))
    if thread_capacity is not None:
        limit = np.where(
            units > 0, np.minimum(limit, max(thread_capacity, 0) // np.maximum(units, 1)), limit
        )
    out: Ints = np.maximum(limit, 0)
    return out


def table_rows(
    weights: Ints, units: Ints, counts: Ints, capacity: int, thread_capacity: int | None
) -> int:
    """Rows a table over these items needs (binary pieces of each one's usable count)."""
    limit = _limits(weights, units, counts, capacity, thread_capacity)
    # frexp's exponent of a positive integer below 2**53 is its bit length (0 for 0)
    return int(np.frexp(limit.astype(np.float64))[1].sum())


def most_items(
    weights: Ints, units: Ints, counts: Ints, capacity: int, thread_capacity: int | None
) -> int:
    """An upper bound on how many items any feasible choice holds: as many of the lightest
    as fit the memory (and, with a thread capacity, of the fewest threads as fit it)."""

    def fill(sizes: Ints, room: int) -> int:
        order = np.argsort(sizes, kind="stable")
        size, count = sizes[order], counts[order]
        if len(size) and size[0] <= 0:
            return int(counts.sum())  # weightless items: any number fit
        used = np.cumsum(size * count)
        full = int(np.searchsorted(used, room, side="right"))
        taken = int(count[:full].sum())
        if full < len(size):
            taken += (room - (int(used[full - 1]) if full else 0)) // int(size[full])
        return taken

    bound = fill(weights, max(capacity, 0))
    if thread_capacity is not None:
        bound = min(bound, fill(units, max(thread_capacity, 0)))
    return bound


def undominated(weights: Ints, units: Ints, values: Ints, counts: Ints, most: int) -> Ints:
    """Indices (ascending) of the items that fewer than ``most`` copies of others beat (no
    more weight, no more units, no less value). The others are never needed: an optimal set
    using one leaves a beating copy unused, and swapping them loses nothing (repeating this,
    earlier-visited items replace later ones, so it ends).

    Items are visited by value, best first; while units never fall along that order (value
    falls with threads, as the knapsack's does), everything seen before an item beats it in
    value and threads, so it is beaten by the copies seen before with no more weight: the
    ``most`` lightest seen so far answer that by bisection, a block of items at a time.
    """
    n = len(weights)
    ids = np.arange(n)
    order = np.lexsort((ids, weights, units, -values))
    w, u, c = weights[order], units[order], counts[order]
    keep = np.zeros(n, dtype=np.bool_)
    if np.any(np.diff(u) < 0):  # threads do not rise as value falls: count each one
        for i in range(n):
            earlier = (w[:i] <= w[i]) & (u[:i] <= u[i])
            keep[i] = int(c[:i][earlier].sum()) < most
        out: Ints = np.sort(order[keep])
        return out
    lightest = np.zeros(0, dtype=np.int64)  # the ``most`` lightest copies seen, sorted
    most = max(most, 0)
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        rows = np.arange(start, stop)
        if len(lightest) >= most:  # as heavy as the most-th lightest seen: beaten already
            rows = rows[w[rows] < (lightest[most - 1] if most else np.iinfo(np.int64).min)]
        if len(rows) == 0:
            continue
        wb, cb = w[rows], c[rows]
        before = np.searchsorted(lightest, wb, side="right")
        within = ((wb[None, :] <= wb[:, None]) & _EARLIER[: len(rows), : len(rows)]) @ cb
        keep[rows] = before + within < most
        copies = np.repeat(wb, np.minimum(cb, most))
        lightest = np.sort(np.concatenate([lightest, copies]))[:most]
    kept: Ints = np.sort(order[keep])
    return kept


def solve_within(
    weights: Ints,
    units: Ints,
    values: Ints,
    counts: Ints,
    capacity: int,
    thread_capacity: int | None,
    max_cells: int,
    memo: dict[SolveKey, tuple[Ints, int]] | None = None,
) -> tuple[Ints, int]:
    """:func:`solve` over items given as arrays (in tie-breaking order), with its table kept
    within ``max_cells`` rows x cells (module docstring): dominated items dropped, then the
    memory grid coarsened by a power of two.

    ``memo``: answers already found (a dict the caller keeps for one plan): the answer
    depends on the counts only through each count up to :func:`most_items` (an item's usable
    copies, :func:`_limits`, are a feasible choice, so never more than that bound), so
    problems equal in those share one table (on a busy cluster of 10,000 devices, about a
    quarter of the tables).

    Returns:
        The copies taken of each item (aligned with the arrays), and the factor the memory
        grid was coarsened by (1: the exact optimum).
    """
    if memo is None or not len(weights) or int(weights.min()) < 1:
        # a weightless item's copies are bounded by its count alone (not by _limits)
        return _solve_within(weights, units, values, counts, capacity, thread_capacity, max_cells)
    most = most_items(weights, units, counts, capacity, thread_capacity)
    key = (
        weights.tobytes(),
        units.tobytes(),
        values.tobytes(),
        np.minimum(counts, most).tobytes(),
        most,
        capacity,
        thread_capacity,
        max_cells,
    )
    found = memo.get(key)
    if found is None:
        found = memo[key] = _solve_within(
            weights, units, values, counts, capacity, thread_capacity, max_cells, most
        )
    return found[0].copy(), found[1]


def _solve_within(
    weights: Ints,
    units: Ints,
    values: Ints,
    counts: Ints,
    capacity: int,
    thread_capacity: int | None,
    max_cells: int,
    most: int | None = None,
) -> tuple[Ints, int]:
    """:func:`solve_within` without a memo (``most``: :func:`most_items`, when known)."""
    n = len(weights)
    chosen = np.zeros(n, dtype=np.int64)
    cells = table_cells(capacity, thread_capacity)
    if table_rows(weights, units, counts, capacity, thread_capacity) * cells <= max_cells:
        columns = (weights.tolist(), units.tolist(), values.tolist(), counts.tolist())
        items = [ItemType(w, u, v, c) for w, u, v, c in zip(*columns, strict=True)]
        chosen[:] = solve(items, capacity, thread_capacity)
        return chosen, 1
    if most is None:
        most = most_items(weights, units, counts, capacity, thread_capacity)
    keep = undominated(weights, units, values, counts, most)
    factor = 1
    while True:
        coarse = -(-weights[keep] // factor)
        room = capacity // factor
        rows = table_rows(coarse, units[keep], counts[keep], room, thread_capacity)
        if rows * table_cells(room, thread_capacity) <= max_cells or factor >= capacity:
            break
        factor *= 2
    # items that became equal are merged, in the order of their first member
    index: dict[tuple[int, int, int], int] = {}
    merged: list[list[int]] = []
    members: list[list[int]] = []
    kept = (
        keep.tolist(),
        coarse.tolist(),
        units[keep].tolist(),
        values[keep].tolist(),
        counts[keep].tolist(),
    )
    for k, w, unit, value, count in zip(*kept, strict=True):
        key = (w, unit, value)
        if key not in index:
            index[key] = len(merged)
            merged.append([w, unit, value, 0])
            members.append([])
        merged[index[key]][3] += count
        members[index[key]].append(k)
    taken = solve([ItemType(*m) for m in merged], room, thread_capacity)
    for copies, group in zip(taken, members, strict=True):
        for k in group:  # a merged item's copies go to its members in their order
            take = min(copies, int(counts[k]))
            chosen[k] += take
            copies -= take
    return chosen, factor


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
