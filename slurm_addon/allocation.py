"""What Slurm gave a job on a node, and where its error file is: pure parsers for the
Prolog and Epilog.

The Prolog asks ``squeue --noheader --jobs=<id> --Format=tres-alloc:0|,admin_comment:0``
(one small RPC) for the job's allocated TRES and its AdminComment (the placement); for a
multi-node job, whose TRES are the sums over its nodes, it reads this node's share from
``scontrol show job -d <id>`` (:func:`parse_node_allocation`); the Epilog asks
``scontrol show job <id>`` for its error file, where Slurm has already replaced the
``%j``-style patterns the Prolog's environment still shows.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import hostlist

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
        cpus: CPUs allocated (on this node).
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


_DETAIL = re.compile(r"^\s*Nodes=(\S+) CPU_IDs=(\S*) Mem=([0-9]+)")


def _count_ids(text: str) -> int | None:
    """How many CPU ids a list like ``0-1,4`` names; ``None`` when unreadable."""
    count = 0
    for item in text.split(","):
        low, dash, high = item.partition("-")
        if not (_CPUS.fullmatch(low) and (not dash or _CPUS.fullmatch(high))):
            return None
        count += (int(high) - int(low) + 1) if dash else 1
    return count if count > 0 else None


def parse_node_allocation(show_job_detail: str, node: str) -> Allocation | None:
    """The cores and memory one node holds for a job, from ``scontrol show job -d`` (lines
    ``Nodes=csl-n[1-2] CPU_IDs=0-1 Mem=512 GRES=``, one per group of nodes with the same
    allocation); ``None`` when no line names the node."""
    for line in show_job_detail.splitlines():
        match = _DETAIL.match(line)
        if match is None:
            continue
        try:
            names = hostlist.expand_hostlist(match.group(1))
        except hostlist.BadHostlist:
            continue
        if node in names:
            memory = int(match.group(3))
            return Allocation(_count_ids(match.group(2)), memory if memory > 0 else None)
    return None
