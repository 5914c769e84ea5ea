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
=====================  ==================  =============================================

A device job must declare memory and threads; a ``cpu`` job declares neither. Every problem of
a job is reported at once, each with the allowed range, in an :class:`AnnotationError`; the
caller leaves that job out of the cycle (or holds it with the message) and carries on.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from coshare.errors import AnnotationError, FieldProblem
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
    """One annotation key: its HTCondor spelling, the Job field it fills, how to read it."""

    attribute: str
    field: str
    allowed: str


KEYS: tuple[KeySpec, ...] = (
    KeySpec("CoshareDeviceMemory", "device_memory_mib", "integer MiB >= 1, or with a unit (2G)"),
    KeySpec("CoshareDeviceThreads", "device_threads", "integer >= 1"),
    KeySpec("CoshareDeviceCount", "device_count", "integer >= 1"),
    KeySpec("CoshareKind", "kind", "device or cpu"),
    KeySpec("CoshareProcesses", "processes", "integer >= 1"),
    KeySpec("CoshareProgram", "program", "a name of letters, digits, '.', '_', '-'"),
    KeySpec("CoshareAlpha", "alpha", "a number in (0, 1]"),
    KeySpec("CoshareMembw", "membw_gbps", "a number of GB/s >= 0"),
    KeySpec("CoshareCopyBandwidth", "copy_bw_mbps", "a number of MB/s >= 0"),
    KeySpec("CoshareWalltime", "walltime_s", "a number of seconds > 0"),
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

_UNIT_MIB = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024,
             "t": 1024**2, "tb": 1024**2, "tib": 1024**2, "k": 1 / 1024, "kb": 1 / 1024,
             "kib": 1 / 1024}  # fmt: skip
_PROGRAM = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


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
    return value.strip().strip('"').strip() if isinstance(value, str) else str(value)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    try:
        parsed = float(_text(value))
    except ValueError:
        return None
    return parsed if math.isfinite(parsed) else None


def _memory_mib(value: object) -> float | None:
    if not isinstance(value, str):
        return _number(value)
    match = re.fullmatch(r"\s*(-?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", _text(value))
    if not match or match.group(2).lower() not in _UNIT_MIB:
        return None
    return float(match.group(1)) * _UNIT_MIB[match.group(2).lower()]


class _Checker:
    """Collects the problems of one job's annotations."""

    def __init__(self, raw: Mapping[str, object]) -> None:
        self.raw = raw
        self.problems: list[FieldProblem] = []

    def bad(self, spec: KeySpec, key: str, why: str, allowed: str | None = None) -> None:
        self.problems.append(FieldProblem(key, _text(self.raw[key]), allowed or spec.allowed, why))

    def integer(
        self, spec: KeySpec, key: str, maximum: int | None, too_big: str,
        read: Callable[[object], float | None] = _number,
    ) -> int | None:  # fmt: skip
        number = read(self.raw[key])
        allowed = spec.allowed if maximum is None else f"{spec.allowed}, at most {maximum}"
        if number is None:
            self.bad(spec, key, "is not a number", allowed)
            return None
        if read is _number and not float(number).is_integer():
            self.bad(spec, key, "is not a whole number", allowed)
            return None
        whole = math.ceil(number)  # memory with a unit rounds up: never under-reserve
        if whole < 1:
            self.bad(spec, key, "is negative" if number < 0 else "is zero", allowed)
            return None
        if maximum is not None and whole > maximum:
            self.bad(spec, key, too_big, allowed)
            return None
        return whole

    def real(self, spec: KeySpec, key: str, low: float, high: float | None, open_low: bool
             ) -> float | None:  # fmt: skip
        number = _number(self.raw[key])
        if number is None:
            self.bad(spec, key, "is not a number")
            return None
        if number < low or (open_low and number == low) or (high is not None and number > high):
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
        keys[spec.field] = key
        value = _read(check, spec, key, limits)
        if value is not None:
            values[spec.field] = value

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
        processes=whole("processes", processes),
        program=program if isinstance(program, str) else None,
        alpha=real("alpha"),
        membw_gbps=real("membw_gbps"),
        copy_bw_mbps=real("copy_bw_mbps"),
        walltime_s=real("walltime_s"),
    )


def _read(
    check: _Checker, spec: KeySpec, key: str, limits: ClusterLimits | None
) -> int | float | str | None:
    """Read one key's value; record a problem and return ``None`` when unusable."""
    raw = check.raw[key]
    has_cluster = limits is not None and limits.device_memory_mib > 0
    if spec.field == "device_memory_mib":
        cap = limits.device_memory_mib if has_cluster and limits else None
        return check.integer(spec, key, cap, f"exceeds every device (largest: {cap} MiB)",
                             read=_memory_mib)  # fmt: skip
    if spec.field == "device_threads":
        cap = limits.device_threads if has_cluster and limits else None
        return check.integer(
            spec, key, cap, f"is above every device's thread limit (largest: {cap})"
        )
    if spec.field == "device_count":
        cap = limits.devices_per_node if has_cluster and limits else None
        return check.integer(spec, key, cap, f"is more devices than any node has (most: {cap})")
    if spec.field == "processes":
        return check.integer(spec, key, None, "")
    if spec.field == "kind":
        text = _text(raw).lower()
        if text not in ("device", "cpu"):
            check.bad(spec, key, "is not a job kind")
            return None
        return text
    if spec.field == "program":
        text = _text(raw)
        if not _PROGRAM.match(text):
            check.bad(spec, key, "is not a valid program name")
            return None
        return text
    if spec.field == "alpha":
        return check.real(spec, key, 0.0, 1.0, open_low=True)
    if spec.field == "walltime_s":
        return check.real(spec, key, 0.0, None, open_low=True)
    return check.real(spec, key, 0.0, None, open_low=False)  # bandwidths
