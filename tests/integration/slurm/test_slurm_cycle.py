"""The Slurm add-on end to end on the real local cluster: a few dozen annotated jobs of mixed
sizes and some ordinary ones, cycles run as cron would until everything finished, then
Slurm's own records (sacct, squeue) are checked."""

from __future__ import annotations

import pytest

from .cluster import BIN, Cluster, check_never_oversubscribed, check_ran_where_placed

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

#: Device memory (MiB) and threads in the spirit of the paper's Table I (KM, MC, MD, SG, ...).
SIZES = [
    (1250, 60),
    (650, 180),
    (750, 180),
    (3400, 60),
    (1250, 240),
    (1850, 180),
    (1250, 180),
    (500, 60),
]


def test_annotated_jobs_share_devices_within_limits(cluster: Cluster) -> None:
    demands: dict[str, tuple[int, int]] = {}
    for i in range(32):
        memory, threads = SIZES[i % len(SIZES)]
        comment = f"coshare: device-memory={memory} device-threads={threads}"
        job = cluster.submit(f"e2e-{i}", comment=comment, sleep_s=2 + i % 3)
        demands[job] = (memory, threads)
    plain = [cluster.submit(f"plain-{i}", comment=None, sleep_s=1) for i in range(6)]

    queued = cluster.jobs()
    # The job_submit plugin holds annotated jobs at once; ordinary ones are left alone.
    assert all(queued[j].held for j in demands if queued[j].phase == "pending")
    assert all(queued[j].phase == "ended" or not queued[j].held for j in plain)

    statuses = cluster.run_cycles_until_done([*demands, *plain])
    assert statuses and set(statuses) == {0}

    records = cluster.sacct(list(demands))
    check_ran_where_placed(cluster, records)
    most = check_never_oversubscribed(list(records.values()), demands)
    assert max(most.values()) >= 2, "no device was ever shared"

    after = cluster.jobs()
    plain_records = cluster.sacct(plain)
    for j in plain:
        assert plain_records[j].state == "COMPLETED"
        assert after[j].admin_comment == "" and after[j].required_nodes == ""
        assert cluster.output(j).startswith("node=csl-n") and "devices=unset" in cluster.output(j)


def test_show_lists_devices_and_waiting_jobs(cluster: Cluster) -> None:
    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")
    big = cluster.submit("show-big", comment="coshare: device-memory=8000 device-threads=60")
    cluster.submit("show-small", comment="coshare: device-memory=1000 device-threads=60")
    bad = cluster.submit("show-bad", comment="coshare: device-memory=lots device-threads=60")
    assert cluster.cycle().returncode == 0
    cluster.submit("show-next", comment="coshare: device-memory=500 device-threads=60")
    out = cluster.run(str(BIN / "coshare"), "--config", str(cluster.config), "slurm", "show").stdout
    flat = " ".join(out.split())
    assert "csl-n1 0 fakephi" in flat and "csl-n4 1 fakephi" in flat
    assert big in flat and "8000/8192" in flat
    assert "placed on csl-n" in flat and "by the next cycle" in flat
    assert f"{bad} refused: job {bad}: device-memory='lots' is not a number" in flat


def test_a_policy_that_crashes_on_one_job_still_places_every_other_job(cluster: Cluster) -> None:
    from coshare.config import load_config
    from coshare.cycle.run import run_cycle
    from coshare.policies import make_policy

    from slurm_addon.adapter import open_adapter
    from tests.faulty_policies import CrashesOnJob

    # The partition is down: placed jobs stay queued, holding their placements.
    cluster.run("scontrol", "update", "PartitionName=main", "State=DOWN")
    ids = [
        cluster.submit(f"contain-{i}", comment="coshare: device-memory=1G device-threads=60")
        for i in range(4)
    ]
    bad = ids[2]
    adapter = open_adapter(load_config(cluster.config, environ={}))
    report = run_cycle(adapter, CrashesOnJob(make_policy("knapsack"), bad), adapter)
    assert report.exit_status == 0
    assert sorted(report.apply.applied) == sorted(set(ids) - {bad})
    assert [c.jobs for c in report.contained] == [(bad,)]
    jobs = cluster.jobs()
    for job_id in set(ids) - {bad}:
        assert jobs[job_id].admin_comment.startswith("coshare-placement;v=1;"), jobs[job_id]
    assert jobs[bad].held
    shown = cluster.run(
        "squeue", "--noheader", "--jobs", bad, "-O", "admin_comment:300"
    ).stdout.strip()
    assert shown.startswith(
        "coshare-waiting: policy_failed: the knapsack policy failed while "
        "planning this job (IndexError: index 0 is out of bounds"
    ), shown
