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
from dataclasses import fields
from itertools import repeat
from typing import Any, TypeVar, cast

from coshare.errors import SnapshotError
from coshare.ledger.bounds import (
    MAX_COPY_BW_MBPS,
    MAX_CORES,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_JOB_NODES,
    MAX_LLC_WAYS,
    MAX_MEMBW_GBPS,
    MAX_MEMORY_MIB,
    MAX_PRIORITY,
    MAX_PROCESSES,
    MAX_TIME_S,
    MAX_WALLTIME_S,
    SHOWN_CHARS,
    as_float,
    plain,
    shorten,
)
from coshare.ledger.gangs import gang_problems
from coshare.ledger.ids import (
    ALLOWED_ID,
    MAX_ID_CHARS,
    MAX_TEXT_CHARS,
    id_problem,
    split_ids,
    text_problem,
)
from coshare.ledger.limits import (
    ALLOWED_AMOUNT,
    ALLOWED_TEXT,
    charge_problems,
    limit_problems,
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

#: Nodes of one snapshot (snapshot.schema.json's ``maxItems``).
MAX_SNAPSHOT_NODES = 1_000_000

_MISSING: Any = object()

NODE_FIELDS = (
    "name",
    "cores",
    "memory_mib",
    "membw_gbps",
    "llc_ways",
    "domain",
    "devices",
    *("membw_avail_gbps", "membw_baseline_gbps", "llc_ways_free", "facts_at_s"),
    "membw_at_s",
)
DEVICE_FIELDS = ("id", "memory_mib", "threads", "model")
RUNNING_FIELDS = (
    "id",
    "node",
    "device",
    "device_memory_mib",
    "device_threads",
    "cores",
    "memory_mib",
    "state",
    "membw_gbps",
    "llc_ways",
    "start_time",
    "program",
    "cpu_load_cores",
    "cpu_load_last_cores",
    "cpu_load_max_cores",
    "cpu_load_window_s",
    "walltime_s",
    "copy_bw_mbps",
    "harvest_from",
    "cpu_cores_held",
    "cpu_wait_cores",
    "cpu_wait_last_cores",
)
PENDING_FIELDS = (
    "id",
    "device_memory_mib",
    "device_threads",
    "device_count",
    "cores",
    "memory_mib",
    "priority",
    "submit_time",
    "kind",
    "processes",
    "program",
    "alpha",
    "membw_gbps",
    "copy_bw_mbps",
    "walltime_s",
    "nodes",
    "nodes_max",
    "processes_per_node",
    "charges",
)
SNAPSHOT_FIELDS = ("nodes", "running", "pending", "now", "limits")
LIMIT_FIELDS = ("id", "name", "holder", "max", "used")
PLAN_FIELDS = ("policy", "assignments", "unplaced", "stats", "trials", "requeue", "spreads")
SPREAD_FIELDS = ("job", "scale", "nodes", "cores_per_node", "ways", "note", "membw_gbps")
TRIAL_FIELDS = ("job", "node", "partners")
ASSIGNMENT_FIELDS = (
    "job",
    "node",
    "device",
    "processes",
    "harvest_from",
    "llc_ways",
    "membw_gbps",
    "llc_ways_spare",
)
UNPLACED_FIELDS = ("job", "reason", "code")
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

    def string(self, key: str, default: Any = _MISSING) -> Any:
        """Free text (a model, a program, a reason): printable, at most MAX_TEXT_CHARS."""
        value = self._get(key, default)
        if value is default:
            return value
        problem = text_problem(value, MAX_TEXT_CHARS) if isinstance(value, str) else None
        if not isinstance(value, str) or not value.strip() or problem:
            self._bad(
                key,
                value,
                f"a string of 1..{MAX_TEXT_CHARS} characters, no control characters",
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

    def cores(self, key: str, default: Any = _MISSING, *, capacity: bool = False) -> Any:
        """Cores in ``cpu_milli``: a node's capacity rounds down, a job's demand up (so
        a 3.9995-core node must not take a 4-core job)."""
        value = self.number(key, default, minimum=0.0, maximum=MAX_CORES, exclusive_min=capacity)
        if value is default:
            return value
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
    problems: list[str] = []
    top = _Fields(data, "snapshot", problems)
    if not top.ok:
        raise SnapshotError(problems, source)
    top.unknown(SNAPSHOT_FIELDS)
    nodes = [
        _fast_node(obj) or _parse_node(obj, i, problems)
        for i, obj in enumerate(top.array("nodes", max_items=MAX_SNAPSHOT_NODES))
    ]
    running = [_parse_running(obj, i, problems) for i, obj in enumerate(top.array("running", []))]
    listed = top.array("pending", [])
    pending = _fast_pending_all(listed)
    if pending is None:
        pending = [
            _fast_pending(obj) or _parse_pending(obj, i, problems) for i, obj in enumerate(listed)
        ]
    now = top.number("now", None, minimum=-MAX_TIME_S, maximum=MAX_TIME_S)
    limits = tuple(_parse_limit(obj, i, problems) for i, obj in enumerate(top.array("limits", [])))
    _cross_check(nodes, running, pending, problems)
    _check_charges(limits, pending, problems)
    if problems:
        raise SnapshotError(problems, source)
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), now, limits)


