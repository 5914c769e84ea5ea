"""The node daemon's /metrics (coshare.node.metrics), served by the daemon's own ``serve`` in
this process over real unix sockets and HTTP: grants, waits and their times, kills by reason,
watchdog rounds, the node's jobs; the watchdog runs over a cgroup v1 layout in a temp dir
(tests/node/test_metrics_real.py does it with real cgroups and a real Prometheus)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import NodeError
from coshare.node import daemon
from coshare.node.gate.state import Client
from coshare.node.jobs import JobStore
from coshare.node.metrics import NodeMetrics, kill_reason
from coshare.node.watchdog import Violation, Watchdog
from prometheus_client.parser import text_string_to_metric_families

from tests.node.test_gate_real import call
from tests.node.test_gate_real import read_line as read
from tests.prometheus import free_port
from tests.unit.test_node_watchdog import frozen_job


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class Served:
    address: str
    config: NodeConfig
    store: JobStore


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The daemon (gate, watchdog; no job control) with metrics; one job of the node's is
    frozen at its memory limit; every gate client is job "j" with 4 declared threads."""
    address = f"127.0.0.1:{free_port()}"
    store = frozen_job(tmp_path / "cg", tmp_path / "state", "frozen")
    config = NodeConfig(
        gate_socket=str(tmp_path / "gate.sock"),
        state_dir=str(tmp_path / "state"),
        cgroup_root=str(tmp_path / "cg"),
        watch_interval_s=0.05,
        kill_timeout_s=1.0,
        metrics_address=address,
    )
    watchdog = Watchdog(store, None, lambda pid: None, timeout_s=1.0)
    stop = threading.Event()
    ready = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        async def main() -> None:
            done = asyncio.Event()
            loop = asyncio.get_running_loop()
            threading.Thread(
                target=lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)), daemon=True
            ).start()
            await daemon.serve(
                config,
                {"0": 6},
                done,
                control=False,
                ready=ready.set,
                identify=lambda pid, uid: Client("j", ("0",), 4),
                watchdog=watchdog,
            )

        try:
            asyncio.run(main())
        except BaseException as exc:
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10) and not failed, failed
    try:
        yield Served(address, config, store)
    finally:
        stop.set()
        thread.join(10)


def gate(config: NodeConfig) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(config.gate_socket)
    return sock


def test_grants_waits_kills_and_rounds_are_served(served: Served) -> None:
    first, second = gate(served.config), gate(served.config)
    with first, second:
        grant = call(first, "ACQUIRE 0 4")
        assert grant.startswith("OK ")
        assert call(second, "TRY 0 4").startswith("ERR busy")
        second.sendall(b"ACQUIRE 0 3\n")  # 2 free: it waits
        time.sleep(0.3)
        assert call(first, f"RELEASE {grant.split()[1]}") == "OK"
        assert read(second).startswith("OK ")
        found = scrape(served.address)
    d0 = (("device", "0"),)
    assert found[("coshare_node_gate_grants_total", d0)] == 2
    assert found[("coshare_node_gate_waits_total", d0)] == 1
    assert found[("coshare_node_gate_wait_seconds_count", d0)] == 2
    waited = found[("coshare_node_gate_wait_seconds_sum", d0)]
    assert 0.25 < waited < 5  # the second waited from its ACQUIRE to the RELEASE
    assert found[("coshare_node_gate_wait_seconds_bucket", (*d0, ("le", "0.1")))] == 1
    assert found[("coshare_node_gate_threads", d0)] == 6
    assert found[("coshare_node_gate_threads_held", d0)] == 3  # the second holds its grant
    assert found[("coshare_node_gate_queued", d0)] == 0
    # The frozen job was killed once, for its host memory; rounds go on without failures.
    assert found[("coshare_node_kills_total", (("reason", "host_memory"),))] == 1
    assert found[("coshare_node_kills_total", (("reason", "device_memory"),))] == 0
    assert found[("coshare_node_watchdog_rounds_total", ())] >= 1
    assert found[("coshare_node_watchdog_failures_total", ())] == 0
    assert found[("coshare_node_jobs", ())] == 1


def test_a_metrics_address_in_use_stops_the_daemon_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        config = NodeConfig(
            gate_socket=str(tmp_path / "gate.sock"),
            state_dir=str(tmp_path),
            metrics_address=address,
        )
        with pytest.raises(
            NodeError,
            match=f"cannot serve metrics on {address} "
            r"\(node.metrics_address\): Address already in use",
        ):
            asyncio.run(
                daemon.serve(
                    config,
                    {"0": 4},
                    asyncio.Event(),
                    control=False,
                    watch=False,
                    identify=lambda pid, uid: Client(None),
                )
            )
    assert not (tmp_path / "gate.sock").exists()


def test_kill_reasons() -> None:
    assert kill_reason(Violation("a", "host_memory", 10)) == "host_memory"
    assert kill_reason(Violation("a", "device_memory", 10, 20, "0")) == "device_memory"
    assert kill_reason(Violation("a", "device_memory", 0, 20, "1")) == "unassigned_device"
    metrics = NodeMetrics(devices=("0",))
    metrics.killed(Violation("a", "device_memory", 0, 20, "1"))
    metrics.watch_round(ok=False)
    value = metrics.registry.get_sample_value
    assert value("coshare_node_kills_total", {"reason": "unassigned_device"}) == 1
    assert value("coshare_node_watchdog_failures_total") == 1
    assert value("coshare_node_gate_grants_total", {"device": "0"}) == 0
