"""The largest values coshare accepts never crash a policy (``CoshareProcesses =
"1e19"`` crashed ``fgd`` with an int64 overflow). Every policy plans snapshots whose values sit
at the bounds of :mod:`coshare.ledger.bounds`, soundly; values past the bounds never get in."""

from __future__ import annotations

import pytest
from coshare.cycle.verify import check_plan
from coshare.errors import AnnotationError
from coshare.ledger.annotations import parse_job
from coshare.ledger.bounds import (
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    MAX_PRIORITY,
    MAX_PROCESSES,
    MAX_TIME_S,
    MAX_WALLTIME_S,
)
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies import make_policy, policy_names
from coshare.schema import parse_snapshot, snapshot_to_dict
from hypothesis import given
from hypothesis import strategies as st


def edge(top: int, low: int = 1) -> st.SearchStrategy[int]:
    """The smallest, a small, and the largest values of a field."""
    return st.sampled_from(sorted({low, min(low + 7, top), top // 2, top - 1, top}))


@st.composite
def snapshots_at_bounds(draw: st.DrawFn) -> Snapshot:
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        devices = tuple(
            Device(str(d), draw(edge(MAX_DEVICE_MEMORY_MIB)), draw(edge(MAX_DEVICE_THREADS)))
            for d in range(draw(st.integers(0, 3)))
        )
        nodes.append(
            Node(f"n{i}", draw(edge(MAX_CPU_MILLI, MILLI)), draw(edge(MAX_MEMORY_MIB)), devices)
        )
    running = []
    for node in nodes:
        for dev in node.devices[: draw(st.integers(0, len(node.devices)))]:
            running.append(
                RunningJob(
                    f"r-{node.name}-{dev.id}",
                    node.name,
                    (dev.id,),
                    draw(edge(dev.memory_mib, 0)),
                    draw(edge(dev.threads, 0)),
                    draw(edge(node.cpu_milli, 0)),
                    draw(edge(node.memory_mib, 0)),
                    draw(st.sampled_from(("running", "planned"))),
                )
            )
    pending = []
    for j in range(draw(st.integers(1, 8))):
        device = draw(st.booleans())
        pending.append(
            Job(
                id=f"p{j}",
                device_memory_mib=draw(edge(MAX_DEVICE_MEMORY_MIB)) if device else 0,
                device_threads=draw(edge(MAX_DEVICE_THREADS)) if device else 0,
                device_count=draw(st.sampled_from((1, 2, MAX_DEVICES))) if device else 0,
                cpu_milli=draw(edge(MAX_CPU_MILLI, 0)),
                memory_mib=draw(edge(MAX_MEMORY_MIB, 0)),
                priority=draw(st.sampled_from((-MAX_PRIORITY, 0, MAX_PRIORITY))),
                submit_time_s=float(draw(st.sampled_from((-MAX_TIME_S, 0, MAX_TIME_S)))),
                kind="device" if device else "cpu",
                processes=draw(st.sampled_from((1, 2, MAX_PROCESSES))),
                walltime_s=draw(st.sampled_from((None, float(MAX_WALLTIME_S)))),
            )
        )
    now = draw(st.sampled_from((None, float(-MAX_TIME_S), float(MAX_TIME_S))))
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), now)


@pytest.mark.slow
@given(snapshot=snapshots_at_bounds(), threads=st.sampled_from(("strict", "soft")))
def test_every_policy_plans_values_at_the_bounds_soundly(snapshot: Snapshot, threads: str) -> None:
    from coshare.policies import PolicyOptions

    # The schema accepts every value at its bound: a snapshot round-trips unchanged.
    assert parse_snapshot(snapshot_to_dict(snapshot)) == snapshot
    for name in policy_names():
        policy = make_policy(name, PolicyOptions(threads=threads, age_limit_s=1.0))  # type: ignore[arg-type]
        plan = policy.plan(snapshot)
        assert check_plan(snapshot, plan, strict_threads=threads == "strict") == [], name


def test_fgd_with_the_largest_gang_plans_and_1e19_is_refused() -> None:
    node = Node("n", MAX_CPU_MILLI, MAX_MEMORY_MIB, (Device("0", 8192, 240),))
    job = parse_job(
        "big",
        {
            "CoshareDeviceMemory": 1,
            "CoshareDeviceThreads": 1,
            "CoshareProcesses": str(MAX_PROCESSES),
        },
    )
    small = Job("small", 1, 1)
    snapshot = Snapshot((node,), (), (job, small))
    for name in policy_names():
        plan = make_policy(name).plan(snapshot)
        assert check_plan(snapshot, plan) == [], name
    with pytest.raises(AnnotationError, match="CoshareProcesses='1e19' is larger than coshare"):
        parse_job(
            "x", {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1, "CoshareProcesses": "1e19"}
        )


def test_fgd_scores_devices_of_very_different_sizes_without_overflow() -> None:
    # Found by the test above: exp() overflowed in FGD's score (a RuntimeWarning, an error
    # under -W error) when a node held a 1 MiB and a 512 GiB device.
    node = Node("n1", 1000, 1, (Device("0", 1, 1), Device("1", 8, 1), Device("2", 2**19, 1)))
    snapshot = Snapshot(
        (Node("n0", 1000, 1), node),
        (),
        (
            Job("p0", kind="cpu", device_count=0, cpu_milli=0),
            Job("p1", 8, 1, device_count=2, cpu_milli=0),
        ),
    )
    plan = make_policy("fgd").plan(snapshot)
    assert check_plan(snapshot, plan) == [] and plan.placed == 2


# -- nodes of many devices: one candidate per kind of move, the same plan ----------------------


def _many_devices(per_node: int, nodes: int, jobs: int) -> Snapshot:
    """Nodes of ``per_node`` devices, some partly used, and ``jobs`` one-device jobs."""
    made = tuple(
        Node(
            f"n{i}",
            (per_node + 64) * MILLI,
            10**6,
            tuple(Device(str(d), 16384 if d % 7 else 8192, 240) for d in range(per_node)),
        )
        for i in range(nodes)
    )
    running = tuple(
        RunningJob(
            f"r{i}.{d}", f"n{i}", (str(d),), 1000 * (1 + d % 5), 60, cpu_milli=MILLI, memory_mib=100
        )
        for i in range(nodes)
        for d in range(0, per_node, 3)
    )
    pending = tuple(
        Job(f"p{j}", 200 + 37 * j % 5000, 1 + j % 120, cpu_milli=MILLI, memory_mib=64)
        for j in range(jobs)
    )
    return Snapshot(made, running, pending)


@pytest.mark.parametrize("policy", ["sharepack", "fgd"])
def test_devices_that_score_alike_are_scored_once(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unbounded work from small input: 64 nodes of 1,024 devices (the bound) and
    # 2,000 jobs, a 5 MB snapshot, planned for minutes with both: every device of a node was
    # scored for every job, though idle devices of one size all score the same.
    import coshare.policies.fgd as fgd
    import coshare.policies.potential as potential

    scored: list[int] = []
    real = fgd.distinct_moves

    def counting(*args: object) -> object:  # both score exactly the candidates it returns
        out = real(*args)  # type: ignore[arg-type]
        scored.append(len(out))
        return out

    monkeypatch.setattr(fgd, "distinct_moves", counting)
    monkeypatch.setattr(potential, "distinct_moves", counting)
    snapshot = _many_devices(MAX_DEVICES, 1, 3)
    plan = make_policy(policy).plan(snapshot)
    check_plan(snapshot, plan)
    assert len(plan.assignments) == 3
    # one node: at most one candidate per (free memory, size) pair; 1,024 before
    assert scored and max(scored) <= 16, scored


@pytest.mark.parametrize("policy", ["sharepack", "fgd"])
def test_scoring_each_kind_of_move_once_makes_the_same_plan(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import coshare.policies.fgd as fgd

    snapshot = _many_devices(100, 3, 150)
    fewer = make_policy(policy).plan(snapshot)
    monkeypatch.setattr(fgd, "DISTINCT_FROM", 10**9)  # score every candidate, as before
    every = make_policy(policy).plan(snapshot)
    check_plan(snapshot, fewer)
    assert (fewer.assignments, fewer.unplaced) == (every.assignments, every.unplaced)


@pytest.mark.parametrize("count", [256, 257, 1000])
def test_every_policy_plans_a_large_cluster_without_devices(count: int) -> None:
    # sharepack groups identical nodes past 256 of them; with no device on any node its
    # per-device columns were empty and indexing them raised, stopping every cycle.
    nodes = tuple(Node(f"n{i}", 8 * MILLI, 16384) for i in range(count))
    jobs = tuple(
        Job(
            str(k),
            device_count=0,
            kind="cpu",
            cpu_milli=MILLI,
            memory_mib=100,
            submit_time_s=float(k),
        )
        for k in range(50)
    )
    snapshot = Snapshot(nodes, (), jobs, now_s=100.0)
    for name in ("sharepack", "knapsack", "exclusive", "random", "bestfit", "fgd"):
        plan = make_policy(name).plan(snapshot)
        assert check_plan(snapshot, plan) == [], name
        assert plan.placed == 50, name
