"""The snapshot and plan JSON contracts of DESIGN.md: strict parsing and serialization.

Parsing collects *every* problem of a document and raises one :class:`SnapshotError` whose
lines each name the job (or node) and the field, with what is allowed. Unknown fields are
problems too (a typo such as ``device_mem_mib`` must not be silently ignored); each such message
lists the valid fields.

Pure: works on already-decoded JSON values; reading files is the caller's business.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from msgspec import Struct

from coshare.contracts import typed
from coshare.contracts.plan_doc import (
    AssignmentDoc,
    PlanDoc,
    SpreadDoc,
    StatsDoc,
    TrialDoc,
    UnplacedDoc,
)
from coshare.contracts.snapshot_doc import (
    MAX_CHARGES,
    MAX_LIMIT_VALUE,
    MAX_LIMITS,
    MAX_SNAPSHOT_NODES,
    DeviceDoc,
    LimitDoc,
    NodeDoc,
    PendingDoc,
    RunningDoc,
    SnapshotDoc,
)
from coshare.contracts.specs import field_spec
from coshare.errors import SnapshotError
from coshare.ledger.bounds import (
    MAX_DEVICES,
    MAX_PRIORITY,
    MAX_PROCESSES,
    SHOWN_CHARS,
    as_float,
    plain,
    shorten,
)
from coshare.ledger.gangs import gang_problems
from coshare.ledger.ids import (
    ALLOWED_ID,
    MAX_TEXT_CHARS,
    id_problem,
    split_ids,
    text_problem,
)
from coshare.model import (
    MILLI,
    Assignment,
    Device,
    Job,
    JobKind,
    Limit,
    Node,
    PlacementState,
    Plan,
    RunningJob,
    Snapshot,
    Spread,
    Trial,
    Unplaced,
    UnplacedCode,
    capacity_cores_to_milli,
    cores_to_milli,
    milli_to_cores,
)

T = TypeVar("T")


_MISSING: Any = object()

# The fields of each object, from the typed definitions (coshare.contracts).
NODE_FIELDS: tuple[str, ...] = NodeDoc.__struct_fields__
DEVICE_FIELDS: tuple[str, ...] = DeviceDoc.__struct_fields__
RUNNING_FIELDS: tuple[str, ...] = RunningDoc.__struct_fields__
PENDING_FIELDS: tuple[str, ...] = PendingDoc.__struct_fields__
LIMIT_FIELDS: tuple[str, ...] = LimitDoc.__struct_fields__
SNAPSHOT_FIELDS: tuple[str, ...] = SnapshotDoc.__struct_fields__
PLAN_FIELDS: tuple[str, ...] = PlanDoc.__struct_fields__
SPREAD_FIELDS: tuple[str, ...] = SpreadDoc.__struct_fields__
TRIAL_FIELDS: tuple[str, ...] = TrialDoc.__struct_fields__
ASSIGNMENT_FIELDS: tuple[str, ...] = AssignmentDoc.__struct_fields__
UNPLACED_FIELDS: tuple[str, ...] = UnplacedDoc.__struct_fields__
UNPLACED_CODES: tuple[UnplacedCode, ...] = (
    "invalid",
    "never_fits",
    "no_room",
    "reserved",
    "not_chosen",
    "unsupported",
    "policy_failed",
)

#: Largest integer accepted where no field-specific maximum applies (sizes: see
# coshare.ledger.bounds).
MAX_INT = MAX_PRIORITY

#: The "no maximum" of :meth:`_Fields.number` (a float bound, shown only when smaller).
_NO_MAXIMUM = 1e18


class _Fields:
    """Reads typed fields of one JSON object, recording problems instead of raising: each by
    what its typed definition says (:meth:`read`, ``doc``: the struct of the object)."""

    def __init__(
        self, obj: object, what: str, problems: list[str], doc: type[Struct] | None = None
    ) -> None:
        self.what = what
        self.problems = problems
        self.doc = doc
        self.ok = isinstance(obj, Mapping)
        if not self.ok:
            problems.append(f"{what}: expected an object, got {_show(obj)}")
        self.obj: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}

    def unknown(self, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in self.obj:
            if key not in allowed:
                valid = ", ".join(allowed)
                self.problems.append(
                    f"{self.what}: unknown field {shorten(key)} (valid fields: {valid})"
                )

    def _get(self, key: str, default: Any) -> Any:
        if key in self.obj and self.obj[key] is not None:
            return self.obj[key]
        if default is _MISSING and self.ok:  # an entry that is no object: said once, above
            self.problems.append(f"{self.what}: missing field {key!r}")
        return default

    def _bad(self, key: str, value: object, allowed: str, why: str = "") -> None:
        because = f": it {why}" if why else ""
        self.problems.append(
            f"{self.what}: field {key!r} is {_show(value)}{because} (allowed: {allowed})"
        )

    def read(self, key: str, default: Any = _MISSING) -> Any:
        """Field ``key`` checked as the typed definition of the object says (type, range,
        length, characters); ``default`` when absent or ``null``."""
        assert self.doc is not None
        spec = field_spec(self.doc, key)
        if spec.kind == "int":
            return self.integer(key, default, minimum=int(spec.low), maximum=int(spec.high))
        if spec.kind == "float":
            return self.number(
                key, default, minimum=spec.low, maximum=spec.high, exclusive_min=spec.exclusive
            )
        if spec.kind == "id":
            return self.ident(key, default)
        if spec.kind == "text":
            return self.string(key, default, max_chars=int(spec.high))
        if spec.kind == "devices":
            return self.device_list(key)
        if spec.kind == "choice":
            return self.choice(key, spec.choices, default)
        raise TypeError(f"{self.doc.__name__}.{key} is read by its own method")

    def string(self, key: str, default: Any = _MISSING, *, max_chars: int = MAX_TEXT_CHARS) -> Any:
        """Free text (a model, a program, a reason): printable, at most ``max_chars``."""
        value = self._get(key, default)
        if value is default:
            return value
        problem = text_problem(value, max_chars) if isinstance(value, str) else None
        if not isinstance(value, str) or not value.strip() or problem:
            self._bad(
                key,
                value,
                f"a string of 1..{max_chars} characters, no control characters",
                problem or "",
            )
            return default if default is not _MISSING else ""
        return value

    def ident(self, key: str, default: Any = _MISSING) -> Any:
        """A node name, device or job id, checked by :func:`coshare.ledger.ids.id_problem`."""
        value = self._get(key, default)
        if value is default:
            return value
        problem = id_problem(value)
        if problem is None and "," in value:
            problem = "holds a comma"
        if problem is not None:
            self._bad(key, value, f"an id of {ALLOWED_ID}, no commas", problem)
            return default if default is not _MISSING else ""
        return value

    def integer(
        self, key: str, default: Any = _MISSING, *, minimum: int = 0, maximum: int = MAX_INT
    ) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if type(value) is int and minimum <= value <= maximum:  # the usual case, quickly
            return value
        number = as_float(value)
        if (
            number is None
            or (isinstance(value, float) and not value.is_integer())
            or not minimum <= number <= maximum
        ):
            allowed = (
                f"an integer >= {minimum}"
                if maximum == MAX_INT
                else f"an integer {minimum}..{maximum}"
            )
            self._bad(key, value, allowed)
            return minimum
        return int(value)

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        minimum: float = 0.0,
        maximum: float = _NO_MAXIMUM,
        exclusive_min: bool = False,
    ) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        number = as_float(value)
        if (
            number is None
            or not math.isfinite(number)
            or (number <= minimum if exclusive_min else number < minimum)
            or number > maximum
        ):
            low = f"> {plain(minimum)}" if exclusive_min else f">= {plain(minimum)}"
            high = f" and <= {plain(maximum)}" if maximum < _NO_MAXIMUM else ""
            self._bad(key, value, f"a number {low}{high}")
            return minimum
        return number

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, str) or value not in choices:
            self._bad(key, value, " or ".join(repr(c) for c in choices))
            return choices[0]
        return value

    def cores(self, key: str, default: Any = _MISSING) -> Any:
        """Cores in ``cpu_milli``: a node's capacity (``> 0`` in its definition) rounds down,
        a job's demand up (so a 3.9995-core node must not take a 4-core job)."""
        value = self.read(key, default)
        if value is default:
            return value
        assert self.doc is not None
        capacity = field_spec(self.doc, key).exclusive
        return capacity_cores_to_milli(value) if capacity else cores_to_milli(value)

    def device_list(self, key: str) -> tuple[str, ...]:
        """Device ids joined by commas (``"0,1"``), or absent: none."""
        value = self._get(key, None)
        if value is None:
            return ()
        ids = split_ids(value) if isinstance(value, str) else ()
        if not ids or any(id_problem(i) is not None for i in ids):
            self._bad(
                key, value, f'device ids joined by commas ("0,1"), each of {ALLOWED_ID}; or null'
            )
            return ()
        return ids

    def array(
        self, key: str, default: Any = _MISSING, *, max_items: int | None = None
    ) -> list[Any]:
        """A JSON array; with ``max_items``, one longer is a problem naming its length and the
        bound, and only its first ``max_items`` entries are read (the work a snapshot asks
        for grows with them: 200,000 devices on one node took minutes to plan)."""
        value = self._get(key, default)
        if value is _MISSING:
            return []
        if value is default:
            return cast(list[Any], value)
        if not isinstance(value, list):
            self._bad(key, value, "an array")
            return []
        if max_items is not None and len(value) > max_items:
            self.problems.append(
                f"{self.what}: field {key!r} has {len(value)} entries "
                f"(allowed: at most {max_items})"
            )
            return value[:max_items]
        return value


