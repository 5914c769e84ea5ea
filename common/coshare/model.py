"""The scheduler-agnostic model: nodes, devices, jobs, placements, snapshots and plans.

Every resource of the five papers in ``shared/papers`` has a field here, even where the
policies of today do not use it yet, so later policies extend the model instead of rewriting it:

=====================  =========================================================
resource               paper that needs it
=====================  =========================================================
device memory, threads coprocessor sharing (knapsack capacity and job value)
cores, host memory     all: a node is never oversubscribed
memory bandwidth       membw co-scheduling (Poncos), Spread-n-Share
LLC ways               Spread-n-Share (cache way allocation)
copy bandwidth         collocating CPU jobs with GPU jobs (cudaMemcpy threshold)
gang size (processes)  Spread-n-Share, distributed job allocation
program, alpha         Spread-n-Share (profile key, slowdown threshold)
domain                 distributed job allocation (scheduling domains)
=====================  =========================================================

Units are in the names. CPU is counted in thousandths of a core (``cpu_milli``) so that
fractional requests (Kubernetes pods, the Alibaba trace) are exact integers; the JSON
contract speaks of ``cores`` and the parser converts, rounding requests *up* and capacities
*down* (:func:`cores_to_milli`, :func:`capacity_cores_to_milli`).

The classes trust their inputs: validation lives in :mod:`coshare.schema` (JSON files) and
:mod:`coshare.ledger.annotations` (job annotations), so building 100,000 jobs stays cheap.
They are frozen dataclasses, but for :class:`Job`: a frozen msgspec struct, built in one C
call (a snapshot's 100,000 pending jobs in 0.03 s, a third of setting a dataclass's 19
slots one by one), which ``dataclasses`` still treats as a dataclass.
This module is pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

#: One core in ``cpu_milli`` units.
MILLI = 1000
#: The largest device memory and hardware thread count of one device that coshare accepts
#: anywhere (annotations, snapshots, config); :mod:`coshare.ledger.bounds` holds the other bounds.
MAX_DEVICE_MEMORY_MIB = 2**20
MAX_DEVICE_THREADS = 2**24

JobKind = Literal["device", "cpu"]
"""``device``: the job offloads to a device; ``cpu``: host cores only (collocation paper)."""

ThreadMode = Literal["strict", "soft"]
"""``strict``: the declared threads of the jobs sharing a device never exceed its hardware
threads. ``soft``: they may, where the node's offload gate serializes offloads (the paper's
COSMIC); a single job never declares more than the device has in either mode."""

PlacementState = Literal["running", "planned"]
"""``planned``: placed by coshare but not started yet; it holds its resources all the same."""

UnplacedCode = Literal[
    "invalid", "never_fits", "no_room", "reserved", "not_chosen", "unsupported", "policy_failed"
]
"""Why a pending job is not placed, for tools (the ``reason`` text is for people).

- ``invalid``: its declared values are unusable (bad annotation); fix the job.
- ``never_fits``: no device or node of the cluster could hold it even when empty; fix the job
  or the cluster.
- ``no_room``: it fits the cluster, but not the free resources of this cycle; it waits.
- ``reserved``: it waits for a device that the policy holds back for it (aging).
- ``not_chosen``: it fits somewhere now, but the policy preferred other jobs this cycle.
- ``unsupported``: the policy cannot place this kind of job (e.g. multi-node gangs).
- ``policy_failed``: the policy failed on this job (raised, or planned it unsoundly); the
  cycle planned the others around it (:mod:`coshare.cycle.containment`); an admin looks at why.