def _parse_limit(obj: object, index: int, problems: list[str]) -> Limit:
    """One scheduler limit (:mod:`coshare.ledger.limits`)."""
    f = _Fields(obj, _label("limit", obj, index, "id"), problems)
    f.unknown(LIMIT_FIELDS)
    limit = Limit(
        id=f._get("id", _MISSING),
        name=f._get("name", _MISSING),
        holder=f._get("holder", _MISSING),
        max=_as_amount(f._get("max", _MISSING)),
        used=_as_amount(f._get("used", _MISSING)),
    )
    if not f.ok or any(v is _MISSING for v in (limit.id, limit.name, limit.holder)):
        return limit
    for key, value, why in limit_problems(limit):
        if value is not _MISSING:
            allowed = ALLOWED_ID if key == "id" else ALLOWED_TEXT
            if key in ("max", "used"):
                allowed = ALLOWED_AMOUNT
            f._bad(key, value, allowed, why)
    return limit


def _parse_charges(f: _Fields) -> tuple[tuple[str, float], ...]:
    """A pending job's ``charges``: ``{"<limit id>": amount}``; checked against the
    snapshot's limits by :func:`_check_charges`."""
    value = f._get("charges", None)
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        f._bad("charges", value, 'an object {"<limit id>": amount}')
        return ()
    return tuple((str(k), _as_amount(v)) for k, v in value.items())


def _as_amount(value: Any) -> Any:
    """An amount as a float when it is a number (bools stay, to be refused)."""
    return float(value) if type(value) in (int, float) else value


def _check_charges(limits: tuple[Limit, ...], pending: list[Job], problems: list[str]) -> None:
    ids = [lim.id for lim in limits]
    for dup in sorted({i for i in ids if isinstance(i, str) and ids.count(i) > 1}):
        problems.append(f'limit "{dup}": id appears more than once')
    for job in pending:
        if not job.charges:
            continue
        for key, value, why in charge_problems(job, ids):
            allowed = ALLOWED_AMOUNT if "limit" not in why else "the id of a listed limit"
            problems.append(
                f'pending job "{job.id}": field {key!r} is {_show(value)}: it {why} '
                f"(allowed: {allowed})"
            )


# The fast paths (100,000 jobs validated in a fraction of a second). A well-formed
# object of the usual fields is checked here in a few inline comparisons per field and built
# directly; anything else -- a wrong type, a value out of range, an optional field these paths
# do not know, a non-ASCII id -- returns None, and the full per-field parser below checks it
# again and writes its messages. So a fast path only ever accepts what the full one accepts,
# with the same values (tests/unit/test_schema_fast.py compares them), and every refusal still
# comes from the full one.

_PENDING_KEYS = frozenset(PENDING_FIELDS) - {"charges"}  # charges: the full path
_NODE_FAST_KEYS = frozenset(("name", "cores", "memory_mib", "devices"))
_DEVICE_KEYS = frozenset(DEVICE_FIELDS)
#: A pending job's optional numbers: (field, minimum, maximum, whether the minimum is excluded),
#: as :func:`_parse_pending` checks them.
_PENDING_OPTIONAL = (
    ("alpha", 0.0, 1.0, True),
    ("membw_gbps", 0.0, MAX_MEMBW_GBPS, False),
    ("copy_bw_mbps", 0.0, MAX_COPY_BW_MBPS, False),
    ("walltime_s", 0.0, MAX_WALLTIME_S, True),
)