def _show(value: object) -> str:
    """An input value for a message, as JSON writes it where it can, bounded in length."""
    if isinstance(value, str):
        text = json.dumps(value[: SHOWN_CHARS - 3])
        return text if len(value) <= SHOWN_CHARS - 3 else text[:-1] + '..."'
    if value is None or isinstance(value, (bool, float)):
        return json.dumps(value)
    return shorten(value)


def _label(kind: str, obj: object, index: int, key: str) -> str:
    """``pending job "8.0"`` when the id is a valid id, else ``pending[3]``."""
    if isinstance(obj, Mapping):
        ident = obj.get(key)
        if id_problem(ident) is None:
            return f'{kind} "{ident}"'
    return f"{kind.split()[0]}[{index}]"


def parse_snapshot(data: object, source: str = "") -> Snapshot:
    """Build a :class:`Snapshot` from decoded JSON, checking the whole contract.

    Args:
        data: the decoded JSON document.
        source: where it came from, for messages (a path or ``<stdin>``).

    Returns:
        The snapshot.

    Raises:
        SnapshotError: listing every problem, each naming the node or job and the field.
    """
    return _checked_snapshot(typed.snapshot_from_data(data), data, source)


def _checked_snapshot(typed_snapshot: Snapshot | None, data: object, source: str) -> Snapshot:
    """The snapshot the typed definitions built when they did, and when it refers only to
    what it holds; else every problem of ``data``, named by the field checker."""
    if typed_snapshot is not None and len(typed_snapshot.nodes) <= MAX_SNAPSHOT_NODES:
        problems: list[str] = []
        _cross_check(typed_snapshot, problems)
        if problems:
            raise SnapshotError(problems, source)
        return typed_snapshot
    snapshot, problems = _check_snapshot(data)
    if problems:
        raise SnapshotError(problems, source)
    return snapshot


