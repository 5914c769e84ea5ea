"""What a run is judged by: makespan, device core utilization, per-job slowdown and wait.

Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from coshare.sim.engine import SimResult


@dataclass(frozen=True)
class RunSummary:
    """The figures of one run.

    Attributes:
        policy: the policy.
        nodes: cluster size.
        jobs: jobs in the run.
        makespan_s: time 0 to the last job's end.
        utilization: average device core utilization (offload thread-seconds over
            threads x makespan).
        slowdown_mean: mean over jobs of run time / run time alone.
        slowdown_p95: its 95th percentile.
        slowdown_max: its maximum.
        wait_mean_s: mean time from arrival to start.
        cycles: planning cycles.
        not_run: jobs that never started.
        bounded_slowdown_mean: mean over jobs of time in the system over run time alone
            (run times under 10 s counted as 10 s; at least 1): the SWF replays' metric.
        core_utilization: core-seconds held by jobs over cores x makespan (node use).
    """

    policy: str
    nodes: int
    jobs: int
    makespan_s: float
    utilization: float
    slowdown_mean: float
    slowdown_p95: float
    slowdown_max: float
    wait_mean_s: float
    cycles: int
    not_run: int
    bounded_slowdown_mean: float = math.nan
    core_utilization: float = 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def summarize(result: SimResult) -> RunSummary:
    """The figures of ``result``."""
    slowdowns = [s for s in (r.slowdown for r in result.jobs) if s is not None]
    waits = [r.start_s - r.submit_s for r in result.jobs if r.start_s is not None]
    bounded = [s for s in (r.bounded_slowdown() for r in result.jobs) if s is not None]
    return RunSummary(
        policy=result.policy,
        nodes=result.nodes,
        jobs=len(result.jobs),
        makespan_s=result.makespan_s,
        utilization=result.utilization,
        slowdown_mean=statistics.fmean(slowdowns) if slowdowns else math.nan,
        slowdown_p95=percentile(slowdowns, 0.95),
        slowdown_max=max(slowdowns, default=math.nan),
        wait_mean_s=statistics.fmean(waits) if waits else math.nan,
        cycles=result.cycles,
        not_run=len(result.not_run),
        bounded_slowdown_mean=statistics.fmean(bounded) if bounded else math.nan,
        core_utilization=result.core_utilization,
    )


def reduction(value: float, baseline: float) -> float:
    """How much smaller ``value`` is than ``baseline`` (0.27 = 27% smaller)."""
    return 1.0 - value / baseline if baseline > 0 else 0.0
