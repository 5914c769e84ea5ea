"""Containment (coshare.cycle.containment): a policy that fails on one job's or one node's input
leaves that job or node out, and the cycle plans and writes everything else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.scheduler import scheduler_group
from coshare.cycle.containment import MAX_ROUNDS, MAX_WORK, plan_contained
from coshare.cycle.run import run_cycle
from coshare.cycle.verify import check_plan
from coshare.errors import PlanInvariantError
from coshare.model import Device, Job, Node, Plan, Snapshot
from coshare.policies import make_policy
from coshare.schema import parse_snapshot, snapshot_to_dict

from tests.faulty_policies import CrashesOnJob, CrashesOnNode, MisplacesJob
from tests.memory_queue import MemoryQueue

KNAPSACK = make_policy("knapsack")


def cluster(nodes: int = 4, jobs: int = 12) -> Snapshot:
    """Phi-like nodes with room for every job, and small jobs in submit order."""
    return Snapshot(
        tuple(Node(f"n{i}", 16000, 65536, (Device("0", 8192, 240),)) for i in range(nodes)),
        (),
        tuple(Job(f"{k}.0", 512, 30, submit_time_s=float(k)) for k in range(jobs)),
        now_s=100.0,
    )


def check(snapshot: Snapshot, plan: Plan) -> list[str]:
    return check_plan(snapshot, plan)


def test_a_policy_that_crashes_on_one_job_places_every_other_job() -> None:
    snap = cluster()
    queue = MemoryQueue(snap)
    report = run_cycle(queue, CrashesOnJob(KNAPSACK, "7.0"), queue)
    (written,) = queue.written
    assert written.placed_jobs == {j.id for j in snap.pending} - {"7.0"}
    (left,) = [u for u in written.unplaced if u.job == "7.0"]
    assert left.code == "policy_failed"
    assert "the knapsack policy failed while planning this job (IndexError: index 0" in left.reason
    (contained,) = report.contained
    assert contained.jobs == ("7.0",) and contained.nodes == ()
    assert contained.error.startswith("IndexError: index 0 is out of bounds")
    # the input that reproduces it: that job alone, with the cluster; it still fails
    assert [j.id for j in contained.snapshot.pending] == ["7.0"]
    assert contained.snapshot.nodes == snap.nodes
    with pytest.raises(IndexError):
        CrashesOnJob(KNAPSACK, "7.0").plan(contained.snapshot)
    assert check_plan(snap, written) == []


def test_a_plan_that_fails_the_check_for_one_job_places_every_other_job() -> None:
    snap = cluster()
    queue = MemoryQueue(snap)
    report = run_cycle(queue, MisplacesJob(KNAPSACK, "3.0"), queue)
    (written,) = queue.written
    assert written.placed_jobs == {j.id for j in snap.pending} - {"3.0"}
    assert [u.code for u in written.unplaced if u.job == "3.0"] == ["policy_failed"]
    (contained,) = report.contained
    assert contained.error == (
        "the plan check found: job 3.0 is assigned to unknown device n0/no-such-device"
    )


def test_several_bad_jobs_are_each_left_out() -> None:
    snap = cluster(jobs=20)

    class TwoBugs(CrashesOnJob):
        def plan(self, snapshot: Snapshot) -> Plan:
            if any(j.id == "15.0" for j in snapshot.pending):
                raise KeyError("15.0")
            return super().plan(snapshot)

    result = plan_contained(TwoBugs(KNAPSACK, "2.0").plan, snap, check, "knapsack")
    assert sorted(c.jobs for c in result.contained) == [("15.0",), ("2.0",)]
    assert result.plan.placed_jobs == {j.id for j in snap.pending} - {"2.0", "15.0"}


def test_a_failure_that_needs_two_jobs_together_leaves_out_both() -> None:
    snap = cluster(jobs=16)

    @as_policy
    def pair(snapshot: Snapshot) -> Plan:
        ids = {j.id for j in snapshot.pending}
        if {"4.0", "11.0"} <= ids:
            raise ValueError("these two together")
        return KNAPSACK.plan(snapshot)

    result = plan_contained(pair, snap, check, "knapsack")
    (contained,) = result.contained
    assert sorted(contained.jobs) == ["11.0", "4.0"]
    assert len(result.plan.placed_jobs) == 14


def test_a_node_whose_input_breaks_the_policy_is_left_out_and_the_rest_planned() -> None:
    snap = cluster()
    queue = MemoryQueue(snap)
    report = run_cycle(queue, CrashesOnNode(KNAPSACK, "n2"), queue)
    (written,) = queue.written
    assert written.placed_jobs == {j.id for j in snap.pending}  # every job, elsewhere
    assert not any(a.node == "n2" for a in written.assignments)
    (contained,) = report.contained
    assert contained.nodes == ("n2",) and contained.jobs == ()
    assert [n.name for n in contained.snapshot.nodes] == ["n2"]
    assert any(note.startswith("nodes n2 left out of this cycle's plan") for note in written.notes)


def test_a_policy_that_fails_on_everything_stops_the_cycle_as_before() -> None:
    snap = cluster()

    class Always(CrashesOnJob):
        def plan(self, snapshot: Snapshot) -> Plan:
            raise RuntimeError("broken setting")

    queue = MemoryQueue(snap)
    with pytest.raises(RuntimeError, match="broken setting"):
        run_cycle(queue, Always(KNAPSACK, "x"), queue)
    assert queue.written == []

    class AlwaysUnsound(MisplacesJob):
        def plan(self, snapshot: Snapshot) -> Plan:
            return Plan(self.name, ())  # loses every pending job

    with pytest.raises(PlanInvariantError, match=r"pending job 0\.0 is missing from the plan"):
        run_cycle(queue, AlwaysUnsound(KNAPSACK, "x"), queue)
    assert queue.written == []


def test_bisection_is_bounded_when_every_job_fails_alone() -> None:
    snap = cluster(jobs=40)
    calls = 0

    def every_job(snapshot: Snapshot) -> Plan:
        nonlocal calls
        calls += 1
        if snapshot.pending:
            raise ValueError("any job")
        return KNAPSACK.plan(snapshot)

    queue = MemoryQueue(snap)
    with pytest.raises(ValueError, match="any job"):
        run_cycle(queue, as_policy(every_job), queue)
    assert queue.written == []
    assert calls < MAX_ROUNDS * 30  # a few runs per round, not one per job and node


def test_the_search_plans_a_bounded_amount_when_many_jobs_fail_together() -> None:
    # No half of the jobs fails alone, only enough of them together: halving alone would
    # plan large parts of the snapshot again and again. The search stops at its budget and
    # the failure stands, with nothing written.
    snap = cluster(jobs=200)
    planned = 0

    def crowds(snapshot: Snapshot) -> Plan:
        nonlocal planned
        planned += len(snapshot.pending) + 1
        if len(snapshot.pending) >= 60:
            raise ValueError("too many at once")
        return KNAPSACK.plan(snapshot)

    queue = MemoryQueue(snap)
    with pytest.raises(ValueError, match="too many at once"):
        run_cycle(queue, as_policy(crowds), queue)
    assert queue.written == []
    one_run = len(snap.pending) + 1
    assert planned <= (MAX_WORK + 2) * one_run  # the budget, and the run that crossed it


def test_the_budget_leaves_room_for_every_round() -> None:
    # MAX_ROUNDS jobs that each make the policy fail, among many: each round finds one, and
    # the search's budget lets every round run.
    snap = cluster(nodes=8, jobs=400)
    culprits = {f"{k}.0" for k in range(7, 400, 400 // MAX_ROUNDS)}
    assert len(culprits) == MAX_ROUNDS
    policy: object = KNAPSACK
    for job in sorted(culprits):
        policy = CrashesOnJob(policy, job)
    queue = MemoryQueue(snap)
    report = run_cycle(queue, policy, queue)  # type: ignore[arg-type]
    assert {j for c in report.contained for j in c.jobs} == culprits
    (written,) = queue.written
    failed = {u.job for u in written.unplaced if u.code == "policy_failed"}
    assert failed == culprits
    assert written.placed_jobs and not written.placed_jobs & culprits


def test_the_usual_path_runs_the_policy_once() -> None:
    calls = 0

    def counted(snapshot: Snapshot) -> Plan:
        nonlocal calls
        calls += 1
        return KNAPSACK.plan(snapshot)

    result = plan_contained(counted, cluster(), check, "knapsack")
    assert calls == 1 and result.contained == ()


def test_the_reproducing_snapshot_round_trips_through_the_contract() -> None:
    snap = cluster()
    report = run_cycle(MemoryQueue(snap), CrashesOnJob(KNAPSACK, "5.0"), MemoryQueue(snap))
    (contained,) = report.contained
    again = parse_snapshot(snapshot_to_dict(contained.snapshot))
    assert [j.id for j in again.pending] == ["5.0"]


class as_policy:  # used as a decorator, so named as a function
    """A plan function as a policy named knapsack."""

    name = "knapsack"

    def __init__(self, plan: object) -> None:
        self._plan = plan

    def __call__(self, snapshot: Snapshot) -> Plan:
        return self.plan(snapshot)

    def plan(self, snapshot: Snapshot) -> Plan:
        return self._plan(snapshot)  # type: ignore[operator,no-any-return]


@pytest.mark.parametrize("faulty", [CrashesOnJob, MisplacesJob])
def test_explain_says_why_a_job_left_out_waits_and_that_an_admin_acts(
    faulty: type[CrashesOnJob] | type[MisplacesJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    # coshare condor|slurm explain plans as the cycle does: the job the cycle leaves out is
    # explained as waiting with the cycle's reason, not as placed (nor a traceback).
    monkeypatch.setattr(
        "coshare.cli.scheduler.make_policy", lambda *a, **k: faulty(KNAPSACK, "3.0")
    )
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", Path("/nonexistent/coshare.yaml"))
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)
    group = scheduler_group("fake", "A stand-in.", lambda c: MemoryQueue(cluster()), lambda c: None)
    result = CliRunner().invoke(group, ["explain", "3", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["job"], data["state"], data["code"]) == ("3.0", "waiting", "policy_failed")
    assert "failed while planning this job" in data["reason"]
    # the remedy is the admin's, not a device that would take it now
    (remedy,) = data["remedies"]
    assert remedy.startswith("an admin:") and "reproduces" in remedy
    other = json.loads(CliRunner().invoke(group, ["explain", "4", "--output", "json"]).stdout)
    assert other["state"] == "placed"
