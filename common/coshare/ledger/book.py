"""The rules of the ledger, written once for every scheduler.

The scheduler's queue is the ledger: a job placed by coshare carries its placement in its
own record (HTCondor: ``CosharePlacedNode``/``Devices``/``At``; Slurm: ``ReqNodeList`` and
``AdminComment``), and a job can start only while its *gate* is open (HTCondor: the placed
node is set, so its Requirements match that node; Slurm: it is released). An adapter only
translates: scheduler records into the facts below (:class:`Queued`, :class:`Current`), and
the decisions below into its scheduler's edits. The life of a placement::

    pending --plan, write, open the gate--> placed --starts--> running
       ^                                      |
       |      expired: not started within cycle.replan_after_s,
       +----- or its node or devices are gone (a drained node, a device removed)

- **pending**: planned this cycle; counts nowhere.
- **placed** (gate open, not started): counts against its node and devices, with the larger
  of the demand it was placed for and what it declares now, until it starts (never double
  booked by a later cycle).
- **running**: counts where it really runs (:func:`declared_demand`, :func:`whole_devices`).
- **expired**: pending again *in the same cycle* and counted nowhere; the Editor closes its
  gate (HTCondor: clears the placed node; Slurm: holds it) and confirms that before it
  opens any new gate, unless the plan puts it back exactly where it is (:func:`decide`). If
  such a job started at its old placement meanwhile, the plan may oversubscribe that device,
  so nothing more is written this cycle and the next one reads the truth
  (:func:`gates_may_open`). An admin wants a job whose placement proved unusable to move at
  once, not a timer period later; closing first keeps double booking impossible.

The other rules both adapters follow:

- **Host requests are per job, shares per process**: the scheduler's host request is the
  job's total on its node (HTCondor's RequestCpus/RequestMemory are its slot's; Slurm's CPUs
  are cpus-per-task x tasks); :attr:`Job.cpu_milli` and :attr:`Job.memory_mib` are per
  process, the total divided by ``processes`` rounded up (never under-reserve).
- **Device kinds** are matched by name ignoring case, spaces, ``-`` and ``_``
  (``V100M16`` is ``v100-m16``); two configured kinds with the same such name are a
  configuration error naming both (:func:`kind_index`).
- **No one job stops a cycle**: any error while reading one pending job refuses that job,
  with a message naming the job and the field (:func:`refuse_on_error`); the Editor marks it
  (held, with the reason) and every other job is planned.
- **No one node stops a cycle**: a node whose record cannot be read, or holds a value out of
  :mod:`coshare.ledger.bounds` (``1e300`` cores, a NaN, a name with a line break), is left out of
  the
  cycle with a note naming it and the field (:func:`read_node`); nothing is placed on it and
  every other node is planned. A running job whose own record cannot be read holds its whole
  node (:func:`whole_node`): counting it too small could oversubscribe, counting it whole
  cannot.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal, TypeVar

from coshare.errors import AnnotationError, ConfigError, FieldProblem
from coshare.ledger.annotations import KEYS, ClusterLimits, parse_job, squash
from coshare.ledger.bounds import BadValue
from coshare.ledger.gangs import node_counts
from coshare.model import MILLI, Device, DeviceKind, Job, Node, Plan, RunningJob, Spread
from coshare.ports import JobOutcome, Rejected

T = TypeVar("T")
R = TypeVar("R")

#: Characters of a user's value quoted in a message; the rest is counted, never printed.
SHOWN_CHARS = 40


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """``value`` for a message: whole when short, else its start and its length (a value from
    a job can be as long as its owner likes; a message must stay readable and bounded)."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value)} characters)"


# -- device kinds --------------------------------------------------------------------------

_KIND_NOISE = re.compile(r"[\s_-]+")


def kind_key(name: str) -> str:
    """A device kind's name as compared: ``"V100 M16"``, ``"v100-m16"`` -> ``"v100m16"``."""
    return _KIND_NOISE.sub("", name).casefold()


def kind_index(kinds: Mapping[str, DeviceKind]) -> dict[str, tuple[str, DeviceKind]]:
    """The configured device kinds by :func:`kind_key`, with their configured names.

    Raises:
        ConfigError: two kinds whose names differ only in case, spaces, ``-`` or ``_``.
    """
    index: dict[str, tuple[str, DeviceKind]] = {}
    for name, kind in kinds.items():
        key = kind_key(name)
        if key in index:
            raise ConfigError(
                f"device_kinds: {index[key][0]!r} and {name!r} name the same kind (names are "
                "compared ignoring case, spaces, '-' and '_'); keep one"
            )
        index[key] = (name, kind)
    return index


