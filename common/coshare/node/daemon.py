"""The node daemon (``coshare node gate``): the offload gate, the memory watchdog, and the
job-control socket through which job wrappers running as the user start, join and end jobs.

:func:`serve` runs until ``stop`` is set, or raises when the watchdog cannot run; :func:`main`
is the only place that touches process-wide state (signal handlers, the descriptor limit,
the event loop).

The watchdog is what ends a job stopped at its cgroup v1 memory limit (the kernel's OOM
killer is off in job groups, so such a job waits for it): a round that fails is logged and
retried, and when ``node.watch_failure_limit`` rounds in a row fail, or one round does not
finish in that many intervals, the daemon stops and exits non-zero, so that its service
manager (``Restart=`` in deploy/node/coshare-node.service) starts a fresh one.
It never just carries on without a watchdog.

The daemon also measures the node for the planner (:mod:`coshare.node.sampler`: each job's
CPU load, LLC ways, the memory-bandwidth probe) every ``node.sample_interval_s`` and writes
its facts to ``state_dir/facts``; a failing measurement is logged, never fatal.
With ``node.trial_requests`` set, each sampling round first probes the trial co-runs the
scheduler's queue asks of this node and publishes the answers in the same facts
(:mod:`coshare.node.trial_requests`, ``policy.membw.probe_via: facts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from coshare.config import NodeConfig
from coshare.errors import CoshareError, NodeError
from coshare.node.cgroups import Cgroups
from coshare.node.control.protocol import MAX_LINE as CONTROL_MAX_LINE
from coshare.node.control.server import ControlServer
from coshare.node.control.service import JobControl
from coshare.node.gate.protocol import MAX_LINE as GATE_MAX_LINE
from coshare.node.gate.server import GateServer, Identify
from coshare.node.gate.state import Client, GateState
from coshare.node.jobs import JobStore, job_of_pid
from coshare.node.lifecycle import node_cgroups, node_resctrl, node_store
from coshare.node.mps import gpu_limit_in_force
from coshare.node.sampler import PcieThroughput, Sampler
from coshare.node.sockets import Limits, raise_descriptor_limit
from coshare.node.trial_requests import NodeTrials, open_node_trials
from coshare.node.watchdog import DeviceMemory, Watchdog

if TYPE_CHECKING:
    from coshare.node.metrics import NodeMetrics

log = logging.getLogger("coshare.node.daemon")
T = TypeVar("T")


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


def pcie_backend() -> PcieThroughput | None:
    """NVML for the GPU jobs' copy bandwidth, ``None`` where it cannot start (no pynvml, no
    driver, no GPU): the node then publishes no copy facts, and says so once."""
    from coshare.node.nvml import NvmlMemory

    try:
        nvml = NvmlMemory()
    except NodeError as exc:
        log.info("no copy bandwidth facts (NVML PCIe throughput unsupported here): %s", exc)
        return None
    if not nvml.devices():
        log.info("no copy bandwidth facts: NVML sees no GPU")
        nvml.close()
        return None
    return nvml


async def serve(
    config: NodeConfig,
    budgets: Mapping[str, int],
    stop: asyncio.Event,
    *,
    watch: bool = True,
    identify: Identify | None = None,
    ready: Callable[[], None] | None = None,
    control: bool = True,
    watchdog: Watchdog | None = None,
) -> None:
    """Serve the gate on ``config.gate_socket`` and job control on ``config.control_socket``
    (and watch memory, reaping abandoned jobs) until ``stop`` is set.

    Args:
        watchdog: the watchdog to run (default: one over the node's jobs and the configured
            device memory backend).

    With ``config.metrics_address`` set, it also serves Prometheus metrics there
    (:mod:`coshare.node.metrics`).

    Raises:
        GateError: a socket cannot be served.
        NodeError: the device memory backend cannot start, or the watchdog cannot run.
    """
    store = node_store(config)
    store.ensure()
    cgroups = node_cgroups(config) if identify is None or (watch and watchdog is None) else None
    if identify is None:
        assert cgroups is not None
        identify = make_identify(cgroups, store)
    gate_state = GateState(dict(budgets))
    observed = None
    if config.metrics_address is not None:
        from coshare.node.metrics import NodeMetrics  # prometheus_client only when used

        observed = NodeMetrics(
            store,
            gate_state,
            tuple(sorted(budgets)),
            lambda: gpu_limit_in_force(config.gpu_limits, config.mps_pipe_dir)[0],
        )
    if watch and watchdog is None:
        found = cgroups
        assert found is not None
        # Before any socket: a backend that cannot start leaves nothing behind.
        backend = device_memory_backend(config)
        watchdog = Watchdog(
            store, backend, lambda pid: job_of_pid(pid, found), config.kill_timeout_s
        )
    if observed is not None and isinstance(watchdog, Watchdog) and watchdog.on_kill is None:
        watchdog.on_kill = observed.killed
    stop_metrics = None
    if observed is not None and config.metrics_address is not None:
        stop_metrics = observed.serve(config.metrics_address)
    gate_limits = Limits.of(config, GATE_MAX_LINE)
    server = GateServer(gate_state, identify, gate_limits, observer=observed)
    try:
        await server.start(Path(config.gate_socket))
    except BaseException:
        if stop_metrics is not None:
            stop_metrics()
        raise
    # The devices' sizes as the gate has them (--device included): a job's MPS share is of them.
    jobs = JobControl(replace(config, devices=dict(budgets))) if control else None
    node_trials = None
    if jobs is not None and cgroups is not None:
        try:  # a trial source that cannot be set up stops the start, sockets closed
            node_trials = open_node_trials(config, jobs.trial)
        except BaseException:
            await server.close()
            if stop_metrics is not None:
                stop_metrics()
            raise
    controller = None
    if jobs is not None:
        # A freeze is for one probe and no probe outlives the daemon that ran it: a job
        # still marked frozen was left by a daemon that was killed. Thaw it now.
        jobs.thaw_all()
        # A control client sends its one request at once: no reason to stay silent longer.
        limits = Limits.of(config, CONTROL_MAX_LINE, idle_timeout_s=config.line_timeout_s)
        controller = ControlServer(jobs, limits)
    try:
        if controller is not None:
            await controller.start(Path(config.control_socket))
    except BaseException:
        await server.close()
        if stop_metrics is not None:
            stop_metrics()
        raise
    watcher: asyncio.Task[None] | None = None
    if watchdog is not None and watch:
        watcher = asyncio.ensure_future(_watch(watchdog, jobs, config, stop, observed))
    sampling: asyncio.Task[None] | None = None
    if cgroups is not None:
        sampler = Sampler(
            config,
            store,
            cgroups,
            node_resctrl(config),
            pcie=pcie_backend(),
            trials=None if node_trials is None else node_trials.published,
        )
        sampling = asyncio.ensure_future(_sample(sampler, config, stop, node_trials))
    log.info(
        "offload gate on %s, devices %s; job control on %s; at most %d connections per uid",
        config.gate_socket,
        dict(budgets),
        config.control_socket if control else "off",
        gate_limits.per_uid,
    )
    if ready is not None:
        ready()
    stopped = asyncio.ensure_future(stop.wait())
    try:
        waiting: set[asyncio.Future[Any]] = {stopped}
        if watcher is not None:
            waiting.add(watcher)
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if watcher is not None and watcher in done:
            watcher.result()  # raises why the watchdog cannot run
    finally:
        stopped.cancel()
        for task in (watcher, sampling):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await server.close()
        if controller is not None:
            await controller.close()
        if stop_metrics is not None:
            stop_metrics()
        with contextlib.suppress(FileNotFoundError):
            Path(config.gate_socket).unlink()
        if controller is not None:
            with contextlib.suppress(FileNotFoundError):
                Path(config.control_socket).unlink()


async def _watch(
    watchdog: Watchdog,
    jobs: JobControl | None,
    config: NodeConfig,
    stop: asyncio.Event,
    metrics: NodeMetrics | None = None,
) -> None:
    """Watchdog rounds every ``watch_interval_s`` until ``stop``.

    Raises:
        NodeError: ``watch_failure_limit`` rounds in a row failed, or one did not finish.
    """
    limit = config.watch_failure_limit
    round_timeout_s = limit * max(config.watch_interval_s, config.kill_timeout_s)
    failures = 0
    while not stop.is_set():
        try:
            await in_thread(lambda: _round(watchdog, jobs), round_timeout_s)
        except asyncio.TimeoutError:
            if metrics is not None:
                metrics.watch_round(ok=False)
            raise NodeError(
                f"a memory watchdog round did not finish in {round_timeout_s:g} s "
                "(node.watch_failure_limit x max(watch_interval_s, kill_timeout_s)); the "
                "daemon stops so that a fresh one is started"
            ) from None
        except Exception as exc:
            failures += 1
            if metrics is not None:
                metrics.watch_round(ok=False)
            log.error(
                "watchdog round failed (%d in a row; the daemon stops after %d): %s",
                failures,
                limit,
                exc,
                exc_info=not isinstance(exc, CoshareError),
            )
            if failures >= limit:
                raise NodeError(
                    f"the memory watchdog failed {failures} rounds in a row, the last with: "
                    f"{exc}; the daemon stops so that a fresh one is started"
                ) from exc
        else:
            if metrics is not None:
                metrics.watch_round(ok=True)
            if failures:
                log.warning("watchdog round succeeded again after %d failures", failures)
            failures = 0
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), config.watch_interval_s)


async def _sample(
    sampler: Sampler, config: NodeConfig, stop: asyncio.Event, trials: NodeTrials | None = None
) -> None:
    """Sampling rounds every ``sample_interval_s`` until ``stop`` (each first probes the
    node's trial requests, when it reads any, so that the facts it writes carry the
    answers); a round that fails (or takes longer than a minute and its interval) is logged
    and the next one tried."""
    limit_s = 60.0 + config.sample_interval_s

    def one_round() -> object:
        if trials is not None:
            try:
                trials.round([r.job for r in sampler.store.records()])
            except Exception as exc:  # the facts are written all the same
                log.error("trial requests: %s", exc, exc_info=not isinstance(exc, CoshareError))
        return sampler.round()

    while not stop.is_set():
        try:
            await in_thread(one_round, limit_s)
        except asyncio.TimeoutError:
            log.error("a sampling round did not finish in %.0f s; facts are not updated", limit_s)
        except Exception as exc:  # facts are advisory: the daemon serves on without them
            log.error("sampling round failed: %s", exc, exc_info=not isinstance(exc, CoshareError))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), config.sample_interval_s)


def _round(watchdog: Watchdog, jobs: JobControl | None) -> None:
    """One watchdog round: memory first (what frees frozen jobs); then reaping, adopting
    and thawing jobs frozen too long, whose failures are logged but do not count against the
    watchdog."""
    watchdog.check()
    if jobs is None:
        return
    for task in (jobs.reap, jobs.adopt, jobs.thaw_overdue):
        try:
            task()
        except Exception:
            log.exception("watchdog: %s failed", task.__name__)


async def in_thread(func: Callable[[], T], timeout_s: float) -> T:
    """``func()`` in a thread of its own, waited for at most ``timeout_s``.

    A daemon thread, not the event loop's executor: a call that hangs (a GPU that stops
    answering NVML) is abandoned, and does not keep the process from exiting.

    Raises:
        asyncio.TimeoutError: ``func`` did not return in time.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result = func()
        except BaseException as exc:  # handed to the awaiting coroutine
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="coshare-watchdog", daemon=True).start()
    return await asyncio.wait_for(asyncio.shield(future), timeout_s)


def main(config: NodeConfig, budgets: Mapping[str, int], *, watch: bool = True) -> None:
    """Run the node daemon until SIGTERM or SIGINT.

    Raises:
        NodeError: the watchdog could not run (the caller exits non-zero).
    """
    descriptors = raise_descriptor_limit()
    if descriptors < 4 * config.max_connections_per_uid:
        log.warning(
            "only %d open files allowed (RLIMIT_NOFILE): raise the hard limit "
            "(LimitNOFILE=) for %d connections per uid to mean much",
            descriptors,
            config.max_connections_per_uid,
        )

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(config, budgets, stop, watch=watch)

    asyncio.run(run())
