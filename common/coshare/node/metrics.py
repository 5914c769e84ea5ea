"""The node daemon's Prometheus metrics, served at ``http://<node.metrics_address>/metrics``.

::

    GateServer  --granted(device, waited_s), queued(device)-->  NodeMetrics
    Watchdog    --killed(violation)------------------------->  NodeMetrics
    daemon      --watch_round(ok)--------------------------->  NodeMetrics
    scrape      <-- counters, histogram, and gauges read at scrape time (jobs, threads held)

Series:

==========================================  =============================================
``coshare_node_jobs``                       jobs with a record on this node (now)
``coshare_node_gate_grants_total{device}``  offload grants (ACQUIRE and TRY)
``coshare_node_gate_waits_total{device}``   ACQUIREs that had to queue
``coshare_node_gate_wait_seconds{device}``  time from ACQUIRE to grant (0 when at once)
``coshare_node_gate_threads{device}``       hardware threads the gate manages
``coshare_node_gate_threads_held{device}``  threads held by grants (now)
``coshare_node_gate_queued{device}``        requests waiting (now)
``coshare_node_kills_total{reason}``        jobs killed: ``host_memory``, ``device_memory``,
                                            ``unassigned_device``
``coshare_node_watchdog_rounds_total``      watchdog rounds run
``coshare_node_watchdog_failures_total``    of those, rounds that failed
``coshare_node_mps_up``                     1 while the MPS control daemon runs, 0 while it
                                            is down and the NVML watchdog is the backstop
                                            (only with ``node.gpu_limits: mps``)
==========================================  =============================================

The HTTP server is ``prometheus_client``'s (a thread of its own, so a slow scrape never
holds up the gate's event loop); it reads the gate's counters and the job records as they
are, without locks: each value is one read of a number the event loop writes whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coshare.config import listen_address
from coshare.errors import NodeError
from coshare.node.gate.state import GateState
from coshare.node.jobs import JobStore
from coshare.node.watchdog import Violation

log = logging.getLogger("coshare.node.metrics")

#: Kill reasons (``Violation.resource``, and a device used without being assigned).
KILL_REASONS = ("host_memory", "device_memory", "unassigned_device")
#: Gate waits from a millisecond (an offload's ACQUIRE usually waits for nothing) to minutes
#: (a long offload of a neighbour holds the device).
WAIT_BUCKETS_S = (0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 60.0, 300.0)


def kill_reason(violation: Violation) -> str:
    """The ``reason`` label of a kill."""
    if violation.resource == "device_memory" and violation.declared_mib == 0:
        return "unassigned_device"
    return violation.resource


class _Now(Collector):
    """Gauges read when Prometheus scrapes: the node's jobs and the gate's budgets."""

    def __init__(
        self,
        store: JobStore | None,
        gate: GateState | None,
        gpu_limit: Callable[[], str | None] | None = None,
    ) -> None:
        self.store = store
        self.gate = gate
        self.gpu_limit = gpu_limit

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.store is not None:
            jobs = GaugeMetricFamily("coshare_node_jobs", "Jobs with a record on this node.")
            try:
                jobs.add_metric([], len(self.store.jobs()))
            except OSError as exc:  # a scrape must not fail for it: the series is left out
                log.warning("metrics: cannot list the job records: %s", exc)
            else:
                yield jobs
        if self.gate is not None:
            gate = self.gate
            total = GaugeMetricFamily(
                "coshare_node_gate_threads", "Hardware threads the gate manages.", labels=["device"]
            )
            held = GaugeMetricFamily(
                "coshare_node_gate_threads_held",
                "Device threads held by grants.",
                labels=["device"],
            )
            queued = GaugeMetricFamily(
                "coshare_node_gate_queued",
                "Requests waiting for device threads.",
                labels=["device"],
            )
            for device, threads in sorted(gate.budgets.items()):
                total.add_metric([device], threads)
                held.add_metric([device], gate.held(device))
                queued.add_metric([device], gate.queued(device))
            yield from (total, held, queued)
        limit = self.gpu_limit() if self.gpu_limit is not None else None
        if limit is not None:
            up = GaugeMetricFamily(
                "coshare_node_mps_up",
                "1 while the MPS control daemon runs; 0 while it is down (the NVML watchdog "
                "is the backstop).",
            )
            up.add_metric([], 1 if limit == "mps" else 0)
            yield up


class NodeMetrics:
    """The node daemon's series, fed by the gate, the watchdog and the daemon.

    Args:
        store: the node's job records (``coshare_node_jobs``); ``None``: not exported.
        gate: the gate's state (threads held, queued); ``None``: not exported.
        devices: devices whose counters start at 0 (so their series exist before the first
            grant).
        gpu_limit: which GPU limit is in force, read at each scrape
            (:func:`coshare.node.mps.gpu_limit_in_force`); ``None``, or a function returning
            ``None``: ``coshare_node_mps_up`` is not exported.
    """

    def __init__(
        self,
        store: JobStore | None = None,
        gate: GateState | None = None,
        devices: tuple[str, ...] = (),
        gpu_limit: Callable[[], str | None] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.grants = Counter(
            "coshare_node_gate_grants",
            "Offload grants of the gate.",
            ["device"],
            registry=self.registry,
        )
        self.waits = Counter(
            "coshare_node_gate_waits",
            "ACQUIREs that had to queue.",
            ["device"],
            registry=self.registry,
        )
        self.wait_seconds = Histogram(
            "coshare_node_gate_wait_seconds",
            "Seconds from an ACQUIRE to its grant.",
            ["device"],
            buckets=WAIT_BUCKETS_S,
            registry=self.registry,
        )
        self.kills = Counter(
            "coshare_node_kills",
            "Jobs coshare killed, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.rounds = Counter(
            "coshare_node_watchdog_rounds", "Memory watchdog rounds.", registry=self.registry
        )
        self.failures = Counter(
            "coshare_node_watchdog_failures",
            "Memory watchdog rounds that failed.",
            registry=self.registry,
        )
        for device in devices:
            self.grants.labels(device)
            self.waits.labels(device)
            self.wait_seconds.labels(device)
        for reason in KILL_REASONS:
            self.kills.labels(reason)
        self.registry.register(_Now(store, gate, gpu_limit))

    # -- hooks ------------------------------------------------------------------------------

    def granted(self, device: str, waited_s: float) -> None:
        """The gate granted threads of ``device`` after ``waited_s`` (0: at once)."""
        self.grants.labels(device).inc()
        self.wait_seconds.labels(device).observe(waited_s)

    def queued(self, device: str) -> None:
        """An ACQUIRE of ``device`` had to wait."""
        self.waits.labels(device).inc()

    def killed(self, violation: Violation) -> None:
        """The watchdog killed a job (and was the first to record why)."""
        self.kills.labels(kill_reason(violation)).inc()

    def watch_round(self, ok: bool) -> None:
        """A watchdog round ended, well or not."""
        self.rounds.inc()
        if not ok:
            self.failures.inc()

    # -- serving ----------------------------------------------------------------------------

    def serve(self, address: str) -> Callable[[], None]:
        """Serve ``/metrics`` on ``address`` (``HOST:PORT``); the function that stops it.

        Raises:
            NodeError: the address cannot be listened on (in use, not this host's).
        """
        host, port = listen_address(address, "node.metrics_address")
        try:
            server: Any
            server, thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise NodeError(
                f"cannot serve metrics on {address} (node.metrics_address): {exc.strerror or exc}"
            ) from exc
        log.info("metrics at http://%s/metrics", address)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop
