"""Two planners over the one local Slurm cluster, sharing its nodes through one PostgreSQL
engine (live): ``coshare slurm cycle`` for partition ``main`` and another
for partition ``second``, both over all four nodes, each with its own lock and planner
lease, run at the same moment cycle after cycle. Slurm's accounting (sacct) shows no device
ever held beyond its memory, and devices shared by jobs of both planners at once. A planner
SIGKILLed right after its first batch of placements leaves every job held or placed, its
claims stop counting once its lease expires, and both planners then finish every job."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml

from slurm_addon.placement import parse_placement
from tests.postgres import Postgres, running_postgres

from .cluster import (
    BIN,
    DEVICE_MEMORY_MIB,
    ROOT,
    Cluster,
    Record,
    check_never_oversubscribed,
    check_ran_where_placed,
)
from .test_slurm_faults import assert_nothing_unplaced_can_run

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.postgres]

PARTITIONS = ("main", "second")
#: Long enough for the killed cycle's claims to outlive the checks after the kill on a loaded
#: machine (at 10 s one full run found them expired before it could count them).
LEASE_S = 25.0
#: Sizes that let two or three jobs share an 8 GiB device, never four.
SIZES = [(2500, 60), (3000, 60), (3500, 60), (2000, 60)]


@pytest.fixture(scope="module")
def engine() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def planners(cluster: Cluster, engine: Postgres, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Partition ``second`` over all the nodes (removed afterwards), and one config per
    planner: its partition, its lock file, its lease in a fresh schema of the engine."""
    cluster.run(
        "scontrol", "create", "PartitionName=second", "Nodes=ALL", "MaxTime=INFINITE", "State=UP"
    )
    dsn = engine.new_database()
    configs = {}
    for part in PARTITIONS:
        config = yaml.safe_load(cluster.config.read_text())
        # workers 1: batches one after another, so a kill after the first leaves the others
        # unwritten (with several workers a loaded CI run wrote all 10 before the kill)
        config["slurm"].update(partition=part, lock_file=str(tmp_path / f"{part}.lock"), workers=1)
        # fence_every_s 0: the lease checked before every batch, so an engine stopped
        # after the first batch is found at the second (the default checks a quarter of
        # the lease after the last check: 6 s, longer than these cycles' writes)
        config["coordination"] = {
            "dsn": dsn,
            "domain": f"slurm-{part}",
            "instance": "head1",
            "lease_s": LEASE_S,
            "fence_every_s": 0,
        }
        configs[part] = tmp_path / f"{part}.yaml"
        configs[part].write_text(yaml.safe_dump(config))
    try:
        yield configs
    finally:
        cluster.run("scancel", "--quiet", "--partition=second", check=False)
        deadline = time.monotonic() + 60
        while (
            cluster.run(
                "squeue", "--noheader", "--partition=second", "--format=%i", check=False
            ).stdout.split()
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        cluster.run("scontrol", "delete", "PartitionName=second", check=False)


def submit(cluster: Cluster, part: str, count: int) -> dict[str, tuple[int, int]]:
    demands = {}
    for i in range(count):
        memory, threads = SIZES[(i + (part == "second")) % len(SIZES)]
        comment = f"coshare: device-memory={memory} device-threads={threads}"
        job = cluster.submit(
            f"{part}-{i}", comment=comment, sleep_s=3 + i % 2, extra=f"#SBATCH --partition={part}"
        )
        demands[job] = (memory, threads)
    return demands


def start_cycle(cluster: Cluster, config: Path, *extra: str) -> subprocess.Popen[str]:
    argv = (
        [
            sys.executable,
            "-m",
            "tests.integration.slurm.cycle_with_faults",
            "--config",
            str(config),
            *extra,
        ]
        if extra
        else [str(BIN / "coshare"), "--config", str(config), "slurm", "cycle"]
    )
    return subprocess.Popen(
        argv, cwd=ROOT, env=cluster.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def cycles_together(
    cluster: Cluster, configs: dict[str, Path], ids: list[str], deadline_s: float = 300
) -> list[str]:
    """Both planners' cycles started at once, again and again, until every job ended; their
    outputs."""
    outputs = []
    stop = time.monotonic() + deadline_s
    while True:
        jobs = cluster.jobs()
        left = [i for i in ids if i in jobs and jobs[i].phase != "ended"]
        if not left:
            return outputs
        assert time.monotonic() < stop, f"jobs not done: {left}"
        procs = [start_cycle(cluster, configs[p]) for p in PARTITIONS]
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, out + err
            outputs.append(out + err)
        time.sleep(0.5)


def run_all_and_check(
    cluster: Cluster,
    planners: dict[str, Path],
    demands: dict[str, tuple[int, int]],
    where: bool = True,
) -> tuple[dict[str, Record], dict[tuple[str, str], int]]:
    """Both planners' cycles until every job ended; none lost, each ran where it was placed
    (``where``: single-node jobs; a gang's nodes are read from its tasks), no device ever
    held more than it has. Slurm's records of the jobs, and the most jobs seen together on
    each device."""
    cycles_together(cluster, planners, list(demands))
    records = cluster.sacct(list(demands))
    assert set(records) == set(demands)  # none lost
    if where:
        check_ran_where_placed(cluster, records)
    return records, check_never_oversubscribed(list(records.values()), demands)


def shared_by_both(records: list[Record], mine: set[str]) -> int:
    """How many devices ran a job of each planner at the same time."""
    by_device: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        assert r.placement is not None
        for device in r.placement.devices:
            by_device.setdefault((r.node, device), []).append(r)
    both = 0
    for items in by_device.values():
        if any(
            a.job in mine and b.job not in mine and a.start_s < b.end_s and b.start_s < a.end_s
            for a in items
            for b in items
        ):
            both += 1
    return both


def live_claims(dsn: str, planner: str) -> dict[str, int]:
    """The planner's live claims: device memory claimed per device (``node/device``)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT unit, sum(memory_mib) FROM coshare_live_claims "
            "WHERE planner = %s GROUP BY unit",
            (planner,),
        ).fetchall()
    return {str(unit): int(mib) for unit, mib in rows}


def test_two_planners_never_book_a_device_beyond_its_memory(
    cluster: Cluster, planners: dict[str, Path]
) -> None:
    main = submit(cluster, "main", 12)
    second = submit(cluster, "second", 12)
    demands = {**main, **second}
    outputs = cycles_together(cluster, planners, list(demands))
    records = cluster.sacct(list(demands))
    check_ran_where_placed(cluster, records)
    most = check_never_oversubscribed(list(records.values()), demands)
    assert max(most.values()) >= 2, "no device was ever shared"
    assert shared_by_both(list(records.values()), set(main)) >= 1, (
        "no device ran jobs of both planners at once: the planners did not share the nodes"
    )
    # Neither planner held or refused the other's jobs.
    assert not any("is not managed by coshare" in out for out in outputs)
    lost = sum(out.count("lost their devices to another planner") for out in outputs)
    print(f"{len(outputs)} cycles; {lost} with jobs lost to the other planner's claims")


def test_a_planner_sigkilled_mid_cycle_leaves_the_queue_consistent(
    cluster: Cluster, planners: dict[str, Path]
) -> None:
    dsn = yaml.safe_load(planners["second"].read_text())["coordination"]["dsn"]
    second = submit(cluster, "second", 10)  # update_batch 4: the kill leaves 6 unwritten
    killed = start_cycle(cluster, planners["second"], "--kill-after-batch", "1")
    out, err = killed.communicate(timeout=300)
    killed_at = time.monotonic()
    assert killed.returncode == -9, out + err
    assert_nothing_unplaced_can_run(cluster, list(second))
    jobs = cluster.jobs()
    written = [j for j in second if jobs[j].admin_comment.startswith("coshare-placement")]
    assert written and len(written) < len(second), "the kill came before or after every write"
    # Its claims (the written jobs' and the unwritten ones') count until its lease expires:
    # the other planner's next cycle plans around them. Its written jobs are held, so
    # nothing but the claims keeps the other planner off those devices.
    claimed = live_claims(dsn, "slurm-second")
    assert sum(claimed.values()) > sum(second[j][0] for j in written)  # unwritten ones too
    main = submit(cluster, "main", 8)
    first = subprocess.run(
        [str(BIN / "coshare"), "--config", str(planners["main"]), "slurm", "cycle"],
        env=cluster.env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert time.monotonic() < killed_at + LEASE_S, "too slow: the claims expired meanwhile"
    jobs = cluster.jobs()
    placed = {j: parse_placement(jobs[j].admin_comment) for j in main}
    use = dict(claimed)
    for j, placement in placed.items():
        if placement is not None:
            for device in placement.devices:
                unit = f"{placement.node}/{device}"
                use[unit] = use.get(unit, 0) + main[j][0]
    assert any(p is not None for p in placed.values()), first.stdout + first.stderr
    assert max(use.values()) <= DEVICE_MEMORY_MIB, use
    time.sleep(max(0.0, killed_at + LEASE_S + 0.5 - time.monotonic()))
    assert live_claims(dsn, "slurm-second") == {}  # dead with the lease, nobody cleaned them
    run_all_and_check(cluster, planners, {**second, **main})


def test_the_engine_stopped_mid_cycle_and_restarted(
    cluster: Cluster, planners: dict[str, Path], engine: Postgres
) -> None:
    """The engine stops right after a planner's first batch of placements was written: the
    fence before its next batch finds no engine, so it stops there (that batch complete,
    nothing after it) and exits 1 naming the address; the other planner's cycle then finds
    no engine, writes nothing and exits 1 too; once the engine is started again both
    planners finish every job, none booked twice."""
    dsn = yaml.safe_load(planners["second"].read_text())["coordination"]["dsn"]
    second = submit(cluster, "second", 10)  # update_batch 4: three batches
    main = submit(cluster, "main", 6)
    try:
        stopped = start_cycle(
            cluster,
            planners["second"],
            "--stop-engine-after-batch",
            "1",
            "--engine",
            str(engine.dir),
        )
        out, err = stopped.communicate(timeout=300)
        assert not engine.running(), "the engine still runs"
        assert stopped.returncode == 1, out + err
        assert f"127.0.0.1:{engine.port}" in out + err and "unreachable" in out + err, out + err
        assert "stopped between two batches" in out + err, out + err
        assert_nothing_unplaced_can_run(cluster, list(second))
        jobs = cluster.jobs()
        written = [j for j in second if jobs[j].admin_comment.startswith("coshare-placement")]
        assert len(written) == 4, (written, out + err)  # the first batch only (workers 1)
        other = subprocess.run(
            [str(BIN / "coshare"), "--config", str(planners["main"]), "slurm", "cycle"],
            env=cluster.env,
            text=True,
            capture_output=True,
            timeout=300,
        )
        said = other.stdout + other.stderr
        assert other.returncode == 1, said
        assert f"127.0.0.1:{engine.port}" in said and "unreachable" in said, said
        jobs = cluster.jobs()
        assert not any(jobs[j].admin_comment.startswith("coshare-placement") for j in main)
        assert_nothing_unplaced_can_run(cluster, list(main))
    finally:
        if not engine.running():
            engine.start()
    # The claims written before the stop are still there (committed), for the lease's time.
    print(f"claims after the restart: {live_claims(dsn, 'slurm-second')}")
    run_all_and_check(cluster, planners, {**second, **main})


def test_gangs_of_both_planners_share_the_nodes_and_are_never_booked_twice(
    cluster: Cluster, planners: dict[str, Path]
) -> None:
    """Multi-node jobs of both planners at once:
    each needs devices on 2 or 3 of the 4 nodes the planners share, beside single-node jobs
    of the other planner; every part of every gang is claimed in the engine before it is
    written, so no device ever holds more than its memory, and every gang runs whole."""
    from .test_slurm_gangs import GANG_MEMORY, THREADS, submit_gang

    gangs = {
        submit_gang(cluster, "gang-main-0", shape="-N 3 --ntasks-per-node=1 --partition=main"),
        submit_gang(cluster, "gang-second-0", shape="-N 2 --ntasks-per-node=1 --partition=second"),
        submit_gang(cluster, "gang-main-1", shape="-N 2 --ntasks-per-node=1 --partition=main"),
        submit_gang(cluster, "gang-second-1", shape="-N 3 --ntasks-per-node=1 --partition=second"),
    }
    singles = {**submit(cluster, "main", 4), **submit(cluster, "second", 4)}
    demands = {**{g: (GANG_MEMORY, THREADS) for g in gangs}, **singles}
    records, most = run_all_and_check(cluster, planners, demands, where=False)
    for gang in gangs:
        placement = records[gang].placement
        assert records[gang].state == "COMPLETED" and placement is not None, records[gang]
        assert len(placement.parts) in (2, 3) and len(set(placement.nodes)) == len(placement.parts)
    assert max(most.values()) >= 2, "no device was ever shared"
