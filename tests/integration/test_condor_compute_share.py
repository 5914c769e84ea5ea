"""A compute share on the real HTCondor pool (deploy/condor/pool): a submit file's
``+CoshareDeviceCompute = "50%"`` makes the job coshare's (the schedd's transform), it is
planned as half of a device's threads, two such jobs share a device and never three, and a
running one counts its share, not its whole device (the startd's STARTD_JOB_ATTRS carry it)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from coshare.ledger.annotations import compute_threads

from condor_addon.view import machine_of
from tests.integration.condor_pool import Pool

pytestmark = [pytest.mark.integration, pytest.mark.condor]

#: Every device of the test pool has 240 hardware threads.
THREADS = 240


def test_half_shares_pair_up_on_a_device_and_a_running_one_counts_its_share(live: Pool) -> None:
    cluster = live.submit(
        6, sleep_s=6, **{"+CoshareDeviceMemory": "1024", "+CoshareDeviceCompute": '"50%"'}
    )
    half = compute_threads(50, THREADS)
    seen_running: dict[str, int] = {}
    planned: dict[str, tuple[str, tuple[str, ...]]] = {}
    deadline = time.monotonic() + 300
    while live.jobs() and time.monotonic() < deadline:
        report = live.cycle()
        assert report.exit_status == 0, report.apply
        for job in report.snapshot.pending if report.snapshot else ():
            assert job.device_threads == half
        for r in report.snapshot.running if report.snapshot else ():
            if r.state == "running" and r.id.split(".")[0] == cluster:
                seen_running[r.id] = r.device_threads
        for a in report.plan.assignments:
            if a.job in report.apply.applied:
                planned[a.job] = (a.node, a.devices)
        time.sleep(1)
    assert not live.jobs(), "jobs still queued after 300 s"
    assert seen_running and set(seen_running.values()) == {half}, seen_running

    nodes = live.node_of_machine()
    spans: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for ad in live.history(cluster):
        job = f"{ad['ClusterId']}.{ad['ProcId']}"
        assert ad["ExitCode"] == 0
        node = nodes[machine_of(ad["LastRemoteHost"])]
        assert (node, tuple(ad["CosharePlacedDevices"].split(","))) == planned[job]
        start, end, _ = live.output(job).splitlines()[0].split()
        for device in planned[job][1]:
            spans[(node, device)].append((float(start), float(end)))
    for runs in spans.values():
        for start, _ in runs:
            assert sum(1 for s, e in runs if s <= start < e) * half <= THREADS
