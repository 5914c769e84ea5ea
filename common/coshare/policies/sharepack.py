"""The ``sharepack`` policy, coshare's default: which jobs share (knapsack), and where (potential).

A planning cycle has two questions to answer, and which one matters depends on the cycle:

- **Contended** (the pending device jobs need more device memory, or in strict mode more
  threads, than is free): *which* jobs run decides the makespan. Devices are filled one after
  another by the paper's knapsack (Coviello et al., section IV-C): the most value of
  concurrency ``1 - (t/T)^2`` that fits each device's memory and threads (the
  :mod:`~coshare.policies.knapsack` machinery, with its host shares and its sweep).
- **Not contended** (everything could fit): *where* each job goes decides what is left for the
  jobs still to come. The cycle sees its whole batch, so it orders it (multi-device jobs first,
  then the largest device memory, then the most cores: the hardest to place first, the
  smallest fill in after them) and places each job where its node's *potential* rises least:
  FGD's expected fragmentation for the coming job shapes plus the device memory the node's
  free cores and host memory could no longer feed (:mod:`~coshare.policies.potential`). The
  batch itself is the look-ahead: its shapes, with the running jobs', are the expected ones
  unless the caller names a target workload.

Everything the other policies honour holds here: jobs past ``age_limit_s`` go first and
otherwise hold back a device (:mod:`~coshare.policies.aging`); strict or soft threads; host
cores and memory; multi-device jobs on one node; CPU-only jobs (placed by potential too, so
they take cores where no device needs them); jobs that fit nowhere get ``never_fits``, jobs
that wait say what they wait for; no job that fits what the plan leaves waits. Pure and
deterministic: no I/O, no clock, ties to snapshot order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coshare.model import Job, Plan, Snapshot
from coshare.policies.aging import place_aged, split_aged
from coshare.policies.base import ClusterState, Mask, finish, needs_of, priority_key, shape_of
from coshare.policies.knapsack import (
    TablePolicy,
    _sweep,
    _values,
    fill_by_band,
    memory_grid,
    types_affordable,
)
from coshare.policies.potential import LazyPotential, Shape, snapshot_shapes
from coshare.policies.potential_batch import place_chunked
from coshare.policies.waiting import explain_waiting

#: A device filled by the greedy of a large cycle stops looking after this many jobs in a row
#: that do not fit it.
GREEDY_SKIPS = 64

#: Contended cycles of at most this many jobs are placed by potential after the knapsack
#: chose them; larger ones keep the knapsack's placement (a pass by potential costs about
#: 50 microseconds per job and device group).
MAX_REPLACED_JOBS = 2_000

#: Cycles placed by potential with more than this many jobs place their one-device jobs a
#: chunk at a time, without the relocation pass (:mod:`~coshare.policies.potential_batch`:
#: not the one-by-one plan, at a fraction of its cost); smaller ones, one job at a time.
BATCH_FROM_JOBS = 2_000


def packing_key(job: Job) -> tuple[int, int, int, int, float, str]:
    """Hardest first: multi-device jobs, then device memory, then cores; then scheduler order."""
    devices = job.device_count if job.needs_device else 0
    return (
        -job.priority,
        -devices,
        -job.device_memory_mib * min(devices, 1),
        -job.total_cpu_milli,
        job.submit_time_s,
        job.id,
    )


@dataclass(frozen=True)
class SharePackPolicy(TablePolicy):
    """Knapsack selection when the cycle is contended, potential placement when it is not."""

    max_replaced_jobs: int = MAX_REPLACED_JOBS
    batch_from_jobs: int = BATCH_FROM_JOBS
    workload: tuple[tuple[Shape, int], ...] | None = None
    stranding: float = 1.0
    name: str = "sharepack"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Aged jobs first, then the rest by knapsack (contended) or by potential."""
        state, unplaced, jobs, reserved = self.begin(snapshot)
        workload = self.workload
        potential = LazyPotential(
            state,
            lambda: workload if workload is not None else snapshot_shapes(snapshot),
            self.stranding,
            held=reserved,
        )

        aged, rest = split_aged(snapshot, jobs, self.age_limit_s)

        def by_potential(job: Job) -> bool:
            return potential.place(job, self._where(state, job, reserved))

        reasons, waiting = place_aged(
            state,
            snapshot,
            aged,
            by_potential,
            reserved,
            self.age_limit_s,
            self.max_reserved_devices,
        )
        unplaced.update(reasons)

        notes: list[str] = []
        waiting += self._rest(state, potential, rest, reserved, notes)
        unplaced.update(explain_waiting(state, waiting, exclude=reserved))
        return finish(self.name, snapshot, state, unplaced, dict.fromkeys(notes))

    def _rest(
        self,
        state: ClusterState,
        potential: LazyPotential,
        jobs: list[Job],
        reserved: Mask,
        notes: list[str],
    ) -> list[Job]:
        """Place the jobs that are not aged; returns those left waiting.

        Not contended: by potential, in packing order. Contended (the device jobs need more
        than is free, or a first pass by potential left out a device job that fitted before
        the cycle began, so jobs competed for room): the knapsack chooses which jobs run and,
        for a cycle of at most ``MAX_REPLACED_JOBS`` jobs, the potential places them (the
        knapsack's choice first, then whatever else still fits); a larger cycle keeps the
        knapsack's own device-by-device placement, which scales to 100,000 jobs. The first
        pass is not made when it would surely be thrown away (:func:`_host_contended`).
        """
        small = len(jobs) <= self.max_replaced_jobs
        if _contended(state, jobs, reserved):
            if not small:
                return self._large(state, potential, jobs, reserved, notes)
            return self._choose_then_place(state, potential, jobs, reserved, _Saved(state), notes)
        before = _Saved(state)
        if not _host_contended(state, jobs, reserved):
            left = self._place_all(state, potential, sorted(jobs, key=packing_key), reserved)
            if not any(self._competed(state, before, job, reserved) for job in left):
                return left
            before.restore(state)
        potential.reset()
        if not small:
            return self._large(state, potential, jobs, reserved, notes)
        return self._choose_then_place(state, potential, jobs, reserved, before, notes)

    def _large(
        self,
        state: ClusterState,
        potential: LazyPotential,
        jobs: list[Job],
        reserved: Mask,
        notes: list[str],
    ) -> list[Job]:
        """A large contended cycle: a knapsack table per device where the cycle affords one
        (:func:`~coshare.policies.knapsack.types_affordable`), else the greedy of the same
        value (:func:`greedy_fill`)."""
        singles, multi, host = by_devices(jobs)
        grid = memory_grid(self.memory_grid_mib, self.max_memory_cells, state)
        devices = int((~reserved).sum())
        if types_affordable(singles, grid, devices, self.max_exact_work):
            return self._fill(state, potential, jobs, reserved, notes)
        waiting = self._place_all(state, potential, sorted(multi, key=packing_key), reserved)
        left = greedy_fill(state, singles, reserved)
        waiting += _sweep(state, sorted(left, key=priority_key), reserved)
        potential.reset()
        waiting += self._place_all(state, potential, sorted(host, key=packing_key), reserved)
        return waiting

    def _place_all(
        self, state: ClusterState, potential: LazyPotential, jobs: list[Job], reserved: Mask
    ) -> list[Job]:
        """Place ``jobs`` in order by potential, then improve that first plan by one pass of
        local search (:meth:`Potential.relocate`); returns the jobs that fit nowhere. A shape
        that found no room is not tried again (free resources only shrink)."""
        if len(jobs) > self.batch_from_jobs and not reserved.any():
            return self._place_chunked(state, potential, jobs, reserved)
        failed: set[object] = set()
        left: list[Job] = []
        mark = len(state.assignments)
        for job in jobs:
            shape = shape_of(job)
            if (
                shape in failed
                or state.beyond_free(job)
                or not potential.place(job, self._where(state, job, reserved))
            ):
                failed.add(shape)
                left.append(job)
        if len(state.assignments) - mark > 1:
            potential.relocate(jobs, mark, lambda job: self._where(state, job, reserved))
            # Moving a job can free the host room a job left out needed (two small jobs
            # moved off the only node with cores for a multi-device job): try those again.
            left = [
                job
                for job in left
                if state.beyond_free(job)
                or not potential.place(job, self._where(state, job, reserved))
            ]
        return left

    def _place_chunked(
        self, state: ClusterState, potential: LazyPotential, jobs: list[Job], reserved: Mask
    ) -> list[Job]:
        """:meth:`_place_all` for a large cycle: each run of one-device jobs a chunk at a
        time (:func:`~coshare.policies.potential_batch.place_chunked`), the other jobs one
        by one; no relocation pass. Returns the jobs that fit nowhere, in order."""
        left: list[Job] = []
        run: list[Job] = []
        for job in [*jobs, None]:
            if job is not None and job.needs_device and job.device_count == 1:
                run.append(job)
                continue
            if run:
                left += place_chunked(potential.built(), run, reserved)
                run = []
            if job is not None and (
                state.beyond_free(job)
                or not potential.place(job, self._where(state, job, reserved))
            ):
                left.append(job)
        return left

    @staticmethod
    def _competed(state: ClusterState, before: _Saved, job: Job, reserved: Mask) -> bool:
        """Whether a device job left waiting would have fitted before this cycle's jobs."""
        if not job.needs_device or job.device_count != 1:
            return False
        free_mem, free_thr = before.arrays[4], before.arrays[5]
        cpu, mem = before.arrays[0], before.arrays[1]
        ok = (free_mem >= job.device_memory_mib) & (state.dev_threads >= job.device_threads)
        if state.strict:
            ok &= free_thr >= job.device_threads
        host = (cpu >= job.total_cpu_milli) & (mem >= job.total_memory_mib)
        return bool((ok & host[state.dev_node] & ~reserved).any())

    def _choose_then_place(
        self,
        state: ClusterState,
        potential: LazyPotential,
        jobs: list[Job],
        reserved: Mask,
        before: _Saved,
        notes: list[str],
    ) -> list[Job]:
        """The knapsack chooses which jobs run; the potential places them, then the rest.

        If the potential cannot place every job the knapsack chose (its placement is not the
        knapsack's partition of them), the knapsack's own plan stands: where the value of
        concurrency is at stake, it is never given up for a better fragment."""
        left = self._fill(state, potential, jobs, reserved, notes)
        chosen = {a.job for a in state.assignments[before.mark :]}
        knapsack = _Saved(state, before.mark)
        before.restore(state)
        potential.reset()
        order = sorted(jobs, key=lambda j: (j.id not in chosen, packing_key(j)))
        waiting = self._place_all(state, potential, order, reserved)
        if any(j.id in chosen for j in waiting):
            knapsack.restore(state)
            potential.reset()
            return left
        return waiting

    @staticmethod
    def _where(state: ClusterState, job: Job, reserved: Mask) -> Mask:
        if not job.needs_device:
            return state.host_ok(job)
        out: Mask = state.device_ok(job) & ~reserved
        return out

    def _fill(
        self,
        state: ClusterState,
        potential: LazyPotential,
        jobs: list[Job],
        reserved: Mask,
        notes: list[str],
    ) -> list[Job]:
        """The contended cycle: multi-device jobs by potential, devices by knapsack, the
        left-overs best fit, CPU jobs by potential. Returns the jobs left waiting."""
        multi = sorted((j for j in jobs if j.needs_device and j.device_count > 1), key=packing_key)
        waiting = [
            job for job in multi if not potential.place(job, self._where(state, job, reserved))
        ]
        singles = [j for j in jobs if j.needs_device and j.device_count == 1]
        left, fill_notes = fill_by_band(self, state, reserved, singles)
        notes += fill_notes
        waiting += left
        potential.reset()
        waiting += self._place_all(
            state,
            potential,
            sorted((j for j in jobs if not j.needs_device), key=packing_key),
            reserved,
        )
        return waiting


