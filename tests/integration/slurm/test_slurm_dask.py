"""A sweep on Dask worker jobs of the real Slurm cluster (dask-jobqueue's SLURMCluster): the
same results as local processes, and a worker job cancelled with scancel mid-sweep costs only
a retry of its run."""

from __future__ import annotations

import pytest

from tests.integration.sim_dask import reference, sweep_with_a_cancel

from .cluster import Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def test_sweep_on_slurm_worker_jobs_matches_local_and_survives_scancel(cluster: Cluster) -> None:
    logs = cluster.dir / "dask-logs"
    logs.mkdir(exist_ok=True)
    config = write_config(
        cluster,
        (
            "sim:\n  dask_cluster: slurm\n  executor: dask\n  scheduler_host: 127.0.0.1\n"
            f"  worker_memory_mib: 512\n  worker_timeout_s: 120\n  log_directory: {logs}\n"
        ),
    )

    def workers() -> list[str]:
        out = cluster.run("squeue", "-h", "-n", "coshare-dask", "-t", "R", "-o", "%i").stdout
        return out.split()

    cancelled: list[str] = []

    def cancel(job: str) -> None:
        cancelled.append(job)
        cluster.run("scancel", job)

    done = sweep_with_a_cancel(
        config, {"SLURM_CONF": str(cluster.dir / "slurm.conf")}, workers, cancel
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference()
    state = cluster.run("squeue", "-h", "-j", cancelled[0], "-o", "%T", check=False).stdout
    assert state.strip() in ("CANCELLED", ""), state  # it was really cancelled
    assert not workers()  # coshare cancelled its other worker job when it ended
