"""A process as the kernel describes it in /proc, and the parsers of those files (pure).

The node daemon decides who may start and join jobs from these facts, never from what a
client writes (:mod:`coshare.node.control.trust`); :mod:`coshare.node.procfs` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessInfo:
    """One process, as /proc shows it.

    Attributes:
        pid: the process.
        ppid: its parent (0 for init and kernel threads).
        uid: its real uid; ``euid`` its effective uid.
        start_ticks: when it started (``stat`` field 22, clock ticks after boot): with the pid,
            it names the process even after the pid is reused.
        exe: its executable's path as the reader's root sees it (a chroot's program shows
            the chroot's path); ``None`` when it cannot be read (a kernel thread).
    """

    pid: int
    ppid: int
    uid: int
    euid: int
    start_ticks: int
    exe: str | None

    @property
    def program(self) -> str | None:
        """The executable's basename."""
        return self.exe.rsplit("/", 1)[-1] if self.exe else None


def parse_stat(text: str) -> tuple[str, int, int]:
    """``(state, ppid, start_ticks)`` from a ``/proc/PID/stat`` line.

    The command name (field 2) is in parentheses and may itself hold spaces and ``)``, so the
    fields are counted from the last ``)`` (proc(5)).

    Raises:
        ValueError: for a line of another shape.
    """
    try:
        rest = text.rsplit(")", 1)[1].split()
        # rest[0] is field 3 (state): field N is rest[N - 3].
        return rest[0], int(rest[1]), int(rest[19])
    except IndexError as exc:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}") from exc


def parse_uids(status: str) -> tuple[int, int]:
    """``(real uid, effective uid)`` from ``/proc/PID/status``.

    Raises:
        ValueError: when there is no ``Uid:`` line.
    """
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]), int(fields[2])
    raise ValueError("no Uid line in /proc/PID/status")
