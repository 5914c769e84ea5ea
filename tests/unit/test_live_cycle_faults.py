"""Whole cycles on the in-memory scheduler, with faults injected at each step of the write
protocol: requeue, close and its confirmation, refuse, place (a batch that fails in part, a
fence or a kill between batches), a job that vanishes between read and write, a second
planner whose cycle runs inside the first's, and the wait reasons. After each, the queue is
consistent (no open gate without a placement, nothing oversubscribed by started jobs, no
device booked twice by open gates and started jobs) and later cycles finish every job."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from coshare.coord.cycle import EngineGate
from coshare.cycle.run import CycleReport, run_cycle
from coshare.errors import LeaseLost, SchedulerError, StoppedBetweenBatches
from coshare.ledger.book import Placed
from coshare.model import MILLI, Device, Job, Node, Plan, Unplaced
from coshare.policies import make_policy
from coshare.policies.base import Policy
from coshare.sim.memory_claims import ClaimsStore, MemoryClaims
from coshare.sim.memory_scheduler import (
    Faults,
    Killed,
    MemoryAdapter,
    MemoryScheduler,
    problems,
)

REPLAN_S = 300.0


def nodes(count: int = 2, devices: int = 1) -> tuple[Node, ...]:
    return tuple(
        Node(
            name=f"n{i + 1}",
            cpu_milli=16 * MILLI,
            memory_mib=65536,
            devices=tuple(Device(str(d), 8192, 240, "phi") for d in range(devices)),
        )
        for i in range(count)
    )


def gpu_job(i: int, memory: int = 6000, **kw: object) -> Job:
    return Job(f"{i}", device_memory_mib=memory, device_threads=120, memory_mib=1024, **kw)  # type: ignore[arg-type]


def queue(
    jobs: int, *, count: int = 2, devices: int = 1, faults: Faults | None = None, **kw: object
) -> MemoryScheduler:
    """A scheduler with ``jobs`` jobs of 6000 MiB (one fits a device), each running 10 s."""
    s = MemoryScheduler(
        nodes(count, devices),
        replan_after_s=REPLAN_S,
        faults=faults,
        **kw,  # type: ignore[arg-type]
    )
    for i in range(1, jobs + 1):
        s.submit(gpu_job(i), run_s=10.0)
    return s


def exclusive() -> Policy:
    return make_policy("exclusive")


def cycle(s: MemoryScheduler, adapter: MemoryAdapter | None = None, **kw: object) -> CycleReport:
    adapter = adapter or MemoryAdapter(s)
    report = run_cycle(adapter, exclusive(), adapter, strict_threads=False, **kw)  # type: ignore[arg-type]
    assert consistent(s) == []
    return report


def consistent(s: MemoryScheduler) -> list[str]:
    """:func:`problems`, and no device whose open gates and started jobs together take more
    memory than it has (a planner booked it twice)."""
    found = problems(s)
    booked: dict[tuple[str, str], int] = {}
    for r in s.records.values():
        holding = r.state == "running" or (r.state == "pending" and r.gate_open)
        if not holding or r.placed is None:
            continue
        for part in r.placed.spots:
            for d in part.devices:
                key = (part.node, d)
                booked[key] = booked.get(key, 0) + r.job.device_memory_mib
    found += [f"device {n}/{d} booked twice" for (n, d), m in booked.items() if m > 8192]
    return found


def finish(s: MemoryScheduler, *, cycles: int = 50, every_s: float = 30.0) -> None:
    """Run cycles (faults cleared) until every job ended; each started once."""
    s.faults = Faults()
    adapter = MemoryAdapter(s)
    for _ in range(cycles):
        s.advance(s.now + every_s)
        if all(r.state == "ended" for r in s.records.values()):
            break
        cycle(s, adapter)
        s.start_ready()
        assert consistent(s) == []
    left = [r.id for r in s.records.values() if r.state != "ended"]
    assert left == []


def gated(s: MemoryScheduler) -> set[str]:
    return {r.id for r in s.records.values() if r.state == "pending" and r.gate_open}


def running(s: MemoryScheduler) -> set[str]:
    return {r.id for r in s.running()}


# -- the plain cycle --------------------------------------------------------------------------


def test_a_cycle_places_and_each_job_starts_on_the_node_its_placement_names() -> None:
    s = queue(3)
    report = cycle(s)
    assert sorted(report.apply.applied) == ["1", "2"]
    s.start_ready()
    for job_id in ("1", "2"):
        r = s.records[job_id]
        assert r.state == "running"
        assert r.placed is not None
        assert tuple(h.node for h in r.holds) == (r.placed.node,)
    finish(s)


def test_a_second_cycle_counts_what_the_first_placed_and_writes_nothing() -> None:
    s = queue(3, faults=Faults(stuck={"1", "2"}))
    first = cycle(s)
    placed = {j: s.records[j].placed for j in ("1", "2")}
    second = cycle(s)
    assert sorted(first.apply.applied) == ["1", "2"]
    assert (second.apply.applied, second.apply.withdrawn) == ((), ())
    assert {j: s.records[j].placed for j in ("1", "2")} == placed
    assert "3" not in gated(s)  # the devices 1 and 2 hold were not booked again


def test_a_placement_that_never_starts_expires_and_is_planned_again() -> None:
    s = queue(1, faults=Faults(stuck={"1"}))
    cycle(s)
    at = s.records["1"].placed
    assert at is not None
    s.advance(REPLAN_S - 1)
    assert cycle(s).apply.withdrawn == ()  # not yet expired: it still counts
    assert s.records["1"].placed == at
    s.advance(REPLAN_S + 1)
    s.faults.stuck.clear()
    placed_earlier(s, "1", "n2", at_s=0.0)  # where the plan will not keep it
    report = cycle(s)
    assert report.apply.applied == ("1",)  # withdrawn and placed anew
    [withdrawn] = report.apply.withdrawn
    assert "not started within cycle.replan_after_s" in withdrawn.detail
    placed = s.records["1"].placed
    assert placed is not None and placed.node == "n1" and placed.at_s > at.at_s
    finish(s)


# -- requeue ----------------------------------------------------------------------------------


def requeue_plan(*jobs: str) -> Plan:
    return Plan(
        policy="test", requeue=tuple(Unplaced(j, "its GPU job needs its cores") for j in jobs)
    )


def test_requeue_puts_a_running_job_back_to_pending_with_its_gate_shut() -> None:
    s = queue(2)
    cycle(s)
    s.start_ready()
    adapter = MemoryAdapter(s)
    adapter.read()
    report = adapter.apply(requeue_plan("1"), (), dry_run=False)
    assert [o.job for o in report.requeued] == ["1"]
    r = s.records["1"]
    assert (r.state, r.gate_open, r.placed) == ("pending", False, None)
    assert consistent(s) == []
    finish(s)
    assert s.records["1"].starts == 2


def test_a_requeue_that_fails_is_reported_and_the_job_keeps_running() -> None:
    s = queue(2, faults=Faults(fail={("requeue", "1"): "scontrol: Job is not requeueable"}))
    cycle(s)
    s.start_ready()
    adapter = MemoryAdapter(s)
    adapter.read()
    report = adapter.apply(requeue_plan("1", "2"), (), dry_run=False)
    assert [o.job for o in report.requeued] == ["2"]
    assert [o.job for o in report.failed] == ["1"]
    assert "not requeueable" in report.failed[0].detail
    assert s.records["1"].state == "running"
    assert consistent(s) == []
    finish(s)


# -- close and its confirmation -----------------------------------------------------------------


def placed_earlier(s: MemoryScheduler, job: str, node: str, at_s: float) -> None:
    """``job`` placed on ``node``'s device 0 at ``at_s``, its gate open (an earlier cycle's
    write)."""
    r = s.records[job]
    r.placed = Placed(node, ("0",), at_s, r.job.device_memory_mib, r.job.device_threads)
    s.open_gate(r)


def expired_then(s: MemoryScheduler) -> None:
    """Jobs 1 and 2 placed crosswise (1 on n2, 2 on n1: the plan moves both), stuck, past
    their timeout."""
    placed_earlier(s, "1", "n2", at_s=0.0)
    placed_earlier(s, "2", "n1", at_s=0.0)
    s.advance(REPLAN_S + 1)


def test_a_job_started_at_the_placement_being_withdrawn_stops_the_writes() -> None:
    s = queue(3, faults=Faults(stuck={"1", "2"}))
    expired_then(s)  # 3 waits

    def start_it(verb: str, jobs: Sequence[str]) -> None:
        if verb == "close" and "1" in jobs:
            s.faults.stuck.discard("1")
            s.start("1")  # the scheduler starts it at the placement being withdrawn

    s.faults.before = start_it
    report = cycle(s)
    assert report.apply.applied == ()
    assert any("started at an expired placement" in o.detail for o in report.apply.skipped)
    assert s.records["1"].state == "running"
    assert "1" not in gated(s)
    finish(s)


def test_a_gate_that_does_not_shut_stops_the_writes() -> None:
    s = queue(3, faults=Faults(stuck={"1", "2"}))
    expired_then(s)
    s.faults.fail[("close", "1")] = "scontrol: Access denied"
    s.faults.stuck.clear()
    before = {j: s.records[j].placed for j in ("1", "2", "3")}
    report = cycle(s)
    assert report.apply.applied == ()
    assert any("could not be withdrawn" in o.detail for o in report.apply.skipped)
    assert [o.job for o in report.apply.failed] == ["1"]
    assert s.records["3"].placed == before["3"] is None  # nothing new was written
    finish(s)


# -- refuse -----------------------------------------------------------------------------------


def test_a_refused_job_is_marked_and_never_starts_while_the_others_run() -> None:
    s = queue(2)
    s.records["2"].annotations["CoshareDeviceMemory"] = "nan"  # the user edits the job
    report = cycle(s)
    assert [o.job for o in report.apply.rejected] == ["2"]
    assert "CoshareDeviceMemory" in (s.records["2"].refusal or "")
    assert report.apply.applied == ("1",)
    for _ in range(3):
        s.advance(s.now + 30)
        cycle(s)
    assert s.records["2"].state == "pending" and not s.records["2"].gate_open
    assert s.records["1"].state == "ended"


def test_a_refusal_whose_mark_fails_is_reported_and_the_job_stays_shut() -> None:
    s = queue(2, faults=Faults(fail={("refuse", "2"): "slurm_update error"}))
    s.records["2"].annotations["CoshareDeviceMemory"] = "nan"
    report = cycle(s)
    assert [o.job for o in report.apply.failed] == ["2"]
    assert s.records["2"].refusal is None and not s.records["2"].gate_open
    assert report.apply.applied == ("1",)


# -- place ------------------------------------------------------------------------------------


def test_a_batch_that_fails_in_part_opens_only_the_gates_of_what_was_written() -> None:
    faults = Faults(
        fail={("place", "2"): "Invalid node name specified", ("open", "3"): "release failed"}
    )
    s = queue(4, count=4, faults=faults, batch_size=2)
    report = cycle(s)
    assert sorted(report.apply.applied) == ["1", "4"]
    assert sorted(o.job for o in report.apply.failed) == ["2", "3"]
    assert s.records["2"].placed is None and not s.records["2"].gate_open
    assert s.records["3"].placed is not None and not s.records["3"].gate_open
    assert gated(s) == {"1", "4"}
    finish(s)


def test_a_fence_that_raises_between_batches_leaves_each_batch_complete() -> None:
    s = queue(6, count=6, batch_size=2)
    calls = {"n": 0}

    def fence() -> None:
        calls["n"] += 1
        if calls["n"] > 3:  # the first check, the first batch (and its second transaction)
            raise LeaseLost("gpu", "a", "b", "another instance took it over")

    with pytest.raises(StoppedBetweenBatches):
        cycle(s, before_write=fence)
    assert consistent(s) == []
    assert len(gated(s)) in (0, 2)  # the first batch complete or not sent, never half
    assert all(s.records[j].gate_open == (s.records[j].placed is not None) for j in gated(s))
    finish(s)


def test_a_planner_killed_after_a_batch_leaves_the_queue_consistent() -> None:
    s = queue(6, count=6, faults=Faults(kill_after_batches=1), batch_size=2)
    with pytest.raises(Killed):
        cycle(s)
    assert consistent(s) == []
    assert len(gated(s)) == 2
    assert all(s.records[j].placed is None for j in s.records if j not in gated(s))
    finish(s)


def test_a_planner_killed_between_any_two_writes_leaves_the_queue_consistent() -> None:
    """As a SIGKILL between two of the scheduler's transactions: a cycle that places four
    jobs in batches of one and notes why eight wait dies before its first, second, third...
    write, until one completes. After every death the queue is consistent, and the cycles
    that follow finish every job."""
    deaths = 0
    for budget in range(40):
        s = queue(12, count=2, devices=2, batch_size=1)
        calls = [0]

        def die(
            verb: str, jobs: Sequence[str], budget: int = budget, calls: list[int] = calls
        ) -> None:
            if verb == "read":
                return
            if calls[0] == budget:
                raise Killed(f"killed before write {budget + 1} ({verb})")
            calls[0] += 1

        s.faults.before = die
        try:
            cycle(s)
        except Killed:
            deaths += 1
            assert consistent(s) == []
            assert len(gated(s)) == max(0, min(budget - 1, 4))  # whole batches, in order
            finish(s)
            continue
        break
    assert deaths == 6  # before the reread, each of the four batches, and the notes
    assert len(gated(s)) == 4
    finish(s)


def test_an_unreachable_scheduler_writes_no_placement() -> None:
    s = queue(2, faults=Faults(unreachable=True))
    with pytest.raises(SchedulerError):
        cycle(s)
    assert gated(s) == set()
    assert consistent(s) == []
    finish(s)


def test_a_placement_the_writer_cannot_spell_fails_alone() -> None:
    s = queue(2, faults=Faults(unwritable={"1": "node name has a comma"}))
    report = cycle(s)
    assert report.apply.applied == ("2",)
    assert [o.job for o in report.apply.failed] == ["1"]
    assert "comma" in report.apply.failed[0].detail
    finish(s)


# -- a job that vanishes, a second planner ------------------------------------------------------


def test_a_job_that_vanishes_between_read_and_write_is_skipped() -> None:
    s = queue(2)
    s.faults.before = lambda verb, jobs: s.cancel("1") if verb == "reread" else None
    report = cycle(s)
    assert report.apply.applied == ("2",)
    assert [o.job for o in report.apply.skipped] == ["1"]
    assert "left the queue" in report.apply.skipped[0].detail
    assert "1" not in s.records
    finish(s)


def test_a_job_that_starts_between_read_and_write_is_not_placed_again() -> None:
    s = queue(2, faults=Faults(stuck={"1"}))
    cycle(s)
    s.advance(REPLAN_S + 1)
    s.faults.stuck.clear()
    # after the read, before the write: job 1 starts where it was placed before
    s.faults.before = lambda verb, jobs: s.start_ready() if verb == "reread" else None
    report = cycle(s)
    assert "1" not in report.apply.applied
    assert s.records["1"].state == "running"
    finish(s)


def planners(s: MemoryScheduler, store: ClaimsStore, name: str) -> tuple[MemoryAdapter, EngineGate]:
    return MemoryAdapter(s), EngineGate(MemoryClaims(store, name), global_ids=True)


@pytest.mark.parametrize("when", ["read", "reread"], ids=["before-a-plans", "before-a-writes"])
@pytest.mark.parametrize("b_jobs_start", [False, True], ids=["b-gates-open", "b-jobs-started"])
def test_two_planners_interleaved_never_book_a_device_twice(when: str, b_jobs_start: bool) -> None:
    """A reads; B reads and writes (its jobs started or not); A writes, each through its
    gate on the engine's claims (coordination.dsn): A skips what changed and books no
    device B's placements hold."""
    s = queue(6, count=3)
    store = ClaimsStore()
    a, a_gate = planners(s, store, "a")
    b, b_gate = planners(s, store, "b")
    b_report: list[CycleReport] = []

    def b_cycle(verb: str, jobs: Sequence[str]) -> None:
        if verb == when and not b_report:
            s.faults.before = None
            b_report.append(
                run_cycle(b, make_policy("random"), b, strict_threads=False, gate=b_gate)
            )
            if b_jobs_start:
                s.start_ready()

    s.faults.before = b_cycle
    report = run_cycle(a, exclusive(), a, strict_threads=False, gate=a_gate)
    assert b_report
    assert consistent(s) == []
    s.start_ready()
    assert consistent(s) == []
    written = set(report.apply.applied) & set(b_report[0].apply.applied)
    assert written == set()  # no job written by both
    finish(s)


