"""Lent cores on HTCondor (the collocate policy), on plain data: a lend slot
adds nothing to its node and a claim on it borrows a GPU job's cores; placements carry the GPU
job (``CoshareHarvestFrom``) before the gate opens; borrowers the plan requeues are vacated
with their gate closed before anything is placed; ``condor.lend_slots`` says whether a live
cycle applies any of it; the node daemon's START ``borrow=`` and ``lends=1`` parse strictly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from coshare.config import Config, load_config
from coshare.cycle.run import harvest_refusal
from coshare.errors import ConfigError
from coshare.ledger.book import Book
from coshare.model import Assignment, Job, Plan, Unplaced
from coshare.node.control.protocol import ControlProtocolError, format_start, parse_control
from coshare.node.jobs import JobRecord
from coshare.node.spec import JobSpec

from condor_addon import attributes as A
from condor_addon.adapter import CondorAdapter
from condor_addon.edits import Loans, plan_edits
from condor_addon.view import (
    QueueView,
    build_snapshot,
    current,
    local_lenders,
    parse_queue,
    parse_slots,
    read_job,
)

GPU_GLOBAL = "pool#12.0#1700000000"
CPU_GLOBAL = "pool#13.0#1700000001"
DEVICES = {
    A.DEVICE_IDS: ["0"],
    A.DEVICE_MEMORY: [8192],
    A.DEVICE_THREADS: [240],
    A.DEVICE_MODELS: ["phi-5110p"],
}


def slot(
    name: str, kind: str, state: str, cpus: int, memory: int, **extra: object
) -> dict[str, object]:
    ad: dict[str, object] = {
        "Name": f"{name}@node1",
        "SlotType": kind,
        "State": state,
        "Cpus": cpus,
        "Memory": memory,
        A.NODE_NAME: "node1",
        **DEVICES,
    }
    if kind != "Dynamic":
        ad |= {"TotalSlotCpus": cpus, "TotalSlotMemory": memory}
    ad.update(extra)
    return ad


def pool_slots(*, borrower: dict[str, object] | None = None) -> list[dict[str, object]]:
    """node1 of the test pool: 2 cores and 4096 MiB, a lend slot of 1 core and 1024 MiB (in the
    Owner state: its START is undefined without a job), the GPU job on both cores."""
    ads = [
        slot("slot1", "Partitionable", "Unclaimed", 0, 3996),
        slot("slot2", "Partitionable", "Owner", 1, 1024, **{A.LEND_SLOT: True}),
        slot(
            "slot1_1",
            "Dynamic",
            "Claimed",
            2,
            100,
            GlobalJobId=GPU_GLOBAL,
            **{
                A.MANAGED: True,
                A.PLACED_DEVICES: "0",
                "CoshareDeviceMemory": 1000,
                "CoshareDeviceThreads": 60,
            },
        ),
    ]
    ads[0] |= {"TotalSlotCpus": 2, "TotalSlotMemory": 4096}
    if borrower is not None:
        ads.append(borrower)
    return ads


BORROWER = slot(
    "slot2_1",
    "Dynamic",
    "Claimed",
    1,
    50,
    GlobalJobId=CPU_GLOBAL,
    **{A.MANAGED: True, A.LEND_SLOT: True, A.HARVEST_FROM: GPU_GLOBAL},
)


def test_a_lend_slot_adds_no_capacity_and_does_not_close_its_node() -> None:
    view = parse_slots(pool_slots(), {})
    [node] = view.nodes
    # The lend slot's core and memory are not the node's.
    assert (node.cpu_milli, node.memory_mib) == (2000, 4096)
    assert view.unusable == ()  # its Owner state says nothing of the node
    assert [(r.id, r.cpu_milli, r.harvest_from) for r in view.running] == [(GPU_GLOBAL, 2000, None)]


def test_a_claim_on_a_lend_slot_borrows_the_gpu_jobs_cores_named_as_the_snapshot_names_it() -> None:
    cluster = parse_slots(pool_slots(borrower=BORROWER), {})
    by_id = {r.id: r for r in cluster.running}
    assert by_id[CPU_GLOBAL].harvest_from == GPU_GLOBAL and by_id[CPU_GLOBAL].cpu_milli == 1000
    jobs = [
        read_job(
            {
                "ClusterId": 12,
                "ProcId": 0,
                "GlobalJobId": GPU_GLOBAL,
                "JobStatus": 2,
                A.MANAGED: True,
                "CoshareDeviceMemory": 1000,
                "CoshareDeviceThreads": 60,
                "CoshareWalltime": 40,
                "CoshareCopyBandwidth": 10,
            }
        ),
        read_job(
            {
                "ClusterId": 13,
                "ProcId": 0,
                "GlobalJobId": CPU_GLOBAL,
                "JobStatus": 2,
                A.MANAGED: True,
                "CoshareKind": "cpu",
                A.HARVEST_FROM: GPU_GLOBAL,
            }
        ),
    ]
    listed = local_lenders(j for j in jobs if j is not None)
    assert listed["13.0"].harvest_from == "12.0"  # this schedd's job, by its queue id
    queue = parse_queue(listed.values(), cluster, now_s=100.0, replan_after_s=300)
    snap = build_snapshot(cluster, queue, listed.values(), 100.0)
    by_id = {r.id: r for r in snap.running}
    assert by_id["13.0"].harvest_from == "12.0"
    # What collocate needs of the GPU job: its requested time and copy bandwidth.
    assert (by_id["12.0"].walltime_s, by_id["12.0"].copy_bw_mbps) == (40, 10)
    assert (by_id["13.0"].walltime_s, by_id["12.0"].harvest_from) == (None, None)


def test_an_unmanaged_claim_on_a_lend_slot_borrows_nothing() -> None:
    stray = {**BORROWER, A.MANAGED: None}
    [_, claim] = parse_slots(pool_slots(borrower=stray), {}).running
    assert claim.harvest_from is None and claim.cpu_milli == 1000


def test_a_placed_borrower_carries_its_gpu_job_and_a_change_of_it_is_a_change() -> None:
    q = read_job(
        {
            "ClusterId": 13,
            "ProcId": 0,
            "JobStatus": 1,
            A.MANAGED: True,
            A.PLACED_NODE: "node1",
            A.PLACED_AT: 5.0,
            A.HARVEST_FROM: GPU_GLOBAL,
            A.LENDER: True,
        }
    )
    assert q is not None and q.placed is not None and q.lender
    assert q.placed.harvest_from == GPU_GLOBAL
    other = replace(q, harvest_from="pool#14.0#1")
    assert current(other, q).changed is not None and current(q, q).changed is None


GPU_JOB = Job("12.0", 1000, 60, walltime_s=40.0, cpu_milli=2000)
CPU_JOB = Job("13.0", 0, 0, kind="cpu", device_count=0, cpu_milli=1000)
IDLE_CPU = read_job(
    {"ClusterId": 13, "ProcId": 0, "JobStatus": 1, A.MANAGED: True, "CoshareKind": "cpu"}
)
IDLE_GPU = read_job(
    {
        "ClusterId": 12,
        "ProcId": 0,
        "JobStatus": 1,
        A.MANAGED: True,
        "CoshareDeviceMemory": 1000,
        "CoshareDeviceThreads": 60,
        "CoshareWalltime": 40,
    }
)


def edits(plan: Plan, pending: Sequence[Job], loans: Loans | None):  # type: ignore[no-untyped-def]
    jobs = [j for j in (IDLE_CPU, IDLE_GPU) if j is not None and j.id in {p.id for p in pending}]
    return plan_edits(
        plan, Book(pending=tuple(pending)), (), {j.id: current(j, j) for j in jobs}, loans=loans
    )


def test_a_borrower_gets_its_gpu_jobs_global_id_and_a_lender_its_mark_before_the_gate() -> None:
    loans = Loans(True, {"12.0": GPU_GLOBAL})
    e = edits(
        Plan("collocate", assignments=(Assignment("13.0", "node1", harvest_from="12.0"),)),
        [CPU_JOB],
        loans,
    )
    assert e.harvest == ((GPU_GLOBAL, ("13.0",)),) and e.lenders == ()
    assert e.nodes == (("node1", ("13.0",)),)
    gpu = edits(
        Plan("collocate", assignments=(Assignment("12.0", "node1", ("0",)),)), [GPU_JOB], loans
    )
    assert gpu.lenders == ((True, ("12.0",)),) and gpu.harvest == ()
    # Without lend slots nothing of it is written; another policy's GPU job lends nothing.
    assert (
        edits(
            Plan("collocate", assignments=(Assignment("12.0", "node1", ("0",)),)),
            [GPU_JOB],
            Loans(False),
        ).lenders
        == ()
    )
    assert (
        edits(
            Plan("knapsack", assignments=(Assignment("12.0", "node1", ("0",)),)), [GPU_JOB], loans
        ).lenders
        == ()
    )
    assert (
        edits(
            Plan("collocate", assignments=(Assignment("12.0", "node1", ("0",)),)), [GPU_JOB], None
        ).lenders
        == ()
    )


def test_a_job_placed_again_without_a_loan_has_its_old_one_cleared() -> None:
    loans = Loans(True, {}, borrowing=frozenset({"13.0"}), lending=frozenset({"12.0"}))
    e = edits(
        Plan(
            "knapsack",
            assignments=(Assignment("13.0", "node1"), Assignment("12.0", "node1", ("0",))),
        ),
        [CPU_JOB, GPU_JOB],
        loans,
    )
    assert e.harvest == ((None, ("13.0",)),) and e.lenders == ((False, ("12.0",)),)


def config(**condor: object) -> Config:
    base = load_config(environ={})
    return replace(base, condor=replace(base.condor, **condor))  # type: ignore[arg-type]


def test_lend_slots_is_a_boolean_setting_off_by_default(tmp_path: object) -> None:
    assert load_config(environ={}).condor.lend_slots is False
    assert load_config(environ={"COSHARE_CONDOR_LEND_SLOTS": "true"}).condor.lend_slots is True
    with pytest.raises(ConfigError, match="lend_slots"):
        load_config(environ={"COSHARE_CONDOR_LEND_SLOTS": "sometimes"})


def test_a_live_cycle_applies_lent_cores_only_with_lend_slots() -> None:
    off = CondorAdapter(None, config())  # type: ignore[arg-type]
    assert harvest_refusal(off) is not None and "condor.lend_slots" in (harvest_refusal(off) or "")
    assert harvest_refusal(CondorAdapter(None, config(lend_slots=True))) is None  # type: ignore[arg-type]


class Schedd:
    """Stands in for the CondorClient: the queue holds nothing idle; edits and actions are
    recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def job_ads(self, constraint: str, projection: Sequence[str] = ()) -> list[dict[str, object]]:
        return [
            {
                "ClusterId": 13,
                "ProcId": 0,
                "JobStatus": 2,
                A.MANAGED: True,
                A.HARVEST_FROM: GPU_GLOBAL,
                A.PLACED_NODE: "node1",
            }
        ]

    def edit_ids(self, ids: Sequence[str], attribute: str, value: str) -> int:
        self.calls.append(("edit", ",".join(ids), attribute, value))
        return 1

    def edit_where(self, constraint: str, attribute: str, value: str) -> int:
        self.calls.append(("edit_where", attribute, value))
        return 1

    def act_where(self, action: str, constraint: str) -> None:
        self.calls.append(("act", action, constraint))


