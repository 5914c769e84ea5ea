"""Each job's CPU load, from its cgroup's CPU time: parsers and a short history (pure).

The collocation paper samples the CPU load of each running GPU job once a minute (Wu & Hong,
section IV-A) and lets CPU-only jobs borrow what that load leaves idle. A job's load over an
interval is the CPU time its group used in it over the interval's length, in cores busy
(a job using 2.5 of its 12 cores has load 2.5, as the paper counts it, Table III). The CPU
time comes from the kernel's per-group accounting, so it covers every process the job ever
ran, including ones that have exited:

- cgroup v1: ``cpuacct.usage``, nanoseconds (Documentation/admin-guide/cgroup-v1/cpuacct.rst);
- cgroup v2: ``usage_usec`` of ``cpu.stat``, microseconds; the file is there whether or not
  the cpu controller is enabled (cgroup-v2.rst, section "CPU": ``cpu.stat`` "exists whether
  the controller is enabled or not").

:class:`LoadHistory` keeps the last samples of every job and summarizes them as
:class:`~coshare.facts.JobLoad`. Pure: it is given the samples and their (monotonic) times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from coshare.facts import JobLoad


def parse_cpuacct_usage(text: str) -> float:
    """CPU seconds from a v1 ``cpuacct.usage`` (nanoseconds).

    Raises:
        ValueError: for anything but one non-negative integer.
    """
    value = text.strip()
    if not value.isdigit():
        raise ValueError(f"cpuacct.usage holds {value[:40]!r}, not nanoseconds")
    return int(value) / 1e9


def parse_cpu_stat(text: str) -> float:
    """CPU seconds from a v2 ``cpu.stat`` (its ``usage_usec``).

    Raises:
        ValueError: when it has no readable ``usage_usec`` line.
    """
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            value = value.strip()
            if not value.isdigit():
                break
            return int(value) / 1e6
    raise ValueError("cpu.stat has no usage_usec line")


class LoadHistory:
    """The last ``length`` load samples of every job.

    Args:
        length: intervals kept per job (one more sample than that).
    """

    def __init__(self, length: int) -> None:
        if length < 1:
            raise ValueError("a load history keeps at least one interval")
        self.length = length
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def add(self, job: str, time_s: float, cpu_s: float) -> None:
        """Record that ``job``'s group had used ``cpu_s`` CPU seconds at ``time_s``.

        A counter that went backwards (the job's group was made anew) starts a new history;
        a sample no later than the last one is ignored.
        """
        samples = self._samples.get(job)
        if samples is None:
            samples = self._samples[job] = deque(maxlen=self.length + 1)
        elif samples:
            last_t, last_cpu = samples[-1]
            if time_s <= last_t:
                return
            if cpu_s < last_cpu:
                samples.clear()
        samples.append((time_s, cpu_s))

    def retain(self, jobs: Iterable[str]) -> None:
        """Forget every job not in ``jobs`` (it ended)."""
        keep = set(jobs)
        for job in [j for j in self._samples if j not in keep]:
            del self._samples[job]

    def jobs(self) -> list[str]:
        """Jobs with at least one sample."""
        return sorted(self._samples)

    def summary(self, job: str) -> JobLoad | None:
        """The job's load: mean over the history (time-weighted), last interval, highest
        interval, and the seconds covered; ``None`` before its second sample."""
        samples = self._samples.get(job)
        if samples is None or len(samples) < 2:
            return None
        first_t, first_cpu = samples[0]
        last_t, last_cpu = samples[-1]
        loads = [
            (c1 - c0) / (t1 - t0)
            for (t0, c0), (t1, c1) in zip(list(samples)[:-1], list(samples)[1:], strict=True)
        ]
        return JobLoad(job, max((last_cpu - first_cpu) / (last_t - first_t), 0.0),
                       max(loads[-1], 0.0), max(max(loads), 0.0), last_t - first_t)  # fmt: skip

    def summaries(self) -> list[JobLoad]:
        """:meth:`summary` of every job that has one, by job id."""
        found = (self.summary(job) for job in self.jobs())
        return [s for s in found if s is not None]
