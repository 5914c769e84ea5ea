"""What the simulator runs: a job as the scheduler sees it, plus how it behaves when it runs.

A :class:`SimJob` pairs the :class:`~coshare.model.Job` a policy plans (declared memory and
threads, host cores and memory) with its *profile*: the phases it goes through once started,
alternating host phases and offloads (the paper's Figs. 2 and 3)::

    host, offload, host, offload, ..., offload, host

Each offload uses the job's declared device threads on each of its devices; a host phase
uses only its host cores. The durations are what the phase takes when it does not wait: a
job alone on its device runs for exactly ``sum(phases)`` seconds. A job without offloads (a
CPU job, a trace record with a run time only) has one host phase. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coshare.model import Job


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job to simulate.

    Attributes:
        job: what the scheduler sees and the policy plans; ``job.submit_time_s`` is when it
            arrives.
        phases: seconds of each phase when nothing waits: host, offload, host, ..., host
            (an odd count; even indices are host phases, odd ones offloads).
        user: who submitted it (a trace's user field; fair share and per-user figures).
    """

    job: Job
    phases: tuple[float, ...]
    user: str = ""

    @property
    def duration_s(self) -> float:
        """Run time alone on its device (no offload ever waits)."""
        return math.fsum(self.phases)  # correctly rounded: the same on every Python

    @property
    def offload_s(self) -> float:
        """Seconds spent in offloads when alone."""
        return math.fsum(self.phases[1::2])

    @property
    def offloads(self) -> int:
        """Number of offloads."""
        return len(self.phases) // 2


def host_only(job: Job, duration_s: float, user: str = "") -> SimJob:
    """A job that runs ``duration_s`` seconds on its host cores and never offloads."""
    return SimJob(job, (float(duration_s),), user)


def split_phases(
    duration_s: float,
    offload_share: float,
    host_weights: tuple[float, ...],
    offload_weights: tuple[float, ...],
) -> tuple[float, ...]:
    """Phases of a job of ``duration_s`` seconds that offloads ``offload_share`` of its time.

    Args:
        duration_s: total run time alone.
        offload_share: fraction of it spent in offloads (0..1).
        host_weights: relative lengths of the host phases (one more than the offloads).
        offload_weights: relative lengths of the offloads.

    Returns:
        host, offload, host, ..., host; the offloads sum to ``offload_share * duration_s``.
    """
    if len(host_weights) != len(offload_weights) + 1:
        raise ValueError("need one host phase more than offloads")
    host_total = math.fsum(host_weights)
    off_total = math.fsum(offload_weights) or 1.0
    host_s = duration_s * (1.0 - offload_share)
    off_s = duration_s * offload_share
    phases: list[float] = []
    for i, w in enumerate(host_weights):
        phases.append(host_s * w / host_total if host_total else 0.0)
        if i < len(offload_weights):
            phases.append(off_s * offload_weights[i] / off_total)
    return tuple(phases)