def _fast_id(value: object) -> str | None:
    """``value`` when it is a plain ASCII id :meth:`_Fields.ident` accepts; else None."""
    if (
        type(value) is str
        and 0 < len(value) <= MAX_ID_CHARS
        and value.isascii()
        and value.isprintable()
        and value[0] != " "
        and value[-1] != " "
        and "," not in value
    ):
        return value
    return None


def _fast_text(value: object) -> bool:
    """Whether ``value`` is plain ASCII text :meth:`_Fields.string` accepts."""
    return (
        type(value) is str
        and len(value) <= MAX_TEXT_CHARS
        and value.isascii()
        and value.isprintable()
        and not value.isspace()
        and value != ""
    )


def _fast_number(value: object, low: float, high: float, exclusive_low: bool = False) -> Any:
    """``value`` as :meth:`_Fields.number` returns it (an int as a float) when it is an int or
    float in range; ``_MISSING`` otherwise (NaN and the infinities fail the range test)."""
    kind = type(value)
    if kind is not int and kind is not float:
        return _MISSING
    number = cast(float, value)
    if (low < number if exclusive_low else low <= number) and number <= high:
        return float(number) if kind is int else number
    return _MISSING


def _fast_int(value: object, low: int, high: int) -> int | None:
    """``value`` when it is an int in range (what :meth:`_Fields.integer` keeps); else None."""
    if type(value) is int and low <= value <= high:
        return value
    return None


def _fast_pending(obj: object) -> Job | None:
    """The pending job ``obj`` describes when it is well formed (see above); else None."""
    if type(obj) is not dict or not obj.keys() <= _PENDING_KEYS:
        return None
    get = obj.get
    ident = _fast_id(get("id"))
    if ident is None:
        return None
    value = get("device_memory_mib")
    device_memory = 0 if value is None else _fast_int(value, 0, MAX_DEVICE_MEMORY_MIB)
    value = get("device_threads")
    device_threads = 0 if value is None else _fast_int(value, 0, MAX_DEVICE_THREADS)
    if device_memory is None or device_threads is None:
        return None
    kind: JobKind | None = get("kind")
    if kind is None:
        kind = "device" if (device_memory or device_threads) else "cpu"
    elif type(kind) is not str or (kind != "device" and kind != "cpu"):
        return None
    value = get("device_count")
    if value is None:
        device_count: int | None = 1 if kind == "device" else 0
    else:
        device_count = _fast_int(value, 0, MAX_DEVICES)
    if device_count is None:
        return None
    if kind == "cpu":
        if device_memory or device_threads or device_count:
            return None
    elif device_count < 1:
        return None
    if (
        get("nodes") is not None
        or get("nodes_max") is not None
        or get("processes_per_node") is not None
    ):
        return None  # gangs: the full path, with coshare.ledger.gangs' consistency rules
    value = get("processes")
    processes = 1 if value is None else _fast_int(value, 1, MAX_PROCESSES)
    value = get("cores")
    cores = None if value is None else _fast_number(value, 0.0, MAX_CORES)
    value = get("memory_mib")
    memory = 0 if value is None else _fast_int(value, 0, MAX_MEMORY_MIB)
    value = get("priority")
    priority = 0 if value is None else _fast_int(value, -MAX_PRIORITY, MAX_PRIORITY)
    value = get("submit_time")
    submit = 0.0 if value is None else _fast_number(value, -MAX_TIME_S, MAX_TIME_S)
    if (
        processes is None
        or cores is _MISSING
        or memory is None
        or priority is None
        or submit is _MISSING
    ):
        return None
    program = get("program")
    if program is not None and not _fast_text(program):
        return None
    optional: list[Any] = []
    for key, low, high, exclusive in _PENDING_OPTIONAL:
        value = get(key)
        if value is not None:
            value = _fast_number(value, low, high, exclusive)
            if value is _MISSING:
                return None
        optional.append(value)
    alpha, membw, copy_bw, walltime = optional
    cpu_milli = MILLI if cores is None else cores_to_milli(cores)
    # positionally, in the model's field order (a third cheaper than by keyword; the test
    # compares every field with the full path's job): a single-node job, nodes 1
    return Job(
        ident,
        device_memory,
        device_threads,
        device_count,
        cpu_milli,
        memory,
        priority,
        submit,
        kind,
        processes,
        program,
        alpha,
        membw,
        copy_bw,
        walltime,
    )


