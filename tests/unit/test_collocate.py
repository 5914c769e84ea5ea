"""The ``collocate`` policy (Wu & Hong, section IV-A): harvest, its limits, give-back, errors.

The oracle of the property tests is coshare.cycle.verify.check_plan, which recounts borrowed cores
against each GPU job's measured load with code of its own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from coshare.cli.main import schema_text
from coshare.config import load_config
from coshare.cycle.run import run_cycle
from coshare.cycle.verify import check_plan
from coshare.errors import ConfigError
from coshare.model import Assignment, Device, Job, Node, Plan, RunningJob, Snapshot, Unplaced
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.collocate import (
    CollocatePolicy,
    measured_demand,
    saturated,
    without_harvest,
)
from coshare.schema import parse_plan, parse_snapshot, plan_to_dict, snapshot_to_dict
from hypothesis import given
from hypothesis import strategies as st

from tests.memory_queue import MemoryQueue

GPUS = tuple(Device(str(i), 6144, 14 * 2048) for i in range(3))


def node(name: str = "n1", cores: int = 12) -> Node:
    """A Keeneland / Wu & Hong node: 12 cores, 3 GPUs, 24 GB."""
    return Node(name, cores * 1000, 24576, GPUS)


def gpu_job(
    load: float | None = 2.5,
    *,
    start: float = 0.0,
    walltime: float | None = 600.0,
    copy_bw: float | None = 40.0,
    id: str = "g1",
    on: str = "n1",
) -> RunningJob:
    return RunningJob(
        id,
        on,
        ("0", "1", "2"),
        1024,
        1024,
        12000,
        4096,
        start_time_s=start,
        cpu_load_cores=load,
        cpu_load_last_cores=load,
        walltime_s=walltime,
        copy_bw_mbps=copy_bw,
    )


def cpu_job(id: str, cores: int, submit: float = 0.0) -> Job:
    return Job(
        id,
        device_count=0,
        kind="cpu",
        cpu_milli=cores * 1000,
        memory_mib=512,
        submit_time_s=submit,
        walltime_s=300.0,
    )


def plan_of(snapshot: Snapshot, policy: CollocatePolicy | None = None) -> Plan:
    plan = (policy or CollocatePolicy()).plan(snapshot)
    assert check_plan(snapshot, plan) == []
    return plan


def test_after_the_monitoring_period_idle_cores_are_lent_up_to_p_b() -> None:
    # load 2.5 of 12 leaves 9.5 idle: 9 whole cores, and P_B = 9 (section IV-C).
    snap = Snapshot((node(),), (gpu_job(),), (cpu_job("c8", 8), cpu_job("c2", 2)), now_s=250.0)
    plan = plan_of(snap)
    assert plan.assignments == (Assignment("c8", "n1", harvest_from="g1"),)
    (waits,) = plan.unplaced
    assert waits.job == "c2" and "largest harvest open is 1 cores of GPU job g1" in waits.reason


def test_p_b_caps_what_a_nearly_idle_gpu_job_lends() -> None:
    snap = Snapshot(
        (node(),), (gpu_job(load=0.4),), (cpu_job("c8", 8), cpu_job("c4", 4)), now_s=250.0
    )
    assert [a.job for a in plan_of(snap, CollocatePolicy(max_harvest_cores=9)).assignments] == [
        "c8"
    ]
    assert [a.job for a in plan_of(snap, CollocatePolicy(max_harvest_cores=12)).assignments] == [
        "c8"
    ]  # floor(12 - 0.4) = 11 idle: 8 + 4 do not fit
    assert plan_of(snap, CollocatePolicy(max_harvest_cores=0)).assignments == ()


def test_an_idle_gpu_job_keeps_one_core_however_large_p_b_is() -> None:
    # load 0 of 12 and P_B = 12: lending all 12 would leave the GPU job's cpuset empty, which
    # the node refuses (the borrower then fails); 11 are lent, 12 wait.
    snap = Snapshot(
        (node(),), (gpu_job(load=0.0),), (cpu_job("c12", 12), cpu_job("c11", 11)), now_s=250.0
    )
    plan = plan_of(snap, CollocatePolicy(max_harvest_cores=12))
    assert plan.assignments == (Assignment("c11", "n1", harvest_from="g1"),)
    assert [u.job for u in plan.unplaced] == ["c12"]


@pytest.mark.parametrize(
    ("running", "now", "says"),
    [
        (gpu_job(), 199.0, "in their monitoring period (P_M = 0.333333"),
        (gpu_job(walltime=None), 10_000.0, "no requested time"),
        (gpu_job(copy_bw=350.0), 250.0, "copy bandwidth above collocate.copy_bw_limit_mbps 300"),
        (gpu_job(copy_bw=None), 250.0, "copy bandwidth unknown"),
        (gpu_job(load=None), 250.0, "no measured CPU load"),
    ],
)
def test_a_gpu_job_that_may_not_lend_is_named_with_the_reason(
    running: RunningJob, now: float, says: str
) -> None:
    plan = plan_of(Snapshot((node(),), (running,), (cpu_job("c2", 2),), now_s=now))
    assert plan.assignments == ()
    assert any(
        note.startswith("GPU jobs g1 lend no cores: ") and says in note for note in plan.notes
    ), plan.notes
    assert "no GPU job lends cores now" in plan.unplaced[0].reason


def test_gpu_jobs_go_first_then_cpu_jobs_by_decreasing_ppn_with_backfill() -> None:
    gpu = Job("g", 1024, 1024, device_count=3, cpu_milli=12000, memory_mib=4096, submit_time_s=5.0)
    big, small = cpu_job("c12", 12, submit=0.0), cpu_job("c2", 2, submit=1.0)
    two = (node("n1"), Node("n2", 4000, 24576))
    plan = plan_of(Snapshot(two, (), (big, small, gpu), now_s=10.0))
    # The GPU job takes n1 although submitted last; c12 fits nowhere now; c2 backfills n2.
    assert plan.assignments == (Assignment("g", "n1", ("0", "1", "2")), Assignment("c2", "n2"))
    assert [u.job for u in plan.unplaced] == ["c12"]


def test_p_b_above_a_node_s_cores_is_noted_and_that_node_lends_what_its_load_leaves() -> None:
    small = Node("n8", 8000, 24576, GPUS)
    donor = replace(gpu_job(load=1.0, on="n8"), cpu_milli=8000)
    plan = plan_of(Snapshot((small,), (donor,), (cpu_job("c7", 7),), now_s=250.0))
    assert plan.assignments == (Assignment("c7", "n8", harvest_from="g1"),)
    assert any(
        "collocate.max_harvest_cores 9 is above the cores of nodes n8" in n for n in plan.notes
    )


def test_a_cpu_job_larger_than_any_harvest_waits_with_the_numbers() -> None:
    plan = plan_of(Snapshot((node(),), (gpu_job(),), (cpu_job("c10", 10),), now_s=250.0))
    (u,) = plan.unplaced
    assert u.job == "c10" and u.code == "no_room"
    assert (
        "the largest harvest open is 9 cores of GPU job g1 on n1, and this job needs 10" in u.reason
    )


def test_a_gpu_job_whose_load_rises_gets_its_cores_back_through_the_scheduler() -> None:
    older = RunningJob(
        "c4", "n1", (), cpu_milli=4000, memory_mib=512, start_time_s=210.0, harvest_from="g1"
    )
    newer = replace(older, id="c2", cpu_milli=2000, start_time_s=230.0)
    calm = Snapshot(
        (node(),), (gpu_job(walltime=1200.0), older, newer), (cpu_job("c3", 3),), now_s=400.0
    )
    plan = plan_of(calm)  # 9 may be lent, 6 are: c3 joins
    assert plan.requeue == () and plan.assignments == (Assignment("c3", "n1", harvest_from="g1"),)
    # The last interval's load rose to 7: only 5 cores may be lent, 6 are.
    risen = replace(
        calm, running=(replace(gpu_job(walltime=1200.0), cpu_load_last_cores=7.0), older, newer)
    )
    plan = plan_of(risen)
    assert [u.job for u in plan.requeue] == ["c2"]  # newest first, just enough
    assert "load rose to 7 of 12 cores, so it can lend 5 where 6 are lent" in plan.requeue[0].reason
    assert plan.assignments == ()  # nothing new on its cores until they are back
    # Without the requeue the verifier still accepts (nothing added), but not a new borrower:
    grabbed = replace(plan, assignments=(Assignment("c3", "n1", harvest_from="g1"),), unplaced=())
    assert any(
        "lends 9 cores, more than its load 7 leaves idle (5)" in p
        for p in check_plan(risen, grabbed)
    )


def test_a_lender_whose_load_fills_the_cores_it_kept_gets_all_of_them_back() -> None:
    # On a live node the lent cores are out of its cpuset: its load cannot show more than the
    # 6 cores it kept. A load of 5.6 of those 6 (node facts: cpu_cores_held) is taken as
    # needing its cores back; without that fact (the simulator) the load is the demand.
    older = RunningJob(
        "c4", "n1", (), cpu_milli=4000, memory_mib=512, start_time_s=210.0, harvest_from="g1"
    )
    newer = replace(older, id="c2", cpu_milli=2000, start_time_s=230.0)
    gpu = replace(gpu_job(walltime=1200.0), cpu_load_last_cores=5.6)
    unknown = Snapshot((node(),), (gpu, older, newer), (), now_s=400.0)
    assert plan_of(unknown).requeue == ()  # floor(12 - 5.6) = 6 may be lent, 6 are
    full = replace(unknown, running=(replace(gpu, cpu_cores_held=6), older, newer))
    plan = plan_of(full)
    assert [u.job for u in plan.requeue] == ["c2", "c4"]
    assert "its load 5.6 fills the 6 cores it kept while lending 6" in plan.requeue[0].reason
    roomy = replace(
        unknown, running=(replace(gpu, cpu_load_last_cores=4.0, cpu_cores_held=6), older, newer)
    )
    assert plan_of(roomy).requeue == ()  # 4 of its 6: not full


def test_a_contended_lender_s_run_queue_wait_shows_the_need_its_load_cannot() -> None:
    # Other processes share the 6 cores it kept: a lender that wants all 6 gets a load of 3
    # and spends 2.6 cores' worth runnable but waiting for a CPU (node facts: wait). Its load
    # alone leaves 9 idle, so without the wait nothing comes back; with it, its demand 5.6
    # fills 0.9 x its 6 cores, and all its borrowers are requeued with the numbers.
    older = RunningJob(
        "c4", "n1", (), cpu_milli=4000, memory_mib=512, start_time_s=210.0, harvest_from="g1"
    )
    newer = replace(older, id="c2", cpu_milli=2000, start_time_s=230.0)
    gpu = replace(gpu_job(load=3.0, walltime=1200.0), cpu_cores_held=6)
    blind = Snapshot((node(),), (gpu, older, newer), (cpu_job("c1", 1),), now_s=400.0)
    assert plan_of(blind).requeue == ()
    # the history's wait is low, the last interval's high: the higher sum counts
    waiting = replace(
        blind, running=(replace(gpu, cpu_wait_cores=0.2, cpu_wait_last_cores=2.6), older, newer)
    )
    plan = plan_of(waiting)
    assert [u.job for u in plan.requeue] == ["c2", "c4"]
    assert plan.requeue[0].reason == (
        "GPU job g1 on n1 needs its cores back: its demand of 5.6 cores (load 3 plus 2.6 "
        "waiting for a CPU, run-queue delay) is at least 0.9 x the 6 cores it kept while "
        "lending 6; requeued through the scheduler"
    )
    assert plan.assignments == ()  # and it lends nothing meanwhile
    # 1.9 of waiting: a demand of 4.9 is below 0.9 x 6, and leaves 7 idle for the 6 lent
    calm = replace(waiting, running=(replace(gpu, cpu_wait_last_cores=1.9), older, newer))
    assert plan_of(calm).requeue == ()


def test_a_lender_whose_demand_fills_its_cores_lends_nothing_new() -> None:
    # Nothing lent yet, it holds its 12 cores: load 6 plus 5 waiting is 11 >= 0.9 x 12. By
    # load and wait alone one core would be idle; saturated, it lends none, and says why.
    gpu = replace(gpu_job(load=6.0), cpu_wait_cores=5.0, cpu_wait_last_cores=5.0)
    snap = Snapshot((node(),), (gpu,), (cpu_job("c1", 1),), now_s=250.0)
    assert [a.job for a in plan_of(snap).assignments] == ["c1"]  # no cpuset fact: 1 idle
    held = replace(snap, running=(replace(gpu, cpu_cores_held=12),))
    plan = plan_of(held)
    assert plan.assignments == () and plan.requeue == ()
    assert any(
        "GPU jobs g1 lend no cores: what they want (load plus run-queue wait) fills "
        "0.9 x the cores their cpusets hold" in n
        for n in plan.notes
    ), plan.notes
    # Without wait facts (an older node, or no schedstat) its load 6 alone is the demand.
    old = replace(snap, running=(replace(gpu_job(load=6.0), cpu_cores_held=12),))
    assert [a.job for a in plan_of(old).assignments] == ["c1"]


def test_a_risen_demand_asks_back_just_enough_with_the_numbers() -> None:
    # The simulator's case (no cpuset fact): load 5 plus 2 waiting leaves 5 of 12 to lend,
    # and 6 are lent: the newest 2-core borrower goes.
    older = RunningJob(
        "c4", "n1", (), cpu_milli=4000, memory_mib=512, start_time_s=210.0, harvest_from="g1"
    )
    newer = replace(older, id="c2", cpu_milli=2000, start_time_s=230.0)
    gpu = replace(gpu_job(load=5.0, walltime=1200.0), cpu_wait_cores=2.0, cpu_wait_last_cores=2.0)
    snap = Snapshot((node(),), (gpu, older, newer), (), now_s=400.0)
    plan = plan_of(snap)
    assert [u.job for u in plan.requeue] == ["c2"]
    assert (
        "its demand rose to 7 of 12 cores (load 5 plus 2 waiting for a CPU, run-queue "
        "delay), so it can lend 5 where 6 are lent"
    ) in plan.requeue[0].reason


def test_the_verifier_counts_the_wait_and_refuses_lending_from_a_saturated_lender() -> None:
    from coshare.cycle import verify as verify
    from coshare.policies import collocate

    assert verify.SATURATED_SHARE == collocate.SATURATED_SHARE  # the two are kept apart
    gpu = replace(gpu_job(load=6.0), cpu_wait_cores=5.0, cpu_wait_last_cores=5.0, cpu_cores_held=12)
    snap = Snapshot((node(),), (gpu,), (cpu_job("c1", 1),), now_s=250.0)
    lends = Plan("collocate", (Assignment("c1", "n1", harvest_from="g1"),))
    assert check_plan(snap, lends) == [
        "GPU job g1 lends more cores while its load and "
        "run-queue wait 11 fills 0.9 x the 12 cores it holds"
    ]
    two = replace(snap, pending=(cpu_job("c2", 2),))
    assert check_plan(two, Plan("collocate", (Assignment("c2", "n1", harvest_from="g1"),))) == [
        "GPU job g1 lends 2 cores, more than its load and run-queue wait 11 leaves idle (1)"
    ]


def test_backfill_never_delays_the_first_waiting_job_s_reservation() -> None:
    # g1 requested until 600 s. c12 waits for n1 (reserved from 600 s); at 400 s a 300-s CPU
    # job would outlive the reservation, so it may not borrow there; a 150-s one may.
    long, short = cpu_job("long", 3), replace(cpu_job("short", 3), walltime_s=150.0)
    snap = Snapshot((node(),), (gpu_job(),), (cpu_job("c12", 12), long, short), now_s=400.0)
    plan = plan_of(snap)
    assert plan.assignments == (Assignment("short", "n1", harvest_from="g1"),)
    assert [u.job for u in plan.unplaced] == ["c12", "long"]
    # without a clock there is no reservation (and no harvest: no monitoring period ends)
    assert plan_of(replace(snap, now_s=None)).assignments == ()


def test_backfill_on_free_cores_ends_before_the_reserved_start() -> None:
    busy = RunningJob(
        "old", "n1", (), cpu_milli=8000, memory_mib=512, start_time_s=0.0, walltime_s=500.0
    )
    gpu = Job("g", 1024, 1024, device_count=3, cpu_milli=12000, memory_mib=4096)
    late = replace(cpu_job("late", 4, submit=0.0), walltime_s=600.0)  # ends at 700 > 500
    soon = replace(cpu_job("soon", 4, submit=1.0), walltime_s=300.0)  # ends at 400 <= 500
    plan = plan_of(Snapshot((node(),), (busy,), (gpu, late, soon), now_s=100.0))
    assert plan.assignments == (Assignment("soon", "n1"),)
    assert [u.job for u in plan.unplaced] == ["g", "late"]


def test_a_borrower_whose_gpu_job_ended_holds_the_node_s_cores() -> None:
    orphan = RunningJob("c8", "n1", (), cpu_milli=8000, memory_mib=512, harvest_from="gone")
    plan = plan_of(Snapshot((node(),), (orphan,), (cpu_job("c6", 6), cpu_job("c4", 4)), now_s=10.0))
    assert [a.job for a in plan.assignments] == ["c4"]


def test_the_verifier_refuses_unsound_harvests() -> None:
    snap = Snapshot(
        (node(),),
        (gpu_job(), gpu_job(load=None, id="g2", on="n1")),
        (cpu_job("c8", 8), Job("d", 10, 10, cpu_milli=1000)),
        now_s=250.0,
    )
    bad = Plan(
        "x",
        (
            Assignment("c8", "n1", harvest_from="g2"),
            Assignment("d", "n1", ("0",), harvest_from="g1"),
        ),
        requeue=(Unplaced("nobody", "r"),),
    )
    problems = check_plan(snap, bad)
    assert "GPU job g2 lends cores but has no measured load" in problems
    assert "job d needs a device but is placed on harvested cores" in problems
    assert "job nobody is requeued but not running" in problems
    elsewhere = Plan("x", (Assignment("c8", "n1", harvest_from="g9"),), (Unplaced("d", "r"),))
    assert "job c8 harvests from g9, which is no running GPU job on n1" in check_plan(
        snap, elsewhere
    )
    idle = Snapshot((node(),), (gpu_job(load=0.0),), (cpu_job("c12", 12),), now_s=250.0)
    every = Plan("x", (Assignment("c12", "n1", harvest_from="g1"),), ())
    assert check_plan(idle, every) == [
        "GPU job g1 lends all its 12 cores and keeps none for itself"
    ]


def test_a_gpu_job_on_two_nodes_lends_each_node_s_cores_and_the_check_agrees() -> None:
    # One running entry per node, as the snapshot contract says of a job on several nodes.
    on_both = (gpu_job(on="n0"), gpu_job(on="n1"))
    snap = Snapshot(
        (node("n0"), node("n1")), on_both, (cpu_job("c0", 8), cpu_job("c1", 8)), now_s=250.0
    )
    plan = plan_of(snap)  # the plan check agrees with the policy
    assert sorted((a.job, a.node, a.harvest_from) for a in plan.assignments) == [
        ("c0", "n0", "g1"),
        ("c1", "n1", "g1"),
    ]
    # what each node's part lends is counted on that node: 8 of n0's 9 idle cores are lent
    borrower = RunningJob("b", "n0", (), cpu_milli=8000, harvest_from="g1", state="running")
    snap = Snapshot(
        (node("n0"), node("n1")), (*on_both, borrower), (cpu_job("c0", 8),), now_s=250.0
    )
    plan = plan_of(snap)
    assert [(a.node, a.harvest_from) for a in plan.assignments] == [("n1", "g1")]
    over = Plan("collocate", (Assignment("c0", "n0", harvest_from="g1"),))
    assert check_plan(snap, over) == [
        "GPU job g1 on n0 lends 16 cores, more than its load 2.5 leaves idle (9)"
    ]


def test_live_cycles_turn_harvest_placements_into_unsupported_waits() -> None:
    plan = Plan(
        "collocate",
        (Assignment("a", "n1"), Assignment("c", "n1", harvest_from="g1")),
        requeue=(Unplaced("b", "r"),),
    )
    live = without_harvest(plan)
    assert live.assignments == (Assignment("a", "n1"),) and live.requeue == ()
    (u,) = live.unplaced
    assert u.code == "unsupported" and "idle cores of GPU job g1" in u.reason
    assert "cannot start a job on cores the scheduler believes taken" in u.reason
    assert any("requeued" in n for n in live.notes)
    told = without_harvest(plan, "slurm.lend_partition is not set")
    assert "cannot apply: slurm.lend_partition is not set;" in told.unplaced[0].reason
    untouched = Plan("sharepack", (Assignment("a", "n1"),))
    assert without_harvest(untouched) is untouched


def test_a_live_cycle_writes_no_placement_on_lent_cores() -> None:
    queue = MemoryQueue(Snapshot((node(),), (gpu_job(),), (cpu_job("c8", 8),), now_s=250.0))
    assert CollocatePolicy().plan(queue.snapshot).assignments[0].harvest_from == "g1"
    report = run_cycle(queue, CollocatePolicy(), queue)
    (written,) = queue.written
    assert written.assignments == () and report.apply.applied == ()
    assert written.unplaced[0].code == "unsupported"


class _Lending(MemoryQueue):
    """An Editor whose scheduler and node side apply harvest placements."""

    applies_harvest = True


class _Refusing(MemoryQueue):
    harvest_unsupported_reason = "this pool has no lending slot"


def test_an_editor_that_applies_harvest_gets_the_placement_and_the_requeue() -> None:
    queue = _Lending(Snapshot((node(),), (gpu_job(),), (cpu_job("c8", 8),), now_s=250.0))
    run_cycle(queue, CollocatePolicy(), queue)
    (written,) = queue.written
    assert written.assignments == (Assignment("c8", "n1", harvest_from="g1"),)
    # The GPU job's load rose: the borrower is requeued through the Editor, not starved.
    hot = replace(gpu_job(), cpu_load_cores=11.0)
    borrower = RunningJob(
        "c8", "n1", (), cpu_milli=8000, start_time_s=200.0, harvest_from="g1", state="running"
    )
    queue = _Lending(Snapshot((node(),), (hot, borrower), (), now_s=300.0))
    run_cycle(queue, CollocatePolicy(), queue)
    assert [u.job for u in queue.written[0].requeue] == ["c8"]
    refusing = _Refusing(Snapshot((node(),), (gpu_job(),), (cpu_job("c8", 8),), now_s=250.0))
    run_cycle(refusing, CollocatePolicy(), refusing)
    (u,) = refusing.written[0].unplaced
    assert "this pool has no lending slot" in u.reason and u.code == "unsupported"


def test_harvest_fields_round_trip_through_the_contracts() -> None:
    borrower = RunningJob("c8", "n1", (), cpu_milli=8000, harvest_from="g1")
    snap = Snapshot((node(),), (gpu_job(), borrower), (), now_s=1.0)
    assert parse_snapshot(snapshot_to_dict(snap)) == snap
    plan = Plan(
        "collocate",
        (Assignment("c8", "n1", harvest_from="g1"),),
        requeue=(Unplaced("c2", "its donor needs its cores"),),
    )
    assert parse_plan(plan_to_dict(plan)) == plan
    assert "requeue" not in plan_to_dict(Plan("x"))  # old readers see the old shape
    # the shipped JSON Schemas accept them (and the node facts the policy reads)
    borrower = replace(borrower, cpu_load_max_cores=8.0, cpu_load_window_s=60.0)
    facts = replace(
        node(), membw_avail_gbps=10.0, membw_baseline_gbps=20.0, llc_ways_free=3, facts_at_s=1.0
    )
    held = replace(gpu_job(), cpu_cores_held=4)
    with_held = Snapshot((node(),), (held, borrower), (), 1.0)
    assert parse_snapshot(snapshot_to_dict(with_held)) == with_held
    jsonschema.validate(snapshot_to_dict(with_held), json.loads(schema_text("snapshot")))
    jsonschema.validate(
        snapshot_to_dict(Snapshot((facts,), (gpu_job(), borrower), (), 1.0)),
        json.loads(schema_text("snapshot")),
    )
    jsonschema.validate(plan_to_dict(plan), json.loads(schema_text("plan")))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "collocate: {monitor_fraction: 0}",
            "collocate.monitor_fraction: 0 is out of range (allowed: a number in (0, 1]",
        ),
        ("collocate: {monitor_fraction: 1.5}", "collocate.monitor_fraction: 1.5 is out of range"),
        ("collocate: {copy_bw_limit_mbps: -1}", "collocate.copy_bw_limit_mbps: -1 is out of"),
        ("collocate: {max_harvest_cores: -2}", "collocate.max_harvest_cores: -2 is out of range"),
        ("collocate: {max_harvest_cores: 2.5}", "collocate.max_harvest_cores: expected an int"),
    ],
)
def test_bad_settings_name_the_key_and_the_range(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path, environ={})
    assert says in str(info.value), str(info.value)


def test_settings_reach_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "collocate: {monitor_fraction: 0.2, max_harvest_cores: 2, "
        "copy_bw_limit_mbps: 100}\npolicy: {name: collocate}\n"
    )
    from coshare.cli.main import policy_options
    from coshare.policies.gang import GangPlanner

    policy = make_policy("collocate", policy_options(load_config(path, environ={})))
    assert isinstance(policy, GangPlanner)  # every policy is wrapped (gangs: refused here)
    assert policy.inner == CollocatePolicy(0.2, 2, 100.0)
    assert policy.refuse_gangs is not None
    default = make_policy("collocate", PolicyOptions())
    assert isinstance(default, GangPlanner)
    assert default.inner == CollocatePolicy(1 / 3, 9, 300.0)


@st.composite
def collocation_snapshots(draw: st.DrawFn) -> Snapshot:
    """Nodes each with at most one GPU job of random load, age, walltime and copy bandwidth,
    borrowers (sometimes more than its load now allows), and pending GPU and CPU jobs."""
    nodes, running = [], []
    for i in range(draw(st.integers(1, 4))):
        cores = draw(st.sampled_from((4, 8, 12, 16)))
        n = node(f"n{i}", cores)
        nodes.append(n)
        if not draw(st.booleans()):
            continue
        load = draw(st.one_of(st.none(), st.floats(0, cores + 2, allow_nan=False)))
        wait = st.one_of(st.none(), st.floats(0, cores))
        g = RunningJob(
            f"g{i}",
            n.name,
            ("0", "1", "2"),
            1024,
            1024,
            cores * 1000,
            2048,
            start_time_s=draw(st.floats(0, 900)),
            cpu_load_cores=load,
            cpu_load_last_cores=draw(st.one_of(st.none(), st.floats(0, cores))),
            walltime_s=draw(st.one_of(st.none(), st.floats(1, 2000))),
            copy_bw_mbps=draw(st.one_of(st.none(), st.floats(0, 700))),
            cpu_cores_held=draw(st.one_of(st.none(), st.integers(1, cores))),
            cpu_wait_cores=draw(wait),
            cpu_wait_last_cores=draw(wait),
        )
        running.append(g)
        for k in range(draw(st.integers(0, 3))):
            running.append(
                RunningJob(
                    f"b{i}-{k}",
                    n.name,
                    (),
                    cpu_milli=draw(st.integers(1, 4)) * 1000,
                    memory_mib=256,
                    start_time_s=draw(st.floats(0, 999)),
                    harvest_from=g.id,
                )
            )
    pending = []
    for k in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            pending.append(cpu_job(f"c{k}", draw(st.integers(1, 10)), draw(st.floats(0, 99))))
        else:
            pending.append(
                Job(
                    f"p{k}",
                    512,
                    512,
                    device_count=draw(st.integers(1, 3)),
                    cpu_milli=draw(st.integers(1, 16)) * 1000,
                    memory_mib=512,
                )
            )
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), now_s=1000.0)


@given(
    snapshot=collocation_snapshots(),
    p_m=st.floats(0.01, 1.0),
    p_b=st.integers(0, 16),
    limit=st.floats(0, 1000),
)
def test_plans_keep_every_promise_and_give_back_what_a_risen_load_needs(
    snapshot: Snapshot, p_m: float, p_b: int, limit: float
) -> None:
    policy = CollocatePolicy(p_m, p_b, limit)
    plan = policy.plan(snapshot)
    assert check_plan(snapshot, plan) == []
    assert plan == policy.plan(snapshot)  # deterministic
    # After the requeues leave, no donor lends more than its load leaves idle.
    gone = {u.job for u in plan.requeue}
    after = replace(
        snapshot, running=tuple(r for r in snapshot.running if r.id not in gone), pending=()
    )
    donors, _ = policy.donors(after)
    assert all(d.open_milli >= 0 for d in donors)
    for a in plan.assignments:
        if a.harvest_from is not None:
            job = next(j for j in snapshot.pending if j.id == a.job)
            donor = next(r for r in snapshot.running if r.id == a.harvest_from)
            assert not job.needs_device and donor.walltime_s is not None
            assert donor.copy_bw_mbps is not None and donor.copy_bw_mbps <= limit
            assert snapshot.now_s is not None and donor.start_time_s is not None
            assert snapshot.now_s - donor.start_time_s >= p_m * donor.walltime_s
            # never from a lender whose load plus run-queue wait fills the cores it holds
            demand = measured_demand(donor)
            assert demand is not None and not saturated(donor, demand)
