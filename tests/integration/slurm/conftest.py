"""The real Slurm cluster for the integration tests: started once per session with
deploy/slurm/local-cluster (4 nodes x 2 fake devices, MariaDB + slurmdbd for sacct, coshare's
prolog programs from this virtual environment), stopped by pid files at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import BIN, SCRIPT, Cluster

#: How the tests start deploy/slurm/local-cluster (and the Slurm walk-through shows it).
START_OPTIONS = ["--nodes", "4", "--devices", "2", "--accounting"]


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.fail(
            "the Slurm integration tests start real daemons and need root "
            "(they install Slurm with apt-get); run them as root"
        )
    # Not under pytest's private tmp (mode 700): jobs of other users must reach the munge
    # socket and slurm.conf inside.
    directory = Path(tempfile.mkdtemp(prefix="coshare-slurm-", dir="/var/tmp"))
    directory.chmod(0o755)
    start = subprocess.run(
        [
            str(SCRIPT),
            "start",
            str(directory),
            *START_OPTIONS,
            "--coshare-bin",
            str(BIN),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if start.returncode != 0:
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=120)
        pytest.fail(f"local Slurm cluster did not start:\n{start.stderr}")
    base = (directory / "coshare.yaml").read_text()
    (directory / "test-coshare.yaml").write_text(
        base.replace(
            "slurm:\n", "slurm:\n  retry_attempts: 2\n  retry_wait_s: 0.2\n  update_batch: 4\n", 1
        )
        + "cycle: {replan_after_s: 120}\n"
    )
    cluster = Cluster(directory)
    try:
        yield cluster
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=180)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Iterator[Cluster]:
    """The session's cluster, with every job of the test cancelled afterwards, and gone
    from the queue before the next test: a cancelled job stays COMPLETING for a moment and
    holds its devices in the next test's first cycle."""
    yield slurm_cluster
    slurm_cluster.run("scancel", "--quiet", "--partition=main", check=False)
    slurm_cluster.run("scancel", "--quiet", "--partition=coshare-lend", check=False)
    slurm_cluster.run("scontrol", "update", "PartitionName=main", "State=UP", check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = slurm_cluster.run(
            "squeue", "--noheader", "--partition=main,coshare-lend", "--format=%i", check=False
        ).stdout.split()
        if not left:
            return
        time.sleep(0.5)
    pytest.fail(f"jobs still in the queue 60 s after scancel: {left}")


def write_config(cluster: Cluster, extra: str) -> Path:
    """A config of the test cluster with more settings (a YAML mapping's text)."""
    path = cluster.dir / "extra-coshare.yaml"
    path.write_text(cluster.config.read_text() + extra)
    return path