def _check_snapshot(data: object) -> tuple[Snapshot, list[str]]:
    """The snapshot of ``data`` read field by field, and every problem of it: the messages of
    a document the typed definitions refused."""
    problems: list[str] = []
    top = _Fields(data, "snapshot", problems, SnapshotDoc)
    if not top.ok:
        return Snapshot(()), problems
    top.unknown(SNAPSHOT_FIELDS)
    nodes = [
        _parse_node(obj, i, problems)
        for i, obj in enumerate(top.array("nodes", max_items=MAX_SNAPSHOT_NODES))
    ]
    running = [_parse_running(obj, i, problems) for i, obj in enumerate(top.array("running", []))]
    pending = [_parse_pending(obj, i, problems) for i, obj in enumerate(top.array("pending", []))]
    now = top.read("now", None)
    limits = [
        _parse_limit(obj, i, problems)
        for i, obj in enumerate(top.array("limits", [], max_items=MAX_LIMITS))
    ]
    snapshot = Snapshot(tuple(nodes), tuple(running), tuple(pending), now, tuple(limits))
    _cross_check(snapshot, problems)
    return snapshot, problems


def _parse_limit(obj: object, index: int, problems: list[str]) -> Limit:
    f = _Fields(obj, _label("limit", obj, index, "id"), problems, LimitDoc)
    f.unknown(LIMIT_FIELDS)
    return Limit(
        id=f.read("id"),
        name=f.read("name"),
        holder=f.read("holder"),
        max=f.read("max"),
        used=f.read("used"),
    )


