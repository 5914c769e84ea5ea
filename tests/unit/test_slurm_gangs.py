"""Multi-node (gang) jobs on Slurm: the ledger's rules for a gang's placement, and
how the Slurm adapter reads, writes and sets up one (``-N``, ``--ntasks``,
``--ntasks-per-node``). tests/contract/test_slurm_adapter.py runs the Editor's writes;
tests/integration/slurm/test_slurm_gangs.py runs a gang on the real cluster."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import DeviceKind, SlurmConfig
from coshare.cycle.verify import check_plan
from coshare.errors import AnnotationError
from coshare.ledger.book import (
    Current,
    Part,
    Placed,
    Queued,
    Shape,
    decide,
    held,
    pending_job,
    settle,
)
from coshare.model import Assignment, Device, Job, Node, Plan
from coshare.policies import make_policy

from slurm_addon import prolog
from slurm_addon.allocation import Allocation, parse_node_allocation
from slurm_addon.client import SlurmClient
from slurm_addon.jobs import SlurmJob, parse_squeue_json
from slurm_addon.nodes import GresEntry, SlurmNode
from slurm_addon.placement import Placement, PlacementError, format_placement, parse_placement
from slurm_addon.scontrol import UnsafeValue, update_line
from slurm_addon.view import build_view

from ..contract.slurm_recorder import Recorder, ok
from .test_slurm_prolog import RECORD, node_config_file

NOW = 1_800_000_000.0
NODES = [
    Node(f"n{i}", 8000, 16384, (Device("0", 8192, 240), Device("1", 8192, 240))) for i in (1, 2, 3)
]
GANG = Shape(nodes=3, processes=5, processes_per_node=2, source="sbatch -N")
ANNOTATIONS = {"device-memory": "1G", "device-threads": "60"}


def gang_parts() -> tuple[Part, ...]:
    return (Part("n1", ("0",), 2), Part("n2", ("1",), 2), Part("n3", ("0",), 1))


# -- the ledger ----------------------------------------------------------------------------


def test_the_schedulers_request_is_the_gangs_shape() -> None:
    job = pending_job(
        Queued("7", ANNOTATIONS, cpu_milli=5000, memory_mib=5 * 300, shape=GANG), None, gangs=True
    )
    assert (job.nodes, job.nodes_max, job.processes, job.processes_per_node) == (3, None, 5, 2)
    assert (job.cpu_milli, job.memory_mib) == (1000, 300)  # per process
    # An adapter that does not place gangs refuses them, naming the key.
    with pytest.raises(AnnotationError, match=r"CoshareNodes.*not yet placed"):
        pending_job(Queued("7", ANNOTATIONS, shape=GANG), None)


def test_an_annotation_that_contradicts_the_request_is_refused_naming_the_key() -> None:
    with pytest.raises(AnnotationError, match=r"nodes='2'.*allowed: 3, as sbatch -N asks"):
        pending_job(Queued("7", {**ANNOTATIONS, "nodes": "2"}, shape=GANG), None, gangs=True)
    single = Shape(source="sbatch -N")
    # a gang's keys on a job that asks for one node: the scheduler would start it on one
    with pytest.raises(AnnotationError, match=r"nodes-max='4'.*allowed: 1"):
        pending_job(Queued("8", {**ANNOTATIONS, "nodes-max": "4"}, shape=single), None, gangs=True)
    # agreeing keys are fine; a single-node job's own processes still divide its request
    same = pending_job(Queued("9", {**ANNOTATIONS, "nodes": "3"}, shape=GANG), None, gangs=True)
    assert same.nodes == 3
    shares = pending_job(
        Queued("10", {**ANNOTATIONS, "processes": "4"}, cpu_milli=4000, shape=single),
        None,
        gangs=True,
    )
    assert (shares.processes, shares.cpu_milli) == (4, 1000)


def gang_queued(parts: tuple[Part, ...], at_s: float = NOW - 10, gate_open: bool = True) -> Queued:
    placed = Placed(parts[0].node, parts[0].devices, at_s, 1024, 60, parts)
    return Queued(
        "7",
        ANNOTATIONS,
        cpu_milli=5000,
        memory_mib=1500,
        placed=placed,
        gate_open=gate_open,
        shape=GANG,
    )


def test_a_placed_gang_holds_every_node_with_its_largest_share() -> None:
    book = settle([gang_queued(gang_parts())], NODES, now_s=NOW, replan_after_s=300, gangs=True)
    assert book.pending == () and book.to_close == {}
    # 2, 2 and 1 processes planned; Slurm lays the larger shares out in its own node order,
    # so each node counts 2 processes (never under-counted)
    assert [(r.node, r.devices, r.cpu_milli, r.memory_mib, r.state) for r in book.planned] == [
        ("n1", ("0",), 2000, 600, "planned"),
        ("n2", ("1",), 2000, 600, "planned"),
        ("n3", ("0",), 2000, 600, "planned"),
    ]


@pytest.mark.parametrize(
    "parts",
    [
        (Part("n1", ("0",), 2), Part("n2", ("1",), 2), Part("n9", ("0",), 1)),  # a node is gone
        (Part("n1", ("0",), 2), Part("n2", ("7",), 2), Part("n3", ("0",), 1)),  # a device is gone
        (Part("n1", ("0",), 3), Part("n2", ("1",), 1), Part("n3", ("0",), 1)),  # over per-node
        (Part("n1", ("0",), 3), Part("n2", ("1",), 2)),  # too few nodes
        (Part("n1", ("0",), 2), Part("n2", ("1",), 2), Part("n3", ("0",), 2)),  # 6 of 5
    ],
    ids=["node", "device", "per-node", "nodes", "processes"],
)
def test_a_gang_placement_that_no_longer_adds_up_is_planned_again_whole(
    parts: tuple[Part, ...],
) -> None:
    book = settle([gang_queued(parts)], NODES, now_s=NOW, replan_after_s=300, gangs=True)
    assert [j.id for j in book.pending] == ["7"] and book.planned == ()
    assert book.to_close == {"7": "placed where its node or devices cannot take it now"}


def test_a_held_gang_with_its_placement_counts_nowhere_and_is_planned_again() -> None:
    # What a cycle killed between the gang's write and its release leaves behind.
    book = settle(
        [gang_queued(gang_parts(), gate_open=False)],
        NODES,
        now_s=NOW,
        replan_after_s=300,
        gangs=True,
    )
    assert [j.id for j in book.pending] == ["7"] and book.planned == () and not book.to_close


def test_a_gang_is_one_write_with_all_its_parts_and_unchanged_when_kept() -> None:
    job = pending_job(Queued("7", ANNOTATIONS, cpu_milli=5000, shape=GANG), None, gangs=True)
    plan = Plan("x", tuple(Assignment("7", p.node, p.devices, p.processes) for p in gang_parts()))
    now = Current("7", "pending", pending=True, gate_open=False)
    d = decide(plan, {"7": job}, {}, [], {"7": now})
    [write] = d.writes
    assert (write.node, write.devices, write.parts) == ("n1", ("0",), gang_parts())
    placed = Placed("n1", ("0",), NOW, 1024, 60, tuple(reversed(gang_parts())))
    kept = decide(plan, {"7": job}, {}, [], {"7": Current("7", "pending", True, True, placed)})
    assert kept.unchanged == ("7",) and kept.writes == ()


# -- the placement and the update line -------------------------------------------------------


def test_a_gang_placement_round_trips_and_each_node_sees_its_part() -> None:
    placement = Placement("n1", ("0",), 5, 1024, 60, gang_parts())
    text = format_placement(placement)
    assert text.endswith(";parts=n1:2:0,n2:2:1,n3:1:0")
    assert parse_placement(text) == placement
    here = placement.on("n2")
    assert here is not None and (here.node, here.devices) == ("n2", ("1",))
    assert placement.on("n4") is None and placement.nodes == ("n1", "n2", "n3")
    # the kill reason the Epilog appends does not disturb the parts
    assert parse_placement(text + ";killed=over its memory") == placement


@pytest.mark.parametrize(
    "parts", ["n1:2:0,n1:1:1", "n1:0:0", "n1:x:0", "n1:2:0,n 2:1", "n2:2:0,n1:2:1", ""]
)
def test_damaged_gang_placements_raise(parts: str) -> None:
    with pytest.raises(PlacementError):
        parse_placement(
            f"coshare-placement;v=1;node=n1;devices=0;at=5;mem_mib=1;threads=1;parts={parts}"
        )


def test_a_gang_is_one_update_line_with_its_nodes_count_and_tasks() -> None:
    text = format_placement(Placement("n1", ("0",), 5, 1024, 60, gang_parts()))
    # uneven (2, 2, 1): no TasksPerNode (Slurm would start 6 tasks), 2 CPUs on every node
    line = update_line("7", "n1", text, nodes=("n1", "n2", "n3"), tasks=5, min_cpus_per_node=2)
    assert line == (
        "update JobId=7 ReqNodeList=n1,n2,n3 NumNodes=3-3 NumTasks=5 "
        f"MinCPUsNode=2 AdminComment={text}\n"
    )
    even = update_line(
        "7", "n1", text, nodes=("n1", "n2", "n3"), tasks=6, tasks_per_node=2, min_cpus_per_node=4
    )
    assert " NumTasks=6 TasksPerNode=2 MinCPUsNode=4 AdminComment=" in even
    with pytest.raises(UnsafeValue, match="node name"):
        update_line("7", "n1", text, nodes=("n1", "n2\nupdate"), tasks=5, min_cpus_per_node=2)
    wide = [f"node{i:04d}" for i in range(500)]
    with pytest.raises(UnsafeValue, match="more than scontrol reads"):
        update_line(
            "7",
            "node0000",
            "coshare-placement",
            nodes=wide,
            tasks=500,
            tasks_per_node=1,
            min_cpus_per_node=1,
        )


# -- reading Slurm -------------------------------------------------------------------------

KINDS = {"fakephi": DeviceKind(memory_mib=8192, threads=240)}


def slurm_node(name: str) -> SlurmNode:
    return SlurmNode(
        name,
        "idle",
        cpus=8,
        memory_mib=16384,
        gres=(GresEntry("gpu", "fakephi", 2),),
        partitions=("main",),
    )


def slurm_gang(**kw: object) -> SlurmJob:
    base: dict[str, object] = dict(
        phase="pending",
        state="PENDING",
        held=True,
        partition="main",
        comment="coshare: device-memory=1G device-threads=60",
        submit_time_s=NOW - 10,
        node_count=3,
        max_nodes=3,
        tasks=6,
        tasks_per_node=2,
        cpus=6,
        memory_mib=900,
    )
    base.update(kw)
    return SlurmJob("7", **base)  # type: ignore[arg-type]


def test_sbatch_N3_is_planned_on_three_nodes_and_verified() -> None:
    nodes = [slurm_node(f"csl-n{i}") for i in (1, 2, 3, 4)]
    view = build_view(nodes, [slurm_gang()], device_kinds=KINDS, now_s=NOW)
    [job] = view.snapshot.pending
    # --mem=900 is per node: 450 MiB for each of the 2 tasks a node runs
    assert (job.nodes, job.processes, job.processes_per_node, job.memory_mib) == (3, 6, 2, 450)
    plan = make_policy("sharepack").plan(view.snapshot)
    check_plan(view.snapshot, plan)
    assert len({a.node for a in plan.assignments}) == 3
    assert [a.processes for a in plan.assignments] == [2, 2, 2]


def test_a_released_gang_holds_its_nodes_and_a_running_one_its_devices_per_node() -> None:
    nodes = [slurm_node(f"csl-n{i}") for i in (1, 2, 3)]
    parts = (Part("csl-n1", ("0",), 2), Part("csl-n2", ("1",), 2), Part("csl-n3", ("0",), 2))
    text = format_placement(Placement("csl-n1", ("0",), int(NOW) - 5, 1024, 60, parts))
    placed = slurm_gang(held=False, admin_comment=text, required_nodes="csl-n[1-3]")
    view = build_view(nodes, [placed], device_kinds=KINDS, now_s=NOW)
    assert view.snapshot.pending == () and not view.to_close
    assert {(r.node, r.devices) for r in view.snapshot.running} == {
        ("csl-n1", ("0",)),
        ("csl-n2", ("1",)),
        ("csl-n3", ("0",)),
    }
    # ReqNodeList changed behind coshare's back: not counted as placed, held and planned again
    moved = slurm_gang(held=False, admin_comment=text, required_nodes="csl-n[1-2,4]")
    view = build_view(nodes, [moved], device_kinds=KINDS, now_s=NOW)
    assert [j.id for j in view.snapshot.pending] == ["7"] and "7" in view.to_close
    running = slurm_gang(
        phase="active",
        state="RUNNING",
        held=False,
        admin_comment=text,
        nodes=("csl-n1", "csl-n2", "csl-n3"),
    )
    view = build_view(nodes, [running], device_kinds=KINDS, now_s=NOW)
    assert {(r.node, r.devices, r.cpu_milli) for r in view.snapshot.running} == {
        ("csl-n1", ("0",), 2000),
        ("csl-n2", ("1",), 2000),
        ("csl-n3", ("0",), 2000),
    }


# -- the node side -------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm/22.05"


def test_each_node_reads_its_share_from_recorded_scontrol_show_job_d() -> None:
    # -N 3 --ntasks-per-node=2, and -N 3 -n 5 written as coshare writes an uneven split
    # (NumTasks=5 MinCPUsNode=2): Slurm allocated 2 CPUs and 512 MiB on each of the 3 nodes.
    for name in ("even", "uneven"):
        text = (FIXTURES / f"scontrol-show-job-detail-{name}.txt").read_text()
        for node in ("csl-n1", "csl-n2", "csl-n3"):
            assert parse_node_allocation(text, node) == Allocation(2, 512), (name, node)
        assert parse_node_allocation(text, "csl-n4") is None


def test_a_recorded_gang_update_is_taken_and_read_back_whole() -> None:
    # The one update line coshare writes, run against Slurm 22.05: no error, the job still
    # held, its node list, count and tasks as written; read back, it is planned again whole
    # (held: it counts nowhere), and once released it holds all three nodes.
    assert (FIXTURES / "scontrol-gang-update-errors.txt").read_text() == ""
    ids = dict(p.split("=") for p in (FIXTURES / "squeue-gang.ids").read_text().split())
    jobs = {j.id: j for j in parse_squeue_json((FIXTURES / "squeue-gang.json").read_text())}
    gang = jobs[ids["gang"]]
    assert gang.held and (gang.node_count, gang.max_nodes, gang.tasks, gang.tasks_per_node) == (
        3,
        3,
        6,
        2,
    )
    placement = parse_placement(gang.admin_comment)
    assert placement is not None and placement.nodes == ("csl-n1", "csl-n2", "csl-n3")
    nodes = [slurm_node(f"csl-n{i}") for i in (1, 2, 3, 4)]
    view = build_view(nodes, [gang], device_kinds=KINDS, now_s=NOW)
    assert [j.id for j in view.snapshot.pending] == [gang.id] and not view.snapshot.running
    released = replace(gang, held=False, priority=1000, reason="None")
    view = build_view(nodes, [released], device_kinds=KINDS, now_s=placement.at_s + 10.0)
    assert view.snapshot.pending == ()
    assert [(r.node, r.devices) for r in view.snapshot.running] == [
        ("csl-n1", ("0",)),
        ("csl-n2", ("1",)),
        ("csl-n3", ("0",)),
    ]


DETAIL = """JobId=7 JobName=gang
   NumNodes=3 NumCPUs=6 NumTasks=6 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=csl-n[1-2] CPU_IDs=0-1 Mem=600 GRES=
     Nodes=csl-n3 CPU_IDs=2,3 Mem=300 GRES=
   MinCPUsNode=2 MinMemoryNode=300M MinTmpDiskNode=0
