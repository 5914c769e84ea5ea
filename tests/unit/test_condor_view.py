"""The HTCondor parsers on ads recorded from the real pool (tests/fixtures/condor/record.py
says what the pool held when they were recorded)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import classad2
import pytest
from coshare.config import DeviceKind, load_config
from coshare.schema import parse_snapshot, snapshot_to_dict

from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
from condor_addon.client import values_of
from condor_addon.view import (
    QueueJob,
    build_snapshot,
    machine_of,
    parse_queue,
    parse_slots,
    read_job,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "condor" / "23.9.6"
KINDS = load_config(environ={}).device_kinds


def load(name: str, projection: tuple[str, ...]) -> list[dict[str, object]]:
    text = (FIXTURES / name).read_text()
    return [values_of(ad, projection) for ad in classad2.parseAds(text)]


@pytest.fixture(scope="module")
def slots() -> list[dict[str, object]]:
    return load("slots.ads", SLOT_PROJECTION)


@pytest.fixture(scope="module")
def jobs() -> list[QueueJob]:
    read = [read_job(v) for v in load("jobs.ads", JOB_PROJECTION)]
    return [j for j in read if j is not None]


@pytest.fixture(scope="module")
def now_s() -> float:
    return float((FIXTURES / "recorded_at").read_text())


def test_nodes_and_devices_come_from_the_slot_ads(slots: list[dict[str, object]]) -> None:
    view = parse_slots(slots, KINDS)
    assert [n.name for n in view.nodes] == ["node1", "node2", "node3"]
    node1, _, node3 = view.nodes
    assert (node1.cpu_milli, node1.memory_mib) == (4000, 4096)  # the partitionable slot's total
    assert [(d.id, d.memory_mib, d.threads, d.model) for d in node1.devices] == [
        ("0", 8192, 240, "phi-5110p"),
        ("1", 8192, 240, "phi-5110p"),
    ]
    assert [(d.id, d.memory_mib) for d in node3.devices] == [("0", 16384)]
    assert view.node_of_machine["node2@vm"] == "node2"
    assert view.warnings == ()


def test_claimed_slots_are_what_runs_where(slots: list[dict[str, object]]) -> None:
    view = parse_slots(slots, KINDS)
    by_id = {r.id.split("#")[1]: r for r in view.running}
    assert set(by_id) == {"14.0", "14.1", "14.2", "15.0", "16.0"}
    assert (by_id["14.0"].node, by_id["14.0"].devices) == ("node1", ("0",))
    assert (by_id["14.0"].device_memory_mib, by_id["14.0"].device_threads) == (2048, 60)
    assert (by_id["14.0"].cpu_milli, by_id["14.0"].memory_mib) == (1000, 128)
    assert by_id["15.0"].devices == ()  # the CPU job: a core, no device
    assert (by_id["16.0"].node, by_id["16.0"].devices) == ("node2", ())  # unannotated
    assert all(r.state == "running" for r in view.running)


def test_queue_splits_pending_planned_and_refused(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    view = parse_slots(slots, KINDS)
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    pending = queue.book.pending
    assert [j.id for j in pending] == ["20.0"]
    assert (pending[0].device_memory_mib, pending[0].device_threads) == (512, 30)
    assert [(p.id, p.node, p.devices, p.state, p.cpu_milli) for p in queue.book.planned] == [
        ("19.0", "node3", ("0",), "planned", 8000)
    ]
    refused = {r.job: r.reason for r in queue.rejected}
    assert set(refused) == {"17.0", "18.0"}
    assert "CoshareDeviceMemory='abc' is not a number" in refused["17.0"]
    assert "allowed: integer MiB >= 1" in refused["17.0"]
    assert "exceeds every device (largest: 16384 MiB)" in refused["18.0"]


def test_snapshot_keeps_the_contract_and_names_jobs_by_queue_id(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    view = parse_slots(slots, KINDS)
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    snap = build_snapshot(view, queue, jobs, now_s)
    assert parse_snapshot(snapshot_to_dict(snap)) == snap  # strict contract check
    ids = {r.id for r in snap.running}
    assert {"14.0", "14.1", "14.2", "15.0", "16.0", "19.0"} == ids


def test_a_placement_older_than_the_timeout_is_planned_again(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    view = parse_slots(slots, KINDS)
    queue = parse_queue(jobs, view, now_s=now_s + 301, replan_after_s=300)
    assert "19.0" in {j.id for j in queue.book.pending}
    assert queue.book.planned == ()
    # Its gate is open: the Editor closes it before it opens any other.
    assert "not started within" in queue.book.to_close["19.0"]


def test_placement_on_a_vanished_node_is_planned_again(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    view = parse_slots([s for s in slots if s.get("CoshareNodeName") != "node3"], KINDS)
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    assert "19.0" in {j.id for j in queue.book.pending}
    assert "cannot take it" in queue.book.to_close["19.0"]


def test_running_job_not_yet_in_the_collector_counts_from_its_queue_entry(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    lagging = [s for s in slots if s.get("Name") != "slot1_1@node1@vm"]  # 14.0's slot
    view = parse_slots(lagging, KINDS)
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    [entry] = [p for p in queue.running if p.id == "14.0"]
    assert (entry.node, entry.devices, entry.state) == ("node1", ("0",), "running")
    assert (entry.device_memory_mib, entry.device_threads) == (2048, 60)


def test_device_limits_fall_back_to_device_kinds(slots: list[dict[str, object]]) -> None:
    ad = dict(next(s for s in slots if s["Name"] == "slot1@node3@vm"))
    ad["CoshareNodeDeviceThreads"] = [0]
    ad["CoshareNodeDeviceMemory"] = [0]
    view = parse_slots([ad], {"phi-7120p": DeviceKind(memory_mib=16000, threads=244)})
    assert [(d.memory_mib, d.threads) for d in view.nodes[0].devices] == [(16000, 244)]
    unknown = parse_slots([ad], {})
    assert unknown.nodes[0].devices == ()
    assert (
        "hardware threads unknown" in unknown.warnings[0]
        or "memory unknown" in (unknown.warnings[0])
    )
    assert "device_kinds" in unknown.warnings[0]


@pytest.mark.parametrize("key", ["ClusterId", "ProcId", "JobStatus", "CosharePlacedAt"])
def test_an_integer_too_large_for_a_float_reads_as_no_number(key: str) -> None:
    # math.isfinite(10**400) raises OverflowError: read_job, outside any per-job guard,
    # would have stopped the cycle.
    ad: dict[str, object] = {
        "ClusterId": 5,
        "ProcId": 0,
        "JobStatus": 1,
        "CosharePlacedAt": 1.0,
        key: 10**400,
    }
    job = read_job(ad)
    if key in ("ClusterId", "ProcId"):
        assert job is None
    else:
        assert job is not None and job.id == "5.0"
        assert (job.status, job.placed_at) == ((0, 1.0) if key == "JobStatus" else (1, None))


def test_device_ids_with_commas_or_repeats_are_ignored_with_a_warning() -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h",
        "SlotType": "Partitionable",
        "TotalSlotCpus": 2,
        "TotalSlotMemory": 100,
        "CoshareNodeName": "n",
        "CoshareNodeDeviceIds": ["0", "0", "a,b"],
        "CoshareNodeDeviceMemory": [10, 10, 10],
        "CoshareNodeDeviceThreads": [4, 4, 4],
    }
    view = parse_slots([ad], {})
    assert [d.id for d in view.nodes[0].devices] == ["0"]
    assert len(view.warnings) == 2


def test_a_node_name_with_quotes_is_kept_verbatim() -> None:
    name = 'node4 " || true || "'
    ad: dict[str, object] = {
        "Name": "slot1@node4@h",
        "SlotType": "Partitionable",
        "TotalSlotCpus": 4,
        "TotalSlotMemory": 4096,
        "CoshareNodeName": name,
    }
    assert parse_slots([ad], {}).nodes[0].name == name


def test_unmanaged_job_states_are_ignored(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    held = [replace(j, status=5) for j in jobs]
    queue = parse_queue(held, parse_slots(slots, KINDS), now_s=now_s, replan_after_s=300)
    assert (queue.book.pending, queue.book.planned, queue.rejected, queue.running) == (
        (),
        (),
        (),
        (),
    )


def test_small_helpers() -> None:
    assert machine_of("slot1_2@node2@vm") == "node2@vm"
    assert read_job({"ClusterId": 3}) is None
    assert read_job({"ClusterId": 3, "ProcId": 0, "RequestMemory": 100.5}).memory_mib == 101


def test_device_models_match_kinds_ignoring_case_and_separators() -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h",
        "SlotType": "Partitionable",
        "TotalSlotCpus": 2,
        "TotalSlotMemory": 100,
        "CoshareNodeName": "n",
        "CoshareNodeDeviceIds": ["0", "1"],
        "CoshareNodeDeviceMemory": [0, 0],
        "CoshareNodeDeviceThreads": [0, 0],
        "CoshareNodeDeviceModels": ["V100M16", "v100 m16"],
    }
    view = parse_slots([ad], {"v100-m16": DeviceKind(memory_mib=16384, threads=163840)})
    assert [(d.memory_mib, d.threads) for d in view.nodes[0].devices] == [(16384, 163840)] * 2


def test_a_multi_process_job_reserves_its_slot_request_per_process(
    slots: list[dict[str, object]],
) -> None:
    # RequestCpus/RequestMemory are the slot's: the job's total. Job.cpu_milli is per process.
    job = QueueJob(
        id="30.0",
        annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 30, "CoshareProcesses": 4},
        request_cpus=6,
        request_memory=1000,
    )
    queue = parse_queue([job], parse_slots(slots, KINDS), now_s=0, replan_after_s=300)
    [pending] = queue.book.pending
    assert (pending.processes, pending.cpu_milli, pending.memory_mib) == (4, 1500, 250)
    assert (pending.total_cpu_milli, pending.total_memory_mib) == (6000, 1000)


def test_an_absurd_value_refuses_that_job_only(slots: list[dict[str, object]]) -> None:
    huge = QueueJob(
        id="31.0", annotations={"CoshareDeviceMemory": "9" * 400, "CoshareDeviceThreads": 30}
    )
    cores = QueueJob(
        id="32.0",
        request_cpus=1e308,
        annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 30},
    )
    good = QueueJob(id="33.0", annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 30})
    queue = parse_queue([huge, cores, good], parse_slots(slots, KINDS), now_s=0, replan_after_s=300)
    assert [j.id for j in queue.book.pending] == ["33.0"]
    reasons = {r.job: r.reason for r in queue.rejected}
    assert reasons["31.0"].startswith("job 31.0: CoshareDeviceMemory='99999")
    assert len(reasons["31.0"]) < 300  # the value is shown bounded
    assert reasons["32.0"].startswith(
        "job 32.0: RequestCpus=1e+308 is outside what coshare "
        "accepts (allowed: a number 0..1048576)"
    )


# -- at the adapter's boundary: every number and id of a slot ad is bounded ---------------


def changed(slots: list[dict[str, object]], name: str, **values: object) -> list[dict[str, object]]:
    """The recorded slot ads with slot ``name``'s attributes changed."""
    return [{**s, **values} if s["Name"] == name else s for s in slots]


