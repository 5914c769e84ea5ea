"""What both cgroup versions share: the ports, file helpers and the kill loop.

A job's group is driven through :class:`JobGroup`; a cgroup version is a :class:`Cgroups`
driver rooted at a ``root: Path`` (the real mount, or a temp dir for layout tests). Control
files are opened without ``O_CREAT``: a missing file means the kernel lacks the feature, and
that is reported as such instead of silently creating a plain file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol

from coshare.errors import CgroupError, JobSpecError

Feature = Literal["cpuset", "memory", "freeze"]
"""What a job can ask of its group: own CPUs, a memory limit, freeze/thaw. Killing a group as
a whole needs nothing more (v2 ``cgroup.kill``, else freeze and signal, else a signal loop)."""

FEATURES: tuple[Feature, ...] = ("cpuset", "memory", "freeze")


class JobGroup(Protocol):
    """One job's cgroup: one directory per v1 hierarchy, or one v2 directory.

    Contract: ``add`` moves a whole process (all its threads) in; its children are born
    inside. ``kill`` leaves the group empty or raises :class:`~coshare.errors.CgroupError`;
    ``remove`` kills first and leaves no directory behind; both are idempotent.
    """

    job: str

    def directories(self) -> tuple[Path, ...]:
        """The group's directories (one per v1 hierarchy, one for v2)."""
        ...

    def procs_files(self) -> tuple[Path, ...]:
        """The ``cgroup.procs`` files a process writes its pid into to join the group."""
        ...

    def exists(self) -> bool:
        """Whether the group's directories exist."""
        ...

    def add(self, pid: int) -> None:
        """Move process ``pid`` (with all its threads) into the group."""
        ...

    def pids(self) -> tuple[int, ...]:
        """The processes in the group and its sub-groups."""
        ...

    def task_ids(self) -> tuple[int, ...]:
        """The tasks (threads) in the group and its sub-groups: v1 ``tasks``, v2
        ``cgroup.threads``; what the run-queue delay is summed over."""
        ...

    def freeze(self) -> None:
        """Stop every process of the group; returns once they are all frozen."""
        ...

    def thaw(self) -> None:
        """Let the group's processes run again."""
        ...

    def is_frozen(self) -> bool:
        """Whether the group is frozen."""
        ...

    def kill(self) -> None:
        """SIGKILL every process of the group, new children included; wait until empty."""
        ...

    def remove(self) -> None:
        """Kill what is left and remove the group's directories."""
        ...

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for its memory limit."""
        ...

    def is_under_oom(self) -> bool:
        """Whether the group's tasks wait at its memory limit (v1 with the OOM killer off)."""
        ...

    def memory_usage_bytes(self) -> int | None:
        """Host memory the group uses now (``None`` without the memory controller)."""
        ...

    def cpus_text(self) -> str:
        """The CPUs the group may run on, in the kernel's list format."""
        ...

    def set_cpus(self, cpus: tuple[int, ...]) -> None:
        """Write the group's CPUs (``cpuset.cpus``; at least one) while its processes run: the
        kernel moves them onto the new CPUs (harvest: LEND and RECLAIM).

        Raises:
            CgroupUnavailable: the group has no cpuset (the file named).
            CgroupError: the kernel refused (e.g. CPUs outside the parent's).
        """
        ...

    def cpu_usage_s(self) -> float:
        """CPU seconds the group's processes have used, exited ones included (v1
        ``cpuacct.usage``, v2 ``cpu.stat`` ``usage_usec``); raises
        :class:`~coshare.errors.CgroupUnavailable` where the kernel does not account it."""
        ...


