"""The HTCondor Editor's decisions and transactions (condor_addon.edits), on plain data."""

from __future__ import annotations

from dataclasses import replace

from coshare.ledger.book import Book
from coshare.model import Assignment, Job, Plan
from coshare.ports import Rejected

from condor_addon.edits import hold_reason, plan_edits
from condor_addon.view import QueueJob, current

IDLE = QueueJob(
    id="1.0", status=1, annotations={"CoshareDeviceMemory": 512, "CoshareDeviceThreads": 60}
)


def book(*ids: str, to_close: dict[str, str] | None = None) -> Book:
    return Book(pending=tuple(Job(i, 512, 60) for i in ids), to_close=to_close or {})


def plan(*assignments: Assignment) -> Plan:
    return Plan(policy="knapsack", assignments=assignments)


def edits(
    p: Plan,
    b: Book,
    now: list[QueueJob],
    read: list[QueueJob] | None = None,
    rejected: tuple[Rejected, ...] = (),
):  # type: ignore[no-untyped-def]
    then = {j.id: j for j in (now if read is None else read)}
    return plan_edits(p, b, rejected, {j.id: current(j, then.get(j.id)) for j in now})


def test_fresh_job_is_written_in_three_transactions() -> None:
    e = edits(plan(Assignment("1.0", "n1", ("0",))), book("1.0"), [IDLE])
    assert [w.job for w in e.decisions.writes] == ["1.0"]
    assert (e.placed, e.devices, e.nodes) == (("1.0",), ((("0",), ("1.0",)),), (("n1", ("1.0",)),))
    assert e.decisions.close == () and e.decisions.unchanged == ()


def test_same_placement_is_unchanged_and_a_new_one_closes_the_old_gate_first() -> None:
    placed = replace(IDLE, placed_node="n1", placed_devices="0", placed_at=5.0)
    b = book("1.0", to_close={"1.0": "placed but not started within cycle.replan_after_s"})
    same = edits(plan(Assignment("1.0", "n1", ("0",))), b, [placed])
    assert same.decisions.unchanged == ("1.0",) and same.decisions.close == ()
    moved = edits(plan(Assignment("1.0", "n1", ("1",))), b, [placed])
    assert [w.devices for w in moved.decisions.writes] == [("1",)]
    assert [c.job for c in moved.decisions.close] == ["1.0"]
    assert "planned again on n1/1" in moved.decisions.close[0].detail


def test_vanished_started_and_changed_jobs_are_skipped_with_reasons() -> None:
    now = [
        replace(IDLE, id="2.0", status=2),
        replace(
            IDLE, id="3.0", annotations={"CoshareDeviceMemory": 4096, "CoshareDeviceThreads": 60}
        ),
    ]
    read = [replace(IDLE, id="2.0"), replace(IDLE, id="3.0")]
    p = plan(
        Assignment("1.0", "n1", ("0",)),
        Assignment("2.0", "n1", ("0",)),
        Assignment("3.0", "n1", ("0",)),
    )
    e = edits(p, book("1.0", "2.0", "3.0"), now, read)
    assert e.decisions.writes == () and e.decisions.unchanged == ()
    reasons = {o.job: o.detail for o in e.decisions.skipped}
    assert reasons["1.0"].startswith("left the queue")
    assert reasons["2.0"] == "is running now, no longer pending"
    assert reasons["3.0"].startswith("changed since it was read")


def test_annotation_case_does_not_count_as_a_change() -> None:
    read = [replace(IDLE, annotations={"cosharedevicememory": 512, "CoshareDeviceThreads": 60})]
    e = edits(plan(Assignment("1.0", "n1", ("0",))), book("1.0"), [IDLE], read)
    assert len(e.decisions.writes) == 1 and e.decisions.skipped == ()


def test_a_job_spread_over_nodes_is_not_written() -> None:
    p = plan(Assignment("1.0", "n1", ("0",), processes=1), Assignment("1.0", "n2", ("0",), 1))
    e = edits(p, book("1.0"), [IDLE])
    assert "several nodes" in e.decisions.skipped[0].detail and e.decisions.writes == ()


def test_refused_jobs_are_held_grouped_by_reason_without_their_id() -> None:
    jobs = [replace(IDLE, id=f"{i}.0") for i in (1, 2, 3)]
    rejected = (
        Rejected("1.0", "job 1.0: CoshareDeviceMemory='x' is not a number"),
        Rejected("2.0", "job 2.0: CoshareDeviceMemory='x' is not a number"),
        Rejected("3.0", "job 3.0: CoshareDeviceThreads='\"' is not a number"),
    )
    e = edits(plan(), book(), jobs, rejected=rejected)
    assert dict(e.holds) == {
        "coshare: CoshareDeviceMemory='x' is not a number": ("1.0", "2.0"),
        "coshare: CoshareDeviceThreads=''' is not a number": ("3.0",),
    }
    assert hold_reason('job 9.0: a "b" \\c', "9.0") == "coshare: a 'b' c"


def test_wait_reasons_one_transaction_per_reason_only_when_changed() -> None:
    from coshare.model import Unplaced

    from condor_addon.edits import wait_reason_edits
    from condor_addon.view import read_job

    p = Plan(
        "knapsack",
        (Assignment("1.0", "n1", ("0",)),),
        (
            Unplaced("2.0", "needs 240 free device threads"),
            Unplaced("3.0", "no idle device"),
            Unplaced("4.0", "needs 240 free device threads"),
            Unplaced("5.0", "needs 240 free device threads"),
        ),
    )
    same = "no_room: needs 240 free device threads"
    recorded = {
        "1.0": "no_room: old",
        "2.0": None,
        "3.0": "no_room: other",
        "4.0": None,
        "5.0": same,
    }
    assert wait_reason_edits(p, recorded) == (
        (same, ("2.0", "4.0")),
        ("no_room: no idle device", ("3.0",)),
        (None, ("1.0",)),
    )
    ad = {"ClusterId": 2, "ProcId": 0, "CoshareWaitReason": same, "CoshareDeviceMemory": 1}
    job = read_job(ad)
    assert job is not None and job.wait_reason == same
    assert "CoshareWaitReason" not in job.annotations  # coshare's own, never an annotation


def test_a_placement_the_writer_cannot_write_fails_alone_and_the_others_are_written() -> None:
    # The reader leaves such nodes and devices out; a plan that still names one (a policy's
    # slip) fails that job with why, and every other job is written.
    others = [replace(IDLE, id=i) for i in ("2.0", "3.0")]
    p = plan(
        Assignment("1.0", "n1", ("0",)),
        Assignment("2.0", "n$$(Name)", ("0",)),
        Assignment("3.0", "n1", ("gpu 0",)),
    )
    e = edits(p, book("1.0", "2.0", "3.0"), [IDLE, *others])
    assert [w.job for w in e.decisions.writes] == ["1.0"]
    assert e.nodes == (("n1", ("1.0",)),) and e.placed == ("1.0",)
    failed = {o.job: o.detail for o in e.decisions.failed}
    assert failed["2.0"].startswith("not written: the node name 'n$$(Name)' holds $$")
    assert failed["3.0"].startswith("not written: the device id 'gpu 0' on 'n1'")