def _fast_pending_all(objs: list[Any]) -> list[Job] | None:
    """Every pending job of ``objs`` at once, a field at a time, when all of them are well
    formed as :func:`_fast_pending` takes them; else None (then each goes its own way).

    The same tests as :func:`_fast_pending` on whole columns: the types a column holds, its
    least and largest value, the ids' and programs' characters in one string. It accepts only
    what the per-job fast path accepts, with the same values (``tests/unit/test_schema_fast.py``
    compares the two); on the 100,000-job bench snapshot it takes a third of the per-job time.
    """
    if not objs:
        return []
    if set(map(type, objs)) != {dict}:
        return None
    present = set().union(*objs)
    if not present <= _PENDING_BATCH_KEYS:
        return None  # gangs and unknown fields: per job

    def column(key: str) -> list[Any] | None:
        return list(map(dict.get, objs, repeat(key))) if key in present else None

    ids = column("id")
    if ids is None or not _fast_ids(ids):
        return None
    n = len(objs)
    memory_dev = _int_column(column("device_memory_mib"), n, 0, 0, MAX_DEVICE_MEMORY_MIB)
    threads = _int_column(column("device_threads"), n, 0, 0, MAX_DEVICE_THREADS)
    if memory_dev is None or threads is None:
        return None
    kinds = _kinds(column("kind"), memory_dev, threads)
    if kinds is None:
        return None
    counts = column("device_count")
    if counts is not None and None in counts:
        counts = [
            (1 if k == "device" else 0) if c is None else c
            for c, k in zip(counts, kinds, strict=True)
        ]
    if counts is None:
        counts = [1 if k == "device" else 0 for k in kinds]
    counts = _int_column(counts, n, 0, 0, MAX_DEVICES)
    if counts is None:
        return None
    if "cpu" in kinds or min(counts) < 1:
        for m, t, c, k in zip(memory_dev, threads, counts, kinds, strict=True):
            if (k == "cpu" and (m or t or c)) or (k == "device" and c < 1):
                return None
    processes = _int_column(column("processes"), n, 1, 1, MAX_PROCESSES)
    memory = _int_column(column("memory_mib"), n, 0, 0, MAX_MEMORY_MIB)
    priority = _int_column(column("priority"), n, 0, -MAX_PRIORITY, MAX_PRIORITY)
    cpu_milli = _cores_column(column("cores"), n)
    submit = _number_column(column("submit_time"), n, 0.0, -MAX_TIME_S, MAX_TIME_S)
    if (
        processes is None
        or memory is None
        or priority is None
        or cpu_milli is None
        or submit is None
    ):
        return None
    programs = column("program")
    if programs is not None and not _fast_texts(programs):
        return None
    optional: list[Iterable[Any]] = []
    for key, low, high, exclusive in _PENDING_OPTIONAL:
        values = _number_column(column(key), n, None, low, high, exclusive)
        if values is None:
            return None
        optional.append(values)
    return list(
        map(
            _new_job,
            ids,
            memory_dev,
            threads,
            counts,
            cpu_milli,
            memory,
            priority,
            submit,
            kinds,
            processes,
            programs or repeat(None, n),
            *optional,
        )
    )


#: The fields :func:`_fast_pending_all` reads (a gang's go through the full path).
_PENDING_BATCH_KEYS = _PENDING_KEYS - {"nodes", "nodes_max", "processes_per_node"}


def _fast_ids(ids: list[Any]) -> bool:
    """Whether every value is an id :func:`_fast_id` takes."""
    if set(map(type, ids)) != {str}:
        return False
    joined = "".join(ids)
    lengths = list(map(len, ids))
    if (
        not (joined.isascii() and joined.isprintable())
        or "," in joined
        or min(lengths) < 1
        or max(lengths) > MAX_ID_CHARS
    ):
        return False
    return " " not in joined or not any(i[0] == " " or i[-1] == " " for i in ids)


