"""The placement coshare writes into a Slurm job, and the refusal message.

A placed job carries its placement in two fields of its own (the queue is the ledger):

- ``ReqNodeList=<node>``: Slurm itself then starts it only there;
- ``AdminComment=coshare-placement;v=1;node=n1;devices=0;at=1732233445;mem_mib=2048;threads=120``:
  the device(s) chosen, when (controller clock, s), and the device memory and threads it was
  placed for. Only operators can set AdminComment, so users cannot forge a placement; the
  node side (TaskProlog) reads the devices from here, and the cycle counts a placed job
  against its device with these values until it ends.

A multi-node (gang) job carries every node of it, in the same single update
(``ReqNodeList=n1,n2,n3 NumNodes=3-3 NumTasks=5 TasksPerNode=2``, see
:mod:`slurm_addon.scontrol`), and one more field::

    coshare-placement;v=1;node=n1;devices=0;at=...;mem_mib=1024;threads=60;parts=n1:2:0,n2:2:1,n3:1:0

``parts`` lists each node as ``node:processes[:device...]`` (``:`` and ``,`` never occur in a
node name or device id); ``node`` and ``devices`` repeat the first part, so the format stays
version 1. The Prolog of each node makes that node's group with that node's devices.

A job a Spread-n-Share policy placed (``sns``, ``cs``) carries two more fields::

    coshare-placement;v=1;node=n1;...;parts=n1:14,n2:14;spread=2:2:14;ways=n1:4,n2:4

``spread=<scale>:<nodes>:<cores_per_node>`` is the scale factor ``k``, the nodes it runs on
and the most processes (cores) on one node; ``ways=<node>:<ways>,...`` the LLC ways its
resctrl group holds on each node that allocates them (a node left out, or no ``ways`` field:
no way allocation there, e.g. a node without resctrl; the plan's notes say so). The Prolog of
each node makes the job's resctrl group with that node's ways. With ``policy.sns.mba`` a
third, ``membw=<GB/s>``, is the bandwidth per node to cap the job at: each node's Prolog
turns it into an ``MB:`` percentage of that node's measured bandwidth where the node has
MBA. All are new fields of version 1: a reader that does not know them (an older coshare)
ignores them, as every reader of this format ignores fields it does not know, so the version
stays 1.

A CPU-only job the ``collocate`` policy placed on the idle cores of a running GPU job (Wu &
Hong) carries the GPU job's id::

    coshare-placement;v=1;node=n1;devices=;at=...;mem_mib=0;threads=0;harvest=12

The Prolog then makes its group without cores of its own and has the node daemon move as
many cores as Slurm allocated it out of job 12's cpuset into its own, before any of its tasks
runs; when that cannot be done the job does not run (its TaskProlog fails it with why). A
new field of version 1, as ``spread`` and ``ways``.

A job refused for bad annotations stays held with ``AdminComment=coshare-refused: <why>``.

A job coshare did not place this cycle carries why in the same field
(``AdminComment=coshare-waiting: no_room: needs 240 free device threads; ...``, shown by
``squeue -O admin_comment``). A job's AdminComment holds one of coshare's records
at a time, so the placement's format stays as it was: a placement replaces the waiting
record when the job is placed, and a waiting record is written only over an empty
AdminComment or an older waiting record, never over a placement, a refusal or an
operator's own text.

A job placed for a trial co-run of the ``membw`` policy carries its trial record
(:mod:`coshare.ledger.trials`) in one more field, before any ``killed``::

    coshare-placement;v=1;node=n1;...;trial=suspended:1732233445:0.62:12+13:over_limit

The cycle rewrites that field as the trial moves on (``placed``, ``measuring``, ``kept``,
``suspended``, ``resumed``); a reader that does not know it ignores it.

When the node helpers killed a placed job (over its declared memory), the Epilog appends
``;killed=<why>`` to its placement; readers of the placement ignore that field.

The text is built only from validated tokens (no spaces, no quotes), because it is also
written through scontrol's command language in batches (see :mod:`slurm_addon.scontrol`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coshare.ledger.book import Part
from coshare.ledger.bounds import (
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_PROCESSES,
    MAX_TIME_S,
    shorten,
)
from coshare.model import Spread

from slurm_addon.errors import PlacementError as PlacementError  # raised here; importable here

PLACEMENT_PREFIX = "coshare-placement"
KILLED_KEY = "killed"
KILLED_PREFIX = "coshare-killed"
#: The kill reason is cut to this many characters in AdminComment.
MAX_KILL_REASON_CHARS = 400
SPREAD_KEY = "spread"
TRIAL_KEY = "trial"
WAYS_KEY = "ways"
MEMBW_KEY = "membw"
#: A bandwidth cap as written: GB/s with at most three decimals.
_GBPS = re.compile(r"[0-9]{1,7}(?:\.[0-9]{1,3})?")
HARVEST_KEY = "harvest"
#: The most LLC ways a placement names per node (a CAT bit mask has at most 32 bits today;
#: :mod:`coshare.node.spec` takes up to 64).
MAX_LLC_WAYS = 64
REFUSAL_PREFIX = "coshare-refused"
WAITING_PREFIX = "coshare-waiting: "
VERSION = "1"
#: AdminComment is free text in Slurm; keep refusals short enough for squeue and sacct.
MAX_REFUSAL_CHARS = 900

_DIGITS = re.compile(r"[0-9]{1,13}")

#: Node names and device ids coshare writes: what Slurm node names and GRES indexes use.
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
#: What :data:`SAFE_TOKEN` allows, for messages.
UNWRITABLE_NAME = "allowed: 1-128 of A-Z a-z 0-9 . _ -"


@dataclass(frozen=True)
class Placement:
    """Where and for what coshare placed one job.

    Attributes:
        node: the node's name.
        devices: device ids on that node (empty for CPU-only jobs).
        at_s: when it was placed, seconds since the epoch on the controller.
        device_memory_mib: device memory per device it was placed for.
        device_threads: device threads per device it was placed for.
        parts: a gang's nodes with their processes, devices and LLC ways (``node`` and
            ``devices`` are the first's); empty for a single-node job.
        llc_ways: LLC ways on ``node`` (a gang's: its first part's); ``None``: none there.
        spread: scale factor, nodes and cores per node of a Spread-n-Share placement (its
            ``ways`` and ``note`` are not recorded: the per-node ways are); ``None``: other
            policies.
        harvest_from: the running GPU job whose idle cores this CPU-only job borrows
            (``collocate``); ``None``: cores of its own.
    """

    node: str
    devices: tuple[str, ...]
    at_s: int
    device_memory_mib: int
    device_threads: int
    parts: tuple[Part, ...] = ()
    llc_ways: int | None = None
    spread: Spread | None = None
    harvest_from: str | None = None

    def same_spot(self, other: Placement) -> bool:
        """Same nodes, devices, ways and demands (the time may differ)."""

        def key(p: Placement) -> tuple[object, ...]:
            return (
                p.node,
                p.devices,
                p.device_memory_mib,
                p.device_threads,
                p.parts,
                p.llc_ways,
                p.harvest_from,
            )

        return key(self) == key(other)

    @property
    def ways_by_node(self) -> dict[str, int]:
        """The LLC ways the placement allocates, by node (only nodes that allocate some)."""
        if self.parts:
            return {p.node: p.llc_ways for p in self.parts if p.llc_ways is not None}
        return {self.node: self.llc_ways} if self.llc_ways is not None else {}

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node of the placement, in its order."""
        return tuple(p.node for p in self.parts) if self.parts else (self.node,)

    def on(self, node: str) -> Placement | None:
        """The placement as one node sees it: that node and its devices (a gang's part), or
        ``None`` when the node is not part of it."""
        if not self.parts:
            return self if node == self.node else None
        for part in self.parts:
            if part.node == node:
                return Placement(
                    part.node,
                    part.devices,
                    self.at_s,
                    self.device_memory_mib,
                    self.device_threads,
                    self.parts,
                    part.llc_ways,
                    self.spread,
                    self.harvest_from,
                )
        return None


