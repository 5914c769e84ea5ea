"""One contract for both adapters: the same ledger situations, written once, run against the
HTCondor and the Slurm adapter's pure halves (view: records to snapshot; edits: plan to
writes) on records in the shape each scheduler recorded (tests/fixtures/), asserting the same
decisions.

Each situation describes jobs neutrally (:class:`Spec`); each adapter's half translates them
into its scheduler's records (HTCondor job and slot ads, Slurm ``squeue --json`` records),
reads them, plans with the knapsack policy, and decides the writes from the jobs as they are
at write time. The outcome is compared in neutral terms (job numbers, node and device ids).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import classad2
import pytest
from coshare.model import Assignment, DeviceKind, Plan, Snapshot
from coshare.policies import make_policy
from coshare.ports import Rejected

from condor_addon import view as condor_view
from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
from condor_addon.client import values_of
from slurm_addon.jobs import parse_job
from slurm_addon.nodes import parse_node
from slurm_addon.placement import Placement, format_placement, parse_placement
from slurm_addon.view import build_view
from tests.write_preview import condor_edits, slurm_edits

from .slurm_recorder import job_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOW = 1_800_000_000.0
REPLAN_AFTER_S = 300.0
#: Both clusters: two nodes of 8 cores and 16 GiB, each with two devices of a kind whose
#: name each scheduler spells differently from the configuration (ledger: kinds match
#: ignoring case, spaces, '-' and '_').
KINDS = {"fake-phi": DeviceKind(memory_mib=8192, threads=240)}
NODES = ("n1", "n2")


@dataclass(frozen=True)
class Spec:
    """One annotated job, neutrally.

    Attributes:
        id: the job number (HTCondor ``N.0``, Slurm ``N``).
        memory: its declared device memory (text: as the user wrote it).
        threads: its declared device threads.
        processes: its declared gang size, if any.
        nodes: the nodes its gang asks for, if any.
        cpus: the scheduler's host cores request (the job's total).
        host_memory_mib: the scheduler's host memory request (the job's total).
        placed: ``(node, device, at_s)`` recorded in the job, if any.
        gate_open: whether it could start (HTCondor: placed node set; Slurm: released).
        running_on: the node it runs on, once started.
    """

    id: int
    memory: int | str = 1024
    threads: int = 60
    processes: int | None = None
    nodes: int | None = None
    cpus: int = 1
    host_memory_mib: int = 256
    placed: tuple[str, str, float] | None = None
    gate_open: bool = False
    running_on: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a read and an apply decided, in neutral terms."""

    pending: tuple[int, ...]
    holding: dict[int, tuple[str, str, tuple[str, ...], int, int]]  # state, node, devices, ...
    rejected: tuple[int, ...]
    plan: tuple[tuple[int, str, tuple[str, ...]], ...]
    close: tuple[int, ...] = ()
    writes: tuple[tuple[int, str, tuple[str, ...]], ...] = ()
    unchanged: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    shares: dict[int, tuple[int, int]] = field(default_factory=dict)


class Half(Protocol):
    """An adapter's pure half, driven by neutral job specs."""

    name: str

    def read(self, jobs: list[Spec]) -> tuple[Snapshot, tuple[Rejected, ...]]: ...

    def decide(self, plan: Plan, now: list[Spec]) -> Outcome: ...

    def number(self, job_id: str) -> int: ...

    def job_id(self, number: int) -> str: ...


# -- HTCondor ------------------------------------------------------------------------------


def _condor_templates() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    slots = [
        values_of(ad, SLOT_PROJECTION)
        for ad in classad2.parseAds((FIXTURES / "condor/23.9.6/slots.ads").read_text())
    ]
    jobs = [
        values_of(ad, JOB_PROJECTION)
        for ad in classad2.parseAds((FIXTURES / "condor/23.9.6/jobs.ads").read_text())
    ]
    partitionable = next(s for s in slots if s.get("SlotType") == "Partitionable")
    claimed = next(s for s in slots if s.get("State") == "Claimed" and s.get("CoshareManaged"))
    idle = next(j for j in jobs if j.get("JobStatus") == 1)
    return partitionable, claimed, idle


