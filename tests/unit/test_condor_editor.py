"""The Editor's decision per planned job, on plain data."""

from __future__ import annotations

from dataclasses import replace

from coshare.model import Assignment, Plan

from condor_addon.ads import QueueJob
from condor_addon.editor import Write, classify

IDLE = QueueJob(id="1.0", status=1, annotations={"CoshareDeviceMemory": 512,
                                                 "CoshareDeviceThreads": 60})


def plan(*assignments: Assignment) -> Plan:
    return Plan(policy="knapsack", assignments=assignments)


def test_fresh_job_is_written() -> None:
    writes, unchanged, skipped = classify(plan(Assignment("1.0", "n1", ("0",))), {"1.0": IDLE})
    assert writes == [Write("1.0", "n1", ("0",), moving=False)]
    assert (unchanged, skipped) == ([], [])


def test_same_placement_is_unchanged_and_a_new_one_moves() -> None:
    placed = replace(IDLE, placed_node="n1", placed_devices="0", placed_at=5.0)
    _, unchanged, _ = classify(plan(Assignment("1.0", "n1", ("0",))), {"1.0": placed})
    assert unchanged == ["1.0"]
    writes, _, _ = classify(plan(Assignment("1.0", "n1", ("1",))), {"1.0": placed})
    assert writes == [Write("1.0", "n1", ("1",), moving=True)]


def test_vanished_started_and_changed_jobs_are_skipped_with_reasons() -> None:
    current = {"2.0": replace(IDLE, id="2.0", status=2),
               "3.0": replace(IDLE, id="3.0", annotations={"CoshareDeviceMemory": 4096,
                                                           "CoshareDeviceThreads": 60})}
    read = {"3.0": replace(IDLE, id="3.0")}
    p = plan(Assignment("1.0", "n1", ("0",)), Assignment("2.0", "n1", ("0",)),
             Assignment("3.0", "n1", ("0",)))
    writes, unchanged, skipped = classify(p, current, read)
    assert writes == [] and unchanged == []
    reasons = {o.job: o.detail for o in skipped}
    assert reasons["1.0"].startswith("left the queue")
    assert reasons["2.0"] == "is running now"
    assert reasons["3.0"].startswith("changed since it was read")


def test_annotation_case_does_not_count_as_a_change() -> None:
    read = {"1.0": replace(IDLE, annotations={"cosharedevicememory": 512,
                                              "CoshareDeviceThreads": 60})}
    writes, _, skipped = classify(plan(Assignment("1.0", "n1", ("0",))), {"1.0": IDLE}, read)
    assert len(writes) == 1 and skipped == []


def test_a_job_spread_over_nodes_is_refused() -> None:
    p = plan(Assignment("1.0", "n1", ("0",), processes=1), Assignment("1.0", "n2", ("0",), 1))
    _, _, skipped = classify(p, {"1.0": IDLE})
    assert "several nodes" in skipped[0].detail
