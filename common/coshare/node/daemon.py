"""The node daemon (``coshare node gate``): the offload gate, the memory watchdog, and the
job-control socket through which job wrappers running as the user start, join and end jobs.

:func:`serve` runs until ``stop`` is set; :func:`main` is the only place that touches
process-wide state (signal handlers, the descriptor limit, the event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import CoshareError
from coshare.node.cgroups import Cgroups
from coshare.node.control.protocol import MAX_LINE as CONTROL_MAX_LINE
from coshare.node.control.server import ControlServer
from coshare.node.control.service import JobControl
from coshare.node.gate.protocol import MAX_LINE as GATE_MAX_LINE
from coshare.node.gate.server import GateServer, Identify
from coshare.node.gate.state import Client, GateState
from coshare.node.jobs import JobStore, job_of_pid
from coshare.node.lifecycle import node_cgroups, node_store
from coshare.node.sockets import Limits, raise_descriptor_limit
from coshare.node.watchdog import DeviceMemory, Watchdog

log = logging.getLogger("coshare.node.daemon")


def make_identify(cgroups: Cgroups, store: JobStore) -> Identify:
    """Identify a peer by the job whose cgroup holds it, and that job's record."""

    def identify(pid: int, uid: int) -> Client:
        job = job_of_pid(pid, cgroups)
        record = store.read(job) if job is not None else None
        if record is None:
            return Client(job=None)
        return Client(record.job, record.spec.devices, record.spec.device_threads)

    return identify


def device_memory_backend(config: NodeConfig) -> DeviceMemory | None:
    """The configured device memory backend (NVML is imported only here, only if named)."""
    if config.device_memory == "nvml":
        from coshare.node.nvml import NvmlMemory

        return NvmlMemory()
    return None


async def serve(
    config: NodeConfig,
    budgets: Mapping[str, int],
    stop: asyncio.Event,
    *,
    watch: bool = True,
    identify: Identify | None = None,
    ready: Callable[[], None] | None = None,
    control: bool = True,
) -> None:
    """Serve the gate on ``config.gate_socket`` and job control on ``config.control_socket``
    (and watch memory, reaping abandoned jobs) until ``stop`` is set.

    Raises:
        GateError: a socket cannot be served.
        NodeError: the device memory backend cannot start.
    """
    store = node_store(config)
    store.ensure()
    cgroups = node_cgroups(config) if identify is None or watch else None
    if identify is None:
        assert cgroups is not None
        identify = make_identify(cgroups, store)
    gate_limits = Limits.of(config, GATE_MAX_LINE)
    server = GateServer(GateState(dict(budgets)), identify, gate_limits)
    await server.start(Path(config.gate_socket))
    jobs = JobControl(config) if control else None
    controller = None
    if jobs is not None:
        # A control client sends its one request at once: no reason to stay silent longer.
        limits = Limits.of(config, CONTROL_MAX_LINE, idle_timeout_s=config.line_timeout_s)
        controller = ControlServer(jobs, limits)
    try:
        if controller is not None:
            await controller.start(Path(config.control_socket))
    except BaseException:
        await server.close()
        raise
    watcher = None
    if watch:
        assert cgroups is not None
        found = cgroups
        watchdog = Watchdog(
            store,
            device_memory_backend(config),
            lambda pid: job_of_pid(pid, found),
            config.kill_timeout_s,
        )
        watcher = asyncio.create_task(_watch(watchdog, jobs, config.watch_interval_s, stop))
    log.info("offload gate on %s, devices %s; job control on %s; at most %d connections "
             "per uid", config.gate_socket, dict(budgets),
             config.control_socket if control else "off", gate_limits.per_uid)  # fmt: skip
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await server.close()
        if controller is not None:
            await controller.close()
        with contextlib.suppress(FileNotFoundError):
            Path(config.gate_socket).unlink()
        if controller is not None:
            with contextlib.suppress(FileNotFoundError):
                Path(config.control_socket).unlink()


async def _watch(
    watchdog: Watchdog, jobs: JobControl | None, interval_s: float, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        try:
            # Off the event loop: cgroup reads and NVML calls must not delay gate replies.
            await asyncio.to_thread(watchdog.check)
            if jobs is not None:
                await asyncio.to_thread(jobs.reap)
                await asyncio.to_thread(jobs.adopt)
        except CoshareError as exc:
            log.error("watchdog: %s", exc)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


def main(config: NodeConfig, budgets: Mapping[str, int], *, watch: bool = True) -> None:
    """Run the node daemon until SIGTERM or SIGINT."""
    descriptors = raise_descriptor_limit()
    if descriptors < 4 * config.max_connections_per_uid:
        log.warning("only %d open files allowed (RLIMIT_NOFILE): raise the hard limit "
                    "(LimitNOFILE=) for %d connections per uid to mean much", descriptors,
                    config.max_connections_per_uid)  # fmt: skip

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(config, budgets, stop, watch=watch)

    asyncio.run(run())
