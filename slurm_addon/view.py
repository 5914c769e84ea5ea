"""What one read of Slurm means for coshare: the snapshot to plan, and the jobs to act on.

:func:`build_view` is the Source's logic, pure so that it is tested on recorded ``squeue`` and
``sinfo`` output. It translates each job into the ledger's facts (:mod:`coshare.ledger.book` has
the rules of a placement's life); a job's gate is open while it is not held::

    pending, held, no placement            -> plan it (held by the job_submit plugin)
    pending, held, with a placement        -> plan it again (a cycle stopped between writing
                                              and releasing, or coshare held it to re-plan)
    pending, released, with a placement    -> "planned": holds its device until it starts;
                                              once expired (cycle.replan_after_s) or where
                                              its node cannot take it: pending again in
                                              this cycle, and held before anything else
                                              is released
    pending, released, no placement        -> plan it; held before anything else is released
    running, with a placement              -> holds the devices of its placement
    running, without                       -> holds Slurm's own GRES allocation, if any
    begin time in the future, or a dependency on a job still queued -> waits, not planned
    array, other partition, bad or unreadable annotations -> refused
    other partition, with several planners (coordination.dsn): another planner's job, never
                                              refused or written; placed and released, it
                                              holds its devices here too
    multi-node (-N, --ntasks, --ntasks-per-node) -> a gang: planned on all its nodes at once
    a number of its record out of bounds (NaN, 1e300 CPUs) -> refused if pending; if it
                                              runs: holds its whole nodes

A job whose comment does not mention coshare is never planned or written; if it runs, it
counts with the cores, memory and GRES devices Slurm gave it.

Nodes Slurm starts nothing on (drained, down) are left out and listed for ``show``; a node
whose record cannot be read is left out with a note naming it and the field, and the others
are planned (:func:`coshare.ledger.book.read_node`).
A node's ``Extra`` field carries its facts (the node daemon's measurements, written by
``coshare-slurm-facts``); they are only handed to :func:`coshare.ledger.facts.with_facts`.

Pure: no I/O, no clock (the caller passes ``now_s``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from coshare.errors import AnnotationError
from coshare.ledger.book import (
    Placed,
    Queued,
    Shape,
    declared_terms,
    find_kind,
    kind_index,
    read_node,
    refuse_on_error,
    settle,
)
from coshare.ledger.bounds import BadValue
from coshare.ledger.facts import with_facts
from coshare.ledger.gangs import share_of_node_request
from coshare.ledger.records import Started, foreign_holdings, holdings, unwritable_node
from coshare.model import MILLI, Device, DeviceKind, Node, RunningJob, Snapshot
from coshare.ports import Rejected, Unusable, Waiting

from slurm_addon.comment import is_annotated, read_annotations
from slurm_addon.jobs import SlurmJob, expand_nodes
from slurm_addon.nodes import SlurmNode, parse_gres_indexes
from slurm_addon.placement import (
    UNWRITABLE_NAME,
    Placement,
    PlacementError,
    is_safe_token,
    parse_placement,
)

_DEPENDENCY_JOB = re.compile(r":(\d+)")


@dataclass(frozen=True)
class ClusterView:
    """The meaning of one read of Slurm.

    Attributes:
        snapshot: nodes, running and planned jobs, and the pending jobs to plan.
        rejected: annotated jobs refused, with the message for their owner.
        jobs: every job read, by id (the Editor checks them for changes before writing).
        to_close: pending annotated jobs that are not held and hold nothing in the snapshot
            (expired placements, none at all), with why: the Editor holds each one the plan
            does not keep exactly where it is, before it releases any other job.
        waiting: annotated jobs not planned now (begin time, dependency).
        notes: problems an admin should know (unknown device kinds, unreadable placements).
        unusable_nodes: nodes left out because Slurm does not start jobs there now.
    """

    snapshot: Snapshot
    rejected: tuple[Rejected, ...] = ()
    jobs: Mapping[str, SlurmJob] = field(default_factory=dict)
    to_close: Mapping[str, str] = field(default_factory=dict)
    waiting: tuple[Waiting, ...] = ()
    notes: tuple[str, ...] = ()
    unusable_nodes: tuple[SlurmNode, ...] = ()

    @property
    def unusable(self) -> tuple[Unusable, ...]:
        """The nodes Slurm starts nothing on, with Slurm's state and reason (for ``show``)."""
        return tuple(
            Unusable(n.name, "+".join((n.state, *n.flags)), n.reason) for n in self.unusable_nodes
        )


