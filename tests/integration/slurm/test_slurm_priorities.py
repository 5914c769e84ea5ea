"""Slurm's own order and limits, on the real cluster (multifactor priority with weights,
slurmdbd, ``AccountingStorageEnforce=limits,qos``; accounts ``large`` (30 shares) and
``small`` (10), QOS ``gpu2`` with ``MaxTRESPerUser=gres/gpu=2``: deploy/slurm/local-cluster).

- The priority coshare computes for a held job is the one Slurm gives the same job unheld.
- Of two accounts' jobs submitted interleaved, the one with the larger share and less usage
  is placed first, as Slurm alone would start them.
- A job over its QOS' GRES limit is never placed and says which limit and its numbers.

The partition is down while they run: placed jobs stay queued, holding their placements,
so nothing starts and no job's run time enters a test.
"""

from __future__ import annotations

import time

import pytest

from slurm_addon.placement import parse_placement

from .cluster import BIN, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

DEVICE_JOB = "coshare: device-memory=8000 device-threads=60"


def fairshare(cluster: Cluster) -> dict[tuple[str, str], float]:
    out = cluster.run("sshare", "-a", "-n", "-P", "-o", "Account,User,FairShare").stdout
    rows = (line.split("|") for line in out.splitlines())
    return {(a.strip(), u.strip()): float(f) for a, u, f in rows if u.strip() and f.strip()}


def give_usage_to_small(cluster: Cluster) -> None:
    """Run a job in account ``small`` and wait until Slurm's fair share ranks ``large``'s
    root above ``small``'s (the factors are recomputed every PriorityCalcPeriod, a minute)."""
    cluster.run(
        "sbatch",
        "--parsable",
        "--account=small",
        "-c",
        "2",
        "--output=/dev/null",
        "--chdir=/tmp",
        "--wrap=sleep 1",
    )
    deadline = time.monotonic() + 150
    while True:
        shares = fairshare(cluster)
        if shares.get(("large", "root"), 0) > shares.get(("small", "root"), 1):
            return
        assert time.monotonic() < deadline, f"fair share never favoured large: {shares}"
        time.sleep(1)


def test_the_computed_priority_of_a_held_job_is_the_one_slurm_gives_it_unheld(
    cluster: Cluster,
) -> None:
    from coshare.config import load_config

    from slurm_addon.client import SlurmClient
    from slurm_addon.priority import job_priority
    from slurm_addon.scheduling import read_scheduling

    # Not yet eligible (--begin): Slurm computes their priority (age 0) and does not start them.
    ids = {}
    for account, qos in (("large", "normal"), ("small", "urgent"), ("root", "gpu2")):
        ids[account] = cluster.run(
            "sbatch",
            "--parsable",
            f"--account={account}",
            f"--qos={qos}",
            "--begin=now+3600",
            "--output=/dev/null",
            "--chdir=/tmp",
            "--wrap=sleep 1",
        ).stdout.strip()
    config = load_config(cluster.config, environ={})
    client = SlurmClient(config.slurm)
    nodes = client.read_nodes()
    scheduling = read_scheduling(
        client, order="scheduler", nodes=len(nodes), cpus=sum(n.cpus for n in nodes)
    )
    assert scheduling.factors is not None, scheduling.notes
    jobs = cluster.jobs()
    for account, job_id in ids.items():
        job = jobs[job_id]
        assert job.priority > 1, job
        computed = job_priority(job, scheduling.factors, time.time())
        # sshare prints the fair-share factor to 6 decimals: at weight 100000, one unit
        assert abs(computed - job.priority) <= 1, (account, computed, job.priority)


def test_the_account_with_the_larger_share_and_less_usage_is_placed_first(
    cluster: Cluster,
) -> None:
    give_usage_to_small(cluster)
    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")
    small, large = [], []
    for i in range(6):  # interleaved, small's first: by submit time small would go first
        small.append(
            cluster.submit(f"fs-small-{i}", comment=DEVICE_JOB, extra="#SBATCH --account=small")
        )
        large.append(
            cluster.submit(f"fs-large-{i}", comment=DEVICE_JOB, extra="#SBATCH --account=large")
        )
    result = cluster.cycle()
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = cluster.jobs()
    placed = {j for j in small + large if parse_placement(jobs[j].admin_comment) is not None}
    # 8 devices, one job each: every large job, and two of small's (by submit time alone,
    # four of each)
    assert set(large) <= placed and len(placed & set(small)) == 2, (placed, small, large)


def test_a_job_over_its_qos_gres_limit_is_never_placed_and_says_why(cluster: Cluster) -> None:
    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")
    extra = "#SBATCH --qos=gpu2\n#SBATCH --gres=gpu:1"
    ids = [cluster.submit(f"gres-{i}", comment=DEVICE_JOB, extra=extra) for i in range(3)]
    reason = "QOS gpu2 MaxTRESPerUser gres/gpu=2: user root holds 2 (max 2); this job needs 1"
    for _ in range(2):  # the second cycle counts the placed jobs as holding the limit
        result = cluster.cycle()
        assert result.returncode == 0, result.stdout + result.stderr
        jobs = cluster.jobs()
        assert parse_placement(jobs[ids[0]].admin_comment) is not None
        assert parse_placement(jobs[ids[1]].admin_comment) is not None
        assert jobs[ids[2]].held and parse_placement(jobs[ids[2]].admin_comment) is None
        assert reason in jobs[ids[2]].admin_comment, jobs[ids[2]].admin_comment
    explained = cluster.run(
        str(BIN / "coshare"), "--config", str(cluster.config), "slurm", "explain", ids[2]
    ).stdout
    assert reason in " ".join(explained.split())