"""


def test_each_node_reads_its_own_cores_and_memory_of_a_gang() -> None:
    assert parse_node_allocation(DETAIL, "csl-n2") == Allocation(2, 600)
    assert parse_node_allocation(DETAIL, "csl-n3") == Allocation(2, 300)
    assert parse_node_allocation(DETAIL, "csl-n4") is None


def test_the_prolog_of_each_node_makes_that_nodes_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    parts = (Part("csl-n1", ("0",), 2), Part("csl-n2", ("1",), 2), Part("csl-n3", ("0",), 2))
    placement = Placement("csl-n1", ("0",), 5, 1024, 60, parts)

    def answer(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        if argv[1:3] == ["show", "job"]:
            return ok(argv, DETAIL)
        return ok(argv, f"cpu=6,mem=1500M,node=3,billing=6|{format_placement(placement)}\n")

    client = SlurmClient(SlurmConfig(), runner=Recorder(answer), environ={})
    calls = []
    monkeypatch.setattr(prolog, "prolog_client", lambda environ: client)
    monkeypatch.setattr(prolog.node_hooks, "on_job_start", lambda *a: calls.append(a) or RECORD)
    monkeypatch.setenv("COSHARE_CONFIG", str(node_config_file(tmp_path)))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_UID", "1000")
    monkeypatch.setenv("SLURMD_NODENAME", "csl-n2")
    prolog.prolog_main()
    ((_, job, here, allocation, _),) = calls
    assert (job, here.node, here.devices, allocation) == ("7", "csl-n2", ("1",), Allocation(2, 600))
    lines, status = prolog.task_environment(placement, "csl-n3", "7")
    assert status == 0 and "export CUDA_VISIBLE_DEVICES=0" in lines
    lines, status = prolog.task_environment(placement, "csl-n4", "7")
    assert status == 1 and "placed on csl-n1,csl-n2,csl-n3 but starts on csl-n4" in lines[0]


def test_held_counts_a_single_node_job_as_before() -> None:
    job = Job("1", 1024, 60, cpu_milli=1000, processes=2)
    queued = Queued(
        "1", {}, cpu_milli=3000, placed=Placed("n1", ("0",), 1.0, 1024, 60), gate_open=True
    )
    [r] = held(queued, job)
    assert (r.node, r.cpu_milli) == ("n1", 3000)
