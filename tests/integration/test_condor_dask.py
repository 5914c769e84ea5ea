"""A sweep on Dask worker jobs of the real HTCondor pool (dask-jobqueue's HTCondorCluster):
the jobs run in the pool's Debian 13 chroot with its own Python (deploy/condor/pool dask puts
the workers' packages and coshare there); the same results as local processes, and a worker
job removed with condor_rm mid-sweep costs only a retry of its run."""

from __future__ import annotations

import os
import sys

import pytest

from tests.integration.condor_pool import CHROOT, Pool, pool
from tests.integration.sim_dask import reference, sweep_with_a_cancel

pytestmark = [pytest.mark.integration, pytest.mark.condor]


def test_sweep_on_condor_worker_jobs_matches_local_and_survives_condor_rm(live: Pool) -> None:
    host_bin = pool("dask", sys.executable).strip().splitlines()[-1]
    config = CHROOT / "pool" / "dask.yaml"

    def workers() -> list[str]:
        ads = live.client.job_ads(
            "DaskWorkerName =!= undefined && JobStatus == 2", ("ClusterId", "ProcId")
        )
        return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads]

    cancelled: list[str] = []

    def cancel(job: str) -> None:
        cancelled.append(job)
        pool("exec", "condor_rm", job)

    env = {"PATH": f"{host_bin}{os.pathsep}{os.environ['PATH']}"}
    done = sweep_with_a_cancel(config, env, workers, cancel)
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference()
    assert cancelled and cancelled[0] not in workers()