class CondorHalf:
    name = "condor"

    def __init__(self) -> None:
        self.partitionable, self.claimed, self.idle = _condor_templates()
        self.queue: condor_view.QueueView | None = None
        self.seen: dict[str, condor_view.QueueJob] = {}

    def number(self, job_id: str) -> int:
        return int(job_id.split(".")[0])

    def job_id(self, number: int) -> str:
        return f"{number}.0"

    def _slots(self, jobs: list[Spec]) -> list[dict[str, object]]:
        devices = {
            "CoshareNodeDeviceIds": ["0", "1"],
            "CoshareNodeDeviceMemory": [0, 0],
            "CoshareNodeDeviceThreads": [0, 0],
            "CoshareNodeDeviceModels": ["Fake Phi", "FakePhi"],
        }
        slots: list[dict[str, object]] = [
            {
                **self.partitionable,
                "Name": f"slot1@{n}@vm",
                "CoshareNodeName": n,
                "TotalSlotCpus": 8,
                "TotalSlotMemory": 16384,
                **devices,
            }
            for n in NODES
        ]
        for s in jobs:
            if s.running_on is None:
                continue
            node, device, _ = s.placed or ("", "", 0)
            slots.append(
                {
                    **self.claimed,
                    "Name": f"slot1_{s.id}@{s.running_on}@vm",
                    "CoshareNodeName": s.running_on,
                    "GlobalJobId": f"vm#{s.id}.0#1",
                    "Cpus": s.cpus,
                    "Memory": s.host_memory_mib,
                    "CosharePlacedNode": node,
                    "CosharePlacedDevices": device,
                    "CoshareDeviceMemory": s.memory,
                    "CoshareDeviceThreads": s.threads,
                    **devices,
                }
            )
        return slots

    def _job(self, s: Spec) -> condor_view.QueueJob:
        ad: dict[str, object] = {
            **self.idle,
            "ClusterId": s.id,
            "ProcId": 0,
            "GlobalJobId": f"vm#{s.id}.0#1",
            "JobStatus": 2 if s.running_on else 1,
            "RequestCpus": s.cpus,
            "RequestMemory": s.host_memory_mib,
            "QDate": NOW - 100 + s.id,
            "CoshareDeviceMemory": s.memory,
            "CoshareDeviceThreads": s.threads,
        }
        if s.processes is not None:
            ad["CoshareProcesses"] = s.processes
        if s.nodes is not None:
            ad["CoshareNodes"] = s.nodes
        if s.running_on:
            ad["RemoteHost"] = f"slot1_{s.id}@{s.running_on}@vm"
        if s.placed is not None:
            node, device, at = s.placed
            ad.update(CosharePlacedAt=at, CosharePlacedDevices=device)
            if s.gate_open:  # the node, written last, opens the gate
                ad["CosharePlacedNode"] = node
        job = condor_view.read_job(ad)
        assert job is not None
        return job

    def read(self, jobs: list[Spec]) -> tuple[Snapshot, tuple[Rejected, ...]]:
        cluster = condor_view.parse_slots(self._slots(jobs), KINDS)
        queued = [self._job(s) for s in jobs]
        self.queue = condor_view.parse_queue(
            queued, cluster, now_s=NOW, replan_after_s=REPLAN_AFTER_S
        )
        self.seen = {q.id: q for q in queued}
        snapshot = condor_view.build_snapshot(cluster, self.queue, queued, NOW)
        return snapshot, self.queue.rejected

    def decide(self, plan: Plan, now: list[Spec]) -> Outcome:
        assert self.queue is not None
        current = {
            q.id: condor_view.current(q, self.seen.get(q.id)) for q in (self._job(s) for s in now)
        }
        d = condor_edits(plan, self.queue.book, self.queue.rejected, current).decisions
        return _decided(
            self,
            d.close,
            [(w.job, w.node, w.devices) for w in d.writes],
            d.unchanged,
            d.skipped,
            d.refuse,
        )


# -- Slurm ---------------------------------------------------------------------------------


