"""FGD's fragmentation from a table of summed shape weights against the plain
shape-by-shape computation it replaced, which is kept here as it was.

The fast ``fgd`` must make byte for byte the plans of the plain one (FGD is a named peer: its
decisions may not change), so both plan the same random snapshots and their plans are
compared whole: nodes of mixed device sizes (so free amounts, shares and sizes often tie),
running jobs, one-device, multi-device and CPU jobs, workloads from the snapshot or given
(shares of 0, shares equal to free amounts, shapes of more devices than any node has),
integer and exact scores, strict and soft threads; and the shape-by-shape fallback of the
fast code (a workload too varied for the table) is compared the same way.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest
from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Device, Job, Node, Plan, RunningJob, Snapshot
from coshare.policies import fgd
from coshare.policies.base import ClusterState, finish, priority_key
from coshare.policies.fgd import (
    FgdPolicy,
    Shape,
    _Fragmentation,
    distinct_moves,
    single_device_moves,
    snapshot_workload,
)
from coshare.policies.waiting import explain_waiting, never_fits
from hypothesis import given
from hypothesis import strategies as st

Ints = npt.NDArray[np.int64]


# -- the plain computation, as fgd.py had it before the table ---------------------------------


class _Plain:
    """Per-node, per-shape counts of devices with room and free amounts too small."""

    def __init__(
        self, state: ClusterState, workload: tuple[tuple[Shape, int], ...], exact: bool
    ) -> None:
        self.state = state
        self.exact = exact
        self.total = max(sum(w for _, w in workload), 1)
        n = len(state.nodes)
        width = max((len(d) for d in state.node_devs), default=0)
        self.slot = np.full((n, max(width, 1)), state.device_count, dtype=np.int64)
        for i, devs in enumerate(state.node_devs):
            self.slot[i, : len(devs)] = devs
        self.cpu_m = np.array([s[0] for s, _ in workload], dtype=np.int64)
        self.dev_m = np.array([s[1] for s, _ in workload], dtype=np.int64)
        self.k_m = np.array([s[2] for s, _ in workload], dtype=np.int64)
        self.w_m = np.array([w for _, w in workload], dtype=np.int64)
        self.count = np.zeros((n, len(workload)), dtype=np.int64)
        self.small = np.zeros((n, len(workload)), dtype=np.int64)
        self.free_total = np.zeros(n, dtype=np.int64)
        self.frag = np.zeros(n, dtype=np.int64)
        self._refresh(np.arange(n))

    def _free(self, rows: Ints) -> Ints:
        out: Ints = np.append(np.clip(self.state.dev_free_mem, 0, None), -1)[self.slot[rows]]
        return out

    def _refresh(self, rows: Ints) -> None:
        free = self._free(rows)
        fits = free[:, :, None] >= self.dev_m[None, None, :]
        self.count[rows] = fits.sum(axis=1)
        self.small[rows] = (np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0)).sum(1)
        self.free_total[rows] = np.clip(free, 0, None).sum(axis=1)
        self.frag[rows] = self._node_frag(
            self.state.node_free_cpu[rows],
            self.count[rows],
            self.small[rows],
            self.free_total[rows],
        )

    def _node_frag(self, cpu: Ints, count: Ints, small: Ints, free_total: Ints) -> Ints:
        runs = (cpu[:, None] >= self.cpu_m[None, :]) & (count >= self.k_m[None, :])
        runs &= self.k_m[None, :] > 0
        out: Ints = np.where(runs, small, free_total[:, None]) @ self.w_m
        return out

    def place(self, job: Job) -> bool:
        s = self.state
        if not job.needs_device:
            nodes = np.flatnonzero(s.host_ok(job))
            if len(nodes) == 0:
                return False
            after = self._node_frag(
                s.node_free_cpu[nodes] - job.total_cpu_milli,
                self.count[nodes],
                self.small[nodes],
                self.free_total[nodes],
            )
            scale = np.array(
                [
                    max((int(s.dev_total_mem[d]) for d in s.node_devs[n]), default=1)
                    for n in nodes.tolist()
                ],
                dtype=np.float64,
            )
            best = int(nodes[self._best(self.frag[nodes] - after, scale)])
            s.place(job, best)
            self._refresh(np.array([best]))
            return True
        ok = s.device_ok(job)
        if not ok.any():
            return False
        if job.device_count == 1:
            cand = distinct_moves(s, np.flatnonzero(ok))
            nodes, _, count, small = single_device_moves(
                s, self.dev_m, self.count, self.small, job, cand
            )
            after = self._node_frag(
                s.node_free_cpu[nodes] - job.total_cpu_milli,
                count,
                small,
                self.free_total[nodes] - job.device_memory_mib,
            )
            pick = self._best(self.frag[nodes] - after, s.dev_total_mem[cand].astype(np.float64))
            node = int(nodes[pick])
            s.place(job, node, [int(cand[pick])])
        else:
            chosen = self._best_multi(job, ok)
            if chosen is None:
                return False
            node, devices = chosen
            s.place(job, node, devices)
        self._refresh(np.array([node]))
        return True

    def _best(self, decrease: Ints, scale: npt.NDArray[np.float64]) -> int:
        if self.exact:
            return int(np.argmax(decrease))
        x = np.clip(decrease / self.total / np.maximum(scale, 1.0), -50.0, 50.0)
        return int(np.argmax((100.0 / (1.0 + np.exp(-x))).astype(np.int64)))

    def _best_multi(self, job: Job, ok: npt.NDArray[np.bool_]) -> tuple[int, list[int]] | None:
        s = self.state
        best: tuple[float, int, list[int]] | None = None
        for n in s.nodes_with_devices(job, ok).tolist():
            devs = s.least_free_on(n, ok, job.device_count)
            free = self._free(np.array([n]))
            for d in devs:
                free[0, s.node_devs[n].index(d)] -= job.device_memory_mib
            fits = free[:, :, None] >= self.dev_m[None, None, :]
            small = np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0).sum(1)
            after = self._node_frag(
                s.node_free_cpu[[n]] - job.total_cpu_milli,
                fits.sum(1),
                small,
                np.clip(free, 0, None).sum(1),
            )
            decrease = self.frag[n] - after[0]
            if self.exact:
                value = float(decrease)
            else:
                x = np.clip(
                    decrease / self.total / max(float(s.dev_total_mem[devs[0]]), 1.0), -50.0, 50.0
                )
                value = float(int(100.0 / (1.0 + np.exp(-x))))
            if best is None or value > best[0]:
                best = (value, n, sorted(devs))
        return None if best is None else (best[1], best[2])


def plain_plan(policy: FgdPolicy, snapshot: Snapshot) -> Plan:
    """``FgdPolicy.plan`` with the plain computation."""
    state = ClusterState(snapshot, strict_threads=policy.threads == "strict")
    unplaced = never_fits(snapshot, snapshot.pending)
    jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
    workload = policy.workload if policy.workload is not None else snapshot_workload(snapshot)
    frag = _Plain(state, workload, policy.exact)
    waiting = [job for job in jobs if not frag.place(job)]
    unplaced.update(explain_waiting(state, waiting))
    return finish(policy.name, snapshot, state, unplaced)


# -- random snapshots in which equal amounts are common ---------------------------------------


def random_snapshot(rng: random.Random) -> Snapshot:
    """1-7 nodes of 0-5 devices of mixed sizes (a few units of 100), some of it used, and
    device, multi-device and CPU jobs whose shares and cores often equal what is free, many
    with the needs of an earlier job or all of them but the device count."""
    unit = 100
    nodes, running = [], []
    for i in range(rng.randint(1, 7)):
        sizes = rng.choice([[8], [8, 8, 8, 8], [4, 8], [2, 6, 8, 16], []])
        devices = tuple(
            Device(str(d), size * unit, rng.choice([60, 240]))
            for d, size in enumerate(sizes[: rng.randint(0, 5)])
        )
        cores = rng.choice([4, 8, 16])
        nodes.append(Node(f"n{i}", cores * MILLI, rng.choice([16384, 65536]), devices))
        for dev in devices:
            if rng.random() < 0.5:
                running.append(
                    RunningJob(
                        f"r{i}.{dev.id}",
                        f"n{i}",
                        (dev.id,),
                        rng.randint(0, dev.memory_mib // unit) * unit,
                        10,
                        rng.randint(0, cores // 2) * MILLI,
                        100,
                    )
                )
    pending: list[Job] = []
    for j in range(rng.randint(1, 40)):
        if pending and rng.random() < 0.3:  # the needs of an earlier job, or all but one
            like = replace(rng.choice(pending), id=f"p{j}")
            if like.needs_device and rng.random() < 0.5:
                like = replace(like, device_count=rng.choice([1, 2, 4]))
            pending.append(like)
            continue
        kind = rng.choice(["device"] * 6 + ["multi", "cpu"])
        count = {"device": 1, "multi": rng.choice([2, 3, 4]), "cpu": 0}[kind]
        pending.append(
            Job(
                f"p{j}",
                device_memory_mib=0 if kind == "cpu" else rng.randint(0, 16) * unit // 2,
                device_threads=0 if kind == "cpu" else rng.choice([1, 10, 60, 120]),
                device_count=count,
                cpu_milli=rng.randint(0, 6) * MILLI,
                memory_mib=rng.choice([64, 9000, 30000]),
                kind="cpu" if kind == "cpu" else "device",
                processes=rng.choice([1, 1, 1, 2]),
            )
        )
    return Snapshot(tuple(nodes), tuple(running), tuple(pending))


def random_workload(rng: random.Random) -> tuple[tuple[Shape, int], ...]:
    """Shapes of shares 0-16 units of 50 (equal to free amounts, or between), counts of
    0-6 devices (6: more than any node has), with weights."""
    shapes = {
        (rng.randint(0, 8) * MILLI, rng.randint(0, 16) * 50, rng.randint(0, 6))
        for _ in range(rng.randint(0, 30))
    }
    return tuple((shape, rng.randint(1, 9)) for shape in sorted(shapes))


def policies(rng: random.Random, snapshot: Snapshot) -> list[FgdPolicy]:
    given = random_workload(rng)
    return [
        FgdPolicy(threads=threads, workload=workload, exact=exact)
        for threads in ("strict", "soft")
        for exact in (False, True)
        for workload in (None, given)
    ]


def compare(seed: int, runs: int) -> int:
    """Plans of both on ``runs`` random snapshots; how many jobs they placed in all."""
    rng = random.Random(seed)
    placed = 0
    for _ in range(runs):
        snapshot = random_snapshot(rng)
        for policy in policies(rng, snapshot):
            fast, plain = policy.plan(snapshot), plain_plan(policy, snapshot)
            assert check_plan(snapshot, fast, strict_threads=policy.threads == "strict") == []
            same = (fast.assignments, fast.unplaced) == (plain.assignments, plain.unplaced)
            assert same, (snapshot, policy)
            placed += fast.placed
    return placed


def test_fast_fgd_plans_what_the_plain_computation_plans() -> None:
    assert compare(15, 150) > 3000  # most jobs are placed: the choices are compared


def test_the_shape_by_shape_fallback_plans_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fgd, "TABLE_CELLS", 0)  # every workload too varied for the table
    monkeypatch.setattr(fgd, "DIRECT_BLOCK_CELLS", 7)  # and scored a few nodes at a time
    assert compare(16, 60) > 1000


@pytest.mark.parametrize("way", ["ranked by list", "ranked by search", "shape by shape"])
def test_fragmentation_of_any_node_state_is_the_shape_by_shape_sum(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # F of arbitrary rows (free amounts incl. 0 and missing slots, any free cores, negative
    # too) from the table (free amounts ranked among the shares by a list, or by binary
    # search), and from the fallback, against the plain per-shape sum.
    table = way != "shape by shape"
    if not table:
        monkeypatch.setattr(fgd, "TABLE_CELLS", 0)
    if way == "ranked by search":
        monkeypatch.setattr(fgd, "RANK_LIST_UP_TO", -1)
    rng = random.Random(17)
    for _ in range(200):
        width = rng.randint(1, 6)
        node = Node("n", 8 * MILLI, 1024, tuple(Device(str(d), 800, 1) for d in range(width)))
        state = ClusterState(Snapshot((node,), (), ()))
        workload = random_workload(rng)
        fast, plain = _Fragmentation(state, workload, False), _Plain(state, workload, False)
        assert (fast.table is None) == (not table)
        if table:
            assert (fast.table.share_rank is None) == (way == "ranked by search")  # type: ignore[union-attr]
        rows = np.array(
            [
                [rng.choice([-1, 0, 50, 100, rng.randint(0, 800)]) for _ in range(width)]
                for _ in range(30)
            ],
            dtype=np.int64,
        )
        cpu = np.array([rng.randint(-2, 9) * MILLI for _ in range(30)], dtype=np.int64)
        count = (rows[:, :, None] >= plain.dev_m[None, None, :]).sum(axis=1)
        small = np.where(
            (rows[:, :, None] < plain.dev_m[None, None, :]) & (rows[:, :, None] >= 0),
            rows[:, :, None],
            0,
        ).sum(axis=1)
        expected = plain._node_frag(cpu, count, small, np.clip(rows, 0, None).sum(axis=1))
        assert fast.of(rows, cpu).tolist() == expected.tolist()


def test_the_table_is_used_on_the_benchmark_mix_and_refused_beyond_its_cells() -> None:
    # the modern-GPU mix of bench/plan_scale.py: 16 core counts x 315 shares, one device each
    state = ClusterState(Snapshot((Node("n", MILLI, 1, (Device("0", 81559, 1),)),), (), ()))
    workload = tuple(((c * MILLI, g * 256, 1), 1) for c in range(1, 17) for g in range(4, 319))
    assert _Fragmentation(state, workload, False).table is not None
    wide = tuple(((c, c, 1), 1) for c in range(2100))  # 2 x 2,101 x 2,101 cells
    assert _Fragmentation(state, wide, False).table is None


def test_moves_to_nodes_in_the_same_state_are_scored_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # every candidate list deduplicated, however short: of moves to equal nodes only the
    # first is scored, and the plans are the plain computation's
    monkeypatch.setattr(fgd, "DISTINCT_FROM", 0)
    monkeypatch.setattr(fgd, "SCREEN_FROM", 0)  # nodes numbered by state in every plan
    assert compare(17, 60) > 1000


def test_repeats_found_by_a_sort_plan_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # every candidate list deduplicated by the sort, not by comparing neighbours on a node:
    # the plans are the plain computation's too
    monkeypatch.setattr(fgd, "DISTINCT_FROM", 0)
    monkeypatch.setattr(fgd, "NEAR_RUN", 0)
    assert compare(18, 60) > 1000


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(1, 3)), max_size=80))
def test_distinct_moves_by_neighbours_are_those_by_a_sort(
    devices: list[tuple[int, int, int]],
) -> None:
    # devices (node, free, total) on nodes of up to 80 devices; every device a candidate
    devices = sorted(devices, key=lambda d: d[0])
    nodes = tuple(
        Node(
            f"n{n}",
            MILLI,
            1,
            tuple(Device(str(i), total, 1) for i, (m, _, total) in enumerate(devices) if m == n),
        )
        for n in sorted({d[0] for d in devices})
    )
    state = ClusterState(Snapshot(nodes, (), ()))
    state.dev_free_mem[:] = [free for _, free, _ in devices]
    cand = np.arange(state.device_count, dtype=np.int64)
    shortest, near = fgd.DISTINCT_FROM, fgd.NEAR_RUN
    try:
        fgd.DISTINCT_FROM = 0  # every list deduplicated, however short
        by_neighbours = distinct_moves(state, cand).tolist()
        fgd.NEAR_RUN = 0
        by_sort = distinct_moves(state, cand).tolist()
    finally:
        fgd.DISTINCT_FROM, fgd.NEAR_RUN = shortest, near
    assert by_neighbours == by_sort


def test_the_nodes_of_each_state_and_its_head_follow_the_placements() -> None:
    # after every placement: each state's members are the nodes numbered with it, in
    # order, the heads are the devices of each state's first node, and the repeats those
    # in the state of one before them on their node
    rng = random.Random(19)
    for _ in range(40):
        snapshot = random_snapshot(rng)
        state = ClusterState(snapshot)
        frag = _Fragmentation(state, snapshot_workload(snapshot), False, by_state=True)
        for job in sorted(snapshot.pending, key=priority_key):
            frag.place(job)
            assert frag.node_state is not None
            members: dict[int, list[int]] = {}
            for node, number in enumerate(frag.node_state.tolist()):
                members.setdefault(number, []).append(node)
            assert frag._members == members
            heads = np.zeros(state.device_count, dtype=np.bool_)
            for nodes in members.values():
                heads[state.node_devs[nodes[0]]] = True
            assert frag.head_dev.tolist() == heads.tolist()
            repeats = []
            for devs in state.node_devs:
                seen = set()
                for d in devs:
                    key = tuple(
                        int(a[d])
                        for a in (
                            state.dev_free_mem,
                            state.dev_total_mem,
                            state.dev_free_thr,
                            state.dev_threads,
                        )
                    )
                    repeats.append(key in seen)
                    seen.add(key)
            assert frag.repeat_dev.tolist() == repeats


@given(st.lists(st.integers(0, 40), max_size=300))
def test_first_of_each_is_uniques_first_positions(values: list[int]) -> None:
    key = np.array(values, dtype=np.int64)
    want = np.sort(np.unique(key, return_index=True)[1]) if values else []
    assert fgd.first_of_each(key).tolist() == list(want)
