"""What one read of Slurm means for coshare: the snapshot to plan, and the jobs to act on.

:func:`build_view` is the Source's logic, pure so that it is tested on recorded ``squeue`` and
``sinfo`` output. How each annotated job is read (the queue is the ledger)::

    pending, held, no placement            -> plan it (held by the job_submit plugin)
    pending, held, with a placement        -> plan it again (a cycle stopped between writing
                                              and releasing, or coshare held it to re-plan)
    pending, released, with a placement    -> "planned": holds its device until it starts;
                                              after cycle.replan_after_s it is held (and so
                                              planned afresh the cycle after)
    pending, released, no placement        -> plan it; held if not placed (no job_submit
                                              plugin, or released by hand)
    running, with a placement              -> holds the devices of its placement
    running, without                       -> holds Slurm's own GRES allocation, if any
    begin time in the future, or a dependency on a job still queued -> waits, not planned
    array, multi-node, other partition, bad annotations -> refused with a message

A job whose comment does not mention coshare is never planned or written; if it runs, it
counts with the cores, memory and GRES devices Slurm gave it.

Pure: no I/O, no clock (the caller passes ``now_s``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from coshare.annotations import ClusterLimits, parse_job
from coshare.config import DeviceKind
from coshare.errors import AnnotationError
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.planner import Rejected

from slurm_addon.comment import is_annotated, read_annotations
from slurm_addon.jobs import SlurmJob
from slurm_addon.nodes import SlurmNode, parse_gres_indexes
from slurm_addon.placement import Placement, PlacementError, parse_placement

_DEPENDENCY_JOB = re.compile(r":(\d+)")


@dataclass(frozen=True)
class Waiting:
    """An annotated job that is not planned this cycle, and why (for ``coshare slurm show``)."""

    job: str
    reason: str


@dataclass(frozen=True)
class ClusterView:
    """The meaning of one read of Slurm.

    Attributes:
        snapshot: nodes, running and planned jobs, and the pending jobs to plan.
        rejected: annotated jobs refused, with the message for their owner.
        jobs: every job read, by id (the Editor checks them for changes before writing).
        placements: the placement of each planned or running annotated job.
        unheld: pending jobs to plan that are not held: held again if not placed.
        expired: planned jobs that did not start within ``replan_after_s``: to be held.
        waiting: annotated jobs not planned now (begin time, dependency).
        notes: problems an admin should know (unknown device kinds, unreadable placements).
        unusable_nodes: nodes left out because Slurm does not start jobs there now.
    """

    snapshot: Snapshot
    rejected: tuple[Rejected, ...] = ()
    jobs: Mapping[str, SlurmJob] | None = None
    placements: Mapping[str, Placement] | None = None
    unheld: frozenset[str] = frozenset()
    expired: tuple[str, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    notes: tuple[str, ...] = ()
    unusable_nodes: tuple[SlurmNode, ...] = ()


def build_nodes(
    nodes: Sequence[SlurmNode],
    device_kinds: Mapping[str, DeviceKind],
    gres_name: str,
    partition: str | None,
    notes: list[str],
) -> tuple[list[Node], list[SlurmNode]]:
    """The usable nodes of the managed partition, with their devices; and the unusable ones."""
    usable: list[Node] = []
    unusable: list[SlurmNode] = []
    unknown: dict[str, list[str]] = {}
    for n in nodes:
        if partition is not None and partition not in n.partitions:
            continue
        if not n.usable:
            unusable.append(n)
            continue
        devices = []
        for dev_id, kind_name in n.devices(gres_name):
            kind = device_kinds.get(kind_name)
            if kind is None:
                unknown.setdefault(kind_name or "(no type)", []).append(n.name)
                continue
            devices.append(Device(dev_id, kind.memory_mib, kind.threads, model=kind_name))
        usable.append(Node(n.name, n.cpus * MILLI, n.memory_mib, tuple(devices)))
    for kind_name, names in sorted(unknown.items()):
        notes.append(
            f"GRES {gres_name} type {kind_name} of {', '.join(sorted(set(names)))} has no "
            f"device_kinds entry (memory_mib, threads) in the coshare config: not shared"
        )
    return usable, unusable


def _dependency_wait(job: SlurmJob, queued: set[str]) -> str | None:
    """Why a job cannot start yet because of its dependency, if it cannot."""
    if "unfulfilled" not in job.dependency:
        return None
    blocking = [j for j in _DEPENDENCY_JOB.findall(job.dependency) if j in queued]
    if not blocking:
        return None  # the jobs it waits for have ended: Slurm decides once it is released
    return f"waits for its dependency on job {', '.join(blocking)}"


def _refusal(job: SlurmJob, partition: str | None) -> str | None:
    if job.array:
        return f"job {job.id}: job arrays are not supported by coshare; submit separate jobs"
    if partition is not None and partition not in job.partition.split(","):
        return (
            f"job {job.id}: partition {job.partition or '(default)'} is not managed by "
            f"coshare (it plans partition {partition}); submit with --partition={partition}"
        )
    if job.node_count > 1:
        return (
            f"job {job.id}: asks for {job.node_count} nodes; coshare's Slurm adapter "
            "places single-node jobs only"
        )
    return None


def build_view(
    nodes: Sequence[SlurmNode],
    jobs: Sequence[SlurmJob],
    *,
    device_kinds: Mapping[str, DeviceKind],
    gres_name: str = "gpu",
    partition: str | None = None,
    replan_after_s: float = 300.0,
    now_s: float,
) -> ClusterView:
    """Turn what squeue and sinfo said into the cycle's view (see the module docstring)."""
    notes: list[str] = []
    usable, unusable = build_nodes(nodes, device_kinds, gres_name, partition, notes)
    by_name = {n.name: n for n in usable}
    limits = ClusterLimits.of_nodes(usable)
    queued = {j.id for j in jobs if j.phase in ("pending", "active", "unknown")}

    running: list[RunningJob] = []
    pending: list[Job] = []
    rejected: list[Rejected] = []
    placements: dict[str, Placement] = {}
    unheld: set[str] = set()
    expired: list[str] = []
    waiting: list[Waiting] = []

    for job in jobs:
        if job.phase == "ended":
            continue
        annotated = is_annotated(job.comment)
        placement: Placement | None = None
        if annotated:
            try:
                placement = parse_placement(job.admin_comment)
            except PlacementError as exc:
                notes.append(f"job {job.id}: unreadable placement ({exc}); planned again")
        if job.phase != "pending":
            running.extend(_holding(job, placement, by_name, gres_name, notes))
            if placement is not None:
                placements[job.id] = placement
            elif annotated:
                notes.append(
                    f"job {job.id} runs without a coshare placement (released by hand?); "
                    "its device use is unknown"
                )
            continue
        if not annotated:
            continue
        if placement is not None and not job.held:
            node = by_name.get(placement.node)
            known = {d.id for d in node.devices} if node else set()
            if node is None or not set(placement.devices) <= known:
                notes.append(
                    f"job {job.id} is placed on {placement.node}/{','.join(placement.devices)}, "
                    "which cannot take jobs now; it is held and planned again"
                )
                expired.append(job.id)
                continue
            placements[job.id] = placement
            running.append(_planned(job, placement))
            if now_s - placement.at_s > replan_after_s:
                expired.append(job.id)
            continue
        if not job.held:
            unheld.add(job.id)
        if job.eligible_time_s > now_s:
            waiting.append(Waiting(job.id, "waits for its begin time"))
            continue
        dependency = _dependency_wait(job, queued)
        if dependency is not None:
            waiting.append(Waiting(job.id, dependency))
            continue
        refusal = _refusal(job, partition)
        if refusal is not None:
            rejected.append(Rejected(job.id, refusal))
            continue
        try:
            pending.append(_pending(job, limits))
        except AnnotationError as exc:
            rejected.append(Rejected(job.id, str(exc)))

    snapshot = Snapshot(tuple(usable), tuple(running), tuple(pending), now_s=now_s)
    return ClusterView(
        snapshot=snapshot,
        rejected=tuple(rejected),
        jobs={j.id: j for j in jobs},
        placements=placements,
        unheld=frozenset(unheld),
        expired=tuple(expired),
        waiting=tuple(waiting),
        notes=tuple(notes),
        unusable_nodes=tuple(unusable),
    )


