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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from coshare.errors import SnapshotError
from coshare.model import (
    MILLI,
    Assignment,
    Device,
    Job,
    JobKind,
    Node,
    PlacementState,
    Plan,
    RunningJob,
    Snapshot,
    Unplaced,
    UnplacedCode,
    cores_to_milli,
    milli_to_cores,
)

T = TypeVar("T")

_MISSING: Any = object()

NODE_FIELDS = ("name", "cores", "memory_mib", "membw_gbps", "llc_ways", "domain", "devices")
DEVICE_FIELDS = ("id", "memory_mib", "threads", "model")
RUNNING_FIELDS = (
    "id", "node", "device", "device_memory_mib", "device_threads", "cores", "memory_mib",
    "state", "membw_gbps", "llc_ways", "start_time", "program",
)  # fmt: skip
PENDING_FIELDS = (
    "id", "device_memory_mib", "device_threads", "device_count", "cores", "memory_mib",
    "priority", "submit_time", "kind", "processes", "program", "alpha", "membw_gbps",
    "copy_bw_mbps", "walltime_s",
)  # fmt: skip
SNAPSHOT_FIELDS = ("nodes", "running", "pending", "now")
PLAN_FIELDS = ("policy", "assignments", "unplaced", "stats")
ASSIGNMENT_FIELDS = ("job", "node", "device", "processes")
UNPLACED_FIELDS = ("job", "reason", "code")
UNPLACED_CODES: tuple[UnplacedCode, ...] = (
    "invalid", "never_fits", "no_room", "reserved", "not_chosen", "unsupported",
)  # fmt: skip

#: Largest integer accepted for sizes and counts (keeps arithmetic exact and sane).
MAX_INT = 2**53


class _Fields:
    """Reads typed fields of one JSON object, recording problems instead of raising."""

    def __init__(self, obj: object, what: str, problems: list[str]) -> None:
        self.what = what
        self.problems = problems
        self.ok = isinstance(obj, Mapping)
        if not self.ok:
            problems.append(f"{what}: expected an object, got {_show(obj)}")
        self.obj: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}

    def unknown(self, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in self.obj:
            if key not in allowed:
                self.problems.append(
                    f"{self.what}: unknown field {key!r} (valid fields: {', '.join(allowed)})"
                )

    def _get(self, key: str, default: Any) -> Any:
        if key in self.obj and self.obj[key] is not None:
            return self.obj[key]
        if default is _MISSING:
            self.problems.append(f"{self.what}: missing field {key!r}")
        return default

    def _bad(self, key: str, value: object, allowed: str) -> None:
        self.problems.append(f"{self.what}: field {key!r} is {_show(value)} (allowed: {allowed})")

    def string(self, key: str, default: Any = _MISSING, *, no_comma: bool = False) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value.strip():
            self._bad(key, value, "a non-empty string")
            return default if default is not _MISSING else ""
        if no_comma and "," in value:
            self._bad(key, value, "a string without commas")
            return ""
        return value

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 0) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._bad(key, value, f"an integer >= {minimum}")
            return minimum
        if isinstance(value, float) and not value.is_integer():
            self._bad(key, value, f"an integer >= {minimum}")
            return minimum
        if value < minimum:
            self._bad(key, value, f"an integer >= {minimum}")
            return minimum
        if value > MAX_INT:
            self._bad(key, value, f"an integer <= {MAX_INT}")
            return minimum
        return int(value)

    def number(
        self, key: str, default: Any = _MISSING, *, minimum: float = 0.0, maximum: float = 1e18,
        exclusive_min: bool = False,
    ) -> Any:  # fmt: skip
        value = self._get(key, default)
        if value is default:
            return value
        low = f"> {minimum:g}" if exclusive_min else f">= {minimum:g}"
        allowed = f"a number {low}" + (f" and <= {maximum:g}" if maximum < 1e18 else "")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            self._bad(key, value, allowed)
            return minimum
        too_low = value <= minimum if exclusive_min else value < minimum
        if too_low or value > maximum:
            self._bad(key, value, allowed)
            return minimum
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        if value not in choices:
            self._bad(key, value, " or ".join(repr(c) for c in choices))
            return choices[0]
        return value

    def cores(self, key: str, default: Any = _MISSING, *, positive: bool = False) -> Any:
        value = self.number(key, default, minimum=0.0, exclusive_min=positive)
        if value is default:
            return value
        return cores_to_milli(float(value))

    def array(self, key: str, default: Any = _MISSING) -> list[Any]:
        value = self._get(key, default)
        if value is default:
            return cast(list[Any], value)
        if not isinstance(value, list):
            self._bad(key, value, "an array")
            return []
        return value


