"""Nodes and their devices as ``sinfo --json`` (Slurm 22.05) shows them; pure parsers.

Devices are the node's GRES of one name (``gpu`` by default), numbered 0, 1, ... in the order
Slurm lists them, which is the order of ``gres.conf`` and of Slurm's own ``IDX`` numbers. A
device's memory and threads are not something Slurm knows: they come from coshare's
``device_kinds`` by the GRES *type*, e.g. ``Gres=gpu:phi5110p:2`` with
``device_kinds: {phi5110p: {memory_mib: 8192, threads: 240}}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_addon.jobs import number, parse_records, text

#: Base node states in which a node takes jobs.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
#: State flags that keep new jobs off a node.
BLOCKING_FLAGS = frozenset({
    "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINTENANCE", "NOT_RESPONDING",
    "POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "REBOOT_REQUESTED",
    "REBOOT_ISSUED", "INVALID_REG",
})  # fmt: skip

_GRES = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)[KMGTP]?(?:\(.*\))?$")
_IDX = re.compile(r"\(IDX:(?P<idx>[^)]*)\)")


@dataclass(frozen=True)
class GresEntry:
    """One GRES of a node: ``gpu:phi5110p:2`` is name ``gpu``, type ``phi5110p``, count 2."""

    name: str
    type: str
    count: int


@dataclass(frozen=True)
class SlurmNode:
    """What coshare needs of one node.

    Attributes:
        name: the node name.
        state: Slurm's base state (``idle``, ``mixed``, ``down``, ...).
        flags: Slurm's state flags (``DRAIN``, ``NOT_RESPONDING``, ...).
        cpus: CPUs it offers.
        memory_mib: its RealMemory.
        gres: its GRES.
        partitions: the partitions it belongs to.
        reason: why it is down or drained, if it is.
        extra: its ``Extra`` field: the node facts coshare's publisher wrote there
            (``scontrol update NodeName=<node> Extra=...``, operators only), carried as text.
    """

    name: str
    state: str
    flags: tuple[str, ...] = ()
    cpus: int = 0
    memory_mib: int = 0
    gres: tuple[GresEntry, ...] = ()
    partitions: tuple[str, ...] = ()
    reason: str = ""
    extra: str = ""

    @property
    def usable(self) -> bool:
        """Whether Slurm would start new jobs on it."""
        return self.state in USABLE_STATES and not (set(self.flags) & BLOCKING_FLAGS)

    def devices(self, gres_name: str) -> list[tuple[str, str]]:
        """``(device id, GRES type)`` of each device of GRES ``gres_name``, in Slurm's order."""
        out: list[tuple[str, str]] = []
        for entry in self.gres:
            if entry.name == gres_name:
                first = len(out)
                out.extend((str(first + i), entry.type) for i in range(entry.count))
        return out


def split_top_level(expression: str) -> list[str]:
    """Split at commas outside parentheses (``gpu:a:2(S:0,1),gpu:b:1``)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in expression:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_gres(expression: str, notes: list[str] | None = None) -> tuple[GresEntry, ...]:
    """A node's GRES string (``gpu:phi5110p:2(S:0-1),gpumem:16G``); unreadable entries are
    skipped with a note."""
    entries = []
    if expression in ("", "(null)", "N/A"):
        return ()
    for part in split_top_level(expression):
        match = _GRES.match(part)
        if match is None:
            if notes is not None:
                notes.append(f"cannot read GRES {part!r}; ignored")
            continue
        entries.append(GresEntry(match["name"], match["type"] or "", int(match["count"])))
    return tuple(entries)


def parse_gres_indexes(
    detail: str, gres_name: str, notes: list[str] | None = None
) -> tuple[str, ...]:
    """Device ids of one ``gres_detail`` entry of a job (``gpu:phi:2(IDX:0-1)`` -> 0, 1);
    unreadable indexes are skipped with a note."""
    if detail.split(":", 1)[0].split("(", 1)[0] != gres_name:
        return ()
    match = _IDX.search(detail)
    if match is None or match["idx"] in ("", "N/A"):
        return ()
    ids: list[str] = []
    for part in match["idx"].split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            if notes is not None:
                notes.append(f"cannot read GRES index {part!r} of {detail!r}; ignored")
            continue
        ids.extend(str(i) for i in range(int(low), int(high if dash else low) + 1))
    return tuple(ids)


def parse_node(record: Mapping[str, object], notes: list[str] | None = None) -> SlurmNode:
    """One node record of ``sinfo --json`` (unreadable GRES entries go to ``notes``).

    Raises:
        ValueError: the record has no name.
    """
    name = text(record.get("name"))
    if not name:
        raise ValueError("node record without name")
    flags = record.get("state_flags")
    partitions = record.get("partitions")
    return SlurmNode(
        name=name,
        state=text(record.get("state")).lower(),
        flags=tuple(str(f).upper() for f in flags) if isinstance(flags, list) else (),
        cpus=number(record.get("cpus"), 0),
        memory_mib=number(record.get("real_memory"), 0),
        gres=parse_gres(text(record.get("gres")), notes),
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, list) else (),
        reason=text(record.get("reason")),
        extra=text(record.get("extra")),
    )


def parse_sinfo_json(output: str, notes: list[str] | None = None) -> list[SlurmNode]:
    """Every node of ``sinfo --json``, once each (sinfo repeats a node per partition);
    unreadable records are skipped with a note.

    Raises:
        SlurmOutputError: the output as a whole is unreadable.
    """
    nodes: dict[str, SlurmNode] = {}
    for node in parse_records(output, "sinfo --json", "nodes", "node", parse_node, notes):
        nodes.setdefault(node.name, node)
    return list(nodes.values())
