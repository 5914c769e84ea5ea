"""Replaying a cluster's own history: what its scheduler recorded of finished jobs.

An admin asks what sharing would have bought on *their* cluster's last month, which lives in
Slurm's accounting (``sacct --json``) or HTCondor's history (``condor_history -json``), not in
SWF. Each adapter reads its scheduler's records into :class:`Finished` values (one job as it
really ran: who, how many cores, how much memory, how many devices, when it was submitted,
started and ended, and the coshare keys it declared, if any); this module turns them into the
jobs a replay submits (:func:`workload`), so both schedulers' histories replay the same way.

What history cannot know comes from one documented rule (:class:`DeviceMemoryRule`): a job
that used devices but never declared its device memory gets the rule's value for its user
or program, else its default, else the whole device (nothing is packed beside it, as on the
cluster that ran it); its device threads are the device's. The report says how many jobs
took the rule.

A record that cannot be replayed (no end, an end before its start, a negative or absurd
value) is one message naming the job and the field; the rest are replayed.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.errors import AnnotationError, InputError
from coshare.ledger.annotations import parse_job
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    MAX_TIME_S,
    shorten,
    shorten_text,
)
from coshare.model import MILLI, Job, Node
from coshare.sim.traces import SwfJob


@dataclass(frozen=True)
class Finished:
    """One finished job as its scheduler recorded it.

    Attributes:
        id: the scheduler's job id.
        user: who ran it.
        account: its account (Slurm) or accounting group (HTCondor); empty when none.
        program: its name (Slurm's job name, HTCondor's ``Cmd``), for the device-memory rule.
        cores: cores it was given (all its nodes together).
        memory_mib: host memory it was given (all its nodes together).
        devices: devices (GPUs) it was given, per node.
        nodes: nodes it ran on.
        submit_s: when it was submitted (epoch seconds).
        start_s: when it started.
        end_s: when it ended.
        time_limit_s: its time limit; ``None`` when it had none.
        annotations: the coshare keys it declared (raw), empty when none.
        used_cores: cores it used on average, where the scheduler recorded it.
        used_memory_mib: its peak memory, where the scheduler recorded it.
    """

    id: str
    user: str
    account: str = ""
    program: str = ""
    cores: float = 1.0
    memory_mib: float = 0.0
    devices: int = 0
    nodes: int = 1
    submit_s: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    time_limit_s: float | None = None
    annotations: Mapping[str, object] = field(default_factory=dict)
    used_cores: float | None = None
    used_memory_mib: float | None = None

    @property
    def run_s(self) -> float:
        """How long it ran."""
        return self.end_s - self.start_s


#: How many bad records one read reports; past that a count of the rest.
MAX_PROBLEMS = 20


def check_finished(job: Finished) -> str | None:
    """Why ``job`` cannot be replayed (one message naming it and the field), or ``None``."""
    checks: list[tuple[str, float | None, float, float]] = [
        ("cores", job.cores, 1e-3, MAX_CORES),
        ("memory", job.memory_mib, 0, MAX_MEMORY_MIB),
        ("devices", job.devices, 0, MAX_DEVICES),
        ("nodes", job.nodes, 1, MAX_CORES),
        ("submit time", job.submit_s, 0, MAX_TIME_S),
        ("start time", job.start_s, 1, MAX_TIME_S),
        ("end time", job.end_s, 1, MAX_TIME_S),
    ]
    for name, value, low, high in checks:
        if value is None or not math.isfinite(value) or not low <= value <= high:
            shown = "none" if value is None else _num(value)
            return (
                f"job {shorten_text(job.id)}: {name} {shown} (allowed: {_num(low)}..{_num(high)})"
            )
    if job.end_s <= job.start_s:
        return (
            f"job {shorten_text(job.id)}: end time {_num(job.end_s)} is not after its "
            f"start time {_num(job.start_s)}"
        )
    if job.start_s < job.submit_s:
        return (
            f"job {shorten_text(job.id)}: start time {_num(job.start_s)} is before its "
            f"submit time {_num(job.submit_s)}"
        )
    return None


def _num(value: float) -> str:
    """A number for a message: whole numbers without a fraction or exponent."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


_RULE = re.compile(r"(?:(user|program):([A-Za-z0-9_.@+-]{1,64})=)?([0-9]{1,9})")


@dataclass(frozen=True)
class DeviceMemoryRule:
    """The device memory (MiB) of a job that used devices but never declared it.

    Attributes:
        default_mib: for every such job; ``None``: the whole device.
        by_user: per user, before the default.
        by_program: per program (job name), before the user's.
    """

    default_mib: int | None = None
    by_user: Mapping[str, int] = field(default_factory=dict)
    by_program: Mapping[str, int] = field(default_factory=dict)

    def of(self, job: Finished) -> int | None:
        """The rule's value for ``job`` (``None``: the whole device)."""
        if job.program in self.by_program:
            return self.by_program[job.program]
        return self.by_user.get(job.user, self.default_mib)