def test_node_capacity_rounds_down(slots: list[dict[str, object]]) -> None:
    # A 3.9995-core node offers 3999 milli: a 4-core job does not fit.
    view = parse_slots(
        changed(slots, "slot1@node3@vm", TotalSlotCpus=3.9995, TotalSlotMemory=4095.9), KINDS
    )
    node3 = next(n for n in view.nodes if n.name == "node3")
    assert (node3.cpu_milli, node3.memory_mib) == (3999, 4095)


def test_a_claims_memory_is_a_demand_and_rounds_up(slots: list[dict[str, object]]) -> None:
    view = parse_slots(changed(slots, "slot1_1@node1@vm", Memory=128.5, Cpus=0.5), KINDS)
    [claim] = [r for r in view.running if r.id.startswith("pooluser@vm#14.0#")]
    assert (claim.memory_mib, claim.cpu_milli) == (129, 500)


@pytest.mark.parametrize("bad", [" node9", "node9\n", "node\u202e9", "", "n" * 300, 7])
def test_a_slot_whose_node_name_is_not_an_id_is_ignored_with_a_note(
    slots: list[dict[str, object]], bad: object
) -> None:
    hostile = {**slots[0], "Name": "slot1@node9@vm", "CoshareNodeName": bad}
    view = parse_slots([*slots, hostile], KINDS)
    assert [n.name for n in view.nodes] == ["node1", "node2", "node3"]
    [note] = view.warnings
    assert note.startswith("slot slot1@node9@vm: CoshareNodeName=") and "slot ignored" in note
    assert len(note) < 400


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        (
            "TotalSlotCpus",
            1e30,
            "TotalSlotCpus=1e+30 is outside what coshare accepts (allowed: a number 0..1048576)",
        ),
        ("TotalSlotCpus", float("nan"), "TotalSlotCpus=nan is not a number"),
        ("TotalSlotCpus", float("inf"), "TotalSlotCpus=inf is not a finite number"),
        ("TotalSlotCpus", "4", "TotalSlotCpus='4' is not a number"),
        (
            "TotalSlotMemory",
            2.0**31,
            "TotalSlotMemory=2147483648.0 is outside what coshare "
            "accepts (allowed: a number 0..1073741824)",
        ),
        ("TotalSlotMemory", -1, "TotalSlotMemory=-1 is outside"),
    ],
)
def test_a_node_with_a_hostile_total_is_left_out_and_the_others_planned(
    slots: list[dict[str, object]],
    jobs: list[QueueJob],
    now_s: float,
    field: str,
    value: object,
    says: str,
) -> None:
    view = parse_slots(changed(slots, "slot1@node2@vm", **{field: value}), KINDS)
    assert [n.name for n in view.nodes] == ["node1", "node3"]
    assert [w for w in view.warnings if w.startswith("node node2: ")] == [
        w for w in view.warnings if says in w and w.endswith("node left out of this cycle")
    ]
    assert any(says in w for w in view.warnings)
    assert all(r.node != "node2" for r in view.running)  # its claims: nothing planned there
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    snap = build_snapshot(view, queue, jobs, now_s)
    assert parse_snapshot(snapshot_to_dict(snap)) == snap
    assert {j.id for j in queue.book.pending} >= {"20.0"}  # the others are still planned


