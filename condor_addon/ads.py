"""Pure parsers: slot ads and job ads (as plain values) into coshare's model.

The reading side (:mod:`condor_addon.client`) evaluates each projected attribute of each ad
into a Python value (``int``, ``float``, ``str``, ``bool``, ``list``, ``None`` for undefined);
everything here works on those values only, so it is tested on ads recorded from a real pool
(``tests/fixtures/condor/<version>/``).

Where the truth lives:

- **Nodes and devices**: the collector's slot ads (``CoshareNodeName`` and the
  ``CoshareNodeDevice*`` lists of coshare-devices). Host cores and memory are the totals of a
  node's partitionable and static slots.
- **What runs where**: the collector's *claimed* slots. Each holds its cores and memory, and a
  coshare job's slot also carries the placement it really started with (``STARTD_JOB_ATTRS``),
  so a job is counted on the device it runs on even if its queue entry says otherwise. Claimed
  slots of unannotated jobs, or of other schedds, hold host resources too.
- **What is planned**: the schedd's queue. An idle managed job with ``CosharePlacedNode`` holds
  its node and devices (state ``planned``) until it starts or until ``replan_after_s`` passes;
  a running job the collector does not show yet is counted from its queue entry.

No I/O, no clock: ``now_s`` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.annotations import ClusterLimits, parse_job
from coshare.config import DeviceKind
from coshare.errors import AnnotationError
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot, cores_to_milli
from coshare.planner import Rejected

from condor_addon import attributes as A

Values = Mapping[str, object]

#: Job states that hold a slot (the job has, or is about to have, a starter).
HOLDS_SLOT = frozenset({A.RUNNING, A.TRANSFERRING_OUTPUT, A.SUSPENDED})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


def split_devices(text: str | None) -> tuple[str, ...]:
    """``"0,1"`` -> ``("0", "1")``; empty or ``None`` -> ``()``."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


def machine_of(slot_name: str) -> str:
    """The startd part of a slot name: ``slot1_2@node2@host`` -> ``node2@host``."""
    return slot_name.split("@", 1)[1] if "@" in slot_name else slot_name


@dataclass(frozen=True)
class ClusterView:
    """What the collector says: the nodes, and what holds resources on them.

    Attributes:
        nodes: managed nodes (those advertising ``CoshareNodeName``), sorted by name.
        running: claimed slots as running jobs; ``id`` is the job's GlobalJobId (or the slot
            name for a claim without a job), renamed to the queue's id by
            :func:`build_snapshot`.
        global_ids: GlobalJobIds of the jobs in claimed slots.
        node_of_machine: startd name (``node2@host``) -> node name, to place a job by its
            ``RemoteHost`` before the collector shows its slot.
        warnings: problems an admin should fix (a node's devices unusable, ...).
    """

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    global_ids: frozenset[str] = frozenset()
    node_of_machine: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _devices(
    name: str, ad: Values, kinds: Mapping[str, DeviceKind], warnings: list[str]
) -> tuple[Device, ...]:
    ids = _list(ad.get(A.DEVICE_IDS))
    memory = _list(ad.get(A.DEVICE_MEMORY))
    threads = _list(ad.get(A.DEVICE_THREADS))
    models = _list(ad.get(A.DEVICE_MODELS))
    out: list[Device] = []
    for i, raw_id in enumerate(ids):
        dev_id = str(raw_id)
        model = str(models[i]) if i < len(models) and models[i] is not None else ""
        kind = kinds.get(model) or kinds.get(model.lower().replace(" ", "-"))
        mem = _number(memory[i]) if i < len(memory) else None
        thr = _number(threads[i]) if i < len(threads) else None
        mem_mib = int(mem) if mem else (kind.memory_mib if kind else 0)
        hw_threads = int(thr) if thr else (kind.threads if kind else 0)
        where = f"node {name!r} device {dev_id!r}"
        if not dev_id or "," in dev_id or any(d.id == dev_id for d in out):
            warnings.append(f"{where}: unusable or repeated device id; device ignored")
        elif mem_mib <= 0 or hw_threads <= 0:
            missing = "memory" if mem_mib <= 0 else "hardware threads"
            warnings.append(
                f"{where}: {missing} unknown; add its model {model!r} to device_kinds in the "
                "coshare config (or pass --gpu-threads to coshare-devices); device ignored"
            )
        else:
            out.append(Device(id=dev_id, memory_mib=mem_mib, threads=hw_threads, model=model))
    return tuple(out)