def _parse_node(obj: object, index: int, problems: list[str]) -> Node:
    f = _Fields(obj, _label("node", obj, index, "name"), problems, NodeDoc)
    f.unknown(NODE_FIELDS)
    name = f.read("name")
    devices = []
    for j, dev in enumerate(f.array("devices", [], max_items=MAX_DEVICES)):
        d = _Fields(dev, f"{f.what}: {_label('device', dev, j, 'id')}", problems, DeviceDoc)
        d.unknown(DEVICE_FIELDS)
        devices.append(
            Device(
                id=d.read("id"),
                memory_mib=d.read("memory_mib"),
                threads=d.read("threads"),
                model=d.read("model", ""),
            )
        )
    return Node(
        name=name,
        cpu_milli=f.cores("cores"),
        memory_mib=f.read("memory_mib"),
        devices=tuple(devices),
        membw_gbps=f.read("membw_gbps", None),
        llc_ways=f.read("llc_ways", None),
        domain=f.read("domain", None),
        **_node_facts(f),
    )


def _node_facts(f: _Fields) -> dict[str, Any]:
    """A node's optional facts fields (coshare.ledger.facts), checked like every other field."""
    return {
        "membw_avail_gbps": f.read("membw_avail_gbps", None),
        "membw_baseline_gbps": f.read("membw_baseline_gbps", None),
        "llc_ways_free": f.read("llc_ways_free", None),
        "facts_at_s": f.read("facts_at_s", None),
        "membw_at_s": f.read("membw_at_s", None),
    }


def _load_facts(f: _Fields) -> dict[str, Any]:
    """A running job's optional CPU load fields (coshare.ledger.facts), in cores and seconds."""
    out = {
        key: f.read(key, None)
        for key in ("cpu_load_cores", "cpu_load_last_cores", "cpu_load_max_cores")
    }
    out["cpu_load_window_s"] = f.read("cpu_load_window_s", None)
    held = f.read("cpu_cores_held", None)
    out["cpu_cores_held"] = None if held is None else int(held)
    for key in ("cpu_wait_cores", "cpu_wait_last_cores"):
        out[key] = f.read(key, None)
    return out


def _parse_running(obj: object, index: int, problems: list[str]) -> RunningJob:
    f = _Fields(obj, _label("running job", obj, index, "id"), problems, RunningDoc)
    f.unknown(RUNNING_FIELDS)
    device = f.device_list("device")
    state: PlacementState = f.read("state", "running")
    return RunningJob(
        id=f.read("id"),
        node=f.read("node"),
        devices=device,
        device_memory_mib=f.read("device_memory_mib", 0),
        device_threads=f.read("device_threads", 0),
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.read("memory_mib", 0),
        state=state,
        membw_gbps=f.read("membw_gbps", None),
        llc_ways=f.read("llc_ways", None),
        start_time_s=f.read("start_time", None),
        program=f.read("program", None),
        **_load_facts(f),
        walltime_s=f.read("walltime_s", None),
        copy_bw_mbps=f.read("copy_bw_mbps", None),
        harvest_from=f.read("harvest_from", None),
    )


