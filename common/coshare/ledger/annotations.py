"""Job annotations: the keys users declare, and the one parser both adapters share.

Users declare what their job needs on a device in a few keys. In an HTCondor submit file
they are job attributes (``+CoshareDeviceMemory = 2048``); the Slurm adapter reads the same
keys from its documented place in the job. Key names are matched without regard to case,
the ``Coshare`` prefix, or ``_``/``-`` separators, so ``CoshareDeviceMemory``,
``coshare_device_memory`` and ``device-memory`` are the same key.

=====================  ==================  =============================================
key                    value               meaning
=====================  ==================  =============================================
CoshareDeviceMemory    MiB, or 512M, 2G    most device memory the job uses, per device
CoshareDeviceThreads   integer             most device threads one offload uses
CoshareDeviceCount     integer (1)         devices on one node
CoshareKind            device | cpu        ``cpu``: no device, host cores only
CoshareProcesses       integer (1)         gang size: processes that start together
CoshareProgram         name                profile key (Spread-n-Share)
CoshareAlpha           0 < a <= 1          tolerated slowdown factor (Spread-n-Share)
CoshareMembw           GB/s                main-memory bandwidth used (Poncos)
CoshareCopyBandwidth   MB/s                host-device copy bandwidth (collocation)
CoshareWalltime        seconds             requested run time
CoshareNodes           integer (1)         gang: fewest nodes it spans
CoshareNodesMax        integer             gang: most nodes it may span (default: Nodes)
CoshareProcessesPerNode integer            gang: most processes on one node
=====================  ==================  =============================================

A gang without ``CoshareProcesses`` runs ``nodes x processes-per-node`` processes (one per
node without a per-node count); fields that cannot all hold are refused naming the key
(:func:`coshare.ledger.gangs.gang_problems`).

A device job must declare memory and threads; a ``cpu`` job declares neither. Every problem of
a job is reported at once, each with the allowed range, in an :class:`AnnotationError`; the
caller leaves that job out of the cycle (or holds it with the message) and carries on.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from coshare.errors import AnnotationError, FieldProblem
from coshare.ledger.bounds import (
    MAX_COPY_BW_MBPS,
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_JOB_NODES,
    MAX_MEMBW_GBPS,
    MAX_MEMORY_MIB,
    MAX_NUMBER_CHARS,
    MAX_PROCESSES,
    MAX_WALLTIME_S,
    NUMBER_PATTERN,
    as_float,
    parse_number,
    shorten,
)
from coshare.ledger.gangs import gang_problems
from coshare.model import MILLI, Job, JobKind, Node

PREFIX = "coshare"


@dataclass(frozen=True)
class ClusterLimits:
    """The largest values any job could use on this cluster, to refuse impossible requests.

    Attributes:
        device_memory_mib: memory of the largest device.
        device_threads: hardware threads of the device with the most.
        devices_per_node: most devices on one node.
        cpu_milli: cores of the largest node, in thousandths.
        memory_mib: host memory of the largest node.
    """

    device_memory_mib: int
    device_threads: int
    devices_per_node: int
    cpu_milli: int
    memory_mib: int

    @classmethod
    def of_nodes(cls, nodes: Iterable[Node]) -> ClusterLimits:
        """The limits of a list of nodes (all zero for an empty list)."""
        nodes = list(nodes)
        devices = [d for n in nodes for d in n.devices]
        return cls(
            device_memory_mib=max((d.memory_mib for d in devices), default=0),
            device_threads=max((d.threads for d in devices), default=0),
            devices_per_node=max((len(n.devices) for n in nodes), default=0),
            cpu_milli=max((n.cpu_milli for n in nodes), default=0),
            memory_mib=max((n.memory_mib for n in nodes), default=0),
        )


@dataclass(frozen=True)
class KeySpec:
    """One annotation key: its HTCondor spelling, the Job field it fills, how to read it.

    Attributes:
        attribute: the HTCondor spelling (``CoshareDeviceMemory``).
        field: the :class:`~coshare.model.Job` field it fills.
        allowed: the allowed form and range, for messages.
        maximum: the largest value coshare accepts on any cluster (see
        :mod:`coshare.ledger.bounds`);
            ``None`` for keys that are not numbers.
    """

    attribute: str
    field: str
    allowed: str
    maximum: float | None = None


KEYS: tuple[KeySpec, ...] = (
    KeySpec(
        "CoshareDeviceMemory",
        "device_memory_mib",
        "integer MiB >= 1, or with a unit (2G)",
        MAX_DEVICE_MEMORY_MIB,
    ),
    KeySpec("CoshareDeviceThreads", "device_threads", "integer >= 1", MAX_DEVICE_THREADS),
    KeySpec("CoshareDeviceCount", "device_count", "integer >= 1", MAX_DEVICES),
    KeySpec("CoshareKind", "kind", "device or cpu"),
    KeySpec("CoshareProcesses", "processes", "integer >= 1", MAX_PROCESSES),
    KeySpec("CoshareProgram", "program", "a name of letters, digits, '.', '_', '-'"),
    KeySpec("CoshareAlpha", "alpha", "a number in (0, 1]", 1.0),
    KeySpec(
        "CoshareMembw", "membw_gbps", f"a number of GB/s in [0, {MAX_MEMBW_GBPS}]", MAX_MEMBW_GBPS
    ),
    KeySpec(
        "CoshareCopyBandwidth",
        "copy_bw_mbps",
        f"a number of MB/s in [0, {MAX_COPY_BW_MBPS}]",
        MAX_COPY_BW_MBPS,
    ),
    KeySpec(
        "CoshareWalltime",
        "walltime_s",
        f"a number of seconds in (0, {MAX_WALLTIME_S}]",
        MAX_WALLTIME_S,
    ),
    KeySpec("CoshareNodes", "nodes", "integer >= 1", MAX_JOB_NODES),
    KeySpec("CoshareNodesMax", "nodes_max", "integer >= CoshareNodes", MAX_JOB_NODES),
    KeySpec("CoshareProcessesPerNode", "processes_per_node", "integer >= 1", MAX_PROCESSES),
)


def squash(key: str) -> str:
    """Normalize a key: lower case, no separators, no ``coshare`` prefix."""
    flat = re.sub(r"[^a-z0-9]", "", key.lower())
    return flat[len(PREFIX) :] if flat.startswith(PREFIX) else flat


_SPEC_OF: dict[str, KeySpec] = {spec.field: spec for spec in KEYS}
_BY_SQUASHED: dict[str, KeySpec] = {}
for _spec in KEYS:
    _BY_SQUASHED[squash(_spec.attribute)] = _spec
    _BY_SQUASHED[squash(_spec.field)] = _spec  # device_memory_mib, membw_gbps, ...

_UNIT_MIB = {
    "": 1,
    "m": 1,
    "mb": 1,
    "mib": 1,
    "g": 1024,
    "gb": 1024,
    "gib": 1024,
    "t": 1024**2,
    "tb": 1024**2,
    "tib": 1024**2,
    "k": 1 / 1024,
    "kb": 1 / 1024,
    "kib": 1 / 1024,
}
_MEMORY = re.compile(rf"({NUMBER_PATTERN})\s*([a-zA-Z]{{0,3}})")
_PROGRAM = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def is_annotation_key(key: str) -> bool:
    """Whether a job attribute name belongs to coshare (starts with ``Coshare``)."""
    return re.sub(r"[^a-z0-9]", "", key.lower()).startswith(PREFIX)


def extract(attributes: Mapping[str, object]) -> dict[str, object]:
    """The coshare keys among a job's attributes (an HTCondor job ad has many others)."""
    return {k: v for k, v in attributes.items() if is_annotation_key(k)}