def _fast_texts(values: list[Any]) -> bool:
    """Whether every value is None or text :func:`_fast_text` takes."""
    texts = [v for v in values if v is not None]
    if not texts:
        return True
    if set(map(type, texts)) != {str}:
        return False
    joined = "".join(texts)
    lengths = list(map(len, texts))
    return (
        joined.isascii()
        and joined.isprintable()
        and min(lengths) >= 1
        and max(lengths) <= MAX_TEXT_CHARS
        and not any(map(str.isspace, texts))
    )


def _int_column(values: list[Any] | None, n: int, default: int, low: int, high: int) -> Any:
    """``values`` (None: ``default``) when all are ints in range, as :func:`_fast_int` keeps
    them; ``n`` defaults for an absent field; else None."""
    if values is None:
        return [default] * n
    if None in values:
        values = [default if v is None else v for v in values]
    if set(map(type, values)) != {int} or min(values) < low or max(values) > high:
        return None
    return values


def _number_column(
    values: list[Any] | None,
    n: int,
    default: float | None,
    low: float,
    high: float,
    exclusive_low: bool = False,
) -> Any:
    """``values`` as :func:`_fast_number` returns them (ints as floats; None: ``default``)
    when all are numbers in range; ``n`` defaults for an absent field; else None."""
    if values is None:
        return [default] * n
    numbers = [v for v in values if v is not None]
    if not numbers:
        return [default] * n
    kinds = set(map(type, numbers))
    if not kinds <= {int, float}:
        return None
    if float in kinds and any(v != v for v in numbers):
        return None  # NaN: the range test of the per-job path fails it
    least, most = min(numbers), max(numbers)
    if not ((low < least if exclusive_low else low <= least) and most <= high):
        return None
    if len(numbers) < len(values) or int in kinds:
        return [default if v is None else float(v) if type(v) is int else v for v in values]
    return values


def _cores_column(values: list[Any] | None, n: int) -> Any:
    """Each job's ``cpu_milli`` from its ``cores`` (one core when absent) when all are numbers
    :func:`_fast_pending` takes; else None. Whole cores are exact in milli (no float)."""
    checked = _number_column(values, n, None, 0.0, MAX_CORES)
    if checked is None or values is None:
        return None if checked is None else [MILLI] * n
    if set(map(type, values)) == {int}:
        return [c * MILLI for c in values]
    return [
        MILLI if c is None else c * MILLI if type(c) is int else cores_to_milli(c) for c in values
    ]


def _kinds(values: list[Any] | None, device_memory: Any, threads: Any) -> list[Any] | None:
    """Each job's kind: as given (``device`` or ``cpu``), else inferred from its device
    needs as :func:`_fast_pending` does; None when one is neither."""
    given = [] if values is None else [v for v in values if v is not None]
    if given and (set(map(type, given)) != {str} or not set(given) <= {"device", "cpu"}):
        return None
    if values is not None and len(given) == len(values):
        return values
    return [
        ("device" if (m or t) else "cpu") if k is None else k
        for k, m, t in zip(values or [None] * len(threads), device_memory, threads, strict=True)
    ]


_new_object = object.__new__
(
    _set_id,
    _set_device_memory,
    _set_device_threads,
    _set_device_count,
    _set_cpu_milli,
    _set_memory,
    _set_priority,
    _set_submit,
    _set_kind,
    _set_processes,
    _set_program,
    _set_alpha,
    _set_membw,
    _set_copy_bw,
    _set_walltime,
    _set_nodes,
    _set_nodes_max,
    _set_per_node,
    _set_charges,
) = (getattr(Job, f.name).__set__ for f in fields(Job))


def _new_job(
    ident: str,
    device_memory: int,
    device_threads: int,
    device_count: int,
    cpu_milli: int,
    memory: int,
    priority: int,
    submit: float,
    kind: JobKind,
    processes: int,
    program: str | None,
    alpha: float | None,
    membw: float | None,
    copy_bw: float | None,
    walltime: float | None,
) -> Job:
    """A single-node :class:`Job` of checked values, built slot by slot: the frozen class's
    ``__init__`` sets each field through ``object.__setattr__`` by name, twice the time for
    100,000 jobs (the test compares every field with ``Job(...)``'s)."""
    job: Job = _new_object(Job)
    _set_id(job, ident)
    _set_device_memory(job, device_memory)
    _set_device_threads(job, device_threads)
    _set_device_count(job, device_count)
    _set_cpu_milli(job, cpu_milli)
    _set_memory(job, memory)
    _set_priority(job, priority)
    _set_submit(job, submit)
    _set_kind(job, kind)
    _set_processes(job, processes)
    _set_program(job, program)
    _set_alpha(job, alpha)
    _set_membw(job, membw)
    _set_copy_bw(job, copy_bw)
    _set_walltime(job, walltime)
    _set_nodes(job, 1)
    _set_nodes_max(job, None)
    _set_per_node(job, None)
    _set_charges(job, ())
    return job


