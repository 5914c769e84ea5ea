"""Nodes and their devices as ``sinfo --json`` (Slurm 22.05) shows them; pure parsers.

Devices are the node's GRES of one name (``gpu`` by default), numbered 0, 1, ... in the order
Slurm lists them, which is the order of ``gres.conf`` and of Slurm's own ``IDX`` numbers. A
device's memory and threads are not something Slurm knows: they come from coshare's
``device_kinds`` by the GRES *type*, e.g. ``Gres=gpu:phi5110p:2`` with
``device_kinds: {phi5110p: {memory_mib: 8192, threads: 240}}``.

Every number and name is checked against :mod:`coshare.ledger.bounds` and
:mod:`coshare.ledger.ids`; a
node whose record holds something else is left out of the cycle with a note naming it and the
field (:func:`coshare.ledger.book.read_node`), the other nodes are read as usual.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from coshare.ledger.book import read_node
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    BadValue,
    shorten,
    shorten_text,
)
from coshare.ledger.ids import MAX_TEXT_CHARS, checked_id, text_problem

from slurm_addon.jobs import number, parse_records, text

#: Base node states in which a node takes jobs.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
#: State flags that keep new jobs off a node.
BLOCKING_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "FAIL",
        "FAILING",
        "MAINTENANCE",
        "NOT_RESPONDING",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "INVALID_REG",
    }
)

#: One GRES entry (``gpu:phi5110p:2(S:0-1)``, ``gpumem:16G``), matched whole. The count has
#: at most 12 digits (a ``16G`` of memory is 16 x 2**30), so reading it costs nothing.
_GRES = re.compile(
    r"(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>[0-9]{1,12})[KMGTP]?(?:\(.*\))?"
)
_IDX = re.compile(r"\(IDX:(?P<idx>[^)]*)\)")
#: One part of a GRES index list (``0``, ``0-3``): ASCII digits only (``str.isdigit`` is true
#: for digits of every script), few enough to stay below :data:`MAX_DEVICES`.
_INDEX_RANGE = re.compile(r"(?P<low>[0-9]{1,4})(?:-(?P<high>[0-9]{1,4}))?")


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
        """``(device id, GRES type)`` of each device of GRES ``gres_name``, in Slurm's order.

        Raises:
            BadValue: more than :data:`~coshare.ledger.bounds.MAX_DEVICES` of them (``gpu:99999999``
                would otherwise build a list that large).
        """
        total = sum(entry.count for entry in self.gres if entry.name == gres_name)
        if total > MAX_DEVICES:
            raise BadValue("gres", f"{gres_name}:{total}", f"at most {MAX_DEVICES} devices")
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
    skipped with a note.

    Raises:
        BadValue: the string holds control characters or is longer than
            :data:`~coshare.ledger.ids.MAX_TEXT_CHARS`.
    """
    entries = []
    if expression in ("", "(null)", "N/A"):
        return ()
    problem = text_problem(expression, MAX_TEXT_CHARS)
    if problem is not None:
        raise BadValue("gres", expression, "a GRES list as Slurm prints it", problem)
    for part in split_top_level(expression):
        match = _GRES.fullmatch(part)
        if match is None:
            if notes is not None:
                notes.append(f"cannot read GRES {shorten(part)}; ignored")
            continue
        entries.append(GresEntry(match["name"], match["type"] or "", int(match["count"])))
    return tuple(entries)


def parse_gres_indexes(detail: str, gres_name: str) -> tuple[str, ...]:
    """Device ids of one ``gres_detail`` entry of a job (``gpu:phi:2(IDX:0-1)`` -> 0, 1).

    Raises:
        BadValue: an index that is not ASCII digits, a range backwards, or an index at or
            above :data:`~coshare.ledger.bounds.MAX_DEVICES` (``IDX:0-999999999`` would otherwise
            build a billion ids).
    """
    if detail.split(":", 1)[0].split("(", 1)[0] != gres_name:
        return ()
    match = _IDX.search(detail)
    if match is None or match["idx"] in ("", "N/A"):
        return ()
    ids: list[str] = []
    for part in match["idx"].split(","):
        found = _INDEX_RANGE.fullmatch(part)
        low = int(found["low"]) if found else 0
        high = int(found["high"] or low) if found else 0
        if found is None or high < low or high >= MAX_DEVICES:
            raise BadValue(
                "gres_detail",
                detail,
                f"device indexes 0..{MAX_DEVICES - 1} as Slurm prints them (0-1,3)",
                f"has an unreadable index {shorten_text(part)!r}",
            )
        ids.extend(str(i) for i in range(low, high + 1))
    return tuple(ids)


def parse_node(record: Mapping[str, object], notes: list[str] | None = None) -> SlurmNode:
    """One node record of ``sinfo --json`` (unreadable GRES entries go to ``notes``).

    Raises:
        BadValue: its name is not an id, its cpus or memory are out of :mod:`coshare.ledger.bounds`,
            or its GRES string holds control characters.
    """
    name = checked_id("name", record.get("name"))
    flags = record.get("state_flags")
    partitions = record.get("partitions")
    memory_mib = number(
        record.get("real_memory"), 0, field="real_memory", maximum=MAX_MEMORY_MIB, capacity=True
    )
    unread: list[str] = []
    gres = parse_gres(text(record.get("gres")), unread)
    if notes is not None:
        notes.extend(f"node {name}: {note}" for note in unread)
    return SlurmNode(
        name=name,
        state=text(record.get("state")).lower(),
        flags=tuple(str(f).upper() for f in flags) if isinstance(flags, list) else (),
        cpus=number(record.get("cpus"), 0, field="cpus", maximum=MAX_CORES, capacity=True),
        memory_mib=memory_mib,
        gres=gres,
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, list) else (),
        reason=text(record.get("reason")),
        extra=text(record.get("extra")),
    )


def _read_record(record: Mapping[str, object], notes: list[str]) -> SlurmNode | str:
    """A node record, or its name with a note naming the node and the field
    (:func:`coshare.ledger.book.read_node`) when it has a name but holds a bad value."""
    name = checked_id("name", record.get("name"))  # no name: parse_records notes the index
    node = read_node(name, lambda: parse_node(record, notes), notes)
    return name if node is None else node


def parse_sinfo_json(output: str, notes: list[str] | None = None) -> list[SlurmNode]:
    """Every node of ``sinfo --json``, once each (sinfo repeats a node per partition);
    unreadable records are skipped with a note, and a node one of whose records is
    unreadable is left out whole, noted once.

    Raises:
        SlurmOutputError: the output as a whole is unreadable.
    """
    found: list[str] = []
    read = parse_records(output, "sinfo --json", "nodes", "node", _read_record, found)
    left_out = {r for r in read if isinstance(r, str)}
    nodes: dict[str, SlurmNode] = {}
    for node in read:
        if isinstance(node, SlurmNode) and node.name not in left_out:
            nodes.setdefault(node.name, node)
    if notes is not None:
        notes.extend(dict.fromkeys(found))  # a node repeated per partition: one note
    return list(nodes.values())
