"""Multi-node (gang) jobs on the real cluster: an ``sbatch -N 3 --ntasks-per-node=2``
job whose ``srun`` tasks report, from every node, the node and devices coshare planned for
that node (each node's Prolog made its group, each task's TaskProlog joined it), running next
to single-node jobs that share those very devices; and a cycle SIGKILLed between a gang's
write and its release, after which the next cycles complete it, never leaving it half-placed.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest

from slurm_addon.allocation import parse_node_allocation
from slurm_addon.jobs import expand_nodes
from slurm_addon.placement import Placement, parse_placement

from .cluster import DEVICE_MEMORY_MIB, Cluster, Record
from .test_slurm_faults import assert_nothing_unplaced_can_run, faulty_cycle

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

GANG_MEMORY, SINGLE_MEMORY = 3000, 5000  # a single fits beside the gang on a device, not
THREADS = 60  # beside another single (5000 + 5000 > 8192)


def submit_gang(
    cluster: Cluster, name: str, sleep_s: float = 6, shape: str = "-N 3 --ntasks-per-node=2"
) -> str:
    """A 3-node job (2 tasks per node unless ``shape`` says otherwise), each task printing
    where it runs and its devices."""
    report = 'echo "task=$SLURM_PROCID node=$SLURMD_NODENAME devices=${CUDA_VISIBLE_DEVICES-unset}"'
    path = cluster.out / f"{name}.sh"
    path.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                f"#SBATCH --job-name={name}",
                f"#SBATCH --output={cluster.out}/%j.out",
                f"#SBATCH {shape}",
                '#SBATCH --comment="coshare: '
                f'device-memory={GANG_MEMORY} device-threads={THREADS}"',
                f"srun sh -c '{report}; sleep {sleep_s}'",
            ]
        )
        + "\n"
    )
    return cluster.run("sbatch", "--parsable", str(path)).stdout.strip().split(";")[0]


def submit_singles(cluster: Cluster, tag: str, count: int, sleep_s: float = 12) -> list[str]:
    comment = f"coshare: device-memory={SINGLE_MEMORY} device-threads={THREADS}"
    return [cluster.submit(f"{tag}-{i}", comment=comment, sleep_s=sleep_s) for i in range(count)]


def gang_placement(record: Record) -> Placement:
    placement = parse_placement(record.admin_comment)
    assert placement is not None and placement.parts, record
    return placement


def check_gang_ran_as_placed(cluster: Cluster, gang: str, record: Record) -> Placement:
    """Every task reported the node and devices of its node's part; Slurm ran the job on
    exactly the placement's nodes, with each part's processes there (for an uneven split,
    the same shares, laid out in Slurm's node order)."""
    placement = gang_placement(record)
    assert record.state == "COMPLETED", record
    # Where it ran is read from its tasks, not from sacct's NodeList: in one full run
    # slurmdbd recorded only the batch host (csl-n1) for a 3-second gang that scontrol had
    # shown allocated on all three nodes, and whose tasks reported all three.
    lines = [line for line in cluster.output(gang).splitlines() if line.startswith("task=")]
    assert len(lines) == sum(p.processes for p in placement.parts), lines
    seen: Counter[tuple[str, str]] = Counter()
    for line in lines:
        fields = dict(part.split("=", 1) for part in line.split())
        seen[(fields["node"], fields["devices"])] += 1
    devices = {p.node: ",".join(p.devices) for p in placement.parts}
    assert all(devices.get(node) == device for node, device in seen), (seen, placement)
    assert sorted({node for node, _ in seen}) == sorted(placement.nodes), (seen, record)
    counts = [p.processes for p in placement.parts]
    if len(set(counts)) == 1:
        assert seen == Counter({(p.node, devices[p.node]): p.processes for p in placement.parts})
    else:
        assert sorted(seen.values()) == sorted(counts), (seen, placement)
    return placement


def check_devices_shared_and_never_oversubscribed(
    records: dict[str, Record], memory: dict[str, int]
) -> dict[tuple[str, str], set[str]]:
    """Sweep each device's [start, end) intervals, a gang counted on each of its nodes; fail
    when the jobs on it ever declared more memory than it has. Returns, per device, the jobs
    seen on it together with another."""
    events: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for job, r in records.items():
        placement = parse_placement(r.admin_comment)
        assert placement is not None, r
        for part in placement.parts or (placement,):
            node = part.node
            for device in part.devices:
                events[(node, device)] += [(r.start_s, 1, job), (r.end_s, -1, job)]
    together: dict[tuple[str, str], set[str]] = defaultdict(set)
    for key, items in events.items():
        active: set[str] = set()
        for _, kind, job in sorted(items, key=lambda e: (e[0], e[1])):
            if kind < 0:
                active.discard(job)
                continue
            active.add(job)
            used = sum(memory[j] for j in active)
            assert used <= DEVICE_MEMORY_MIB, f"{key}: {sorted(active)} use {used} MiB"
            if len(active) > 1:
                together[key] |= active
    return together


def test_a_three_node_job_runs_where_planned_beside_single_jobs_on_its_devices(
    cluster: Cluster,
) -> None:
    gang = submit_gang(cluster, "gang")
    singles = submit_singles(cluster, "beside", 8)
    result = cluster.cycle("-v")
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = cluster.jobs()
    # One cycle placed all nine: the gang's three devices each take one single beside it
    # (3000 + 5000 MiB), the five free devices one single each.
    for job in [gang, *singles]:
        assert not jobs[job].held and jobs[job].admin_comment.startswith("coshare-placement"), (
            jobs[job],
            result.stdout,
        )
    cluster.run_cycles_until_done([gang, *singles])
    records = cluster.sacct([gang, *singles])
    placement = check_gang_ran_as_placed(cluster, gang, records[gang])
    assert len(placement.nodes) == 3 and all(len(p.devices) == 1 for p in placement.parts)
    memory = {gang: GANG_MEMORY} | {s: SINGLE_MEMORY for s in singles}
    together = check_devices_shared_and_never_oversubscribed(records, memory)
    shared = {key for key, jobs_on in together.items() if gang in jobs_on}
    # every device of the gang ran a single-node job at the same time as the gang
    assert shared == {(p.node, p.devices[0]) for p in placement.parts}, together
    for single in singles:
        assert records[single].state == "COMPLETED", records[single]


def test_an_uneven_gang_gets_its_largest_share_of_cpus_on_every_node(cluster: Cluster) -> None:
    # -N 3 -n 5: planned 2, 2 and 1 tasks; written with MinCPUsNode=2 (and no TasksPerNode),
    # Slurm allocates 2 CPUs on each node, as the ledger counts it, and srun lays the 5 tasks
    # out 2, 2, 1 over the placement's nodes, each seeing its node's device.
    gang = submit_gang(cluster, "uneven-gang", sleep_s=2, shape="-N 3 -n 5")
    result = cluster.cycle()
    assert result.returncode == 0, result.stdout + result.stderr
    detail = ""
    for _ in range(40):
        detail = cluster.run("scontrol", "show", "job", "-d", gang).stdout
        if "CPU_IDs=" in detail:
            break
        time.sleep(0.5)
    allocated = {
        node: parse_node_allocation(detail, node)
        for node in expand_nodes(cluster.jobs()[gang].required_nodes)
    }
    assert len(allocated) == 3 and all(a is not None and a.cpus == 2 for a in allocated.values()), (
        detail
    )
    cluster.run_cycles_until_done([gang])
    record = cluster.sacct([gang])[gang]
    placement = check_gang_ran_as_placed(cluster, gang, record)
    assert sorted(p.processes for p in placement.parts) == [1, 2, 2]


@pytest.mark.parametrize(
    "fault",
    [["--kill-before-release"], ["--kill-after-batch", "1"]],
    ids=["before-release", "after-first-batch"],
)
def test_a_gang_whose_cycle_is_sigkilled_mid_apply_is_completed_not_half_placed(
    cluster: Cluster, fault: list[str]
) -> None:
    gang = submit_gang(cluster, "killed-gang", sleep_s=2)
    singles = submit_singles(cluster, "killed-beside", 3, sleep_s=2)
    killed = faulty_cycle(cluster, *fault)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    jobs = cluster.jobs()
    assert_nothing_unplaced_can_run(cluster, [gang, *singles])
    written = jobs[gang]
    # Killed after the batch that held the gang's one update (update_batch 4: all four jobs)
    # and before any release: all three of its nodes are written, and it cannot start.
    assert written.held and written.phase == "pending", written
    placement = parse_placement(written.admin_comment)
    assert placement is not None and len(placement.parts) == 3, written
    assert sorted(expand_nodes(written.required_nodes)) == sorted(placement.nodes), written
    assert (written.node_count, written.max_nodes, written.tasks) == (3, 3, 6), written
    cluster.run_cycles_until_done([gang, *singles])
    records = cluster.sacct([gang, *singles])
    check_gang_ran_as_placed(cluster, gang, records[gang])
    memory = {gang: GANG_MEMORY} | {s: SINGLE_MEMORY for s in singles}
    check_devices_shared_and_never_oversubscribed(records, memory)
