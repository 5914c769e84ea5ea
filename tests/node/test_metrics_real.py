"""The node daemon's ``/metrics`` scraped by a real Prometheus, and its
``--log-format json`` log: a job holds a device, a second job's ACQUIRE queues behind it and
is granted when the first is killed; Prometheus' HTTP API then has the grants, the wait, its
time in the histogram, the jobs, and the watchdog's rounds (root, real cgroups)."""

from __future__ import annotations

import json
import re
import signal
import socket
from dataclasses import replace

import pytest
from coshare.config import NodeConfig
from coshare.node.lifecycle import job_start, spawn_in_group

from tests.node.helpers import daemon_log, running_daemon, stop, wait_for
from tests.node.test_gate_real import (
    HOLDER,
    PY,
    env_of,
    free_threads,
    job_connections,
    read_line,
)
from tests.prometheus import free_port, running_prometheus

pytestmark = [pytest.mark.cgroups, pytest.mark.integration]


def test_prometheus_scrapes_the_gates_grants_waits_and_the_watchdog(
    node_config: NodeConfig,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = replace(node_config, metrics_address=address)
    env = {"COSHARE_NODE_METRICS_ADDRESS": address}
    with (
        running_daemon(config, env=env, options=("--log-format", "json")),
        running_prometheus({"node-daemon": address}) as prom,
    ):
        holder_job = job_start(config, "metrics-a", devices=["0"], device_threads=8)
        waiter_job = job_start(config, "metrics-b", devices=["0"], device_threads=2)
        holder = spawn_in_group([PY, "-c", HOLDER], holder_job.group(), env_of(config, holder_job))
        try:
            wait_for(lambda: free_threads(config) == 0, what="the holder's grant")
            (waiter,) = job_connections(config, waiter_job, 1)
            with waiter:
                waiter.sendall(b"ACQUIRE 0 2\n")  # queues behind the holder
                held = prom.wait_for(
                    'coshare_node_gate_queued{device="0"}', lambda v: list(v.values()) == [1]
                )
                assert held
                holder.send_signal(signal.SIGKILL)
                assert holder.wait(timeout=10) == -signal.SIGKILL
                assert re.fullmatch(r"OK \d+ 0 2", read_line(waiter))
                d0 = (("device", "0"),)
                prom.wait_for('coshare_node_gate_threads_held{device="0"}', lambda v: v == {d0: 2})
        finally:
            stop(holder)
        d0 = (("device", "0"),)
        assert prom.wait_for("coshare_node_gate_grants_total", lambda v: v.get(d0) == 2) == {
            d0: 2,
            (("device", "1"),): 0,
        }
        assert prom.wait_for("coshare_node_gate_waits_total", lambda v: v.get(d0) == 1)[d0] == 1
        counts = prom.wait_for("coshare_node_gate_wait_seconds_count", lambda v: v.get(d0) == 2)
        assert counts[d0] == 2
        # The holder was granted at once (0 s, in the first bucket); the waiter waited.
        waited = prom.values('coshare_node_gate_wait_seconds_sum{device="0"}')
        assert next(iter(waited.values())) > 0
        first = prom.values('coshare_node_gate_wait_seconds_bucket{device="0",le="0.001"}')
        assert list(first.values()) == [1]
        assert prom.values("coshare_node_gate_threads") == {d0: 8, (("device", "1"),): 4}
        assert prom.values("coshare_node_jobs") == {(): 2}
        assert prom.values("coshare_node_kills_total") == {
            (("reason", r),): 0 for r in ("host_memory", "device_memory", "unassigned_device")
        }
        rounds = prom.wait_for("coshare_node_watchdog_rounds_total", lambda v: v.get((), 0) > 0)
        assert rounds[()] > 0
        assert prom.values("coshare_node_watchdog_failures_total") == {(): 0}
        targets = prom.targets()
        assert ("node-daemon", "up", "") in targets
    # --log-format json: every line of the daemon's log is one JSON object.
    records = [json.loads(line) for line in daemon_log(config).read_text().splitlines()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["message"] == f"metrics at http://{address}/metrics" for r in records)


def test_the_daemon_refuses_a_metrics_address_in_use(node_config: NodeConfig) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        env = {"COSHARE_NODE_METRICS_ADDRESS": address}
        refused = pytest.raises(AssertionError, match=r"cannot serve metrics on 127\.0\.0\.1:\d+")
        with refused, running_daemon(node_config, env=env):
            pass