def no_engine(s: MemoryScheduler, b_jobs_start: bool) -> tuple[CycleReport, CycleReport]:
    """A reads; B's whole cycle; A plans and writes: no claims (no coordination.dsn)."""
    a, b = MemoryAdapter(s), MemoryAdapter(s)
    done: list[CycleReport] = []

    def b_cycle(verb: str, jobs: Sequence[str]) -> None:
        if verb == "read" and not done:
            s.faults.before = None
            done.append(run_cycle(b, make_policy("random"), b, strict_threads=False))
            if b_jobs_start:
                s.start_ready()

    s.faults.before = b_cycle
    return run_cycle(a, exclusive(), a, strict_threads=False), done[0]


def test_without_the_engine_a_skips_what_changed_and_withdraws_what_b_opened() -> None:
    s = queue(6, count=3)
    a, b = no_engine(s, b_jobs_start=False)
    assert b.apply.applied
    changed = {o.job for o in a.apply.skipped}
    assert changed and changed <= set(b.apply.applied)
    assert {o.job for o in a.apply.withdrawn} == set(b.apply.applied)
    assert consistent(s) == []
    finish(s)


def test_without_the_engine_a_job_b_started_meanwhile_is_not_booked_twice() -> None:
    s = queue(6, count=3)
    no_engine(s, b_jobs_start=True)
    assert consistent(s) == []


# -- wait reasons, gangs --------------------------------------------------------------------------


def test_jobs_left_waiting_get_their_reason_and_a_failed_note_stops_nothing() -> None:
    s = queue(4, faults=Faults(fail={("note", "4"): "slurm_update error"}))
    report = cycle(s)
    assert sorted(report.apply.applied) == ["1", "2"]
    assert report.apply.noted == ("3",)
    assert s.records["3"].wait_reason
    assert s.records["4"].wait_reason is None
    finish(s)


def test_a_gang_is_placed_whole_and_starts_on_every_node_of_it() -> None:
    s = MemoryScheduler(nodes(3), replan_after_s=REPLAN_S)
    s.submit(
        Job("7", device_memory_mib=2000, device_threads=60, memory_mib=1024, nodes=2, processes=2),
        run_s=10.0,
    )
    report = cycle(s)
    assert report.apply.applied == ("7",)
    s.start_ready()
    r = s.records["7"]
    assert r.placed is not None and len(r.placed.parts) == 2
    assert sorted(h.node for h in r.holds) == sorted(p.node for p in r.placed.parts)
    finish(s)
