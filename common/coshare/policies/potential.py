"""What a placement leaves for the jobs to come: a node's *potential*, and the best place for a job.

The ``sharepack`` policy places a job where its node's potential drops least. A node's
potential is the device memory it is expected to leave unused, in MiB, made of two parts:

- **Fragmentation** (FGD, Weng et al., ATC'23): for each expected job shape ``m`` with weight
  ``p_m``, the free device memory of the node that shape could not use, ``R_n`` (all of it)
  if the shape cannot run on the node at all (too few cores or host memory, fewer than ``k``
  devices with room) and otherwise the free memory of the devices with less room than the
  shape needs; averaged over the shapes.
- **Stranding**: device memory that the node's free host resources cannot feed. The expected
  jobs bring ``rho_cpu`` cores and ``rho_mem`` host MiB per MiB of device memory; a node
  with ``F`` MiB of free device memory, ``C`` free cores and ``H`` free host MiB strands
  ``max(0, F - C / rho_cpu, F - H / rho_mem)``. FGD sees the cores only through the shapes
  that no longer fit; a node drained of cores by CPU-heavy jobs then keeps its devices idle.
  On the Alibaba trace this term takes the idle GPUs on core-less nodes from 0.1-2% of the
  cluster to nearly none (README, "The Alibaba fragmentation benchmark").

Expected shapes are the most frequent (host cores, host memory, device memory, device count)
among the jobs the caller names (the benchmark: the trace's pod list), or among the pending
and running jobs of the snapshot: the cycle's own batch is what it looks ahead to.

Speed: devices sit in a node x slot matrix, and per node and shape the count of devices that
could take the shape and the free memory of those that could not are kept up to date as jobs
are placed, so scoring every candidate device is one vectorized expression. Nodes in the same
state score the same, so only the first of each group of identical nodes is scored (the same
choice: ties go to snapshot order). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Snapshot
from coshare.policies.base import ClusterState, Mask
from coshare.policies.fgd import distinct_moves, single_device_moves, target_workload

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

Shape = tuple[int, int, int, int]
"""(host cpu_milli, host memory_mib, device memory per device, device count); a CPU-only job
has device memory and count 0. Host values are for all of the job's processes."""

#: The share of jobs the kept shapes cover (FGD's 95%), and at most this many shapes.
COVERAGE = 0.95
MAX_SHAPES = 64
#: Identical nodes are grouped (and only the first of each scored) from this many nodes on;
#: below it scoring every node costs less than grouping them.
GROUP_FROM_NODES = 256


def job_shape(job: Job) -> Shape:
    """The shape a job is counted by."""
    if not job.needs_device:
        return (job.total_cpu_milli, job.total_memory_mib, 0, 0)
    return (job.total_cpu_milli, job.total_memory_mib, job.device_memory_mib, job.device_count)


def expected_shapes(
    shapes: Iterable[Shape], coverage: float = COVERAGE, limit: int = MAX_SHAPES
) -> tuple[tuple[Shape, int], ...]:
    """The most frequent shapes with their counts, until they cover ``coverage`` of all (at
    most ``limit``); ties in frequency go to the smaller shape, so the result is deterministic.
    """
    return target_workload(shapes, coverage, limit)


def snapshot_shapes(snapshot: Snapshot) -> tuple[tuple[Shape, int], ...]:
    """The expected shapes seen in a snapshot: its pending and running jobs."""
    shapes = [job_shape(j) for j in snapshot.pending]
    shapes += [(r.cpu_milli, r.memory_mib, r.device_memory_mib if r.devices else 0,
                len(r.devices)) for r in snapshot.running]  # fmt: skip
    return expected_shapes(shapes)