def find_kind(
    index: Mapping[str, tuple[str, DeviceKind]], name: str
) -> tuple[str, DeviceKind] | None:
    """The configured kind a device's model or GRES type names, with its configured name."""
    return index.get(kind_key(name)) if name else None


# -- host shares ---------------------------------------------------------------------------


def per_process(total: int, processes: int) -> int:
    """One process's share of a job's total host request, rounded up (never under-reserve)."""
    return -(-total // max(processes, 1))


# -- reading one job -----------------------------------------------------------------------


def field_value(job_id: str, name: str, raw: R, convert: Callable[[R], T], allowed: str) -> T:
    """Convert one field of a scheduler's job record; any failure names the job and field.

    Raises:
        AnnotationError: ``convert`` raised (an absurd size, a non-finite number, ...).
    """
    try:
        return convert(raw)
    except Exception as exc:  # a value from one job must never stop the cycle
        why = f"cannot be read ({type(exc).__name__}: {shown(str(exc))})"
        problem = FieldProblem(name, shown(str(raw)), allowed, why)
        raise AnnotationError(job_id, [problem]) from exc


def refuse_on_error(
    job_id: str, read: Callable[[], T], annotations: Mapping[str, object] | None = None
) -> T | Rejected:
    """``read()``, or the job refused when reading it raises anything at all.

    An :class:`~coshare.errors.AnnotationError` keeps its message, and so does a
    :class:`~coshare.ledger.bounds.BadValue` (a field of the scheduler's record out of its bounds),
    after the job's id. Any other exception
    (an ``OverflowError`` from a 400-digit size, a bug in a parser) becomes a message that
    names the job and, when one of its ``annotations`` alone raises it, that key with its
    value and allowed range; the job is refused and the cycle goes on for the others.
    """
    try:
        return read()
    except AnnotationError as exc:
        return Rejected(job_id, str(exc))
    except BadValue as exc:
        return Rejected(job_id, f"job {job_id}: {exc}")
    except Exception as exc:  # no one job's record may stop a cycle
        return Rejected(job_id, _unreadable(job_id, exc, annotations or {}))


def describe(exc: Exception) -> str:
    """An exception raised while reading one record, for a note: a
    :class:`~coshare.ledger.bounds.BadValue` as its message (field, value, range), anything else
    with
    its type, bounded."""
    if isinstance(exc, BadValue):
        return str(exc)
    return f"cannot be read ({type(exc).__name__}: {shown(str(exc))})"


def read_node(name: str, read: Callable[[], T], notes: list[str]) -> T | None:
    """``read()`` of one node's records, or ``None`` with a note naming the node and the
    field when it raises anything: that node is left out of this cycle and the others are
    planned."""
    try:
        return read()
    except Exception as exc:  # no one node's record may stop a cycle
        notes.append(f"node {name}: {describe(exc)}; node left out of this cycle")
        return None


def _unreadable(job_id: str, exc: Exception, annotations: Mapping[str, object]) -> str:
    what = f"{type(exc).__name__}: {shown(str(exc))}"
    allowed = {squash(spec.attribute): spec.allowed for spec in KEYS}
    for key, value in annotations.items():
        try:
            parse_job(job_id, {key: value})
        except AnnotationError:
            continue
        except Exception:  # this key alone raises: name it
            allowed_here = allowed.get(squash(key), "docs/annotations.md")
            problem = FieldProblem(key, shown(str(value)), allowed_here, f"cannot be read ({what})")
            return str(AnnotationError(job_id, [problem]))
    return f"job {job_id}: cannot be read ({what})"


# -- the queue's facts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """A placement recorded in a job.

    Attributes:
        node: the node's name.
        devices: the device ids on it (empty for CPU jobs).
        at_s: when it was written, seconds since the epoch.
        device_memory_mib: device memory it was placed for, when recorded (Slurm).
        device_threads: device threads it was placed for, when recorded (Slurm).
        parts: a gang's nodes with their devices and processes (and LLC ways).
        llc_ways: LLC ways allocated on ``node`` (a gang's: its first part's), when the
            placement allocates them (``sns``; Slurm).
        harvest_from: the running GPU job whose idle cores this CPU-only job was placed on
            (``collocate``): it counts against that job's harvest, not the node.
    """

    node: str
    devices: tuple[str, ...]
    at_s: float
    device_memory_mib: int | None = None
    device_threads: int | None = None
    parts: tuple[Part, ...] = ()
    llc_ways: int | None = None
    harvest_from: str | None = None

    @property
    def spots(self) -> tuple[Part, ...]:
        """Every node of the placement with its devices (one part for a single-node job,
        whose processes are then 0: all of them)."""
        return self.parts or (Part(self.node, self.devices, 0, self.llc_ways),)


@dataclass(frozen=True)
class Part:
    """One node of a multi-node (gang) placement.

    Attributes:
        node: the node's name.
        devices: the device ids on it (empty for CPU jobs).
        processes: the gang's processes on it.
        llc_ways: LLC ways allocated to the job on it (``sns``); ``None``: none.
    """

    node: str
    devices: tuple[str, ...]
    processes: int
    llc_ways: int | None = None


@dataclass(frozen=True)
class Shape:
    """A job's nodes and processes as its scheduler's own request states them (Slurm's
    ``-N min-max``, ``--ntasks``, ``--ntasks-per-node``), when the scheduler has one.

    The scheduler's request is the gang's shape: annotations that say otherwise are refused
    naming the key (:func:`with_shape`), since the scheduler would start the job as it was
    asked, not as coshare planned it.

    Attributes:
        nodes: the fewest nodes.
        nodes_max: the most nodes; ``None``: ``nodes``.
        processes: processes in all.
        processes_per_node: the most on one node; ``None``: no limit.
        source: how a user sets these, for messages (``sbatch -N, --ntasks, ...``).
    """

    nodes: int = 1
    nodes_max: int | None = None
    processes: int = 1
    processes_per_node: int | None = None
    source: str = "the job's own request"

    @property
    def is_gang(self) -> bool:
        """Whether the request may span more than one node."""
        return self.nodes > 1 or (self.nodes_max or 0) > 1


@dataclass(frozen=True)
class Queued:
    """One pending annotated job, as an adapter translates its scheduler's record.

    Attributes:
        id: the scheduler's job id.
        annotations: the user's coshare keys and raw values.
        cpu_milli: the scheduler's host cores request: the job's total on its node.
        memory_mib: the scheduler's host memory request: the job's total on its node.
        priority: the scheduler's priority.
        submit_time_s: when it was submitted (the snapshot's clock).
        placed: the placement it carries, if any (whether or not its gate is open).
        gate_open: whether it could start now (HTCondor: a placed node is set; Slurm: it is
            not held).
        shape: its nodes and processes as the scheduler's own request states them, when the
            scheduler has such a request (Slurm); ``None``: from the annotations only. For a
            gang, ``cpu_milli`` and ``memory_mib`` are then the totals of all its processes.
        charges: what it counts against the scheduler's limits (``Job.charges``,
            :mod:`coshare.ledger.limits`).
    """

    id: str
    annotations: Mapping[str, object]
    cpu_milli: int = MILLI
    memory_mib: int = 0
    priority: int = 0
    submit_time_s: float = 0.0
    placed: Placed | None = None
    gate_open: bool = False
    shape: Shape | None = None
    charges: tuple[tuple[str, float], ...] = ()


def pending_job(queued: Queued, limits: ClusterLimits | None, *, gangs: bool = False) -> Job:
    """The job the policy plans: its annotations checked, host requests shared per process.

    Args:
        queued: the job as its adapter read it.
        limits: the cluster's largest device and node (``None``: unchecked).
        gangs: whether the adapter places multi-node jobs (Slurm does; HTCondor does for
            the parallel universe, and refuses gang keys on other jobs itself).

    Raises:
        AnnotationError: its annotations are unusable (and anything a parser raises; call it
            through :func:`refuse_on_error`).
    """
    annotations = queued.annotations
    if queued.shape is not None:
        annotations = with_shape(queued.id, annotations, queued.shape)
    job = parse_job(
        queued.id,
        annotations,
        limits=limits,
        cpu_milli=queued.cpu_milli,
        memory_mib=queued.memory_mib,
        priority=queued.priority,
        submit_time_s=queued.submit_time_s,
    )
    if job.is_gang and not gangs:
        # The policies plan gangs (coshare.ledger.gangs), but this adapter does not write a
        # multi-node placement: refused here, never half-placed.
        key = "CoshareNodesMax" if job.nodes == 1 else "CoshareNodes"
        value = job.nodes_max if job.nodes == 1 else job.nodes
        raise AnnotationError(
            job.id,
            [
                FieldProblem(
                    key,
                    str(value),
                    "1 (multi-node jobs are planned by coshare but not yet placed on "
                    "a live scheduler)",
                    "asks for a multi-node gang",
                )
            ],
        )
    if job.processes > 1:
        job = replace(
            job,
            cpu_milli=per_process(queued.cpu_milli, job.processes),
            memory_mib=per_process(queued.memory_mib, job.processes),
        )
    if queued.charges:
        job = replace(job, charges=queued.charges)
    return job


#: The Job fields of a gang's shape, and their annotation keys.
_SHAPE_KEYS = {
    "nodes": "CoshareNodes",
    "nodes_max": "CoshareNodesMax",
    "processes": "CoshareProcesses",
    "processes_per_node": "CoshareProcessesPerNode",
}


def with_shape(job_id: str, annotations: Mapping[str, object], shape: Shape) -> dict[str, object]:
    """The annotations with the gang's shape taken from the scheduler's own request.

    A user's shape key that says otherwise is refused naming the key: the scheduler starts
    the job as it was asked. ``processes`` of a single-node request stays the user's (it only
    divides the host request into per-process shares, as it always did).

    Raises:
        AnnotationError: a shape key disagrees with the request, or cannot be read.
    """
    field_of = {squash(s.attribute): s.field for s in KEYS} | {
        squash(s.field): s.field for s in KEYS
    }
    declared = {
        k: field_of[squash(k)] for k in annotations if field_of.get(squash(k)) in _SHAPE_KEYS
    }
    if not declared:
        return _shaped(dict(annotations), shape)
    job = parse_job(job_id, {k: annotations[k] for k in declared} | {"CoshareKind": "cpu"})
    wanted: dict[str, int | None] = {
        "nodes": shape.nodes,
        "nodes_max": shape.nodes_max or shape.nodes,
        "processes": shape.processes if shape.is_gang else None,
        "processes_per_node": shape.processes_per_node,
    }
    problems = []
    for key, name in declared.items():
        have = getattr(job, name)
        if name == "nodes_max" and have is None:
            have = job.nodes
        want = wanted[name]
        if want is None and name == "processes":
            continue  # a single-node job's own per-process shares
        if have != want:
            shown_want = "unset" if want is None else str(want)
            problems.append(
                FieldProblem(
                    key,
                    shown(str(annotations[key])),
                    f"{shown_want}, as {shape.source} asks (set it there)",
                    "differs from the job's own request",
                )
            )
    if problems:
        raise AnnotationError(job_id, problems)
    kept = {
        k: v
        for k, v in annotations.items()
        if not (k in declared and (shape.is_gang or declared[k] != "processes"))
    }
    return _shaped(kept, shape)


def _shaped(annotations: dict[str, object], shape: Shape) -> dict[str, object]:
    """``annotations`` plus the request's shape keys (a single-node request adds none)."""
    if not shape.is_gang:
        return annotations
    annotations[_SHAPE_KEYS["nodes"]] = shape.nodes
    if shape.nodes_max is not None:
        annotations[_SHAPE_KEYS["nodes_max"]] = shape.nodes_max
    annotations[_SHAPE_KEYS["processes"]] = shape.processes
    if shape.processes_per_node is not None:
        annotations[_SHAPE_KEYS["processes_per_node"]] = shape.processes_per_node
    return annotations


