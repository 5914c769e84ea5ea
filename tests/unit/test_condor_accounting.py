"""The negotiator's order and the pool's limits on a recorded answer of the real pool
(tests/fixtures/condor/record_accounting.py: alice in group_physics with a quota of 2 and
sw_license of 1, bob with a worse priority, carol in group_chem, which takes surplus)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from coshare.ledger.bounds import BadValue
from coshare.ledger.limits import withhold
from coshare.model import Job, Node, RunningJob, Snapshot

from condor_addon import attributes as A
from condor_addon.accounting import negotiator_order, parse_priorities
from condor_addon.concurrency import limit_maximum, parse_request
from condor_addon.order import NegotiatorAnswer, with_negotiator
from condor_addon.view import QueueJob, parse_queue, parse_slots, read_job

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures/condor/23.9.6/accounting.json").read_text()
)
NODE = Node("n1", 8000, 8192)
DECLARED = {"CoshareDeviceMemory": 10, "CoshareDeviceThreads": 10}


def answer(**changes: Any) -> NegotiatorAnswer:
    return replace(NegotiatorAnswer(RECORDED["priorities"], RECORDED["settings"]), **changes)


def recorded_jobs() -> dict[str, QueueJob]:
    jobs = (read_job(values) for values in RECORDED["jobs"])
    return {q.id: q for q in jobs if q is not None}


def test_the_recorded_answer_gives_priorities_and_the_groups_quotas() -> None:
    accounting = parse_priorities(RECORDED["priorities"])
    assert accounting.notes == ()
    assert set(accounting.priorities) == {"group_physics.alice", "group_chem.carol", "bob"}
    assert accounting.priorities["bob"] > 1000 * accounting.priorities["group_physics.alice"]
    groups = accounting.groups
    assert groups["group_physics"].quota == 2.0  # takes no surplus: a hard limit
    assert groups["group_chem"].quota is None  # GROUP_ACCEPT_SURPLUS_group_chem: none
    assert "<none>" not in groups


def test_jobs_are_ordered_by_group_then_effective_priority_then_jobprio() -> None:
    accounting = parse_priorities([*RECORDED["priorities"], {"Name": "dave@vm", "Priority": 600.0}])
    pending = [
        Job("bob.hi", priority=10, submit_time_s=1),
        Job("dave.lo", priority=0, submit_time_s=2),
        Job("dave.hi", priority=5, submit_time_s=3),
        Job("alice.0", priority=0, submit_time_s=4),
        Job("alice.1", priority=0, submit_time_s=5),
    ]
    submitters = {
        "bob.hi": "bob",
        "dave.lo": "dave",
        "dave.hi": "dave",
        "alice.0": "group_physics.alice",
        "alice.1": "group_physics.alice",
    }
    ranks, notes = negotiator_order(pending, submitters, accounting)
    assert notes == ()
    order = sorted(ranks, key=lambda j: -ranks[j])
    # group_physics is a configured group: it negotiates before the jobs of no group; there
    # dave's lower effective priority goes before bob's whatever bob's JobPrio; within dave,
    # JobPrio.
    assert order[:2] in (["alice.0", "alice.1"], ["alice.1", "alice.0"])
    assert order[2:] == ["dave.hi", "dave.lo", "bob.hi"]
    assert ranks["alice.0"] == ranks["alice.1"]  # one band: their submit time decides


@pytest.mark.parametrize("bad", [None, -3.0, 0, math.nan, math.inf, 1e300, "high", True])
def test_a_submitter_priority_that_does_not_read_keeps_its_jobs_by_submit_time(bad: object) -> None:
    entries = [e for e in RECORDED["priorities"] if e["Name"] != "bob@vm"]
    entries.append({"Name": "bob@vm", "Priority": bad, "AccountingGroup": "<none>"})
    entries.append({"Name": "erin@vm", "Priority": 700.0})
    accounting = parse_priorities(entries)
    assert len(accounting.notes) == 1 and "bob@vm" in accounting.notes[0]
    assert "Priority" in accounting.notes[0]
    pending = [Job("b1", priority=9, submit_time_s=1), Job("b2", submit_time_s=2), Job("e1")]
    ranks, notes = negotiator_order(pending, {"b1": "bob", "b2": "bob", "e1": "erin"}, accounting)
    assert ranks["b1"] == ranks["b2"] < ranks["e1"]  # bob's JobPrio ignored: by submit time
    assert len(notes) == 1 and "bob" in notes[0] and "submit time" in notes[0]


def test_an_unreadable_negotiator_plans_by_submit_time_and_says_so_once() -> None:
    snapshot = Snapshot((NODE,), pending=(Job("1.1", priority=7), Job("1.2", priority=3)))
    out, notes = with_negotiator(
        snapshot, recorded_jobs(), [], NegotiatorAnswer(problem="no negotiator")
    )
    assert [j.priority for j in out.pending] == [0, 0]
    assert len(notes) == 1 and "no negotiator" in notes[0] and "submit time" in notes[0]
    assert out.limits == ()


def test_coshare_order_keeps_jobprio() -> None:
    snapshot = Snapshot((NODE,), pending=(Job("1.1", priority=7), Job("1.2", priority=3)))
    out, _ = with_negotiator(
        snapshot, recorded_jobs(), RECORDED["slots"], answer(), scheduler_order=False
    )
    assert [j.priority for j in out.pending] == [7, 3]


def test_the_recorded_pool_gives_the_limits_held_and_the_waiting_jobs_charges() -> None:
    jobs = recorded_jobs()
    waiting = [q for q in jobs.values() if q.status == A.IDLE]
    assert sorted(q.id for q in waiting) == ["1.1", "1.2"]  # alice's: over both limits
    snapshot = Snapshot((NODE,), pending=tuple(Job(q.id) for q in waiting))
    out, notes = with_negotiator(snapshot, jobs, RECORDED["slots"], answer())
    assert notes == ()
    limits = {limit.id: limit for limit in out.limits}
    assert set(limits) == {"cl.sw_license", "group.group_physics"}
    sw = limits["cl.sw_license"]
    assert (sw.name, sw.max, sw.used) == ("concurrency limit sw_license=1", 1.0, 1.0)
    quota = limits["group.group_physics"]
    assert (quota.name, quota.holder) == ("GROUP_QUOTA_group_physics=2", "group group_physics")
    assert (quota.max, quota.used) == (2.0, 1.0)  # alice's running job's slot: one core
    for job in out.pending:
        assert dict(job.charges) == {"cl.sw_license": 1.0, "group.group_physics": 1.0}
    # the core withholds both: sw_license is taken
    _, waits = withhold(out)
    assert {w.job for w in waits} == {"1.1", "1.2"}
    assert all("sw_license" in w.reason for w in waits)


def test_a_placement_not_started_holds_its_share_of_the_limits() -> None:
    jobs = recorded_jobs()
    planned = RunningJob("1.1", "n1", state="planned")
    snapshot = Snapshot((NODE,), running=(planned,), pending=(Job("1.2"),))
    out, _ = with_negotiator(snapshot, jobs, RECORDED["slots"], answer())
    used = {limit.id: limit.used for limit in out.limits}
    # job 1.0 runs (its claimed slot), job 1.1 is placed, idle: it takes its share on match
    assert used == {"cl.sw_license": 2.0, "group.group_physics": 2.0}
    # a running job the collector does not show yet counts from its queue entry
    slots = [s for s in RECORDED["slots"] if s.get("ConcurrencyLimits") != "sw_license"]
    out, _ = with_negotiator(snapshot, jobs, slots, answer())
    assert {limit.id: limit.used for limit in out.limits}["cl.sw_license"] == 2.0


def test_a_limit_setting_that_does_not_read_is_not_checked_and_says_so() -> None:
    jobs = recorded_jobs()
    snapshot = Snapshot((NODE,), pending=(Job("1.1"),))
    settings = {**RECORDED["settings"], "SW_LICENSE_LIMIT": "lots"}
    out, notes = with_negotiator(snapshot, jobs, RECORDED["slots"], answer(settings=settings))
    assert "cl.sw_license" not in {limit.id for limit in out.limits}
    assert any("SW_LICENSE_LIMIT" in n and "not checked" in n for n in notes)


@pytest.mark.parametrize(
    ("text", "asked"),
    [
        (None, {}),
        ("sw_license", {"sw_license": 1.0}),
        ("A:2, b:0.5", {"a": 2.0, "b": 0.5}),
        ("x,X", {"x": 2.0}),
        ("large.matlab:3", {"large.matlab": 3.0}),
    ],
)
def test_concurrency_limits_read_as_the_negotiator_counts_them(
    text: str | None, asked: dict[str, float]
) -> None:
    assert parse_request(text) == asked


@pytest.mark.parametrize("text", ["a:x", "a b", 5, "a:-1", "a:1e400", "a;b", "a:nan"])
def test_a_concurrency_limits_that_does_not_read_is_refused_naming_the_field(text: object) -> None:
    with pytest.raises(BadValue, match="ConcurrencyLimits"):
        parse_request(text)


def test_a_job_whose_concurrency_limits_do_not_read_is_refused_and_the_others_are_read() -> None:
    cluster = parse_slots([], {})
    bad = QueueJob("5.0", annotations=DECLARED, concurrency_limits="a:x")
    good = QueueJob("5.1", annotations=DECLARED, concurrency_limits="a")
    view = parse_queue([bad, good], cluster, now_s=0.0, replan_after_s=60.0)
    assert [r.job for r in view.rejected] == ["5.0"]
    assert "ConcurrencyLimits" in view.rejected[0].reason
    assert "5.0" in view.rejected[0].reason


def test_a_limits_maximum_comes_from_its_own_setting_then_the_defaults() -> None:
    config = {
        "SW_LICENSE_LIMIT": "1",
        "CONCURRENCY_LIMIT_DEFAULT_LARGE": "4",
        "CONCURRENCY_LIMIT_DEFAULT": "2308032",
    }
    assert limit_maximum("sw_license", config) == ("SW_LICENSE_LIMIT", 1.0)
    assert limit_maximum("large.matlab", config) == ("CONCURRENCY_LIMIT_DEFAULT_LARGE", 4.0)
    assert limit_maximum("other", config) is None  # HTCondor's built-in default: no limit
    assert limit_maximum("other", {"CONCURRENCY_LIMIT_DEFAULT": "3"}) == (
        "CONCURRENCY_LIMIT_DEFAULT",
        3.0,
    )
    with pytest.raises(BadValue, match="SW_LICENSE_LIMIT"):
        limit_maximum("sw_license", {"SW_LICENSE_LIMIT": "-1"})


def test_a_submitter_not_negotiated_yet_has_a_new_submitters_priority() -> None:
    # HTCondor starts a submitter at real priority 0.5 times DEFAULT_PRIO_FACTOR
    accounting = parse_priorities(RECORDED["priorities"], "1000")
    assert accounting.new_submitter == 500.0
    pending = [Job("bob.0", priority=5, submit_time_s=1), Job("new.0", submit_time_s=2)]
    ranks, notes = negotiator_order(pending, {"bob.0": "bob", "new.0": "newcomer"}, accounting)
    assert ranks["new.0"] > ranks["bob.0"] and notes == ()
    # without the factor it keeps its place by submit time, with a note
    accounting = parse_priorities(RECORDED["priorities"], "many")
    ranks, notes = negotiator_order(pending, {"bob.0": "bob", "new.0": "newcomer"}, accounting)
    assert ranks["new.0"] < ranks["bob.0"] and len(notes) == 1 and "newcomer" in notes[0]


def test_a_slot_claimed_without_the_negotiator_counts_in_its_jobs_group() -> None:
    # seen live: the schedd started a second job of group_physics on its claim of a
    # partitionable slot; that slot's ad has no RemoteNegotiatingGroup
    jobs = recorded_jobs()
    slots = [dict(s) for s in RECORDED["slots"]]
    for ad in slots:
        if ad.get("RemoteNegotiatingGroup") == "group_physics":
            del ad["RemoteNegotiatingGroup"]
            assert ad["AccountingGroup"] == "group_physics.alice@vm"
    snapshot = Snapshot((NODE,), pending=(Job("1.1"),))
    out, _ = with_negotiator(snapshot, jobs, slots, answer())
    assert {limit.id: limit.used for limit in out.limits}["group.group_physics"] == 1.0
