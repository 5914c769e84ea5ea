"""The knapsack's margin over random in a sweep: MCCK against MCC, strict and soft.

The knapsack paper's central claim is that packing by its value beats random placement
(Table II: MCCK 2183 s against MCC 2611 s, 16% less; Fig. 10: 11% less at 8 nodes). When a
``coshare simulate --sweep`` runs both ``random`` and ``knapsack``, this puts the margin of
every point beside the paper's: per point and thread mode, the mean makespans over the
seeds, knapsack against random, and knapsack against exclusive where it ran
(:func:`coshare.sim.report.margin_table` prints them). Where a sweep ran both thread modes
at a point, one more row pairs the knapsack under ``strict`` with random under ``soft``: the
paper's MCC has no thread rule at the cluster level (COSMIC
serializes its offloads, like ``soft``), while its knapsack zeroes a set that oversubscribes
threads (the reading that makes it ``strict``). Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from coshare.sim.metrics import RunSummary
from coshare.sim.paper import FIG_10_REDUCTION, TABLE_II_MAKESPAN_S

Point = tuple[tuple[str, Any], ...]


class Run(Protocol):
    """A sweep's run (:class:`coshare.sim.report.GridRun`)."""

    @property
    def workload(self) -> str: ...

    @property
    def point(self) -> Point: ...

    @property
    def summary(self) -> RunSummary: ...


#: The paper's margins: Table II's makespans, and Fig. 10's text at 8 nodes.
PAPER_TABLE_II_VS_RANDOM = TABLE_II_MAKESPAN_S["knapsack"] / TABLE_II_MAKESPAN_S["random"] - 1
PAPER_TABLE_II_VS_EXCLUSIVE = TABLE_II_MAKESPAN_S["knapsack"] / TABLE_II_MAKESPAN_S["exclusive"] - 1
PAPER_NOTE = (
    f"paper: Table II (1000 Table I jobs, 8 nodes) MCCK vs MCC {PAPER_TABLE_II_VS_RANDOM:+.1%}, "
    f"vs MC {PAPER_TABLE_II_VS_EXCLUSIVE:+.1%};\nFig. 10 (1600 normal jobs, 8 nodes) "
    f"{-FIG_10_REDUCTION['random']:+.0%}, {-FIG_10_REDUCTION['exclusive']:+.0%}"
)


@dataclass(frozen=True)
class MarginRow:
    """Knapsack against random at one point.

    Attributes:
        workload: the workload.
        point: the point's parameters other than ``threads``.
        threads: the thread modes of random and knapsack (``soft/strict``: random soft,
            knapsack strict).
        random_s: random's mean makespan over the seeds.
        knapsack_s: knapsack's.
        exclusive_s: exclusive's, if it ran at the point (``None`` else).
        seeds: the seeds both ran.
    """

    workload: str
    point: Point
    threads: str
    random_s: float
    knapsack_s: float
    exclusive_s: float | None
    seeds: int

    @property
    def vs_random(self) -> float:
        """Knapsack's makespan against random's (-0.16: 16% shorter)."""
        return self.knapsack_s / self.random_s - 1

    @property
    def vs_exclusive(self) -> float | None:
        """Knapsack's makespan against exclusive's, if exclusive ran."""
        return None if self.exclusive_s is None else self.knapsack_s / self.exclusive_s - 1


def margin_rows(runs: Sequence[Run]) -> list[MarginRow]:
    """Per workload, point and thread mode, knapsack against random (empty unless both ran);
    with both thread modes at a point, also knapsack strict against random soft."""
    means: dict[tuple[str, Point, str, str], list[float]] = {}
    for run in runs:
        threads = str(dict(run.point).get("threads", "-"))
        rest = tuple((k, v) for k, v in run.point if k != "threads")
        key = (run.workload, rest, threads, run.summary.policy)
        means.setdefault(key, []).append(run.summary.makespan_s)

    def mean(workload: str, rest: Point, threads: str, policy: str) -> float | None:
        values = [v for v in means.get((workload, rest, threads, policy), []) if math.isfinite(v)]
        return statistics.fmean(values) if values else None

    rows: list[MarginRow] = []
    points = dict.fromkeys((w, rest, t) for w, rest, t, _ in means)
    for workload, rest, threads in points:
        pairs = [(threads, threads)]
        if threads == "soft" and (workload, rest, "strict") in points:
            pairs.append(("soft", "strict"))
        for mcc, mcck in pairs:
            random_s = mean(workload, rest, mcc, "random")
            knapsack_s = mean(workload, rest, mcck, "knapsack")
            if random_s is None or knapsack_s is None or random_s <= 0:
                continue
            exclusive = mean(workload, rest, mcck, "exclusive")
            seeds = min(
                len(means[(workload, rest, mcc, "random")]),
                len(means[(workload, rest, mcck, "knapsack")]),
            )
            label = mcc if mcc == mcck else f"{mcc}/{mcck}"
            rows.append(MarginRow(workload, rest, label, random_s, knapsack_s, exclusive, seeds))
    return rows


def margin_json(rows: Sequence[MarginRow]) -> list[dict[str, Any]]:
    """The rows as JSON."""
    return [
        {
            "workload": r.workload,
            "params": dict(r.point),
            "threads": r.threads,
            "exclusive_s": r.exclusive_s,
            "random_s": r.random_s,
            "knapsack_s": r.knapsack_s,
            "vs_random": r.vs_random,
            "vs_exclusive": r.vs_exclusive,
            "seeds": r.seeds,
        }
        for r in rows
    ]
