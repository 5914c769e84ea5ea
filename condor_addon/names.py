"""Which node names and device ids coshare can write into an HTCondor job: the one rule the
writer (:mod:`condor_addon.expressions`, :mod:`condor_addon.edits`) and the reader
(:mod:`condor_addon.view`) both apply.

A node name travels as a quoted ClassAd string (``CosharePlacedNode = "node4"``) and the gate
compares it with the slot's ``CoshareNodeName``, so quotes, spaces and backslashes are
harmless. What cannot be written is text the schedd itself rewrites: when it starts a job it
replaces ``$$(Attribute)`` and ``$$([expression])`` in *every* attribute of the job ad with
values of the matched slot (HTCondor manual, condor_submit, "$$(attribute)"). A placement on a
node whose name holds ``$$`` would not read back as that name: the job wrapper refuses it, or
the schedd holds the job because the attribute cannot be expanded, on every cycle. Such a
node is left out of the snapshot, as a node whose name Slurm's placement cannot carry is.

Device ids reach the job wrapper as ``CosharePlacedDevices = "0,1"``; the wrapper
(``deploy/condor/coshare-job-wrapper``, ``plain``) uses only ids of
:data:`DEVICE_ID_CHARS` (and the comma that joins them) and refuses the job otherwise. A
device with another id is ignored when read, and never written.

Pure: no I/O.
"""

from __future__ import annotations

import re

from coshare.ledger.ids import MAX_ID_CHARS

__all__ = [
    "DEVICE_ID_CHARS",
    "UNWRITABLE_DEVICE",
    "UNWRITABLE_NAME",
    "device_id_problem",
    "node_name_problem",
]

#: The characters of a device id the job wrapper passes on (its ``plain``, less the comma).
DEVICE_ID_CHARS = "A-Za-z0-9._:-"
_DEVICE_ID = re.compile(f"[{DEVICE_ID_CHARS}]{{1,{MAX_ID_CHARS}}}")

#: For messages: what a node name may hold.
UNWRITABLE_NAME = "allowed: a name without $$"
#: For messages: what a device id may hold.
UNWRITABLE_DEVICE = f"allowed: 1-{MAX_ID_CHARS} of A-Z a-z 0-9 . _ : -"


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be written as a job's node (``None`` when it can). The readers
    check it is an id first (:func:`coshare.ledger.ids.id_problem`)."""
    if "$$" in name:
        return "holds $$, which the schedd replaces when the job starts"
    return None


def device_id_problem(device: str) -> str | None:
    """Why ``device`` cannot be written as one of a job's device ids (``None`` when it can)."""
    if _DEVICE_ID.fullmatch(device) is None:
        return "holds a character the job wrapper does not pass on, or is too long"
    return None