PlacementStatus = Literal["none", "placed", "expired", "gone"]
"""``none``: no open placement; ``placed``: counts; ``expired``: not started in time;
``gone``: its node or devices cannot take it now."""


def placement_status(
    queued: Queued, job: Job, nodes: Mapping[str, Node], *, now_s: float, replan_after_s: float
) -> PlacementStatus:
    """Where a pending job stands in the life of a placement (see the module docstring).

    A gang's placement is whole or ``gone``: every node of it must still take its devices,
    and its parts must add up to the job as it asks now (its node count allowed, every
    process placed once, at most ``processes_per_node`` on a node).
    """
    placed = queued.placed
    if placed is None or not queued.gate_open:
        return "none"
    wanted = job.device_count if job.needs_device else 0
    spots = placed.spots
    for part in spots:
        node = nodes.get(part.node)
        devices = part.devices
        if node is None or len(devices) != wanted or len(set(devices)) != wanted:
            return "gone"
        if not set(devices) <= {d.id for d in node.devices}:
            return "gone"
    if job.is_gang or placed.parts:
        counts = [p.processes for p in spots]
        if (
            not job.is_gang
            or len({p.node for p in spots}) != len(spots)
            or len(spots) not in node_counts(job)
            or sum(counts) != job.processes
            or min(counts) < 1
            or max(counts) > (job.processes_per_node or job.processes)
        ):
            return "gone"
    if not now_s - placed.at_s < replan_after_s:
        return "expired"
    return "placed"