def _integer(fields: dict[str, str], key: str, maximum: int) -> int:
    """A number of a placement: ASCII digits (``int`` also takes ``" 1_0"`` and digits of
    other scripts), at most ``maximum`` (:mod:`coshare.ledger.bounds`).

    Raises:
        KeyError: the field is missing.
        PlacementError: anything else.
    """
    text = fields[key]
    if not _DIGITS.fullmatch(text) or int(text) > maximum:
        raise PlacementError(f"placement field {key}={shorten(text)} is not a number 0..{maximum}")
    return int(text)


def is_safe_token(text: str) -> bool:
    """Whether a node name or device id can be written into a placement."""
    return bool(SAFE_TOKEN.fullmatch(text))


def format_placement(placement: Placement) -> str:
    """The AdminComment text of a placement.

    Raises:
        PlacementError: a node name or device id outside :data:`SAFE_TOKEN`.
    """
    tokens = [placement.node, *placement.devices]
    if placement.harvest_from is not None:
        tokens.append(placement.harvest_from)
    for part in placement.parts:
        tokens += [part.node, *part.devices]
    for token in tokens:
        if not is_safe_token(token):
            raise PlacementError(f"cannot write {shorten(token)} into a placement")
    text = (
        f"{PLACEMENT_PREFIX};v={VERSION};node={placement.node};"
        f"devices={','.join(placement.devices)};at={placement.at_s};"
        f"mem_mib={placement.device_memory_mib};threads={placement.device_threads}"
    )
    if placement.parts:
        text += ";parts=" + ",".join(
            ":".join((p.node, str(p.processes), *p.devices)) for p in placement.parts
        )
    if placement.spread is not None:
        s = placement.spread
        for name, value in (
            ("scale", s.scale),
            ("nodes", s.nodes),
            ("cores_per_node", s.cores_per_node),
        ):
            if not 1 <= value <= MAX_PROCESSES:
                raise PlacementError(
                    f"cannot write {name}={value} into a placement (1..{MAX_PROCESSES})"
                )
        text += f";{SPREAD_KEY}={s.scale}:{s.nodes}:{s.cores_per_node}"
        if s.membw_gbps is not None:
            gbps = f"{s.membw_gbps:.3f}".rstrip("0").rstrip(".")
            if _GBPS.fullmatch(gbps) is None or float(gbps) <= 0:
                raise PlacementError(
                    f"cannot write membw={shorten(str(s.membw_gbps))} into a "
                    "placement (GB/s above 0, below 10**7)"
                )
            text += f";{MEMBW_KEY}={gbps}"
    ways = placement.ways_by_node
    for ways_here in ways.values():
        if not 1 <= ways_here <= MAX_LLC_WAYS:
            raise PlacementError(
                f"cannot write llc_ways={ways_here} into a placement (1..{MAX_LLC_WAYS})"
            )
    if ways:
        text += f";{WAYS_KEY}=" + ",".join(f"{n}:{w}" for n, w in ways.items())
    if placement.harvest_from is not None:
        if placement.parts or placement.devices:
            raise PlacementError("only a single-node CPU-only job borrows a GPU job's cores")
        text += f";{HARVEST_KEY}={placement.harvest_from}"
    return text


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
    parts: tuple[Part, ...] = ()
    if "parts" in fields:
        parts = _parts(fields["parts"])
        if (parts[0].node, parts[0].devices) != (node, devices):
            raise PlacementError("placement's first part is not its node and devices")
    spread = _spread(fields[SPREAD_KEY]) if SPREAD_KEY in fields else None
    if spread is not None and MEMBW_KEY in fields:
        text = fields[MEMBW_KEY]
        if _GBPS.fullmatch(text) is None or float(text) <= 0:
            raise PlacementError(f"placement field membw={shorten(text)} is not GB/s above 0")
        spread = Spread(
            "", spread.scale, spread.nodes, spread.cores_per_node, membw_gbps=float(text)
        )
    ways = _ways(fields[WAYS_KEY], {p.node for p in parts} or {node}) if WAYS_KEY in fields else {}
    parts = tuple(Part(p.node, p.devices, p.processes, ways.get(p.node)) for p in parts)
    harvest = fields.get(HARVEST_KEY)
    if harvest is not None and (not is_safe_token(harvest) or parts or devices):
        raise PlacementError(
            f"placement field {HARVEST_KEY}={shorten(harvest)} is not a job "
            "id of a single-node CPU-only placement"
        )
    return Placement(
        placement.node,
        placement.devices,
        placement.at_s,
        placement.device_memory_mib,
        placement.device_threads,
        parts,
        ways.get(node),
        spread,
        harvest,
    )