def _device_demand(job_id: str, ad: Values) -> tuple[int, int] | None:
    """Declared device memory and threads of a job (from its ad or its slot's copy)."""
    keys = {k: ad[k] for k in ("CoshareDeviceMemory", "CoshareDeviceThreads") if ad.get(k)}
    try:
        job = parse_job(job_id, keys)
    except AnnotationError:
        return None
    return job.device_memory_mib, job.device_threads


def parse_slots(slots: Iterable[Values], kinds: Mapping[str, DeviceKind]) -> ClusterView:
    """Read the collector's slot ads into nodes and the resources their claims hold.

    Args:
        slots: one mapping per slot ad (see :data:`~condor_addon.attributes.SLOT_PROJECTION`).
        kinds: device limits by model, for devices that advertise no memory or threads.
    """
    warnings: list[str] = []
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    devices: dict[str, tuple[Device, ...]] = {}
    node_of_machine: dict[str, str] = {}
    claimed: list[tuple[str, Values]] = []
    for ad in slots:
        name = _text(ad.get(A.NODE_NAME))
        slot = _text(ad.get("Name")) or "?"
        if name is None:
            continue  # not a coshare node
        node_of_machine[machine_of(slot)] = name
        kind = _text(ad.get("SlotType")) or "Static"
        if kind != "Dynamic":
            total_cpus = _number(ad.get("TotalSlotCpus")) or _number(ad.get("Cpus")) or 0.0
            total_mem = _number(ad.get("TotalSlotMemory")) or _number(ad.get("Memory")) or 0.0
            cpu[name] = cpu.get(name, 0) + cores_to_milli(total_cpus)
            memory[name] = memory.get(name, 0) + int(total_mem)
        if name not in devices and ad.get(A.DEVICE_IDS) is not None:
            devices[name] = _devices(name, ad, kinds, warnings)
        if kind != "Partitionable" and ad.get("State") == "Claimed":
            claimed.append((name, ad))

    nodes = tuple(
        Node(name=n, cpu_milli=cpu.get(n, 0), memory_mib=memory.get(n, 0),
             devices=devices.get(n, ()))
        for n in sorted(set(cpu) | set(devices))
    )  # fmt: skip
    known = {n.name: {d.id: d for d in n.devices} for n in nodes}
    running: list[RunningJob] = []
    global_ids: set[str] = set()
    for name, ad in claimed:
        slot = _text(ad.get("Name")) or "?"
        global_id = _text(ad.get("GlobalJobId"))
        job_id = global_id or slot
        if global_id:
            global_ids.add(global_id)
        used: tuple[str, ...] = ()
        demand = (0, 0)
        if ad.get(A.MANAGED) is True:
            used = tuple(d for d in split_devices(_text(ad.get(A.PLACED_DEVICES)))
                         if d in known.get(name, {}))  # fmt: skip
            declared = _device_demand(job_id, ad)
            if declared is None and used:
                # Unreadable declaration on a running job: count whole devices (never under).
                first = known[name][used[0]]
                declared = (first.memory_mib, first.threads)
                warnings.append(f"job {job_id} on {name}: device demand unreadable; "
                                "counted as using its whole devices")  # fmt: skip
            demand = declared or (0, 0)
        running.append(
            RunningJob(
                id=job_id, node=name, devices=used, device_memory_mib=demand[0],
                device_threads=demand[1],
                cpu_milli=cores_to_milli(_number(ad.get("Cpus")) or 0.0),
                memory_mib=int(_number(ad.get("Memory")) or 0), state="running",
            )
        )  # fmt: skip
    return ClusterView(nodes, tuple(running), frozenset(global_ids), node_of_machine,
                       tuple(warnings))  # fmt: skip