class _Saved:
    """The ledger's free resources and assignments at one moment, to go back to."""

    def __init__(self, state: ClusterState, mark: int | None = None) -> None:
        self.arrays = [a.copy() for a in _ledger_arrays(state)]
        self.mark = len(state.assignments) if mark is None else mark
        self.tail = list(state.assignments[self.mark :])

    def restore(self, state: ClusterState) -> None:
        for target, value in zip(_ledger_arrays(state), self.arrays, strict=True):
            target[:] = value
        state.assignments[self.mark :] = self.tail
        state.changed()


def _ledger_arrays(state: ClusterState) -> list[np.ndarray]:
    return [
        state.node_free_cpu,
        state.node_free_mem,
        state.node_jobs,
        state.node_host_jobs,
        state.dev_free_mem,
        state.dev_free_thr,
        state.dev_jobs,
    ]


def by_devices(jobs: list[Job]) -> tuple[list[Job], list[Job], list[Job]]:
    """``jobs`` in one pass, each list in the given order: those on one device, those on
    several devices of a node, and CPU-only jobs (:attr:`Job.needs_device` false)."""
    singles: list[Job] = []
    multi: list[Job] = []
    host: list[Job] = []
    for job in jobs:
        count = job.device_count
        if job.kind != "device" or count <= 0:
            host.append(job)
        elif count == 1:
            singles.append(job)
        else:
            multi.append(job)
    return singles, multi, host