def is_annotated(attributes: Mapping[str, object]) -> bool:
    """Whether a job declared any coshare key; jobs without any are left alone entirely."""
    return any(is_annotation_key(k) for k in attributes)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value.strip().strip('"').strip()
    return shorten(value)  # str() of a 5,000-digit integer raises


def _number(value: object) -> float | None:
    """A number by the one rule of :mod:`coshare.ledger.bounds` (text: ASCII digits only); an
    infinity for one too large, ``None`` for anything else."""
    if isinstance(value, str):
        return parse_number(_text(value))
    return as_float(value)


def _memory_mib(value: object) -> float | None:
    if not isinstance(value, str):
        return _number(value)
    text = _text(value)
    match = _MEMORY.fullmatch(text) if len(text) <= MAX_NUMBER_CHARS else None
    if not match or match.group(2).lower() not in _UNIT_MIB:
        return None
    number = parse_number(match.group(1))
    return None if number is None else number * _UNIT_MIB[match.group(2).lower()]


class _Checker:
    """Collects the problems of one job's annotations."""

    def __init__(self, raw: Mapping[str, object]) -> None:
        self.raw = raw
        self.problems: list[FieldProblem] = []

    def bad(self, spec: KeySpec, key: str, why: str, allowed: str | None = None) -> None:
        self.problems.append(FieldProblem(key, _text(self.raw[key]), allowed or spec.allowed, why))

    def integer(
        self,
        spec: KeySpec,
        key: str,
        cap: int | None,
        too_big: str,
        read: Callable[[object], float | None] = _number,
    ) -> int | None:
        """A whole number in ``1..maximum``: the key's own maximum, or the cluster's ``cap``
        when smaller (then ``too_big`` says why)."""
        number = read(self.raw[key])
        limit = int(spec.maximum or 0)
        maximum = limit if cap is None else min(cap, limit)
        allowed = f"{spec.allowed}, at most {maximum}"
        if number is None:
            self.bad(spec, key, "is not a number", allowed)
            return None
        if number > maximum:
            why = too_big if cap is not None and cap <= limit else "is larger than coshare accepts"
            self.bad(spec, key, why, allowed)
            return None
        if number < 0:
            self.bad(spec, key, "is negative", allowed)
            return None
        if read is _number and not number.is_integer():
            self.bad(spec, key, "is not a whole number", allowed)
            return None
        whole = math.ceil(number)  # memory with a unit rounds up: never under-reserve
        if whole < 1:
            self.bad(spec, key, "is zero", allowed)
            return None
        return whole

    def real(self, spec: KeySpec, key: str, low: float, open_low: bool) -> float | None:
        """A number in ``[low, maximum]`` (``(low, maximum]`` when ``open_low``)."""
        number = _number(self.raw[key])
        if number is None:
            self.bad(spec, key, "is not a number")
            return None
        high = spec.maximum if spec.maximum is not None else math.inf
        if number < low or (open_low and number == low) or number > high:
            self.bad(spec, key, "is out of range")
            return None
        return number


