"""Job records on the node: what ``job-start`` decided, read by the gate and the watchdog.

Layout under ``state_dir`` (``/run/coshare`` by default, a tmpfs that a reboot clears)::

    jobs/job-<id>.json     the job's spec and where its cgroup lives (written atomically)
    jobs/job-<id>.reason   why coshare killed the job, one line (first writer wins)
    jobs/job-<id>.error    why the job's group could not be set up (read by the JOIN that
                           then refuses, so the job's own output says why)
    jobs/job-<id>.frozen   when an operator froze the job (FREEZE; the daemon thaws it after
                           node.max_freeze_s, so no job stays frozen for good)

Harvested cores (LEND and RECLAIM, :mod:`coshare.node.harvest`) live in the records, so they
survive a daemon restart: ``spec.cpus`` is what the job's cpuset holds now, ``lent_to`` (a GPU
job's) and ``borrowed_from`` (a CPU job's) say which of those cores are on loan.
    lock                   flock(2) held while cores are handed out

The gate maps a client to its job through the kernel, never through what the client says:
``SO_PEERCRED`` gives the peer's pid, ``/proc/<pid>/cgroup`` its group, the group its job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, NamedTuple

from coshare.errors import JobSpecError, JobStateError
from coshare.node.cgroups import Cgroups, JobGroup, open_cgroups
from coshare.node.harvest import Holding
from coshare.node.spec import JobSpec, check_job_id, group_name, job_of_group

#: The file beside a job's record with what its tasks are told (:meth:`JobStore.record_task_env`).
TASK_ENV_SUFFIX = ".taskenv"
#: When the job started here (epoch seconds), and the mark of a job that shared this node
#: with another coshare job at some time of its run (a learning run, coshare.profiles.learning,
#: counts only when it had the node alone).
STARTED_SUFFIX = ".started"
SHARED_SUFFIX = ".shared"


class Launcher(NamedTuple):
    """The process that started a job and waits for it, named so that a reused pid is not
    taken for it: its pid and its start time (``/proc/<pid>/stat`` field 22, clock ticks
    after boot)."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class JobRecord:
    """A started job: its spec and where its cgroup is.

    Attributes:
        spec: what the planner decided for it.
        cgroup_version: ``v1`` or ``v2``.
        cgroup_root: the cgroup mount (v2) or the directory of v1 mounts.
        cgroup_parent: coshare's group holding the job's group.
        uid: the account the job runs as; only its processes may join the group. ``None``:
            not known (a job started by root with ``job-start`` for itself).
        launcher: the process that STARTed the job over the control socket (HTCondor's job
            wrapper); ``None`` when root started it (Slurm's Prolog, ``job-start``).
        lent_to: borrower -> the cores of this job's it has (LEND).
        borrowed_from: lender -> the cores of that job's this job has.
        lends: its scheduler placed it as a job whose idle cores may be lent (START
            ``lends=1``): only such a job's cores are lent to a START ``borrow=``.
    """

    spec: JobSpec
    cgroup_version: Literal["v1", "v2"]
    cgroup_root: str
    cgroup_parent: str
    uid: int | None = None
    launcher: Launcher | None = None
    lent_to: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    borrowed_from: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    lends: bool = False

    @property
    def job(self) -> str:
        return self.spec.job

    def holding(self) -> Holding:
        """The job's cores and loans, for :mod:`coshare.node.harvest`."""
        return Holding(self.job, self.spec.cpus, dict(self.lent_to), dict(self.borrowed_from))

    def with_holding(self, holding: Holding) -> JobRecord:
        """This record with the cores and loans of ``holding``."""
        return replace(
            self,
            spec=replace(self.spec, cpus=holding.cpus),
            lent_to=dict(holding.lent_to),
            borrowed_from=dict(holding.borrowed_from),
        )

    def cgroups(self, timeout_s: float = 10.0) -> Cgroups:
        """The cgroup driver the job was started with."""
        return open_cgroups(
            Path(self.cgroup_root), self.cgroup_version, self.cgroup_parent, timeout_s
        )

    def group(self, timeout_s: float = 10.0) -> JobGroup:
        """The job's group."""
        return self.cgroups(timeout_s).open(self.job)

    def to_dict(self) -> dict[str, object]:
        return {
            "spec": self.spec.to_dict(),
            "cgroup": {
                "version": self.cgroup_version,
                "root": self.cgroup_root,
                "parent": self.cgroup_parent,
            },
            "uid": self.uid,
            "launcher": list(self.launcher) if self.launcher is not None else None,
            "lent_to": {job: list(cpus) for job, cpus in sorted(self.lent_to.items())},
            "borrowed_from": {job: list(cpus) for job, cpus in sorted(self.borrowed_from.items())},
            "lends": self.lends,
        }

    @classmethod
    def from_dict(cls, data: object) -> JobRecord:
        """Read a record back.

        Raises:
            JobSpecError: for a record of the wrong shape.
        """
        if not isinstance(data, dict) or not isinstance(data.get("cgroup"), dict):
            raise JobSpecError(f"job record {data!r} is malformed")
        cgroup = data["cgroup"]
        version, root, parent = cgroup.get("version"), cgroup.get("root"), cgroup.get("parent")
        spec = data.get("spec")
        if (
            version not in ("v1", "v2")
            or not isinstance(root, str)
            or not isinstance(parent, str)
            or not isinstance(spec, dict)
        ):
            raise JobSpecError(f"job record {data!r} is malformed")
        uid, launcher = data.get("uid"), data.get("launcher")
        if uid is not None and type(uid) is not int:
            raise JobSpecError(f"job record {data!r} is malformed: uid {uid!r}")
        if launcher is not None and not (
            isinstance(launcher, list)
            and len(launcher) == 2
            and all(type(v) is int for v in launcher)
        ):
            raise JobSpecError(f"job record {data!r} is malformed: launcher {launcher!r}")
        lends = data.get("lends", False)  # absent in records older than START lends=1
        if type(lends) is not bool:
            raise JobSpecError(f"job record {data!r} is malformed: lends {lends!r}")
        return cls(
            JobSpec.from_dict(spec),
            version,
            root,
            parent,
            uid,
            Launcher(*launcher) if launcher is not None else None,
            _loans(data, "lent_to"),
            _loans(data, "borrowed_from"),
            lends,
        )


