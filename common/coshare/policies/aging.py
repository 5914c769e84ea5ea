"""Aging and reservations, shared by the policies that do not take jobs in scheduler order.

A policy that maximizes concurrency or packing could keep a job with many threads or much
memory waiting forever behind a stream of small ones. A job pending longer than
``age_limit_s`` is therefore placed before all others; if it fits nowhere now, the device
closest to fitting it (the most free memory among those that could ever hold it) takes no new
jobs until it does, at most ``max_reserved_devices`` per cycle. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from coshare.model import Job, Snapshot, Unplaced
from coshare.policies.base import ClusterState, Mask


def split_aged(
    snapshot: Snapshot, jobs: list[Job], age_limit_s: float | None
) -> tuple[list[Job], list[Job]]:
    """``jobs`` (in their order) split into those past the age limit and the others."""
    if age_limit_s is None or snapshot.now_s is None:
        return [], jobs
    now = snapshot.now_s
    aged = [j for j in jobs if now - j.submit_time_s >= age_limit_s]
    return aged, [j for j in jobs if now - j.submit_time_s < age_limit_s]


def place_aged(
    state: ClusterState,
    snapshot: Snapshot,
    aged: list[Job],
    place: Callable[[Job], bool],
    reserved: Mask,
    age_limit_s: float | None,
    max_reserved: int,
) -> tuple[dict[str, Unplaced], list[Job]]:
    """Place the aged jobs first, each with ``place``; one that fits nowhere holds back a
    device (:func:`reserve`). Returns the reasons of those that wait for a device held for
    them, and the others that wait."""
    reasons: dict[str, Unplaced] = {}
    waiting: list[Job] = []
    for job in aged:
        if place(job):
            continue
        reason = reserve(state, job, reserved, snapshot.now_s, age_limit_s, max_reserved)
        if reason is not None:
            reasons[job.id] = reason
        else:
            waiting.append(job)
    return reasons, waiting


def reserve(
    state: ClusterState,
    job: Job,
    reserved: Mask,
    now: float | None,
    age_limit_s: float | None,
    max_reserved: int,
) -> Unplaced | None:
    """Hold back the device closest to fitting an aged job that fits nowhere now.

    Marks it in ``reserved`` and returns the job's ``reserved`` reason, or ``None`` when no
    device may be held (a multi-device or CPU job, the cap reached, or no device that could
    ever hold it).
    """
    if not job.needs_device or job.device_count != 1:
        return None
    if int(reserved.sum()) >= max_reserved:
        return None
    could = (
        (state.dev_total_mem >= job.device_memory_mib)
        & (state.dev_threads >= job.device_threads)
        & (state.node_total_cpu >= job.total_cpu_milli)[state.dev_node]
        & (state.node_total_mem >= job.total_memory_mib)[state.dev_node]
        & ~reserved
    )
    if not could.any():
        return None
    d = int(np.argmax(np.where(could, state.dev_free_mem, np.iinfo(np.int64).min)))
    reserved[d] = True
    age = 0.0 if now is None else now - job.submit_time_s
    limit = f"{age_limit_s:g}" if age_limit_s is not None else "-"
    return Unplaced(
        job.id,
        f"pending {age:.0f} s, past age_limit_s {limit}: device "
        f"{state.dev_label(d)} takes no new jobs until this one fits there",
        "reserved",
    )
