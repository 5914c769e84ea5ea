"""How much device capacity any placement could fill: a bound for the fragmentation benchmark.

The benchmark measures the unallocated share of a cluster's GPUs when the requests of the
pods submitted so far reach a level of its capacity. No policy can place more than the best
packing of those pods, so an upper bound on what can be allocated is a lower bound on the
unallocated share, for every policy and both protocols.

**The bound.** ``G`` devices of capacity ``C`` (GPU milli, all alike on the Alibaba cluster);
pods ask for shares: a pod with ``k`` devices of ``s`` milli each is ``k`` shares of size
``s``; ``n_t`` shares of size ``s_t`` have been submitted. Whatever a placement does, each
device holds a multiset of shares (a *configuration* ``q``, ``a_qt`` shares of each size,
``sum_t a_qt s_t <= C``, ``a_qt <= n_t``). For any prices ``pi_t >= 0``::

    vol(q) = sum_t a_qt s_t  =  sum_t a_qt (s_t - pi_t) + sum_t a_qt pi_t
                            <=  mu(pi)                  + sum_t a_qt pi_t,

    mu(pi) = max over configurations of sum_t a_qt (s_t - pi_t)   (>= 0: the empty one).

Summed over the ``G`` devices, and since at most ``n_t`` shares of size ``s_t`` are placed::

    allocated  <=  G mu(pi) + sum_t n_t pi_t.

This holds for *every* ``pi >= 0``: ``mu`` is computed exactly (a bounded knapsack over the
share sizes, by dynamic programming), so the bound does not depend on how ``pi`` was found.
The best prices are the dual of the configuration LP (Gilmore-Gomory: how many devices hold
each configuration, at most ``G`` devices and ``n_t`` shares of each size), solved by column
generation with SciPy's HiGHS, the knapsack pricing new configurations. Host cores and
memory, and that a multi-device pod needs its devices on one node, are left out: fewer
constraints only raise the bound, which stays valid. The bound is also at most the volume
submitted.

**What it says on the Alibaba trace.** The configuration LP is tight for bin packing, and
what it finds unavoidable is mostly the 810-milli pods: no two share a GPU, and only about a
hundred pods of 190 milli or less can fill what each leaves. The LP may *drop* submitted pods
to keep devices for better ones (the metric's optimum does); a policy that places every pod
that fits cannot, so the bound is not reachable by such a policy.

**Reading it at a level.** The metric interpolates the allocated share linearly between the
records around a level (every pod online, every batch in the batch protocol). Allocation is
at most the bound at every record, so the interpolated allocation is at most the
interpolated bound: :func:`unallocated_bound` computes the bound at the two records around
each level and interpolates the same way.

Pure: no I/O; SciPy is imported only when a bound is computed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]

#: Column generation stops after this many rounds (the bound stays valid whenever it stops).
MAX_ROUNDS = 500


def best_configuration(
    sizes: Sequence[int], counts: Sequence[int], values: Sequence[float], capacity: int
) -> tuple[float, list[int]]:
    """The configuration of largest total value: how many shares of each size to put on one
    device of ``capacity`` (at most ``counts[t]`` of size ``sizes[t]``), by dynamic
    programming over the capacity (exact; sizes and capacity on their common grid).

    Returns:
        The value (0 for the empty configuration) and the count of each size.
    """
    grid = math.gcd(capacity, *sizes) if sizes else 1
    cells = capacity // grid
    best = np.zeros(cells + 1, dtype=np.float64)
    rows: list[tuple[int, int, npt.NDArray[np.bool_]]] = []
    for t, (size, count, value) in enumerate(zip(sizes, counts, values, strict=True)):
        if value <= 0 or size <= 0:
            continue
        weight = size // grid
        left = min(count, cells // weight)
        piece = 1
        while left > 0:  # binary pieces: 1, 2, 4, ... reach every count up to ``left``
            take = min(piece, left)
            w, v = take * weight, take * value
            candidate = best[: cells + 1 - w] + v
            better = candidate > best[w:]
            took = np.zeros(cells + 1, dtype=np.bool_)
            took[w:] = better
            best[w:] = np.where(better, candidate, best[w:])
            rows.append((t, take, took))
            left -= take
            piece *= 2
    chosen = [0] * len(sizes)
    c = int(np.argmax(best))
    value_found = float(best[c])
    for t, take, took in reversed(rows):
        if took[c]:
            chosen[t] += take
            c -= take * (sizes[t] // grid)
    return value_found, chosen


def max_allocatable(shares: Counter[int], devices: int, capacity: int) -> float:
    """An upper bound on the capacity ``devices`` devices of ``capacity`` can hold of
    ``shares`` (share size -> how many), in the same unit (module docstring)."""
    sizes = sorted(s for s, n in shares.items() if 0 < s <= capacity and n > 0)
    counts = [shares[s] for s in sizes]
    volume = float(sum(s * n for s, n in zip(sizes, counts, strict=True)))
    if not sizes or devices <= 0:
        return 0.0
    prices = _dual_prices(sizes, counts, devices, capacity)
    margins = [s - p for s, p in zip(sizes, prices, strict=True)]
    mu, _ = best_configuration(sizes, counts, margins, capacity)
    bound = devices * max(mu, 0.0) + sum(p * n for p, n in zip(prices, counts, strict=True))
    # a relative 1e-9 above what was computed covers the rounding of the float sums
    return min(volume, float(devices * capacity), bound * (1 + 1e-9))


def _dual_prices(sizes: list[int], counts: list[int], devices: int, capacity: int) -> list[float]:
    """Prices from the configuration LP's dual, by column generation (any prices are valid;
    these make the bound tight)."""
    from scipy.optimize import linprog  # only here: SciPy takes a while to import

    types = len(sizes)
    columns = [[1 if i == t else 0 for i in range(types)] for t in range(types)]
    prices = [float(s) for s in sizes]  # before any solve: the trivial bound (the volume)
    for _ in range(MAX_ROUNDS):
        a = np.array(columns, dtype=np.float64).T  # types x configurations
        volume = np.array(sizes, dtype=np.float64) @ a
        result = linprog(
            -volume,
            A_ub=np.vstack([np.ones(len(columns)), a]),
            b_ub=np.array([devices, *counts], dtype=np.float64),
            bounds=(0, None),
            method="highs",
        )
        if result.status != 0:
            break
        duals = -np.asarray(result.ineqlin.marginals, dtype=np.float64)
        mu, prices = float(duals[0]), [max(float(p), 0.0) for p in duals[1:]]
        margins = [s - p for s, p in zip(sizes, prices, strict=True)]
        value, config = best_configuration(sizes, counts, margins, capacity)
        if value <= mu * (1 + 1e-9) + 1e-9 or config in columns:
            break
        columns.append(config)
    return prices


def unallocated_bound(
    arrived: Sequence[float],
    submitted: Sequence[int],
    requests: Sequence[tuple[int, int]],
    devices: int,
    capacity: int,
    levels: Sequence[float],
) -> dict[float, float]:
    """The least unallocated % any placement can have at each arrival level.

    Args:
        arrived: per record, the requests submitted so far in % of the cluster's capacity.
        submitted: per record, how many pods had been submitted.
        requests: the pods in submission order, as (share per device, devices).
        devices: the cluster's devices.
        capacity: the capacity of one device.
        levels: arrival levels in %.

    Returns:
        level -> lower bound on unallocated %, interpolated between the records around the
        level as the metric is (module docstring).
    """
    total = devices * capacity
    cache: dict[int, float] = {}

    def allocated_pct(i: int) -> float:
        if i not in cache:
            shares: Counter[int] = Counter()
            for share, count in requests[: submitted[i]]:
                if share > 0 and count > 0:
                    shares[share] += count
            cache[i] = 100.0 * max_allocatable(shares, devices, capacity) / total
        return cache[i]

    out: dict[float, float] = {}
    if not arrived:
        return {level: 100.0 for level in levels}
    for level in levels:
        # the records np.interp reads for this level (the metric's own interpolation)
        hi = int(np.searchsorted(np.asarray(arrived), level, side="right"))
        if hi == 0 or hi == len(arrived):
            out[level] = 100.0 - allocated_pct(min(hi, len(arrived) - 1))
            continue
        lo = hi - 1
        pct = np.interp(level, [arrived[lo], arrived[hi]], [allocated_pct(lo), allocated_pct(hi)])
        out[level] = 100.0 - float(pct)
    return out