def _loans(data: Mapping[str, object], key: str) -> dict[str, tuple[int, ...]]:
    """A record's ``lent_to`` or ``borrowed_from`` (absent in records older than LEND)."""
    loans = data.get(key, {})
    if not isinstance(loans, dict):
        raise JobSpecError(f"job record {data!r} is malformed: {key} {loans!r}")
    out = {}
    for job, cpus in loans.items():
        if (
            not isinstance(job, str)
            or not isinstance(cpus, list)
            or not cpus
            or not all(type(c) is int and c >= 0 for c in cpus)
        ):
            raise JobSpecError(f"job record {data!r} is malformed: {key} {loans!r}")
        out[check_job_id(job)] = tuple(sorted(set(cpus)))
    return out


class JobStore:
    """The job records of one node, in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.jobs_dir = state_dir / "jobs"

    def _path(self, job: str, suffix: str) -> Path:
        return self.jobs_dir / f"{group_name(job)}{suffix}"

    def ensure(self) -> None:
        """Create the state directories (readable by all: jobs read their own record)."""
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        for directory in (self.state_dir, self.jobs_dir):
            with contextlib.suppress(PermissionError):
                directory.chmod(0o755)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the node's allocation lock (``flock`` on ``state_dir/lock``)."""
        self.ensure()
        fd = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def write(self, record: JobRecord) -> None:
        """Write a record atomically (a reader sees the old one or the new one)."""
        self.ensure()
        path = self._path(record.job, ".json")
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(record.to_dict(), sort_keys=True) + "\n")
        tmp.chmod(0o644)
        tmp.replace(path)

    def read(self, job: str) -> JobRecord | None:
        """The job's record, ``None`` when it has none.

        Raises:
            JobSpecError: for a record file that is not a record.
        """
        try:
            text = self._path(job, ".json").read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobSpecError(f"job record of {job} is not JSON: {exc}") from exc
        return JobRecord.from_dict(data)

    def require(self, job: str) -> JobRecord:
        """The job's record.

        Raises:
            JobStateError: when the job was not started on this node.
        """
        record = self.read(job)
        if record is None:
            raise JobStateError(
                f"job {job} was not started on this node (no record in {self.jobs_dir}); "
                "run 'coshare node job-start' first"
            )
        return record

    def jobs(self) -> list[str]:
        """Jobs that have a record."""
        if not self.jobs_dir.is_dir():
            return []
        names = (job_of_group(p.name[: -len(".json")]) for p in self.jobs_dir.glob("job-*.json"))
        return sorted(n for n in names if n is not None)

    def records(self) -> list[JobRecord]:
        """Every readable record (a record removed meanwhile is skipped)."""
        out = []
        for job in self.jobs():
            record = self.read(job)
            if record is not None:
                out.append(record)
        return out

    def remove(self, job: str) -> None:
        """Remove the job's record, kill reason, set-up error, freeze mark and task
        environment."""
        for suffix in (
            ".json",
            ".reason",
            ".error",
            ".frozen",
            TASK_ENV_SUFFIX,
            STARTED_SUFFIX,
            SHARED_SUFFIX,
        ):
            with contextlib.suppress(FileNotFoundError):
                self._path(job, suffix).unlink()

    def record_reason(self, job: str, reason: str) -> bool:
        """Record why coshare killed the job; only the first reason is kept.

        Returns:
            whether this call recorded it.
        """
        self.ensure()
        try:
            fd = os.open(self._path(job, ".reason"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(reason.replace("\n", " ") + "\n")
        return True

    def reason(self, job: str) -> str | None:
        """Why coshare killed the job, if it did."""
        try:
            return self._path(job, ".reason").read_text().strip() or None
        except FileNotFoundError:
            return None

    def record_error(self, job: str, error: str) -> None:
        """Record why the job's group could not be set up (a JOIN then says so)."""
        self.ensure()
        path = self._path(job, ".error")
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(error.replace("\n", " ") + "\n")
        tmp.chmod(0o644)
        tmp.replace(path)

    def record_task_env(self, job: str, lines: Sequence[str]) -> None:
        """Record what each of the job's tasks is told beside its group (``NAME=value``
        exports and ``print <text>`` lines; Slurm's TaskProlog prints them, see
        :func:`coshare.node.control.launcher.task_prolog`). Written after the job's record
        (:func:`coshare.node.lifecycle.job_start` clears old files)."""
        self.ensure()
        path = self._path(job, TASK_ENV_SUFFIX)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text("".join(" ".join(line.split()) + "\n" for line in lines))
        tmp.chmod(0o644)
        tmp.replace(path)

    def error(self, job: str) -> str | None:
        """Why the job's group could not be set up, if that failed."""
        try:
            return self._path(job, ".error").read_text().strip() or None
        except FileNotFoundError:
            return None

    def mark_started(self, job: str, at_s: float) -> None:
        """Record when the job started here; the caller holds :meth:`lock`. Every job with
        a record here then shares the node with it: each is marked shared (the new one too,
        when there are others)."""
        self.ensure()
        self._path(job, STARTED_SUFFIX).write_text(f"{at_s:.3f}\n")
        others = [j for j in self.jobs() if j != job]
        for name in others + ([job] if others else []):
            self._path(name, SHARED_SUFFIX).touch()

    def started_at(self, job: str) -> float | None:
        """When the job started here (``None``: not recorded, e.g. started by an older
        coshare)."""
        try:
            value = float(self._path(job, STARTED_SUFFIX).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return value if math.isfinite(value) else None

    def was_shared(self, job: str) -> bool:
        """Whether another coshare job ran here at some time of the job's run."""
        return self._path(job, SHARED_SUFFIX).exists()

    def mark_frozen(self, job: str, at_s: float) -> None:
        """Record that the job was frozen at ``at_s`` (epoch seconds)."""
        self.ensure()
        self._path(job, ".frozen").write_text(f"{at_s:.3f}\n")

    def clear_frozen(self, job: str) -> None:
        """Forget that the job was frozen (it was thawed)."""
        with contextlib.suppress(FileNotFoundError):
            self._path(job, ".frozen").unlink()

    def frozen_since(self, job: str) -> float | None:
        """When the job was frozen, ``None`` when it is not marked frozen (an unreadable mark
        counts as frozen since the epoch: it is thawed at the next check)."""
        try:
            text = self._path(job, ".frozen").read_text().strip()
        except FileNotFoundError:
            return None
        try:
            return float(text)
        except ValueError:
            return 0.0


def read_proc_cgroup(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The ``/proc/<pid>/cgroup`` text of a process, ``None`` when it is gone."""
    try:
        return (proc / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None


def job_of_pid(pid: int, cgroups: Cgroups, proc: Path = Path("/proc")) -> str | None:
    """The job whose group holds process ``pid`` (``None``: not in any job's group)."""
    text = read_proc_cgroup(pid, proc)
    return None if text is None else cgroups.job_of_proc(text)