def _pending(job: SlurmJob, limits: ClusterLimits) -> Job:
    """A pending annotated job as the planner sees it.

    Raises:
        AnnotationError: its comment's annotations are unusable.
    """
    parsed = parse_job(
        job.id,
        read_annotations(job.id, job.comment),
        limits=limits,
        cpu_milli=job.cpus * MILLI,
        memory_mib=job.memory_mib,
        submit_time_s=job.submit_time_s,
    )
    if parsed.processes > 1:
        # Slurm's CPU and memory requests cover all of the job's processes on its node.
        parsed = replace(
            parsed,
            cpu_milli=-(-job.cpus * MILLI // parsed.processes),
            memory_mib=-(-job.memory_mib // parsed.processes),
        )
    return parsed


def _planned(job: SlurmJob, placement: Placement) -> RunningJob:
    return RunningJob(
        id=job.id,
        node=placement.node,
        devices=placement.devices,
        device_memory_mib=placement.device_memory_mib,
        device_threads=placement.device_threads,
        cpu_milli=job.cpus * MILLI,
        memory_mib=job.memory_mib,
        state="planned",
        start_time_s=float(placement.at_s),
    )


def _holding(
    job: SlurmJob,
    placement: Placement | None,
    nodes: Mapping[str, Node],
    gres_name: str,
    notes: list[str],
) -> list[RunningJob]:
    """What a started job holds on each of its (managed, usable) nodes."""
    held: list[RunningJob] = []
    cpu_milli = -(-job.cpus // max(len(job.nodes), 1)) * MILLI
    for index, name in enumerate(job.nodes):
        node = nodes.get(name)
        if node is None:
            continue
        known = {d.id: d for d in node.devices}
        if placement is not None:
            # The TaskProlog exposes the placement's devices wherever the job landed.
            devices = placement.devices if (name == placement.node or len(job.nodes) == 1) else ()
            missing = [d for d in devices if d not in known]
            if missing:
                notes.append(f"job {job.id} uses device(s) {','.join(missing)} unknown on {name}")
            ids = tuple(d for d in devices if d in known)
            memory, threads = placement.device_memory_mib, placement.device_threads
        else:
            detail = job.gres_detail[index] if index < len(job.gres_detail) else ""
            ids = tuple(d for d in parse_gres_indexes(detail, gres_name) if d in known)
            # A device Slurm gave to a job outside coshare is that job's alone.
            memory = max((known[d].memory_mib for d in ids), default=0)
            threads = max((known[d].threads for d in ids), default=0)
        held.append(
            RunningJob(
                id=job.id,
                node=name,
                devices=ids,
                device_memory_mib=memory,
                device_threads=threads,
                cpu_milli=cpu_milli,
                memory_mib=job.memory_mib,
                state="running",
            )
        )
    return held