@dataclass(frozen=True)
class QueueJob:
    """One coshare-managed job as the schedd listed it.

    Attributes:
        id: ``cluster.proc``.
        global_id: its GlobalJobId (joins it to a claimed slot).
        status: HTCondor's JobStatus code.
        annotations: the user's coshare keys and their raw values.
        placed_node: ``CosharePlacedNode``, or ``None``.
        placed_devices: ``CosharePlacedDevices`` as written (``"0,1"``), or ``None``.
        placed_at: ``CosharePlacedAt`` (epoch seconds), or ``None``.
        cpu_milli: ``RequestCpus`` in thousandths of a core.
        memory_mib: ``RequestMemory``.
        priority: ``JobPrio``.
        submit_time_s: ``QDate``.
        remote_host: the slot it runs in, while it runs.
    """

    id: str
    global_id: str = ""
    status: int = A.IDLE
    annotations: Mapping[str, object] = field(default_factory=dict)
    placed_node: str | None = None
    placed_devices: str | None = None
    placed_at: float | None = None
    cpu_milli: int = MILLI
    memory_mib: int = 0
    priority: int = 0
    submit_time_s: float = 0.0
    remote_host: str | None = None

    @property
    def placement(self) -> tuple[str, tuple[str, ...]] | None:
        """``(node, devices)`` when the job is placed (its gate is open), else ``None``."""
        if self.placed_node is None:
            return None
        return self.placed_node, split_devices(self.placed_devices)


def read_job(ad: Values) -> QueueJob | None:
    """One job ad's values as a :class:`QueueJob`; ``None`` when it lacks its id."""
    cluster, proc = _number(ad.get("ClusterId")), _number(ad.get("ProcId"))
    if cluster is None or proc is None:
        return None
    wanted = {a.lower() for a in A.ANNOTATIONS}
    annotations = {
        k: v for k, v in ad.items() if k.lower() in wanted and v is not None
    }
    status = _number(ad.get("JobStatus"))
    devices = ad.get(A.PLACED_DEVICES)
    cpus = _number(ad.get("RequestCpus"))
    request_memory = _number(ad.get("RequestMemory"))
    return QueueJob(
        id=f"{int(cluster)}.{int(proc)}",
        global_id=_text(ad.get("GlobalJobId")) or "",
        status=int(status) if status is not None else 0,
        annotations=annotations,
        placed_node=_text(ad.get(A.PLACED_NODE)),
        placed_devices=devices if isinstance(devices, str) else None,
        placed_at=_number(ad.get(A.PLACED_AT)),
        cpu_milli=cores_to_milli(cpus) if cpus is not None and cpus > 0 else MILLI,
        memory_mib=math.ceil(request_memory) if request_memory and request_memory > 0 else 0,
        priority=int(_number(ad.get("JobPrio")) or 0),
        submit_time_s=_number(ad.get("QDate")) or 0.0,
        remote_host=_text(ad.get("RemoteHost")),
    )  # fmt: skip


