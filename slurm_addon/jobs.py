"""Jobs as ``squeue --json`` (Slurm 22.05) shows them, read by a pure parser.

Slurm's job states map to what the planner needs in :data:`JOB_STATES`; an unknown state
maps to ``unknown`` with a note and is treated as holding its resources, the safe side.
Numbers are read both as plain integers (22.05) and as the ``{"set", "number"}`` objects of
later releases, so a controller upgrade degrades to notes rather than a wrong snapshot.
Parsers append what an admin should know to a ``notes`` list (they log nothing: pure).

Note: in 22.05 ``squeue --json`` ignores ``--jobs``/``--states`` and prints every job the
controller still remembers (``MinJobAge``); callers filter here. That is why the quick
re-read around a write is ``squeue --Format`` (:func:`fields_format`), whose plain text is
framed with a random marker so that no user text can change how another job is read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import hostlist
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_JOB_NODES,
    MAX_MEMORY_MIB,
    MAX_PRIORITY,
    MAX_PROCESSES,
    MAX_TIME_S,
    BadValue,
    bounded,
    shorten_text,
)
from coshare.ledger.ids import checked_id

from slurm_addon.errors import SlurmControllerDown, SlurmOutputError

T = TypeVar("T")

JobPhase = Literal["pending", "active", "ended", "unknown"]
"""``active``: started and still holding its node's resources."""

#: Slurm job state -> phase. Requeued jobs are pending again; completing ones still hold.
JOB_STATES: dict[str, JobPhase] = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "SPECIAL_EXIT": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "active",
    "CONFIGURING": "active",
    "COMPLETING": "active",
    "SUSPENDED": "active",
    "STOPPED": "active",
    "RESIZING": "active",
    "SIGNALING": "active",
    "STAGE_OUT": "active",
    "POWER_UP_NODE": "active",
    "COMPLETED": "ended",
    "CANCELLED": "ended",
    "FAILED": "ended",
    "TIMEOUT": "ended",
    "NODE_FAIL": "ended",
    "PREEMPTED": "ended",
    "BOOT_FAIL": "ended",
    "DEADLINE": "ended",
    "OUT_OF_MEMORY": "ended",
    "REVOKED": "ended",
}

#: Slurm job ids are 32-bit.
MAX_JOB_ID = 2**32

#: State reasons of a held job (priority 0).
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


@dataclass(frozen=True)
class SlurmJob:
    """What coshare needs of one Slurm job.

    Attributes:
        id: the job id (``"4711"``).
        phase: ``pending``, ``active``, ``ended`` or ``unknown`` (see :data:`JOB_STATES`).
        state: Slurm's state name.
        reason: Slurm's state reason (``JobHeldUser``, ``Resources``, ...).
        held: whether it is held (priority 0): it cannot start until released.
        comment: the user's comment (where annotations live).
        admin_comment: the operator's comment (where coshare writes placements).
        partition: its partition (several, comma-separated, if the user gave several).
        nodes: the nodes it runs on (empty while pending).
        required_nodes: its ReqNodeList as Slurm prints it.
        cpus: CPUs requested (pending) or allocated (active), over all its nodes.
        memory_mib: host memory on each of its nodes.
        memory_per_cpu_mib: host memory per CPU when it asked so (``--mem-per-cpu``, or
            ``DefMemPerCPU``); 0 when it asked per node (``--mem``).
        node_count: nodes requested (the fewest, ``-N min-max``) or allocated.
        max_nodes: the most nodes it asked for (``-N min-max``); 0 when not set.
        tasks: its tasks (``--ntasks``, or what sbatch derived from ``-N`` and
            ``--ntasks-per-node``).
        tasks_per_node: ``--ntasks-per-node``; 0 when not set.
        gres_detail: Slurm's own GRES allocations per node (``gpu:phi:1(IDX:0)``).
        priority: Slurm's priority (0 when held).
        submit_time_s: submission time, seconds since the epoch.
        eligible_time_s: earliest start (``--begin``), seconds since the epoch; 0 if none.
        start_time_s: when it started (running or suspended), seconds since the epoch; 0
            while pending (a trial co-run is measured ``init_s`` after it).
        time_limit_s: its time limit (``--time``), seconds; 0 when it has none (infinite).
        dependency: its dependency expression with Slurm's verdict, empty if none.
        array: whether it is (a task of) a job array.
        user: the owner's name.
        account: the account it is charged to (fair share, association limits).
        qos: its quality of service (priority, QOS limits).
        tres: what it asks for (pending) or holds (started), as Slurm's TRES string
            (``cpu=1,mem=256M,node=1,billing=1,gres/gpu=1``).
        nice: its nice value (subtracted from its priority).
        problem: why some of its numbers could not be read (each field with its value and
            range), empty when all could; those fields then hold their defaults. A pending
            annotated job with a problem is refused; a started one holds its whole nodes.
    """

    id: str
    phase: JobPhase
    state: str
    reason: str = ""
    held: bool = False
    comment: str = ""
    admin_comment: str = ""
    partition: str = ""
    nodes: tuple[str, ...] = ()
    required_nodes: str = ""
    cpus: int = 1
    memory_mib: int = 0
    memory_per_cpu_mib: int = 0
    node_count: int = 1
    max_nodes: int = 0
    tasks: int = 1
    tasks_per_node: int = 0
    gres_detail: tuple[str, ...] = ()
    priority: int = 0
    submit_time_s: float = 0.0
    eligible_time_s: float = 0.0
    start_time_s: float = 0.0
    time_limit_s: float = 0.0
    dependency: str = ""
    array: bool = False
    user: str = ""
    account: str = ""
    qos: str = ""
    tres: str = ""
    nice: int = 0
    problem: str = ""