def greedy_fill(state: ClusterState, jobs: list[Job], reserved: Mask) -> list[Job]:
    """The knapsack's choice without its tables, for cycles too large for one per device.

    Devices are filled one after another, as by the knapsack (least free memory first, a
    device's host budget its share of its node's free cores and memory), each with the jobs
    of the highest value ``1 - (t/T)^2`` per share of a device (the larger of their memory
    share and, with strict threads, their thread share; of the largest device) that still fit
    it, skipping those that do not. Per device this is the greedy of the fractional knapsack
    over what it is offered: with memory the only limit it falls short of the optimum by at
    most one job's value. A device stops looking after ``GREEDY_SKIPS`` jobs in a row that do
    not fit it; the jobs left over are tried best fit afterwards. Returns the jobs left over.
    """
    if not jobs or state.device_count == 0:
        return list(jobs)
    need = needs_of(jobs)
    ratio = need[:, 1] / max(int(state.dev_threads.max()), 1)
    share = need[:, 0] / max(int(state.dev_total_mem.max()), 1)
    if state.strict:
        share = np.maximum(share, ratio)
    value = _values(need[:, 1], max(int(state.dev_threads.max()), 1)) + 1  # + 1: a job counts
    # best value per share first; ties in the given (scheduler) order
    order = np.lexsort((np.arange(len(jobs)), -value / np.maximum(share, 1e-9)))
    ranked = [jobs[i] for i in order.tolist()]
    need = need[order]
    need_of = need.tolist()
    size = len(ranked)
    # the least each need takes from a rank on: a device that has less of one than that can
    # take no job from there on, and stops at once instead of after GREEDY_SKIPS misses (the
    # same plan: 70% fewer steps on the modern GPU mix)
    least_m, least_t, least_c, least_h = np.minimum.accumulate(need[::-1], axis=0)[::-1].T.tolist()
    placed = [False] * size
    after = list(range(1, size + 2))  # a placed job's link to a later unplaced one

    def next_unplaced(i: int) -> int:
        """The first job at or after ``i`` not placed yet (links shortened as they are read)."""
        root = i
        while root < size and placed[root]:
            root = after[root]
        while i != root:
            after[i], i = root, after[i]
        return root

    devices = np.flatnonzero(~reserved)
    devices = devices[np.lexsort((devices, state.dev_free_mem[devices]))].tolist()
    open_on_node = np.bincount(state.dev_node[~reserved], minlength=len(state.nodes)).tolist()
    node_of = state.dev_node.tolist()
    free_mem, free_thr, threads_of = (
        state.dev_free_mem.tolist(),
        state.dev_free_thr.tolist(),
        state.dev_threads.tolist(),
    )
    node_cpu, node_mem = state.node_free_cpu.tolist(), state.node_free_mem.tolist()
    smallest = int(need[:, 0].min())
    chosen: list[tuple[Job, int, int]] = []
    rows: list[int] = []  # the rank of each job chosen
    for d in devices:
        n = node_of[d]
        share_of = max(open_on_node[n], 1)
        open_on_node[n] -= 1
        mem, threads = free_mem[d], threads_of[d]
        thr = free_thr[d] if state.strict else threads
        cpu, host = max(node_cpu[n], 0) // share_of, max(node_mem[n], 0) // share_of
        misses = 0
        i = next_unplaced(0)
        while i < size and mem >= smallest and misses < GREEDY_SKIPS:
            m, t, c, h = need_of[i]
            if m <= mem and t <= threads and t <= thr and c <= cpu and h <= host:
                chosen.append((ranked[i], n, d))
                rows.append(i)
                placed[i] = True
                mem, thr, cpu, host = mem - m, thr - t, cpu - c, host - h
                node_cpu[n] -= c
                node_mem[n] -= h
                misses = 0
            else:
                misses += 1
                if mem < least_m[i] or thr < least_t[i] or cpu < least_c[i] or host < least_h[i]:
                    break
            i += 1
            if i < size and placed[i]:  # else next_unplaced(i) is i: spare the call
                i = next_unplaced(i)
    state.place_single(chosen, need[rows])
    return [job for job, done in zip(ranked, placed, strict=True) if not done]