@dataclass(frozen=True)
class QueueView:
    """What the schedd's queue adds to the collector's view.

    Attributes:
        pending: annotated idle jobs to plan (never placed, or placed too long ago).
        placed: planned-not-started jobs, and running jobs the collector does not show yet.
        rejected: idle jobs whose annotations are unusable, with the message.
        warnings: problems an admin should know about.
    """

    pending: tuple[Job, ...] = ()
    placed: tuple[RunningJob, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    warnings: tuple[str, ...] = ()


def _fits(node: Node | None, devices: Sequence[str], job: Job) -> bool:
    """Whether a recorded placement is still usable: the node and its devices exist and the
    device count matches what the job needs."""
    if node is None:
        return False
    ids = {d.id for d in node.devices}
    wanted = job.device_count if job.needs_device else 0
    return len(devices) == wanted and len(set(devices)) == wanted and set(devices) <= ids


def parse_queue(
    jobs: Iterable[QueueJob], cluster: ClusterView, *, now_s: float, replan_after_s: float
) -> QueueView:
    """Sort the managed jobs of a queue into pending, planned and rejected.

    Args:
        jobs: the managed jobs (``CoshareManaged``) of the schedd.
        cluster: the collector's view (nodes, and the jobs it already shows running).
        now_s: the current time, epoch seconds (the clock of ``CosharePlacedAt``).
        replan_after_s: a placed job that has not started after this long is pending again.
    """
    nodes = {n.name: n for n in cluster.nodes}
    limits = ClusterLimits.of_nodes(cluster.nodes)
    pending: list[Job] = []
    placed: list[RunningJob] = []
    rejected: list[Rejected] = []
    warnings: list[str] = []
    for q in jobs:
        if q.status in HOLDS_SLOT:
            if q.global_id and q.global_id in cluster.global_ids:
                continue  # the collector's claimed slot already counts it
            node = cluster.node_of_machine.get(machine_of(q.remote_host or "")) or q.placed_node
            if node not in nodes:
                warnings.append(f"job {q.id} runs on {q.remote_host or node!r}, "
                                "which is not a coshare node; not counted")  # fmt: skip
                continue
            demand = _device_demand(q.id, q.annotations) or (0, 0)
            ids = {d.id for d in nodes[node].devices}
            placed.append(RunningJob(
                id=q.id, node=node,
                devices=tuple(d for d in split_devices(q.placed_devices) if d in ids),
                device_memory_mib=demand[0], device_threads=demand[1], cpu_milli=q.cpu_milli,
                memory_mib=q.memory_mib, state="running", start_time_s=q.placed_at,
            ))  # fmt: skip
            continue
        if q.status != A.IDLE:
            continue  # held, removed, completed: holds nothing, waits for a person
        try:
            job = parse_job(
                q.id, q.annotations, limits=limits, cpu_milli=q.cpu_milli,
                memory_mib=q.memory_mib, priority=q.priority, submit_time_s=q.submit_time_s,
            )  # fmt: skip
        except AnnotationError as exc:
            rejected.append(Rejected(q.id, str(exc)))
            continue
        where = q.placement
        fresh = q.placed_at is not None and now_s - q.placed_at < replan_after_s
        if where is not None and fresh and _fits(nodes.get(where[0]), where[1], job):
            placed.append(RunningJob(
                id=q.id, node=where[0], devices=where[1],
                device_memory_mib=job.device_memory_mib if where[1] else 0,
                device_threads=job.device_threads if where[1] else 0,
                cpu_milli=job.total_cpu_milli, memory_mib=job.total_memory_mib,
                state="planned", start_time_s=q.placed_at,
            ))  # fmt: skip
        else:
            pending.append(job)
    return QueueView(tuple(pending), tuple(placed), tuple(rejected), tuple(warnings))


def build_snapshot(
    cluster: ClusterView, queue: QueueView, jobs: Iterable[QueueJob], now_s: float
) -> Snapshot:
    """The snapshot a policy plans: the collector's nodes and claims, the queue's plans.

    Claimed slots of this schedd's jobs are renamed from GlobalJobId to ``cluster.proc``.
    """
    id_of = {q.global_id: q.id for q in jobs if q.global_id}
    running = [replace(r, id=id_of.get(r.id, r.id)) for r in cluster.running]
    return Snapshot(
        nodes=cluster.nodes,
        running=tuple(running) + queue.placed,
        pending=queue.pending,
        now_s=now_s,
    )