def build_nodes(
    nodes: Sequence[SlurmNode],
    device_kinds: Mapping[str, DeviceKind],
    gres_name: str,
    partition: str | None,
    notes: list[str],
) -> tuple[list[Node], list[SlurmNode]]:
    """The usable nodes of the managed partition, with their devices; and the unusable ones.

    Raises:
        ConfigError: two device kinds with the same name (:func:`coshare.ledger.book.kind_index`).
    """
    index = kind_index(device_kinds)
    usable: list[Node] = []
    unusable: list[SlurmNode] = []
    unknown: dict[str, list[str]] = {}
    for n in nodes:
        if partition is not None and partition not in n.partitions:
            continue
        if not is_safe_token(n.name):
            left = unwritable_node(n.name, "has other characters", UNWRITABLE_NAME, notes)
            unusable.append(replace(n, state=left.state, flags=(), reason=left.reason))
            continue
        if not n.usable:
            unusable.append(n)
            continue
        node = read_node(n.name, partial(_node, n, index, gres_name, unknown), notes)
        if node is not None:
            usable.append(node)
    for kind_name, names in sorted(unknown.items()):
        notes.append(
            f"GRES {gres_name} type {kind_name} of {', '.join(sorted(set(names)))} has no "
            f"device_kinds entry (memory_mib, threads) in the coshare config: not shared"
        )
    return usable, unusable


def _node(
    n: SlurmNode,
    index: Mapping[str, tuple[str, DeviceKind]],
    gres_name: str,
    unknown: dict[str, list[str]],
) -> Node:
    """One usable node with its devices (those of a GRES type without a ``device_kinds``
    entry are collected in ``unknown``).

    Raises:
        BadValue: more devices than :data:`~coshare.ledger.bounds.MAX_DEVICES`.
    """
    devices = []
    for dev_id, kind_name in n.devices(gres_name):
        found = find_kind(index, kind_name)
        if found is None:
            unknown.setdefault(kind_name or "(no type)", []).append(n.name)
            continue
        kind = found[1]
        devices.append(Device(dev_id, kind.memory_mib, kind.threads, model=kind_name))
    return Node(n.name, n.cpus * MILLI, n.memory_mib, tuple(devices))


def _dependency_wait(job: SlurmJob, queued: set[str]) -> str | None:
    """Why a job cannot start yet because of its dependency, if it cannot."""
    if "unfulfilled" not in job.dependency:
        return None
    blocking = [j for j in _DEPENDENCY_JOB.findall(job.dependency) if j in queued]
    if not blocking:
        return None  # the jobs it waits for have ended: Slurm decides once it is released
    return f"waits for its dependency on job {', '.join(blocking)}"


def _refusal(job: SlurmJob, partition: str | None, lend_partition: str | None = None) -> str | None:
    if job.array:
        return f"job {job.id}: job arrays are not supported by coshare; submit separate jobs"
    # A job coshare moved into the lending partition (collocate) is still the partition's.
    managed = {partition, lend_partition} - {None}
    if partition is not None and not managed & set(job.partition.split(",")):
        return (
            f"job {job.id}: partition {job.partition or '(default)'} is not managed by "
            f"coshare (it plans partition {partition}); submit with --partition={partition}"
        )
    return None


#: How a Slurm user sets a gang's shape, for messages.
SHAPE_SOURCE = "sbatch's -N, --ntasks and --ntasks-per-node"


def shape_of(job: SlurmJob) -> Shape:
    """A job's nodes and tasks as Slurm holds them (``-N min-max``, ``--ntasks``,
    ``--ntasks-per-node``)."""
    high = job.max_nodes if job.max_nodes > job.node_count else None
    return Shape(
        nodes=job.node_count,
        nodes_max=high,
        processes=job.tasks,
        processes_per_node=job.tasks_per_node or None,
        source=SHAPE_SOURCE,
    )


def same_nodes(required_nodes: str, nodes: Sequence[str]) -> bool:
    """Whether a ReqNodeList as Slurm prints it (``csl-n[1-3]``) names exactly ``nodes``."""
    try:
        return sorted(expand_nodes(required_nodes)) == sorted(nodes)
    except ValueError:
        return False