def parse_job(
    job_id: str,
    annotations: Mapping[str, object],
    *,
    limits: ClusterLimits | None = None,
    cpu_milli: int = MILLI,
    memory_mib: int = 0,
    priority: int = 0,
    submit_time_s: float = 0.0,
    processes: int = 1,
) -> Job:
    """Turn one job's declared keys, and what its scheduler knows of it, into a :class:`Job`.

    Args:
        job_id: the scheduler's id, named in every message.
        annotations: the job's coshare keys and raw values (strings, numbers).
        limits: the cluster's largest device and node; values beyond them are refused.
            ``None`` skips those checks (no cluster known).
        cpu_milli: host cores per process from the scheduler's own request.
        memory_mib: host memory per process from the scheduler's own request.
        priority: the scheduler's priority for the job.
        submit_time_s: when it was submitted.
        processes: gang size from the scheduler (``CoshareProcesses`` overrides it).

    Returns:
        The job with its demands.

    Raises:
        AnnotationError: naming the job and every unusable key with its allowed range.
    """
    check = _Checker(annotations)
    values: dict[str, int | float | str] = {}
    keys: dict[str, str] = {}
    for key in annotations:
        spec = _BY_SQUASHED.get(squash(key))
        if spec is None:
            valid = ", ".join(s.attribute for s in KEYS)
            check.problems.append(
                FieldProblem(
                    key, _text(annotations[key]), f"one of {valid}", "is not a coshare key"
                )
            )
            continue
        if spec.field in keys:  # device-memory and device-memory-mib: which one was meant?
            check.problems.append(
                FieldProblem(
                    key,
                    _text(annotations[key]),
                    f"{spec.attribute} once, in one spelling",
                    f"names the same key as {keys[spec.field]} (given twice)",
                )
            )
            continue
        keys[spec.field] = key
        value = _read(check, spec, key, limits)
        if value is not None:
            values[spec.field] = value

    _check_request(check, cpu_milli, memory_mib, processes)
    kind: JobKind = "device"
    if "kind" in values:
        kind = "cpu" if values["kind"] == "cpu" else "device"
    elif keys and not ({"device_memory_mib", "device_threads"} & keys.keys()):
        kind = "cpu"  # only host-side keys (program, membw, ...): a CPU job
    if kind == "device":
        for name in ("device_memory_mib", "device_threads"):
            if name not in keys:
                spec = _SPEC_OF[name]
                check.problems.append(
                    FieldProblem(
                        spec.attribute,
                        "",
                        spec.allowed,
                        "is missing (a device job must declare it)",
                    )
                )
    else:
        for name in ("device_memory_mib", "device_threads", "device_count"):
            if name in keys:
                check.bad(
                    _SPEC_OF[name],
                    keys[name],
                    "is set on a cpu job",
                    "absent when CoshareKind = cpu",
                )
    if check.problems:
        raise AnnotationError(job_id, check.problems)

    def whole(name: str, default: int) -> int:
        value = values.get(name, default)
        return value if isinstance(value, int) else default

    def real(name: str) -> float | None:
        value = values.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    program = values.get("program")
    nodes = whole("nodes", 1)
    nodes_max = values.get("nodes_max")
    per_node = values.get("processes_per_node")
    gang = Job(
        id=job_id,
        nodes=nodes,
        nodes_max=nodes_max if isinstance(nodes_max, int) else None,
        processes_per_node=per_node if isinstance(per_node, int) else None,
    )
    default = min(nodes * (gang.processes_per_node or 1), MAX_PROCESSES) if gang.is_gang else 1
    gang = replace(gang, processes=whole("processes", max(processes, default)))
    attribute = {s.field: s.attribute for s in KEYS}
    problems = [
        FieldProblem(
            keys.get(name, attribute[name]),
            _text(value),
            allowed,
            "does not fit the job's other gang keys",
        )
        for name, value, allowed in gang_problems(gang)
    ]
    if problems:
        raise AnnotationError(job_id, problems)
    return Job(
        id=job_id,
        device_memory_mib=whole("device_memory_mib", 0),
        device_threads=whole("device_threads", 0),
        device_count=whole("device_count", 1 if kind == "device" else 0),
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        priority=priority,
        submit_time_s=submit_time_s,
        kind=kind,
        processes=gang.processes,
        program=program if isinstance(program, str) else None,
        alpha=real("alpha"),
        membw_gbps=real("membw_gbps"),
        copy_bw_mbps=real("copy_bw_mbps"),
        walltime_s=real("walltime_s"),
        nodes=gang.nodes,
        nodes_max=gang.nodes_max,
        processes_per_node=gang.processes_per_node,
    )