class Cgroups(Protocol):
    """One cgroup version on this machine, with coshare's parent group under ``root``.

    Contract: ``missing`` names, precisely, every requested feature the kernel does not offer;
    ``create`` raises :class:`~coshare.errors.CgroupUnavailable` instead of creating a group
    that cannot enforce what was asked.
    """

    version: Literal["v1", "v2"]
    root: Path
    parent: str

    def missing(self, features: Iterable[Feature]) -> list[str]:
        """One sentence per requested feature this machine lacks (empty: all there)."""
        ...

    def require(self, features: Iterable[Feature]) -> None:
        """Raise :class:`~coshare.errors.CgroupUnavailable` naming the first missing feature."""
        ...

    def create(self, job: str, cpus: tuple[int, ...], memory_mib: int | None) -> JobGroup:
        """Create the job's group with its CPUs (empty: the parent's) and memory limit."""
        ...

    def open(self, job: str) -> JobGroup:
        """The job's group (it may not exist)."""
        ...

    def jobs(self) -> list[str]:
        """Jobs that have a group under the parent."""
        ...

    def parent_directories(self) -> tuple[Path, ...]:
        """coshare's parent group: one directory per v1 hierarchy, one for v2."""
        ...

    def allowed_cpus(self) -> tuple[int, ...]:
        """The CPUs coshare's parent group may hand out."""
        ...

    def job_of_proc(self, proc_cgroup: str) -> str | None:
        """The job whose group holds a process, from its ``/proc/PID/cgroup`` text."""
        ...

    def procs_files_of(self, proc_cgroup: str) -> tuple[Path, ...]:
        """The ``cgroup.procs`` files of the groups, in coshare's hierarchies, that a
        ``/proc/PID/cgroup`` text names: writing a pid into them puts that process where the
        other one is."""
        ...

    def describe(self) -> list[str]:
        """Lines for ``coshare node check``: what this version offers here."""
        ...


def check_parent(parent: str) -> str:
    """Return a usable relative parent path (``coshare``, ``batch/coshare``).

    Raises:
        JobSpecError: for an absolute path, ``..``, or an empty one.
    """
    parts = PurePosixPath(parent).parts
    if not parts or parent.startswith("/") or any(p in (".", "..") for p in parts):
        raise JobSpecError(f"cgroup parent {parent!r} must be a relative path without '..'")
    return "/".join(parts)


def read_text(path: Path) -> str:
    """Read a control file.

    Raises:
        CgroupError: with the path and the system's reason.
    """
    try:
        return path.read_text()
    except OSError as exc:
        raise CgroupError(str(path), "read", exc.strerror or str(exc)) from exc


def write_text(path: Path, value: str) -> None:
    """Write a control file in one ``write(2)``, without creating it.

    Raises:
        CgroupError: with the path, the value and the system's reason.
    """
    data = value.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # O_TRUNC: cgroupfs ignores it
    except OSError as exc:
        raise CgroupError(str(path), f"write {value!r} to", exc.strerror or str(exc)) from exc
    try:
        os.write(fd, data)
    except OSError as exc:
        raise CgroupError(str(path), f"write {value!r} to", exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)


def read_pids(procs: Path) -> list[int]:
    """The ids listed in a ``cgroup.procs`` (or ``tasks``, ``cgroup.threads``) file; none when
    the group is gone."""
    try:
        text = procs.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # the group was removed while we read it
            return []
        raise CgroupError(str(procs), "read", exc.strerror or str(exc)) from exc
    return [int(line) for line in text.split() if line.isdigit()]


def read_keyed(path: Path) -> dict[str, int]:
    """Parse a flat keyed file (``memory.events``, ``cgroup.events``, ``oom_control``)."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise CgroupError(str(path), "read", exc.strerror or str(exc)) from exc
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def subtree(directory: Path) -> list[Path]:
    """``directory`` and every sub-group below it, deepest last."""
    out = [directory]
    i = 0
    while i < len(out):
        with contextlib.suppress(FileNotFoundError):
            out.extend(sorted(p for p in out[i].iterdir() if p.is_dir()))
        i += 1
    return out


def wait_until(done: Callable[[], bool], timeout_s: float, what: str, path: Path) -> None:
    """Poll ``done`` (1 ms, backing off to 50 ms) until true.

    Raises:
        CgroupError: when ``timeout_s`` passes first, saying what did not happen.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while not done():
        if time.monotonic() > deadline:
            raise CgroupError(str(path), what, f"not done after {timeout_s:g} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def signal_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to each pid; a process that is already gone is fine."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def remove_dirs(directory: Path, timeout_s: float) -> None:
    """Remove a group and its sub-groups, deepest first.

    A group whose last process just died can refuse ``rmdir`` with EBUSY for a moment while
    the kernel finishes tearing the tasks down, so EBUSY is retried until ``timeout_s``.

    Raises:
        CgroupError: when a directory is still busy (or not empty) after ``timeout_s``.
    """
    for path in reversed(subtree(directory)):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise CgroupError(str(path), "remove", exc.strerror or str(exc)) from exc
                time.sleep(0.01)