def number(
    value: object,
    default: int = 0,
    *,
    field: str = "number",
    maximum: float = MAX_PRIORITY,
    minimum: float = 0,
    capacity: bool = False,
) -> int:
    """An integer field of Slurm's JSON: plain (22.05) or ``{"set", "number"}`` (23.02+);
    ``default`` when null, unset or infinite (Slurm's "no limit"). A fraction rounds up, or
    down for a ``capacity`` (never promise more than there is).

    Raises:
        BadValue: NaN or Infinity (``json.loads`` accepts both), text, or a number outside
            ``minimum..maximum`` (see :mod:`coshare.ledger.bounds`), naming ``field``.
    """
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int) and minimum <= value <= maximum:  # the usual case, quickly
        return value
    if isinstance(value, Mapping):
        if value.get("infinite") or not value.get("set", True):
            return default
        return number(
            value.get("number"),
            default,
            field=field,
            maximum=maximum,
            minimum=minimum,
            capacity=capacity,
        )
    found = bounded(field, value, maximum, minimum=minimum)
    return math.floor(found) if capacity else math.ceil(found)


def text(value: object) -> str:
    """A string field of Slurm's JSON (``None`` and non-strings read as empty)."""
    return value if isinstance(value, str) else ""


def expand_nodes(expression: str) -> tuple[str, ...]:
    """A Slurm hostlist (``csl-n[1-3],gpu07``) as node names.

    Raises:
        ValueError: the expression is malformed.
    """
    if not expression or expression == "(null)":
        return ()
    try:
        return tuple(hostlist.expand_hostlist(expression))
    except hostlist.BadHostlist as exc:
        raise ValueError(f"bad hostlist {expression!r}: {exc}") from exc


def decode(output: str, command: str) -> Mapping[str, object]:
    """The top-level object of a ``--json`` output.

    Raises:
        SlurmOutputError: not JSON (nesting or a number Python cannot decode included), or
            Slurm reported errors in it.
    """
    try:
        data = json.loads(output)
    except json.JSONDecodeError as exc:
        raise SlurmOutputError(command, f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError as exc:  # arrays or objects nested ~1,000 deep
        raise SlurmOutputError(command, "not readable: nested too deeply") from exc
    except ValueError as exc:  # an integer longer than Python converts from text
        raise SlurmOutputError(command, "not readable: a number has too many digits") from exc
    if not isinstance(data, Mapping):
        raise SlurmOutputError(command, "not a JSON object")
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0] if isinstance(errors[0], Mapping) else {}
        detail = f"{text(first.get('description'))} ({text(first.get('source'))})"
        if text(first.get("source")).startswith("slurm_load"):
            # 22.05 prints this, with exit status 0, when slurmctld does not answer.
            raise SlurmControllerDown(command, detail)
        raise SlurmOutputError(command, f"Slurm reported errors: {detail}")
    return data


#: Slurm's "no value" and "infinite" (``NO_VAL``, ``INFINITE``) as 22.05 prints a time limit.
NO_LIMIT_MINUTES = 2**32 - 1


