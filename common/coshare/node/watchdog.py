"""The memory watchdog: a job over what it declared is killed as a whole, with a reason.

Host memory is limited by the kernel through the job's cgroup; the watchdog turns the
kernel's OOM kill of *one* process (cgroup v1 has no group OOM kill) into the end of the
whole job, and records why. Device memory has no kernel limit: a backend reports each
process's use per device (:class:`DeviceMemory`; NVML in :mod:`coshare.node.nvml`), the
watchdog sums it per job and kills a job over its declaration. Neighbours are untouched:
only the offending job's group is killed.

The reason goes to ``state_dir/jobs/job-<id>.reason``; ``job-exec`` prints it and
``job-end`` returns it, for the scheduler adapter to show (hold reason, job comment).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from coshare.errors import CoshareError, NodeError
from coshare.node.cgroups import JobGroup
from coshare.node.jobs import JobRecord, JobStore

log = logging.getLogger("coshare.node.watchdog")
MIB = 1024 * 1024
#: While the device memory backend keeps failing, it is logged once every this many rounds.
DEVICE_LOG_EVERY = 60


class DeviceMemory(Protocol):
    """Reports device memory use per process.

    Contract: ``usage()`` returns bytes used, keyed by (device id, host pid), for every
    process the backend can see; processes whose use it cannot read are left out.
    """

    def usage(self) -> Mapping[tuple[str, int], int]:
        """Device memory in use, by (canonical device id, pid)."""
        ...

    def canonical(self, device: str) -> str:
        """The id :meth:`usage` uses for a device a job names (an index for a UUID, say)."""
        ...


@dataclass(frozen=True)
class Violation:
    """A job over a declared limit.

    Attributes:
        job: the job.
        resource: ``host_memory`` or ``device_memory``.
        declared_mib: what it declared (0: the device was not assigned to it).
        used_mib: what it used, when known.
        device: the device, for device memory.
    """

    job: str
    resource: Literal["host_memory", "device_memory"]
    declared_mib: int
    used_mib: int | None = None
    device: str | None = None

    def reason(self) -> str:
        """One line for the user (HTCondor hold reason, Slurm comment)."""
        if self.resource == "host_memory":
            return (
                f"coshare killed job {self.job}: its host memory went over the declared "
                f"{self.declared_mib} MiB (the kernel stopped it at the limit of its cgroup)"
            )
        if self.declared_mib == 0:
            return (
                f"coshare killed job {self.job}: it used {self.used_mib} MiB on device "
                f"{self.device}, which was not assigned to it"
            )
        return (
            f"coshare killed job {self.job}: it used {self.used_mib} MiB of memory on device "
            f"{self.device}, over the declared {self.declared_mib} MiB"
        )


def host_memory_violation(record: JobRecord, group: JobGroup) -> Violation | None:
    """The job's violation of its host memory limit: the kernel OOM-killed in its group, or
    (cgroup v1, OOM killer off) its tasks wait at the limit."""
    if record.spec.memory_mib is None or not group.exists():
        return None
    if group.oom_kills() > 0 or group.is_under_oom():
        return Violation(record.job, "host_memory", record.spec.memory_mib)
    return None


def device_memory_violations(
    records: Sequence[JobRecord],
    usage: Mapping[tuple[str, int], int],
    job_of_pid: Callable[[int], str | None],
    canonical: Callable[[str], str] = str,
) -> list[Violation]:
    """Jobs whose processes together use more device memory than declared, per device.

    Pure apart from ``job_of_pid``. A job's use of a device it was not given is a violation
    too; processes of no coshare job are ignored.
    """
    by_job = {r.job: r for r in records}
    used: dict[tuple[str, str], int] = {}
    for (device, pid), nbytes in usage.items():
        job = job_of_pid(pid)
        if job is not None and job in by_job:
            used[(job, device)] = used.get((job, device), 0) + nbytes
    out = []
    for (job, device), nbytes in sorted(used.items()):
        spec = by_job[job].spec
        if device not in {canonical(d) for d in spec.devices}:
            if nbytes > 0:
                out.append(Violation(job, "device_memory", 0, _mib(nbytes), device))
            continue
        if spec.device_memory_mib is not None and nbytes > spec.device_memory_mib * MIB:
            out.append(
                Violation(job, "device_memory", spec.device_memory_mib, _mib(nbytes), device)
            )
    return out


def _mib(nbytes: int) -> int:
    return -(-nbytes // MIB)


def enforce(store: JobStore, group: JobGroup, violation: Violation) -> bool:
    """Record the reason (first one wins) and kill the job's group as a whole.

    Returns:
        whether this call recorded the reason (``False``: someone already had).
    """
    first = store.record_reason(violation.job, violation.reason())
    if first:
        log.warning(
            "%s", violation.reason(), extra={"job": violation.job, "resource": violation.resource}
        )
    group.kill()
    return first


class Watchdog:
    """Checks every job of a node once per :meth:`check`.

    One job, or the device memory backend, that cannot be checked is logged and skipped: the
    other jobs are still checked (a lost GPU must not leave a cgroup v1 job frozen at its host
    memory limit). Only a round that cannot check host memory at all raises.

    Args:
        store: the node's job records.
        device_memory: the device memory backend, or ``None`` (host memory only).
        job_of_pid: maps a host pid to its job (through its cgroup).
        timeout_s: how long killing a group may take.
        on_kill: told of each job this watchdog killed and was the first to record the
            reason of (the daemon's metrics).
    """

    def __init__(
        self,
        store: JobStore,
        device_memory: DeviceMemory | None,
        job_of_pid: Callable[[int], str | None],
        timeout_s: float = 10.0,
        on_kill: Callable[[Violation], None] | None = None,
    ) -> None:
        self.store = store
        self.device_memory = device_memory
        self.job_of_pid = job_of_pid
        self.timeout_s = timeout_s
        self.on_kill = on_kill
        #: Rounds in a row whose device memory could not be read (0: it was read last time).
        self.device_failures = 0

    def check(self) -> list[Violation]:
        """Find and enforce violations.

        Raises:
            NodeError: the job records cannot be read (no job could be checked).
        """
        records = self._records()
        found: list[Violation] = []
        for record in records:
            try:
                if self.store.reason(record.job) is not None:
                    continue  # already killed
                violation = host_memory_violation(record, record.group(self.timeout_s))
            except Exception as exc:  # one job's failure must not stop the others' checks
                log.warning(
                    "cannot check job %s: %s",
                    record.job,
                    exc,
                    exc_info=not isinstance(exc, CoshareError),
                )
                continue
            if violation is not None:
                found.append(violation)
        found += self._device_violations(records)
        by_job = {r.job: r for r in records}
        done: set[str] = set()
        for violation in found:
            if violation.job in done:
                continue
            done.add(violation.job)
            try:
                first = enforce(self.store, by_job[violation.job].group(self.timeout_s), violation)
                if first and self.on_kill is not None:
                    self.on_kill(violation)
            except Exception as exc:
                log.error(
                    "cannot kill job %s: %s",
                    violation.job,
                    exc,
                    exc_info=not isinstance(exc, CoshareError),
                )
        return found

    def _records(self) -> list[JobRecord]:
        try:
            jobs = self.store.jobs()
        except OSError as exc:
            raise NodeError(f"cannot list the job records in {self.store.jobs_dir}: {exc}") from exc
        records = []
        for job in jobs:
            try:
                record = self.store.read(job)
            except (OSError, CoshareError) as exc:  # one bad record does not hide the others
                log.error("cannot read the record of job %s: %s", job, exc)
                continue
            if record is not None:
                records.append(record)
        return records

    def _device_violations(self, records: Sequence[JobRecord]) -> list[Violation]:
        """Device memory violations; none (logged) when the backend fails this round."""
        backend = self.device_memory
        if backend is None:
            return []
        try:
            found = device_memory_violations(
                records, backend.usage(), self.job_of_pid, backend.canonical
            )
        except Exception as exc:
            self.device_failures += 1
            first = self.device_failures == 1
            if first or self.device_failures % DEVICE_LOG_EVERY == 0:
                log.error(
                    "device memory cannot be read (%d rounds in a row); host memory is "
                    "still watched: %s",
                    self.device_failures,
                    exc,
                    exc_info=first and not isinstance(exc, CoshareError),
                )
            return []
        if self.device_failures:
            log.warning("device memory can be read again after %d rounds", self.device_failures)
            self.device_failures = 0
        return found