def test_a_claim_with_a_hostile_size_leaves_its_node_out(slots: list[dict[str, object]]) -> None:
    # Counted as 0 cores before: a NaN claim would have let the node be oversubscribed.
    view = parse_slots(changed(slots, "slot1_1@node2@vm", Cpus=float("nan")), KINDS)
    assert [n.name for n in view.nodes] == ["node1", "node3"]
    assert "node node2: Cpus=nan is not a number" in "\n".join(view.warnings)


@pytest.mark.parametrize(
    ("ids", "memory", "threads", "says"),
    [
        (["0\n"], [8192], [240], "CoshareNodeDeviceIds='0\\n' has white space at its start"),
        (["0\x1b[2J"], [8192], [240], "holds the character '\\x1b'"),
        ([" 0"], [8192], [240], "has white space at its start or end"),
        (
            ["0"],
            [2**21],
            [240],
            "CoshareNodeDeviceMemory=2097152 is outside what coshare "
            "accepts (allowed: a number 0..1048576)",
        ),
        (["0"], [8192], [2**25], "CoshareNodeDeviceThreads=33554432 is outside"),
        (["0"], [float("nan")], [240], "CoshareNodeDeviceMemory=nan is not a number"),
        (["0"], [-5], [240], "CoshareNodeDeviceMemory=-5 is outside"),
    ],
)
def test_a_hostile_device_is_ignored_with_a_note_naming_node_device_and_field(
    ids: list[object], memory: list[object], threads: list[object], says: str
) -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h",
        "SlotType": "Partitionable",
        "TotalSlotCpus": 2,
        "TotalSlotMemory": 100,
        "CoshareNodeName": "n",
        "CoshareNodeDeviceIds": [*ids, "1"],
        "CoshareNodeDeviceMemory": [*memory, 10],
        "CoshareNodeDeviceThreads": [*threads, 4],
    }
    view = parse_slots([ad], {})
    assert [d.id for d in view.nodes[0].devices] == ["1"]
    [note] = view.warnings
    assert note.startswith("node n device ") and says in note and note.endswith("device ignored")