def parse_rule(texts: Iterable[str]) -> DeviceMemoryRule:
    """``--device-memory`` values: ``MiB`` (the default), ``user:NAME=MiB`` or
    ``program:NAME=MiB``.

    Raises:
        InputError: a value of another form, or a size outside 1..MAX_MEMORY_MIB.
    """
    default: int | None = None
    users: dict[str, int] = {}
    programs: dict[str, int] = {}
    for text in texts:
        found = _RULE.fullmatch(text.strip())
        if found is None or not 1 <= int(found[3]) <= MAX_MEMORY_MIB:
            raise InputError(
                f"--device-memory {shorten(text)}: expected MiB, user:NAME=MiB or "
                f"program:NAME=MiB, MiB in 1..{MAX_MEMORY_MIB}"
            )
        kind, name, mib = found[1], found[2], int(found[3])
        if kind is None:
            default = mib
        else:
            (users if kind == "user" else programs)[name] = mib
    return DeviceMemoryRule(default, users, programs)


@dataclass(frozen=True)
class Workload:
    """Finished jobs as a replay submits them, and what the reading found.

    Attributes:
        jobs: in submit order, submit times counted from the first.
        finished: the records replayed, in the same order (for the report).
        problems: one message per record left out (at most :data:`MAX_PROBLEMS`, then a
            count of the rest).
        ruled: jobs whose device memory came from the :class:`DeviceMemoryRule`.
        never_ran: records of jobs that ended without running (cancelled while pending).
        nodes: the cluster they are replayed on.
    """

    jobs: tuple[SwfJob, ...]
    finished: tuple[Finished, ...]
    problems: tuple[str, ...] = ()
    ruled: int = 0
    never_ran: int = 0
    nodes: tuple[Node, ...] = ()

    def summary(self) -> dict[str, object]:
        """What was replayed, for the report: counts per user, core and device seconds."""
        users = Counter(f.user for f in self.finished)
        return {
            "jobs": len(self.finished),
            "users": dict(sorted(users.items())),
            "core_s": round(sum(f.cores * f.run_s for f in self.finished), 3),
            "device_s": round(sum(f.devices * f.nodes * f.run_s for f in self.finished), 3),
            "device_memory_from_rule": self.ruled,
            "never_ran": self.never_ran,
            "problems": list(self.problems),
        }

    def records(self) -> list[dict[str, object]]:
        """Each replayed job as read (JSON output): what really ran."""
        return [
            {
                "id": f.id,
                "user": f.user,
                "account": f.account,
                "cores": f.cores,
                "memory_mib": f.memory_mib,
                "devices": f.devices,
                "nodes": f.nodes,
                "run_s": f.run_s,
                "submit_s": f.submit_s,
                "used_cores": f.used_cores,
                "used_memory_mib": f.used_memory_mib,
            }
            for f in self.finished
        ]


def _job(
    record: Finished, rule: DeviceMemoryRule, device_memory: int, device_threads: int
) -> tuple[Job, bool]:
    """The job a replay submits for ``record``, and whether the rule gave its device memory.

    Raises:
        AnnotationError: its declared keys are unusable (naming each).
    """
    nodes = max(1, record.nodes)
    cpu_milli = max(1, math.ceil(record.cores * MILLI / nodes))
    memory = math.ceil(record.memory_mib / nodes)
    if record.annotations:
        job = parse_job(
            record.id,
            record.annotations,
            cpu_milli=cpu_milli,
            memory_mib=memory,
            submit_time_s=record.submit_s,
            processes=nodes,
        )
        return replace(job, walltime_s=job.walltime_s or record.time_limit_s), False
    # one process per node: a job that ran on several nodes is a gang of that many
    plain = Job(
        record.id,
        device_count=0,
        kind="cpu",
        cpu_milli=cpu_milli,
        memory_mib=memory,
        processes=nodes,
        submit_time_s=record.submit_s,
        walltime_s=record.time_limit_s,
        nodes=nodes,
        processes_per_node=1 if nodes > 1 else None,
    )
    if record.devices < 1:
        return plain, False
    ruled = rule.of(record)
    return replace(
        plain,
        device_memory_mib=min(ruled or device_memory, device_memory),
        device_threads=device_threads,
        device_count=record.devices,
        kind="device",
    ), True