def counted(queued: Queued, job: Job) -> RunningJob:
    """What a placed, not started single-node job holds: its placement, with the larger of
    the demand it was placed for and what it declares now, and its whole host request."""
    return held(queued, job)[0]


def held(queued: Queued, job: Job) -> tuple[RunningJob, ...]:
    """What a placed, not started job holds on each of its nodes: its devices there, with the
    larger of the demand it was placed for and what it declares now, and its host request.

    A gang holds on *every* node the host share of its largest part: the scheduler lays out
    an uneven split in its own node order (Slurm's block distribution gives the first nodes of
    its own order one more task), which need not be the plan's, so counting the largest share
    everywhere never under-counts a node.
    """
    placed = queued.placed
    assert placed is not None
    on_device = bool(placed.devices)
    memory = max(job.device_memory_mib, placed.device_memory_mib or 0) if on_device else 0
    threads = max(job.device_threads, placed.device_threads or 0) if on_device else 0
    if placed.parts:
        top = max(p.processes for p in placed.parts)
        cpu_milli, memory_mib = job.cpu_milli * top, job.memory_mib * top
    else:
        cpu_milli = max(job.total_cpu_milli, queued.cpu_milli)
        memory_mib = max(job.total_memory_mib, queued.memory_mib)
    return tuple(
        RunningJob(
            id=job.id,
            node=part.node,
            devices=part.devices,
            device_memory_mib=memory,
            device_threads=threads,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            state="planned",
            start_time_s=placed.at_s,
            # what it declared of its bandwidth, for the membw policy
            program=job.program,
            membw_gbps=job.membw_gbps,
            llc_ways=part.llc_ways,  # the ways its resctrl group will hold there (sns)
            # what the collocate policy reads of it
            walltime_s=job.walltime_s,
            copy_bw_mbps=job.copy_bw_mbps,
            harvest_from=placed.harvest_from,
        )
        for part in placed.spots
    )


