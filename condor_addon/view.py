"""What one read of HTCondor means for coshare: slot ads and job ads into the ledger's facts.

The reading side (:mod:`condor_addon.client`) evaluates each projected attribute of each ad
into a Python value (``int``, ``float``, ``str``, ``bool``, ``list``, ``None`` for undefined);
everything here works on those values only, so it is tested on ads recorded from a real pool
(``tests/fixtures/condor/<version>/``). The rules of a placement's life are the ledger's
(:mod:`coshare.ledger`); this module only translates.

Where the truth lives:

- **Nodes and devices**: the collector's slot ads (``CoshareNodeName`` and the
  ``CoshareNodeDevice*`` lists of coshare-devices). Host cores and memory are the totals of a
  node's partitionable and static slots. A device that advertises no memory or threads takes
  them from ``device_kinds`` by its model (:func:`coshare.ledger.find_kind`).
- **What runs where**: the collector's *claimed* slots. Each holds its cores and memory, and a
  coshare job's slot also carries the placement it really started with (``STARTD_JOB_ATTRS``),
  so a job is counted on the device it runs on even if its queue entry says otherwise. Claimed
  slots of unannotated jobs, or of other schedds, hold host resources too.
- **Node facts**: the ``CoshareNodeFacts`` text a node's startd cron publishes (the node
  daemon's measurements); only carried here, read by :func:`coshare.facts.with_facts`. The
  node knows a job by its GlobalJobId in id characters (the job wrapper's ``--job``).
- **What is planned**: the schedd's queue. An idle managed job's gate is open while
  ``CosharePlacedNode`` is set; the ledger counts it as placed, or pending again when its
  placement expired. A running job the collector does not show yet is counted from its queue
  entry.

No I/O, no clock: ``now_s`` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from coshare.facts import with_facts
from coshare.ledger import (
    Book,
    Current,
    Placed,
    Queued,
    declared_demand,
    field_value,
    find_kind,
    kind_index,
    refuse_on_error,
    settle,
    whole_devices,
)
from coshare.model import MILLI, Device, DeviceKind, Node, RunningJob, Snapshot, cores_to_milli
from coshare.ports import Rejected

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
        facts: each node's ``CoshareNodeFacts`` text, as published.
    """

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    global_ids: frozenset[str] = frozenset()
    node_of_machine: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    facts: Mapping[str, str] = field(default_factory=dict)


def _devices(
    name: str, ad: Values, kinds: Mapping[str, tuple[str, DeviceKind]], warnings: list[str]
) -> tuple[Device, ...]:
    ids = _list(ad.get(A.DEVICE_IDS))
    memory = _list(ad.get(A.DEVICE_MEMORY))
    threads = _list(ad.get(A.DEVICE_THREADS))
    models = _list(ad.get(A.DEVICE_MODELS))
    out: list[Device] = []
    for i, raw_id in enumerate(ids):
        dev_id = str(raw_id)
        model = str(models[i]) if i < len(models) and models[i] is not None else ""
        found = find_kind(kinds, model)
        kind = found[1] if found else None
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


def parse_slots(slots: Iterable[Values], kinds: Mapping[str, DeviceKind]) -> ClusterView:
    """Read the collector's slot ads into nodes and the resources their claims hold.

    Args:
        slots: one mapping per slot ad (see :data:`~condor_addon.attributes.SLOT_PROJECTION`).
        kinds: device limits by model, for devices that advertise no memory or threads.

    Raises:
        ConfigError: two device kinds with the same name (see :func:`coshare.ledger.kind_index`).
    """
    index = kind_index(kinds)
    warnings: list[str] = []
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    devices: dict[str, tuple[Device, ...]] = {}
    node_of_machine: dict[str, str] = {}
    facts: dict[str, str] = {}
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
            devices[name] = _devices(name, ad, index, warnings)
        text = ad.get(A.NODE_FACTS)
        if isinstance(text, str) and name not in facts:
            facts[name] = text
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
            declared = declared_demand(job_id, ad)
            if declared is None and used:
                # Unreadable declaration on a running job: count whole devices (never under).
                declared = whole_devices([known[name][d] for d in used])
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
                       tuple(warnings), facts)  # fmt: skip


