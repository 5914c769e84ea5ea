"""What the Slurm Editor writes for a plan (slurm_addon.edits.plan_edits), without Slurm."""

from __future__ import annotations

from dataclasses import replace

from coshare.config import DeviceKind
from coshare.cycle.run import Rejected
from coshare.model import Assignment, Plan, Unplaced

from slurm_addon.jobs import SlurmJob
from slurm_addon.nodes import GresEntry, SlurmNode
from slurm_addon.placement import format_refusal
from slurm_addon.view import build_view

NOW = 1_800_000_000.0
KINDS = {"k": DeviceKind(memory_mib=8192, threads=240)}
NODES = [SlurmNode("n1", "idle", cpus=8, memory_mib=16384, gres=(GresEntry("gpu", "k", 2),))]
TARGET = "coshare-placement;v=1;node=n1;devices=1;at=1800000000;mem_mib=1024;threads=60"


def job(job_id: str, **kw: object) -> SlurmJob:
    base: dict[str, object] = dict(
        phase="pending",
        state="PENDING",
        held=True,
        comment="coshare: device-memory=1G device-threads=60",
    )
    base.update(kw)
    return SlurmJob(job_id, **base)  # type: ignore[arg-type]


def edits_for(
    jobs: list[SlurmJob],
    plan: Plan,
    current: list[SlurmJob] | None = None,
    rejected: tuple[Rejected, ...] = (),
):  # type: ignore[no-untyped-def]
    from slurm_addon.edits import plan_edits

    v = build_view(NODES, jobs, device_kinds=KINDS, now_s=NOW)
    now = {j.id: j for j in (jobs if current is None else current)}
    return plan_edits(v, plan, rejected or v.rejected, now, now_s=NOW)


def place(job_id: str, device: str = "1") -> Plan:
    return Plan("knapsack", assignments=(Assignment(job_id, "n1", (device,)),))


def test_held_job_is_written_then_released() -> None:
    e = edits_for([job("1")], place("1"))
    assert [(w.job, w.node, w.admin_comment) for w in e.writes] == [
        ("1", "n1", TARGET.replace("1800000000", str(int(NOW))))
    ]
    assert e.unchanged == () and e.skipped == () and e.close == ()


def test_applying_twice_is_unchanged() -> None:
    after = job("1", held=False, admin_comment=TARGET, required_nodes="n1")
    e = edits_for([job("1")], place("1"), current=[after])
    assert e.writes == () and e.unchanged == ("1",)


def test_held_with_the_same_placement_is_written_again_with_a_fresh_time() -> None:
    # A cycle stopped before releasing it, or its placement expired and it was held.
    seen = job("1", admin_comment=TARGET.replace("at=1800000000", "at=5"), required_nodes="n1")
    e = edits_for([seen], place("1"))
    assert e.unchanged == () and [w.job for w in e.writes] == ["1"] and e.close == ()
    assert f"at={int(NOW)}" in e.writes[0].admin_comment


def test_moved_placement_is_rewritten() -> None:
    seen = job("1", admin_comment=TARGET, required_nodes="n1")
    e = edits_for([seen], place("1", device="0"))
    assert len(e.writes) == 1 and "devices=0" in e.writes[0].admin_comment


def test_jobs_that_changed_since_the_read_are_skipped_with_the_reason() -> None:
    jobs = [job("1"), job("2"), job("3"), job("4")]
    plan = Plan("knapsack", assignments=tuple(Assignment(i, "n1", ("0",)) for i in "1234"))
    current = [
        replace(jobs[0], phase="ended", state="CANCELLED"),
        replace(jobs[1], comment="coshare: device-memory=7G device-threads=60"),
        replace(
            jobs[2],
            admin_comment="coshare-placement;v=1;node=n1;devices=1;at=1;mem_mib=1024;threads=60",
        ),
    ]  # (job 4 left the queue)
    e = edits_for(jobs, plan, current=current)
    reasons = {o.job: o.detail for o in e.skipped}
    assert e.writes == ()
    assert "cancelled now" in reasons["1"]
    assert "comment changed" in reasons["2"]
    assert "AdminComment changed" in reasons["3"]
    assert "left the queue" in reasons["4"]


def test_unplaced_unheld_jobs_and_expired_placements_are_held_first() -> None:
    expired = job(
        "2", held=False, admin_comment=TARGET.replace("1800000000", "5"), required_nodes="n1"
    )
    jobs = [job("1", held=False), expired, job("3")]
    plan = Plan(
        "knapsack",
        unplaced=(Unplaced("1", "no room"), Unplaced("3", "no room"), Unplaced("2", "no room")),
    )
    e = edits_for(jobs, plan)
    assert [c.job for c in e.close] == ["1", "2"]  # 3 is held already
    assert "not started within" in e.close[1].detail


def test_an_expired_placement_planned_elsewhere_is_held_then_moved() -> None:
    expired = job(
        "2", held=False, admin_comment=TARGET.replace("1800000000", "5"), required_nodes="n1"
    )
    e = edits_for([expired], place("2", device="0"))
    assert [c.job for c in e.close] == ["2"] and [w.job for w in e.writes] == ["2"]
    assert "planned again on n1/0" in e.close[0].detail


