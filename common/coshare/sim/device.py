"""How placed jobs progress: execution models, pluggable behind one protocol.

:class:`OffloadModel` is the paper's shared coprocessor with its node middleware (COSMIC,
section IV-D2, and Figs. 2-3): a job alternates host phases and offloads; an offload needs
the job's declared threads on its device; offloads of co-located jobs run at the same time
while their threads fit in the device's hardware threads, otherwise they wait in a
first-in-first-out queue per device (offload serialization: the offload at the head waits
until enough threads are free, and those behind it wait too). A running offload is never
slowed: COSMIC gives each offload its own cores, and the paper's figures assume no other
interference. Host phases never wait (each job holds its own host cores). Memory is not
modelled here: the policies never oversubscribe it and the engine checks that they do not.

:class:`FixedModel` runs each job for its run time alone, whatever shares its device: for
jobs without a profile (CPU jobs, trace records) and as the model later slowdown models
(CPU collocation, memory bandwidth, Spread-n-Share) replace.

A model works on job and device *indices*; the engine owns time and calls it. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from coshare.sim.jobs import SimJob

Token = tuple[int, int]
"""An event of a model: (job index, device index; -1 for the end of a host phase)."""

Jobs = Sequence[SimJob] | Mapping[int, SimJob]
"""The jobs a model runs, by index (a mapping of the jobs in flight when the engine streams)."""

Schedule = Callable[[float, Token], None]
"""How a model asks the engine to call it back: ``schedule(time_s, token)``."""


class ExecutionModel(Protocol):
    """How jobs run once placed.

    Contract: :meth:`bind` is called once before anything else. :meth:`start` begins a job
    on its devices (global device indices; empty for CPU jobs) at ``now``; the model asks for
    callbacks with the ``schedule`` it was bound to, and :meth:`handle` returns the index of
    the job that ended, if the event ended one. Every started job ends exactly once, no
    earlier than its run time alone after its start. ``busy_thread_s`` and ``peak_threads``
    are per device: thread-seconds of offloads run, and the most threads in use at once.
    """

    busy_thread_s: list[float]
    peak_threads: list[int]

    def bind(self, jobs: Jobs, device_threads: Sequence[int], schedule: Schedule) -> None:
        """Prepare for a run over ``jobs`` on devices with these hardware threads."""
        ...

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        """Job ``job`` starts on ``devices`` at ``now``."""
        ...

    def handle(self, token: Token, now: float) -> int | None:
        """An event asked for earlier happens; returns the job that ended, if any."""
        ...

    def gate_wait_s(self, job: int) -> float:
        """Seconds the job's offloads waited for threads."""
        ...


class FixedModel:
    """Each job runs for its run time alone; nothing it shares slows it."""

    def __init__(self) -> None:
        self.busy_thread_s: list[float] = []
        self.peak_threads: list[int] = []
        self._jobs: Jobs = ()
        self._schedule: Schedule | None = None
        self._used: list[int] = []
        self._devices: dict[int, tuple[int, ...]] = {}

    def bind(self, jobs: Jobs, device_threads: Sequence[int], schedule: Schedule) -> None:
        self._jobs = jobs
        self._schedule = schedule
        self.busy_thread_s = [0.0] * len(device_threads)
        self.peak_threads = [0] * len(device_threads)
        self._used = [0] * len(device_threads)

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        assert self._schedule is not None, "bind() first"
        sim = self._jobs[job]
        threads = sim.job.device_threads
        for d in devices:
            # offloads at full speed whenever they come: declared threads count as in use
            self.busy_thread_s[d] += threads * sim.offload_s
            self._used[d] += threads
            self.peak_threads[d] = max(self.peak_threads[d], self._used[d])
        self._devices[job] = devices
        self._schedule(now + sim.duration_s, (job, -1))

    def handle(self, token: Token, now: float) -> int | None:
        job = token[0]
        for d in self._devices.pop(job):
            self._used[d] -= self._jobs[job].job.device_threads
        return job

    def gate_wait_s(self, job: int) -> float:
        return 0.0


class OffloadModel:
    """Host phases and offloads; offloads share a device's threads through a FIFO gate.

    Args:
        record: keep every offload as (device, start, end, threads, job) in ``offloads``,
            so a test can check the gate independently.
    """

    def __init__(self, record: bool = False) -> None:
        self.record = record
        self.offloads: list[tuple[int, float, float, int, int]] = []
        self.busy_thread_s: list[float] = []
        self.peak_threads: list[int] = []
        self._jobs: Jobs = ()
        self._schedule: Schedule | None = None
        self._threads: list[int] = []
        self._used: list[int] = []
        self._queue: list[deque[tuple[int, float]]] = []
        self._phase: dict[int, int] = {}
        self._devices: dict[int, tuple[int, ...]] = {}
        self._parts: dict[int, int] = {}
        self._waited: dict[int, float] = {}

    def bind(self, jobs: Jobs, device_threads: Sequence[int], schedule: Schedule) -> None:
        self._jobs = jobs
        self._schedule = schedule
        self._threads = list(device_threads)
        self._used = [0] * len(device_threads)
        self._queue = [deque() for _ in device_threads]
        self.busy_thread_s = [0.0] * len(device_threads)
        self.peak_threads = [0] * len(device_threads)

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        self._devices[job] = devices
        self._phase[job] = 0
        self._waited[job] = 0.0
        ended = self._enter(job, now)
        assert ended is None, "a job has at least one phase"

    def handle(self, token: Token, now: float) -> int | None:
        job, device = token
        if device >= 0:
            self._used[device] -= self._jobs[job].job.device_threads
            self._drain(device, now)
            self._parts[job] -= 1
            if self._parts[job] > 0:
                return None  # its offload still runs on another device
        self._phase[job] += 1
        return self._enter(job, now)

    def gate_wait_s(self, job: int) -> float:
        return self._waited.get(job, 0.0)

    # -- internals -------------------------------------------------------------------------

    def _enter(self, job: int, now: float) -> int | None:
        """Begin the job's current phase; returns the job if it has no phase left."""
        assert self._schedule is not None, "bind() first"
        phases = self._jobs[job].phases
        p = self._phase[job]
        if p >= len(phases):
            del self._phase[job], self._devices[job]
            self._parts.pop(job, None)
            return job
        devices = self._devices[job]
        if p % 2 == 0 or not devices:
            self._schedule(now + phases[p], (job, -1))
            return None
        self._parts[job] = len(devices)
        for d in devices:
            queue = self._queue[d]
            queue.append((job, now))
            if len(queue) == 1:
                self._drain(d, now)
        return None

    def _drain(self, device: int, now: float) -> None:
        """Start offloads from the head of the device's queue while their threads fit."""
        assert self._schedule is not None
        queue = self._queue[device]
        limit = self._threads[device]
        while queue:
            job, since = queue[0]
            sim = self._jobs[job]
            threads = sim.job.device_threads
            if self._used[device] + threads > limit and self._used[device] > 0:
                return  # FIFO: the head waits, and everything behind it
            queue.popleft()
            self._used[device] += threads
            self.peak_threads[device] = max(self.peak_threads[device], self._used[device])
            length = sim.phases[self._phase[job]]
            self.busy_thread_s[device] += threads * length
            self._waited[job] += now - since
            if self.record:
                self.offloads.append((device, now, now + length, threads, job))
            self._schedule(now + length, (job, device))