def _show(value: object) -> str:
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _label(kind: str, obj: object, index: int, key: str) -> str:
    """``pending job "8.0"`` when the id is readable, else ``pending[3]``."""
    if isinstance(obj, Mapping):
        ident = obj.get(key)
        if isinstance(ident, str) and ident:
            return f'{kind} "{ident}"'
    return f"{kind.split()[0]}[{index}]"


def _device_ids(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


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
    problems: list[str] = []
    top = _Fields(data, "snapshot", problems)
    if not top.ok:
        raise SnapshotError(problems, source)
    top.unknown(SNAPSHOT_FIELDS)
    nodes = [_parse_node(obj, i, problems) for i, obj in enumerate(top.array("nodes"))]
    running = [_parse_running(obj, i, problems) for i, obj in enumerate(top.array("running", []))]
    pending = [_parse_pending(obj, i, problems) for i, obj in enumerate(top.array("pending", []))]
    now = top.number("now", None, minimum=-1e18)
    _cross_check(nodes, running, pending, problems)
    if problems:
        raise SnapshotError(problems, source)
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), now)


def _parse_node(obj: object, index: int, problems: list[str]) -> Node:
    f = _Fields(obj, _label("node", obj, index, "name"), problems)
    f.unknown(NODE_FIELDS)
    name = f.string("name", no_comma=True)
    devices = []
    for j, dev in enumerate(f.array("devices", [])):
        d = _Fields(dev, f"{f.what}: {_label('device', dev, j, 'id')}", problems)
        d.unknown(DEVICE_FIELDS)
        devices.append(
            Device(
                id=d.string("id", no_comma=True),
                memory_mib=d.integer("memory_mib", minimum=1),
                threads=d.integer("threads", minimum=1),
                model=d.string("model", ""),
            )
        )
    return Node(
        name=name,
        cpu_milli=f.cores("cores", positive=True),
        memory_mib=f.integer("memory_mib", minimum=1),
        devices=tuple(devices),
        membw_gbps=f.number("membw_gbps", None, exclusive_min=True),
        llc_ways=f.integer("llc_ways", None, minimum=1),
        domain=f.string("domain", None),
    )


def _parse_running(obj: object, index: int, problems: list[str]) -> RunningJob:
    f = _Fields(obj, _label("running job", obj, index, "id"), problems)
    f.unknown(RUNNING_FIELDS)
    device = f.obj.get("device")
    if device is not None and (not isinstance(device, str) or not _device_ids(device)):
        f._bad("device", device, 'a device id, or ids joined by commas ("0,1"), or null')
        device = None
    state: PlacementState = f.choice("state", ("running", "planned"), "running")
    return RunningJob(
        id=f.string("id"),
        node=f.string("node"),
        devices=_device_ids(device),
        device_memory_mib=f.integer("device_memory_mib", 0),
        device_threads=f.integer("device_threads", 0),
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.integer("memory_mib", 0),
        state=state,
        membw_gbps=f.number("membw_gbps", None),
        llc_ways=f.integer("llc_ways", None),
        start_time_s=f.number("start_time", None, minimum=-1e18),
        program=f.string("program", None),
    )


def _parse_pending(obj: object, index: int, problems: list[str]) -> Job:
    f = _Fields(obj, _label("pending job", obj, index, "id"), problems)
    f.unknown(PENDING_FIELDS)
    device_memory = f.integer("device_memory_mib", 0)
    device_threads = f.integer("device_threads", 0)
    inferred: JobKind = "device" if (device_memory or device_threads) else "cpu"
    kind: JobKind = f.choice("kind", ("device", "cpu"), inferred)
    device_count = f.integer("device_count", 1 if kind == "device" else 0)
    if kind == "cpu" and (device_memory or device_threads or device_count):
        problems.append(
            f"{f.what}: a job of kind 'cpu' cannot declare device_memory_mib, "
            "device_threads or device_count (allowed: 0 or absent)"
        )
    if kind == "device" and device_count < 1:
        f._bad("device_count", device_count, "an integer >= 1 for a job of kind 'device'")
    return Job(
        id=f.string("id"),
        device_memory_mib=device_memory,
        device_threads=device_threads,
        device_count=device_count,
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.integer("memory_mib", 0),
        priority=f.integer("priority", 0, minimum=-MAX_INT),
        submit_time_s=f.number("submit_time", 0.0, minimum=-1e18),
        kind=kind,
        processes=f.integer("processes", 1, minimum=1),
        program=f.string("program", None),
        alpha=f.number("alpha", None, maximum=1.0, exclusive_min=True),
        membw_gbps=f.number("membw_gbps", None),
        copy_bw_mbps=f.number("copy_bw_mbps", None),
        walltime_s=f.number("walltime_s", None, exclusive_min=True),
    )


