"""What a job asks of its node, checked: the job id, its cores, memory and device share.

Pure (no I/O): the lifecycle (:mod:`coshare.node.lifecycle`) reads the machine and the
command line, this module decides. CPU lists use the kernel's format (``0-3,8``, see
cpuset(7) "FORMATS").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coshare.errors import JobSpecError
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    shorten,
)

#: Job ids of both schedulers: HTCondor ``12.0``, Slurm ``1234``, ``1234_5`` (array task),
#: ``1234+0`` (heterogeneous component). Nothing that could climb out of a directory.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
#: Device ids as the planner writes them (``0``, ``phi1``, ``GPU-8f3c...``, ``0:1`` for MIG).
_DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
#: One part of a CPU list (``0``, ``0-3``): ASCII digits only (``str.isdigit`` is true for
#: digits of every script, which ``int`` refuses), CPU numbers below ``MAX_CORES``.
#: The most cpus a cpu list may name, counting repeats: Linux's largest NR_CPUS.
MAX_LISTED_CPUS = 8192
_CPU_RANGE = re.compile(r"(?P<first>[0-9]{1,7})(?:-(?P<last>[0-9]{1,7}))?")
#: A job's group is named ``job-<id>`` so that no id can be ``.``, ``..`` or a control file.
GROUP_PREFIX = "job-"


def check_job_id(job: str) -> str:
    """Return ``job`` if it is a usable job id.

    Raises:
        JobSpecError: naming the id and the allowed form.
    """
    if not _JOB_ID.fullmatch(job):
        raise JobSpecError(
            f"job id {shorten(job)} is not usable (allowed: letters, digits and . _ + -, "
            "starting with a letter or digit, at most 128 characters)"
        )
    return job


def check_device_id(device: str) -> str:
    """Return ``device`` if it is a usable device id.

    Raises:
        JobSpecError: naming the id and the allowed form.
    """
    if not _DEVICE_ID.fullmatch(device):
        raise JobSpecError(
            f"device id {shorten(device)} is not usable (allowed: letters, digits and . _ : -, "
            "at most 64 characters)"
        )
    return device


def group_name(job: str) -> str:
    """The name of a job's group (and record file): ``job-<id>``."""
    return GROUP_PREFIX + check_job_id(job)