def test_a_requeued_borrower_is_vacated_with_its_gate_closed_before_anything_is_placed() -> None:
    schedd = Schedd()
    adapter = CondorAdapter(schedd, config(lend_slots=True))  # type: ignore[arg-type]
    adapter.queue = QueueView()
    why = "GPU job 12.0's load 1.9 fills the 1 cores it kept while lending 1"
    plan = Plan("collocate", requeue=(Unplaced("13.0", why, "no_room"),))
    report = adapter.apply(plan, (), dry_run=False)
    assert [o.job for o in report.requeued] == ["13.0"] and report.failed == ()
    clause = "(ClusterId == 13 && ProcId == 0)"
    assert schedd.calls[:4] == [
        ("edit", "13.0", A.PLACED_NODE, "undefined"),
        ("edit", "13.0", A.HARVEST_FROM, "undefined"),
        ("edit", "13.0", A.WAIT_REASON, f'"requeued: {why}"'),
        ("act", "VacateFast", clause),
    ]
    dry = CondorAdapter(Schedd(), config(lend_slots=True))  # type: ignore[arg-type]
    dry.queue = QueueView()
    assert [o.job for o in dry.apply(plan, (), dry_run=True).requeued] == ["13.0"]


def test_start_borrow_and_lends_parse_strictly() -> None:
    line = b"START job=cpu cores=1 memory_mib=50 borrow=gpu"
    request = parse_control(line)
    assert (request.borrow, request.cores, request.lends) == ("gpu", 1.0, False)
    assert format_start(request) == "START job=cpu cores=1 memory_mib=50 borrow=gpu"
    assert parse_control(b"START job=gpu cores=2 lends=1").lends is True
    for bad, says in [
        (b"START job=cpu borrow=gpu", "borrow= needs cores"),
        (b"START job=cpu cores=1 borrow=cpu", "names the job itself"),
        (b"START job=cpu cores=1 borrow=gpu devices=0", "CPU-only"),
        (b"START job=cpu cores=1 borrow=gpu lends=1", "CPU-only"),
        (b"START job=gpu lends=yes", "lends='yes'"),
        (b"START job=cpu cores=1 borrow=../x", "borrow:"),
    ]:
        with pytest.raises(ControlProtocolError, match=says):
            parse_control(bad)


def test_a_job_record_keeps_whether_it_lends_and_older_records_do_not() -> None:
    record = JobRecord(JobSpec("gpu", (0, 1)), "v1", "/sys/fs/cgroup", "coshare", lends=True)
    assert JobRecord.from_dict(record.to_dict()).lends is True
    old = record.to_dict()
    del old["lends"]
    assert JobRecord.from_dict(old).lends is False


def test_the_launcher_asks_for_the_loan_its_wrapper_names() -> None:
    import argparse

    from coshare.node.control import launcher

    base = {
        "job": "cpu",
        "cores": "1",
        "memory_mib": "",
        "devices": "",
        "device_memory": "",
        "device_threads": "",
    }
    line = launcher.start_line(argparse.Namespace(**base, borrow="pool_12.0_1", lends=False))
    assert parse_control(line.encode()).borrow == "pool_12.0_1"
    line = launcher.start_line(
        argparse.Namespace(**{**base, "job": "gpu"}, borrow=None, lends=True)
    )
    assert parse_control(line.encode()).lends is True
    parsed = launcher.parser().parse_args(
        ["run", "--socket", "s", "--job", "cpu", "--borrow=g", "--", "true"]
    )
    assert (parsed.borrow, parsed.lends) == ("g", False)