def _parse_pending(obj: object, index: int, problems: list[str]) -> Job:
    f = _Fields(obj, _label("pending job", obj, index, "id"), problems, PendingDoc)
    f.unknown(PENDING_FIELDS)
    device_memory = f.read("device_memory_mib", 0)
    device_threads = f.read("device_threads", 0)
    inferred: JobKind = "device" if (device_memory or device_threads) else "cpu"
    kind: JobKind = f.read("kind", inferred)
    device_count = f.read("device_count", 1 if kind == "device" else 0)
    if kind == "cpu" and (device_memory or device_threads or device_count):
        problems.append(
            f"{f.what}: a job of kind 'cpu' cannot declare device_memory_mib, "
            "device_threads or device_count (allowed: 0 or absent)"
        )
    if kind == "device" and device_count < 1:
        f._bad("device_count", device_count, "an integer >= 1 for a job of kind 'device'")
    nodes = f.read("nodes", 1)
    nodes_max = f.read("nodes_max", None)
    per_node = f.read("processes_per_node", None)
    # a gang without "processes" runs nodes x processes_per_node (one per node):
    # coshare.ledger.gangs
    processes = f.read("processes", min(nodes * (per_node or 1), MAX_PROCESSES))
    gang = Job(
        id="", processes=processes, nodes=nodes, nodes_max=nodes_max, processes_per_node=per_node
    )
    for key, value, allowed in gang_problems(gang):
        f._bad(key, value, allowed)
    return Job(
        id=f.read("id"),
        device_memory_mib=device_memory,
        device_threads=device_threads,
        device_count=device_count,
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.read("memory_mib", 0),
        priority=f.read("priority", 0),
        submit_time_s=f.read("submit_time", 0.0),
        kind=kind,
        processes=processes,
        program=f.read("program", None),
        alpha=f.read("alpha", None),
        membw_gbps=f.read("membw_gbps", None),
        copy_bw_mbps=f.read("copy_bw_mbps", None),
        walltime_s=f.read("walltime_s", None),
        nodes=nodes,
        nodes_max=nodes_max,
        processes_per_node=per_node,
        charges=_charges(f),
    )


def _charges(f: _Fields) -> tuple[tuple[str, float], ...]:
    """A pending job's ``charges``: an object of limit ids to amounts, or absent."""
    value = f._get("charges", None)
    if value is None:
        return ()
    allowed = (
        f"an object of at most {MAX_CHARGES} limit ids ({ALLOWED_ID}, no commas) to numbers "
        f">= 0 and <= {plain(MAX_LIMIT_VALUE)}"
    )
    if not isinstance(value, Mapping) or len(value) > MAX_CHARGES:
        f._bad("charges", value, allowed)
        return ()
    out = []
    for key, amount in value.items():
        number = as_float(amount)
        if id_problem(key) is not None or "," in key:
            f._bad("charges", value, allowed, f"names the limit {_show(key)}")
        elif number is None or not math.isfinite(number) or not 0 <= number <= MAX_LIMIT_VALUE:
            f._bad("charges", value, allowed, f"charges {_show(amount)} to {_show(key)}")
        else:
            out.append((key, number))
    return tuple(out)


def _cross_check(snapshot: Snapshot, problems: list[str]) -> None:
    """What a schema cannot say: names given twice, references to unknown nodes, devices and
    limits."""
    devices_of: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        if node.name and node.name in devices_of:
            problems.append(f'node "{node.name}": name appears more than once')
        if node.llc_ways_free is not None and node.llc_ways_free > (node.llc_ways or 0):
            problems.append(
                f'node "{node.name}": llc_ways_free {node.llc_ways_free} exceeds '
                f"llc_ways {node.llc_ways} (allowed: 0..llc_ways)"
            )
        ids = [d.id for d in node.devices]
        for dup in sorted({i for i in ids if ids.count(i) > 1}):
            problems.append(f'node "{node.name}": device id "{dup}" appears more than once')
        devices_of[node.name] = set(ids)
    seen_running: set[tuple[str, str]] = set()
    running_ids: set[str] = set()
    for r in snapshot.running:
        what = f'running job "{r.id}"'
        if (r.id, r.node) in seen_running:
            problems.append(f'{what}: appears twice on node "{r.node}"')
        seen_running.add((r.id, r.node))
        running_ids.add(r.id)
        if r.node not in devices_of:
            problems.append(f'{what}: field "node" names unknown node "{r.node}"')
            continue
        for dev in r.devices:
            if dev not in devices_of[r.node]:
                problems.append(
                    f'{what}: field "device" names unknown device "{dev}" of "{r.node}"'
                )
    limit_ids: set[str] = set()
    for limit in snapshot.limits:
        if limit.id in limit_ids:
            problems.append(f'limit "{limit.id}": id appears more than once')
        limit_ids.add(limit.id)
    pending_ids = [job.id for job in snapshot.pending]
    unique = set(pending_ids)
    if (
        len(unique) == len(pending_ids)
        and unique.isdisjoint(running_ids)
        and not any(job.charges for job in snapshot.pending)
    ):
        return  # the usual snapshot, at once
    seen: set[str] = set()
    for job in snapshot.pending:
        if not isinstance(job.id, str):  # an entry already refused for having no id
            continue
        if job.id in seen:
            problems.append(f'pending job "{job.id}": id appears more than once')
        if job.id in running_ids:
            problems.append(f'pending job "{job.id}": also listed as running')
        seen.add(job.id)
        for limit_id, _ in job.charges:
            if limit_id not in limit_ids:
                problems.append(
                    f'pending job "{job.id}": field \'charges\' names limit "{limit_id}", '
                    "which the snapshot does not list (allowed: the ids of its limits)"
                )