class LazyPotential:
    """A :class:`Potential` built on first use: a cycle that places no job by potential (a
    large contended one) does not pay for scoring every node."""

    def __init__(self, state: ClusterState, shapes: Callable[[], Sequence[tuple[Shape, int]]],
                 stranding: float = 1.0) -> None:  # fmt: skip
        self._state, self._shapes, self._stranding = state, shapes, stranding
        self._built: Potential | None = None

    def _make(self) -> Potential:
        return Potential(self._state, self._shapes(), self._stranding)

    def place(self, job: Job, ok: Mask) -> bool:
        """:meth:`Potential.place`."""
        if self._built is None:
            self._built = self._make()
        return self._built.place(job, ok)

    def reset(self) -> None:
        """:meth:`Potential.reset` (nothing to do before the first use)."""
        if self._built is not None:
            self._built.reset()

    def relocate(self, jobs: Sequence[Job], mark: int, ok: Callable[[Job], Mask]) -> None:
        """:meth:`Potential.relocate` (nothing was placed by potential before the first use)."""
        if self._built is not None:
            self._built.relocate(jobs, mark, ok)


class Potential:
    """The potential of every node of a :class:`ClusterState`, kept up to date as jobs are
    placed through :meth:`place`.

    Args:
        state: the ledger to score and to place into.
        shapes: the expected job shapes with their weights.
        stranding: weight of the stranding part (1: a stranded MiB counts as a fragment MiB).
    """

    def __init__(
        self, state: ClusterState, shapes: Sequence[tuple[Shape, int]], stranding: float = 1.0
    ) -> None:
        self.state = state
        self.stranding = stranding
        n = len(state.nodes)
        width = max((len(d) for d in state.node_devs), default=0)
        # slot -> global device index; missing slots point one past the last device
        self.slot = np.full((n, max(width, 1)), state.device_count, dtype=np.int64)
        for i, devs in enumerate(state.node_devs):
            self.slot[i, : len(devs)] = devs
        self.cpu_m = np.array([s[0] for s, _ in shapes], dtype=np.int64)
        self.mem_m = np.array([s[1] for s, _ in shapes], dtype=np.int64)
        self.dev_m = np.array([s[2] for s, _ in shapes], dtype=np.int64)
        self.k_m = np.array([s[3] for s, _ in shapes], dtype=np.int64)
        weights = np.array([w for _, w in shapes], dtype=np.float64)
        self.p_m: Floats = weights / max(float(weights.sum()), 1.0)
        device_mem = float((weights * self.dev_m * self.k_m).sum())
        device_jobs = self.k_m > 0
        # host resources the expected device jobs bring per MiB of device memory
        self.rho_cpu = float((weights * self.cpu_m)[device_jobs].sum()) / max(device_mem, 1.0)
        self.rho_mem = float((weights * self.mem_m)[device_jobs].sum()) / max(device_mem, 1.0)
        self.count = np.zeros((n, len(shapes)), dtype=np.int64)
        self.small = np.zeros((n, len(shapes)), dtype=np.int64)
        self.free_total = np.zeros(n, dtype=np.int64)
        self.value = np.zeros(n, dtype=np.float64)
        self._refresh(np.arange(n, dtype=np.int64))
        self._group_all()

    # -- the potential ------------------------------------------------------------------------

    def _free(self, rows: Ints) -> Ints:
        free: Ints = np.append(np.clip(self.state.dev_free_mem, 0, None), -1)[self.slot[rows]]
        return free

    def _refresh(self, rows: Ints) -> None:
        free = self._free(rows)
        fits = free[:, :, None] >= self.dev_m[None, None, :]
        self.count[rows] = fits.sum(axis=1)
        self.small[rows] = np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0).sum(1)
        self.free_total[rows] = np.clip(free, 0, None).sum(axis=1)
        s = self.state
        self.value[rows] = self.of(s.node_free_cpu[rows], s.node_free_mem[rows], self.count[rows],
                                   self.small[rows], self.free_total[rows])  # fmt: skip

    def of(self, cpu: Ints, mem: Ints, count: Ints, small: Ints, free_total: Ints) -> Floats:
        """The potential of nodes in the given state (arrays over candidate rows)."""
        runs = (cpu[:, None] >= self.cpu_m[None, :]) & (mem[:, None] >= self.mem_m[None, :])
        runs &= (count >= self.k_m[None, :]) & (self.k_m[None, :] > 0)
        frag = np.where(runs, small, free_total[:, None]) @ self.p_m
        free = free_total.astype(np.float64)
        stranded = np.maximum(free - cpu / max(self.rho_cpu, 1e-12),
                              free - mem / max(self.rho_mem, 1e-12))  # fmt: skip
        if self.rho_mem <= 0:
            stranded = free - cpu / max(self.rho_cpu, 1e-12)
        if self.rho_cpu <= 0:
            stranded = np.zeros_like(free)
        out: Floats = frag + self.stranding * np.maximum(stranded, 0.0)
        return out

    # -- groups of identical nodes ------------------------------------------------------------

    def _rows(self, nodes: Ints) -> Ints:
        """What a node's score depends on, one row per node: free cores and host memory,
        whether a CPU-only job holds it, and per slot its device's free memory, free threads,
        hardware threads and whether anything runs there."""
        s = self.state
        valid = self.slot[nodes] < s.device_count
        idx = np.where(valid, self.slot[nodes], 0)

        def per_slot(values: Ints) -> Ints:
            if not values.size:  # a cluster without devices: every slot is empty
                empty: Ints = np.full(idx.shape, -1, dtype=np.int64)
                return empty
            out: Ints = np.where(valid, values[idx], -1)
            return out

        rows: Ints = np.concatenate([
            np.stack([s.node_free_cpu[nodes], s.node_free_mem[nodes],
                      s.node_host_jobs[nodes] > 0], axis=1),
            per_slot(s.dev_free_mem), per_slot(s.dev_free_thr), per_slot(s.dev_threads),
            per_slot((s.dev_jobs > 0).astype(np.int64)),
        ], axis=1).astype(np.int64)  # fmt: skip
        return rows

    def _group_all(self) -> None:
        n = len(self.state.nodes)
        self.groups: dict[bytes, list[int]] = {}
        self.key_of: list[bytes] = []
        self.grouped = n > GROUP_FROM_NODES
        if not self.grouped:
            self.first = np.ones(n, dtype=np.bool_)
            return
        self.first = np.zeros(n, dtype=np.bool_)
        rows = self._rows(np.arange(n, dtype=np.int64))
        # sort rows (ties by node index), then cut where a row differs from the one before
        order = np.lexsort((np.arange(n), *rows.T[::-1]))
        ordered = rows[order]
        starts = np.flatnonzero(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)])
        self.first[order[starts]] = True
        self.key_of = [b""] * n
        for members in np.split(order, starts[1:]):
            key = rows[members[0]].tobytes()
            group = members.tolist()
            self.groups[key] = group
            for i in group:
                self.key_of[i] = key

    def _regroup(self, i: int) -> None:
        if not self.grouped:
            return
        old = self.key_of[i]
        members = self.groups[old]
        members.remove(i)
        self.first[i] = False
        if members:
            self.first[members[0]] = True
        else:
            del self.groups[old]
        key = self._rows(np.array([i], dtype=np.int64))[0].tobytes()
        members = self.groups.setdefault(key, [])
        if members and members[0] < i:
            members.append(i)
            members.sort()
        else:
            if members:
                self.first[members[0]] = False
            members.insert(0, i)
            self.first[i] = True
        self.key_of[i] = key

    def reset(self) -> None:
        """Bring every node up to date after the ledger changed behind our back."""
        self._refresh(np.arange(len(self.state.nodes), dtype=np.int64))
        self._group_all()

    def changed(self, node: int) -> None:
        """Bring ``node`` up to date after the ledger changed it."""
        self._refresh(np.array([node], dtype=np.int64))
        self._regroup(node)

    # -- choosing -----------------------------------------------------------------------------

    def best(self, job: Job, ok: Mask) -> tuple[int, list[int]] | None:
        """Where ``job`` lowers its node's potential least, among the devices in ``ok``
        (already checked to hold one share of it): ``(node, devices)``, or ``None``."""
        s = self.state
        if not job.needs_device:
            return self._best_host(job, ok)
        cand = np.flatnonzero(ok & self.first[s.dev_node])
        if len(cand) == 0:
            return None
        if job.device_count == 1:
            return self._best_single(job, cand)
        return self._best_multi(job, ok)

    def _best_single(self, job: Job, cand: Ints) -> tuple[int, list[int]]:
        s = self.state
        cand = distinct_moves(s, cand)  # the same choice, fewer candidates to score
        nodes, b, count, small = single_device_moves(s, self.dev_m, self.count, self.small,
                                                     job, cand)  # fmt: skip
        after = self.of(s.node_free_cpu[nodes] - job.total_cpu_milli,
                        s.node_free_mem[nodes] - job.total_memory_mib, count, small,
                        self.free_total[nodes] - job.device_memory_mib)  # fmt: skip
        rise = after - self.value[nodes]
        # least rise, then the device left with least room (best fit), then snapshot order
        pick = int(np.lexsort((cand, b[:, 0], rise))[0])
        return int(nodes[pick]), [int(cand[pick])]

    def _best_multi(self, job: Job, ok: Mask) -> tuple[int, list[int]] | None:
        s = self.state
        best: tuple[float, int, list[int]] | None = None
        for n in s.nodes_with_devices(job, ok & self.first[s.dev_node]).tolist():
            devs = s.least_free_on(n, ok, job.device_count)
            free = self._free(np.array([n]))
            for d in devs:
                free[0, s.node_devs[n].index(d)] -= job.device_memory_mib
            fits = free[:, :, None] >= self.dev_m[None, None, :]
            small = np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0).sum(1)
            after = self.of(s.node_free_cpu[[n]] - job.total_cpu_milli,
                            s.node_free_mem[[n]] - job.total_memory_mib, fits.sum(1), small,
                            np.clip(free, 0, None).sum(1))  # fmt: skip
            rise = float(after[0] - self.value[n])
            if best is None or rise < best[0]:
                best = (rise, n, sorted(devs))
        return None if best is None else (best[1], best[2])

    def _best_host(self, job: Job, ok: Mask) -> tuple[int, list[int]] | None:
        s = self.state
        nodes = np.flatnonzero(ok & self.first)
        if len(nodes) == 0:
            return None
        cpu_after = s.node_free_cpu[nodes] - job.total_cpu_milli
        after = self.of(cpu_after, s.node_free_mem[nodes] - job.total_memory_mib,
                        self.count[nodes], self.small[nodes], self.free_total[nodes])  # fmt: skip
        pick = int(np.lexsort((nodes, cpu_after, after - self.value[nodes]))[0])
        return int(nodes[pick]), []

    def relocate(self, jobs: Sequence[Job], mark: int, ok: Callable[[Job], Mask]) -> None:
        """One pass of local search over the single-device jobs among ``jobs`` assigned from
        ledger position ``mark`` on, the last placed first: each is taken out and put back
        where the potential now rises least (``ok(job)``: where it may go). A job placed
        early saw fewer of the cycle's jobs than a later one; now it sees them all. Every job
        stays placed (it can always go back where it was), in the same order."""
        by_id = {j.id: j for j in jobs}
        s = self.state
        for k in range(len(s.assignments) - 1, mark - 1, -1):
            job = by_id.get(s.assignments[k].job)
            if job is None or not job.needs_device or job.device_count != 1:
                continue
            node, _ = s.take_back(k, job)
            self.changed(node)
            where = self.best(job, ok(job))
            if where is None:  # cannot happen: its own place is free again; be safe
                raise AssertionError(f"job {job.id} lost its place")
            s.place(job, where[0], where[1])
            s.assignments.insert(k, s.assignments.pop())
            self.changed(where[0])

    def place(self, job: Job, ok: Mask) -> bool:
        """Place ``job`` at :meth:`best` among ``ok`` and update the ledger; ``False`` when
        it fits none of them."""
        where = self.best(job, ok)
        if where is None:
            return False
        node, devices = where
        self.state.place(job, node, devices)
        self.changed(node)
        return True
