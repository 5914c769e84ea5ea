"""Where ``sharepack`` puts a one-device job: its moves scored from per-node running sums
against the shape-by-shape sum, and against the potential computed in exact fractions.

The sums (:meth:`Potential._moves`) replace a pass over every shape for every candidate
device; they must give the same integers, so a whole plan made with them is the plan made
shape by shape (:meth:`Potential._frag_rise` for every move), on random snapshots of every
kind: mixed device sizes, running jobs, one-device, multi-device and CPU jobs, workloads from
the snapshot or given, strict and soft threads, clusters past the size where identical nodes
are grouped, and nodes so full that a move stops a shape by cores or host memory.

The choice itself follows the documented rule exactly: the least rise of the node's
potential, then the least room left on the device, then the emptiest node, then snapshot
order. The reference computes the potential in fractions, so moves that rise by the same
amount tie (the sum of the node's potential after the move less the one before rounded
differently from node to node, and equal moves were told apart by that rounding).
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies import potential as potential_module
from coshare.policies.base import ClusterState
from coshare.policies.potential import Potential, Shape, snapshot_shapes

SIZES = (6144, 8192, 16384)


def random_snapshot(rng: random.Random, nodes: int, jobs: int) -> Snapshot:
    """Xeon Phi-like nodes of a few sizes (often identical), some room taken by running
    jobs, pending jobs mostly of one device; host room tight enough on some nodes that a
    move can stop a shape by cores or host memory."""
    made = []
    for i in range(nodes):
        size = rng.choice(SIZES)
        devices = tuple(Device(str(d), size, 240) for d in range(rng.choice([1, 2, 2, 4])))
        made.append(
            Node(f"n{i:04d}", rng.choice([4, 8, 16]) * MILLI, rng.choice([8192, 32768]), devices)
        )
    running = []
    for i, node in enumerate(made):
        for dev in node.devices:
            if rng.random() < 0.3:
                running.append(
                    RunningJob(
                        f"r{i}.{dev.id}",
                        node.name,
                        (dev.id,),
                        rng.randrange(0, dev.memory_mib, 256),
                        60,
                        rng.randint(0, 3) * MILLI,
                        rng.randint(0, 4096),
                    )
                )
    pending = []
    for j in range(jobs):
        kind = "cpu" if rng.random() < 0.08 else "device"
        count = 0 if kind == "cpu" else rng.choice([1] * 8 + [2])
        pending.append(
            Job(
                f"p{j}",
                device_memory_mib=0
                if kind == "cpu"
                else rng.choice([256, 512, 1024, 1536, 2048, 3072, 4096, 6144]),
                device_threads=0 if kind == "cpu" else rng.randint(1, 240),
                device_count=count,
                cpu_milli=rng.randint(1, 6) * MILLI,
                memory_mib=rng.choice([512, 1024, 4096, 8192]),
                submit_time_s=float(j),
                kind=kind,
            )
        )  # type: ignore[arg-type]
    return Snapshot(tuple(made), tuple(running), tuple(pending))


def plan_both(
    snapshot: Snapshot, options: PolicyOptions, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, object]:
    policy = make_policy("sharepack", options)
    fast = policy.plan(snapshot)
    with monkeypatch.context() as patch:
        patch.setattr(potential_module, "SCORED_BEFORE_SUMS", 10**9)  # every move by shape
        plain = policy.plan(snapshot)
    return fast, plain


@pytest.mark.parametrize("seed", range(24))
def test_moves_scored_from_sums_make_the_plan_of_moves_scored_shape_by_shape(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    nodes = rng.choice([3, 12, 40, 300])  # 300: identical nodes are grouped
    snapshot = random_snapshot(rng, nodes, rng.choice([20, 80, 200]))
    workload: tuple[tuple[Shape, int], ...] | None = None
    if seed % 3 == 0:  # a given workload, with shapes larger than any device, of 2 devices
        workload = (
            ((MILLI, 1024, 2048, 1), 5),
            ((2 * MILLI, 4096, 7000, 1), 3),
            ((MILLI, 512, 20000, 1), 1),
            ((4 * MILLI, 8192, 3000, 2), 2),
            ((MILLI, 1024, 0, 0), 4),
        )
    options = PolicyOptions(
        threads="soft" if seed % 2 else "strict", workload=workload, age_limit_s=None
    )
    fast, plain = plan_both(snapshot, options, monkeypatch)
    assert check_plan(snapshot, fast, strict_threads=options.threads == "strict") == []
    assert fast == plain


def test_a_move_that_takes_the_cores_of_a_running_shape_is_scored_as_it_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two nodes with 2 free cores: a job of 2 cores stops the expected 2-core shape there,
    # whatever device it takes; the sums alone would not see it.
    nodes = tuple(
        Node(f"n{i}", 2 * MILLI, 32768, (Device("0", 8192, 240), Device("1", 8192, 240)))
        for i in range(2)
    )
    jobs = tuple(
        Job(
            f"p{j}",
            1024 * (j + 1),
            10,
            cpu_milli=MILLI * (j % 2 + 1),
            memory_mib=1024,
            submit_time_s=float(j),
        )
        for j in range(6)
    )
    options = PolicyOptions(workload=(((2 * MILLI, 1024, 1024, 1), 3), ((MILLI, 1024, 4096, 1), 1)))
    fast, plain = plan_both(Snapshot(nodes, (), jobs), options, monkeypatch)
    assert fast == plain


# -- the rule, in exact fractions -------------------------------------------------------------


def exact_potential(
    shapes: tuple[tuple[Shape, int], ...], cpu: int, mem: int, free: list[int]
) -> Fraction:
    """A node's potential as the module docstring defines it, in fractions."""
    weight = max(sum(w for _, w in shapes), 1)
    total = sum(max(f, 0) for f in free)
    frag = Fraction(0)
    for (cpu_m, mem_m, dev_m, k_m), w in shapes:
        runs = k_m > 0 and cpu >= cpu_m and mem >= mem_m and sum(f >= dev_m for f in free) >= k_m
        part = sum(f for f in free if 0 <= f < dev_m) if runs else total
        frag += Fraction(w * part, weight)
    device = [(shape, w) for shape, w in shapes if shape[3] > 0]
    device_mem = max(sum(s[2] * s[3] * w for s, w in device), 1)
    rho_cpu = Fraction(sum(s[0] * w for s, w in device), device_mem)
    rho_mem = Fraction(sum(s[1] * w for s, w in device), device_mem)
    if rho_cpu <= 0:
        return frag
    stranded = total - cpu / rho_cpu
    if rho_mem > 0:
        stranded = max(stranded, total - mem / rho_mem)
    return frag + max(stranded, Fraction(0))