def _assignment_dict(a: Assignment) -> dict[str, object]:
    """One assignment of the plan's JSON (optional fields only when set)."""
    if (
        a.processes is None
        and a.harvest_from is None
        and a.llc_ways is None
        and a.membw_gbps is None
        and a.llc_ways_spare is None
    ):
        # the usual one, directly (the same keys in the same order: 50,000 a plan)
        device = ",".join(a.devices)
        return (
            {"job": a.job, "node": a.node, "device": device}
            if device
            else {"job": a.job, "node": a.node}
        )
    return _compact(
        [
            ("job", a.job),
            ("node", a.node),
            ("device", ",".join(a.devices) or None),
            ("processes", a.processes),
            ("harvest_from", a.harvest_from),
            ("llc_ways", a.llc_ways),
            ("membw_gbps", a.membw_gbps),
            ("llc_ways_spare", a.llc_ways_spare),
        ]
    )


def _compact(pairs: Iterable[tuple[str, object]]) -> dict[str, object]:
    return {k: v for k, v in pairs if v is not None}


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, object]:
    """Serialize a snapshot to the JSON contract (optional fields only when set)."""
    nodes = [
        _compact(
            [
                ("name", n.name),
                ("cores", milli_to_cores(n.cpu_milli)),
                ("memory_mib", n.memory_mib),
                ("membw_gbps", n.membw_gbps),
                ("llc_ways", n.llc_ways),
                ("domain", n.domain),
                ("membw_avail_gbps", n.membw_avail_gbps),
                ("membw_baseline_gbps", n.membw_baseline_gbps),
                ("llc_ways_free", n.llc_ways_free),
                ("facts_at_s", n.facts_at_s),
                ("membw_at_s", n.membw_at_s),
                (
                    "devices",
                    [
                        _compact(
                            [
                                ("id", d.id),
                                ("memory_mib", d.memory_mib),
                                ("threads", d.threads),
                                ("model", d.model or None),
                            ]
                        )
                        for d in n.devices
                    ],
                ),
            ]
        )
        for n in snapshot.nodes
    ]
    running = [
        _compact(
            [
                ("id", r.id),
                ("node", r.node),
                ("device", ",".join(r.devices) or None),
                ("device_memory_mib", r.device_memory_mib),
                ("device_threads", r.device_threads),
                ("cores", milli_to_cores(r.cpu_milli)),
                ("memory_mib", r.memory_mib),
                ("state", None if r.state == "running" else r.state),
                ("membw_gbps", r.membw_gbps),
                ("llc_ways", r.llc_ways),
                ("start_time", r.start_time_s),
                ("program", r.program),
                ("cpu_load_cores", r.cpu_load_cores),
                ("cpu_load_last_cores", r.cpu_load_last_cores),
                ("cpu_load_max_cores", r.cpu_load_max_cores),
                ("cpu_load_window_s", r.cpu_load_window_s),
                ("walltime_s", r.walltime_s),
                ("copy_bw_mbps", r.copy_bw_mbps),
                ("harvest_from", r.harvest_from),
                ("cpu_cores_held", r.cpu_cores_held),
                ("cpu_wait_cores", r.cpu_wait_cores),
                ("cpu_wait_last_cores", r.cpu_wait_last_cores),
            ]
        )
        for r in snapshot.running
    ]
    pending = [job_to_dict(j) for j in snapshot.pending]
    out: dict[str, object] = {"nodes": nodes, "running": running, "pending": pending}
    if snapshot.now_s is not None:
        out["now"] = snapshot.now_s
    if snapshot.limits:
        out["limits"] = [
            {"id": x.id, "name": x.name, "holder": x.holder, "max": x.max, "used": x.used}
            for x in snapshot.limits
        ]
    return out