def _contended(state: ClusterState, jobs: list[Job], reserved: Mask) -> bool:
    """Whether the single-device jobs need more device memory (or, with strict threads, more
    threads) than the open devices have free: then not all can run, and which ones do is
    the knapsack's question."""
    open_devices = ~reserved
    free_mem = int(np.clip(state.dev_free_mem[open_devices], 0, None).sum())
    need_mem = sum(j.device_memory_mib for j in jobs if j.needs_device and j.device_count == 1)
    if need_mem > free_mem:
        return True
    if state.strict:
        free_thr = int(np.clip(state.dev_free_thr[open_devices], 0, None).sum())
        need_thr = sum(j.device_threads for j in jobs if j.needs_device and j.device_count == 1)
        return need_thr > free_thr
    return False


def _host_contended(state: ClusterState, jobs: list[Job], reserved: Mask) -> bool:
    """Whether the one-device jobs that each fit now need more host cores, or more host
    memory, than the nodes with open devices have free.

    Then no plan runs them all, so a first pass by potential surely leaves out one of them,
    which fitted before the cycle: :meth:`SharePackPolicy._rest` would throw the pass away
    (its local search and second tries included: they move jobs, they free nothing) and go
    on from the ledger as it was. Skipping the pass gives the same plan at none of its cost:
    with soft threads on the Xeon Phi mix of ``bench/plan_scale.py`` (memory enough for
    every job, cores not), 100,000 jobs were placed one by one, for minutes, and undone.
    """
    singles = [j for j in jobs if j.needs_device and j.device_count == 1]
    if not singles:
        return False
    need = needs_of(singles)
    fit = state.fitting_needs(need, reserved)  # what _competed asks of each job
    if not fit.any():
        return False
    nodes = np.zeros(len(state.nodes), dtype=np.bool_)
    nodes[state.dev_node[~reserved]] = True
    free_cpu = int(np.clip(state.node_free_cpu[nodes], 0, None).sum())
    free_mem = int(np.clip(state.node_free_mem[nodes], 0, None).sum())
    return int(need[fit, 2].sum()) > free_cpu or int(need[fit, 3].sum()) > free_mem