class SlurmHalf:
    name = "slurm"

    def __init__(self) -> None:
        data = json.loads((FIXTURES / "slurm/22.05/sinfo-drain-down.json").read_text())
        self.node_template = data["nodes"][0]
        self.view: Any = None

    def number(self, job_id: str) -> int:
        return int(job_id)

    def job_id(self, number: int) -> str:
        return str(number)

    def _record(self, s: Spec) -> dict[str, Any]:
        comment = f"coshare: device-memory={s.memory} device-threads={s.threads}"
        if s.processes is not None:
            comment += f" processes={s.processes}"
        held = not s.gate_open and s.running_on is None
        record = job_record(
            s.id,
            job_state="RUNNING" if s.running_on else "PENDING",
            comment=comment,
            state_reason="JobHeldUser" if held else "None",
            priority=0 if held else 1000,
            cpus=s.cpus,
            memory_per_node=s.host_memory_mib,
            memory_per_cpu=0,
            submit_time=int(NOW) - 100 + s.id,
            nodes=s.running_on or "",
            admin_comment="",
            required_nodes="",
            node_count=1,
            eligible_time=0,
            dependency="",
        )
        if s.nodes is not None:  # sbatch -N: Slurm's own request, as squeue shows it
            record.update(
                node_count=s.nodes, max_nodes=s.nodes, tasks=s.nodes, cpus=s.cpus * s.nodes
            )
        if s.placed is not None:
            node, device, at = s.placed
            memory = int(s.memory) if str(s.memory).isdigit() else 0
            text = format_placement(Placement(node, (device,), int(at), memory, s.threads))
            record.update(admin_comment=text, required_nodes=node)
        return record

    def read(self, jobs: list[Spec]) -> tuple[Snapshot, tuple[Rejected, ...]]:
        nodes = [
            parse_node(
                {
                    **self.node_template,
                    "name": n,
                    "state": "idle",
                    "gres": "gpu:FakePhi:2",
                    "cpus": 8,
                    "real_memory": 16384,
                }
            )
            for n in NODES
        ]
        parsed = [parse_job(self._record(s)) for s in jobs]
        self.view = build_view(
            nodes, parsed, device_kinds=KINDS, now_s=NOW, replan_after_s=REPLAN_AFTER_S
        )
        return self.view.snapshot, self.view.rejected

    def decide(self, plan: Plan, now: list[Spec]) -> Outcome:
        current = {str(s.id): parse_job(self._record(s)) for s in now}
        e = slurm_edits(self.view, plan, self.view.rejected, current, now_s=NOW)
        writes = []
        for w in e.writes:
            placement = parse_placement(w.admin_comment)
            assert placement is not None and placement.node == w.node
            writes.append((w.job, w.node, placement.devices))
        return _decided(
            self,
            e.close,
            writes,
            e.unchanged,
            e.skipped,
            [Rejected(o.job, o.detail) for o in e.rejected],
        )


# -- the contract --------------------------------------------------------------------------


def _decided(
    half: Half, close: Any, writes: Any, unchanged: Any, skipped: Any, refuse: Any
) -> Outcome:
    n = half.number
    return Outcome(
        pending=(),
        holding={},
        rejected=(),
        plan=(),
        close=tuple(n(o.job) for o in close),
        writes=tuple((n(j), node, tuple(d)) for j, node, d in writes),
        unchanged=tuple(n(j) for j in unchanged),
        skipped=tuple(sorted(n(o.job) for o in skipped)),
        refused=tuple(n(r.job) for r in refuse),
    )


def run(
    half: Half,
    jobs: list[Spec],
    now: list[Spec] | None = None,
    plan: tuple[int, str, str] | None = None,
) -> Outcome:
    """Read ``jobs``, plan (knapsack, or ``plan``: job number, node, device; ``()``: place
    nothing), and decide the writes from ``now`` (default: as read)."""
    snapshot, rejected = half.read(jobs)
    if plan is None:
        made = make_policy("knapsack").plan(snapshot)
    else:
        assignments = (Assignment(half.job_id(plan[0]), plan[1], (plan[2],)),) if plan else ()
        made = Plan("fixed", assignments=assignments)
    decided = half.decide(made, jobs if now is None else now)
    n = half.number
    return replace(
        decided,
        pending=tuple(sorted(n(j.id) for j in snapshot.pending)),
        holding={
            n(r.id): (r.state, r.node, r.devices, r.device_memory_mib, r.device_threads)
            for r in snapshot.running
        },
        rejected=tuple(sorted(n(r.job) for r in rejected)),
        plan=tuple(sorted((n(a.job), a.node, a.devices) for a in made.assignments)),
        shares={n(j.id): (j.cpu_milli, j.memory_mib) for j in snapshot.pending},
    )


OLD = NOW - REPLAN_AFTER_S - 1
FRESH = NOW - 10


@pytest.fixture(params=["condor", "slurm"])
def half(request: pytest.FixtureRequest) -> Half:
    return CondorHalf() if request.param == "condor" else SlurmHalf()


def test_a_new_job_is_planned_and_written(half: Half) -> None:
    out = run(half, [Spec(1)])
    assert (out.pending, out.plan) == ((1,), ((1, "n1", ("0",)),))
    assert (out.writes, out.close, out.unchanged) == (((1, "n1", ("0",)),), (), ())


def test_a_placed_job_not_started_holds_its_device_and_nothing_is_written(half: Half) -> None:
    out = run(
        half,
        [Spec(1, memory=7000, placed=("n1", "0", FRESH), gate_open=True), Spec(2, memory=2000)],
    )
    assert out.holding == {1: ("planned", "n1", ("0",), 7000, 60)}
    assert out.pending == (2,) and out.plan == ((2, "n2", ("0",)),)  # not on top of job 1
    assert (out.writes, out.close) == (((2, "n2", ("0",)),), ())