def _check_request(check: _Checker, cpu_milli: int, memory_mib: int, processes: int) -> None:
    """The scheduler's own request (cores, memory, gang size) is the user's too (HTCondor's
    ``request_cpus``, Slurm's ``--mem``): bounded like an annotation."""
    for name, value, low, high, scale in (
        ("cores per process", cpu_milli, 0, MAX_CPU_MILLI, MILLI),
        ("memory MiB per process", memory_mib, 0, MAX_MEMORY_MIB, 1),
        ("processes", processes, 1, MAX_PROCESSES, 1),
    ):
        if not low <= value <= high:
            shown, allowed = shorten(value // scale), f"{low}..{high // scale}"
            check.problems.append(
                FieldProblem(f"requested {name}", shown, allowed, "is outside what coshare accepts")
            )


def _read(
    check: _Checker, spec: KeySpec, key: str, limits: ClusterLimits | None
) -> int | float | str | None:
    """Read one key's value; record a problem and return ``None`` when unusable."""
    raw = check.raw[key]
    has_cluster = limits is not None and limits.device_memory_mib > 0
    if spec.field == "device_memory_mib":
        cap = limits.device_memory_mib if has_cluster and limits else None
        return check.integer(
            spec, key, cap, f"exceeds every device (largest: {cap} MiB)", read=_memory_mib
        )
    if spec.field == "device_threads":
        cap = limits.device_threads if has_cluster and limits else None
        return check.integer(
            spec, key, cap, f"is above every device's thread limit (largest: {cap})"
        )
    if spec.field == "device_count":
        cap = limits.devices_per_node if has_cluster and limits else None
        return check.integer(spec, key, cap, f"is more devices than any node has (most: {cap})")
    if spec.field in ("processes", "nodes", "nodes_max", "processes_per_node"):
        return check.integer(spec, key, None, "is larger than coshare accepts")
    if spec.field == "kind":
        text = _text(raw).lower()
        if text not in ("device", "cpu"):
            check.bad(spec, key, "is not a job kind")
            return None
        return text
    if spec.field == "program":
        text = _text(raw)
        if not _PROGRAM.fullmatch(text):
            check.bad(spec, key, "is not a valid program name")
            return None
        return text
    if spec.field in ("alpha", "walltime_s"):
        return check.real(spec, key, 0.0, open_low=True)
    return check.real(spec, key, 0.0, open_low=False)  # bandwidths