@dataclass(frozen=True)
class QueueJob:
    """One coshare-managed job as the schedd listed it (values as read, nothing converted
    that a user could make fail).

    Attributes:
        id: ``cluster.proc``.
        global_id: its GlobalJobId (joins it to a claimed slot).
        status: HTCondor's JobStatus code.
        annotations: the user's coshare keys and their raw values.
        placed_node: ``CosharePlacedNode``, or ``None``.
        placed_devices: ``CosharePlacedDevices`` as written (``"0,1"``), or ``None``.
        placed_at: ``CosharePlacedAt`` (epoch seconds), or ``None``.
        request_cpus: ``RequestCpus`` (cores of the slot: the job's total), or ``None``.
        request_memory: ``RequestMemory`` (MiB of the slot: the job's total), or ``None``.
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
    request_cpus: float | None = None
    request_memory: float | None = None
    priority: int = 0
    submit_time_s: float = 0.0
    remote_host: str | None = None

    @property
    def placement(self) -> tuple[str, tuple[str, ...]] | None:
        """``(node, devices)`` when the job is placed (its gate is open), else ``None``."""
        if self.placed_node is None:
            return None
        return self.placed_node, split_devices(self.placed_devices)

    @property
    def placed(self) -> Placed | None:
        """The placement it carries, for the ledger (``None`` without a node)."""
        if self.placed_node is None:
            return None
        # CosharePlacedAt is written first; a placement without it counts as expired.
        return Placed(self.placed_node, split_devices(self.placed_devices),
                      self.placed_at if self.placed_at is not None else 0.0)  # fmt: skip

    @property
    def cpu_milli(self) -> int:
        """``RequestCpus`` in thousandths of a core (one core when unset).

        Raises:
            AnnotationError: a request no core count can hold (``1e308``).
        """
        cpus = self.request_cpus
        if cpus is None or cpus <= 0:
            return MILLI
        return field_value(self.id, "RequestCpus", cpus, cores_to_milli, "a number of cores")

    @property
    def memory_mib(self) -> int:
        """``RequestMemory`` in MiB, rounded up (0 when unset)."""
        memory = self.request_memory
        if memory is None or memory <= 0:
            return 0
        return field_value(self.id, "RequestMemory", memory, math.ceil, "a number of MiB")


def read_job(ad: Values) -> QueueJob | None:
    """One job ad's values as a :class:`QueueJob`; ``None`` when it lacks its id."""
    cluster, proc = _number(ad.get("ClusterId")), _number(ad.get("ProcId"))
    if cluster is None or proc is None:
        return None
    wanted = {a.lower() for a in A.ANNOTATIONS}
    annotations = {k: v for k, v in ad.items() if k.lower() in wanted and v is not None}
    status = _number(ad.get("JobStatus"))
    devices = ad.get(A.PLACED_DEVICES)
    return QueueJob(
        id=f"{int(cluster)}.{int(proc)}",
        global_id=_text(ad.get("GlobalJobId")) or "",
        status=int(status) if status is not None else 0,
        annotations=annotations,
        placed_node=_text(ad.get(A.PLACED_NODE)),
        placed_devices=devices if isinstance(devices, str) else None,
        placed_at=_number(ad.get(A.PLACED_AT)),
        request_cpus=_number(ad.get("RequestCpus")),
        request_memory=_number(ad.get("RequestMemory")),
        priority=int(_number(ad.get("JobPrio")) or 0),
        submit_time_s=_number(ad.get("QDate")) or 0.0,
        remote_host=_text(ad.get("RemoteHost")),
    )  # fmt: skip


