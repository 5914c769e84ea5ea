"""Pure builders of the ClassAd text coshare sends to the schedd.

Every value that comes from a job or machine ad (a node name, device ids, a hold reason) goes
through :func:`literal`, i.e. ``classad2.quote``, which escapes quotes and backslashes: a node
named ``n1" || true || "`` becomes one string literal, never an expression. Job ids are
checked against ``cluster.proc`` before they enter a constraint. Nothing here talks to
HTCondor.

Node names and device ids are written only where :mod:`condor_addon.names` says they can be
(the rule the reader applies too); anything else raises :class:`~coshare.errors.UnsafeValue`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import classad2
from coshare.errors import UnsafeValue

from condor_addon import attributes as A
from condor_addon.edits import hold_reason
from condor_addon.names import device_id_problem, node_name_problem

__all__ = [
    "UNDEFINED",
    "devices_value",
    "hold_reason",
    "idle_managed",
    "job_clause",
    "literal",
    "node_devices_value",
    "node_value",
    "nodes_value",
    "time_value",
]

_JOB_ID = re.compile(r"^([0-9]+)\.([0-9]+)$")

#: ClassAd's undefined: written to close a job's gate (no node placed).
UNDEFINED = "undefined"


def literal(text: str) -> str:
    """``text`` as a ClassAd string literal (quoted and escaped).

    NUL characters are dropped: ClassAd strings are C strings (no ad can hold one).
    """
    return str(classad2.quote(text.replace("\x00", "")))


def _node(node: str) -> str:
    problem = node_name_problem(node)
    if problem is not None:
        raise UnsafeValue(f"cannot write the node name {node!r}: it {problem}")
    return literal(node)


def _devices(devices: Sequence[str]) -> str:
    for device in devices:
        problem = device_id_problem(device)
        if problem is not None:
            raise UnsafeValue(f"cannot write the device id {device!r}: it {problem}")
    return literal(",".join(devices))


def node_value(node: str) -> str:
    """The value written to ``CosharePlacedNode``.

    Raises:
        UnsafeValue: a name :func:`condor_addon.names.node_name_problem` refuses.
    """
    return _node(node)


def devices_value(devices: Sequence[str]) -> str:
    """The value written to ``CosharePlacedDevices``: ids joined by commas, as a string.

    Raises:
        UnsafeValue: an id :func:`condor_addon.names.device_id_problem` refuses.
    """
    return _devices(devices)


def nodes_value(nodes: Sequence[str]) -> str:
    """The value written to ``CosharePlacedNodes``: a ClassAd list of the gang's node names,
    each a quoted literal (``{"node1", "node2"}``).

    Raises:
        UnsafeValue: a name :func:`condor_addon.names.node_name_problem` refuses.
    """
    return "{" + ", ".join(_node(n) for n in nodes) + "}"


def node_devices_value(per_node: Sequence[Sequence[str]]) -> str:
    """The value written to ``CosharePlacedNodeDevices``: a ClassAd list with each node's
    device ids joined by commas, in the order of ``CosharePlacedNodes`` (``{"0,1", "0"}``).

    Raises:
        UnsafeValue: an id :func:`condor_addon.names.device_id_problem` refuses.
    """
    return "{" + ", ".join(_devices(d) for d in per_node) + "}"


def time_value(epoch_s: float) -> str:
    """The value written to ``CosharePlacedAt``: whole epoch seconds."""
    return str(int(epoch_s))


def job_clause(job_id: str) -> str:
    """``(ClusterId == C && ProcId == P)`` for a ``C.P`` job id.

    Raises:
        UnsafeValue: for anything but ``digits.digits`` (never let text into a constraint).
    """
    match = _JOB_ID.fullmatch(job_id)
    if match is None:
        raise UnsafeValue(f"not an HTCondor job id: {job_id!r}")
    return f"(ClusterId == {int(match.group(1))} && ProcId == {int(match.group(2))})"


def idle_managed(job_ids: Iterable[str]) -> str:
    """A constraint for the listed jobs, only while they are idle and coshare-managed.

    The schedd evaluates it when it applies the edit, so a job that started, was held or left
    the queue since it was read is simply not touched.
    """
    clauses = " || ".join(job_clause(j) for j in job_ids)
    return f"JobStatus == {A.IDLE} && {A.MANAGED} =?= true && ({clauses or 'false'})"


MANAGED_JOBS = f"{A.MANAGED} =?= true"
"""Every coshare-managed job of the schedd, whatever its state."""

ACTIVE_MANAGED_JOBS = (
    f"{A.MANAGED} =?= true && (JobStatus == {A.IDLE} || JobStatus == {A.RUNNING} || "
    f"JobStatus == {A.TRANSFERRING_OUTPUT} || JobStatus == {A.SUSPENDED})"
)
"""The managed jobs a cycle reads: waiting, or holding a slot."""