def _fast_node(obj: object) -> Node | None:
    """The node ``obj`` describes when it has only a name, cores, memory and well-formed
    devices (see above); else None."""
    if type(obj) is not dict or not obj.keys() <= _NODE_FAST_KEYS:
        return None
    name = _fast_id(obj.get("name"))
    cores = _fast_number(obj.get("cores"), 0.0, MAX_CORES, True)
    memory = _fast_int(obj.get("memory_mib"), 1, MAX_MEMORY_MIB)
    listed = obj.get("devices")
    if (
        name is None
        or cores is _MISSING
        or memory is None
        or (listed is not None and type(listed) is not list)
        or (listed is not None and len(listed) > MAX_DEVICES)
    ):
        return None  # the full parser says what is wrong (the devices' bound too)
    devices = []
    for dev in listed or ():
        if type(dev) is not dict or not dev.keys() <= _DEVICE_KEYS:
            return None
        ident = _fast_id(dev.get("id"))
        device_memory = _fast_int(dev.get("memory_mib"), 1, MAX_DEVICE_MEMORY_MIB)
        threads = _fast_int(dev.get("threads"), 1, MAX_DEVICE_THREADS)
        model = dev.get("model")
        if (
            ident is None
            or device_memory is None
            or threads is None
            or (model is not None and not _fast_text(model))
        ):
            return None
        devices.append(Device(ident, device_memory, threads, model or ""))
    return Node(name, capacity_cores_to_milli(cores), memory, tuple(devices))


def _parse_node(obj: object, index: int, problems: list[str]) -> Node:
    f = _Fields(obj, _label("node", obj, index, "name"), problems)
    f.unknown(NODE_FIELDS)
    name = f.ident("name")
    devices = []
    for j, dev in enumerate(f.array("devices", [], max_items=MAX_DEVICES)):
        d = _Fields(dev, f"{f.what}: {_label('device', dev, j, 'id')}", problems)
        d.unknown(DEVICE_FIELDS)
        devices.append(
            Device(
                id=d.ident("id"),
                memory_mib=d.integer("memory_mib", minimum=1, maximum=MAX_DEVICE_MEMORY_MIB),
                threads=d.integer("threads", minimum=1, maximum=MAX_DEVICE_THREADS),
                model=d.string("model", ""),
            )
        )
    return Node(
        name=name,
        cpu_milli=f.cores("cores", capacity=True),
        memory_mib=f.integer("memory_mib", minimum=1, maximum=MAX_MEMORY_MIB),
        devices=tuple(devices),
        membw_gbps=f.number("membw_gbps", None, exclusive_min=True, maximum=MAX_MEMBW_GBPS),
        llc_ways=f.integer("llc_ways", None, minimum=1, maximum=MAX_LLC_WAYS),
        domain=f.string("domain", None),
        **_node_facts(f),
    )


def _node_facts(f: _Fields) -> dict[str, Any]:
    """A node's optional facts fields (coshare.ledger.facts), checked like every other field."""
    return {
        "membw_avail_gbps": f.number("membw_avail_gbps", None, maximum=MAX_MEMBW_GBPS),
        "membw_baseline_gbps": f.number(
            "membw_baseline_gbps", None, exclusive_min=True, maximum=MAX_MEMBW_GBPS
        ),
        "llc_ways_free": f.integer("llc_ways_free", None, maximum=MAX_LLC_WAYS),
        "facts_at_s": f.number("facts_at_s", None, minimum=-MAX_TIME_S, maximum=MAX_TIME_S),
        "membw_at_s": f.number("membw_at_s", None, minimum=-MAX_TIME_S, maximum=MAX_TIME_S),
    }


