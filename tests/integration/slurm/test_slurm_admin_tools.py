"""Slurm's own administration commands the guides tell an admin to run, on the real cluster:
``scontrol reconfigure`` (after changing slurm.conf's coshare lines, or taking them out when
uninstalling) and ``sdiag`` (the controller's scheduling cycle times: what Slurm 22.05 has in
place of ``sdiag --json``)."""

from __future__ import annotations

import time

from tests.integration.slurm.cluster import Cluster


def test_scontrol_reconfigure_reloads_the_controller_and_the_cycle_plans_on(
    cluster: Cluster,
) -> None:
    done = cluster.run("scontrol", "reconfigure")
    assert done.returncode == 0 and done.stdout.strip() == "", done
    deadline = time.monotonic() + 60
    while "is UP" not in cluster.run("scontrol", "ping", check=False).stdout:
        assert time.monotonic() < deadline, "slurmctld not answering after reconfigure"
        time.sleep(0.5)
    job = cluster.submit("after-reconfigure", comment="coshare: device-memory=1G device-threads=60")
    statuses = cluster.run_cycles_until_done([job], deadline_s=120)  # each cycle exits 0
    assert statuses, "the job ended before any cycle placed it"
    record = cluster.sacct([job])[job]
    assert record.state == "COMPLETED" and record.placement is not None, record


def test_sdiag_prints_the_scheduling_cycles_and_slurm_22_05_has_no_json(cluster: Cluster) -> None:
    shown = cluster.run("sdiag").stdout
    assert "Main schedule statistics (microseconds):" in shown, shown
    assert "Last cycle:" in shown and "Backfilling stats" in shown, shown
    refused = cluster.run("sdiag", "--json", check=False)
    assert refused.returncode != 0, refused
    assert "json" in (refused.stderr + refused.stdout).lower(), refused
