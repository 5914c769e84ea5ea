"""Pure builders of the ClassAd text coshare sends to the schedd.

Every value that comes from a job or machine ad (a node name, device ids, a hold reason) goes
through :func:`literal`, i.e. ``classad2.quote``, which escapes quotes and backslashes: a node
named ``n1" || true || "`` becomes one string literal, never an expression. Job ids are
checked against ``cluster.proc`` before they enter a constraint. Nothing here talks to
HTCondor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import classad2
from coshare.errors import UnsafeValue

from condor_addon import attributes as A
from condor_addon.edits import hold_reason

__all__ = ["UNDEFINED", "devices_value", "hold_reason", "idle_managed", "job_clause",
           "literal", "node_devices_value", "node_value", "nodes_value",
           "time_value"]  # fmt: skip

_JOB_ID = re.compile(r"^([0-9]+)\.([0-9]+)$")

#: ClassAd's undefined: written to close a job's gate (no node placed).
UNDEFINED = "undefined"


def literal(text: str) -> str:
    """``text`` as a ClassAd string literal (quoted and escaped).

    NUL characters are dropped: ClassAd strings are C strings (no ad can hold one).
    """
    return str(classad2.quote(text.replace("\x00", "")))


def node_value(node: str) -> str:
    """The value written to ``CosharePlacedNode``."""
    return literal(node)


def devices_value(devices: Sequence[str]) -> str:
    """The value written to ``CosharePlacedDevices``: ids joined by commas, as a string."""
    return literal(",".join(devices))


def nodes_value(nodes: Sequence[str]) -> str:
    """The value written to ``CosharePlacedNodes``: a ClassAd list of the gang's node names,
    each a quoted literal (``{"node1", "node2"}``)."""
    return "{" + ", ".join(literal(n) for n in nodes) + "}"


def node_devices_value(per_node: Sequence[Sequence[str]]) -> str:
    """The value written to ``CosharePlacedNodeDevices``: a ClassAd list with each node's
    device ids joined by commas, in the order of ``CosharePlacedNodes`` (``{"0,1", "0"}``)."""
    return "{" + ", ".join(literal(",".join(d)) for d in per_node) + "}"


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