def _load_facts(f: _Fields) -> dict[str, Any]:
    """A running job's optional CPU load fields (coshare.ledger.facts), in cores and seconds."""
    out = {
        key: f.number(key, None, maximum=MAX_CORES)
        for key in ("cpu_load_cores", "cpu_load_last_cores", "cpu_load_max_cores")
    }
    out["cpu_load_window_s"] = f.number("cpu_load_window_s", None, maximum=MAX_TIME_S)
    held = f.number("cpu_cores_held", None, maximum=MAX_CORES)
    out["cpu_cores_held"] = None if held is None else int(held)
    for key in ("cpu_wait_cores", "cpu_wait_last_cores"):
        out[key] = f.number(key, None, maximum=MAX_CORES)
    return out


def _parse_running(obj: object, index: int, problems: list[str]) -> RunningJob:
    f = _Fields(obj, _label("running job", obj, index, "id"), problems)
    f.unknown(RUNNING_FIELDS)
    device = f.device_list("device")
    state: PlacementState = f.choice("state", ("running", "planned"), "running")
    return RunningJob(
        id=f.ident("id"),
        node=f.ident("node"),
        devices=device,
        device_memory_mib=f.integer("device_memory_mib", 0, maximum=MAX_DEVICE_MEMORY_MIB),
        device_threads=f.integer("device_threads", 0, maximum=MAX_DEVICE_THREADS),
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.integer("memory_mib", 0, maximum=MAX_MEMORY_MIB),
        state=state,
        membw_gbps=f.number("membw_gbps", None, maximum=MAX_MEMBW_GBPS),
        llc_ways=f.integer("llc_ways", None, maximum=MAX_LLC_WAYS),
        start_time_s=f.number("start_time", None, minimum=-MAX_TIME_S, maximum=MAX_TIME_S),
        program=f.string("program", None),
        **_load_facts(f),
        walltime_s=f.number("walltime_s", None, exclusive_min=True, maximum=MAX_WALLTIME_S),
        copy_bw_mbps=f.number("copy_bw_mbps", None, maximum=MAX_COPY_BW_MBPS),
        harvest_from=f.ident("harvest_from", None),
    )


def _parse_pending(obj: object, index: int, problems: list[str]) -> Job:
    f = _Fields(obj, _label("pending job", obj, index, "id"), problems)
    f.unknown(PENDING_FIELDS)
    device_memory = f.integer("device_memory_mib", 0, maximum=MAX_DEVICE_MEMORY_MIB)
    device_threads = f.integer("device_threads", 0, maximum=MAX_DEVICE_THREADS)
    inferred: JobKind = "device" if (device_memory or device_threads) else "cpu"
    kind: JobKind = f.choice("kind", ("device", "cpu"), inferred)
    device_count = f.integer("device_count", 1 if kind == "device" else 0, maximum=MAX_DEVICES)
    if kind == "cpu" and (device_memory or device_threads or device_count):
        problems.append(
            f"{f.what}: a job of kind 'cpu' cannot declare device_memory_mib, "
            "device_threads or device_count (allowed: 0 or absent)"
        )
    if kind == "device" and device_count < 1:
        f._bad("device_count", device_count, "an integer >= 1 for a job of kind 'device'")
    nodes = f.integer("nodes", 1, minimum=1, maximum=MAX_JOB_NODES)
    nodes_max = f.integer("nodes_max", None, minimum=1, maximum=MAX_JOB_NODES)
    per_node = f.integer("processes_per_node", None, minimum=1, maximum=MAX_PROCESSES)
    # a gang without "processes" runs nodes x processes_per_node (one per node):
    # coshare.ledger.gangs
    processes = f.integer(
        "processes", min(nodes * (per_node or 1), MAX_PROCESSES), minimum=1, maximum=MAX_PROCESSES
    )
    gang = Job(
        id="", processes=processes, nodes=nodes, nodes_max=nodes_max, processes_per_node=per_node
    )
    for key, value, allowed in gang_problems(gang):
        f._bad(key, value, allowed)
    return Job(
        id=f.ident("id"),
        device_memory_mib=device_memory,
        device_threads=device_threads,
        device_count=device_count,
        cpu_milli=f.cores("cores", MILLI),
        memory_mib=f.integer("memory_mib", 0, maximum=MAX_MEMORY_MIB),
        priority=f.integer("priority", 0, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY),
        submit_time_s=f.number("submit_time", 0.0, minimum=-MAX_TIME_S, maximum=MAX_TIME_S),
        kind=kind,
        processes=processes,
        program=f.string("program", None),
        alpha=f.number("alpha", None, maximum=1.0, exclusive_min=True),
        membw_gbps=f.number("membw_gbps", None, maximum=MAX_MEMBW_GBPS),
        copy_bw_mbps=f.number("copy_bw_mbps", None, maximum=MAX_COPY_BW_MBPS),
        walltime_s=f.number("walltime_s", None, exclusive_min=True, maximum=MAX_WALLTIME_S),
        nodes=nodes,
        nodes_max=nodes_max,
        processes_per_node=per_node,
        charges=_parse_charges(f),
    )