def job_to_dict(j: Job) -> dict[str, object]:
    """Serialize one pending job (optional fields only when they differ from the default)."""
    default_count = 1 if j.kind == "device" else 0
    return _compact(
        [
            ("id", j.id),
            ("device_memory_mib", j.device_memory_mib),
            ("device_threads", j.device_threads),
            ("device_count", None if j.device_count == default_count else j.device_count),
            ("cores", milli_to_cores(j.cpu_milli)),
            ("memory_mib", j.memory_mib),
            ("priority", j.priority),
            ("submit_time", j.submit_time_s),
            ("kind", j.kind if j.kind == "cpu" else None),
            ("processes", None if j.processes == 1 and not j.is_gang else j.processes),
            ("program", j.program),
            ("alpha", j.alpha),
            ("membw_gbps", j.membw_gbps),
            ("copy_bw_mbps", j.copy_bw_mbps),
            ("walltime_s", j.walltime_s),
            ("nodes", None if j.nodes == 1 else j.nodes),
            ("nodes_max", j.nodes_max),
            ("processes_per_node", j.processes_per_node),
            ("charges", dict(j.charges) if j.charges else None),
        ]
    )


def plan_to_dict(plan: Plan) -> dict[str, object]:
    """Serialize a plan to the JSON contract of DESIGN.md (``trials`` only when there are
    some, so the plans of every other policy read as before)."""
    out = _plan_dict(plan)
    if plan.trials:
        out["trials"] = [
            {"job": t.job, "node": t.node, "partners": list(t.partners)} for t in plan.trials
        ]
    if plan.spreads:
        out["spreads"] = [
            _compact(
                [
                    ("job", s.job),
                    ("scale", s.scale),
                    ("nodes", s.nodes),
                    ("cores_per_node", s.cores_per_node),
                    ("ways", s.ways),
                    ("note", s.note or None),
                    ("membw_gbps", s.membw_gbps),
                ]
            )
            for s in plan.spreads
        ]
    return out


def _plan_dict(plan: Plan) -> dict[str, object]:
    return {
        "policy": plan.policy,
        "assignments": list(map(_assignment_dict, plan.assignments)),
        "unplaced": [{"job": u.job, "reason": u.reason, "code": u.code} for u in plan.unplaced],
        **(
            {"requeue": [{"job": u.job, "reason": u.reason, "code": u.code} for u in plan.requeue]}
            if plan.requeue
            else {}
        ),
        "stats": {
            "pending": plan.pending,
            "placed": plan.placed,
            "seconds": round(plan.seconds, 6),
        },
    }


def parse_plan(data: object, source: str = "") -> Plan:
    """Build a :class:`Plan` from decoded JSON, checking the contract.

    Raises:
        SnapshotError: listing every problem, each naming the job and the field.
    """
    plan = typed.plan_from_data(data)
    return plan if plan is not None else _check_plan(data, source)


