"""What Slurm gave a job on a node, and where its error file is: pure parsers for the
Prolog and Epilog.

The Prolog asks ``squeue --noheader --jobs=<id> --Format=tres-alloc:0|,admin_comment:0``
(one small RPC) for the job's allocated TRES and its AdminComment (the placement); the
Epilog asks ``scontrol show job <id>`` for its error file, where Slurm has already replaced
the ``%j``-style patterns the Prolog's environment still shows.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The squeue --Format of :func:`parse_allocation_line` ('|' ends the first field).
ALLOCATION_FORMAT = "tres-alloc:0|,admin_comment:0"
#: A TRES cpu count: ASCII digits (``str.isdigit`` is true for ``²``, which ``int`` refuses).
_CPUS = re.compile(r"[0-9]{1,7}")
_MEMORY = re.compile(r"([0-9]*\.?[0-9]+)([KMGTP]?)")
_UNIT_MIB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


@dataclass(frozen=True)
class Allocation:
    """A job's share of its node, as Slurm allocated it.

    Attributes:
        cpus: CPUs allocated (the job's cores; coshare places single-node jobs only).
        memory_mib: memory allocated (rounded up to MiB), ``None`` when Slurm tracks none.
    """

    cpus: int | None
    memory_mib: int | None


def parse_tres(text: str) -> Allocation:
    """Read ``cpu=2,mem=100M,node=1,billing=2`` (Slurm's TRES string).

    Unknown or unreadable entries are left out: a job with no readable memory gets no
    memory limit rather than a wrong one.
    """
    cpus: int | None = None
    memory: int | None = None
    for item in text.strip().split(","):
        key, _, value = item.partition("=")
        if key == "cpu" and _CPUS.fullmatch(value) and int(value) > 0:
            cpus = int(value)
        elif key == "mem":
            match = _MEMORY.fullmatch(value)
            if match:
                mib = math.ceil(float(match.group(1)) * _UNIT_MIB[match.group(2)])
                memory = mib if mib > 0 else None
    return Allocation(cpus, memory)


def parse_allocation_line(line: str) -> tuple[Allocation, str]:
    """Split the output of :data:`ALLOCATION_FORMAT` into the allocation and AdminComment
    (``(null)`` when it has none reads as empty)."""
    tres, _, admin = line.strip().partition("|")
    admin = admin.strip()
    return parse_tres(tres), "" if admin == "(null)" else admin


def parse_stderr_path(show_job: str) -> str | None:
    """The ``StdErr=`` path of ``scontrol show job`` output (the rest of its line), if any."""
    for line in show_job.splitlines():
        stripped = line.strip()
        if stripped.startswith("StdErr="):
            path = stripped[len("StdErr=") :]
            return path if path.startswith("/") else None
    return None