def job_of_group(name: str) -> str | None:
    """The job id of a group name made by :func:`group_name`, else ``None``."""
    if not name.startswith(GROUP_PREFIX):
        return None
    job = name[len(GROUP_PREFIX) :]
    return job if _JOB_ID.fullmatch(job) else None


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Parse the kernel's CPU list format (``0-3,8``; empty means none), sorted, no repeats.

    Raises:
        JobSpecError: for anything else, quoting the text.
    """
    body = text.strip()
    if not body:
        return ()
    ranges: list[tuple[int, int]] = []
    listed = 0
    for part in body.split(","):
        found = _CPU_RANGE.fullmatch(part.strip())
        if found is None:
            raise JobSpecError(f"cpu list {shorten(text)} is not usable (allowed: e.g. 0-3,8)")
        first = int(found["first"])
        last = int(found["last"]) if found["last"] is not None else first
        if last < first or last - first > 65536 or last >= MAX_CORES:
            raise JobSpecError(
                f"cpu list {shorten(text)}: range {shorten(part.strip())} is "
                f"empty, too large or beyond cpu {MAX_CORES - 1}"
            )
        listed += last - first + 1
        if listed > MAX_LISTED_CPUS:
            # Counted before anything is expanded: a list from any peer of a node socket is
            # parsed before its sender's permissions are known.
            raise JobSpecError(
                f"cpu list {shorten(text)} names more than {MAX_LISTED_CPUS} "
                "cpus (allowed: at most as many as a Linux kernel has)"
            )
        ranges.append((first, last))
    cpus: set[int] = set()
    for first, last in ranges:
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Format CPUs in the kernel's list format, ranges collapsed (``0-3,8``)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cores_needed(cores: float) -> int:
    """Whole cores for a (possibly fractional) core request, rounded up; at least one.

    Raises:
        JobSpecError: not a number of cores in ``0 < cores <= MAX_CORES`` (NaN, ``1e300``).
    """
    if not math.isfinite(cores) or not 0 < cores <= MAX_CORES:
        raise JobSpecError(
            f"cores {shorten(cores)} is not usable (allowed: a number > 0 and <= {MAX_CORES})"
        )
    return max(1, math.ceil(cores - 1e-9))


def choose_cpus(
    allowed: Sequence[int],
    taken: Mapping[str, Sequence[int]],
    count: int,
    per_cpu: int = 1,
) -> tuple[int, ...]:
    """Pick ``count`` CPUs of ``allowed`` that no other job holds, lowest first.

    Args:
        allowed: the CPUs coshare's parent group may use.
        taken: CPUs of the jobs already on this node, by job id.
        count: how many to pick.
        per_cpu: how many jobs may hold one CPU (``node.cpu_overcommit``; 1: every job has
            CPUs of its own). With more, the least-held CPUs are picked first, so jobs still
            get CPUs of their own while there are enough.

    Raises:
        JobSpecError: when fewer are free, listing who holds the rest.
    """
    held: dict[int, int] = {}
    for cpus in taken.values():
        for c in cpus:
            held[c] = held.get(c, 0) + 1
    free = sorted(
        (c for c in set(allowed) if held.get(c, 0) < per_cpu), key=lambda c: (held.get(c, 0), c)
    )
    if count > len(free):
        holders = ", ".join(f"{j}: {format_cpu_list(c)}" for j, c in sorted(taken.items()))
        raise JobSpecError(
            f"{count} cores requested but only {len(free)} of cpus "
            f"{format_cpu_list(allowed)} are free (held by {holders or 'nobody'})"
        )
    return tuple(sorted(free[:count]))


def check_cpus(
    cpus: Sequence[int], allowed: Sequence[int], taken: Mapping[str, Sequence[int]]
) -> tuple[int, ...]:
    """Check an explicit CPU list: inside ``allowed`` and disjoint from other jobs.

    Raises:
        JobSpecError: naming the CPUs outside, or the job that holds a CPU already.
    """
    outside = sorted(set(cpus) - set(allowed))
    if outside:
        raise JobSpecError(
            f"cpus {format_cpu_list(outside)} are outside the node's usable cpus "
            f"{format_cpu_list(allowed)}"
        )
    for other, held in sorted(taken.items()):
        shared = sorted(set(cpus) & set(held))
        if shared:
            raise JobSpecError(f"cpus {format_cpu_list(shared)} are held by job {other}")
    return tuple(sorted(set(cpus)))


#: The limits of a spec's sizes (:mod:`coshare.ledger.bounds`): a record or request beyond them is
#: refused before anything is written to a cgroup.
_LIMITS = (
    ("memory_mib", MAX_MEMORY_MIB),
    ("device_memory_mib", MAX_DEVICE_MEMORY_MIB),
    ("device_threads", MAX_DEVICE_THREADS),
    ("llc_ways", 64),
)  # a CAT bit mask has at most 32 bits today


@dataclass(frozen=True)
class JobSpec:
    """What the planner decided for one job on this node.

    Attributes:
        job: the scheduler's job id.
        cpus: the job's own CPUs (disjoint from its neighbours'); empty: not pinned.
        memory_mib: host memory limit; ``None``: not limited.
        devices: the device ids the job may offload to.
        device_memory_mib: most device memory per device; ``None``: not watched.
        device_threads: most device threads the job's offloads hold at once, per device;
            ``None``: the job may not use the offload gate.
        llc_ways: LLC ways of its own (a resctrl group, Spread-n-Share section 4.4);
            ``None``: it shares the node's cache.
        membw_percent: its memory-bandwidth share where the node has MBA (resctrl ``MB:``);
            ``None``: not limited.
    """

    job: str
    cpus: tuple[int, ...] = ()
    memory_mib: int | None = None
    devices: tuple[str, ...] = ()
    device_memory_mib: int | None = None
    device_threads: int | None = None
    llc_ways: int | None = None
    membw_percent: int | None = None

    def __post_init__(self) -> None:
        check_job_id(self.job)
        for device in self.devices:
            check_device_id(device)
        if self.membw_percent is not None and not 1 <= self.membw_percent <= 100:
            raise JobSpecError(
                f"job {self.job}: membw_percent {self.membw_percent!r} is not "
                "usable (allowed: 1..100)"
            )
        for name, maximum in _LIMITS:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not 1 <= value <= maximum):
                raise JobSpecError(
                    f"job {self.job}: {name} {shorten(value)} is not usable (allowed: 1..{maximum})"
                )
        if len(self.devices) > MAX_DEVICES:
            raise JobSpecError(
                f"job {self.job}: {len(self.devices)} devices (allowed: at most {MAX_DEVICES})"
            )
        if len(set(self.devices)) != len(self.devices):
            raise JobSpecError(
                f"job {self.job}: device listed twice in {shorten(list(self.devices))}"
            )

    def to_dict(self) -> dict[str, object]:
        """Plain data for the job record."""
        return {
            "job": self.job,
            "cpus": list(self.cpus),
            "memory_mib": self.memory_mib,
            "devices": list(self.devices),
            "device_memory_mib": self.device_memory_mib,
            "device_threads": self.device_threads,
            "llc_ways": self.llc_ways,
            "membw_percent": self.membw_percent,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> JobSpec:
        """Read a job record's spec back (see :meth:`to_dict`).

        Raises:
            JobSpecError: for a record that does not have the expected shape.
        """
        job = data.get("job")
        cpus = data.get("cpus", [])
        devices = data.get("devices", [])
        ints: dict[str, int | None] = {}
        for name in (
            "memory_mib",
            "device_memory_mib",
            "device_threads",
            "llc_ways",
            "membw_percent",
        ):
            value = data.get(name)
            ints[name] = value if type(value) is int else None
            if value is not None and type(value) is not int:
                job = None
        if (
            not isinstance(job, str)
            or not isinstance(cpus, list)
            or not all(type(c) is int for c in cpus)
            or not isinstance(devices, list)
            or not all(isinstance(d, str) for d in devices)
        ):
            raise JobSpecError(f"job record {shorten(dict(data))} is malformed")
        return cls(
            job=job,
            cpus=tuple(cpus),
            devices=tuple(devices),
            memory_mib=ints["memory_mib"],
            device_memory_mib=ints["device_memory_mib"],
            device_threads=ints["device_threads"],
            llc_ways=ints["llc_ways"],
            membw_percent=ints["membw_percent"],
        )