def _check_plan(data: object, source: str) -> Plan:
    """The plan of ``data`` read field by field, or every problem of it: the messages of a
    document the typed definitions refused."""
    problems: list[str] = []
    top = _Fields(data, "plan", problems, PlanDoc)
    if not top.ok:
        raise SnapshotError(problems, source)
    top.unknown(PLAN_FIELDS)
    policy = top.read("policy")
    assignments = []
    for i, obj in enumerate(top.array("assignments", [])):
        f = _Fields(obj, _label("assignment of job", obj, i, "job"), problems, AssignmentDoc)
        f.unknown(ASSIGNMENT_FIELDS)
        assignments.append(
            Assignment(
                job=f.read("job"),
                node=f.read("node"),
                devices=f.device_list("device"),
                processes=f.read("processes", None),
                harvest_from=f.read("harvest_from", None),
                llc_ways=f.read("llc_ways", None),
                membw_gbps=f.read("membw_gbps", None),
                llc_ways_spare=f.read("llc_ways_spare", None),
            )
        )
    unplaced = []
    for i, obj in enumerate(top.array("unplaced", [])):
        f = _Fields(obj, _label("unplaced job", obj, i, "job"), problems, UnplacedDoc)
        f.unknown(UNPLACED_FIELDS)
        code: UnplacedCode = f.read("code", "no_room")
        unplaced.append(Unplaced(job=f.read("job"), reason=f.read("reason"), code=code))
    trials = []
    for i, obj in enumerate(top.array("trials", [])):
        f = _Fields(obj, _label("trial of job", obj, i, "job"), problems, TrialDoc)
        f.unknown(TRIAL_FIELDS)
        partners = f.array("partners", [])
        trials.append(
            Trial(
                job=f.read("job"),
                node=f.read("node"),
                partners=tuple(_trial_partners(partners, f, problems)),
            )
        )
    spreads = []
    for i, obj in enumerate(top.array("spreads", [])):
        f = _Fields(obj, _label("spread of job", obj, i, "job"), problems, SpreadDoc)
        f.unknown(SPREAD_FIELDS)
        spreads.append(
            Spread(
                job=f.read("job"),
                scale=f.read("scale"),
                nodes=f.read("nodes"),
                cores_per_node=f.read("cores_per_node"),
                ways=f.read("ways", None),
                note=f.read("note", ""),
                membw_gbps=f.read("membw_gbps", None),
            )
        )
    requeue = []
    for i, obj in enumerate(top.array("requeue", [])):
        f = _Fields(obj, _label("requeued job", obj, i, "job"), problems, UnplacedDoc)
        f.unknown(UNPLACED_FIELDS)
        code = f.read("code", "no_room")
        requeue.append(Unplaced(job=f.read("job"), reason=f.read("reason"), code=code))
    stats = top.obj.get("stats")
    seconds = 0.0
    if isinstance(stats, Mapping):
        seconds = _Fields(stats, "plan stats", problems, StatsDoc).read("seconds", 0.0)
    if problems:
        raise SnapshotError(problems, source)
    return Plan(
        policy,
        tuple(assignments),
        tuple(unplaced),
        seconds,
        trials=tuple(trials),
        requeue=tuple(requeue),
        spreads=tuple(spreads),
    )


def _trial_partners(items: list[Any], f: _Fields, problems: list[str]) -> list[str]:
    """A trial's partner job ids, each checked as a job id."""
    out = []
    for k, item in enumerate(items):
        g = _Fields({"partner": item}, f"{f.what} partner {k}", problems)
        out.append(g.ident("partner"))
    return out


class _Refused(ValueError):
    """A JSON document the standard decoder accepts but the contract does not."""


def _constant(name: str) -> object:
    # Python's json reads NaN, Infinity and -Infinity, which JSON (RFC 8259) does not have.
    raise _Refused(f"not valid JSON: {name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # a key given twice: the decoder would silently keep the last
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _Refused(f"key {shorten(twice)} appears twice in one object")
    return obj


def decode_json(text: str, source: str, parse: Callable[[object, str], T]) -> T:
    """Decode JSON text and parse it, turning anything unreadable into a :class:`SnapshotError`:
    a syntax error, ``NaN``, a key given twice, nesting deeper than Python can decode, or an
    integer longer than Python converts from text.

    A snapshot or a plan is decoded and checked in one pass through its typed definition
    (:mod:`coshare.contracts.typed`); where that refuses it, Python's decoder reads it and
    the field checker names every problem."""
    if parse is parse_snapshot:
        snapshot = typed.snapshot_from_text(text)
        if snapshot is not None and len(snapshot.nodes) <= MAX_SNAPSHOT_NODES:
            return cast(T, _checked_snapshot(snapshot, None, source))
    elif parse is parse_plan:
        plan = typed.plan_from_text(text)
        if plan is not None:
            return cast(T, plan)
    try:
        data = json.loads(text, parse_constant=_constant, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"], source
        ) from exc
    except _Refused as exc:
        raise SnapshotError([str(exc)], source) from exc
    except RecursionError as exc:
        deep = "not readable: arrays or objects nested more deeply than Python's JSON decoder goes"
        raise SnapshotError([f"{deep} (about 1,000 levels)"], source) from exc
    except ValueError as exc:  # Python's int-string conversion limit (CVE-2020-10735)
        limit = re.search(r"\((\d+) digits\)", str(exc))
        most = f"more than {limit.group(1)} digits" if limit else "too many digits"
        raise SnapshotError([f"not readable: a number has {most}"], source) from exc
    if parse is parse_snapshot:  # the typed definitions refused it: the checker says why
        return cast(T, _checked_snapshot(None, data, source))
    if parse is parse_plan:
        return cast(T, _check_plan(data, source))
    return parse(data, source)
