"""Execution models whose CPU jobs progress at a rate that changes while they run.

The memory-bandwidth model (:mod:`coshare.sim.poncos`) and Spread-n-Share's
(:mod:`coshare.sim.sns`) both slow a running job while what shares its nodes changes: each
job has seconds of work alone left, a rate (1: as fast as alone), and the time that rate
began. When a job starts or ends, the models compute new rates for the jobs it touches;
:meth:`RatedRuns._set_rate` books the work done at the old rate and asks the engine for the
job's end at the new one. An end asked for earlier carries an epoch, so one made stale by a
later rate is ignored (:meth:`RatedRuns._current`). The models differ only in how a rate is
computed. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coshare.sim.device import Jobs, Schedule, Token


class RatedRuns:
    """The book-keeping both rate models share (a base class; CPU jobs only, so no device
    threads are ever busy)."""

    def __init__(self) -> None:
        self.busy_thread_s: list[float] = []
        self.peak_threads: list[int] = []
        self._schedule: Schedule | None = None
        self._jobs: Jobs = ()
        self._on: dict[str, set[int]] = {}  # node -> jobs running there
        self._left: dict[int, float] = {}  # seconds of work alone still to do
        self._rate: dict[int, float] = {}
        self._since: dict[int, float] = {}
        self._epoch: dict[int, int] = {}

    def bind(self, jobs: Jobs, device_threads: Sequence[int], schedule: Schedule) -> None:
        """Prepare for a run (:class:`coshare.sim.device.ExecutionModel`)."""
        self.busy_thread_s = [0.0] * len(device_threads)
        self.peak_threads = [0] * len(device_threads)
        self._schedule = schedule
        # A list, or the engine's jobs in flight when a log is streamed: read at each start.
        self._jobs = jobs

    def gate_wait_s(self, job: int) -> float:
        """No offload gate here: CPU jobs never wait for device threads."""
        return 0.0

    def _begin(self, job: int, work_s: float, nodes: Iterable[str], now: float) -> None:
        """``job`` starts at ``now`` on ``nodes`` with ``work_s`` seconds of work alone; the
        caller then sets the rates of every job on those nodes."""
        self._left[job] = work_s
        self._since[job], self._rate[job] = now, 1.0
        for node in nodes:
            self._on.setdefault(node, set()).add(job)

    def _current(self, token: Token) -> int | None:
        """The job ``token`` ends, or ``None`` when its rate changed after it was asked for."""
        job, epoch = token
        return job if self._epoch.get(job) == epoch else None

    def _leave(self, job: int, nodes: Iterable[str]) -> None:
        """``job`` ended: it no longer runs on ``nodes``."""
        for node in nodes:
            self._on[node].discard(job)

    def _set_rate(self, job: int, rate: float, now: float) -> None:
        """From ``now`` on, ``job`` runs at ``rate``: book the work done at the old rate and
        ask for its end at the new one."""
        assert self._schedule is not None
        self._left[job] -= (now - self._since[job]) * self._rate[job]
        self._rate[job] = rate
        self._since[job] = now
        self._epoch[job] = self._epoch.get(job, 0) + 1
        self._schedule(now + max(self._left[job], 0.0) / self._rate[job], (job, self._epoch[job]))
