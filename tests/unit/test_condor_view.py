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
    split_devices,
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
        ("0", 8192, 240, "phi-5110p"), ("1", 8192, 240, "phi-5110p")]
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
        ("19.0", "node3", ("0",), "planned", 8000)]
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
    assert "hardware threads unknown" in unknown.warnings[0] or "memory unknown" in (
        unknown.warnings[0])
    assert "device_kinds" in unknown.warnings[0]


def test_device_ids_with_commas_or_repeats_are_ignored_with_a_warning() -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h", "SlotType": "Partitionable", "TotalSlotCpus": 2,
        "TotalSlotMemory": 100, "CoshareNodeName": "n",
        "CoshareNodeDeviceIds": ["0", "0", "a,b"], "CoshareNodeDeviceMemory": [10, 10, 10],
        "CoshareNodeDeviceThreads": [4, 4, 4],
    }
    view = parse_slots([ad], {})
    assert [d.id for d in view.nodes[0].devices] == ["0"]
    assert len(view.warnings) == 2


def test_a_node_name_with_quotes_is_kept_verbatim() -> None:
    name = 'node4 " || true || "'
    ad: dict[str, object] = {"Name": "slot1@node4@h", "SlotType": "Partitionable",
                             "TotalSlotCpus": 4, "TotalSlotMemory": 4096, "CoshareNodeName": name}
    assert parse_slots([ad], {}).nodes[0].name == name


def test_unmanaged_job_states_are_ignored(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    held = [replace(j, status=5) for j in jobs]
    queue = parse_queue(held, parse_slots(slots, KINDS), now_s=now_s, replan_after_s=300)
    assert (queue.book.pending, queue.book.planned, queue.rejected, queue.running) == (
        (), (), (), ())


def test_small_helpers() -> None:
    assert split_devices("0, 1,") == ("0", "1")
    assert split_devices(None) == ()
    assert machine_of("slot1_2@node2@vm") == "node2@vm"
    assert read_job({"ClusterId": 3}) is None
    assert read_job({"ClusterId": 3, "ProcId": 0, "RequestMemory": 100.5}).memory_mib == 101


def test_device_models_match_kinds_ignoring_case_and_separators() -> None:
    ad: dict[str, object] = {
        "Name": "slot1@n@h", "SlotType": "Partitionable", "TotalSlotCpus": 2,
        "TotalSlotMemory": 100, "CoshareNodeName": "n", "CoshareNodeDeviceIds": ["0", "1"],
        "CoshareNodeDeviceMemory": [0, 0], "CoshareNodeDeviceThreads": [0, 0],
        "CoshareNodeDeviceModels": ["V100M16", "v100 m16"],
    }  # fmt: skip
    view = parse_slots([ad], {"v100-m16": DeviceKind(memory_mib=16384, threads=163840)})
    assert [(d.memory_mib, d.threads) for d in view.nodes[0].devices] == [(16384, 163840)] * 2


def test_a_multi_process_job_reserves_its_slot_request_per_process(
    slots: list[dict[str, object]]
) -> None:
    # RequestCpus/RequestMemory are the slot's: the job's total. Job.cpu_milli is per process.
    job = QueueJob(id="30.0", annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 30,
                                            "CoshareProcesses": 4},
                   request_cpus=6, request_memory=1000)  # fmt: skip
    queue = parse_queue([job], parse_slots(slots, KINDS), now_s=0, replan_after_s=300)
    [pending] = queue.book.pending
    assert (pending.processes, pending.cpu_milli, pending.memory_mib) == (4, 1500, 250)
    assert (pending.total_cpu_milli, pending.total_memory_mib) == (6000, 1000)


def test_an_absurd_value_refuses_that_job_only(slots: list[dict[str, object]]) -> None:
    huge = QueueJob(id="31.0", annotations={"CoshareDeviceMemory": "9" * 400,
                                            "CoshareDeviceThreads": 30})  # fmt: skip
    cores = QueueJob(id="32.0", request_cpus=1e308,
                     annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 30})
    good = QueueJob(id="33.0", annotations={"CoshareDeviceMemory": 512,
                                            "CoshareDeviceThreads": 30})  # fmt: skip
    queue = parse_queue([huge, cores, good], parse_slots(slots, KINDS), now_s=0,
                        replan_after_s=300)  # fmt: skip
    assert [j.id for j in queue.book.pending] == ["33.0"]
    reasons = {r.job: r.reason for r in queue.rejected}
    assert reasons["31.0"].startswith("job 31.0: CoshareDeviceMemory='99999")
    assert len(reasons["31.0"]) < 300  # the value is shown bounded
    assert reasons["32.0"].startswith("job 32.0: RequestCpus='1e+308'")


def test_node_facts_published_by_the_startd_cron_reach_the_snapshot(
    slots: list[dict[str, object]], jobs: list[QueueJob], now_s: float
) -> None:
    from coshare.facts import JobLoad, NodeFacts, format_facts

    from condor_addon.attributes import NODE_FACTS
    from condor_addon.view import node_job_id, with_node_facts

    # The node knows a job by its GlobalJobId in id characters (the job wrapper's --job).
    assert node_job_id("pooluser@vm#14.0#1795308474") == "pooluser_vm_14.0_1795308474"
    assert node_job_id("a b\"é" + "x" * 200) == "a_b___" + "x" * 122
    facts = NodeFacts(now_s - 30, llc_ways=20, llc_ways_free=8,
                      loads=(JobLoad("pooluser_vm_14.0_1795308474", 0.4, 0.5, 0.9, 600),))
    stale = format_facts(NodeFacts(now_s - 7200))
    ads = [{**ad, NODE_FACTS: format_facts(facts) if ad.get("CoshareNodeName") == "node1"
            else stale if ad.get("CoshareNodeName") == "node2" else ad.get(NODE_FACTS)}
           for ad in slots]  # fmt: skip
    cluster = parse_slots(ads, KINDS)
    queue = parse_queue(jobs, cluster, now_s=now_s, replan_after_s=300)
    snap, notes = with_node_facts(build_snapshot(cluster, queue, jobs, now_s), cluster, jobs,
                                  now_s=now_s, max_age_s=600)  # fmt: skip
    node1, node2, node3 = snap.nodes
    assert (node1.facts_at_s, node1.llc_ways, node1.llc_ways_free) == (now_s - 30, 20, 8)
    assert node2.facts_at_s is None and node3.facts_at_s is None
    measured = [r for r in snap.running if r.cpu_load_cores is not None]
    assert [(r.id, r.node, r.cpu_load_max_cores) for r in measured] == [("14.0", "node1", 0.9)]
    assert notes == ("node facts older than cycle.node_facts_max_age_s = 600 s on 1 node(s), "
                     "planned without them (node2: 7200 s old)",)  # fmt: skip
