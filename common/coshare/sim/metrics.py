"""What a run is judged by: makespan, device core utilization, per-job slowdown and wait.

Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from coshare.sim.engine import JobRecord, SimResult


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


#: Relative width of the buckets in which a streamed run keeps its slowdowns for the 95th
#: percentile (0.1%): the exact percentile would keep every job's value.
SLOWDOWN_BUCKET = 1.001


class StreamSummary:
    """:class:`RunSummary` figures of a run whose job records are not kept (a streamed trace):
    fed each record as the job ends (``add``), in memory bounded by the spread of
    the slowdowns, not by the job count.

    Means come from a compensated running sum (Neumaier; :func:`summarize`'s ``fsum`` would
    need every value at once), equal to :func:`summarize`'s within a few units of the last
    place; the 95th percentile is the upper edge of its 0.1%-wide bucket (exact to 0.1%).
    """

    def __init__(self) -> None:
        self.jobs = 0
        self.not_run = 0
        self._slow = _RunningSum()
        self._wait = _RunningSum()
        self._bounded = _RunningSum()  # bounded slowdown: the SWF replays' metric
        self._slow_max = -math.inf
        self._buckets: dict[int, int] = {}

    def add(self, record: JobRecord) -> None:
        """One job's record (ended, or never run)."""
        self.jobs += 1
        if record.start_s is None:
            self.not_run += 1
            return
        self._wait.add(record.start_s - record.submit_s)
        bounded = record.bounded_slowdown()
        if bounded is not None:
            self._bounded.add(bounded)
        slowdown = record.slowdown
        if slowdown is not None:
            self._slow.add(slowdown)
            self._slow_max = max(self._slow_max, slowdown)
            bucket = (
                math.ceil(math.log(slowdown) / math.log(SLOWDOWN_BUCKET))
                if slowdown > 0
                else -(2**62)
            )
            self._buckets[bucket] = self._buckets.get(bucket, 0) + 1

    def _p95(self) -> float:
        if not self._slow.count:
            return math.nan
        rank = max(1, math.ceil(0.95 * self._slow.count))
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                return min(SLOWDOWN_BUCKET**bucket, self._slow_max) if bucket > -(2**62) else 0.0
        return self._slow_max  # pragma: no cover (the counts add up to count)

    def summary(self, result: SimResult) -> RunSummary:
        """The figures, with the engine's own (makespan, utilization, node use, cycles) from
        ``result``."""
        return RunSummary(
            policy=result.policy,
            nodes=result.nodes,
            jobs=self.jobs,
            makespan_s=result.makespan_s,
            utilization=result.utilization,
            slowdown_mean=self._slow.mean(),
            slowdown_p95=self._p95(),
            slowdown_max=self._slow_max if self._slow.count else math.nan,
            wait_mean_s=self._wait.mean(),
            cycles=result.cycles,
            not_run=self.not_run,
            bounded_slowdown_mean=self._bounded.mean(),
            core_utilization=result.core_utilization,
        )


class _RunningSum:
    """A sum of floats with Neumaier's compensation, and its count."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.error = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        t = self.total + value
        if abs(self.total) >= abs(value):
            self.error += (self.total - t) + value
        else:
            self.error += (value - t) + self.total
        self.total = t

    def mean(self) -> float:
        return (self.total + self.error) / self.count if self.count else math.nan