def exact_choice(
    shapes: tuple[tuple[Shape, int], ...], state: ClusterState, job: Job, ok: np.ndarray
) -> int:
    """The device the rule picks for one-device ``job`` among ``ok``, in fractions."""
    best: tuple[Fraction, int, int, int] | None = None
    for d in np.flatnonzero(ok).tolist():
        n = int(state.dev_node[d])
        devs = state.node_devs[n]
        free = [max(int(state.dev_free_mem[x]), 0) for x in devs]
        cpu, mem = int(state.node_free_cpu[n]), int(state.node_free_mem[n])
        before = exact_potential(shapes, cpu, mem, free)
        free[devs.index(d)] -= job.device_memory_mib
        after = exact_potential(shapes, cpu - job.total_cpu_milli, mem - job.total_memory_mib, free)
        key = (after - before, free[devs.index(d)], -sum(max(f, 0) for f in free), d)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[3]


@pytest.mark.parametrize("seed", range(12))
def test_each_move_is_the_least_rise_then_best_fit_then_emptiest_node(seed: int) -> None:
    rng = random.Random(100 + seed)
    snapshot = random_snapshot(rng, rng.choice([4, 30]), 60)
    state = ClusterState(snapshot, strict_threads=True)
    shapes = snapshot_shapes(snapshot)
    pot = Potential(state, shapes)
    for job in snapshot.pending:
        if not job.needs_device or job.device_count != 1:
            continue
        ok = state.device_ok(job)
        if not ok.any():
            continue
        node, devices = pot.best(job, ok) or (-1, [])
        assert devices == [exact_choice(shapes, state, job, ok)], job.id
        state.place(job, node, devices)
        pot.changed(node)


@pytest.mark.parametrize("nodes", [3, 300])
def test_a_device_held_for_an_aged_job_leaves_its_twin_to_the_next_job(nodes: int) -> None:
    # Identical nodes of two identical devices: only the first device of the first node is
    # scored for the others. An aged job that fits nowhere now holds that device back; the
    # next job still goes where the rule puts it, the held device's twin, not the next node.
    made = tuple(
        Node(f"n{i:03d}", 8 * MILLI, 32768, (Device("0", 8192, 240), Device("1", 8192, 240)))
        for i in range(nodes)
    )
    running = tuple(
        RunningJob(f"r{i}.{d}", f"n{i:03d}", (str(d),), 1024, 10, MILLI, 1024)
        for i in range(nodes)
        for d in range(2)
    )
    aged = Job("old", 8192, 10, cpu_milli=MILLI, memory_mib=1024, submit_time_s=0.0)
    fresh = Job("new", 1024, 10, cpu_milli=MILLI, memory_mib=1024, submit_time_s=99_000.0)
    snapshot = Snapshot(made, running, (aged, fresh), now_s=100_000.0)
    plan = make_policy("sharepack", PolicyOptions(age_limit_s=3600.0)).plan(snapshot)
    assert [u.code for u in plan.unplaced] == ["reserved"]
    assert "n000/0" in plan.unplaced[0].reason
    assert [(a.job, a.node, a.devices) for a in plan.assignments] == [("new", "n000", ("1",))]