"""


def cores_to_milli(cores: float) -> int:
    """Convert a core count to ``cpu_milli``, rounding up (never under-reserve)."""
    scaled = round(cores * MILLI, 6)
    whole = int(scaled)
    return whole if whole == scaled else whole + 1


def capacity_cores_to_milli(cores: float) -> int:
    """Convert a node's core count to ``cpu_milli``, rounding down: a capacity is never
    over-promised (a 3.9995-core node offers 3999 milli, and a 4-core job does not fit)."""
    scaled = round(cores * MILLI, 6)
    return int(scaled)


def milli_to_cores(cpu_milli: int) -> int | float:
    """Convert ``cpu_milli`` back to cores: an int when whole, else a float."""
    if cpu_milli % MILLI == 0:
        return cpu_milli // MILLI
    return cpu_milli / MILLI


@dataclass(frozen=True, slots=True)
class Device:
    """An accelerator (GPU, Xeon Phi-style coprocessor) of a node.

    Attributes:
        id: identifier unique within its node (``"0"``); never contains a comma.
        memory_mib: physical device memory.
        threads: hardware threads (the paper's T; 240 on a Xeon Phi 5110P).
        model: device model or kind name (``"V100M16"``); empty when unknown.
    """

    id: str
    memory_mib: int
    threads: int
    model: str = ""


@dataclass(frozen=True, slots=True)
class TrialResult:
    """A trial co-run's probe as the node's daemon answered it in its facts
    (``policy.membw.probe_via: facts``, :mod:`coshare.ledger.facts`'s ``trial=``).

    Attributes:
        job: the trial job's id on its node (HTCondor: its GlobalJobId in id characters).
        at_s: the request it answers: the ``at`` of the job's ``measuring`` record.
        share: the job's measured share of the node's bandwidth; ``None``: not measured.
        error: the daemon's error code when it could not measure (``unknown_job``,
            ``unsupported``, ``interrupted`` ...; its log says more).
    """

    job: str
    at_s: int
    share: float | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """A compute node ("server") with its host resources and devices.

    Optional resources are ``None`` when not managed on this cluster.

    Attributes:
        name: node name as the scheduler knows it.
        cpu_milli: host cores, in thousandths of a core.
        memory_mib: host memory.
        devices: the node's devices, in the scheduler's order.
        membw_gbps: peak main-memory bandwidth (Poncos, Spread-n-Share).
        llc_ways: last-level cache ways that can be allocated (Intel CAT; Spread-n-Share).
        domain: scheduling domain for distributed allocation; ``None`` means the only one.
        membw_avail_gbps: node facts (:mod:`coshare.ledger.facts`): the main-memory bandwidth the
            last probe measured on the node's free cores (poncos section 6).
        membw_baseline_gbps: node facts: what the same probe measured on the same cores of
            the idle node (``coshare node probe membw --init``); available / baseline is
            libDistGen's ``distgen_membw_available()``.
        llc_ways_free: node facts: LLC ways no coshare job's resctrl group holds.
        facts_at_s: when the node measured its facts (epoch seconds); ``None``: no usable
            facts (none published, malformed, or older than ``cycle.node_facts_max_age_s``).
        membw_at_s: node facts: when the probe behind ``membw_avail_gbps`` ran (it may be
            older than ``facts_at_s``: the daemon probes every ``node.probe_interval_s``);
            the ``membw`` policy counts a job as measured only if it ran before the probe.
        trial_results: node facts: the trial probes the node's daemon ran for requests it
            read from the scheduler's queue (``policy.membw.probe_via: facts``); read by the
            trial cycle only, not part of the snapshot's JSON.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[Device, ...] = ()
    membw_gbps: float | None = None
    llc_ways: int | None = None
    domain: str | None = None
    membw_avail_gbps: float | None = None
    membw_baseline_gbps: float | None = None
    llc_ways_free: int | None = None
    facts_at_s: float | None = None
    membw_at_s: float | None = None
    trial_results: tuple[TrialResult, ...] = ()

    @property
    def cores(self) -> int | float:
        """Host cores as a number (int when whole)."""
        return milli_to_cores(self.cpu_milli)


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit the scheduler enforces before it starts a job (a Slurm QOS or association
    limit, an HTCondor group quota or concurrency limit): jobs charged to it start only while
    ``used`` plus their charge stays within ``max``.

    Attributes:
        id: the limit's key in pending jobs' ``charges`` (id characters).
        name: as the scheduler names it, e.g. ``MaxTRESPerUser gres/gpu=4``.
        holder: whom it counts, e.g. ``user alice``, ``account physics``, ``group group_a``.
        max: the most it allows.
        used: what running jobs hold of it now.
    """

    id: str
    name: str
    holder: str
    max: float
    used: float


class Job(msgspec.Struct, frozen=True, gc=False):
    """A pending job and everything it declared.

    Device demands are per device and ``device_count`` devices are needed on one node.
    Host demands (``cpu_milli``, ``memory_mib``) are per process; a single-node policy puts all
    ``processes`` on one node.

    Attributes:
        id: the scheduler's job id (``"8.0"`` for HTCondor, ``"4711"`` for Slurm).
        device_memory_mib: maximum device memory the job will use on each device (paper's m).
        device_threads: maximum device threads of one offload (paper's t).
        device_count: devices needed on one node (0 for CPU jobs).
        cpu_milli: host cores per process, in thousandths of a core.
        memory_mib: host memory per process.
        priority: larger runs first among otherwise equal jobs.
        submit_time_s: submission time, on the same clock as :attr:`Snapshot.now_s`.
        kind: ``device`` or ``cpu``.
        processes: gang size (all processes must start together).
        program: profile key (Spread-n-Share).
        alpha: tolerated slowdown factor (Spread-n-Share; 0.9 means 10% slower is fine).
        membw_gbps: main-memory bandwidth the job uses (Poncos, Spread-n-Share).
        copy_bw_mbps: host-device copy bandwidth (collocation paper's cudaMemcpy threshold).
        walltime_s: requested run time, when the user gave one.
        nodes: the fewest nodes the job spans (a gang; 1: a single-node job).
        nodes_max: the most nodes it may span (Slurm's ``-N min-max``); ``None``: ``nodes``.
        processes_per_node: the most processes one node takes (Slurm's
            ``--ntasks-per-node``); ``None``: no limit. For a gang, ``device_count`` devices
            are needed on *each* node it spans, and ``cpu_milli``/``memory_mib`` stay per
            process (see :mod:`coshare.ledger.gangs`).
        charges: what the job counts against each scheduler limit it is subject to, as
            ``(limit id, amount)`` pairs (:class:`Limit`, :mod:`coshare.ledger.limits`);
            empty: none.
    """

    id: str
    device_memory_mib: int = 0
    device_threads: int = 0
    device_count: int = 1
    cpu_milli: int = MILLI
    memory_mib: int = 0
    priority: int = 0
    submit_time_s: float = 0.0
    kind: JobKind = "device"
    processes: int = 1
    program: str | None = None
    alpha: float | None = None
    membw_gbps: float | None = None
    copy_bw_mbps: float | None = None
    walltime_s: float | None = None
    nodes: int = 1
    nodes_max: int | None = None
    processes_per_node: int | None = None
    charges: tuple[tuple[str, float], ...] = ()

    @property
    def is_gang(self) -> bool:
        """Whether the job may span more than one node (planned by :mod:`coshare.ledger.gangs`)."""
        return self.nodes > 1 or (self.nodes_max or 0) > 1

    @property
    def cores(self) -> int | float:
        """Host cores per process as a number (int when whole)."""
        return milli_to_cores(self.cpu_milli)

    @property
    def total_cpu_milli(self) -> int:
        """Host cores of all processes, in thousandths of a core."""
        return self.cpu_milli * self.processes

    @property
    def total_memory_mib(self) -> int:
        """Host memory of all processes."""
        return self.memory_mib * self.processes

    @property
    def needs_device(self) -> bool:
        """Whether the job must be placed on devices."""
        return self.kind == "device" and self.device_count > 0


def _dataclass_view(cls: type[msgspec.Struct]) -> None:
    """Let ``dataclasses`` (``replace``, ``fields``, ``asdict``, ``is_dataclass``) treat the
    struct ``cls`` as the dataclass it was: the fields of a dataclass with its annotations
    and defaults, made by ``dataclasses`` itself. The pending jobs of a snapshot are built
    in one C call each (a hundred thousand at a time), and every caller keeps its API."""
    defaults = {
        f.name: f.default for f in msgspec.structs.fields(cls) if f.default is not msgspec.NODEFAULT
    }
    namespace: dict[str, object] = {"__annotations__": dict(cls.__annotations__), **defaults}
    twin: type = dataclass(frozen=True)(type(cls.__name__, (), namespace))
    cls.__dataclass_fields__ = twin.__dataclass_fields__  # type: ignore[attr-defined]
    cls.__dataclass_params__ = twin.__dataclass_params__  # type: ignore[attr-defined]


_dataclass_view(Job)


def priority_key(job: Job) -> tuple[int, float, str]:
    """The scheduler's order of pending jobs: higher priority first, then older, then by id
    (deterministic); the policies plan in it and the limits admit in it."""
    return (-job.priority, job.submit_time_s, job.id)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """What a started or already-planned job holds on one node.

    A job spread over several nodes has one entry per node. Host values are what the job
    holds on this node (all its processes there); device values are per device.

    Attributes:
        id: the scheduler's job id.
        node: the node's name.
        devices: ids of the devices it uses on that node (empty for CPU jobs).
        device_memory_mib: declared device memory per device.
        device_threads: declared device threads per device.
        cpu_milli: host cores held on this node, in thousandths of a core.
        memory_mib: host memory held on this node.
        state: ``running`` or ``planned`` (placed by coshare, not started yet).
        membw_gbps: memory bandwidth it uses on this node, when known.
        llc_ways: cache ways allocated to it on this node, when managed.
        start_time_s: when it started (or was planned), on the snapshot's clock.
        program: profile key, when known.
        cpu_load_cores: node facts: the job's mean CPU load over its sampled history, in
            cores busy (its cgroup's CPU time over wall time; Wu & Hong section IV-A).
        cpu_load_last_cores: node facts: its CPU load over the last sampling interval.
        cpu_load_max_cores: node facts: the highest interval load of its history.
        cpu_load_window_s: node facts: the seconds the history covers.
        walltime_s: the job's requested run time, when known: with ``start_time_s`` it gives
            the expected end a wide gang's reservation counts on; ``collocate``'s
            monitoring period is ``P_M`` of it (Wu & Hong section IV-A).
        copy_bw_mbps: its host-device copy bandwidth, MB/s per process (measured, or declared
            as ``CoshareCopyBandwidth``; section III-B3), when known.
        harvest_from: the running GPU job whose idle cores this CPU job borrows (``collocate``);
            its cores then count against that job's harvest, not the node's free cores.
        cpu_cores_held: node facts: the cores its cpuset holds now (fewer than it asked for
            while it lends some); its measured load can never exceed them.
        cpu_wait_cores: node facts: its run-queue delay over the load's history, in cores
            (its tasks' time runnable but waiting for a CPU per second): with the load, what
            it wants, which the load alone cannot show on cores it shares or lent.
        cpu_wait_last_cores: node facts: its run-queue delay over the last interval.
    """

    id: str
    node: str
    devices: tuple[str, ...] = ()
    device_memory_mib: int = 0
    device_threads: int = 0
    cpu_milli: int = MILLI
    memory_mib: int = 0
    state: PlacementState = "running"
    membw_gbps: float | None = None
    llc_ways: int | None = None
    start_time_s: float | None = None
    program: str | None = None
    cpu_load_cores: float | None = None
    cpu_load_last_cores: float | None = None
    cpu_load_max_cores: float | None = None
    cpu_load_window_s: float | None = None
    walltime_s: float | None = None
    copy_bw_mbps: float | None = None
    harvest_from: str | None = None
    cpu_cores_held: int | None = None
    cpu_wait_cores: float | None = None
    cpu_wait_last_cores: float | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a policy sees: the cluster, what holds resources, and what waits.

    Attributes:
        nodes: the cluster's nodes.
        running: placements that hold resources (running or planned-not-started).
        pending: annotated jobs waiting to be placed.
        now_s: the current time on the jobs' clock; ``None`` disables age-based decisions.
        limits: the limits the scheduler enforces that pending jobs are charged to
            (:attr:`Job.charges`); empty: none known.
    """

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[Job, ...] = ()
    now_s: float | None = None
    limits: tuple[Limit, ...] = ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one job (or the part of a gang on one node) is planned to run.

    Attributes:
        job: the job id.
        node: the node's name.
        devices: the device ids on that node (empty for CPU jobs).
        processes: processes of a multi-node job on this node; ``None`` for single-node jobs.
        harvest_from: a CPU job placed on the idle cores of this running GPU job
            (``collocate``; Wu & Hong section IV-A) instead of the node's free cores.
        llc_ways: LLC ways allocated to the job on this node (``sns``, Spread-n-Share section
            4.3); ``None``: no way allocation.
        membw_gbps: memory bandwidth the policy counts for the job on this node (``sns``);
            ``None``: not counted.
        llc_ways_spare: ways it gets on top of ``llc_ways`` when it starts: its equal share
            of the node's ways no job is allocated (Spread-n-Share section 4.4,
            :mod:`coshare.ledger.llc`; the floor share: the node gives the remainder one way each to
            the lowest jobs). It shrinks as jobs come and grows as they leave; ``None``: no
            way allocation.
    """

    job: str
    node: str
    devices: tuple[str, ...] = ()
    processes: int | None = None
    harvest_from: str | None = None
    llc_ways: int | None = None
    membw_gbps: float | None = None
    llc_ways_spare: int | None = None


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A pending job left out of this plan, with a reason a person can act on.

    Attributes:
        job: the job id.
        reason: one sentence for people.
        code: the reason's family, for tools (see :data:`UnplacedCode`).
    """

    job: str
    reason: str
    code: UnplacedCode = "no_room"


@dataclass(frozen=True, slots=True)
class Trial:
    """A trial co-run (poncos section 7): a job whose memory bandwidth is not known yet is
    started beside the jobs already on its node, to be measured once it is past its
    initialization (the old jobs frozen while the probe runs) and kept only if the sum stays
    within the limit.

    Attributes:
        job: the job on trial (it also has an assignment to ``node``).
        node: the node of the trial.
        partners: the jobs already on that node it is tried beside, sorted.
    """

    job: str
    node: str
    partners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Spread:
    """How a Spread-n-Share policy (``sns``, ``cs``) placed one job (section 4.3-4.4).

    Attributes:
        job: the job (it also has one assignment per node).
        scale: the scale factor ``k``: it runs on ``k * ceil(P/T)`` nodes.
        nodes: how many nodes it runs on.
        cores_per_node: ``ceil(P/n)``: the most processes (cores) it has on one node.
        ways: LLC ways allocated to it on each node; ``None``: no way allocation (``cs``, no
            profile, or a node without resctrl).
        note: why it runs as it does, when that is not its profile's best scale (``no
            profile for X``, a node without resctrl), for people; empty otherwise.
        membw_gbps: the memory bandwidth per node to cap it at with MBA (``policy.sns.mba``:
            ``b`` at ``cores_per_node``; the node turns it into its ``MB:`` percentage);
            ``None``: no cap.
    """

    job: str
    scale: int
    nodes: int
    cores_per_node: int
    ways: int | None = None
    note: str = ""
    membw_gbps: float | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """A policy's decision for one cycle.

    Every pending job of the snapshot appears exactly once: in ``assignments`` (several times
    only when it spans nodes) or in ``unplaced``.

    Attributes:
        policy: the policy's name.
        assignments: planned placements.
        unplaced: jobs left waiting, with reasons.
        seconds: time the policy took; filled in by the caller (policies read no clock).
        notes: what the admin should know about how this plan was made (a setting coarsened
            to stay within what the cycle affords, with the estimate), one sentence each.
        trials: the assignments that are trial co-runs (the ``membw`` policy), with the jobs
            each is tried beside; empty for every other policy.
        requeue: running jobs to give back their resources through the scheduler (requeue,
            or shrink where it can), each with the reason; ``collocate`` asks it of CPU jobs
            on the cores of a GPU job whose load rose after they were placed.
        spreads: the scale factor, nodes, cores per node and ways of each job a
            Spread-n-Share policy placed (``sns``, ``cs``); empty for every other policy.
    """

    policy: str
    assignments: tuple[Assignment, ...] = ()
    unplaced: tuple[Unplaced, ...] = ()
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()
    requeue: tuple[Unplaced, ...] = ()
    spreads: tuple[Spread, ...] = ()
    placed_jobs: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "placed_jobs", frozenset(a.job for a in self.assignments))

    @property
    def placed(self) -> int:
        """Number of distinct jobs placed."""
        return len(self.placed_jobs)

    @property
    def pending(self) -> int:
        """Number of distinct pending jobs the plan accounts for."""
        return self.placed + len(self.unplaced)


@dataclass(frozen=True)
class DeviceKind:
    """Limits of one kind of device, for nodes whose scheduler does not advertise them
    (``device_kinds`` in the configuration; looked up by :func:`coshare.ledger.book.find_kind`).

    Attributes:
        memory_mib: device memory.
        threads: hardware threads.
    """

    memory_mib: int = field(metadata={"min": 1, "max": MAX_DEVICE_MEMORY_MIB})
    threads: int = field(metadata={"min": 1, "max": MAX_DEVICE_THREADS})