def _cross_check(
    nodes: list[Node], running: list[RunningJob], pending: list[Job], problems: list[str]
) -> None:
    devices_of: dict[str, set[str]] = {}
    for node in nodes:
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
        if not isinstance(job.id, str):  # an entry already refused for having no id
            continue
        if job.id in seen:
            problems.append(f'pending job "{job.id}": id appears more than once')
        if job.id in running_ids:
            problems.append(f'pending job "{job.id}": also listed as running')
        seen.add(job.id)


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
            {"id": m.id, "name": m.name, "holder": m.holder, "max": m.max, "used": m.used}
            for m in snapshot.limits
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
        assignments.append(
            Assignment(
                job=f.ident("job"),
                node=f.ident("node"),
                devices=f.device_list("device"),
                processes=f.integer("processes", None, minimum=1, maximum=MAX_PROCESSES),
                harvest_from=f.ident("harvest_from", None),
                llc_ways=f.integer("llc_ways", None, minimum=1, maximum=MAX_LLC_WAYS),
                membw_gbps=f.number("membw_gbps", None, maximum=MAX_MEMBW_GBPS),
                llc_ways_spare=f.integer("llc_ways_spare", None, maximum=MAX_LLC_WAYS),
            )
        )
    unplaced = []
    for i, obj in enumerate(top.array("unplaced", [])):
        f = _Fields(obj, _label("unplaced job", obj, i, "job"), problems)
        f.unknown(UNPLACED_FIELDS)
        code: UnplacedCode = f.choice("code", UNPLACED_CODES, "no_room")
        unplaced.append(Unplaced(job=f.ident("job"), reason=f.string("reason"), code=code))
    trials = []
    for i, obj in enumerate(top.array("trials", [])):
        f = _Fields(obj, _label("trial of job", obj, i, "job"), problems)
        f.unknown(TRIAL_FIELDS)
        partners = f.array("partners", [])
        trials.append(
            Trial(
                job=f.ident("job"),
                node=f.ident("node"),
                partners=tuple(_trial_partners(partners, f, problems)),
            )
        )
    spreads = []
    for i, obj in enumerate(top.array("spreads", [])):
        f = _Fields(obj, _label("spread of job", obj, i, "job"), problems)
        f.unknown(SPREAD_FIELDS)
        spreads.append(
            Spread(
                job=f.ident("job"),
                scale=f.integer("scale", minimum=1, maximum=MAX_JOB_NODES),
                nodes=f.integer("nodes", minimum=1, maximum=MAX_JOB_NODES),
                cores_per_node=f.integer("cores_per_node", minimum=1, maximum=MAX_CORES),
                ways=f.integer("ways", None, minimum=1, maximum=MAX_LLC_WAYS),
                note=f.string("note", ""),
                membw_gbps=f.number("membw_gbps", None, exclusive_min=True, maximum=MAX_MEMBW_GBPS),
            )
        )
    requeue = []
    for i, obj in enumerate(top.array("requeue", [])):
        f = _Fields(obj, _label("requeued job", obj, i, "job"), problems)
        f.unknown(UNPLACED_FIELDS)
        code = f.choice("code", UNPLACED_CODES, "no_room")
        requeue.append(Unplaced(job=f.ident("job"), reason=f.string("reason"), code=code))
    stats = top.obj.get("stats")
    seconds = 0.0
    if isinstance(stats, Mapping):
        seconds = _Fields(stats, "plan stats", problems).number("seconds", 0.0)
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
    integer longer than Python converts from text."""
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
    return parse(data, source)
