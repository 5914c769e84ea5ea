"""Why a job waits, as every policy says it: a job no node of the cluster could ever take
(:func:`never_fits`, with the resource and the most any node has), and one that fits only once
running jobs end or other placements move (:func:`explain_waiting`), in the plan's words.

The accounting these read is :class:`~coshare.policies.base.ClusterState`; ``coshare explain``
builds on these answers (:mod:`coshare.policies.explain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

import numpy as np

from coshare.model import Job, Snapshot, Unplaced
from coshare.policies.base import (
    ClusterState,
    Ints,
    Mask,
    as_ranks,
    cores_text,
    needs_of,
    shape_of,
    undominated_rows,
)

_DEVICE_COUNT, _KIND = attrgetter("device_count"), attrgetter("kind")


@dataclass(frozen=True)
class _NodeClass:
    cpu_milli: int
    memory_mib: int
    devices: tuple[tuple[int, int], ...]  # (memory_mib, threads), largest first


def never_fits(snapshot: Snapshot, jobs: Iterable[Job]) -> dict[str, Unplaced]:
    """Jobs that no node could hold even if it were empty, with the limit they exceed.

    Checked once per job shape against the few distinct kinds of node of the cluster.
    """
    kinds = {
        (n.cpu_milli, n.memory_mib, tuple([(d.memory_mib, d.threads) for d in n.devices]))
        for n in snapshot.nodes
    }
    classes = {_NodeClass(cpu, mem, tuple(sorted(devs, reverse=True))) for cpu, mem, devs in kinds}
    max_dev_mem = max((d[0] for c in classes for d in c.devices), default=0)
    max_threads = max((d[1] for c in classes for d in c.devices), default=0)
    max_devs = max((len(c.devices) for c in classes), default=0)
    max_cpu = max((c.cpu_milli for c in classes), default=0)
    max_mem = max((c.memory_mib for c in classes), default=0)
    verdict: dict[tuple[int, int, int, int, int, str], str | None] = {}
    out: dict[str, Unplaced] = {}
    jobs = list(jobs)
    for i in np.flatnonzero(~_fits_a_class(jobs, classes)).tolist():
        job = jobs[i]
        shape = shape_of(job)
        if shape not in verdict:
            verdict[shape] = _never_fits_reason(
                job, classes, max_dev_mem, max_threads, max_devs, max_cpu, max_mem
            )
        reason = verdict[shape]
        if reason is not None:
            out[job.id] = Unplaced(job.id, reason, "never_fits")
    return out


def _fits_a_class(jobs: Sequence[Job], classes: Iterable[_NodeClass]) -> Mask:
    """Which jobs some kind of node could hold when empty, for all jobs at once."""
    need = needs_of(jobs)  # device memory, device threads, host cores, host memory
    count = _devices_needed(jobs)
    out: Mask = np.zeros(len(jobs), dtype=np.bool_)
    for c in classes:
        ok = (need[:, 2] <= c.cpu_milli) & (need[:, 3] <= c.memory_mib)
        devices = np.zeros(len(jobs), dtype=np.int64)
        for mem, thr in c.devices:
            devices += (need[:, 0] <= mem) & (need[:, 1] <= thr)
        out |= ok & (devices >= count)
    return out


def _devices_needed(jobs: Sequence[Job]) -> Ints:
    """Per job, the devices it needs on one node: ``device_count`` of a device job, else 0
    (:attr:`Job.needs_device`), as columns."""
    n = len(jobs)
    count = np.fromiter(map(_DEVICE_COUNT, jobs), dtype=np.int64, count=n)
    device = np.fromiter(map("device".__eq__, map(_KIND, jobs)), dtype=np.bool_, count=n)
    out: Ints = np.where(device & (count > 0), count, 0)
    return out


def _never_fits_reason(
    job: Job,
    classes: Iterable[_NodeClass],
    max_dev_mem: int,
    max_threads: int,
    max_devs: int,
    max_cpu: int,
    max_mem: int,
) -> str | None:
    count = job.device_count if job.needs_device else 0
    for c in classes:
        if c.cpu_milli < job.total_cpu_milli or c.memory_mib < job.total_memory_mib:
            continue
        fitting = sum(
            1
            for mem, thr in c.devices
            if mem >= job.device_memory_mib and thr >= job.device_threads
        )
        if fitting >= count:
            return None
    per = f" x {job.processes} processes" if job.processes > 1 else ""
    if count and job.device_memory_mib > max_dev_mem:
        return f"device_memory_mib {job.device_memory_mib} exceeds every device (max {max_dev_mem})"
    if count and job.device_threads > max_threads:
        return f"device_threads {job.device_threads} exceeds every device (max {max_threads})"
    if count > max_devs:
        return f"device_count {count} exceeds the devices of every node (max {max_devs})"
    if job.total_cpu_milli > max_cpu:
        return (
            f"cores {cores_text(job.cpu_milli)}{per} exceeds every node (max {cores_text(max_cpu)})"
        )
    if job.total_memory_mib > max_mem:
        return f"memory_mib {job.memory_mib}{per} exceeds every node (max {max_mem})"
    want = (
        f"{count} device(s) with {job.device_memory_mib} MiB and {job.device_threads} threads, "
        if count
        else ""
    )
    return (
        f"no node has {want}{cores_text(job.total_cpu_milli)} cores and "
        f"{job.total_memory_mib} MiB host memory together"
    )


def explain_waiting(
    state: ClusterState, jobs: Iterable[Job], idle_only: bool = False, exclude: Mask | None = None
) -> dict[str, Unplaced]:
    """Why each job (that fits the cluster) could not be placed on the free resources left.

    The first missing resource is named, with the best that is free, so an admin can see what
    the job waits for. Jobs that would fit now get ``not_chosen``: the policy preferred others.
    Devices in ``exclude`` (held back for aged jobs) count as full. Computed once per job shape.
    """
    jobs = list(jobs)
    shapes = list(map(shape_of, jobs))
    cache: dict[tuple[int, int, int, int, int, str], Unplaced] = {}
    if not idle_only:
        # single-device jobs all at once, against the devices no other beats (the same
        # answers, without array work per job: a large cycle leaves thousands waiting)
        firsts: dict[tuple[int, int, int, int, int, str], Job] = {}
        for job, shape in zip(jobs, shapes, strict=True):
            if job.needs_device and job.device_count == 1:
                firsts.setdefault(shape, job)
        for shape, reason in zip(
            firsts, _explain_many(state, list(firsts.values()), exclude), strict=True
        ):
            if reason is not None:
                cache[shape] = reason
    out: dict[str, Unplaced] = {}
    for job, shape in zip(jobs, shapes, strict=True):
        u = cache.get(shape)
        if u is None:
            u = cache[shape] = _explain(state, job, idle_only, exclude)
        out[job.id] = u if u.job == job.id else Unplaced(job.id, u.reason, u.code)
    return out


def _explain_many(
    state: ClusterState, jobs: Sequence[Job], exclude: Mask | None
) -> list[Unplaced | None]:
    """:func:`_explain` for single-device jobs that do not fit now, all at once; ``None`` for
    a job that fits (its answer names a device: :func:`_explain` gives it).

    Every "is there a device with ..." and "the most free among devices with ..." of the
    cascade has the same answer over the devices no other device beats in every free
    resource (one of them beats any device that qualifies), and those are few."""
    if not jobs:
        return []
    ok = np.ones(state.device_count, dtype=np.bool_) if exclude is None else ~exclude
    n = state.dev_node[ok]
    rows = undominated_rows(
        np.stack(
            [
                state.dev_free_mem[ok],
                state.dev_threads[ok],
                state.dev_free_thr[ok],
                state.node_free_cpu[n],
                state.node_free_mem[n],
            ],
            axis=1,
        )
    )
    out: list[Unplaced | None] = []
    low = np.iinfo(np.int64).min
    # compared as ranks (as_ranks): the same answers; the most free of a resource is read
    # back from its rank (-1, no row: the last entry, ``low``), and only for the jobs the
    # cascade stops at that resource
    rows, wants, values = as_ranks(rows, needs_of(jobs)[:, [0, 1, 1, 2, 3]])
    free = [np.ascontiguousarray(rows[:, k]) for k in range(rows.shape[1])]
    most = [np.append(v, low) for v in values]

    def best(k: int, ok: Mask, stop: Mask) -> list[int]:
        """The most of resource ``k`` among the rows in ``ok``, for the jobs in ``stop``."""
        out: Ints = np.full(len(ok), low, dtype=np.int64)
        at = np.flatnonzero(stop)
        out[at] = most[k][np.where(ok[at], free[k], -1).max(axis=1, initial=-1)]
        return out.tolist()  # type: ignore[no-any-return]

    block = max(1, (1 << 20) // max(len(rows), 1))
    for start in range(0, len(jobs), block):
        part = jobs[start : start + block]
        need = [wants[start : start + block, k : k + 1].copy() for k in range(wants.shape[1])]
        mem_ok = (free[0] >= need[0]) & (free[1] >= need[1])
        thr_ok = mem_ok & (free[2] >= need[2]) if state.strict else mem_ok
        cpu_ok = thr_ok & (free[3] >= need[3])
        host_ok = cpu_ok & (free[4] >= need[4])
        found = [m.any(axis=1) for m in (mem_ok, thr_ok, cpu_ok, host_ok)]
        best_thr = best(2, mem_ok, found[0] & ~found[1])
        best_cpu = best(3, thr_ok, found[1] & ~found[2])
        best_mem = best(4, cpu_ok, found[2] & ~found[3])
        found = [f.tolist() for f in found]
        flags = zip(*found, strict=True)
        for i, (job, (mem, thr, cpu, host)) in enumerate(zip(part, flags, strict=True)):
            if not mem:
                out.append(_no_memory(state, job))
            elif not thr:
                out.append(_no_threads(job, max(best_thr[i], 0)))
            elif not cpu:
                out.append(_no_cores(job, max(best_cpu[i], 0)))
            elif not host:
                out.append(_no_host_memory(job, max(best_mem[i], 0)))
            else:
                out.append(None)
    return out


_LATER = "; it waits for running jobs to finish"


#: Reason texts kept for reuse, per kind of reason.
_TEXTS = 4096


def _no_threads(job: Job, best: int) -> Unplaced:
    return Unplaced(job.id, _no_threads_text(job.device_threads, best))


def _no_cores(job: Job, best_cpu: int) -> Unplaced:
    return Unplaced(job.id, _no_cores_text(job.total_cpu_milli, best_cpu))


def _no_host_memory(job: Job, best_mem: int) -> Unplaced:
    return Unplaced(job.id, _no_host_memory_text(job.total_memory_mib, best_mem))


@lru_cache(maxsize=_TEXTS)
def _no_threads_text(threads: int, best: int) -> str:
    return (
        f"needs {threads} free device threads; devices with room for its memory have at "
        f"most {best} free (strict thread limit)" + _LATER
    )


@lru_cache(maxsize=_TEXTS)
def _no_cores_text(cpu_milli: int, best_cpu: int) -> str:
    return (
        f"needs {cores_text(cpu_milli)} free cores beside its device; nodes with room on a "
        f"device have at most {cores_text(best_cpu)}" + _LATER
    )


@lru_cache(maxsize=_TEXTS)
def _no_host_memory_text(memory_mib: int, best_mem: int) -> str:
    return (
        f"needs {memory_mib} MiB free host memory beside its device; nodes with room on a "
        f"device have at most {best_mem} MiB" + _LATER
    )


def _no_memory(state: ClusterState, job: Job) -> Unplaced:
    """``job`` waits because no device it may use has its memory free (the device named is
    the one with the most free memory of all)."""
    m, k = job.device_memory_mib, job.device_count
    need = f"{k} devices" if k > 1 else "a device"
    return Unplaced(
        job.id,
        f"needs {need} with {m} MiB free memory; most free now: {state.most_free_device()}; "
        "it waits for running jobs to finish",
    )


def _explain(state: ClusterState, job: Job, idle_only: bool, exclude: Mask | None) -> Unplaced:
    later = "; it waits for running jobs to finish"
    if not job.needs_device:
        ok = state.host_ok(job)
        if idle_only:
            ok &= state.node_jobs == 0
            if not (state.node_jobs == 0).any():
                return Unplaced(job.id, "no idle node (exclusive policy: one job per node)" + later)
        if ok.any():
            return Unplaced(job.id, "fits now but was not chosen this cycle", "not_chosen")
        best = int(np.argmax(state.node_free_cpu)) if len(state.nodes) else 0
        free_cpu = max(int(state.node_free_cpu.max(initial=0)), 0)
        return Unplaced(
            job.id,
            f"no node has {cores_text(job.total_cpu_milli)} cores and {job.total_memory_mib} MiB "
            f"host memory free (most cores free: {cores_text(free_cpu)} on "
            f"{state.node_names[best] if state.nodes else '-'})" + later,
        )
    m, t, k = job.device_memory_mib, job.device_threads, job.device_count
    mem_ok = (state.dev_free_mem >= m) & (state.dev_threads >= t)
    if exclude is not None:
        mem_ok &= ~exclude
    if idle_only:
        # idle: nothing on the device, and no CPU-only job holding its node (device_ok's rule)
        mem_ok &= (state.dev_jobs == 0) & (state.node_host_jobs == 0)[state.dev_node]
        if not mem_ok.any():
            return Unplaced(
                job.id,
                f"no idle device with {m} MiB (exclusive policy: one job per device)" + later,
            )
    if not mem_ok.any():
        return _no_memory(state, job)
    thr_ok = mem_ok & (state.dev_free_thr >= t) if state.strict else mem_ok
    if not thr_ok.any():
        return _no_threads(job, max(int(state.dev_free_thr[mem_ok].max()), 0))
    cpu_ok = thr_ok & (state.node_free_cpu >= job.total_cpu_milli)[state.dev_node]
    if not cpu_ok.any():
        return _no_cores(job, max(int(state.node_free_cpu[state.dev_node[thr_ok]].max()), 0))
    host_ok = cpu_ok & (state.node_free_mem >= job.total_memory_mib)[state.dev_node]
    if not host_ok.any():
        return _no_host_memory(job, max(int(state.node_free_mem[state.dev_node[cpu_ok]].max()), 0))
    if k > 1 and len(state.nodes_with_devices(job, host_ok)) == 0:
        return Unplaced(job.id, f"no node has {k} devices with {m} MiB free at once" + later)
    d = int(np.flatnonzero(host_ok)[0])
    return Unplaced(
        job.id,
        f"fits {state.dev_label(d)} now but was not chosen this cycle; reconsidered next cycle",
        "not_chosen",
    )
