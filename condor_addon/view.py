"""What one read of HTCondor means for coshare: slot ads and job ads into the ledger's facts.

The reading side (:mod:`condor_addon.client`) evaluates each projected attribute of each ad
into a Python value (``int``, ``float``, ``str``, ``bool``, ``list``, ``None`` for undefined);
everything here works on those values only, so it is tested on ads recorded from a real pool
(``tests/fixtures/condor/<version>/``). The rules of a placement's life are the ledger's
(:mod:`coshare.ledger.book`); this module only translates.

Where the truth lives:

- **Nodes and devices**: the collector's slot ads (``CoshareNodeName`` and the
  ``CoshareNodeDevice*`` lists of coshare-devices). Host cores and memory are the totals of a
  node's partitionable and static slots. A device that advertises no memory or threads takes
  them from ``device_kinds`` by its model (:func:`coshare.ledger.book.find_kind`).
- **What runs where**: the collector's *claimed* slots. Each holds its cores and memory, and a
  coshare job's slot also carries the placement it really started with (``STARTD_JOB_ATTRS``),
  so a job is counted on the device it runs on even if its queue entry says otherwise. Claimed
  slots of unannotated jobs, or of other schedds, hold host resources too.
- **Node facts**: the ``CoshareNodeFacts`` text a node's startd cron publishes (the node
  daemon's measurements); only carried here, read by :func:`coshare.ledger.facts.with_facts`. The
  node knows a job by its GlobalJobId in id characters (the job wrapper's ``--job``).
- **What is planned**: the schedd's queue. An idle managed job's gate is open while
  ``CosharePlacedNode`` is set; the ledger counts it as placed, or pending again when its
  placement expired. A running job the collector does not show yet is counted from its queue
  entry.

No I/O, no clock: ``now_s`` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.errors import AnnotationError, FieldProblem
from coshare.ledger.annotations import squash
from coshare.ledger.book import (
    Book,
    Current,
    Part,
    Placed,
    Queued,
    declared_terms,
    find_kind,
    kind_index,
    read_node,
    refuse_on_error,
    settle,
    shown,
    whole_devices,
)
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_JOB_NODES,
    MAX_MEMORY_MIB,
    MAX_PRIORITY,
    MAX_TIME_S,
    BadValue,
    as_float,
    bounded,
    shorten_text,
)
from coshare.ledger.compute_share import running_demand
from coshare.ledger.facts import with_facts
from coshare.ledger.ids import MAX_TEXT_CHARS, checked_id, split_ids, text_problem
from coshare.ledger.records import Started, foreign_holdings, holdings, unwritable_node
from coshare.model import (
    MILLI,
    Device,
    DeviceKind,
    Node,
    RunningJob,
    Snapshot,
    capacity_cores_to_milli,
    cores_to_milli,
)
from coshare.ports import Rejected, Unusable

from condor_addon import attributes as A
from condor_addon.concurrency import parse_request
from condor_addon.names import (
    UNWRITABLE_DEVICE,
    UNWRITABLE_NAME,
    device_id_problem,
    node_name_problem,
)

Values = Mapping[str, object]

#: Job states that hold a slot (the job has, or is about to have, a starter).
HOLDS_SLOT = frozenset({A.RUNNING, A.TRANSFERRING_OUTPUT, A.SUSPENDED})

#: Slot states in which a slot takes no new job: ``condor_drain`` ("Drained"), or its START
#: expression is false ("Owner"); HTCondor manual, "Machine States". A node all of whose
#: partitionable and static slots are in one of them takes nothing: it is left out of the
#: snapshot, as Slurm's drained and down nodes are, and ``show`` says why.
CLOSED_STATES = frozenset({"Drained", "Owner"})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _number(value: object) -> float | None:
    """A finite number, else ``None`` (an integer too large for a float, too: ``isfinite``
    of one raises OverflowError)."""
    number = as_float(value)
    return number if number is not None and math.isfinite(number) else None


def _or(value: object, default: object) -> object:
    """``value``, or ``default`` when the ad lacks it (or it evaluates to undefined)."""
    return default if value is None else value


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


def machine_of(slot_name: str) -> str:
    """The startd part of a slot name: ``slot1_2@node2@host`` -> ``node2@host``."""
    return slot_name.split("@", 1)[1] if "@" in slot_name else slot_name


@dataclass(frozen=True)
class ClusterView:
    """What the collector says: the nodes, and what holds resources on them.

    Attributes:
        nodes: managed nodes (those advertising ``CoshareNodeName``) that take jobs, sorted
            by name.
        running: claimed slots as running jobs; ``id`` is the job's GlobalJobId (or the slot
            name for a claim without a job), renamed to the queue's id by
            :func:`build_snapshot`.
        global_ids: GlobalJobIds of the jobs in claimed slots.
        node_of_machine: startd name (``node2@host``) -> node name, to place a job by its
            ``RemoteHost`` before the collector shows its slot.
        warnings: problems an admin should fix (a node's devices unusable, ...).
        unusable: nodes whose slots are drained or closed (:data:`CLOSED_STATES`), with why.
        left_out: nodes not planned this cycle: the unusable ones, and those whose slot ads
            could not be read (each named in ``warnings``).
        facts: each node's ``CoshareNodeFacts`` text, as published.
    """

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    global_ids: frozenset[str] = frozenset()
    node_of_machine: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    unusable: tuple[Unusable, ...] = ()
    left_out: frozenset[str] = frozenset()
    facts: Mapping[str, str] = field(default_factory=dict)


def _device_id(raw: object) -> str:
    """One of ``CoshareNodeDeviceIds``: an id (integers as written) without a comma, since
    placements join device ids with commas, that the writer can write
    (:func:`condor_addon.names.device_id_problem`).

    Raises:
        BadValue: anything else.
    """
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    dev_id = checked_id(A.DEVICE_IDS, raw)
    if "," in dev_id:
        raise BadValue(A.DEVICE_IDS, raw, "an id without a comma", "holds a comma")
    problem = device_id_problem(dev_id)
    if problem is not None:  # the writer would refuse every placement on it
        raise BadValue(A.DEVICE_IDS, raw, UNWRITABLE_DEVICE, problem)
    return dev_id


def _device_number(name: str, values: list[object], i: int, maximum: int) -> int:
    """A device's memory or threads (a capacity: rounded down); 0 when not advertised (then
    its model's ``device_kinds`` entry gives it)."""
    raw = values[i] if i < len(values) else None
    return 0 if raw is None else int(bounded(name, raw, maximum))


def _devices(
    name: str, ad: Values, kinds: Mapping[str, tuple[str, DeviceKind]], warnings: list[str]
) -> tuple[Device, ...]:
    """The devices one slot ad advertises; an unusable one is ignored with a warning naming
    the node, the device and the field.

    Raises:
        BadValue: more than :data:`~coshare.ledger.bounds.MAX_DEVICES` devices.
    """
    ids = _list(ad.get(A.DEVICE_IDS))
    if len(ids) > MAX_DEVICES:
        raise BadValue(A.DEVICE_IDS, f"{len(ids)} devices", f"at most {MAX_DEVICES} devices")
    memory = _list(ad.get(A.DEVICE_MEMORY))
    threads = _list(ad.get(A.DEVICE_THREADS))
    models = _list(ad.get(A.DEVICE_MODELS))
    out: list[Device] = []
    for i, raw_id in enumerate(ids):
        where = f"node {name} device {shorten_text(str(raw_id))}"
        try:
            dev_id = _device_id(raw_id)
            model = models[i] if i < len(models) and models[i] is not None else ""
            problem = (
                text_problem(model, MAX_TEXT_CHARS) if isinstance(model, str) else "is not a string"
            )
            if problem is not None:
                raise BadValue(A.DEVICE_MODELS, model, "a model name", problem)
            mem_mib = _device_number(A.DEVICE_MEMORY, memory, i, MAX_DEVICE_MEMORY_MIB)
            hw_threads = _device_number(A.DEVICE_THREADS, threads, i, MAX_DEVICE_THREADS)
        except BadValue as exc:
            warnings.append(f"{where}: {exc}; device ignored")
            continue
        assert isinstance(model, str)
        found = find_kind(kinds, model)
        kind = found[1] if found else None
        mem_mib = mem_mib or (kind.memory_mib if kind else 0)
        hw_threads = hw_threads or (kind.threads if kind else 0)
        if any(d.id == dev_id for d in out):
            warnings.append(f"{where}: repeated device id; device ignored")
        elif mem_mib <= 0 or hw_threads <= 0:
            missing = "memory" if mem_mib <= 0 else "hardware threads"
            warnings.append(
                f"{where}: {missing} unknown; add its model {model!r} to device_kinds in the "
                "coshare config (or pass --gpu-threads to coshare-devices); device ignored"
            )
        else:
            out.append(Device(id=dev_id, memory_mib=mem_mib, threads=hw_threads, model=model))
    return tuple(out)


def _first(ad: Values, *names: str) -> tuple[str, object]:
    """The first of ``names`` the ad has (a slot's total, else its current size), with its
    name for messages; ``(names[0], 0)`` when it has none."""
    for name in names:
        if ad.get(name) is not None:
            return name, ad[name]
    return names[0], 0


@dataclass(frozen=True)
class _NodeRead:
    """One node's slot ads, read."""

    node: Node
    claimed: tuple[Values, ...]
    closed: Unusable | None


def _read_node(
    name: str,
    ads: Sequence[Values],
    kinds: Mapping[str, tuple[str, DeviceKind]],
    warnings: list[str],
) -> _NodeRead:
    """Capacity, devices, claims and state of one node from its slot ads. Capacities round
    down, so a node is never promised more than it has. A lend slot
    (``CoshareLendSlot``) adds no capacity and no state; its claims are read as any other.

    Raises:
        BadValue: a total out of :mod:`coshare.ledger.bounds` (the node is left out).
    """
    cpu_milli = memory_mib = 0
    devices: tuple[Device, ...] | None = None
    claimed: list[Values] = []
    states: list[str] = []
    for ad in ads:
        kind = _text(ad.get("SlotType")) or "Static"
        if kind != "Dynamic" and ad.get(A.LEND_SLOT) is not True:
            # A lend slot's cores and memory are not the node's: what runs there borrows
            # a running GPU job's cores (collocate), counted against that job.
            cpus_name, cpus = _first(ad, "TotalSlotCpus", "Cpus")
            memory_name, memory = _first(ad, "TotalSlotMemory", "Memory")
            cpu_milli += capacity_cores_to_milli(bounded(cpus_name, cpus, MAX_CORES))
            memory_mib += int(bounded(memory_name, memory, MAX_MEMORY_MIB))
            states.append(_text(ad.get("State")) or "")
        if devices is None and ad.get(A.DEVICE_IDS) is not None:
            devices = _devices(name, ad, kinds, warnings)
        if kind != "Partitionable" and ad.get("State") == "Claimed":
            claimed.append(ad)
    if not states:
        raise BadValue(
            "SlotType",
            "Dynamic only",
            "a Partitionable or Static slot",
            "shows no slot that holds the node's resources",
        )
    if cpu_milli == 0:
        raise BadValue("TotalSlotCpus", 0, "at least a thousandth of a core on one node")
    if cpu_milli > MAX_CPU_MILLI or memory_mib > MAX_MEMORY_MIB:
        total = f"{cpu_milli // MILLI} cores, {memory_mib} MiB"
        raise BadValue(
            "TotalSlotCpus+TotalSlotMemory",
            total,
            f"at most {MAX_CORES} cores and {MAX_MEMORY_MIB} MiB on one node",
            "summed over its slots is too much",
        )
    closed = None
    if states and all(state in CLOSED_STATES for state in states):
        first = next(ad for ad in ads if (_text(ad.get("State")) or "") in CLOSED_STATES)
        activity = _text(first.get("Activity"))
        reason = _text(first.get("DrainReason")) or ""
        closed = Unusable(
            name,
            "/".join(filter(None, (states[0], activity))),
            shorten_text(reason) if reason else "",
        )
    return _NodeRead(Node(name, cpu_milli, memory_mib, devices or ()), tuple(claimed), closed)


def _claim(name: str, ad: Values, known: Mapping[str, Device], warnings: list[str]) -> RunningJob:
    """A claimed slot as a running job: its cores and memory are a demand (rounded up). A
    coshare job's claim on a lend slot borrows the cores of the GPU job its
    ``CoshareHarvestFrom`` names (``harvest_from``, that job's GlobalJobId until
    :func:`build_snapshot` names this schedd's jobs by ``cluster.proc``).

    Raises:
        BadValue: its size or ids out of bounds (the node is left out).
    """
    global_id = ad.get("GlobalJobId")
    job_id = (
        checked_id("GlobalJobId", global_id)
        if global_id is not None
        else checked_id("Name", ad.get("Name"))
    )
    cpu_milli = cores_to_milli(bounded("Cpus", ad.get("Cpus", 0), MAX_CORES))
    memory_mib = math.ceil(bounded("Memory", ad.get("Memory", 0), MAX_MEMORY_MIB))
    used: tuple[str, ...] = ()
    demand = (0, 0)
    if ad.get(A.MANAGED) is True:
        placed = ad.get(A.PLACED_DEVICES)
        gang = _gang_parts(ad.get(A.PLACED_NODES), ad.get(A.PLACED_NODE_DEVICES))
        if gang:  # a parallel job's slot: the devices it was given on this node
            placed = next((",".join(d) for n, d in gang if n == name), None)
        used = tuple(
            d for d in split_ids(placed if isinstance(placed, str) else None) if d in known
        )
        declared = running_demand(job_id, ad, known.values())
        if declared is None and used:
            # Unreadable declaration on a running job: count whole devices (never under).
            declared = whole_devices([known[d] for d in used])
            warnings.append(
                f"job {job_id} on {name}: device demand unreadable; "
                "counted as using its whole devices"
            )
        demand = declared or (0, 0)
    harvest_from = None
    lender = ad.get(A.HARVEST_FROM)
    if ad.get(A.MANAGED) is True and ad.get(A.LEND_SLOT) is True and lender is not None:
        # A borrower (collocate): its cores are the GPU job's, by its GlobalJobId.
        harvest_from = checked_id(A.HARVEST_FROM, lender)
    return RunningJob(
        id=job_id,
        node=name,
        devices=used,
        device_memory_mib=demand[0],
        device_threads=demand[1],
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        state="running",
        harvest_from=harvest_from,
    )


def parse_slots(slots: Iterable[Values], kinds: Mapping[str, DeviceKind]) -> ClusterView:
    """Read the collector's slot ads into nodes and the resources their claims hold.

    Every value is checked against :mod:`coshare.ledger.bounds` and :mod:`coshare.ledger.ids`. A
    slot whose
    ``CoshareNodeName`` cannot be a node name is ignored with a warning; a node whose slot ads
    hold a value out of bounds is left out with a warning naming it and the field, and the
    other nodes are read as usual (:func:`coshare.ledger.book.read_node`). Nodes whose slots are
    all drained or closed take nothing and are listed in ``unusable``; so are nodes whose name
    the writer cannot write (:func:`condor_addon.names.node_name_problem`), with a warning.

    Args:
        slots: one mapping per slot ad (see :data:`~condor_addon.attributes.SLOT_PROJECTION`).
        kinds: device limits by model, for devices that advertise no memory or threads.

    Raises:
        ConfigError: two device kinds with the same name (see
        :func:`coshare.ledger.book.kind_index`).
    """
    index = kind_index(kinds)
    warnings: list[str] = []
    ads_of: dict[str, list[Values]] = {}
    node_of_machine: dict[str, str] = {}
    facts: dict[str, str] = {}
    unwritable: dict[str, str] = {}
    for ad in slots:
        raw = ad.get(A.NODE_NAME)
        if raw is None:
            continue  # not a coshare node
        slot = _text(ad.get("Name")) or "?"
        try:
            name = checked_id(A.NODE_NAME, raw)
        except BadValue as exc:
            warnings.append(f"slot {shorten_text(slot)}: {exc}; slot ignored")
            continue
        node_of_machine[machine_of(slot)] = name
        problem = node_name_problem(name)
        if problem is not None:
            # The writer refuses such a name in every placement (the same rule): planning
            # jobs onto it would fail every write of every cycle while good nodes sit free.
            unwritable.setdefault(name, problem)
            continue
        ads_of.setdefault(name, []).append(ad)
        text = ad.get(A.NODE_FACTS)
        if isinstance(text, str) and name not in facts:
            facts[name] = text  # checked and bounded by coshare.ledger.facts, as Slurm's

    nodes: list[Node] = []
    running: list[RunningJob] = []
    unusable: list[Unusable] = []
    left_out: set[str] = set()
    global_ids: set[str] = set()
    for name, problem in sorted(unwritable.items()):
        unusable.append(unwritable_node(name, problem, UNWRITABLE_NAME, warnings))
        left_out.add(name)
    for name in sorted(ads_of):

        def read(name: str = name) -> tuple[_NodeRead, list[RunningJob]]:
            found = _read_node(name, ads_of[name], index, warnings)
            known = {d.id: d for d in found.node.devices}
            return found, [_claim(name, ad, known, warnings) for ad in found.claimed]

        result = read_node(name, read, warnings)
        if result is None:
            left_out.add(name)
        elif result[0].closed is not None:
            unusable.append(result[0].closed)
            left_out.add(name)
        else:
            nodes.append(result[0].node)
            running.extend(result[1])
            global_ids.update(
                r.id
                for r, ad in zip(result[1], result[0].claimed, strict=True)
                if ad.get("GlobalJobId") is not None
            )
    return ClusterView(
        tuple(nodes),
        tuple(running),
        frozenset(global_ids),
        node_of_machine,
        tuple(warnings),
        tuple(unusable),
        frozenset(left_out),
        {n: t for n, t in facts.items() if n not in left_out},
    )


@dataclass(frozen=True)
class QueueJob:
    """One coshare-managed job as the schedd listed it (values as read, nothing converted
    that a user could make fail: the numbers a user sets are checked when the job is read
    for the ledger, so a bad one refuses that job only).

    Attributes:
        id: ``cluster.proc``.
        global_id: its GlobalJobId (joins it to a claimed slot).
        status: HTCondor's JobStatus code.
        annotations: the user's coshare keys and their raw values.
        placed_node: ``CosharePlacedNode``, or ``None``.
        placed_devices: ``CosharePlacedDevices`` as written (``"0,1"``), or ``None``.
        placed_at: ``CosharePlacedAt`` (epoch seconds), or ``None`` (also when out of
            bounds: the placement then counts as expired).
        request_cpus: ``RequestCpus`` as evaluated (cores of the slot: the job's total).
        request_memory: ``RequestMemory`` as evaluated (MiB of the slot: the job's total).
        priority: ``JobPrio`` as evaluated.
        submit_time_s: ``QDate`` as evaluated.
        remote_host: the slot it runs in, while it runs.
        wait_reason: ``CoshareWaitReason``: why coshare last said it waits, or ``None``.
        trial: ``CoshareTrial``: its trial co-run's record (:mod:`coshare.ledger.trials`), or
        ``None``.
        start_time_s: ``JobCurrentStartDate``: when it last started running, or ``None``.
        universe: ``JobUniverse`` as evaluated (:data:`~condor_addon.attributes.PARALLEL_UNIVERSE`:
            a gang).
        min_hosts: ``MinHosts`` (``machine_count``) as evaluated.
        max_hosts: ``MaxHosts`` as evaluated.
        placed_parts: a gang's ``CosharePlacedNodes`` with its ``CosharePlacedNodeDevices``,
            pair by pair; empty when absent or unreadable (then it is not a whole placement).
        harvest_from: ``CoshareHarvestFrom``: the GPU job whose idle cores it was placed on
            (its GlobalJobId as written; :func:`local_lenders` names this schedd's jobs by
            ``cluster.proc``), or ``None``.
        lender: ``CoshareLender``: placed as a GPU job whose idle cores may be lent.
        accounting_group: ``AccountingGroup`` as evaluated (its submitter, with ``owner``).
        owner: ``Owner`` as evaluated.
        concurrency_limits: ``ConcurrencyLimits`` as evaluated (checked by :func:`queued`).
    """

    id: str
    global_id: str = ""
    status: int = A.IDLE
    universe: object = None
    min_hosts: object = None
    max_hosts: object = None
    placed_parts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    annotations: Mapping[str, object] = field(default_factory=dict)
    placed_node: str | None = None
    placed_devices: str | None = None
    placed_at: float | None = None
    request_cpus: object = None
    request_memory: object = None
    priority: object = 0
    submit_time_s: object = 0.0
    remote_host: str | None = None
    wait_reason: str | None = None
    trial: str | None = None
    start_time_s: float | None = None
    harvest_from: str | None = None
    lender: bool = False
    accounting_group: object = None
    owner: object = None
    concurrency_limits: object = None

    @property
    def placed(self) -> Placed | None:
        """The placement it carries, for the ledger (``None`` without a node)."""
        if self.placed_node is None:
            return None
        # CosharePlacedAt is written first; a placement without it counts as expired.
        at_s = self.placed_at if self.placed_at is not None else 0.0
        if self.is_parallel:
            # A gang's gate is CosharePlacedNode; its nodes are the list written before it.
            # A list that does not start at that node is no whole placement (the ledger
            # finds it gone and the gate is closed).
            pairs = (
                self.placed_parts
                if self.placed_parts and self.placed_parts[0][0] == self.placed_node
                else ((self.placed_node, ()),) * 2
            )
            share = self.processes_per_machine
            parts = tuple(Part(node, devices, share) for node, devices in pairs)
            return Placed(pairs[0][0], pairs[0][1], at_s, parts=parts)
        return Placed(
            self.placed_node, split_ids(self.placed_devices), at_s, harvest_from=self.harvest_from
        )

    @property
    def processes_per_machine(self) -> int:
        """A parallel job's processes on each machine: ``CoshareProcesses`` over
        ``MinHosts`` (one when unset); 0 when they do not divide (such a job is refused)."""
        machines = self.min_hosts
        if (
            isinstance(machines, bool)
            or not isinstance(machines, (int, float))
            or machines < 1
            or machines != int(machines)
        ):
            return 0
        raw = next(
            (v for k, v in self.annotations.items() if squash(k) == squash("CoshareProcesses")),
            None,
        )
        total = _whole(raw) if raw is not None else int(machines)
        return total // int(machines) if total and total % int(machines) == 0 else 0

    @property
    def is_parallel(self) -> bool:
        """Whether it is a parallel-universe job (a gang of ``machine_count`` machines)."""
        return self.universe == A.PARALLEL_UNIVERSE

    @property
    def cpu_milli(self) -> int:
        """``RequestCpus`` in thousandths of a core, rounded up (one core when unset or 0).

        Raises:
            BadValue: not a number of cores coshare accepts (``1e308``, NaN, text).
        """
        if self.request_cpus is None:
            return MILLI
        cores = bounded("RequestCpus", self.request_cpus, MAX_CORES)
        return cores_to_milli(cores) if cores > 0 else MILLI

    @property
    def memory_mib(self) -> int:
        """``RequestMemory`` in MiB, rounded up (0 when unset).

        Raises:
            BadValue: not a number of MiB coshare accepts.
        """
        if self.request_memory is None:
            return 0
        return math.ceil(bounded("RequestMemory", self.request_memory, MAX_MEMORY_MIB))


def read_job(ad: Values) -> QueueJob | None:
    """One job ad's values as a :class:`QueueJob`; ``None`` when it lacks its id (the
    schedd always sets ``ClusterId`` and ``ProcId``)."""
    cluster, proc = _number(ad.get("ClusterId")), _number(ad.get("ProcId"))
    if cluster is None or proc is None or not (0 <= cluster < 2**31 and 0 <= proc < 2**31):
        return None
    wanted = {a.lower() for a in A.ANNOTATIONS}
    annotations = {k: v for k, v in ad.items() if k.lower() in wanted and v is not None}
    status = _number(ad.get("JobStatus"))
    universe = _number(ad.get("JobUniverse"))
    devices = ad.get(A.PLACED_DEVICES)
    placed_at = _number(ad.get(A.PLACED_AT))
    start = _number(ad.get("JobCurrentStartDate"))
    return QueueJob(
        id=f"{int(cluster)}.{int(proc)}",
        global_id=_text(ad.get("GlobalJobId")) or "",
        status=int(status) if status is not None and abs(status) < 2**31 else 0,
        annotations=annotations,
        placed_node=_text(ad.get(A.PLACED_NODE)),
        placed_devices=devices if isinstance(devices, str) else None,
        placed_at=placed_at if placed_at is not None and abs(placed_at) <= MAX_TIME_S else None,
        request_cpus=ad.get("RequestCpus"),
        request_memory=ad.get("RequestMemory"),
        priority=_or(ad.get("JobPrio"), 0),
        submit_time_s=_or(ad.get("QDate"), 0.0),
        remote_host=_text(ad.get("RemoteHost")),
        wait_reason=_text(ad.get(A.WAIT_REASON)),
        trial=_text(ad.get(A.TRIAL)),
        start_time_s=start if start is not None and 0 < start <= MAX_TIME_S else None,
        universe=int(universe) if universe is not None and abs(universe) < 2**31 else None,
        min_hosts=ad.get("MinHosts"),
        max_hosts=ad.get("MaxHosts"),
        placed_parts=_gang_parts(ad.get(A.PLACED_NODES), ad.get(A.PLACED_NODE_DEVICES)),
        harvest_from=_text(ad.get(A.HARVEST_FROM)),
        lender=ad.get(A.LENDER) is True,
        accounting_group=ad.get("AccountingGroup"),
        owner=ad.get("Owner"),
        concurrency_limits=ad.get("ConcurrencyLimits"),
    )


def local_lenders(jobs: Iterable[QueueJob]) -> dict[str, QueueJob]:
    """The jobs by id, each borrower's ``harvest_from`` named as the snapshot names its GPU
    job: ``cluster.proc`` when it is one of ``jobs`` (this schedd's), else the GlobalJobId as
    written (another schedd's job, as the collector's claims name it)."""
    listed = list(jobs)
    local = {q.global_id: q.id for q in listed if q.global_id}
    return {
        q.id: replace(q, harvest_from=local.get(q.harvest_from, q.harvest_from))
        if q.harvest_from is not None
        else q
        for q in listed
    }


def _whole(value: object) -> int | None:
    """A whole number as a user may write it (``8``, ``"8"``), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 20:
        return int(value)
    return None


def _gang_parts(nodes: object, devices: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``CosharePlacedNodes`` and ``CosharePlacedNodeDevices`` paired; empty unless both are
    lists of strings of the same length (a half-written or edited placement is no placement)."""
    if (
        not isinstance(nodes, list)
        or not isinstance(devices, list)
        or not nodes
        or len(nodes) != len(devices)
    ):
        return ()
    if not all(isinstance(v, str) for v in (*nodes, *devices)):
        return ()
    return tuple((str(n), split_ids(str(d))) for n, d in zip(nodes, devices, strict=True))


#: Coshare keys a parallel-universe job may not set: HTCondor's ``machine_count`` says them.
_NODE_KEYS = ("CoshareNodes", "CoshareNodesMax")


def _machine_count(job: QueueJob) -> int:
    """A parallel job's ``machine_count`` (``MinHosts``, equal to ``MaxHosts``).

    Raises:
        AnnotationError: it is not a whole number of machines coshare can place, or the job
            also sets ``CoshareNodes``/``CoshareNodesMax``.
    """

    def refuse(name: str, value: object, allowed: str, why: str) -> AnnotationError:
        return AnnotationError(job.id, [FieldProblem(name, shown(str(value)), allowed, why)])

    count = bounded("MinHosts", job.min_hosts, MAX_JOB_NODES)
    if count != int(count) or count < 1:
        raise refuse(
            "MinHosts",
            job.min_hosts,
            f"a whole number 1..{MAX_JOB_NODES}",
            "is not a whole number of machines",
        )
    if job.max_hosts is not None and job.max_hosts != job.min_hosts:
        raise refuse(
            "MaxHosts",
            job.max_hosts,
            f"MinHosts ({job.min_hosts}), as machine_count sets both",
            "asks for a range of machines, which coshare does not place on HTCondor",
        )
    for key in _NODE_KEYS:
        if squash(key) in {squash(k) for k in job.annotations}:
            raise refuse(
                key,
                "set",
                "unset on a parallel-universe job (machine_count gives its nodes)",
                "repeats machine_count",
            )
    processes = next(
        (v for k, v in job.annotations.items() if squash(k) == squash("CoshareProcesses")), None
    )
    number = _whole(processes)
    if number is not None and number % int(count) != 0:  # other values: parse_job refuses
        raise refuse(
            "CoshareProcesses",
            processes,
            f"a multiple of machine_count "
            f"({int(count)}): every machine's slot is RequestCpus and RequestMemory",
            "does not split evenly over the machines",
        )
    return int(count)


def doubling_problem(job: QueueJob, nodes: Sequence[Node]) -> FieldProblem | None:
    """Why HTCondor's dedicated scheduler could start two of a parallel job's processes on
    one node (a node with room for two of its slots), or ``None`` when no node has that room.

    The dedicated scheduler matches every ``machine_count`` slot against one Requirements,
    so nothing in unmodified HTCondor keeps it from claiming two slots of one planned node
    (docs/deploy-htcondor.md); a slot larger than half of every node cannot be
    doubled. ``RequestCpus`` of a whole core is compared with whole cores."""
    cpu, memory = job.cpu_milli, job.memory_mib
    roomy = [n for n in nodes if 2 * cpu <= n.cpu_milli and 2 * memory <= n.memory_mib]
    if not roomy:
        return None
    widest = max(nodes, key=lambda n: n.cpu_milli)
    largest = max(nodes, key=lambda n: n.memory_mib)
    node = roomy[0]
    return FieldProblem(
        "RequestCpus",
        f"{cpu / MILLI:g} (RequestMemory {memory} MiB)",
        f"more than half of every node's cores (> {widest.cpu_milli / MILLI / 2:g}, "
        f"{shorten_text(widest.name)} has {widest.cpu_milli / MILLI:g}) or memory "
        f"(> {largest.memory_mib / 2:g} MiB), or condor.parallel_may_double: true",
        f"two of its slots fit on {shorten_text(node.name)} ({node.cpu_milli / MILLI:g} "
        f"cores, {node.memory_mib} MiB): HTCondor may run two of its processes there",
    )


def queued(job: QueueJob, nodes: Sequence[Node] | None = None) -> Queued:
    """An idle managed job as the ledger's fact (its gate is open while a node is placed).

    A parallel-universe job is a gang of ``machine_count`` nodes (``CoshareNodes``), one
    process per machine unless it sets ``CoshareProcesses``; its ``RequestCpus`` and
    ``RequestMemory`` are each machine's slot, so the job's total is ``machine_count`` times
    that (the ledger shares it per process). A job of another universe that asks for several
    nodes is refused: HTCondor runs it on one machine.

    With ``nodes`` (the pool's, unless ``condor.parallel_may_double``), a parallel job whose
    slot fits twice on one of them is refused (:func:`doubling_problem`).

    Raises:
        BadValue: a host request, ``JobPrio`` or ``QDate`` out of :mod:`coshare.ledger.bounds`,
            or a ``ConcurrencyLimits`` that does not read (:mod:`condor_addon.concurrency`).
        AnnotationError: a parallel job's machine count unusable, a parallel job whose slot
            fits twice on a node, or gang keys on a job of another universe.
    """
    annotations = job.annotations
    parse_request(job.concurrency_limits)  # what it takes of the pool's limits must read
    machines = 1
    if job.is_parallel:
        machines = _machine_count(job)
        annotations = {**annotations, "CoshareNodes": machines}
        problem = doubling_problem(job, nodes) if nodes else None
        if problem is not None and job.placed_node is None:
            raise AnnotationError(job.id, [problem])
    else:
        for key in _NODE_KEYS:
            value = next((v for k, v in annotations.items() if squash(k) == squash(key)), None)
            if value is not None and value != 1:
                raise AnnotationError(
                    job.id,
                    [
                        FieldProblem(
                            key,
                            shown(str(value)),
                            "1 on a vanilla-universe job (HTCondor runs it on one "
                            "machine; submit it with universe = parallel and machine_count = N to "
                            "span nodes)",
                            "asks for several nodes",
                        )
                    ],
                )
    return Queued(
        id=job.id,
        annotations=annotations,
        cpu_milli=job.cpu_milli * machines,
        memory_mib=job.memory_mib * machines,
        priority=int(bounded("JobPrio", job.priority, MAX_PRIORITY, minimum=-MAX_PRIORITY)),
        submit_time_s=bounded("QDate", job.submit_time_s, MAX_TIME_S, minimum=-MAX_TIME_S),
        placed=job.placed,
        gate_open=job.placed_node is not None,
    )


@dataclass(frozen=True)
class QueueView:
    """What the schedd's queue adds to the collector's view.

    Attributes:
        book: the idle managed jobs, settled by the ledger (pending, placed, refused, the
            open gates to close).
        running: running jobs the collector does not show yet (from their queue entry).
        warnings: problems an admin should know about.
    """

    book: Book = field(default_factory=Book)
    running: tuple[RunningJob, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def rejected(self) -> tuple[Rejected, ...]:
        """The refused jobs."""
        return self.book.rejected


def parse_queue(
    jobs: Iterable[QueueJob],
    cluster: ClusterView,
    *,
    now_s: float,
    replan_after_s: float,
    parallel_may_double: bool = False,
) -> QueueView:
    """Sort the managed jobs of a queue: idle ones through the ledger; running ones the
    collector does not show yet counted from their queue entry.

    Args:
        jobs: the managed jobs (``CoshareManaged``) of the schedd.
        cluster: the collector's view (nodes, and the jobs it already shows running).
        now_s: the current time, epoch seconds (the clock of ``CosharePlacedAt``).
        replan_after_s: a placed job that has not started after this long is pending again.
        parallel_may_double: ``condor.parallel_may_double``; ``False``: a parallel job whose
            slot fits twice on a node is refused (:func:`doubling_problem`).
    """
    nodes = {n.name: n for n in cluster.nodes}
    doubling_nodes = () if parallel_may_double else cluster.nodes
    idle: list[Queued | Rejected] = []
    running: list[RunningJob] = []
    warnings: list[str] = []
    for q in jobs:
        if q.status == A.IDLE:
            idle.append(
                refuse_on_error(
                    q.id,
                    lambda q=q: queued(q, doubling_nodes),  # type: ignore[misc]
                    q.annotations,
                )
            )
            continue
        if q.status not in HOLDS_SLOT:
            continue  # held, removed, completed: holds nothing, waits for a person
        if q.is_parallel and q.placed_parts:
            running.extend(_gang_running(q, cluster, nodes, warnings))
            warnings.extend(_doubled(q, cluster))
            continue
        if q.global_id and q.global_id in cluster.global_ids:
            continue  # the collector's claimed slot already counts it
        node = cluster.node_of_machine.get(machine_of(q.remote_host or "")) or q.placed_node
        if node in cluster.left_out:
            continue  # nothing is planned there this cycle; its warning says why
        if node is None or node not in nodes:
            warnings.append(_not_managed(q, q.remote_host or node or "?"))
            continue
        demand = running_demand(q.id, q.annotations, nodes[node].devices)
        started = _started(q, {node: split_ids(q.placed_devices)}, demand)
        running.extend(holdings(started, nodes, warnings))
    book = settle(idle, cluster.nodes, now_s=now_s, replan_after_s=replan_after_s, gangs=True)
    return QueueView(book, tuple(running), tuple(warnings) + book.notes)


def _doubled(q: QueueJob, cluster: ClusterView) -> list[str]:
    """A note for each node where the dedicated scheduler started more of a parallel job's
    processes than coshare planned there (one a node): unmodified HTCondor cannot prevent it
    (docs/deploy-htcondor.md)."""
    slots: dict[str, int] = {}
    for r in cluster.running:
        if r.id == q.global_id:
            slots[r.node] = slots.get(r.node, 0) + 1
    planned = {n for n, _ in q.placed_parts}
    return [
        f"job {q.id}: the dedicated scheduler started {count} of its processes on "
        f"{shorten_text(node)}, where coshare planned {1 if node in planned else 0}"
        for node, count in sorted(slots.items())
        if count > (1 if node in planned else 0)
    ]


def _gang_running(
    q: QueueJob, cluster: ClusterView, nodes: Mapping[str, Node], warnings: list[str]
) -> list[RunningJob]:
    """A running parallel job's parts the collector does not show yet, from its placement:
    on each planned node its slot (``RequestCpus``, ``RequestMemory``) and that node's
    devices. Its nodes start one by one, so the collector may show some parts already."""
    shown = {r.node for r in cluster.running if r.id == q.global_id}
    demand = running_demand(q.id, q.annotations, (d for n in cluster.nodes for d in n.devices))
    parts: dict[str, tuple[str, ...]] = {}
    for node, placed in q.placed_parts:
        if node in shown or node in cluster.left_out:
            continue
        if node not in nodes:
            warnings.append(_not_managed(q, node))
            continue
        parts[node] = placed
    return holdings(_started(q, parts, demand), nodes, warnings)


def _not_managed(q: QueueJob, where: str) -> str:
    return f"job {q.id} runs on {shorten_text(where)}, which is not a coshare node; not counted"


def _started(
    q: QueueJob, parts: Mapping[str, tuple[str, ...]], demand: tuple[int, int] | None
) -> Started:
    """A running job's record (or its parts the collector does not show yet): its host
    request on each node with its placed devices and declared demand
    (:func:`coshare.ledger.records.holdings`)."""
    host = refuse_on_error(q.id, lambda: (q.cpu_milli, q.memory_mib))
    if isinstance(host, Rejected):
        where = f"{host.reason}; it runs on {', '.join(parts)}"
        return Started(q.id, parts, problem=where)
    return Started(
        q.id,
        parts,
        host[0],
        host[1],
        demand=demand,
        start_time_s=q.placed_at,
        harvest_from=q.harvest_from,
    )


def foreign_planned(
    jobs: Iterable[QueueJob], cluster: ClusterView
) -> tuple[tuple[RunningJob, ...], tuple[str, ...]]:
    """What the idle jobs of *other* schedds hold on this pool's nodes (several planners, one
    per schedd; :func:`coshare.ledger.records.foreign_holdings`), under their GlobalJobId
    (their ``cluster.proc`` is another schedd's). Notes for those unreadable."""
    held_parts: list[RunningJob] = []
    notes: list[str] = []
    for q in jobs:
        if q.status != A.IDLE or q.placed_node is None or q.placed is None:
            continue
        record = refuse_on_error(q.id, lambda q=q: queued(q))  # type: ignore[misc]
        who = f"another schedd's job {q.global_id or q.id}"
        got = foreign_holdings(record, cluster.nodes, who, notes)
        held_parts += [replace(r, id=q.global_id or r.id) for r in got]
    return tuple(held_parts), tuple(notes)


def claim_key(job_id: str, schedd: str | None) -> str:
    """A job's key in the planners' engine, the same whichever schedd's planner
    reads it: ``schedd#cluster.proc``. A GlobalJobId (``schedd#cluster.proc#qdate``: other
    schedds' jobs) loses its submission time; this schedd's ``cluster.proc`` gets its name
    (``None``: unnamed, only one planner, the id itself)."""
    if "#" in job_id:
        head = job_id.rpartition("#")[0]
        return head if "#" in head else job_id
    return f"{schedd}#{job_id}" if schedd else job_id


def build_snapshot(
    cluster: ClusterView, queue: QueueView, jobs: Iterable[QueueJob], now_s: float
) -> Snapshot:
    """The snapshot a policy plans: the collector's nodes and claims, the queue's plans.

    Claimed slots of this schedd's jobs are renamed from GlobalJobId to ``cluster.proc``,
    and so are the GPU jobs that borrowers' claims name.
    """
    listed = list(jobs)
    id_of = {q.global_id: q.id for q in listed if q.global_id}
    by_id = {q.id: q for q in listed}
    running = [
        _declaring(
            replace(
                r,
                id=id_of.get(r.id, r.id),
                harvest_from=id_of.get(r.harvest_from, r.harvest_from)
                if r.harvest_from is not None
                else None,
            ),
            by_id,
        )
        for r in cluster.running
    ]
    return Snapshot(
        nodes=cluster.nodes,
        running=tuple(running)
        + tuple(_declaring(r, by_id) for r in queue.running)
        + queue.book.planned,
        pending=queue.book.pending,
        now_s=now_s,
    )


def _declaring(running: RunningJob, jobs: Mapping[str, QueueJob]) -> RunningJob:
    """A running job of this schedd with its declared program and bandwidth and its start
    (the ``membw`` policy's estimate of its use), and its requested time and copy
    bandwidth (``CoshareWalltime``, ``CoshareCopyBandwidth``: ``collocate``, one rule for both
    schedulers in :func:`coshare.ledger.book.declared_terms`; HTCondor has no time limit of its
    own). A declaration that does not read leaves them unknown: the job then counts as
    bandwidth-bound and lends no cores, the safe side."""
    q = jobs.get(running.id)
    if q is None:
        return running
    terms = declared_terms(q.id, q.annotations, None)
    return replace(
        running,
        walltime_s=terms.walltime_s,
        copy_bw_mbps=terms.copy_bw_mbps,
        program=terms.program,
        membw_gbps=terms.membw_gbps,
        start_time_s=q.start_time_s or running.start_time_s,
    )


def current(now: QueueJob, then: QueueJob | None) -> Current:
    """A job as the Editor re-read it, for :func:`coshare.ledger.book.decide`.

    Args:
        now: the job as the schedd lists it now.
        then: the job as the Source read it (``None``: not compared).
    """
    changed = None
    if then is not None and _changed(now, then):
        changed = "changed since it was read; planned next cycle"
    return Current(
        id=now.id,
        state=A.job_status_name(now.status),
        pending=now.status == A.IDLE,
        gate_open=now.placed_node is not None,
        placed=now.placed,
        changed=changed,
        may_note=now.status == A.IDLE,
        wait_reason=now.wait_reason,
        started=now.status in HOLDS_SLOT,
    )


def _changed(now: QueueJob, then: QueueJob) -> bool:
    """Whether a job was edited since it was read (annotations or placement)."""
    return (
        {k.lower(): v for k, v in now.annotations.items()}
        != {k.lower(): v for k, v in then.annotations.items()}
        or now.placed_node != then.placed_node
        or now.placed_devices != then.placed_devices
        or now.placed_at != then.placed_at
        or now.placed_parts != then.placed_parts
        or now.harvest_from != then.harvest_from
    )


def node_job_id(global_id: str) -> str:
    """A job's id on its node: its GlobalJobId in id characters, as the job wrapper makes it
    (``tr -c 'A-Za-z0-9._+-' '_' | cut -c1-128``, byte by byte)."""
    raw = global_id.encode("utf-8", "surrogateescape")[:128]
    return "".join(chr(b) if chr(b) in _NODE_ID_CHARS else "_" for b in raw)


_NODE_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-")


def with_node_facts(
    snapshot: Snapshot,
    cluster: ClusterView,
    jobs: Iterable[QueueJob],
    *,
    now_s: float,
    max_age_s: float,
) -> tuple[Snapshot, tuple[str, ...]]:
    """``snapshot`` with the facts the nodes published (:func:`coshare.ledger.facts.with_facts`),
    and the notes about the unusable ones. A running job is found in its node's loads by its
    GlobalJobId in id characters."""
    global_of = {q.id: q.global_id for q in jobs if q.global_id}

    def local_id(job: RunningJob) -> str:
        return node_job_id(global_of.get(job.id, job.id))

    return with_facts(snapshot, cluster.facts, now_s=now_s, max_age_s=max_age_s, local_ids=local_id)
