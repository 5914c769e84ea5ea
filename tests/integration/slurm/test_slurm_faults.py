"""Faults on the real cluster: the cycle SIGKILLed while it applies a plan, and slurmctld
stopped during a cycle. The queue is the ledger: the next cycles converge, no job is lost or
placed twice, and no device is ever oversubscribed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .cluster import ROOT, SCRIPT, Cluster, check_never_oversubscribed, check_ran_where_placed

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def faulty_cycle(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.slurm.cycle_with_faults",
            "--config",
            str(cluster.config),
            "--cluster",
            str(cluster.dir),
            *args,
        ],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def submit_batch(cluster: Cluster, tag: str, count: int) -> dict[str, tuple[int, int]]:
    demands = {}
    for i in range(count):
        memory, threads = (1000 + 250 * (i % 4), 60)
        comment = f"coshare: device-memory={memory} device-threads={threads}"
        demands[cluster.submit(f"{tag}-{i}", comment=comment, sleep_s=2)] = (memory, threads)
    return demands


def assert_nothing_unplaced_can_run(cluster: Cluster, ids: list[str]) -> None:
    """Each annotated job is held, or carries its placement (never released without one)."""
    jobs = cluster.jobs()
    for job_id in ids:
        job = jobs[job_id]
        assert job.held or job.admin_comment.startswith("coshare-placement"), job


def converge_and_check(cluster: Cluster, demands: dict[str, tuple[int, int]]) -> None:
    cluster.run_cycles_until_done(list(demands))
    records = cluster.sacct(list(demands))
    assert set(records) == set(demands)  # none lost; --allocations: one record per job
    check_ran_where_placed(cluster, records)
    check_never_oversubscribed(list(records.values()), demands)


@pytest.mark.parametrize(
    "fault",
    [["--kill-after-batch", "2"], ["--kill-before-release"]],
    ids=["after-second-batch", "before-release"],
)
def test_sigkill_while_applying_converges(cluster: Cluster, fault: list[str]) -> None:
    demands = submit_batch(cluster, "kill", 20)  # update_batch 4: five batches
    killed = faulty_cycle(cluster, *fault)
    assert killed.returncode == -9, killed.stderr
    jobs = cluster.jobs()
    written = [j for j in demands if jobs[j].admin_comment.startswith("coshare-placement")]
    assert written, "the kill came before any placement was written"
    assert_nothing_unplaced_can_run(cluster, list(demands))
    converge_and_check(cluster, demands)


def test_controller_stopped_during_a_cycle_then_recovers(cluster: Cluster) -> None:
    demands = submit_batch(cluster, "ctld", 8)
    try:
        # The read succeeds; slurmctld stops before the Editor's re-read.
        failed = faulty_cycle(cluster, "--stop-ctld-before-squeue", "2")
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "coshare: error: slurmctld is not answering" in failed.stderr
        assert "Traceback" not in failed.stderr
    finally:
        subprocess.run([str(SCRIPT), "start-ctld", str(cluster.dir)], check=True, timeout=120)
    assert_nothing_unplaced_can_run(cluster, list(demands))
    converge_and_check(cluster, demands)
