"""Multi-node (gang) jobs: the contract fields, the shared placement mechanism of
every policy, the aging reservation, and the verifier's completeness check."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from coshare.cycle.verify import check_plan
from coshare.errors import AnnotationError, SnapshotError
from coshare.ledger.annotations import parse_job
from coshare.ledger.book import Queued, pending_job
from coshare.ledger.gangs import gang_problems, node_counts, split
from coshare.model import Assignment, Device, Job, Node, Plan, RunningJob, Snapshot
from coshare.policies import GANGS_UNSUPPORTED, PolicyOptions, make_policy, policy_names
from coshare.schema import decode_json, parse_snapshot, snapshot_to_dict
from hypothesis import given, settings
from hypothesis import strategies as st

GPU = (Device("0", 16000, 100), Device("1", 16000, 100))
#: Policies that place gangs themselves (``places_gangs``): Spread-n-Share's sns and cs.
SELF_PLACED = {
    n
    for n in policy_names()
    if getattr(getattr(make_policy(n), "inner", None), "places_gangs", False)
}


def cluster(count: int, cores: int = 8, devices: tuple[Device, ...] = GPU) -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", cores * 1000, 64000, devices) for i in range(count))


def gang(ident: str, nodes: int, processes: int, **kw: object) -> Job:
    base: dict[str, object] = {"device_memory_mib": 1000, "device_threads": 10, "cpu_milli": 1000}
    base.update(kw)
    return Job(ident, nodes=nodes, processes=processes, **base)  # type: ignore[arg-type]


def parts(plan: Plan, job: str) -> list[Assignment]:
    return [a for a in plan.assignments if a.job == job]


# -- the model and the contract ---------------------------------------------------------------


def test_processes_split_evenly_larger_shares_first() -> None:
    assert split(7, 3) == [3, 2, 2]
    assert split(6, 3) == [2, 2, 2]
    assert node_counts(Job("a", nodes=2, nodes_max=5, processes=8, processes_per_node=3)) == range(
        3, 6
    )


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (Job("a", nodes=4, processes=3), "processes"),
        (Job("a", nodes=3, nodes_max=2, processes=6), "nodes_max"),
        (Job("a", nodes=2, processes=9, processes_per_node=4), "processes_per_node"),
    ],
)
def test_inconsistent_gang_fields_are_refused_naming_the_field(job: Job, field: str) -> None:
    assert [p[0] for p in gang_problems(job)] == [field]


def test_snapshot_json_round_trips_gang_fields_and_old_files_stay_valid() -> None:
    snap = Snapshot(
        cluster(2),
        (RunningJob("r", "n0", walltime_s=60.0, start_time_s=0.0),),
        (gang("g", 2, 4, nodes_max=3, processes_per_node=2),),
        5.0,
    )
    text = json.dumps(snapshot_to_dict(snap))
    back = decode_json(text, "t", parse_snapshot)
    assert back == snap
    old = {
        "nodes": [{"name": "n0", "cores": 4, "memory_mib": 100}],
        "pending": [{"id": "a", "kind": "cpu", "processes": 2}],
    }
    assert parse_snapshot(old).pending[0].nodes == 1


def test_a_gang_without_processes_runs_nodes_times_per_node() -> None:
    pending = [{"id": "a", "kind": "cpu", "nodes": 3, "processes_per_node": 2}]
    data = {"nodes": [{"name": "n0", "cores": 4, "memory_mib": 100}], "pending": pending}
    assert parse_snapshot(data).pending[0].processes == 6


def test_inconsistent_gang_in_a_snapshot_names_the_job_and_field() -> None:
    data = {
        "nodes": [{"name": "n0", "cores": 4, "memory_mib": 100}],
        "pending": [{"id": "a", "kind": "cpu", "nodes": 3, "processes": 2}],
    }
    with pytest.raises(SnapshotError, match=r'pending job "a".*processes.*nodes \(3\)'):
        parse_snapshot(data)


def test_annotations_read_gang_keys_and_refuse_inconsistent_ones() -> None:
    job = parse_job(
        "7", {"CoshareKind": "cpu", "CoshareNodes": "3", "CoshareProcessesPerNode": "4"}
    )
    assert (job.nodes, job.processes, job.processes_per_node) == (3, 12, 4)
    with pytest.raises(AnnotationError, match="CoshareProcessesPerNode"):
        parse_job(
            "8",
            {
                "CoshareKind": "cpu",
                "CoshareNodes": "2",
                "CoshareProcesses": "9",
                "CoshareProcessesPerNode": "4",
            },
        )
    with pytest.raises(AnnotationError, match="CoshareNodes"):
        parse_job("9", {"CoshareKind": "cpu", "CoshareNodes": "nan"})


def test_live_adapters_refuse_gangs_until_they_can_place_them() -> None:
    queued = Queued("5", {"CoshareKind": "cpu", "CoshareNodes": "2"})
    with pytest.raises(AnnotationError, match="not yet placed on a live scheduler"):
        pending_job(queued, None)


# -- placement: one mechanism for every policy --------------------------------------------------

#: The policies the shared mechanism places gangs for (membw and collocate refuse them, tested
#: below; sns and cs place CPU gangs themselves: tests/unit/test_policy_sns.py).
GANG_POLICIES = [n for n in policy_names() if n not in GANGS_UNSUPPORTED and n not in SELF_PLACED]


@pytest.mark.parametrize("name", GANG_POLICIES)
def test_every_policy_places_a_gang_on_all_its_nodes(name: str) -> None:
    snap = Snapshot(cluster(4), (), (gang("g", 3, 7), Job("s", 1000, 10)), 0.0)
    plan = make_policy(name).plan(snap)
    assert check_plan(snap, plan) == []
    on = parts(plan, "g")
    assert sorted(a.processes or 0 for a in on) == [2, 2, 3]
    assert all(len(a.devices) == 1 for a in on)
    assert "s" in plan.placed_jobs


@pytest.mark.parametrize("name", sorted(GANGS_UNSUPPORTED))
def test_membw_and_collocate_refuse_gangs_and_plan_the_rest_as_alone(name: str) -> None:
    # their own admission (membw) and EASY reservation (collocate) would not see the shared
    # mechanism's gang parts: a gang is refused, the single-node jobs planned as without it
    singles = (Job("s", 1000, 10), Job("t", 1000, 10, kind="cpu", device_count=0))
    snap = Snapshot(cluster(4), (), (gang("g", 3, 7), *singles), 0.0)
    plan = make_policy(name).plan(snap)
    assert check_plan(snap, plan) == []
    assert [(u.job, u.code) for u in plan.unplaced if u.job == "g"] == [("g", "unsupported")]
    assert "multi-node" in plan.unplaced[0].reason
    alone = make_policy(name).plan(Snapshot(cluster(4), (), singles, 0.0))
    assert plan.assignments == alone.assignments
    assert (plan.trials, plan.requeue) == (alone.trials, alone.requeue)


def test_exclusive_gives_a_gang_whole_nodes_and_sharing_policies_a_share() -> None:
    snap = Snapshot(cluster(2), (), (gang("g", 2, 2), Job("s", 1000, 10)), 0.0)
    exclusive = make_policy("exclusive").plan(snap)
    assert {a.node for a in parts(exclusive, "g")} == {"n0", "n1"}
    assert "s" not in exclusive.placed_jobs  # both nodes are the gang's
    shared = make_policy("sharepack").plan(snap)
    assert shared.placed_jobs == {"g", "s"}


def test_running_gang_keeps_its_nodes_under_exclusive() -> None:
    running = (RunningJob("g", "n0", ("0",)), RunningJob("g", "n1", ("0",)))
    snap = Snapshot(cluster(3), running, (Job("s", 1000, 10), Job("t", 1000, 10)), 0.0)
    plan = make_policy("exclusive").plan(snap)
    assert {a.node for a in plan.assignments} == {"n2"}


def test_all_or_nothing_when_too_few_nodes_are_free() -> None:
    running = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=8000) for i in range(2))
    running += tuple(RunningJob(f"s{i}", f"n{i}", cpu_milli=7000) for i in (2, 3))
    snap = Snapshot(cluster(4), running, (gang("g", 2, 4),), 0.0)  # 2 processes a node
    for name in GANG_POLICIES:
        plan = make_policy(name).plan(snap)
        assert plan.assignments == ()
        assert plan.unplaced[0].code == "no_room"
        assert "0 have it now" in plan.unplaced[0].reason
    busy = Snapshot(
        cluster(4), (*running[:2], RunningJob("c", "n2", cpu_milli=8000)), (gang("g", 2, 2),), 0.0
    )
    plan = make_policy("knapsack").plan(busy)
    assert "fewer than 2 have room" in plan.unplaced[0].reason


def test_a_gang_wider_than_the_cluster_never_fits_naming_the_counts() -> None:
    snap = Snapshot(cluster(3), (), (gang("g", 5, 5),), 0.0)
    plan = make_policy("knapsack").plan(snap)
    assert plan.unplaced[0].code == "never_fits"
    assert "needs 5 nodes" in plan.unplaced[0].reason
    assert "3 such nodes of 3" in plan.unplaced[0].reason


def test_a_range_takes_the_fewest_nodes_that_fit() -> None:
    snap = Snapshot(cluster(4, cores=4), (), (gang("g", 1, 8, nodes_max=4),), 0.0)
    plan = make_policy("bestfit").plan(snap)
    assert [a.processes for a in parts(plan, "g")] == [4, 4]


# -- aging: a wide gang does not starve ----------------------------------------------------------


def test_an_aged_gang_reserves_the_nodes_that_free_first_and_backfill_respects_it() -> None:
    # 4 nodes, 3 busy until t=100, 200, 300; the gang needs 3 whole nodes (8 cores each)
    running = tuple(
        RunningJob(f"r{i}", f"n{i}", cpu_milli=8000, start_time_s=0.0, walltime_s=100.0 * (i + 1))
        for i in range(3)
    )
    wide = gang(
        "g",
        3,
        3,
        kind="cpu",
        device_count=0,
        device_memory_mib=0,
        device_threads=0,
        cpu_milli=8000,
        submit_time_s=0.0,
    )
    short = Job("short", kind="cpu", device_count=0, submit_time_s=50.0, walltime_s=100.0)
    long = Job("long", kind="cpu", device_count=0, submit_time_s=50.0, walltime_s=1000.0)
    snap = Snapshot(cluster(4), running, (wide, short, long), now_s=60.0)
    for name in GANG_POLICIES:
        plan = make_policy(name, PolicyOptions(age_limit_s=30.0)).plan(snap)
        assert check_plan(snap, plan) == []
        why = {u.job: u for u in plan.unplaced}
        assert why["g"].code == "reserved", name
        assert "n3" in why["g"].reason and "n0" in why["g"].reason and "n1" in why["g"].reason
        # the gang starts at t=200: a 100 s job started at t=60 ends before, a 1000 s one not
        assert [a.node for a in parts(plan, "short")] in (["n3"], ["n0"], ["n1"], ["n2"])
        assert "long" not in plan.placed_jobs or parts(plan, "long")[0].node == "n2", name


def test_without_aging_small_jobs_take_the_free_node() -> None:
    running = tuple(RunningJob(f"r{i}", f"n{i}", cpu_milli=8000) for i in range(3))
    wide = gang(
        "g", 2, 2, kind="cpu", device_count=0, device_memory_mib=0, device_threads=0, cpu_milli=8000
    )
    long = Job("long", kind="cpu", device_count=0, submit_time_s=50.0)
    snap = Snapshot(cluster(4), running, (wide, long), now_s=60.0)
    plan = make_policy("knapsack", PolicyOptions(age_limit_s=None)).plan(snap)
    assert "long" in plan.placed_jobs


# -- the verifier ---------------------------------------------------------------------------------


def test_verifier_refuses_half_placed_and_miscounted_gangs() -> None:
    job = gang("g", 3, 6, processes_per_node=3)
    snap = Snapshot(cluster(4), (), (job,), 0.0)
    half = Plan("x", (Assignment("g", "n0", ("0",), 3), Assignment("g", "n1", ("0",), 3)))
    assert any("on 2 nodes (allowed: 3..3)" in p for p in check_plan(snap, half))
    wrong = Plan("x", tuple(Assignment("g", f"n{i}", ("0",), 1) for i in range(3)))
    assert any("places 3 processes of 6" in p for p in check_plan(snap, wrong))
    heavy = Plan(
        "x",
        (
            Assignment("g", "n0", ("0",), 4),
            Assignment("g", "n1", ("0",), 1),
            Assignment("g", "n2", ("0",), 1),
        ),
    )
    assert any("more than 3 processes" in p for p in check_plan(snap, heavy))
    single = Snapshot(cluster(2), (), (Job("s", 1000, 10, processes=2),), 0.0)
    spread = Plan("x", (Assignment("s", "n0", ("0",), 1), Assignment("s", "n1", ("0",), 1)))
    assert any("single-node job but spans 2" in p for p in check_plan(single, spread))


# -- properties ---------------------------------------------------------------------------------


@st.composite
def gang_snapshots(draw: st.DrawFn) -> Snapshot:
    count = draw(st.integers(1, 6))
    nodes = cluster(count, cores=draw(st.integers(1, 8)))
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        wide = draw(st.integers(1, 7))
        procs = draw(st.integers(wide, wide * 3))
        cpu = draw(st.booleans())
        extra = draw(st.sampled_from([{}, {"nodes_max": wide + 2}, {"processes_per_node": 3}]))
        job = gang(
            f"j{i}",
            wide,
            procs,
            cpu_milli=draw(st.sampled_from([500, 1000, 3000])),
            submit_time_s=float(draw(st.integers(0, 100))),
            walltime_s=draw(st.sampled_from([None, 50.0])),
            **(
                {"kind": "cpu", "device_count": 0, "device_memory_mib": 0, "device_threads": 0}
                if cpu
                else {}
            ),
            **extra,
        )
        if not gang_problems(job):
            jobs.append(job)
    running = tuple(
        RunningJob(
            f"r{i}",
            n.name,
            cpu_milli=draw(st.integers(0, n.cpu_milli)),
            start_time_s=0.0,
            walltime_s=draw(st.sampled_from([None, 80.0])),
        )
        for i, n in enumerate(nodes)
        if draw(st.booleans())
    )
    return Snapshot(nodes, running, tuple(jobs), now_s=100.0)


@settings(deadline=None)
@given(gang_snapshots(), st.sampled_from(policy_names()), st.sampled_from([None, 10.0]))
def test_every_policy_places_gangs_whole_and_sound(
    snap: Snapshot, name: str, age: float | None
) -> None:
    plan = make_policy(name, PolicyOptions(age_limit_s=age)).plan(snap)
    assert check_plan(snap, plan) == []
    on = Counter(a.job for a in plan.assignments)
    for job in snap.pending:
        if job.id in on:
            assert job.nodes <= on[job.id] <= (job.nodes_max or job.nodes)


# -- the simulator ------------------------------------------------------------------------------


def test_the_simulator_runs_a_gang_on_all_its_nodes_at_once() -> None:
    from coshare.sim.device import FixedModel
    from coshare.sim.engine import SimOptions, simulate
    from coshare.sim.jobs import host_only

    nodes = cluster(3, devices=())
    cpu = {"kind": "cpu", "device_count": 0, "device_memory_mib": 0, "device_threads": 0}
    first = host_only(Job("a", cpu_milli=8000, **cpu), 100.0)  # type: ignore[arg-type]
    wide = host_only(gang("g", 3, 24, submit_time_s=5.0, **cpu), 50.0)
    result = simulate(
        nodes,
        [first, wide],
        make_policy("exclusive"),
        options=SimOptions(verify=True),
        model=FixedModel(),
    )
    runs = {r.id: r for r in result.jobs}
    assert runs["g"].start_s is not None and runs["a"].end_s is not None
    assert runs["g"].start_s >= runs["a"].end_s  # all three nodes, or it waits
    assert sorted(runs["g"].node.split(",")) == ["n0", "n1", "n2"]
    held = 8 * 100.0 + 24 * 50.0
    assert result.core_utilization == pytest.approx(held / (24 * result.makespan_s))
    assert runs["g"].bounded_slowdown() == pytest.approx((runs["g"].end_s - 5.0) / 50.0)  # type: ignore[operator]


def test_swf_jobs_wider_than_a_node_become_gangs() -> None:
    from coshare.sim.traces import as_gang

    nodes = tuple(Node(f"m{i}", 2000, 1024) for i in range(10))
    assert (
        as_gang(Job("1", kind="cpu", device_count=0, processes=2, memory_mib=100), nodes).is_gang
        is False
    )
    wide = as_gang(Job("2", kind="cpu", device_count=0, processes=16, memory_mib=900), nodes)
    assert (wide.nodes, wide.nodes_max, wide.processes_per_node) == (8, 10, 2)
    plan = make_policy("exclusive").plan(Snapshot(nodes, (), (wide,), 0.0))
    assert plan.unplaced[0].code == "never_fits"  # 16 nodes of one process: only 10
    fat = as_gang(Job("3", kind="cpu", device_count=0, processes=8, memory_mib=900), nodes)
    plan = make_policy("exclusive").plan(Snapshot(nodes, (), (fat,), 0.0))
    assert [a.processes for a in plan.assignments] == [1] * 8  # memory: one per node


def test_a_gang_at_the_bounds_is_refused_without_stopping_the_cycle() -> None:
    from coshare.ledger.bounds import MAX_JOB_NODES, MAX_PROCESSES

    huge = gang("h", 1, MAX_PROCESSES, nodes_max=MAX_JOB_NODES)
    snap = Snapshot(cluster(4), (), (huge, Job("s", 1000, 10)), 0.0)
    for name in GANG_POLICIES:
        plan = make_policy(name).plan(snap)
        assert plan.unplaced[0].code == "never_fits"
        assert "s" in plan.placed_jobs


def test_an_swf_log_without_machines_takes_its_cluster_from_the_header() -> None:
    from coshare.sim.traces import TraceError, header_nodes, parse_swf, rebased

    record = "1 1000 0 50 4 -1 -1 4 100 -1 1 1 1 -1 -1 1 -1 -1"
    later = "2 1060 0 50 1 -1 -1 1 100 -1 1 1 1 -1 -1 1 -1 -1"
    trace = parse_swf(
        ["; Version: 2.2", "; MaxNodes: 3", "; MaxProcs: 6", "; MaxNodes: 9", record, later]
    )
    assert dict(trace.header)["MaxNodes"] == "3"  # the first of a key
    nodes = header_nodes(trace, "t.swf")
    assert [(n.name, n.cores) for n in nodes] == [("n00001", 2), ("n00002", 2), ("n00003", 2)]
    assert [j.job.submit_time_s for j in rebased(trace.jobs)] == [0.0, 60.0]  # a stream
    with pytest.raises(TraceError, match="MaxNodes or MaxProcs"):
        header_nodes(parse_swf([record]), "t.swf")
    with pytest.raises(TraceError, match="MaxNodes is"):
        header_nodes(parse_swf(["; MaxNodes: nan", record]), "t.swf")


def test_an_swf_replay_without_machines_runs_on_the_header_cluster(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from coshare.cli.main import cli

    log = tmp_path / "plain.swf"
    log.write_text(
        "; MaxNodes: 2\n; MaxProcs: 4\n"
        + "".join(
            f"{i + 1} {1_000_000 + 10 * i} 0 50 {1 + i % 4} -1 -1 {1 + i % 4} 100 -1 1 1 1 -1 -1 1 "
            "-1 -1\n"
            for i in range(8)
        )
    )
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--workload",
            f"trace:{log}",
            "--policies",
            "exclusive,sharepack",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert [r["not_run"] for r in runs] == [0, 0]  # the 3- and 4-processor jobs are gangs
    assert all(r["makespan_s"] < 1000 for r in runs)  # submit times rebased to the first


def test_a_policy_that_places_gangs_itself_gets_them() -> None:
    from dataclasses import dataclass

    from coshare.policies.gang import GangPlanner

    @dataclass(frozen=True)
    class Own:
        name: str = "own"
        places_gangs: bool = True

        def plan(self, snapshot: Snapshot) -> Plan:
            return Plan(self.name, (), ())

    snap = Snapshot(cluster(2), (), (gang("g", 2, 2),), 0.0)
    assert GangPlanner(Own()).plan(snap) == Plan("own", (), ())
