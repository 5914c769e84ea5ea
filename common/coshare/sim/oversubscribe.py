"""Offloads that run over a device's hardware threads, and what that costs them.

The knapsack paper's node middleware (COSMIC, section IV-D2) does not let an offload run
when its threads do not fit the device's free hardware threads: it waits. That is
:class:`coshare.sim.device.OffloadModel`, the simulator's default (``oversubscribe=wait``).
The paper gives one figure for what happens without that gate, quoted from COSMIC's own
paper: thread oversubscription on the Xeon Phi costs "as much as 800%" (section III), a
bound for one unmeasured degree of oversubscription, not a function of it. So nothing here is
calibrated; the cost is a parameter, swept (``coshare simulate --sweep oversubscribe=...``)
to show how large it would have to be for the paper's knapsack-vs-random margin.

:class:`OversubscribedModel` admits every offload at once (no gate: MPSS alone). While the
threads of a device's running offloads ``U`` fit its hardware threads ``T``, each runs at
full speed, as under the gate; while ``U > T`` each runs at
``(T / U) / (1 + (s - 1) (U - T) / T)`` of its speed: the hardware threads time-sliced
evenly among the offloads' threads, over a context-switching cost that grows with the
excess, from none at ``U = T`` to ``s`` at ``U = 2T`` (``s >= 1``; ``s = 1``: time
slicing for free). Two offloads of ``T`` threads each then take ``2s`` times their time
alone; read as that case, the paper's "800%" (9x) is ``s = 4.5``. Host phases never slow.
``busy_thread_s`` counts the hardware threads busy (at most ``T``), ``peak_threads`` the
threads in use (may exceed ``T``).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from coshare.sim.device import ExecutionModel, Jobs, OffloadModel, Schedule, Token

#: The sweep value for the middleware's gate (COSMIC: an offload waits for threads).
WAIT = "wait"
#: The largest context-switching cost a sweep may set (the paper's bound is 9x in all).
MAX_SLOWDOWN = 100.0


def parse_oversubscribe(text: str) -> str:
    """``wait`` or a slowdown ``s`` from 1 to :data:`MAX_SLOWDOWN`, canonical text.

    Raises:
        ValueError: naming what is allowed.
    """
    value = text.strip().lower()
    if value == WAIT:
        return WAIT
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or not 1.0 <= number <= MAX_SLOWDOWN:
        raise ValueError(f"wait, or a slowdown from 1 to {MAX_SLOWDOWN:g}")
    return f"{number:g}"


def oversubscribed_rate(used: int, limit: int, slowdown: float) -> float:
    """The speed of each offload on a device whose offloads need ``used > limit`` threads:
    time slicing ``limit / used``, over a switching cost that grows with the excess from
    1 (no excess) to ``slowdown`` at twice the hardware threads (module docstring)."""
    excess = (used - limit) / limit
    return limit / used / (1.0 + (slowdown - 1.0) * excess)


def execution_model(oversubscribe: str) -> ExecutionModel:
    """The offload model a ``Setup.oversubscribe`` value names."""
    if oversubscribe == WAIT:
        return OffloadModel()
    return OversubscribedModel(float(parse_oversubscribe(oversubscribe)))


class OversubscribedModel:
    """Host phases and offloads; offloads never wait, and slow while a device is over its
    hardware threads (module docstring).

    Args:
        slowdown: the context-switching cost ``s`` (at least 1).
        record: keep every offload as (device, start, end, threads, job) in ``offloads``.
    """

    def __init__(self, slowdown: float, record: bool = False) -> None:
        if not math.isfinite(slowdown) or slowdown < 1.0:
            raise ValueError(f"slowdown must be a finite number >= 1, not {slowdown!r}")
        self.slowdown = slowdown
        self.record = record
        self.offloads: list[tuple[int, float, float, int, int]] = []
        self.busy_thread_s: list[float] = []
        self.peak_threads: list[int] = []
        self._jobs: Jobs = ()
        self._schedule: Schedule | None = None
        self._threads: list[int] = []
        self._used: list[int] = []
        self._rate: list[float] = []
        self._since: list[float] = []
        self._running: list[dict[int, float]] = []  # per device: job -> work alone left
        self._started: dict[tuple[int, int], float] = {}
        self._event: dict[int, tuple[int, int]] = {}  # live event code -> (job, device)
        self._code: dict[tuple[int, int], int] = {}  # (job, device) -> its live event code
        self._next_code = 0
        self._phase: dict[int, int] = {}
        self._devices: dict[int, tuple[int, ...]] = {}
        self._parts: dict[int, int] = {}

    def bind(self, jobs: Jobs, device_threads: Sequence[int], schedule: Schedule) -> None:
        self._jobs = jobs
        self._schedule = schedule
        self._threads = list(device_threads)
        n = len(device_threads)
        self._used = [0] * n
        self._rate = [1.0] * n
        self._since = [0.0] * n
        self._running = [{} for _ in range(n)]
        self.busy_thread_s = [0.0] * n
        self.peak_threads = [0] * n

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        self._devices[job] = devices
        self._phase[job] = 0
        ended = self._enter(job, now)
        assert ended is None, "a job has at least one phase"

    def handle(self, token: Token, now: float) -> int | None:
        job, code = token
        if code >= 0:
            part = self._event.pop(code, None)
            if part is None:
                return None  # its offload's rate changed after this end was asked for
            device = part[1]
            del self._code[part]
            self._change(device, now)
            del self._running[device][job]
            self._used[device] -= self._jobs[job].job.device_threads
            if self.record:
                start = self._started.pop(part)
                self.offloads.append((device, start, now, self._jobs[job].job.device_threads, job))
            self._rerate(device, now)
            self._parts[job] -= 1
            if self._parts[job] > 0:
                return None  # its offload still runs on another device
        self._phase[job] += 1
        return self._enter(job, now)

    def gate_wait_s(self, job: int) -> float:
        return 0.0  # no gate: offloads never wait

    # -- internals -------------------------------------------------------------------------

    def _enter(self, job: int, now: float) -> int | None:
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
        threads = self._jobs[job].job.device_threads
        for d in devices:
            self._change(d, now)
            self._running[d][job] = phases[p]
            self._used[d] += threads
            self.peak_threads[d] = max(self.peak_threads[d], self._used[d])
            if self.record:
                self._started[(job, d)] = now
            self._rerate(d, now, also=job)
        return None

    def _change(self, device: int, now: float) -> None:
        """Book the work done on ``device`` since its rate was last set."""
        elapsed = now - self._since[device]
        if elapsed > 0:
            rate = self._rate[device]
            running = self._running[device]
            for job in running:
                running[job] -= elapsed * rate
            self.busy_thread_s[device] += elapsed * min(self._used[device], self._threads[device])
        self._since[device] = now

    def _rerate(self, device: int, now: float, also: int | None = None) -> None:
        """Set the device's rate for its threads in use now; ask for new ends of every
        running offload if it changed (else only for ``also``, the one that just began)."""
        used, limit = self._used[device], self._threads[device]
        rate = 1.0 if used <= limit else oversubscribed_rate(used, limit, self.slowdown)
        changed = rate != self._rate[device]
        self._rate[device] = rate
        for job, left in self._running[device].items():
            if changed or job == also:
                self._ask(job, device, now + max(left, 0.0) / rate)

    def _ask(self, job: int, device: int, at: float) -> None:
        assert self._schedule is not None
        old = self._code.get((job, device))
        if old is not None:
            del self._event[old]
        code = self._next_code
        self._next_code += 1
        self._code[(job, device)] = code
        self._event[code] = (job, device)
        self._schedule(at, (job, code))