def workload(
    records: Iterable[Finished | str],
    nodes: Sequence[Node],
    rule: DeviceMemoryRule = DeviceMemoryRule(),
    never_ran: int = 0,
) -> Workload:
    """The replay of ``records`` (a string among them: a record the adapter could not read,
    its message) on ``nodes``: each checked (:func:`check_finished`), bad ones left out with
    their message, the rest in submit order.

    Raises:
        InputError: no node, or no record left to replay (with the first problems).
    """
    if not nodes:
        raise InputError("history: no node to replay on (the nodes' records are empty)")
    devices = [d for n in nodes for d in n.devices]
    device_memory = max((d.memory_mib for d in devices), default=0)
    device_threads = max((d.threads for d in devices), default=0)
    problems: list[str] = []
    good: list[tuple[Job, Finished]] = []
    ruled = 0
    for record in records:
        why = record if isinstance(record, str) else check_finished(record)
        if why is None and isinstance(record, Finished):
            try:
                job, by_rule = _job(record, rule, device_memory, device_threads)
            except AnnotationError as exc:
                why = str(exc)
            else:
                good.append((job, record))
                ruled += by_rule
        if why is not None:
            problems.append(why)
    if not good:
        shown = "; ".join(problems[:3]) or "no finished job in the records"
        raise InputError(f"history: nothing to replay ({shown})")
    good.sort(key=lambda pair: (pair[0].submit_time_s, pair[1].start_s))
    first = good[0][0].submit_time_s
    jobs = tuple(
        SwfJob(replace(j, submit_time_s=j.submit_time_s - first), f.run_s, f.user) for j, f in good
    )
    if len(problems) > MAX_PROBLEMS:
        problems = [
            *problems[:MAX_PROBLEMS],
            f"and {len(problems) - MAX_PROBLEMS} more records left out",
        ]
    return Workload(
        jobs, tuple(f for _, f in good), tuple(problems), ruled, never_ran, tuple(nodes)
    )


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values``: 1 when all are equal, ``1/n`` when one holds
    everything (NaN for none, or all zero)."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if values and squares > 0 else math.nan


@dataclass
class UserFigures:
    """One user's jobs in a replay: how many ran, their summed wait and bounded slowdown."""

    jobs: int = 0
    wait_s: float = 0.0
    bounded: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """Means, for the report."""
        n = max(self.jobs, 1)
        return {
            "jobs": self.jobs,
            "wait_mean_s": round(self.wait_s / n, 3),
            "bounded_slowdown_mean": round(self.bounded / n, 4),
        }


def fairness(users: Mapping[str, UserFigures]) -> float:
    """Jain's index over the users' mean bounded slowdowns (the jobs that ran)."""
    return jain([u.bounded / u.jobs for u in users.values() if u.jobs])


def json_items(text: str, source: str, key: str | None) -> tuple[list[object], str | None]:
    """The items of the JSON array in ``text`` (the top level, or the top-level object's
    ``key``), and a note when the text is cut short: the items complete before the cut are
    kept (a history file copied while it was written, or a command killed mid-output).

    Raises:
        InputError: not JSON at all, or no such array.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return _salvage(text, source, key)
    found = data.get(key) if key is not None and isinstance(data, Mapping) else data
    if not isinstance(found, list):
        where = f"a {key!r} array" if key else "an array"
        raise InputError(f"{source}: not {where} of records")
    return found, None


def _salvage(text: str, source: str, key: str | None) -> tuple[list[object], str | None]:
    """The whole records before the point where ``text`` stops being JSON."""
    start = text.find("[") if key is None else _array_after(text, key)
    if start < 0:
        raise InputError(f"{source}: not JSON (no array of records found)")
    decoder = json.JSONDecoder()
    items: list[object] = []
    at = start + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at < len(text) and text[at] == "]":
            raise InputError(f"{source}: not JSON after its records (byte {at})")
        try:
            item, at = decoder.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError, ValueError):
            break
        items.append(item)
    return items, (
        f"{source}: cut short at byte {at} of {len(text)}: the {len(items)} whole "
        "records before it are replayed, the rest are lost"
    )


def _array_after(text: str, key: str) -> int:
    found = re.search(rf'"{re.escape(key)}"\s*:\s*\[', text)
    return -1 if found is None else found.end() - 1


def collect(
    items: Iterable[object],
    source: str,
    read: Callable[[Mapping[str, object]], Finished | str | None],
) -> tuple[list[Finished | str], int]:
    """Each record read by the adapter's ``read`` (a :class:`Finished`, a message, or ``None``
    for a job that never ran), a message for an item that is not a JSON object; and how many
    never ran."""
    out: list[Finished | str] = []
    never = 0
    for number, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            out.append(f"{source}: record {number} is not a JSON object")
            continue
        found = read(item)
        if found is None:
            never += 1
        else:
            out.append(found)
    return out, never