def test_an_expired_placement_planned_in_the_same_spot_is_left_as_it_is() -> None:
    expired = job(
        "2", held=False, admin_comment=TARGET.replace("1800000000", "5"), required_nodes="n1"
    )
    e = edits_for([expired], place("2"))
    assert e.close == () and e.writes == () and e.unchanged == ("2",)


def test_refused_jobs_get_the_reason_once_and_stay_held() -> None:
    bad = job("1", held=False, comment="coshare: device-memory=abc device-threads=1")
    e = edits_for([bad], Plan("knapsack"))
    assert e.refusals[0][0] == "1" and "is not a number" in e.refusals[0][1]
    assert [c.job for c in e.close] == ["1"] and e.rejected[0].job == "1"
    assert e.close[0].detail.endswith("; refused")
    marked = replace(bad, held=True, admin_comment=e.refusals[0][1])
    again = edits_for([marked], Plan("knapsack"))
    assert again.refusals == () and again.close == () and again.rejected[0].job == "1"


def test_multi_node_assignments_and_unsafe_names_fail_cleanly() -> None:
    spread = Plan(
        "knapsack", assignments=(Assignment("1", "n1", ("0",)), Assignment("1", "n2", ("0",)))
    )
    skipped = edits_for([job("1")], spread).skipped[0].detail
    assert "planned on several nodes but asks for one" in skipped
    weird = Plan("knapsack", assignments=(Assignment("1", "n 1", ("0",)),))
    assert "cannot write" in edits_for([job("1")], weird).failed[0].detail


def test_refusal_text_is_bounded() -> None:
    long = Rejected("1", "x" * 5000)
    e = edits_for([job("1")], Plan("knapsack"), rejected=(long,))
    assert e.refusals[0][1] == format_refusal("x" * 5000)


def test_wait_reasons_go_only_where_no_other_record_is() -> None:
    from slurm_addon.edits import wait_reason_updates

    why = Unplaced("0", "needs 240 free device threads")
    plan = Plan(
        "knapsack",
        (Assignment("5", "n1", ("0",)),),
        tuple(replace(why, job=i) for i in ("1", "2", "3", "4", "6", "7")),
    )
    current = {
        "1": job("1"),  # empty: written
        "2": job("2", admin_comment="coshare-waiting: no_room: old"),  # older reason: written
        "3": job("3", admin_comment="coshare-waiting: no_room: needs 240 free device threads"),
        "4": job("4", admin_comment=TARGET),  # a placement: left alone
        "5": job("5", admin_comment="coshare-waiting: no_room: x"),  # placed: replaced there
        "6": job("6", admin_comment="operator: keep"),  # an operator's own text
        "7": job("7", held=False),  # released: not ours now
    }
    text = "coshare-waiting: no_room: needs 240 free device threads"
    assert wait_reason_updates(plan, current) == (("1", text), ("2", text))
    assert "refused" not in text and format_refusal("x").startswith("coshare-refused")


def test_jobs_of_a_lent_core_move_into_the_lending_partition_with_their_placement() -> None:
    from slurm_addon.edits import plan_edits
    from slurm_addon.scontrol import update_line

    gpu = job("1", comment="coshare: device-memory=1G device-threads=60 walltime=600")
    cpu = job("2", comment="coshare: kind=cpu walltime=60")
    plain_gpu = job("3")  # no requested time: it can never lend, so it stays where it is
    running = SlurmJob(
        "9",
        "active",
        "RUNNING",
        nodes=("n1",),
        cpus=2,
        comment="coshare: device-memory=1G device-threads=60 walltime=600",
        admin_comment=TARGET.replace("devices=1", "devices=0"),
        start_time_s=NOW - 100,
    )
    plan = Plan(
        "collocate",
        assignments=(
            Assignment("1", "n1", ("1",)),
            Assignment("2", "n1", harvest_from="9"),
            Assignment("3", "n1", ("1",)),
        ),
    )
    jobs = [gpu, cpu, plain_gpu, running]
    v = build_view(NODES, jobs, device_kinds=KINDS, now_s=NOW, lend_partition="coshare-lend")
    (donor,) = [r for r in v.snapshot.running if r.id == "9"]
    assert (donor.walltime_s, donor.start_time_s) == (600.0, NOW - 100)  # what P_M reads
    e = plan_edits(v, plan, (), {j.id: j for j in jobs}, now_s=NOW, lend_partition="coshare-lend")
    writes = {w.job: w for w in e.writes}
    assert writes["1"].partition == "coshare-lend" and writes["3"].partition is None
    assert writes["2"].partition == "coshare-lend"
    assert writes["2"].admin_comment.endswith(";harvest=9")
    line = update_line("2", "n1", writes["2"].admin_comment, partition="coshare-lend")
    assert line.startswith("update JobId=2 ReqNodeList=n1 Partition=coshare-lend AdminComment=")
    # Without a lending partition a placement on lent cores is not written, with why.
    e = plan_edits(v, plan, (), {j.id: j for j in jobs}, now_s=NOW)
    assert [(f.job, f.detail) for f in e.failed] == [
        ("2", "placed on lent cores, but slurm.lend_partition is not set")
    ]
    # A job coshare moved there is still the managed partition's.
    moved = replace(cpu, partition="coshare-lend")
    v = build_view(
        NODES,
        [moved],
        device_kinds=KINDS,
        now_s=NOW,
        partition="main",
        lend_partition="coshare-lend",
    )
    assert [j.id for j in v.snapshot.pending] == ["2"]