def _minutes(limit: int) -> int:
    """A time limit in minutes; 0 for none (Slurm's NO_VAL or INFINITE)."""
    return 0 if limit >= NO_LIMIT_MINUTES - 1 else limit


def parse_job(record: Mapping[str, object], notes: list[str] | None = None) -> SlurmJob:
    """One job record of ``squeue --json``.

    Args:
        record: the record.
        notes: where to say what an admin should know (an unknown state).

    Raises:
        ValueError: the record has no job id or an unreadable node list.
    """
    job_id = number(record.get("job_id"), -1, field="job_id", maximum=MAX_JOB_ID)
    if job_id < 0:
        raise ValueError("job record without job_id")
    state = text(record.get("job_state")).split(",")[0].strip().upper()
    phase = JOB_STATES.get(state)
    if phase is None:
        if notes is not None:
            notes.append(
                f"job {job_id} has unknown state {shorten_text(state)!r}; treating it "
                "as holding its nodes"
            )
        phase = "unknown"
    # Where it runs must be read, or the record is skipped: node names are ids.
    nodes = tuple(checked_id("nodes", n) for n in expand_nodes(text(record.get("nodes"))))
    problems: list[str] = []

    def read(key: str, default: int, maximum: float, minimum: float = 0) -> int:
        try:
            return number(record.get(key), default, field=key, maximum=maximum, minimum=minimum)
        except BadValue as exc:  # one field: the job is refused or held whole, not skipped
            problems.append(str(exc))
            return default

    cpus = max(read("cpus", 1, MAX_CORES), 1)
    node_count = max(read("node_count", 1, MAX_CORES), 1)
    per_node = read("memory_per_node", 0, MAX_MEMORY_MIB)
    per_cpu = read("memory_per_cpu", 0, MAX_MEMORY_MIB)
    memory = per_node if per_node else per_cpu * -(-cpus // node_count)
    max_nodes = read("max_nodes", 0, MAX_JOB_NODES)
    tasks = max(read("tasks", 1, MAX_PROCESSES), 1)
    tasks_per_node = read("tasks_per_node", 0, MAX_PROCESSES)
    reason = text(record.get("state_reason"))
    priority = read("priority", 0, MAX_PRIORITY)
    gres = record.get("gres_detail")
    return SlurmJob(
        id=str(job_id),
        phase=phase,
        state=state,
        reason=reason,
        held=phase == "pending" and (priority == 0 or reason in HELD_REASONS),
        comment=text(record.get("comment")),
        admin_comment=text(record.get("admin_comment")),
        partition=text(record.get("partition")),
        nodes=nodes,
        required_nodes=text(record.get("required_nodes")),
        cpus=cpus,
        memory_mib=memory,
        memory_per_cpu_mib=0 if per_node else per_cpu,
        node_count=node_count,
        max_nodes=max_nodes,
        tasks=tasks,
        tasks_per_node=tasks_per_node,
        gres_detail=tuple(g for g in gres if isinstance(g, str)) if isinstance(gres, list) else (),
        priority=priority,
        submit_time_s=float(read("submit_time", 0, MAX_TIME_S, -MAX_TIME_S)),
        eligible_time_s=float(read("eligible_time", 0, MAX_TIME_S, -MAX_TIME_S)),
        start_time_s=float(read("start_time", 0, MAX_TIME_S, -MAX_TIME_S))
        if phase != "pending"
        else 0.0,
        time_limit_s=60.0 * _minutes(read("time_limit", 0, NO_LIMIT_MINUTES)),
        dependency=text(record.get("dependency")),
        array=read("array_job_id", 0, MAX_JOB_ID) != 0
        or bool(text(record.get("array_task_string"))),
        user=text(record.get("user_name")),
        account=text(record.get("account")),
        qos=text(record.get("qos")),
        tres=text(record.get("tres_req_str" if phase == "pending" else "tres_alloc_str"))
        or text(record.get("tres_req_str")),
        nice=_quiet_number(record.get("nice")),
        problem="; ".join(problems),
    )


def _quiet_number(value: object) -> int:
    """A number that only orders jobs (nice): 0 when unreadable, never a problem of the job
    (the priority it feeds falls back on submit time itself, :mod:`slurm_addon.priority`)."""
    try:
        return number(value, 0, field="nice", maximum=2**31, minimum=-(2**31))
    except BadValue:
        return 0


def parse_records(
    output: str,
    command: str,
    key: str,
    kind: str,
    parse: Callable[[Mapping[str, object], list[str]], T],
    notes: list[str] | None = None,
) -> list[T]:
    """``parse`` of every record in the ``key`` list of a ``--json`` output; a record that is
    not an object, or that ``parse`` fails on (whatever it raises), is skipped with a note:
    one record never stops the read of the others.

    Raises:
        SlurmOutputError: the output as a whole is unreadable.
    """
    sink = notes if notes is not None else []
    data = decode(output, command)
    records = data.get(key)
    if not isinstance(records, list):
        raise SlurmOutputError(command, f"no '{key}' list")
    parsed = []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            sink.append(f"{command}: {kind} record {index} is not an object; skipped")
            continue
        try:
            parsed.append(parse(record, sink))
        except Exception as exc:  # one unreadable record must not stop the cycle
            sink.append(f"{command}: {kind} record {index} skipped: {exc}")
    return parsed


def parse_squeue_json(output: str, notes: list[str] | None = None) -> list[SlurmJob]:
    """Every job of ``squeue --json``; unreadable records are skipped with a note.

    Raises:
        SlurmOutputError: the output as a whole is unreadable.
    """
    return parse_records(output, "squeue --json", "jobs", "job", parse_job, notes)


#: The fields of the quick re-read around a write, in order (``squeue --Format`` names).
FIELDS = ("JobID", "State", "Reason", "PriorityLong", "ReqNodes", "admin_comment", "Comment")
_NULL = "(null)"
_PRIORITY = re.compile(r"[0-9]{1,20}")
#: What ends a record of :func:`fields_format` after its last field's marker (squeue then
#: prints a line break).
_RECORD_END = "end"


def fields_format(marker: str) -> str:
    """The ``squeue --Format`` of the quick re-read, every field followed by ``marker``.

    squeue prints each field's suffix verbatim (``JobID:0<suffix>``), and the user's comment
    may hold anything, line breaks included. The marker is random per call (the client draws
    it), so no comment can hold it: a line a user wrote can never pass for another job's.

    Raises:
        ValueError: a marker that squeue would not print verbatim.
    """
    if not marker or not marker[0].isalpha() or not marker.isalnum():
        raise ValueError(f"marker {marker!r}: letters and digits, starting with a letter")
    last = len(FIELDS) - 1
    return ",".join(
        f"{name}:0{marker}{_RECORD_END if i == last else ''}" for i, name in enumerate(FIELDS)
    )


def parse_squeue_fields(output: str, job_ids: Collection[str], marker: str) -> dict[str, SlurmJob]:
    """The quick re-read (``squeue --noheader --states=all --jobs=... --Format=``
    :func:`fields_format`, ~80 ms for 1,000 jobs where ``--json``, which cannot filter in
    22.05, takes ~450 ms) of the jobs being written.

    Records are cut at ``marker + "end"`` and fields at ``marker``, never at line breaks or
    ``|``, so a comment spanning lines or imitating another job's line stays that job's
    comment. Only the fields the Editor compares are filled; a job listed twice (which the
    marker makes impossible) is left out, so the Editor writes nothing for it.

    Returns:
        The jobs of ``job_ids`` that squeue still knows.
    """
    wanted = set(job_ids)
    jobs: dict[str, SlurmJob] = {}
    twice: set[str] = set()
    for record in output.split(marker + _RECORD_END):
        fields = record.removeprefix("\n").split(marker)
        if len(fields) != len(FIELDS) or fields[0] not in wanted:
            continue  # the empty rest after the last record, or a job not asked for
        job_id, state, reason, priority, required, admin, comment = fields
        if job_id in jobs:
            twice.add(job_id)
        phase = JOB_STATES.get(state, "unknown")
        # ASCII digits only: str.isdigit() is true for "²", which int() refuses.
        prio = int(priority) if _PRIORITY.fullmatch(priority) else 0
        jobs[job_id] = SlurmJob(
            id=job_id,
            phase=phase,
            state=state,
            reason=reason,
            held=phase == "pending" and (prio == 0 or reason in HELD_REASONS),
            comment="" if comment == _NULL else comment,
            admin_comment="" if admin == _NULL else admin,
            required_nodes="" if required == _NULL else required,
            priority=prio,
        )
    return {job_id: job for job_id, job in jobs.items() if job_id not in twice}