def test_an_expired_placement_is_pending_again_in_the_same_cycle(half: Half) -> None:
    expired = Spec(1, placed=("n1", "0", OLD), gate_open=True)
    kept = run(half, [expired], plan=(1, "n1", "0"))
    assert (kept.pending, kept.holding) == ((1,), {})
    assert (kept.unchanged, kept.writes, kept.close) == ((1,), (), ())  # same spot: left open
    moved = run(half, [expired], plan=(1, "n2", "1"))
    assert moved.close == (1,) and moved.writes == ((1, "n2", ("1",)),)  # closed, then moved
    waits = run(half, [expired], plan=())
    assert (waits.close, waits.writes) == ((1,), ())


def test_a_placement_on_a_node_that_is_gone_is_planned_again(half: Half) -> None:
    out = run(half, [Spec(1, placed=("n9", "0", FRESH), gate_open=True)])
    assert (out.pending, out.holding) == ((1,), {})
    assert out.close == (1,) and out.writes == ((1, "n1", ("0",)),)


def test_a_job_killed_mid_apply_has_its_gate_closed_and_is_written_again(half: Half) -> None:
    # HTCondor: PlacedAt and PlacedDevices written, not the node; Slurm: written, not released.
    out = run(half, [Spec(1, placed=("n2", "1", FRESH), gate_open=False)])
    assert (out.pending, out.holding, out.close) == ((1,), {}, ())
    assert out.writes == ((1, "n1", ("0",)),)


def test_a_job_running_where_it_was_planned_holds_its_device(half: Half) -> None:
    out = run(half, [Spec(1, memory=8000, placed=("n1", "0", OLD), running_on="n1"), Spec(2)])
    assert out.holding == {1: ("running", "n1", ("0",), 8000, 60)}
    assert out.plan == ((2, "n2", ("0",)),)  # not on job 1's device


def test_a_job_running_elsewhere_holds_the_device_where_it_runs(half: Half) -> None:
    out = run(half, [Spec(1, memory=8000, placed=("n1", "0", OLD), running_on="n2")])
    assert out.holding == {1: ("running", "n2", ("0",), 8000, 60)}


def test_a_bad_or_absurd_annotation_refuses_that_job_and_the_others_are_planned(
    half: Half,
) -> None:
    out = run(half, [Spec(1, memory="lots"), Spec(2, memory="9" * 400), Spec(3)])
    assert out.rejected == (1, 2) and out.pending == (3,)
    assert out.refused == (1, 2) and out.writes == ((3, "n1", ("0",)),)


def test_a_gang_is_planned_whole_on_slurm_and_refused_on_htcondor(half: Half) -> None:
    # The Slurm adapter writes a gang's nodes in its one update; HTCondor places
    # only parallel-universe gangs and refuses gang keys on this vanilla job
    out = run(half, [Spec(1, nodes=2), Spec(2)])
    if half.name == "slurm":
        assert (out.rejected, out.pending) == ((), (1, 2))
        assert {n for j, n, _ in out.plan if j == 1} == {"n1", "n2"}
        assert [w[0] for w in out.writes].count(1) == 1  # one write for the whole gang
    else:
        assert (out.rejected, out.refused, out.pending) == ((1,), (1,), (2,))


def test_a_refused_job_whose_gate_is_open_is_closed_first(half: Half) -> None:
    out = run(half, [Spec(1, memory="lots", placed=("n1", "0", FRESH), gate_open=True)])
    assert (out.rejected, out.close, out.refused) == ((1,), (1,), (1,))


def test_jobs_changed_or_gone_between_read_and_write_are_skipped(half: Half) -> None:
    jobs = [Spec(1), Spec(2), Spec(3)]
    now = [Spec(1, memory=2048), Spec(2, running_on="n2")]  # 3 left the queue
    out = run(half, jobs, now)
    assert out.writes == () and out.skipped == (1, 2, 3)


def test_applying_the_same_plan_again_writes_nothing(half: Half) -> None:
    first = run(half, [Spec(1)])
    [(_, node, devices)] = first.writes
    placed = Spec(1, placed=(node, devices[0], NOW), gate_open=True)
    again = run(half, [Spec(1)], now=[placed])
    assert (again.unchanged, again.writes, again.close) == ((1,), (), ())


def test_host_requests_are_the_jobs_total_and_shared_per_process(half: Half) -> None:
    out = run(half, [Spec(1, processes=4, cpus=6, host_memory_mib=1000)])
    assert out.shares == {1: (1500, 250)}  # per process, rounded up