def _cross_check(
    nodes: list[Node], running: list[RunningJob], pending: list[Job], problems: list[str]
) -> None:
    devices_of: dict[str, set[str]] = {}
    for node in nodes:
        if node.name in devices_of:
            problems.append(f'node "{node.name}": name appears more than once')
        ids = [d.id for d in node.devices]
        for dup in sorted({i for i in ids if ids.count(i) > 1}):
            problems.append(f'node "{node.name}": device id "{dup}" appears more than once')
        devices_of[node.name] = set(ids)
    seen_running: set[tuple[str, str]] = set()
    running_ids: set[str] = set()
    for r in running:
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
    seen: set[str] = set()
    for job in pending:
        if job.id in seen:
            problems.append(f'pending job "{job.id}": id appears more than once')
        if job.id in running_ids:
            problems.append(f'pending job "{job.id}": also listed as running')
        seen.add(job.id)


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
            ]
        )
        for r in snapshot.running
    ]
    pending = [job_to_dict(j) for j in snapshot.pending]
    out: dict[str, object] = {"nodes": nodes, "running": running, "pending": pending}
    if snapshot.now_s is not None:
        out["now"] = snapshot.now_s
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
            ("processes", None if j.processes == 1 else j.processes),
            ("program", j.program),
            ("alpha", j.alpha),
            ("membw_gbps", j.membw_gbps),
            ("copy_bw_mbps", j.copy_bw_mbps),
            ("walltime_s", j.walltime_s),
        ]
    )


def plan_to_dict(plan: Plan) -> dict[str, object]:
    """Serialize a plan to the JSON contract of DESIGN.md."""
    return {
        "policy": plan.policy,
        "assignments": [
            _compact(
                [
                    ("job", a.job),
                    ("node", a.node),
                    ("device", ",".join(a.devices) or None),
                    ("processes", a.processes),
                ]
            )
            for a in plan.assignments
        ],
        "unplaced": [{"job": u.job, "reason": u.reason, "code": u.code} for u in plan.unplaced],
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
    problems: list[str] = []
    top = _Fields(data, "plan", problems)
    if not top.ok:
        raise SnapshotError(problems, source)
    top.unknown(PLAN_FIELDS)
    policy = top.string("policy")
    assignments = []
    for i, obj in enumerate(top.array("assignments", [])):
        f = _Fields(obj, _label("assignment of job", obj, i, "job"), problems)
        f.unknown(ASSIGNMENT_FIELDS)
        device = f.string("device", None)
        assignments.append(
            Assignment(
                job=f.string("job"),
                node=f.string("node"),
                devices=_device_ids(device),
                processes=f.integer("processes", None, minimum=1),
            )
        )
    unplaced = []
    for i, obj in enumerate(top.array("unplaced", [])):
        f = _Fields(obj, _label("unplaced job", obj, i, "job"), problems)
        f.unknown(UNPLACED_FIELDS)
        code: UnplacedCode = f.choice("code", UNPLACED_CODES, "no_room")
        unplaced.append(Unplaced(job=f.string("job"), reason=f.string("reason"), code=code))
    stats = top.obj.get("stats")
    seconds = 0.0
    if isinstance(stats, Mapping):
        seconds = _Fields(stats, "plan stats", problems).number("seconds", 0.0)
    if problems:
        raise SnapshotError(problems, source)
    return Plan(policy, tuple(assignments), tuple(unplaced), seconds)


def decode_json(text: str, source: str, parse: Callable[[object, str], T]) -> T:
    """Decode JSON text and parse it, turning a syntax error into a :class:`SnapshotError`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError([f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"],
                            source) from exc  # fmt: skip
    return parse(data, source)
