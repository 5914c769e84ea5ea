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

A load cannot show more than the cores a job may run on, nor what it did not get on a
contended node: a job that wants more CPU than it gets spends the rest *runnable, waiting
for a CPU*. That is its run-queue delay, which the kernel counts per task in the second field
of ``/proc/<tid>/schedstat`` (nanoseconds; Documentation/scheduler/sched-stats.rst: "time
spent waiting on a runqueue"), on cgroup v1 and v2 alike. :class:`RunDelays` turns each
round's per-task figures into one counter per job that never goes back (tasks come and go),
and a second :class:`LoadHistory` turns that counter into a rate in cores, like the load.

:class:`LoadHistory` keeps the last samples of every job and summarizes them as
:class:`~coshare.ledger.facts.JobLoad`. Pure: it is given the samples and their (monotonic) times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from coshare.ledger.facts import JobLoad


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


def parse_schedstat(text: str) -> int:
    """Run-queue delay in nanoseconds from ``/proc/<tid>/schedstat``: its three fields are the
    time on a CPU (ns), the time waiting on a run queue (ns) and the timeslices run.

    Raises:
        ValueError: for anything but three non-negative integers.
    """
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() and len(f) <= 20 for f in fields):
        raise ValueError(f"schedstat holds {text.strip()[:60]!r}, not 'run_ns wait_ns slices'")
    return int(fields[1])


#: A task as the run-queue accounting tells tasks apart: its id and its start time (clock
#: ticks after boot, ``/proc/<tid>/stat`` field 22), so that a reused id is a new task.
TaskKey = tuple[int, int]


class RunDelays:
    """Each job's run-queue delay so far, in seconds, from per-task readings.

    A job's figure counts, from its first reading on, the delay its tasks gained: for a task
    read before, what it gained since; for a task not read before (born since, or moved in),
    all its delay (it gained it since it was born, after the last reading, for a task the job
    started). A task that ends between two readings takes the delay it gained after the last
    one with it: that part is not counted (a job of short-lived tasks reads low, never high).
    """

    def __init__(self) -> None:
        self._tasks: dict[str, dict[TaskKey, int]] = {}
        self._total_s: dict[str, float] = {}

    def add(self, job: str, delays_ns: Mapping[TaskKey, int]) -> float:
        """Record one reading of the job's tasks (task -> run delay in ns); the job's delay
        counted so far, in seconds (0 at its first reading)."""
        before = self._tasks.get(job)
        total = self._total_s.get(job, 0.0)
        if before is not None:
            for task, ns in delays_ns.items():
                last = before.get(task)
                total += (ns - last if last is not None and ns >= last else ns) / 1e9
        self._tasks[job] = dict(delays_ns)
        self._total_s[job] = total
        return total

    def retain(self, jobs: Iterable[str]) -> None:
        """Forget every job not in ``jobs`` (it ended)."""
        keep = set(jobs)
        for job in [j for j in self._tasks if j not in keep]:
            del self._tasks[job]
            del self._total_s[job]


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
        return JobLoad(
            job,
            max((last_cpu - first_cpu) / (last_t - first_t), 0.0),
            max(loads[-1], 0.0),
            max(max(loads), 0.0),
            last_t - first_t,
        )

    def summaries(self) -> list[JobLoad]:
        """:meth:`summary` of every job that has one, by job id."""
        found = (self.summary(job) for job in self.jobs())
        return [s for s in found if s is not None]
