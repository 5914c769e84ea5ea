"""Reading processes from ``/proc`` (proc(5)) into :class:`~coshare.node.process.ProcessInfo`.

A process that is gone, or vanishes while it is read, reads as ``None``.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterable, Iterator
from pathlib import Path

from coshare.errors import Unsupported
from coshare.node.load import TaskKey, parse_schedstat
from coshare.node.process import ProcessInfo, parse_stat, parse_uids

PROC = Path("/proc")
#: readlink(2) of /proc/PID/exe appends this when the file was replaced (a package upgrade).
_DELETED = " (deleted)"


def read_process(pid: int, proc: Path = PROC) -> ProcessInfo | None:
    """The facts of process ``pid``, or ``None`` when it does not exist (any more) or is a
    zombie (it runs nothing more)."""
    if pid <= 0:
        return None
    base = proc / str(pid)
    try:
        state, ppid, start = parse_stat((base / "stat").read_text())
        uid, euid = parse_uids((base / "status").read_text())
    except (OSError, ValueError):
        return None
    if state in ("Z", "X"):
        return None
    try:
        exe: str | None = os.readlink(base / "exe")
    except OSError:
        exe = None
    if exe is not None and exe.endswith(_DELETED):
        exe = exe[: -len(_DELETED)]
    return ProcessInfo(pid, ppid, uid, euid, start, exe)


def read_run_delays(tids: Iterable[int], proc: Path = PROC) -> dict[TaskKey, int]:
    """Each task's run-queue delay in ns (``/proc/<tid>/schedstat``, second field), by task
    (id and start time). A task that is gone, or ends while it is read, is left out.

    Raises:
        Unsupported: a task's ``/proc/<tid>`` is there but its ``schedstat`` is not (a kernel
            built without scheduler statistics, ``CONFIG_SCHED_INFO``), or holds what this
            code does not read; naming the path.
    """
    out: dict[TaskKey, int] = {}
    for tid in tids:
        base = proc / str(tid)
        try:
            text = (base / "schedstat").read_text()
        except FileNotFoundError:
            if base.is_dir():
                raise Unsupported(
                    "run-queue delay",
                    str(base / "schedstat"),
                    "the kernel keeps no per-task scheduler statistics (CONFIG_SCHED_INFO)",
                ) from None
            continue
        except OSError:  # ESRCH: ended while read
            continue
        try:
            delay = parse_schedstat(text)
        except ValueError as exc:
            raise Unsupported("run-queue delay", str(base / "schedstat"), str(exc)) from None
        try:
            _, _, start = parse_stat((base / "stat").read_text())
        except (OSError, ValueError):  # ended while read
            continue
        out[(tid, start)] = delay
    return out


def read_cmdline(pid: int, proc: Path = PROC) -> list[str]:
    """The process's command line (what it set, for daemons that retitle themselves)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_alive(pid: int, start_ticks: int, proc: Path = PROC) -> bool:
    """Whether the process that started at ``start_ticks`` with this pid still runs."""
    info = read_process(pid, proc)
    return info is not None and info.start_ticks == start_ticks


def list_pids(proc: Path = PROC) -> list[int]:
    """Every process id now."""
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(pid: int) -> Iterator[int | None]:
    """A pidfd of process ``pid`` (pidfd_open(2)) for the ``with`` block; ``None`` when it
    is gone. Unlike the pid, the pidfd never comes to name another process: see
    :func:`has_exited`."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def has_exited(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has exited (the pidfd polls readable, pidfd_open(2)).

    While it has not, its pid cannot have been freed, so the pid still names it: a check by
    pid made after the pidfd was opened, and found true after the check, held for it.
    """
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))