@dataclass(frozen=True)
class Book:
    """The pending side of one read, settled by the ledger's rules.

    Attributes:
        pending: jobs to plan (never placed, or their placement expired or is gone).
        planned: placed, not started jobs: they hold their devices.
        rejected: jobs refused, with the message for their owner.
        to_close: pending jobs whose gate is open, with why it must not stay open: the Editor
            closes each one the plan does not keep exactly where it is, before it opens any
            other.
        notes: what an admin should know.
    """

    pending: tuple[Job, ...] = ()
    planned: tuple[RunningJob, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    to_close: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def settle(
    queue: Iterable[Queued | Rejected],
    nodes: Sequence[Node],
    *,
    now_s: float,
    replan_after_s: float,
    gangs: bool = False,
) -> Book:
    """Sort the pending annotated jobs of one read into pending, planned and refused.

    Args:
        queue: each pending annotated job, or the refusal its translation ended in.
        nodes: the usable nodes (the limits annotations are checked against).
        now_s: now, on the clock of the placements' times.
        replan_after_s: a placement not started after this long has expired.
        gangs: whether the adapter places multi-node jobs (:func:`pending_job`).
    """
    by_name = {n.name: n for n in nodes}
    limits = ClusterLimits.of_nodes(nodes)
    pending: list[Job] = []
    planned: list[RunningJob] = []
    rejected: list[Rejected] = []
    to_close: dict[str, str] = {}
    notes: list[str] = []
    for item in queue:
        if isinstance(item, Rejected):
            rejected.append(item)
            continue
        job = refuse_on_error(
            item.id, partial(pending_job, item, limits, gangs=gangs), item.annotations
        )
        if isinstance(job, Rejected):
            rejected.append(job)
            continue
        status = refuse_on_error(
            item.id,
            partial(
                placement_status, item, job, by_name, now_s=now_s, replan_after_s=replan_after_s
            ),
        )
        if isinstance(status, Rejected):
            rejected.append(status)
        elif status == "placed":
            planned.extend(held(item, job))
        else:
            pending.append(job)
            if item.gate_open:
                to_close[item.id] = _OPEN_GATE[status]
            if status == "gone" and item.placed is not None:
                where = " + ".join(f"{p.node}/{','.join(p.devices)}" for p in item.placed.spots)
                notes.append(
                    f"job {item.id} is placed on {where}, which cannot take it now; "
                    "it is planned again"
                )
    return Book(tuple(pending), tuple(planned), tuple(rejected), to_close, tuple(notes))


#: Why a pending job's open gate must close, by its placement's status.
_OPEN_GATE: dict[PlacementStatus, str] = {
    "expired": "placed but not started within cycle.replan_after_s",
    "gone": "placed where its node or devices cannot take it now",
    "none": "could start without a placement",
    "placed": "placed",  # never used: a placed job is counted, not closed
}


# -- running jobs --------------------------------------------------------------------------


def declared_demand(job_id: str, annotations: Mapping[str, object]) -> tuple[int, int] | None:
    """A running job's declared device memory and threads per device, or ``None`` when its
    declaration cannot be read (whatever the reason)."""
    keys = {
        k: v
        for k, v in annotations.items()
        if squash(k) in ("devicememory", "devicethreads") and v not in (None, "")
    }
    job = refuse_on_error(job_id, lambda: parse_job(job_id, keys))
    if isinstance(job, Rejected):
        return None
    return job.device_memory_mib, job.device_threads


@dataclass(frozen=True)
class Declared:
    """What a running job declared that the policies read of it.

    Attributes:
        walltime_s: its requested time: ``CoshareWalltime``, else the scheduler's own time
            limit (``None``: neither; such a GPU job never lends cores: ``collocate``).
        copy_bw_mbps: its declared host-device copy bandwidth (``CoshareCopyBandwidth``);
            a node's measured figure replaces it (:func:`coshare.ledger.facts.attach`).
        program: its ``CoshareProgram`` (``membw`` estimates its use by it).
        membw_gbps: its declared memory bandwidth (``CoshareMembw``).
    """

    walltime_s: float | None = None
    copy_bw_mbps: float | None = None
    program: str | None = None
    membw_gbps: float | None = None


def declared_terms(
    job_id: str, annotations: Mapping[str, object], time_limit_s: float | None
) -> Declared:
    """A running job's requested time and copy bandwidth, and its program and memory
    bandwidth, as both schedulers read them. A declaration that cannot be read counts as none:
    the job then lends nothing, and counts as of unknown (bandwidth-bound) use: the safe
    side."""
    keys = {
        k: v
        for k, v in annotations.items()
        if squash(k) in ("walltime", "copybandwidth") and v not in (None, "")
    }
    job = refuse_on_error(job_id, lambda: parse_job(job_id, keys))
    whole = refuse_on_error(job_id, lambda: parse_job(job_id, annotations))
    program, membw = (
        (None, None) if isinstance(whole, Rejected) else (whole.program, whole.membw_gbps)
    )
    if isinstance(job, Rejected):
        return Declared(time_limit_s or None, None, program, membw)
    limit = job.walltime_s if job.walltime_s is not None else (time_limit_s or None)
    return Declared(limit, job.copy_bw_mbps, program, membw)


def placed_elsewhere(queued: Queued, nodes: Sequence[Node]) -> tuple[RunningJob, ...] | Rejected:
    """What a job another planner placed holds on ``nodes`` (several planners): its
    placement may start there any moment, so it holds its devices, expired or not (only its
    own planner plans it again); the reason when its record cannot be read (its planner's
    claims then count for it)."""
    limits = ClusterLimits.of_nodes(nodes)
    names = {n.name for n in nodes}

    def holding() -> tuple[RunningJob, ...]:
        return held(queued, pending_job(queued, limits, gangs=True))

    got = refuse_on_error(queued.id, holding, queued.annotations)
    return got if isinstance(got, Rejected) else tuple(r for r in got if r.node in names)


def whole_devices(devices: Sequence[Device]) -> tuple[int, int]:
    """The demand of a job counted as using its devices whole (a device Slurm gave outside
    coshare, or a running job whose declaration is unreadable): never under-count."""
    return (
        max((d.memory_mib for d in devices), default=0),
        max((d.threads for d in devices), default=0),
    )


def whole_node(job_id: str, node: Node) -> RunningJob:
    """A running job whose own record cannot be read (its cores or memory unreadable or out
    of bounds), counted as holding its whole node: every core, all memory, every device whole.
    Nothing is placed beside it until its record reads again; nothing is oversubscribed."""
    memory, threads = whole_devices(node.devices)
    return RunningJob(
        id=job_id,
        node=node.name,
        devices=tuple(d.id for d in node.devices),
        device_memory_mib=memory,
        device_threads=threads,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        state="running",
    )


# -- the Editor's decisions ----------------------------------------------------------------


#: Policies whose plans lend the idle cores of running GPU jobs to CPU-only jobs.
LENDING_POLICIES = frozenset({"collocate"})


def may_lend(policy: str, job: Job) -> bool:
    """Whether a job a ``policy`` places may lend its cores later: a GPU job with a requested
    time (without one no monitoring period ends: ``collocate``'s donors), placed by a lending
    policy. The scheduler must then let borrowers run on its cores (Slurm: it
    runs in the lending partition)."""
    return policy in LENDING_POLICIES and job.needs_device and job.walltime_s is not None


@dataclass(frozen=True)
class Current:
    """One job as the Editor re-read it just before writing.

    Attributes:
        id: the job id.
        state: the scheduler's word for its state, for messages (``running``, ``held``).
        pending: whether it still waits to start.
        gate_open: whether it could start now.
        placed: the placement it carries, if any.
        changed: why it is no longer as the Source read it; ``None``: as read.
        may_note: whether a wait reason may be written on it (it waits, and its record
            holds no placement, refusal or operator's text the reason would replace).
        wait_reason: the wait reason it carries now (``None``: none).
        started: whether it runs now (or is starting): one the read saw waiting that started
            meanwhile holds resources the plan did not count.
    """

    id: str
    state: str
    pending: bool
    gate_open: bool
    placed: Placed | None = None
    changed: str | None = None
    may_note: bool = False
    wait_reason: str | None = None
    started: bool = False


@dataclass(frozen=True)
class Write:
    """One placement to write (then open its gate).

    Attributes:
        job: the job id.
        node: the node's name.
        devices: the device ids.
        device_memory_mib: the device memory it is placed for.
        device_threads: the device threads it is placed for.
        parts: a gang's nodes, each with its devices and processes, in the plan's order
            (``node`` and ``devices`` are the first's); empty for a single-node job. One
            job's placement is one write: a gang is placed whole or not at all.
        llc_ways: LLC ways on ``node`` (a gang's: each part has its own), when allocated.
        spread: how a Spread-n-Share policy placed it (scale factor, nodes, cores per node,
            ways), for the adapter to record; ``None`` for other policies.
        harvest_from: the running GPU job whose idle cores it borrows (``collocate``): the
            adapter records it, and its node side takes the cores out of that job's cpuset
            before the job runs.
        shares_cores: whether the scheduler must let it run on cores it believes taken, or
            lend its own: a job placed on a harvest, or a GPU job a harvesting policy may
            lend cores of later (:func:`may_lend`). Slurm puts
            such jobs in its lending partition (``slurm.lend_partition``).
        trial: the partners of the trial co-run it is placed for (its record starts with
            the placement); ``None``: no trial.
        cpu_milli: its CPU demand per process (a gang's CPUs per node follow from it).
    """

    job: str
    node: str
    devices: tuple[str, ...]
    device_memory_mib: int = 0
    device_threads: int = 0
    parts: tuple[Part, ...] = ()
    llc_ways: int | None = None
    spread: Spread | None = None
    harvest_from: str | None = None
    shares_cores: bool = False
    trial: tuple[str, ...] | None = None
    cpu_milli: int = 0


@dataclass(frozen=True)
class Decisions:
    """What one apply writes, in this order: close, then writes, then refusals.

    Attributes:
        close: open gates to close (and confirm) before any new gate opens, with why.
        writes: placements to write.
        unchanged: jobs already placed exactly so.
        skipped: jobs not written, with why (ended, started, changed since the read).
        failed: jobs that cannot be written at all.
        refuse: refused jobs still pending: to mark with their reason and keep from starting.
    """

    close: tuple[JobOutcome, ...] = ()
    writes: tuple[Write, ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()
    refuse: tuple[Rejected, ...] = ()


def keeps(now: Current, parts: Sequence[Part], job: Job, harvest_from: str | None = None) -> bool:
    """Whether a job's open placement already is what the plan asks (nothing to write):
    the same nodes with the same devices (and, for a gang, processes), on the same GPU job's
    cores when it borrows, for at least the demand it declares now."""
    placed = now.placed
    if not now.gate_open or placed is None:
        return False
    if job.is_gang or placed.parts:
        if set(placed.parts) != set(parts):
            return False
    elif (placed.node, placed.devices, placed.llc_ways) != (
        parts[0].node,
        parts[0].devices,
        parts[0].llc_ways,
    ):
        return False
    if placed.harvest_from != harvest_from:
        return False
    return (
        placed.device_memory_mib is None or placed.device_memory_mib >= job.device_memory_mib
    ) and (placed.device_threads is None or placed.device_threads >= job.device_threads)


def decide(
    plan: Plan,
    pending: Mapping[str, Job],
    to_close: Mapping[str, str],
    rejected: Sequence[Rejected],
    current: Mapping[str, Current],
) -> Decisions:
    """Decide what applying ``plan`` writes, from the jobs as they are now.

    A gang's assignments (one per node) become one :class:`Write` with its parts: the
    adapter writes a job's placement in one update, so a gang is never half-written.

    Args:
        plan: the plan.
        pending: the snapshot's pending jobs, by id.
        to_close: the read's pending jobs with an open gate, with why
            (:attr:`Book.to_close`).
        rejected: the read's refused jobs.
        current: the involved jobs as re-read just before writing (plan, refused and
            :attr:`Book.to_close` jobs); a job missing here left the queue.
    """
    spots: dict[str, list[Part]] = defaultdict(list)
    harvest: dict[str, str] = {}
    for a in plan.assignments:
        spots[a.job].append(Part(a.node, tuple(a.devices), a.processes or 0, a.llc_ways))
        if a.harvest_from is not None:
            harvest[a.job] = a.harvest_from
    spreads = {s.job: s for s in plan.spreads}
    trials = {t.job: tuple(t.partners) for t in plan.trials}
    writes: list[Write] = []
    unchanged: list[str] = []
    skipped: list[JobOutcome] = []
    failed: list[JobOutcome] = []
    for job_id, places in spots.items():
        job = pending.get(job_id)
        now = current.get(job_id)
        if job is None:
            failed.append(JobOutcome(job_id, "is in the plan but was not pending"))
        elif len(places) != 1 and not job.is_gang:
            skipped.append(JobOutcome(job_id, "is planned on several nodes but asks for one"))
        elif now is None:
            skipped.append(JobOutcome(job_id, "left the queue since it was read"))
        elif not now.pending:
            skipped.append(JobOutcome(job_id, f"is {now.state} now, no longer pending"))
        elif keeps(now, places, job, harvest.get(job_id)):
            unchanged.append(job_id)
        elif now.changed is not None:
            skipped.append(JobOutcome(job_id, now.changed))
        else:
            first = places[0]
            parts = tuple(places) if job.is_gang else ()
            writes.append(
                Write(
                    job_id,
                    first.node,
                    first.devices,
                    job.device_memory_mib,
                    job.device_threads,
                    parts,
                    first.llc_ways,
                    spreads.get(job_id),
                    harvest.get(job_id),
                    job_id in harvest or may_lend(plan.policy, job),
                    trials.get(job_id),
                    job.cpu_milli,
                )
            )
    refused = {r.job for r in rejected}
    kept = set(unchanged)
    moves = {
        w.job: " + ".join(
            f"{p.node}/{','.join(p.devices)}" if p.devices else p.node
            for p in (w.parts or (Part(w.node, w.devices, 0),))
        )
        for w in writes
    }
    close: list[JobOutcome] = []
    for c in sorted(current.values(), key=lambda c: _job_order(c.id)):
        if c.id in kept or not (c.pending and c.gate_open):
            continue
        if c.id not in pending and c.id not in to_close and c.id not in refused:
            continue  # not a job this cycle decides about (a placed one, counted as such)
        why = to_close.get(c.id, "its gate opened since it was read")
        if c.id in refused:
            then = "refused"
        elif c.id in moves:
            then = f"planned again on {moves[c.id]}"
        else:
            then = "not placed this cycle"
        close.append(JobOutcome(c.id, f"{why}; {then}"))
    refuse: list[Rejected] = []
    for r in rejected:
        now = current.get(r.job)
        if now is None or not now.pending:
            state = "left the queue" if now is None else now.state
            skipped.append(JobOutcome(r.job, f"not marked ({state}): {r.reason}"))
        elif now.changed is not None:
            skipped.append(JobOutcome(r.job, f"not marked ({now.changed}): {r.reason}"))
        else:
            refuse.append(r)
    return Decisions(
        tuple(close), tuple(writes), tuple(unchanged), tuple(skipped), tuple(failed), tuple(refuse)
    )


def gates_may_open(started: Collection[str], not_closed: Collection[str]) -> str | None:
    """After closing gates: ``None`` when new gates may open, else why nothing more is written
    this cycle (a job started at the placement being withdrawn, or a gate did not close: the
    plan may oversubscribe that device; the next cycle reads the truth)."""
    if started:
        return (
            f"not written: {', '.join(sorted(started, key=_job_order))} started at an "
            "expired placement, or by another planner or an admin, while this cycle planned; "
            "planning again next cycle"
        )
    if not_closed:
        return (
            f"not written: the placement of {', '.join(sorted(not_closed, key=_job_order))} "
            "could not be withdrawn; planning again next cycle"
        )
    return None


def _job_order(job_id: str) -> tuple[int, ...] | tuple[int, str]:
    """Numeric order of job ids (``9`` before ``10``; ``2.1`` before ``10.0``)."""
    parts = job_id.split(".")
    if all(p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)
    return (-1, job_id)