def _spread(text: str) -> Spread:
    """The ``spread`` field: ``scale:nodes:cores_per_node``.

    Raises:
        PlacementError: not three numbers 1..MAX_PROCESSES.
    """
    numbers = text.split(":")
    if len(numbers) != 3 or not all(
        _DIGITS.fullmatch(n) and 1 <= int(n) <= MAX_PROCESSES for n in numbers
    ):
        raise PlacementError(
            f"placement field spread={shorten(text)} is not scale:nodes:cores_per_node"
        )
    scale, nodes, cores = (int(n) for n in numbers)
    return Spread("", scale, nodes, cores)


def _ways(text: str, nodes: set[str]) -> dict[str, int]:
    """The ``ways`` field: ``node:ways,...`` over nodes of the placement.

    Raises:
        PlacementError: an unreadable item, a node not in the placement or named twice, or
            ways outside 1..MAX_LLC_WAYS.
    """
    ways: dict[str, int] = {}
    for item in text.split(","):
        node, _, count = item.partition(":")
        if not (
            is_safe_token(node) and _DIGITS.fullmatch(count) and 1 <= int(count) <= MAX_LLC_WAYS
        ):
            raise PlacementError(
                f"placement field ways item {shorten(item)} is not node:ways (1..{MAX_LLC_WAYS})"
            )
        if node not in nodes or node in ways:
            raise PlacementError(
                f"placement field ways names node {node}, which is not "
                "one of its nodes or is named twice"
            )
        ways[node] = int(count)
    return ways


