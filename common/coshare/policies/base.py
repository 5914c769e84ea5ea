"""What every policy shares: the protocol, free-resource accounting, and the reasons.

A policy is a small object with a name and ``plan(snapshot) -> Plan``. It is pure and
deterministic: the same snapshot (and seed) gives the same plan, it reads no clock and does no
I/O, and it never raises for a job that cannot be placed: that job goes into
``Plan.unplaced`` with a reason a person can act on.

:class:`ClusterState` is the mutable ledger a policy fills while it plans: free device memory
and threads, free host cores and memory, jobs per device and node, as numpy arrays so that
"which devices can take this job" is one vectorized expression even on 10,000 devices.
Running and already-planned jobs are subtracted first, so nothing is double-booked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from coshare.model import Assignment, Job, Node, Plan, Snapshot, Unplaced, milli_to_cores
from coshare.model import priority_key as priority_key  # the order is the model's
from coshare.ports import Policy as Policy  # the protocol lives with the cycle's ports

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
Ranks = npt.NDArray[np.signedinteger[Any]]


def shape_of(job: Job) -> tuple[int, int, int, int, int, str]:
    """What placement depends on: jobs of equal shape fit exactly the same places."""
    # Fields read directly, not through the properties: this runs for every pending job
    # several times per plan, and the simulator plans hundreds of times per run.
    kind = job.kind
    processes = job.processes
    return (
        job.device_memory_mib,
        job.device_threads,
        job.device_count if kind == "device" else 0,
        job.cpu_milli * processes,
        job.memory_mib * processes,
        kind,
    )


def cores_text(cpu_milli: int | np.integer) -> str:
    return f"{milli_to_cores(int(cpu_milli))}"


class ClusterState:
    """Free resources of the cluster while a policy plans, and the assignments made so far.

    Device arrays are indexed by a global device index (nodes in snapshot order, devices in
    node order); node arrays by node index.

    Args:
        snapshot: the cluster, its running and planned jobs.
        strict_threads: whether the sum of declared threads on a device must stay within its
            hardware threads (``strict``); a single job never exceeds them in either mode.
    """

    def __init__(self, snapshot: Snapshot, strict_threads: bool = True) -> None:
        self.strict = strict_threads
        nodes = snapshot.nodes
        self.nodes: tuple[Node, ...] = nodes
        self.node_names = [n.name for n in nodes]
        self.node_index = {n.name: i for i, n in enumerate(nodes)}

        sizes = [len(node.devices) for node in nodes]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + size)
        self.node_devs: list[list[int]] = [
            list(range(a, a + k)) for a, k in zip(starts, sizes, strict=False)
        ]
        devices = [dev for node in nodes for dev in node.devices]
        dev_node = [i for i, size in enumerate(sizes) for _ in range(size)]
        self.dev_ids: list[str] = [dev.id for dev in devices]
        total_mem = [dev.memory_mib for dev in devices]
        threads = [dev.threads for dev in devices]
        # Running and planned jobs are summed over flat lists at once: item-by-item
        # updates cost a microsecond each, and a snapshot can hold thousands of placements
        # (the simulator builds one every cycle).
        n_nodes, n_devs = len(nodes), len(devices)
        running = snapshot.running
        node_index = self.node_index
        on = [node_index[r.node] for r in running]

        def per_node(values: list[int]) -> Ints:
            out: Ints = np.zeros(n_nodes, dtype=np.int64)
            np.add.at(out, on, np.array(values, dtype=np.int64))  # exact, unlike bincount's floats
            return out

        local: list[dict[str, int]] = [
            {dev.id: starts[i] + k for k, dev in enumerate(node.devices)}
            for i, node in enumerate(nodes)
        ]
        held = [(local[n][d], r) for n, r in zip(on, running, strict=True) for d in r.devices]
        dev_at = [d for d, _ in held]

        def per_device(values: list[int]) -> Ints:
            out: Ints = np.zeros(n_devs, dtype=np.int64)
            np.add.at(out, dev_at, np.array(values, dtype=np.int64))
            return out

        def ints(values: list[int]) -> Ints:
            return np.array(values, dtype=np.int64)

        self._local = local
        self.node_total_cpu = ints([n.cpu_milli for n in nodes])
        self.node_total_mem = ints([n.memory_mib for n in nodes])
        self.node_free_cpu = self.node_total_cpu - per_node([r.cpu_milli for r in running])
        self.node_free_mem = self.node_total_mem - per_node([r.memory_mib for r in running])
        self.node_jobs = per_node([1] * len(running))
        self.node_host_jobs = per_node([0 if r.devices else 1 for r in running])  # CPU jobs
        self.dev_node = ints(dev_node)
        self.dev_total_mem = ints(total_mem)
        self.dev_threads = ints(threads)
        self.dev_free_mem = self.dev_total_mem - per_device([r.device_memory_mib for _, r in held])
        self.dev_free_thr = self.dev_threads - per_device([r.device_threads for _, r in held])
        self.dev_jobs = per_device([1] * len(held))
        self.assignments: list[Assignment] = []
        self._most_free: dict[bool, tuple[int, int, int]] = {}
        self._labels: dict[str, str] = {}
        self._node_most_mem: Ints | None = None
        self._device_starts: tuple[Ints, Ints] | None = None

    def device_index(self, node: str, device: str) -> int:
        """The global index of ``device`` of ``node``."""
        return self._local[self.node_index[node]][device]

    @property
    def device_count(self) -> int:
        """Number of devices in the cluster."""
        return len(self.dev_ids)

    def dev_label(self, d: int) -> str:
        """``node/device`` for messages."""
        return f"{self.node_names[int(self.dev_node[d])]}/{self.dev_ids[d]}"

    # -- placing -----------------------------------------------------------------------------

    def place(
        self, job: Job, node: int, devices: Sequence[int] = (), processes: int | None = None
    ) -> None:
        """Record that ``job`` goes to ``node`` (and ``devices`` there) and take its resources.

        ``processes``: the part of a gang on this node (:mod:`coshare.ledger.gangs`), which holds
        that many processes' cores and memory; ``None``: the whole job."""
        count = job.processes if processes is None else processes
        self.node_free_cpu[node] -= job.cpu_milli * count
        self.node_free_mem[node] -= job.memory_mib * count
        self.node_jobs[node] += 1
        self.node_host_jobs[node] += not devices
        for d in devices:
            self.dev_free_mem[d] -= job.device_memory_mib
            self.dev_free_thr[d] -= job.device_threads
            self.dev_jobs[d] += 1
        ids = tuple(self.dev_ids[d] for d in devices)
        self.assignments.append(Assignment(job.id, self.node_names[node], ids, processes))
        self.changed()

    def take_back(self, index: int, job: Job) -> tuple[int, list[int]]:
        """Undo the ``index``-th assignment (of ``job``): its resources are free again.

        Returns:
            The node and devices it had.
        """
        a = self.assignments.pop(index)
        node = self.node_index[a.node]
        devices = [self._local[node][d] for d in a.devices]
        self.node_free_cpu[node] += job.total_cpu_milli
        self.node_free_mem[node] += job.total_memory_mib
        self.node_jobs[node] -= 1
        self.node_host_jobs[node] -= not devices
        for d in devices:
            self.dev_free_mem[d] += job.device_memory_mib
            self.dev_free_thr[d] += job.device_threads
            self.dev_jobs[d] -= 1
        self.changed()
        return node, devices

    def place_single(
        self, placed: Sequence[tuple[Job, int, int]], need: Ints | None = None
    ) -> None:
        """:meth:`place` for many single-device jobs at once: ``(job, node, device)`` each, in
        order (the caller has checked that they fit together); ``need``: their
        :func:`needs_of`, when the caller has it."""
        if not placed:
            return
        jobs, node_of, dev_of = zip(*placed, strict=True)
        nodes = np.array(node_of, dtype=np.int64)
        devs = np.array(dev_of, dtype=np.int64)
        if need is None:
            need = needs_of(jobs)
        np.subtract.at(self.node_free_cpu, nodes, need[:, 2])
        np.subtract.at(self.node_free_mem, nodes, need[:, 3])
        np.add.at(self.node_jobs, nodes, 1)
        np.subtract.at(self.dev_free_mem, devs, need[:, 0])
        np.subtract.at(self.dev_free_thr, devs, need[:, 1])
        np.add.at(self.dev_jobs, devs, 1)
        names, ids = self.node_names, self.dev_ids
        self.assignments.extend(
            map(
                _single_assignment,
                map(attrgetter("id"), jobs),
                map(names.__getitem__, node_of),
                zip(map(ids.__getitem__, dev_of)),
            )
        )
        self.changed()

    def changed(self) -> None:
        """Forget what was cached about free resources (after they changed)."""
        self._most_free.clear()
        self._labels.clear()
        self._node_most_mem = None

    def node_most_free_device_mem(self) -> Ints:
        """Per node, the most free memory of any of its devices (-1 without devices), cached
        until the next :meth:`place` (a quick bound for gangs, :mod:`coshare.policies.gang`)."""
        if self._node_most_mem is None:
            out: Ints = np.full(len(self.nodes), -1, dtype=np.int64)
            if self._device_starts is None:
                with_devices = [i for i, devs in enumerate(self.node_devs) if devs]
                starts = [self.node_devs[i][0] for i in with_devices]
                self._device_starts = (
                    np.array(with_devices, dtype=np.int64),
                    np.array(starts, dtype=np.int64),
                )
            nodes, starts_at = self._device_starts
            if len(nodes):
                out[nodes] = np.maximum.reduceat(self.dev_free_mem, starts_at)
            self._node_most_mem = out
        return self._node_most_mem

    def most_free_device(self) -> str:
        """``N MiB on node/device`` for the device with the most free memory (``-`` when the
        cluster has none), cached until the next :meth:`place`."""
        label = self._labels.get("most")
        if label is None:
            d = int(np.argmax(self.dev_free_mem)) if self.device_count else -1
            label = (
                f"{max(int(self.dev_free_mem[d]), 0)} MiB on {self.dev_label(d)}" if d >= 0 else "-"
            )
            self._labels["most"] = label
        return label

    def beyond_free(self, job: Job) -> bool:
        """Whether ``job`` surely fits nowhere now: it needs more device memory than any
        device has free, or more host cores or memory than any node (a quick test before
        the array work of :meth:`device_ok`)."""
        most_mem, most_cpu, most_host = self.most_free()
        return (
            (job.needs_device and job.device_memory_mib > most_mem)
            or job.total_cpu_milli > most_cpu
            or job.total_memory_mib > most_host
        )

    def fitting(self, jobs: Sequence[Job], exclude: Mask | None = None) -> Mask:
        """Which single-device jobs some device (not in ``exclude``) could take now, for many
        jobs at once: each is compared with the devices no other device beats in every free
        resource (few, even on a large cluster), a block of jobs at a time."""
        return self.fitting_needs(needs_of(jobs), exclude)

    def fitting_needs(self, need: Ints, exclude: Mask | None = None) -> Mask:
        """:meth:`fitting` for jobs given by :func:`needs_of`."""
        ok = np.ones(self.device_count, dtype=np.bool_) if exclude is None else ~exclude
        n = self.dev_node[ok]
        free = np.stack(
            [
                self.dev_free_mem[ok],
                self.dev_free_thr[ok] if self.strict else self.dev_threads[ok],
                self.dev_threads[ok],
                self.node_free_cpu[n],
                self.node_free_mem[n],
            ],
            axis=1,
        )
        best = undominated_rows(free)
        cols = need[:, [0, 1, 1, 2, 3]]  # memory, threads (free and hardware), cores, host
        out: Mask = np.zeros(len(need), dtype=np.bool_)
        block = max(1, (1 << 20) // max(len(best), 1))
        for start in range(0, len(need), block):
            part = cols[start : start + block]
            below: Mask = np.all(part[:, None, :] <= best[None, :, :], axis=2)
            out[start : start + block] = below.any(axis=1)
        return out

    def may_fit(self, jobs: Sequence[Job], idle_only: bool = False) -> Mask:
        """For each job, ``False`` where it surely fits nowhere now: a single-device job no
        device could take (:meth:`fitting`), a CPU job no node has the cores and memory
        for; with ``idle_only``, only devices and nodes nothing uses count. Multi-device
        jobs are ``True`` (not screened: the policy looks)."""
        out: Mask = np.ones(len(jobs), dtype=np.bool_)
        single = [i for i, job in enumerate(jobs) if job.needs_device and job.device_count == 1]
        if single:
            busy = None
            if idle_only:
                busy = (self.dev_jobs > 0) | (self.node_host_jobs[self.dev_node] > 0)
            out[single] = self.fitting([jobs[i] for i in single], busy)
        host = [i for i, job in enumerate(jobs) if not job.needs_device]
        if host:
            free = np.stack([self.node_free_cpu, self.node_free_mem], axis=1)
            if idle_only:
                free = free[self.node_jobs == 0]
            need = needs_of([jobs[i] for i in host])[:, 2:4]
            if len(free) == 0:
                out[host] = False
            else:
                room = undominated_rows(free)
                out[host] = np.all(need[:, None, :] <= room[None, :, :], axis=2).any(axis=1)
        return out

    def most_free(self, idle_only: bool = False) -> tuple[int, int, int]:
        """Upper bounds for a quick "fits nowhere": the most free device memory (on idle
        devices, with ``idle_only``), host cores and host memory of any node; -1 when none.

        Cached until the next :meth:`place`, so rejecting the many job shapes that no longer
        fit costs no array work (the simulator plans hundreds of times per run).
        """
        bounds = self._most_free.get(idle_only)
        if bounds is None:
            mem = self.dev_free_mem[self.dev_jobs == 0] if idle_only else self.dev_free_mem
            bounds = (
                int(mem.max(initial=-1)),
                int(self.node_free_cpu.max(initial=-1)),
                int(self.node_free_mem.max(initial=-1)),
            )
            self._most_free[idle_only] = bounds
        return bounds

    # -- where could a job go now -----------------------------------------------------------

    def host_ok(self, job: Job) -> Mask:
        """Nodes with enough free host cores and memory for all of the job's processes."""
        ok: Mask = (self.node_free_cpu >= job.total_cpu_milli) & (
            self.node_free_mem >= job.total_memory_mib
        )
        return ok

    def device_ok(self, job: Job, start: int = 0, idle_only: bool = False) -> Mask:
        """Devices (from index ``start`` on) that can take one share of ``job`` now.

        A device qualifies when its free memory holds the job, its hardware threads cover the
        job's threads (and, in strict mode, its free threads do), and its node has the host
        cores and memory. ``idle_only`` also requires that nothing else uses the device and
        that no CPU-only job holds its node (such a job has the node to itself).
        """
        sl = slice(start, None)
        m, t = job.device_memory_mib, job.device_threads
        mask: Mask = (self.dev_free_mem[sl] >= m) & (self.dev_threads[sl] >= t)
        if self.strict:
            mask &= self.dev_free_thr[sl] >= t
        host = self.host_ok(job)
        if idle_only:
            mask &= self.dev_jobs[sl] == 0
            host &= self.node_host_jobs == 0
        mask &= host[self.dev_node[sl]]
        return mask

    def nodes_with_devices(self, job: Job, mask: Mask) -> Ints:
        """Node indices with at least ``job.device_count`` devices set in ``mask``."""
        if not mask.any():
            return np.zeros(0, dtype=np.int64)
        counts = np.bincount(self.dev_node[mask], minlength=len(self.nodes))
        return np.flatnonzero(counts >= job.device_count).astype(np.int64)

    def first_devices_on(self, node: int, mask: Mask, count: int) -> list[int]:
        """The first ``count`` devices of ``node`` set in ``mask`` (indexed from 0)."""
        return [d for d in self.node_devs[node] if mask[d]][:count]

    def least_free_on(self, node: int, mask: Mask, count: int) -> list[int]:
        """The ``count`` devices of ``node`` set in ``mask`` with the least free memory (ties:
        device order), for policies that fill devices tightly."""
        devs = [d for d in self.node_devs[node] if mask[d]]
        return sorted(devs, key=lambda d: (int(self.dev_free_mem[d]), d))[:count]

    def place_host_job(self, job: Job, idle_only: bool = False) -> bool:
        """Place a CPU job on the first node with room (``idle_only``: an otherwise empty node)."""
        ok = self.host_ok(job)
        if idle_only:
            ok &= self.node_jobs == 0
        hits = np.flatnonzero(ok)
        if len(hits) == 0:
            return False
        self.place(job, int(hits[0]))
        return True

    def place_first_fit(
        self, job: Job, idle_only: bool = False, hints: dict[object, int] | None = None
    ) -> bool:
        """Place a job on the first node (and its first devices) in snapshot order with room.

        Args:
            job: the job.
            idle_only: only devices (or, for CPU jobs, nodes) that nothing else uses.
            hints: per job shape, the index before which no device fits any more. Free
                resources only shrink while a plan is made, so the first fitting device of a
                shape never moves left; remembering it keeps first fit linear overall.

        Returns:
            Whether the job was placed.
        """
        if not job.needs_device:
            return self.place_host_job(job, idle_only)
        if job.device_count == 1:
            shape = shape_of(job)
            most_mem, most_cpu, most_host = self.most_free(idle_only)
            if (
                job.device_memory_mib > most_mem
                or job.total_cpu_milli > most_cpu
                or job.total_memory_mib > most_host
            ):
                if hints is not None:
                    hints[shape] = self.device_count
                return False
            start = hints.get(shape, 0) if hints is not None else 0
            ok = self.device_ok(job, start, idle_only)
            if len(ok) == 0:
                return False
            first = int(ok.argmax())
            if not ok[first]:
                if hints is not None:
                    hints[shape] = self.device_count
                return False
            d = start + first
            if hints is not None:
                hints[shape] = d
            self.place(job, int(self.dev_node[d]), [d])
            return True
        ok = self.device_ok(job, 0, idle_only)
        nodes = self.nodes_with_devices(job, ok)
        if len(nodes) == 0:
            return False
        node = int(nodes[0])
        self.place(job, node, self.first_devices_on(node, ok, job.device_count))
        return True

    def place_best_fit(self, job: Job, mask: Mask | None = None) -> bool:
        """Place a job on the node and devices that leave the least free device memory.

        Used for multi-device jobs and aged jobs. Ties go to fewer free threads, then
        to snapshot order.
        """
        if not job.needs_device:
            return self.place_host_job(job)
        ok = self.device_ok(job) if mask is None else mask
        if job.device_count == 1:  # the same choice as below, as one vector expression
            cand = np.flatnonzero(ok)
            if len(cand) == 0:
                return False
            d = int(cand[np.lexsort((cand, self.dev_free_thr[cand], self.dev_free_mem[cand]))[0]])
            self.place(job, int(self.dev_node[d]), [d])
            return True
        nodes = self.nodes_with_devices(job, ok)
        if len(nodes) == 0:
            return False
        best: tuple[int, int, int] | None = None
        chosen: list[int] = []
        for n in nodes.tolist():
            devs = sorted(
                (d for d in self.node_devs[n] if ok[d]),
                key=lambda d: (int(self.dev_free_mem[d]), int(self.dev_free_thr[d]), d),
            )[: job.device_count]
            score = (
                sum(int(self.dev_free_mem[d]) for d in devs),
                sum(int(self.dev_free_thr[d]) for d in devs),
                devs[0],
            )
            if best is None or score < best:
                best, chosen = score, devs
        self.place(job, int(self.dev_node[chosen[0]]), sorted(chosen))
        return True


_new_object = object.__new__
(
    _set_job,
    _set_node,
    _set_devices,
    _set_processes,
    _set_harvest_from,
    _set_llc_ways,
    _set_membw,
    _set_llc_ways_spare,
) = (getattr(Assignment, f.name).__set__ for f in fields(Assignment))


def _single_assignment(job: str, node: str, devices: tuple[str, ...]) -> Assignment:
    """``Assignment(job, node, devices)``, built slot by slot: the frozen class's ``__init__``
    sets each field through ``object.__setattr__`` by name, twice the time for the ~50,000
    placements of a large cycle (the test compares it with ``Assignment(...)``)."""
    out: Assignment = _new_object(Assignment)
    _set_job(out, job)
    _set_node(out, node)
    _set_devices(out, devices)
    _set_processes(out, None)
    _set_harvest_from(out, None)
    _set_llc_ways(out, None)
    _set_membw(out, None)
    _set_llc_ways_spare(out, None)
    return out


def needs_of(jobs: Sequence[Job]) -> Ints:
    """Per job: device memory, device threads, host cores and host memory of all processes."""
    # the fields flat through numpy's iterator, the per-process products as columns: half
    # the time of a tuple per job (called on ~100,000 jobs several times a cycle)
    flat = chain.from_iterable(map(_NEED_FIELDS, jobs))
    fields = np.fromiter(flat, dtype=np.int64, count=5 * len(jobs)).reshape(-1, 5)
    out: Ints = fields[:, :4].copy()
    out[:, 2:4] *= fields[:, 4:5]
    return out


#: What :func:`needs_of` reads of a job (the last: processes, which multiply the host needs).
_NEED_FIELDS = attrgetter(
    "device_memory_mib", "device_threads", "cpu_milli", "memory_mib", "processes"
)


def some_names(names: Sequence[str], most: int = 5) -> str:
    """``a, b, c, d, e and 7 more``: a bounded list for a note or a reason."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


#: Walks of fewer jobs are not screened: a screen compares with every device's free room
#: (an array over the cluster), which costs more than trying a few jobs (the simulator's
#: online protocol plans one job at a time, thousands of times).
SCREEN_FROM = 256


def screened(
    state: ClusterState,
    jobs: Sequence[Job],
    block: int = 1024,
    idle_only: bool = False,
    least: int = SCREEN_FROM,
) -> Iterator[tuple[Job, bool]]:
    """Each job of ``jobs`` with whether it may fit, for a policy that only places (never
    frees room) while it walks them in order: at the start of every ``block`` jobs, those of
    the block that fit nowhere at that moment are marked with :meth:`ClusterState.may_fit`.
    Placing only takes room, so a job that fits nowhere then fits nowhere later in the plan,
    and the policy's own search (an array over every device) runs only for the others: on a
    full cluster most pending jobs are of that kind. A walk of fewer than ``least`` jobs is
    not screened (every job may fit)."""
    if len(jobs) < least:
        yield from ((job, True) for job in jobs)
        return
    for start in range(0, len(jobs), block):
        part = jobs[start : start + block]
        yield from zip(part, state.may_fit(part, idle_only).tolist(), strict=True)


def unique_rows(rows: Ints) -> tuple[Ints, Ints, Ints]:
    """The distinct rows of an integer matrix in lexicographic order, the first position of
    each, and each row's place among them: ``np.unique(rows, axis=0, return_index=True,
    return_inverse=True)``, by a (stable) sort of the columns as keys instead of its sort of
    the rows as records (a third of the time on 100,000 jobs' needs)."""
    if not len(rows):
        none = np.zeros(0, dtype=np.int64)
        return rows[:0].copy(), none, none.copy()
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.empty(len(rows), dtype=np.bool_)
    new[0] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=new[1:])
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], order[new], inverse


def undominated_rows(rows: Ints) -> Ints:
    """The distinct rows no other row is at least as large as in every column.

    Sorted largest first (lexicographically), a row can only be beaten by rows before it;
    rows are checked a block at a time against those kept and against the block's earlier
    rows (a beaten one beating another is itself beaten by a kept one: transitivity).
    First, the rows a few strong ones beat are dropped (the most of each column, the largest
    share of all columns): on 10,000 devices after a large cycle that leaves a few hundred
    for the blocks, and what it drops the blocks would have dropped."""
    rows = _beaten_by_strong_rows(rows)
    rows = np.unique(rows, axis=0)[::-1]
    kept = np.zeros((0, rows.shape[1]), dtype=rows.dtype)
    block = 256
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        beaten: Mask = np.all(kept[None, :, :] >= part[:, None, :], axis=2)
        part = part[~beaten.any(axis=1)]
        inner: Mask = np.all(part[None, :, :] >= part[:, None, :], axis=2)
        inner &= np.tri(len(part), len(part), -1, dtype=np.bool_)  # only earlier rows
        kept = np.concatenate([kept, part[~inner.any(axis=1)]])
    return kept


def _beaten_by_strong_rows(rows: Ints) -> Ints:
    """``rows`` without those that one of a few strong rows beats (is at least as large in
    every column, and not equal)."""
    if len(rows) < 64:
        return rows
    scale = np.maximum(rows.max(axis=0), 1).astype(np.float64)
    strong = {int(i) for i in rows.argmax(axis=0).tolist()}
    strong.add(int((rows / scale).sum(axis=1).argmax()))
    columns = [rows[:, k] for k in range(rows.shape[1])]
    keep: Mask = np.ones(len(rows), dtype=np.bool_)
    for i in sorted(strong):
        pivot = rows[i].tolist()
        below: Mask = columns[0] <= pivot[0]
        same: Mask = columns[0] == pivot[0]
        for column, value in zip(columns[1:], pivot[1:], strict=True):
            below &= column <= value
            same &= column == value
        keep &= ~below | same
    out: Ints = rows[keep]
    return out


def as_ranks(rows: Ints, wants: Ints) -> tuple[Ranks, Ranks, list[Ints]]:
    """``rows`` and ``wants`` (the same columns) with each value replaced by its rank among
    the rows' distinct values of its column, and those values, column by column.

    A row's value is at least a want's exactly when its rank is at least the want's (the
    count of row values below the want), so every "some row has at least ..." and every
    "the most among rows with ..." has the same answer on ranks; ranks fit 16 bits where
    values take 64, and the jobs x rows comparisons of :func:`_explain_many` run at about
    twice the speed on them."""
    dtype = np.int16 if len(rows) < (1 << 15) - 1 else np.int64
    row_ranks: Ranks = np.empty(rows.shape, dtype=dtype)
    want_ranks: Ranks = np.empty(wants.shape, dtype=dtype)
    values = []
    for k in range(rows.shape[1]):
        distinct = np.unique(rows[:, k])
        row_ranks[:, k] = np.searchsorted(distinct, rows[:, k])
        want_ranks[:, k] = np.searchsorted(distinct, wants[:, k])
        values.append(distinct)
    return row_ranks, want_ranks, values


def place_in_order(state: ClusterState, jobs: list[Job], idle_only: bool) -> list[Job]:
    """First fit of each job in the given order; returns the jobs that did not fit.

    Once a job shape finds no room, later jobs of the same shape are not tried again: free
    resources only shrink while a plan is made.
    """
    hints: dict[object, int] = {}
    failed: set[object] = set()
    waiting: list[Job] = []
    for job, may in screened(state, jobs, idle_only=idle_only):
        shape = shape_of(job)
        if not may or shape in failed or not state.place_first_fit(job, idle_only, hints):
            failed.add(shape)
            waiting.append(job)
    return waiting


# The reasons' texts depend on two numbers each, which tens of thousands of jobs left waiting
# share: each text is written once.


def finish(
    name: str,
    snapshot: Snapshot,
    state: ClusterState,
    unplaced: dict[str, Unplaced],
    notes: Iterable[str] = (),
) -> Plan:
    """Assemble the plan; unplaced jobs are listed in the snapshot's pending order."""
    ordered = tuple(unplaced[j.id] for j in snapshot.pending if j.id in unplaced)
    return Plan(name, tuple(state.assignments), ordered, notes=tuple(notes))