def test_a_million_device_ids_leave_the_node_out() -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h",
        "SlotType": "Partitionable",
        "TotalSlotCpus": 2,
        "TotalSlotMemory": 100,
        "CoshareNodeName": "n",
        "CoshareNodeDeviceIds": [str(i) for i in range(10**6)],
    }
    view = parse_slots([ad], {})
    assert view.nodes == ()
    assert view.warnings == (
        "node n: CoshareNodeDeviceIds='1000000 devices' is outside what "
        "coshare accepts (allowed: at most 1024 devices); node left out of "
        "this cycle",
    )


def test_a_drained_node_takes_nothing_and_says_why(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    drained = changed(
        slots, "slot1@node3@vm", State="Drained", Activity="Idle", DrainReason="new GPU firmware"
    )
    view = parse_slots(drained, KINDS)
    assert [n.name for n in view.nodes] == ["node1", "node2"]
    [closed] = view.unusable
    assert (closed.node, closed.state, closed.reason) == (
        "node3",
        "Drained/Idle",
        "new GPU firmware",
    )
    # 19.0, placed on node3, is planned again at once (its gate closes first), as on Slurm.
    queue = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    assert "19.0" in {j.id for j in queue.book.pending}
    assert "cannot take it" in queue.book.to_close["19.0"]
    owner = parse_slots(changed(slots, "slot1@node3@vm", State="Owner"), KINDS)
    assert [u.node for u in owner.unusable] == ["node3"]


def test_a_running_job_whose_request_cannot_be_read_holds_its_whole_node(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    lagging = [s for s in slots if s.get("Name") != "slot1_1@node1@vm"]  # 14.0's slot
    view = parse_slots(lagging, KINDS)
    hostile = [replace(j, request_cpus=float("nan")) if j.id == "14.0" else j for j in jobs]
    queue = parse_queue(hostile, view, now_s=now_s, replan_after_s=300)
    [entry] = [r for r in queue.running if r.id == "14.0"]
    node1 = view.nodes[0]
    assert (entry.cpu_milli, entry.memory_mib, entry.devices) == (
        node1.cpu_milli,
        node1.memory_mib,
        ("0", "1"),
    )
    assert any(w.startswith("job 14.0: RequestCpus=nan is not a number") for w in queue.warnings)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("JobPrio", 1e300, "JobPrio=1e+300 is outside what coshare accepts"),
        ("QDate", float("inf"), "QDate=inf is not a finite number"),
        ("RequestMemory", float("nan"), "RequestMemory=nan is not a number"),
        ("RequestCpus", "lots", "RequestCpus='lots' is not a number"),
    ],
)
def test_a_pending_job_with_a_hostile_number_is_refused_naming_the_field(
    slots: list[dict[str, object]], field: str, value: object, says: str
) -> None:
    ad = {
        "ClusterId": 40,
        "ProcId": 0,
        "JobStatus": 1,
        "CoshareDeviceMemory": 512,
        "CoshareDeviceThreads": 30,
        field: value,
    }
    good = {**ad, "ClusterId": 41, field: None}
    jobs = [read_job(ad), read_job(good)]
    queue = parse_queue(
        [j for j in jobs if j is not None], parse_slots(slots, KINDS), now_s=0, replan_after_s=300
    )
    assert [j.id for j in queue.book.pending] == ["41.0"]
    [refused] = queue.rejected
    assert refused.reason.startswith(f"job 40.0: {says}")