def _parts(text: str) -> tuple[Part, ...]:
    """The ``parts`` field of a gang's placement.

    Raises:
        PlacementError: an empty or unreadable part, a node named twice, or bad tokens.
    """
    parts = []
    for item in text.split(","):
        node, _, rest = item.partition(":")
        count, _, devices = rest.partition(":")
        if not (
            is_safe_token(node) and _DIGITS.fullmatch(count) and 1 <= int(count) <= MAX_PROCESSES
        ):
            raise PlacementError(
                f"placement part {shorten(item)} is not node:processes[:device...]"
            )
        ids = tuple(devices.split(":")) if devices else ()
        if not all(is_safe_token(d) for d in ids):
            raise PlacementError(f"placement part {shorten(item)} names an invalid device")
        parts.append(Part(node, ids, int(count)))
    if len({p.node for p in parts}) != len(parts):
        raise PlacementError("placement names a node twice")
    return tuple(parts)


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
    (:func:`coshare.policies.explain.wait_reason`, already one bounded line)."""
    return WAITING_PREFIX + reason


def waiting_reason(admin_comment: str) -> str | None:
    """The reason of a waiting record; ``None`` when the AdminComment is not one."""
    text = admin_comment.strip()
    return text[len(WAITING_PREFIX) :] if text.startswith(WAITING_PREFIX) else None


def trial_field(admin_comment: str) -> str | None:
    """The ``trial`` field of a placement (its record's text), if it has one."""
    text = admin_comment.strip()
    if not is_placement(text):
        return None
    body = text.split(f";{KILLED_KEY}=", 1)[0]
    for part in body.split(";")[1:]:
        key, _, value = part.partition("=")
        if key == TRIAL_KEY:
            return value
    return None


def with_trial(admin_comment: str, record: str) -> str:
    """The placement with its ``trial`` field set to ``record`` (added before any
    ``killed``, or replacing the one it has).

    Raises:
        PlacementError: the AdminComment is not a placement, or the record holds
            characters a placement cannot carry.
    """
    text = admin_comment.strip()
    if not is_placement(text):
        raise PlacementError("the job carries no coshare placement to add a trial to")
    if re.fullmatch(r"[A-Za-z0-9_.:+-]{1,2200}", record) is None:
        raise PlacementError(f"cannot write trial={shorten(record)} into a placement")
    marker = f";{KILLED_KEY}="
    body, killed, reason = text.partition(marker)
    parts = [p for p in body.split(";") if p.partition("=")[0] != TRIAL_KEY]
    return ";".join([*parts, f"{TRIAL_KEY}={record}"]) + (killed + reason if killed else "")
