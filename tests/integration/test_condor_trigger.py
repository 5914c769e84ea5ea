"""``coshare condor trigger`` under the real pool's condor_master (deploy/condor/pool
trigger-on: this checkout installed in the chroot, on the bindings of Debian's condor 23.9),
exporting its cycles' metrics to a real push gateway and node exporter scraped by a real
Prometheus. The test runs no cycle of its own: the jobs run because the trigger placed them.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from condor_addon.view import machine_of
from tests.integration.condor_pool import CHROOT, Pool, pool, wait_for
from tests.prometheus import Prometheus, running_prometheus

pytestmark = [pytest.mark.integration, pytest.mark.condor]

LOG = CHROOT / "pool" / "log" / "CoshareTriggerLog"
MASTER_LOG = CHROOT / "pool" / "log" / "MasterLog"
METRICS = CHROOT / "pool" / "metrics"  # /pool/metrics inside the chroot: the trigger writes
POOL_UID = 4242


def trigger_pids() -> list[int]:
    """Every pid the trigger's log names, in order (one per start)."""
    text = LOG.read_text() if LOG.exists() else ""
    return [int(p) for p in re.findall(r"\(pid:(\d+)\) INFO coshare condor trigger started", text)]


@pytest.fixture
def triggered(live: Pool, tmp_path: Path) -> Iterator[tuple[Pool, Prometheus]]:
    """The pool with the trigger on (pushing to a push gateway and writing the node
    exporter's textfile) and a Prometheus scraping both; the trigger off afterwards."""
    METRICS.mkdir(exist_ok=True)
    os.chown(METRICS, POOL_UID, POOL_UID)
    with running_prometheus(pushgateway=True, textfile_dir=METRICS) as prom:
        config = tmp_path / "trigger.yaml"
        config.write_text(
            "condor: {lock_file: /pool/lock/coshare-trigger.lock, retry_wait_s: 0.2}\n"
            f"metrics: {{pushgateway: '{prom.pushgateway}', textfile_dir: /pool/metrics}}\n"
        )
        pool("trigger-on", str(config))
        try:
            yield live, prom
        finally:
            pool("trigger-off")


def test_the_trigger_places_jobs_and_prometheus_has_its_cycles(
    triggered: tuple[Pool, Prometheus],
) -> None:
    live, prom = triggered
    cluster = live.submit(
        4, sleep_s=1, **{"+CoshareDeviceMemory": "1024", "+CoshareDeviceThreads": "60"}
    )
    bad = live.submit(1, **{"+CoshareDeviceMemory": "20000", "+CoshareDeviceThreads": "60"})
    wait_for(lambda: len(live.history(cluster)) == 4, 120, "the trigger's jobs to finish")
    nodes = live.node_of_machine()
    for ad in live.history(cluster):  # each ran where the trigger placed it
        assert ad["ExitCode"] == 0
        assert nodes[machine_of(ad["LastRemoteHost"])] == ad["CosharePlacedNode"]
    held = live.jobs(f"ClusterId == {bad}")
    assert "exceeds every device" in str(held[f"{bad}.0"].get("HoldReason"))
    log = LOG.read_text()
    assert re.search(r"INFO cycle done: 4 pending, 4 placed, wrote 4 \[scheduler=condor", log)
    assert re.search(rf"refused job {bad}\.0: .*exceeds every device", log)
    # Both exports, as Prometheus scraped them: the push gateway's series keep the job label
    # of the push (coshare); the node exporter's are job "node". The trigger cycles every
    # negotiation (2 s here): what it did shows in its counters, the last cycle in gauges.
    for job in ("coshare", "node"):
        selector = f'{{scheduler="condor",job="{job}"}}'
        for name, want in (
            ("placed_jobs", 4),
            ("refused_jobs", 1),
            ("cycle_failures", 0),
            ("plan_refusals", 0),
        ):
            prom.wait_for(
                f"coshare_trigger_{name}_total{selector}",
                lambda v, want=want: list(v.values()) == [want],
            )  # type: ignore[misc]
        prom.wait_for(
            f'coshare_trigger_edits_total{{result="written",job="{job}"}}',
            lambda v: list(v.values()) == [4],
        )
        # the one that placed them, and later ones (a scrape may still see only the first)
        cycles = prom.wait_for(
            f"coshare_trigger_cycles_total{selector}", lambda v: bool(v) and min(v.values()) >= 2
        )
        assert min(cycles.values()) >= 2
        status = prom.wait_for(f"coshare_cycle_exit_status{selector}", lambda v: bool(v))
        assert list(status.values()) == [0]
        phases = prom.wait_for(f"coshare_cycle_phase_seconds{selector}", lambda v: len(v) == 4)
        assert {dict(k)["phase"] for k in phases} == {"read", "plan", "verify", "apply"}
        waiting = prom.wait_for(f"coshare_cycle_waiting_jobs{selector}", lambda v: len(v) >= 7)
        assert {dict(k)["reason"] for k in waiting} >= {"no_room", "never_fits", "scheduler"}


def test_the_master_restarts_the_trigger_and_reconfig_reloads_it(
    triggered: tuple[Pool, Prometheus],
) -> None:
    first = trigger_pids()[-1]
    os.kill(first, signal.SIGKILL)  # the daemon the master started for this test
    wait_for(lambda: trigger_pids()[-1] != first, 60, "the master to restart the trigger")
    second = trigger_pids()[-1]
    os.kill(second, 0)
    assert f"The COSHARE_TRIGGER (pid {first}) died due to signal 9" in MASTER_LOG.read_text()
    pool("exec", "condor_reconfig")
    wait_for(
        lambda: f"(pid:{second}) INFO SIGHUP: reloading the configuration" in LOG.read_text(),
        30,
        "the trigger to reload on condor_reconfig",
    )
