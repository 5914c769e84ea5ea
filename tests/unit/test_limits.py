"""The scheduler's limits (coshare.ledger.limits): a job the scheduler would not start because
of a QOS, association, group quota or concurrency limit is not placed, and says which limit
and its numbers; the snapshot's JSON carries the limits and each job's charges."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.cycle.run import checked_plan, run_cycle
from coshare.errors import SnapshotError
from coshare.ledger.limits import admit, withhold
from coshare.ledger.wait_reasons import wait_reason
from coshare.model import MILLI, Assignment, Device, Job, Limit, Node, Plan, Snapshot
from coshare.policies import make_policy
from coshare.schema import parse_snapshot, snapshot_to_dict
from coshare.sim.memory_scheduler import MemoryAdapter, MemoryScheduler

GPU4 = Limit("u-alice-gpu", "MaxTRESPerUser gres/gpu=4", "user alice", 4, 4)


def node(name: str, devices: int = 1) -> Node:
    return Node(
        name,
        16 * MILLI,
        65536,
        tuple(Device(str(d), 8192, 240) for d in range(devices)),
    )


def job(ident: str, *charges: tuple[str, float], priority: int = 0, submit: float = 0) -> Job:
    return Job(
        ident,
        device_memory_mib=6000,
        device_threads=100,
        memory_mib=1024,
        priority=priority,
        submit_time_s=submit,
        charges=charges,
    )


def test_a_job_over_a_limit_alone_is_withheld_with_the_limits_numbers() -> None:
    snap = Snapshot((node("n1"),), pending=(job("1", ("u-alice-gpu", 1)), job("2")), limits=(GPU4,))
    planned, waits = withhold(snap)
    assert [j.id for j in planned.pending] == ["2"]
    assert [(u.job, u.code) for u in waits] == [("1", "no_room")]
    assert waits[0].reason.startswith("MaxTRESPerUser gres/gpu=4: user alice holds 4")
    assert "(max 4); this job needs 1" in waits[0].reason


def test_placements_are_admitted_in_priority_order_within_the_limit() -> None:
    limit = Limit("acct-gpu", "GrpTRES gres/gpu=2", "account physics", 2, 1)
    low = job("low", ("acct-gpu", 1), priority=10, submit=0)
    high = job("high", ("acct-gpu", 1), priority=500, submit=5)
    snap = Snapshot((node("n1"), node("n2")), pending=(low, high), limits=(limit,))
    plan = Plan("x", (Assignment("low", "n1", ("0",)), Assignment("high", "n2", ("0",))))
    admitted = admit(snap, plan)
    assert admitted.placed_jobs == {"high"}
    [wait] = admitted.unplaced
    assert wait.job == "low"
    assert wait.reason == ("GrpTRES gres/gpu=2: account physics holds 2 (max 2); this job needs 1")


def test_every_policy_respects_the_limits_and_accounts_for_every_job() -> None:
    limit = Limit("u-bob-jobs", "MaxJobsPerUser 2", "user bob", 2, 0)
    pending = tuple(job(str(i), ("u-bob-jobs", 1), priority=i) for i in range(5))
    snap = Snapshot((node("n1", 4), node("n2", 4)), pending=pending, limits=(limit,))
    for name in ("exclusive", "knapsack", "sharepack", "bestfit", "fgd"):
        plan = checked_plan(make_policy(name), snap).plan
        assert plan.placed_jobs == {"4", "3"}, name  # the two of highest priority
        assert sorted(u.job for u in plan.unplaced) == ["0", "1", "2"], name
        assert all("MaxJobsPerUser 2: user bob holds 2" in u.reason for u in plan.unplaced)


def test_the_wait_reason_written_to_the_queue_names_the_limit() -> None:
    snap = Snapshot((node("n1"),), pending=(job("1", ("u-alice-gpu", 1)),), limits=(GPU4,))
    [wait] = checked_plan(make_policy("exclusive"), snap).plan.unplaced
    assert wait_reason(wait).startswith("no_room: MaxTRESPerUser gres/gpu=4: user alice holds 4")


def test_snapshot_json_carries_limits_and_charges() -> None:
    snap = Snapshot((node("n1"),), pending=(job("1", ("u-alice-gpu", 2)), job("2")), limits=(GPU4,))
    data = snapshot_to_dict(snap)
    assert data["limits"] == [
        {
            "id": "u-alice-gpu",
            "name": "MaxTRESPerUser gres/gpu=4",
            "holder": "user alice",
            "max": 4,
            "used": 4,
        }
    ]
    pending = data["pending"]
    assert isinstance(pending, list)
    assert pending[0]["charges"] == {"u-alice-gpu": 2}
    assert "charges" not in pending[1]
    assert parse_snapshot(json.loads(json.dumps(data))) == snap
    assert "limits" not in snapshot_to_dict(Snapshot((node("n1"),)))


def snapshot_with(limit: dict[str, object], charges: dict[str, object]) -> dict[str, object]:
    return {
        "nodes": [{"name": "n1", "cores": 4, "memory_mib": 8192}],
        "pending": [{"id": "7", "cores": 1, "charges": charges}],
        "limits": [limit],
    }


LIMIT = {"id": "q1", "name": "MaxTRESPerUser cpu=8", "holder": "user alice", "max": 8, "used": 0}


@pytest.mark.parametrize(
    ("limit", "charges", "expected"),
    [
        (LIMIT, {"q2": 1}, "pending job \"7\": field 'charges.q2' is 1.0: it names no limit"),
        (LIMIT, {"q1": -1}, "pending job \"7\": field 'charges.q1' is -1.0: it is negative"),
        (LIMIT, {"q1": 1e13}, "field 'charges.q1' is 10000000000000.0: it exceeds 1000000000000"),
        (LIMIT, {"q1": True}, "field 'charges.q1' is true: it is not a number"),
        ({**LIMIT, "max": math.inf}, {}, "limit \"q1\": field 'max' is Infinity: it is not"),
        ({**LIMIT, "used": -2}, {}, "limit \"q1\": field 'used' is -2.0: it is negative"),
        ({**LIMIT, "name": "x" * 201}, {}, "limit \"q1\": field 'name'"),
        ({**LIMIT, "holder": "a\nb"}, {}, "limit \"q1\": field 'holder'"),
        ({**LIMIT, "id": " a"}, {}, "limit[0]: field 'id'"),
        ({**LIMIT, "extra": 1}, {}, 'limit "q1": unknown field'),
    ],
)
def test_bad_limits_and_charges_are_refused_naming_the_field(
    limit: dict[str, object], charges: dict[str, object], expected: str
) -> None:
    with pytest.raises(SnapshotError) as raised:
        parse_snapshot(snapshot_with(limit, charges))
    assert expected in str(raised.value)


def test_whole_cycle_on_the_in_memory_scheduler_keeps_a_job_over_a_limit_waiting() -> None:
    """Two GPUs free, alice may hold one: her second job waits, named, until her first ends;
    bob's job is placed beside it. The scheduler (which also enforces the limit) never has a
    placed job it will not start."""
    limit = Limit("u-alice-gpu", "MaxTRESPerUser gres/gpu=1", "user alice", 1, 0)
    s = MemoryScheduler((node("n1"), node("n2"), node("n3")), limits=(limit,))
    s.submit(job("a1", ("u-alice-gpu", 1), priority=9), run_s=10.0)
    s.submit(job("a2", ("u-alice-gpu", 1), priority=8), run_s=10.0)
    s.submit(job("b1", priority=1), run_s=10.0)
    adapter = MemoryAdapter(s)
    report = run_cycle(adapter, make_policy("exclusive"), adapter)
    assert report.plan.placed_jobs == {"a1", "b1"}
    assert s.records["a2"].wait_reason == (
        "no_room: MaxTRESPerUser gres/gpu=1: user alice holds 1 (max 1); this job needs 1"
    )
    s.advance(1.0)
    assert {r.id for r in s.running()} == {"a1", "b1"}
    # the next cycle counts a1's charge (running now) and still keeps a2 waiting
    report = run_cycle(adapter, make_policy("exclusive"), adapter)
    assert report.plan.placed_jobs == set()
    s.advance(11.0)  # a1 and b1 end
    report = run_cycle(adapter, make_policy("exclusive"), adapter)
    assert report.plan.placed_jobs == {"a2"}
    assert s.records["a2"].wait_reason is None


def test_plan_explain_names_the_limit(tmp_path: Path) -> None:
    snap = Snapshot(
        (node("n1"), node("n2")),
        pending=(job("1", ("u-alice-gpu", 1)), job("2")),
        limits=(GPU4,),
    )
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot_to_dict(snap)))
    result = CliRunner().invoke(cli, ["plan", str(path), "--explain", "1"])
    assert result.exit_code == 0, result.output
    assert "MaxTRESPerUser gres/gpu=4: user alice holds 4 (max 4)" in " ".join(
        result.output.split()
    )
    result = CliRunner().invoke(cli, ["plan", str(path), "--output", "json"])
    data = json.loads(result.stdout)
    assert [a["job"] for a in data["assignments"]] == ["2"]
    assert data["unplaced"][0]["job"] == "1"
