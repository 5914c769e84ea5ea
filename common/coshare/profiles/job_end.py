"""The job-end record: what a node measured of one finished job, for the profiles learned
from normal runs (:mod:`coshare.profiles.learning`).

At a job's end on a node (Slurm's Epilog, before the job's group is removed) the node
helpers write one record per job and node into the job-end spool, ``node.job_end_dir``::

    {"v": 1, "job": "123", "node": "n1", "program": "MG", "scale": 2, "nodes": 2,
     "started_at": 1700000000.0, "ended_at": 1700000412.3, "cpu_s": 6540.1,
     "alone": true, "ipc": null, "membw_gbps": null,
     "unsupported": {"ipc": "unsupported: ...", "membw_gbps": "unsupported: ..."}}

``cpu_s`` is the CPU time of the job's cgroup (v1 ``cpuacct.usage``, v2 ``cpu.stat``
``usage_usec``); ``alone`` says no other coshare job had a group on the node at any time of
the job's run; ``membw_gbps`` is the job's resctrl group's MBM bytes over its run time where
it has one; each value not measured says why (``unsupported: <what>: <why> (<path>)``). The
planner's cycle reads the spool (``policy.sns.learn_from``: the same directory, on a file
system the nodes and the planner share), puts a job's records together once every node of
it has written one, updates the learned profiles and removes the records
(:mod:`coshare.profiles.learn_cycle`). No connection from the planner to a node.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coshare.ledger.bounds import MAX_TIME_S
from coshare.profiles.learning import MAX_CPU_S, Run
from coshare.profiles.programs import PROGRAM_NAME, SCALES

VERSION = 1
#: A job id or node name as it may appear in a file name (no ``/``, no ``@``).
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
#: The most nodes one job's records may name.
MAX_NODES = 4096


@dataclass(frozen=True)
class NodeEnd:
    """One node's record of one finished job (see the module docstring)."""

    job: str
    node: str
    program: str
    scale: int
    nodes: int
    started_at: float
    ended_at: float
    alone: bool
    cpu_s: float | None = None
    ipc: float | None = None
    membw_gbps: float | None = None
    unsupported: Mapping[str, str] = field(default_factory=dict)

    @property
    def file_name(self) -> str:
        """``<job>@<node>.json``."""
        return f"{self.job}@{self.node}.json"


def end_to_json(end: NodeEnd) -> dict[str, Any]:
    """The record as written."""
    return {
        "v": VERSION,
        "job": end.job,
        "node": end.node,
        "program": end.program,
        "scale": end.scale,
        "nodes": end.nodes,
        "started_at": end.started_at,
        "ended_at": end.ended_at,
        "cpu_s": end.cpu_s,
        "alone": end.alone,
        "ipc": end.ipc,
        "membw_gbps": end.membw_gbps,
        "unsupported": dict(sorted(end.unsupported.items())),
    }


class EndRecordError(ValueError):
    """A job-end record that cannot be used; the message names the file and the field."""


def _num(data: Mapping[str, Any], key: str, where: str, low: float, high: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise EndRecordError(f"{where}: {key}: want a number in [{low:g}, {high:g}]")
    return float(value)


def parse_end(data: object, where: str) -> NodeEnd:
    """Check a decoded job-end record.

    Raises:
        EndRecordError: naming ``where`` and the first bad field.
    """
    if not isinstance(data, dict):
        raise EndRecordError(f"{where}: (top level): not a JSON object")
    if data.get("v") != VERSION:
        raise EndRecordError(f"{where}: v: want {VERSION}")
    job, node = data.get("job"), data.get("node")
    for key, value in (("job", job), ("node", node)):
        if not isinstance(value, str) or _TOKEN.fullmatch(value) is None:
            raise EndRecordError(f"{where}: {key}: want 1-128 of A-Z a-z 0-9 . _ + -")
    program = data.get("program")
    if not isinstance(program, str) or PROGRAM_NAME.fullmatch(program) is None:
        raise EndRecordError(
            f"{where}: program: want 1-64 of A-Z a-z 0-9 _ . - (as CoshareProgram)"
        )
    scale = data.get("scale")
    if isinstance(scale, bool) or scale not in SCALES:
        raise EndRecordError(f"{where}: scale: want one of {', '.join(map(str, SCALES))}")
    nodes = data.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise EndRecordError(f"{where}: nodes: want an integer in [1, {MAX_NODES}]")
    started = _num(data, "started_at", where, 0, MAX_TIME_S)
    ended = _num(data, "ended_at", where, 0, MAX_TIME_S)
    if started is None or ended is None or ended < started:
        raise EndRecordError(f"{where}: started_at, ended_at: want two times, the end not first")
    alone = data.get("alone")
    if not isinstance(alone, bool):
        raise EndRecordError(f"{where}: alone: want true or false")
    unsupported = data.get("unsupported", {})
    if not isinstance(unsupported, dict) or not all(
        k in ("cpu_s", "ipc", "membw_gbps") and isinstance(v, str) and len(v) <= 1024
        for k, v in unsupported.items()
    ):
        raise EndRecordError(f"{where}: unsupported: want cpu_s, ipc, membw_gbps to text")
    assert isinstance(job, str) and isinstance(node, str)
    return NodeEnd(
        job,
        node,
        program,
        int(scale),
        nodes,
        started,
        ended,
        alone,
        _num(data, "cpu_s", where, 0, MAX_CPU_S),
        _num(data, "ipc", where, 0, 1e3),
        _num(data, "membw_gbps", where, 0, 1e5),
        dict(unsupported),
    )


def combine(parts: Sequence[NodeEnd]) -> Run:
    """One job's run from its nodes' records: the longest node's run time, the CPU time of
    all (``None`` if a node could not measure it), alone only when alone on every node, the
    mean IPC and bandwidth per node where measured."""
    first = parts[0]
    cpu = [p.cpu_s for p in parts]
    ipc = [p.ipc for p in parts if p.ipc is not None]
    membw = [p.membw_gbps for p in parts if p.membw_gbps is not None]
    unsupported: dict[str, str] = {}
    for p in parts:
        for key, why in p.unsupported.items():
            unsupported.setdefault(key, f"{p.node}: {why}")
    return Run(
        first.job,
        first.program,
        first.scale,
        max(p.ended_at - p.started_at for p in parts),
        all(p.alone for p in parts),
        math.fsum(c for c in cpu if c is not None) if all(c is not None for c in cpu) else None,
        math.fsum(ipc) / len(ipc) if ipc else None,
        math.fsum(membw) / len(membw) if membw else None,
        {
            k: v
            for k, v in unsupported.items()
            if (k == "ipc" and not ipc) or (k == "membw_gbps" and not membw)
        },
    )