def placed_of(placement: Placement | None, job: SlurmJob) -> Placed | None:
    """A placement as the ledger's fact; ``None`` when there is none, or when the job's
    ReqNodeList is not the placement's nodes (then Slurm could start it elsewhere)."""
    if placement is None:
        return None
    if job.required_nodes and not (
        job.required_nodes == placement.node or same_nodes(job.required_nodes, placement.nodes)
    ):
        return None
    return Placed(
        placement.node,
        placement.devices,
        float(placement.at_s),
        placement.device_memory_mib,
        placement.device_threads,
        placement.parts,
        placement.llc_ways,
        placement.harvest_from,
    )


def _queued(job: SlurmJob, placement: Placement | None) -> Queued:
    """A pending annotated job as the ledger's fact.

    Slurm's CPUs are cpus-per-task x tasks, the job's total over all its nodes. Its memory
    is per node (``--mem``) or per CPU: a single-node job's is its total; a gang's total is
    per CPU x CPUs, or, asked per node, shares that hold it on every node of any allowed
    split (:func:`coshare.ledger.gangs.share_of_node_request`).

    Raises:
        AnnotationError: its comment cannot be read as annotations.
    """
    shape = shape_of(job)
    memory = job.memory_mib
    if shape.is_gang:
        if job.memory_per_cpu_mib:
            memory = job.memory_per_cpu_mib * job.cpus
        else:
            high = min(shape.nodes_max or shape.nodes, shape.processes)
            memory = share_of_node_request(job.memory_mib, shape.processes, high) * shape.processes
    return Queued(
        id=job.id,
        annotations=read_annotations(job.id, job.comment),
        cpu_milli=job.cpus * MILLI,
        memory_mib=memory,
        submit_time_s=job.submit_time_s,
        placed=placed_of(placement, job),
        gate_open=not job.held,
        shape=shape,
    )


def build_view(
    nodes: Sequence[SlurmNode],
    jobs: Sequence[SlurmJob],
    *,
    device_kinds: Mapping[str, DeviceKind],
    gres_name: str = "gpu",
    partition: str | None = None,
    replan_after_s: float = 300.0,
    now_s: float,
    node_facts_max_age_s: float = 600.0,
    lend_partition: str | None = None,
    shared: bool = False,
) -> ClusterView:
    """Turn what squeue and sinfo said into the cycle's view (see the module docstring).

    ``shared``: other planners plan the other partitions over the same nodes:
    their jobs are theirs, never refused here; a placed one counts where it is placed.
    """
    notes: list[str] = []
    usable, unusable = build_nodes(nodes, device_kinds, gres_name, partition, notes)
    by_name = {n.name: n for n in usable}
    queued_ids = {j.id for j in jobs if j.phase in ("pending", "active", "unknown")}

    running: list[RunningJob] = []
    queue: list[Queued | Rejected] = []
    waiting: list[Waiting] = []
    waiting_open: dict[str, str] = {}

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
            record = _started(job, placement, by_name, gres_name, notes, annotated)
            running.extend(holdings(record, by_name, notes))
            if annotated and placement is None and not job.problem:
                notes.append(
                    f"job {job.id} runs without a coshare placement (released by hand?); "
                    "its device use is unknown"
                )
            continue
        if not annotated:
            continue
        if (
            shared
            and partition is not None
            and not ({partition, lend_partition} & set(job.partition.split(",")))
        ):
            # another planner's (a job this one moved into its lending partition stays its own)
            running.extend(_foreign(job, placement, usable, notes))
            continue
        if job.problem:
            queue.append(Rejected(job.id, f"job {job.id}: {job.problem}"))
            continue
        placed_open = not job.held and placed_of(placement, job) is not None
        wait = None if placed_open else _wait(job, now_s, queued_ids)
        if wait is not None:
            waiting.append(Waiting(job.id, wait))
            if not job.held:
                waiting_open[job.id] = "could start without a placement"
            continue
        refusal = _refusal(job, partition, lend_partition)
        if refusal is not None:
            queue.append(Rejected(job.id, refusal))
            continue
        queue.append(refuse_on_error(job.id, partial(_queued, job, placement)))

    book = settle(queue, usable, now_s=now_s, replan_after_s=replan_after_s, gangs=True)
    snapshot = Snapshot(tuple(usable), tuple(running) + book.planned, book.pending, now_s=now_s)
    snapshot, facts_notes = with_facts(
        snapshot, {n.name: n.extra for n in nodes}, now_s=now_s, max_age_s=node_facts_max_age_s
    )
    return ClusterView(
        snapshot=snapshot,
        rejected=book.rejected,
        jobs={j.id: j for j in jobs},
        to_close={**book.to_close, **waiting_open},
        waiting=tuple(waiting),
        notes=tuple(notes) + book.notes + facts_notes,
        unusable_nodes=tuple(unusable),
    )