def queued(job: QueueJob) -> Queued:
    """An idle managed job as the ledger's fact (its gate is open while a node is placed).

    Raises:
        AnnotationError: a host request that cannot be read.
    """
    return Queued(
        id=job.id, annotations=job.annotations, cpu_milli=job.cpu_milli,
        memory_mib=job.memory_mib, priority=job.priority, submit_time_s=job.submit_time_s,
        placed=job.placed, gate_open=job.placed_node is not None,
    )  # fmt: skip


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
    jobs: Iterable[QueueJob], cluster: ClusterView, *, now_s: float, replan_after_s: float
) -> QueueView:
    """Sort the managed jobs of a queue: idle ones through the ledger; running ones the
    collector does not show yet counted from their queue entry.

    Args:
        jobs: the managed jobs (``CoshareManaged``) of the schedd.
        cluster: the collector's view (nodes, and the jobs it already shows running).
        now_s: the current time, epoch seconds (the clock of ``CosharePlacedAt``).
        replan_after_s: a placed job that has not started after this long is pending again.
    """
    nodes = {n.name: n for n in cluster.nodes}
    idle: list[Queued | Rejected] = []
    running: list[RunningJob] = []
    warnings: list[str] = []
    for q in jobs:
        if q.status == A.IDLE:
            idle.append(refuse_on_error(q.id, lambda q=q: queued(q), q.annotations))  # type: ignore[misc]
            continue
        if q.status not in HOLDS_SLOT:
            continue  # held, removed, completed: holds nothing, waits for a person
        if q.global_id and q.global_id in cluster.global_ids:
            continue  # the collector's claimed slot already counts it
        node = cluster.node_of_machine.get(machine_of(q.remote_host or "")) or q.placed_node
        if node not in nodes:
            warnings.append(f"job {q.id} runs on {q.remote_host or node!r}, "
                            "which is not a coshare node; not counted")  # fmt: skip
            continue
        known = {d.id: d for d in nodes[node].devices}
        devices = tuple(d for d in split_devices(q.placed_devices) if d in known)
        demand = declared_demand(q.id, q.annotations) or whole_devices(
            [known[d] for d in devices])  # fmt: skip
        host = refuse_on_error(q.id, lambda q=q: (q.cpu_milli, q.memory_mib))  # type: ignore[misc]
        cpu_milli, memory_mib = host if isinstance(host, tuple) else (MILLI, 0)
        running.append(RunningJob(
            id=q.id, node=node, devices=devices, device_memory_mib=demand[0],
            device_threads=demand[1], cpu_milli=cpu_milli, memory_mib=memory_mib,
            state="running", start_time_s=q.placed_at,
        ))  # fmt: skip
    book = settle(idle, cluster.nodes, now_s=now_s, replan_after_s=replan_after_s)
    return QueueView(book, tuple(running), tuple(warnings) + book.notes)


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
        running=tuple(running) + queue.running + queue.book.planned,
        pending=queue.book.pending,
        now_s=now_s,
    )


def current(now: QueueJob, then: QueueJob | None) -> Current:
    """A job as the Editor re-read it, for :func:`coshare.ledger.decide`.

    Args:
        now: the job as the schedd lists it now.
        then: the job as the Source read it (``None``: not compared).
    """
    changed = None
    if then is not None and _changed(now, then):
        changed = "changed since it was read; planned next cycle"
    return Current(
        id=now.id, state=A.job_status_name(now.status), pending=now.status == A.IDLE,
        gate_open=now.placed_node is not None, placed=now.placed, changed=changed,
    )  # fmt: skip


def _changed(now: QueueJob, then: QueueJob) -> bool:
    """Whether a job was edited since it was read (annotations or placement)."""
    return (
        {k.lower(): v for k, v in now.annotations.items()}
        != {k.lower(): v for k, v in then.annotations.items()}
        or now.placed_node != then.placed_node
        or now.placed_devices != then.placed_devices
        or now.placed_at != then.placed_at
    )


def node_job_id(global_id: str) -> str:
    """A job's id on its node: its GlobalJobId in id characters, as the job wrapper makes it
    (``tr -c 'A-Za-z0-9._+-' '_' | cut -c1-128``, byte by byte)."""
    raw = global_id.encode("utf-8", "surrogateescape")[:128]
    return "".join(chr(b) if chr(b) in _NODE_ID_CHARS else "_" for b in raw)


_NODE_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-")


def with_node_facts(
    snapshot: Snapshot, cluster: ClusterView, jobs: Iterable[QueueJob], *, now_s: float,
    max_age_s: float,
) -> tuple[Snapshot, tuple[str, ...]]:  # fmt: skip
    """``snapshot`` with the facts the nodes published (:func:`coshare.facts.with_facts`),
    and the notes about the unusable ones. A running job is found in its node's loads by its
    GlobalJobId in id characters."""
    global_of = {q.id: q.global_id for q in jobs if q.global_id}

    def local_id(job: RunningJob) -> str:
        return node_job_id(global_of.get(job.id, job.id))

    return with_facts(snapshot, cluster.facts, now_s=now_s, max_age_s=max_age_s,
                      local_ids=local_id)  # fmt: skip
