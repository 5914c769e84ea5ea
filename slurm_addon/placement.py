"""The placement coshare writes into a Slurm job, and the refusal message.

A placed job carries its placement in two fields of its own (the queue is the ledger):

- ``ReqNodeList=<node>``: Slurm itself then starts it only there;
- ``AdminComment=coshare-placement;v=1;node=n1;devices=0;at=1732233445;mem_mib=2048;threads=120``:
  the device(s) chosen, when (controller clock, s), and the device memory and threads it was
  placed for. Only operators can set AdminComment, so users cannot forge a placement; the
  node side (TaskProlog) reads the devices from here, and the cycle counts a placed job
  against its device with these values until it ends.

A job refused for bad annotations stays held with ``AdminComment=coshare-refused: <why>``.

A job coshare did not place this cycle carries why in the same field
(``AdminComment=coshare-waiting: no_room: needs 240 free device threads; ...``, shown by
``squeue -O admin_comment``; issue 21). A job's AdminComment holds one of coshare's records
at a time, so the placement's format stays as it was: a placement replaces the waiting
record when the job is placed, and a waiting record is written only over an empty
AdminComment or an older waiting record, never over a placement, a refusal or an
operator's own text.

When the node helpers killed a placed job (over its declared memory), the Epilog appends
``;killed=<why>`` to its placement; readers of the placement ignore that field.

The text is built only from validated tokens (no spaces, no quotes), because it is also
written through scontrol's command language in batches (see :mod:`slurm_addon.scontrol`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coshare.bounds import MAX_DEVICE_MEMORY_MIB, MAX_DEVICE_THREADS, MAX_TIME_S, shorten

from slurm_addon.errors import PlacementError as PlacementError  # raised here; importable here

PLACEMENT_PREFIX = "coshare-placement"
KILLED_KEY = "killed"
KILLED_PREFIX = "coshare-killed"
#: The kill reason is cut to this many characters in AdminComment.
MAX_KILL_REASON_CHARS = 400
REFUSAL_PREFIX = "coshare-refused"
WAITING_PREFIX = "coshare-waiting: "
VERSION = "1"
#: AdminComment is free text in Slurm; keep refusals short enough for squeue and sacct.
MAX_REFUSAL_CHARS = 900

_DIGITS = re.compile(r"[0-9]{1,13}")

#: Node names and device ids coshare writes: what Slurm node names and GRES indexes use.
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


@dataclass(frozen=True)
class Placement:
    """Where and for what coshare placed one job.

    Attributes:
        node: the node's name.
        devices: device ids on that node (empty for CPU-only jobs).
        at_s: when it was placed, seconds since the epoch on the controller.
        device_memory_mib: device memory per device it was placed for.
        device_threads: device threads per device it was placed for.
    """

    node: str
    devices: tuple[str, ...]
    at_s: int
    device_memory_mib: int
    device_threads: int

    def same_spot(self, other: Placement) -> bool:
        """Same node, devices and demands (the time may differ)."""
        return (self.node, self.devices, self.device_memory_mib, self.device_threads) == (
            other.node,
            other.devices,
            other.device_memory_mib,
            other.device_threads,
        )


def _integer(fields: dict[str, str], key: str, maximum: int) -> int:
    """A number of a placement: ASCII digits (``int`` also takes ``" 1_0"`` and digits of
    other scripts), at most ``maximum`` (:mod:`coshare.bounds`).

    Raises:
        KeyError: the field is missing.
        PlacementError: anything else.
    """
    text = fields[key]
    if not _DIGITS.fullmatch(text) or int(text) > maximum:
        raise PlacementError(f"placement field {key}={shorten(text)} is not a number "
                             f"0..{maximum}")  # fmt: skip
    return int(text)


def is_safe_token(text: str) -> bool:
    """Whether a node name or device id can be written into a placement."""
    return bool(SAFE_TOKEN.fullmatch(text))


def format_placement(placement: Placement) -> str:
    """The AdminComment text of a placement.

    Raises:
        PlacementError: a node name or device id outside :data:`SAFE_TOKEN`.
    """
    for token in (placement.node, *placement.devices):
        if not is_safe_token(token):
            raise PlacementError(f"cannot write {shorten(token)} into a placement")
    return (
        f"{PLACEMENT_PREFIX};v={VERSION};node={placement.node};"
        f"devices={','.join(placement.devices)};at={placement.at_s};"
        f"mem_mib={placement.device_memory_mib};threads={placement.device_threads}"
    )


def is_placement(admin_comment: str) -> bool:
    """Whether an AdminComment is (or claims to be) a coshare placement."""
    return admin_comment.startswith(PLACEMENT_PREFIX)


def parse_placement(admin_comment: str) -> Placement | None:
    """Read a placement back.

    Returns:
        The placement, or ``None`` when the AdminComment is not one.

    Raises:
        PlacementError: it starts like a placement but a field is missing or unreadable.
    """
    if not is_placement(admin_comment):
        return None
    fields: dict[str, str] = {}
    for part in admin_comment.strip().split(";")[1:]:
        key, equals, value = part.partition("=")
        if not equals:
            raise PlacementError(f"placement field {shorten(part)} is not key=value")
        fields[key] = value
    if fields.get("v") != VERSION:
        raise PlacementError(f"placement version {shorten(fields.get('v'))} is not {VERSION}")
    try:
        node = fields["node"]
        devices = tuple(d for d in fields["devices"].split(",") if d)
        placement = Placement(
            node=node,
            devices=devices,
            at_s=_integer(fields, "at", MAX_TIME_S),
            device_memory_mib=_integer(fields, "mem_mib", MAX_DEVICE_MEMORY_MIB),
            device_threads=_integer(fields, "threads", MAX_DEVICE_THREADS),
        )
    except KeyError as exc:
        raise PlacementError(f"placement lacks field {exc.args[0]!r}") from exc
    if not all(is_safe_token(t) for t in (node, *devices)):
        raise PlacementError("placement names an invalid node or device")
    return placement


def with_kill_reason(admin_comment: str, reason: str) -> str:
    """The AdminComment of a placed job that coshare's node helpers killed: the placement
    with ``;killed=<reason>`` (one line, no ``;``, bounded)."""
    text = " ".join(reason.replace(";", ",").split())
    if len(text) > MAX_KILL_REASON_CHARS:
        text = text[: MAX_KILL_REASON_CHARS - 3] + "..."
    base = admin_comment.strip()
    if not is_placement(base):  # no placement to keep (an operator changed it)
        return f"{KILLED_PREFIX}: {text}"
    marker = f";{KILLED_KEY}="
    if marker in base:
        base = base[: base.index(marker)]
    return f"{base}{marker}{text}"


def kill_reason(admin_comment: str) -> str | None:
    """Why coshare killed the job, from its AdminComment, if it did."""
    text = admin_comment.strip()
    if text.startswith(f"{KILLED_PREFIX}: "):
        return text[len(KILLED_PREFIX) + 2 :] or None
    marker = f";{KILLED_KEY}="
    if not is_placement(text) or marker not in text:
        return None
    return text.split(marker, 1)[1].strip() or None


def format_refusal(message: str) -> str:
    """The AdminComment of a job refused for its annotations (one line, bounded)."""
    text = f"{REFUSAL_PREFIX}: " + " ".join(message.split())
    if len(text) > MAX_REFUSAL_CHARS:
        text = text[: MAX_REFUSAL_CHARS - 3] + "..."
    return text


def is_refusal(admin_comment: str) -> bool:
    """Whether an AdminComment is a coshare refusal."""
    return admin_comment.startswith(REFUSAL_PREFIX)


def format_waiting(reason: str) -> str:
    """The AdminComment of a job that waits, with the plan's short reason
    (:func:`coshare.explain.wait_reason`, already one bounded line)."""
    return WAITING_PREFIX + reason


def waiting_reason(admin_comment: str) -> str | None:
    """The reason of a waiting record; ``None`` when the AdminComment is not one."""
    text = admin_comment.strip()
    return text[len(WAITING_PREFIX) :] if text.startswith(WAITING_PREFIX) else None