def _wait(job: SlurmJob, now_s: float, queued: set[str]) -> str | None:
    """Why a pending job is not planned yet, for a reason of Slurm's own, if it is not."""
    if job.eligible_time_s > now_s:
        return "waits for its begin time"
    return _dependency_wait(job, queued)


def _foreign(
    job: SlurmJob, placement: Placement | None, usable: Sequence[Node], notes: list[str]
) -> tuple[RunningJob, ...]:
    """What a pending job of another planner's partition holds here: nothing unless it is
    placed and released (then Slurm may start it on its placement any moment)
    (:func:`coshare.ledger.records.foreign_holdings`)."""
    if job.held or job.problem or placed_of(placement, job) is None:
        return ()
    queued = refuse_on_error(job.id, lambda: _queued(job, placement))
    return foreign_holdings(queued, usable, f"job {job.id} of partition {job.partition}", notes)


def _started(
    job: SlurmJob,
    placement: Placement | None,
    nodes: Mapping[str, Node],
    gres_name: str,
    notes: list[str],
    annotated: bool = False,
) -> Started:
    """A started job's record (:func:`coshare.ledger.records.holdings` reads it): on each
    node its placement's devices (the TaskProlog exposes them wherever the job landed; a
    gang's, on each node, that node's part) with the placement's demand, else the GRES
    devices Slurm gave it, whole; its requested time (``CoshareWalltime``, else its time
    limit), declared bandwidths and program."""
    if job.problem:
        where = ", ".join(n for n in job.nodes if n in nodes)
        problem = f"job {job.id} runs on {where} but its record cannot be read ({job.problem})"
        return Started(job.id, dict.fromkeys(job.nodes, ()), problem=problem)
    devices: dict[str, tuple[str, ...]] = {}
    ways: dict[str, int] = {}
    for index, name in enumerate(job.nodes):
        known = [d.id for d in nodes[name].devices] if name in nodes else []
        if placement is not None:
            here = placement.on(name)
            if here is not None and here.llc_ways is not None:
                ways[name] = here.llc_ways  # its resctrl group's ways there (sns)
            single = placement.devices if len(job.nodes) == 1 else ()
            devices[name] = here.devices if here is not None else single
            continue
        detail = job.gres_detail[index] if index < len(job.gres_detail) else ""
        try:
            gres = parse_gres_indexes(detail, gres_name)
        except BadValue as exc:
            # Which devices it holds is unknown: all of them (never under-count).
            notes.append(f"job {job.id} on {name}: {exc}; counted on every device")
            gres = tuple(known)
        devices[name] = tuple(d for d in gres if d in known)
    annotations = _annotations(job) if annotated else {}
    return Started(
        id=job.id,
        devices=devices,
        cpu_milli=-(-job.cpus // max(len(job.nodes), 1)) * MILLI,
        memory_mib=job.memory_mib,
        # A device Slurm gave to a job outside coshare is that job's alone (demand None).
        demand=(placement.device_memory_mib, placement.device_threads)
        if placement is not None
        else None,
        terms=declared_terms(job.id, annotations, job.time_limit_s or None),
        start_time_s=job.start_time_s or None,
        harvest_from=placement.harvest_from if placement is not None else None,
        llc_ways=ways,
    )


def _annotations(job: SlurmJob) -> Mapping[str, object]:
    """A running job's annotations; none when its comment no longer reads (it lends nothing)."""
    try:
        return read_annotations(job.id, job.comment)
    except AnnotationError:  # unreadable annotations: nothing declared
        return {}


def declared_use(job: SlurmJob) -> tuple[str | None, float | None]:
    """A started job's ``CoshareProgram`` and ``CoshareMembw`` (both ``None`` when its
    comment no longer reads: it then counts as of unknown use, the safe side)."""
    terms = declared_terms(job.id, _annotations(job), None)
    return terms.program, terms.membw_gbps