def test_node_facts_published_by_the_startd_cron_reach_the_snapshot(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    from coshare.ledger.facts import JobLoad, JobWait, NodeFacts, format_facts

    from condor_addon.attributes import NODE_FACTS
    from condor_addon.view import node_job_id, with_node_facts

    # The node knows a job by its GlobalJobId in id characters (the job wrapper's --job).
    assert node_job_id("pooluser@vm#14.0#1795308474") == "pooluser_vm_14.0_1795308474"
    assert node_job_id('a b"é' + "x" * 200) == "a_b___" + "x" * 122
    facts = NodeFacts(
        now_s - 30,
        llc_ways=20,
        llc_ways_free=8,
        loads=(JobLoad("pooluser_vm_14.0_1795308474", 0.4, 0.5, 0.9, 600),),
        waits=(JobWait("pooluser_vm_14.0_1795308474", 0.1, 0.3),),
    )
    stale = format_facts(NodeFacts(now_s - 7200))
    ads = [
        {
            **ad,
            NODE_FACTS: format_facts(facts)
            if ad.get("CoshareNodeName") == "node1"
            else stale
            if ad.get("CoshareNodeName") == "node2"
            else ad.get(NODE_FACTS),
        }
        for ad in slots
    ]
    cluster = parse_slots(ads, KINDS)
    queue = parse_queue(jobs, cluster, now_s=now_s, replan_after_s=300)
    snap, notes = with_node_facts(
        build_snapshot(cluster, queue, jobs, now_s), cluster, jobs, now_s=now_s, max_age_s=600
    )
    node1, node2, node3 = snap.nodes
    assert (node1.facts_at_s, node1.llc_ways, node1.llc_ways_free) == (now_s - 30, 20, 8)
    assert node2.facts_at_s is None and node3.facts_at_s is None
    measured = [r for r in snap.running if r.cpu_load_cores is not None]
    assert [(r.id, r.node, r.cpu_load_max_cores) for r in measured] == [("14.0", "node1", 0.9)]
    assert [(r.cpu_wait_cores, r.cpu_wait_last_cores) for r in measured] == [(0.1, 0.3)]
    assert notes == (
        "node facts older than cycle.node_facts_max_age_s = 600 s on 1 node(s), "
        "planned without them (node2: 7200 s old)",
    )


def test_another_schedds_open_placements_hold_their_devices_under_their_global_id(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    """Several planners, one per schedd: the recorded queue read as another
    schedd's. Its placed job 19.0 holds its device here, expired or not; nothing else."""
    from condor_addon.view import foreign_planned

    view = parse_slots(slots, KINDS)
    own = parse_queue(jobs, view, now_s=now_s, replan_after_s=300)
    foreign, notes = foreign_planned(jobs, view)
    placed = {r.node: r for r in own.book.planned}
    assert [(r.node, r.devices, r.device_memory_mib, r.state) for r in foreign] == [
        (r.node, r.devices, r.device_memory_mib, "planned") for r in placed.values()
    ]
    job19 = next(j for j in jobs if j.id == "19.0")
    assert [r.id for r in foreign] == [job19.global_id] and "#" in job19.global_id
    assert notes == ()
    later = parse_queue(jobs, view, now_s=now_s + 301, replan_after_s=300)
    assert later.book.planned == () and foreign_planned(jobs, view)[0] == foreign


def test_claim_keys_name_the_schedd_whoever_reads_the_job() -> None:
    from condor_addon.view import claim_key

    own = claim_key("12.0", "coshare-pool2@127.0.0.1")
    seen_elsewhere = claim_key("coshare-pool2@127.0.0.1#12.0#1700000000", "coshare-pool@127.0.0.1")
    assert own == seen_elsewhere == "coshare-pool2@127.0.0.1#12.0"
    assert claim_key("12.0", None) == "12.0"
