"""Parsers of real traces into the model (pure: they take text; coshare.sim.trace_files reads
files).

**Alibaba GPU-sharing trace** (``alibaba-gpu-v2023``, Weng et al., ATC'23). A GPU is a device
of :data:`GPU_MILLI` units in both memory and threads: a pod's ``gpu_milli`` (its share of
one GPU) becomes its device memory *and* threads per GPU, so a GPU is never given out beyond
1000 milli, and the knapsack's value ``1 - (t/T)^2`` reads ``1 - share^2``. ``num_gpu`` is the
device count (0: a CPU-only pod). Host ``cpu_milli`` and ``memory_mib`` are enforced as they
are. The pod list has no GPU model request (``gpu_spec`` is empty), so any GPU will do.

**Standard Workload Format** (SWF 2.2, Parallel Workloads Archive). Each record is a CPU job:
``processes`` = allocated processors (else requested), one core and the requested (else
used) memory per processor, run time from field 4, submit time from field 2. Records without
a positive run time or processor count (cancelled before they ran) are skipped and counted.
Memory (fields 7 and 10) is in KB per processor as the standard says, unless the header
states another unit (:func:`header_memory_unit`); a KB is 1024 bytes. Columns after the 18th
(an extended SWF, as Alea's workloads carry: node properties, GPUs) are accepted and not read;
the fields coshare cannot model are counted per job (:attr:`SwfTally.unmodelled`), for one
warning per replay (:func:`unmodelled_warning`).
The ``.machines`` companion (``id name nodes cpus_per_node speed ram_kb``) gives the nodes.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from coshare.errors import InputError
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICES,
    MAX_MEMORY_MIB,
    MAX_PROCESSES,
    MAX_SIM_NODES,
    MAX_TIME_S,
    parse_number,
    shorten,
)
from coshare.ledger.ids import id_problem
from coshare.model import MILLI, Device, Job, Node

#: One GPU, in the units of a pod's ``gpu_milli``.
GPU_MILLI = 1000


class TraceError(InputError):
    """A trace file that cannot be read as its format says."""


@dataclass(frozen=True)
class TracePod:
    """One pod of the Alibaba list: the job, and its times (seconds from trace start).

    Attributes:
        job: what the scheduler sees.
        created_s: creation time.
        deleted_s: deletion time (``None`` if still running at the trace's end).
    """

    job: Job
    created_s: float
    deleted_s: float | None

    @property
    def gpu_milli(self) -> int:
        """Total GPU milli the pod requests."""
        return self.job.device_memory_mib * self.job.device_count if self.job.needs_device else 0


def _number(text: object, key: str, where: str, low: float, high: float) -> float:
    """A field by the one number rule of :mod:`coshare.ledger.bounds`, finite and in
    ``low..high``."""
    number = parse_number(text) if isinstance(text, str) else None
    if number is None or not low <= number <= high:
        raise TraceError(
            f"{where}: field {key!r} is {shorten(text)} (allowed: a number {low:g}..{high:g})"
        )
    return number


def _int(
    row: dict[str | None, str | None], key: str, where: str, high: float, *, demand: bool = False
) -> int:
    """A whole amount of a CSV row: a demand rounds up, a capacity down (never over-promise)."""
    number = _number(row.get(key), key, where, 0, high)
    return math.ceil(number) if demand else math.floor(number)


def parse_alibaba_nodes(text: str, source: str = "node list") -> tuple[Node, ...]:
    """Nodes of ``openb_node_list_*.csv`` (``sn,cpu_milli,memory_mib,gpu,model``)."""
    nodes = []
    for i, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        where = f"{source} line {i}"
        gpus = _int(row, "gpu", where, MAX_DEVICES)
        model = row.get("model") or ""
        nodes.append(
            Node(
                name=_name(row.get("sn"), f"node{i}", where),
                cpu_milli=_int(row, "cpu_milli", where, MAX_CPU_MILLI),
                memory_mib=_int(row, "memory_mib", where, MAX_MEMORY_MIB),
                devices=tuple(Device(str(g), GPU_MILLI, GPU_MILLI, model) for g in range(gpus)),
            )
        )
    if not nodes:
        raise TraceError(f"{source}: no nodes")
    return tuple(nodes)


def parse_alibaba_pods(text: str, source: str = "pod list") -> tuple[TracePod, ...]:
    """Pods of ``openb_pod_list_*.csv`` (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,...``)."""
    pods = []
    for i, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        where = f"{source} line {i}"
        count = _int(row, "num_gpu", where, MAX_DEVICES, demand=True)
        share = _int(row, "gpu_milli", where, MAX_DEVICE_MEMORY_MIB, demand=True) if count else 0
        if count and not 0 < share <= GPU_MILLI:
            raise TraceError(f"{where}: gpu_milli {share} outside 1..{GPU_MILLI}")
        deleted = row.get("deletion_time") or ""
        pods.append(
            TracePod(
                job=Job(
                    id=_name(row.get("name"), f"pod{i}", where),
                    device_memory_mib=share,
                    device_threads=share,
                    device_count=count,
                    cpu_milli=_int(row, "cpu_milli", where, MAX_CPU_MILLI, demand=True),
                    memory_mib=_int(row, "memory_mib", where, MAX_MEMORY_MIB, demand=True),
                    kind="device" if count else "cpu",
                ),
                created_s=_number(
                    row.get("creation_time") or "0", "creation_time", where, -MAX_TIME_S, MAX_TIME_S
                ),
                deleted_s=_number(deleted, "deletion_time", where, -MAX_TIME_S, MAX_TIME_S)
                if deleted
                else None,
            )
        )
    if not pods:
        raise TraceError(f"{source}: no pods")
    return tuple(pods)


@dataclass(frozen=True)
class SwfJob:
    """One SWF record as a CPU job with its run time.

    Attributes:
        job: what the scheduler sees (``processes`` cores, each with its memory).
        run_s: its run time.
        user: the log's user number (field 12; empty when the log has none).
    """

    job: Job
    run_s: float
    user: str = ""


@dataclass(frozen=True)
class SwfTrace:
    """An SWF file: its jobs, how many records were skipped, and its header's ``; Key: value``
    lines (the first of each key; SWF 2.2 section "header comments")."""

    jobs: tuple[SwfJob, ...]
    skipped: int
    header: tuple[tuple[str, str], ...] = ()


#: The SWF fields coshare reads (1-based numbers of the format), with their largest values:
#: a job id, times in seconds, processors, and memory in KB per processor.
_SWF_FIELDS = {
    1: ("job number", 2**53),
    2: ("submit time", MAX_TIME_S),
    4: ("run time", MAX_TIME_S),
    5: ("allocated processors", MAX_PROCESSES),
    7: ("used memory", MAX_MEMORY_MIB * 1024.0),
    8: ("requested processors", MAX_PROCESSES),
    9: ("requested time", MAX_TIME_S),
    10: ("requested memory", MAX_MEMORY_MIB * 1024.0),
}


#: The SWF fields that describe a job but that coshare does not model, by name: counted in
#: each job where they hold a value (not ``-1``) and reported once (:func:`unmodelled_warning`).
#: Fields 3, 6 and 11 (wait, CPU time, status) are what the log's own scheduler did, not
#: what the job asked, and are not reported.
SWF_UNMODELLED = {
    12: "user",
    13: "group",
    14: "executable",
    15: "queue",
    16: "partition",
    17: "preceding job",
    18: "think time",
}

#: The memory units a header may state, in KB (1024 bytes).
_MEMORY_UNITS_KB = {
    "b": 1 / 1024,
    "byte": 1 / 1024,
    "bytes": 1 / 1024,
    "kb": 1.0,
    "kib": 1.0,
    "kbytes": 1.0,
    "mb": 1024.0,
    "mib": 1024.0,
    "mbytes": 1024.0,
    "gb": 1024.0**2,
    "gib": 1024.0**2,
    "gbytes": 1024.0**2,
}
_UNIT_KEY = re.compile(r"memory ?units?", re.IGNORECASE)
_UNIT_NOTE = re.compile(r"\bmemory\b.*?\bin\s+(bytes|[kmg]i?b)\b", re.IGNORECASE)


def header_memory_unit(text: str) -> float | None:
    """The memory unit, in KB, that one header comment line states, if it states one: a
    ``; MemoryUnit: MB`` line, or a note such as ``; Note: memory is in MB`` (SWF 2.2 has no
    unit key; the standard's unit is KB per processor). A ``MemoryUnit`` coshare does not
    know is refused rather than read in the wrong unit.

    Raises:
        TraceError: a ``MemoryUnit`` that is not one of bytes, KB, MB, GB, KiB, MiB, GiB.
    """
    key, colon, value = text.lstrip(";").partition(":")
    if colon and _UNIT_KEY.fullmatch(key.strip()):
        stated = value.strip()
        unit = _MEMORY_UNITS_KB.get(stated.lower())
        if unit is None:
            raise TraceError(
                f"header {key.strip()} is {shorten(stated)} (allowed: bytes, KB, "
                "MB, GB, KiB, MiB, GiB)"
            )
        return unit
    found = _UNIT_NOTE.search(text)
    return _MEMORY_UNITS_KB[found.group(1).lower()] if found is not None else None


def _swf_values(fields: list[str], where: str, unit_kb: float = 1.0) -> list[float]:
    """The 18 fields of a record as numbers (``-1``: unknown); the ones coshare reads must be
    finite and within their bounds, by the one number rule (``nan``, ``inf``, ``1e400`` and
    digits of other scripts are refused, naming the line and the field). Memory fields are
    bounded in the header's unit (``unit_kb`` KB)."""
    values = []
    for number, text in enumerate(fields[:18], start=1):
        value = parse_number(text)
        name, high = _SWF_FIELDS.get(number, (f"field {number}", math.inf))
        if number in (7, 10):
            high /= unit_kb
        read = number in _SWF_FIELDS
        if value is None or math.isinf(value) or (read and not _swf_allowed(number, value, high)):
            low = "-1 (unknown) or 0"
            if number in _SWF_TIMES:
                low = f"-1 (unknown), 0 or {MIN_SWF_SECONDS:g}"
            raise TraceError(
                f"{where}: {name} (field {number}) is {shorten(text)} (allowed: {low}..{high:g})"
            )
        values.append(value)
    return values


def _user(value: float) -> str:
    """A record's user number (field 12) as text; empty when unknown (-1) or not a user
    number (a fraction, or beyond 2^31)."""
    return str(int(value)) if 0 <= value < 2**31 and value.is_integer() else ""


#: The SWF fields coshare reads that are times, in seconds.
_SWF_TIMES = frozenset({2, 4, 9})
#: The shortest time a record may state (SWF's unit is the second; a run of 1e-300 s made a
#: slowdown of 0).
MIN_SWF_SECONDS = 0.001


def _swf_allowed(number: int, value: float, high: float) -> bool:
    """Whether a field coshare reads holds ``-1`` (unknown) or a value within its bounds."""
    if value == -1:
        return True
    if value < 0 or value > high:
        return False
    return number not in _SWF_TIMES or value == 0 or value >= MIN_SWF_SECONDS


def parse_swf(lines: Iterable[str], source: str = "SWF") -> SwfTrace:
    """Jobs of a Standard Workload Format file (comment lines start with ``;``).

    Raises:
        TraceError: naming the line (and the field): a record of fewer than 18 fields, a field
            that is not a finite number within its bound, a job number given twice (both
            lines named), a job submitted before the job read before it (both lines named).
    """
    tally = SwfTally()
    jobs = tuple(iter_swf(lines, source, tally))
    return SwfTrace(jobs, tally.skipped, tuple(tally.header.items()))


@dataclass
class SwfTally:
    """What :func:`iter_swf` counted while it read: records skipped, jobs yielded, the
    header's ``; Key: value`` lines read so far (see :func:`swf_header_line`), the memory
    unit in KB (:func:`header_memory_unit`), and, per field coshare cannot model (its
    description), the jobs that gave it a value."""

    skipped: int = 0
    jobs: int = 0
    header: dict[str, str] = field(default_factory=dict)
    memory_unit_kb: float = 1.0
    unmodelled: dict[str, int] = field(default_factory=dict)


class _SeenNumbers:
    """Job numbers seen so far, as sorted runs of consecutive numbers on consecutive lines
    (so each number's line is known): an SWF log numbers its jobs 1, 2, 3, ... line after
    line, so a log of a million jobs is one run, and the duplicate check of a stream costs
    memory by the breaks in its numbering, not by its length. A run grows either way, so a
    log whose numbers count down (..., 3, 2, 1) is one run too: each run keeps the number it
    started from (its anchor) and that number's line, and the lines grow away from it."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []  # inclusive
        self.anchors: list[int] = []  # the run's first number read: its start or its end
        self.anchor_lines: list[int] = []

    def line_of(self, ident: int) -> int | None:
        """The line where ``ident`` was seen, if it was."""
        k = bisect.bisect_right(self.starts, ident) - 1
        if k >= 0 and ident <= self.ends[k]:
            return self.anchor_lines[k] + abs(ident - self.anchors[k])
        return None

    def add(self, ident: int, line: int) -> None:
        """``ident`` seen on ``line`` (not seen before)."""
        k = bisect.bisect_right(self.starts, ident) - 1
        if (
            k >= 0
            and self.ends[k] + 1 == ident
            and self.anchors[k] == self.starts[k]
            and self.anchor_lines[k] + (ident - self.anchors[k]) == line
        ):
            self.ends[k] = ident  # counting up
            return
        after = k + 1
        if (
            after < len(self.starts)
            and self.starts[after] - 1 == ident
            and self.anchors[after] == self.ends[after]
            and self.anchor_lines[after] + (self.anchors[after] - ident) == line
        ):
            self.starts[after] = ident  # counting down
            return
        self.starts.insert(after, ident)
        self.ends.insert(after, ident)
        self.anchors.insert(after, ident)
        self.anchor_lines.insert(after, line)


def iter_swf(
    lines: Iterable[str],
    source: str = "SWF",
    tally: SwfTally | None = None,
    bytes_per_job: bool = False,
) -> Iterator[SwfJob]:
    """The jobs of SWF ``lines`` one at a time, as they are read (a stream).

    Args:
        lines: the file's lines (read lazily).
        source: names the file in messages.
        tally: counts skipped records and jobs as the stream is read.
        bytes_per_job: the memory fields hold bytes for the whole job (Alea's extended SWF,
            :func:`memory_reading`), not KB per processor as the standard says.

    Raises:
        TraceError: as :func:`parse_swf`, when the bad line is reached.
    """
    tally = tally if tally is not None else SwfTally()
    seen = _SeenNumbers()
    last: tuple[float, int] | None = None  # the submit time and line of the last job yielded
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith(";"):
            swf_header_line(text, tally.header)
            if last is None and not tally.jobs and not tally.skipped:  # the header only
                unit = header_memory_unit(text)
                tally.memory_unit_kb = unit if unit is not None else tally.memory_unit_kb
        if not text or text.startswith(";"):
            continue
        fields = text.split()
        where = f"{source} line {number}"
        if len(fields) < 18:
            raise TraceError(f"{where}: {len(fields)} fields, SWF has 18")
        values = _swf_values(fields, where, tally.memory_unit_kb)
        job_id, submit, _, run, alloc, _, used_kb, req, _, req_kb = values[:10]
        if not job_id.is_integer():
            raise TraceError(f"{where}: job number {shorten(fields[0])} is not a whole number")
        ident = int(job_id)
        first = seen.line_of(ident)
        if first is not None:
            raise TraceError(
                f"{where}: job {ident} appears again (first on line "
                f"{first}); SWF job numbers are unique"
            )
        seen.add(ident, number)
        procs = math.ceil(alloc if alloc > 0 else req)
        if run <= 0 or procs <= 0:
            tally.skipped += 1
            continue
        if last is not None and submit < last[0]:
            # SWF lists jobs in submit order, and a replay reads the log as a stream: an
            # earlier job after a later one is refused here, before any run (exit 2), not
            # by every run's engine (exit 1, one failure per run).
            raise TraceError(
                f"{where}: job {ident} submits at {submit:g}, before the job on "
                f"line {last[1]} ({last[0]:g}); SWF lists jobs in submit "
                "order"
            )
        last = (submit, number)
        memory_kb = (req_kb if req_kb > 0 else max(used_kb, 0)) * tally.memory_unit_kb
        if bytes_per_job:
            memory_kb = (req_kb if req_kb > 0 else max(used_kb, 0)) / 1024 / procs
        tally.jobs += 1
        _count_unmodelled(fields, values, tally.unmodelled)
        yield SwfJob(
            Job(
                id=str(ident),
                device_count=0,
                kind="cpu",
                cpu_milli=MILLI,
                memory_mib=math.ceil(memory_kb / 1024),
                processes=procs,
                submit_time_s=submit,
                walltime_s=values[8] if values[8] > 0 else None,
            ),
            run,
            _user(values[11]),
        )


#: A log reads as Alea's (memory in bytes for the whole job) when more than this share of
#: its jobs with a memory request could never fit as the standard reads it, and read so at
#: most a tenth as many could not.
ALEA_MEMORY_SHARE = 0.5


def memory_reading(
    jobs: Iterable[SwfJob], nodes: Iterable[Node], source: str
) -> tuple[bool, str | None]:
    """Whether the memory fields of a log (read as the standard says: ``jobs``) hold bytes
    for the whole job instead (as Alea's extended SWF writes them), judged by how many jobs
    could ever fit ``nodes`` either way; and a note for the admin, said before any replay:
    what was assumed, or how many jobs can never run and why (``None``: nothing to say).
    """
    largest = max((n.memory_mib for n in nodes), default=0)
    asked = standard = per_job = 0
    for record in jobs:
        job = record.job
        if job.memory_mib <= 0:
            continue
        asked += 1
        standard += job.memory_mib > largest
        per_job += math.ceil(job.memory_mib / 1024 / job.processes) > largest
    if not asked or not standard:
        return False, None
    said = (
        f"{source}: {standard:,} of {asked:,} jobs ask more memory than any node has "
        f"({largest:,} MiB) with field 10 read as KB per processor (the SWF standard)"
    )
    if standard > ALEA_MEMORY_SHARE * asked and per_job * 10 <= standard:
        return True, (
            f"{said}; read as bytes for the whole job (Alea's extended SWF), "
            f"{per_job:,} do: coshare reads it so"
        )
    return False, f"{said}: they will not run"


def _count_unmodelled(fields: list[str], values: list[float], counts: dict[str, int]) -> None:
    """Count, for one job, each field it gives that coshare does not model."""
    for number, name in SWF_UNMODELLED.items():
        if values[number - 1] != -1:
            key = f"field {number} ({name})"
            counts[key] = counts.get(key, 0) + 1
    if len(fields) > 18:
        key = "fields 19 and later (an extended SWF such as Alea's: node properties, GPUs)"
        counts[key] = counts.get(key, 0) + 1


def unmodelled_warning(tally: SwfTally, source: str) -> str | None:
    """One warning naming each field coshare cannot model and in how many jobs the log gave
    it (``None``: none), e.g. ``field 15 (queue) ignored in 3,145 jobs``."""
    if not tally.unmodelled:
        return None
    parts = [
        f"{name} ignored in {count:,} job{'s' if count != 1 else ''}"
        for name, count in tally.unmodelled.items()
    ]
    return f"{source}: coshare cannot model these fields: " + "; ".join(parts)


#: How many header keys of other names are kept, and how long a key or value may be
#: (bounded input).
_HEADER_KEYS, _HEADER_CHARS = 64, 256
#: The header keys SWF 2.2 defines: always kept, however many other keys come first (a log
#: with 64 keys of its own before ``MaxNodes`` lost its cluster's size).
SWF_HEADER_KEYS = frozenset(
    {
        "Version",
        "Computer",
        "Installation",
        "Acknowledge",
        "Information",
        "Conversion",
        "MaxJobs",
        "MaxRecords",
        "Preemption",
        "UnixStartTime",
        "TimeZone",
        "TimeZoneString",
        "StartTime",
        "EndTime",
        "MaxNodes",
        "MaxProcs",
        "MaxRuntime",
        "MaxMemory",
        "AllowOveruse",
        "MaxQueues",
        "Queues",
        "Queue",
        "MaxPartitions",
        "Partitions",
        "Partition",
        "Note",
    }
)


def swf_header_line(text: str, header: dict[str, str]) -> None:
    """Record one ``; Key: value`` comment line of an SWF header (the first of each key;
    every key of :data:`SWF_HEADER_KEYS`, and at most :data:`_HEADER_KEYS` others; values cut
    at :data:`_HEADER_CHARS`)."""
    key, colon, value = text.lstrip(";").partition(":")
    key = key.strip()
    if not (colon and key and len(key) <= _HEADER_CHARS and key.replace("_", "").isalnum()):
        return
    if key in header:
        return
    others = len(header) - sum(k in SWF_HEADER_KEYS for k in header)
    if key in SWF_HEADER_KEYS or others < _HEADER_KEYS:
        header[key] = value.strip()[:_HEADER_CHARS]


def header_nodes(
    trace: SwfTrace | SwfTally, source: str, cores_per_node: int | None = None
) -> tuple[Node, ...]:
    """The cluster an SWF header describes when no ``.machines`` file does: ``MaxNodes``
    nodes of ``MaxProcs / MaxNodes`` cores each (SWF 2.2; ``MaxProcs`` alone: one core a
    node). With ``cores_per_node`` (``--cores-per-node``), nodes of that many cores:
    ``MaxNodes`` of them, else ``ceil(MaxProcs / cores_per_node)``. The header gives no
    memory, so a node's memory is the largest coshare accepts and memory requests do not
    limit placement.

    Raises:
        TraceError: neither key, or values that are not whole numbers in range.
    """
    values = dict(trace.header)
    procs_text, nodes_text = values.get("MaxProcs"), values.get("MaxNodes")
    if procs_text is None and nodes_text is None:
        raise TraceError(
            f"{source}: no .machines file beside it and no MaxNodes or MaxProcs "
            "in its header: the cluster is unknown"
        )
    procs = (
        _whole(procs_text, "MaxProcs", f"{source} header", MAX_CORES * MAX_SIM_NODES)
        if procs_text is not None
        else None
    )
    count = (
        _whole(nodes_text, "MaxNodes", f"{source} header", MAX_SIM_NODES)
        if nodes_text is not None
        else procs
    )
    if cores_per_node is not None and nodes_text is None and procs is not None:
        count = -(-procs // cores_per_node)
    if not count:
        raise TraceError(f"{source} header: MaxNodes is 0 (allowed: 1..{MAX_SIM_NODES})")
    if count > MAX_SIM_NODES:
        raise TraceError(f"{source} header: {count} nodes (allowed: 1..{MAX_SIM_NODES})")
    cores = cores_per_node if cores_per_node is not None else max((procs or count) // count, 1)
    return tuple(Node(f"n{i + 1:05d}", cores * MILLI, MAX_MEMORY_MIB) for i in range(count))


def rebased(jobs: Iterable[SwfJob]) -> Iterator[SwfJob]:
    """Submit times counted from the first record's (logs often keep epoch seconds), as a
    stream: the log is in submit order, so the first is the earliest."""
    first: float | None = None
    for j in jobs:
        if first is None:
            first = j.job.submit_time_s
        yield (
            j
            if first == 0
            else replace(j, job=replace(j.job, submit_time_s=j.job.submit_time_s - first))
        )


def parse_swf_machines(text: str, source: str = "machines") -> tuple[Node, ...]:
    """Nodes of an SWF ``.machines`` file: ``id name nodes cpus_per_node speed ram_kb``."""
    nodes: list[Node] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith(";"):
            continue
        if len(fields) < 6:
            raise TraceError(f"{source} line {number}: want 'id name nodes cpus speed ram_kb'")
        where = f"{source} line {number}"
        count = _whole(fields[2], "nodes", where, MAX_SIM_NODES - len(nodes))
        cpus = _whole(fields[3], "cpus", where, MAX_CORES)
        ram_kb = _whole(fields[5], "ram_kb", where, MAX_MEMORY_MIB * 1024)
        name = _name(fields[1], "m", where)
        nodes += [
            Node(f"{name}{len(nodes) + i + 1:03d}", cpus * MILLI, ram_kb // 1024)
            for i in range(count)
        ]
    if not nodes:
        raise TraceError(f"{source}: no machines")
    return tuple(nodes)


def _whole(text: str, key: str, where: str, high: int) -> int:
    """A non-negative integer field of a ``.machines`` line, at most ``high``."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20) or int(text) > high:
        raise TraceError(f"{where}: {key} is {shorten(text)} (allowed: an integer 0..{high})")
    return int(text)


def _name(text: str | None, default: str, where: str) -> str:
    """A node or pod name of a trace: its default when empty, refused when not a valid id."""
    if not text:
        return default
    problem = id_problem(text)
    if problem is not None:
        raise TraceError(f"{where}: the name {shorten(text)} {problem}")
    return text


def as_gang(job: Job, nodes: tuple[Node, ...]) -> Job:
    """An SWF job that one node cannot hold, as a gang: on nodes of ``C`` cores
    (the largest of the cluster), ``ceil(P / C)`` nodes at least, at most ``C`` processes each
    (one processor a process, as the log's machine ran it), and up to one process per node
    where a node's memory holds fewer (the planner takes the fewest nodes that fit). Jobs that
    fit one node are unchanged."""
    cores = max((n.cpu_milli // MILLI for n in nodes), default=0)
    memory = max((n.memory_mib for n in nodes), default=0)
    if cores < 1 or job.processes < 2:
        return job
    if job.processes <= cores and job.total_memory_mib <= memory:
        return job
    return replace(
        job,
        nodes=-(-job.processes // cores),
        nodes_max=max(min(job.processes, len(nodes)), -(-job.processes // cores)),
        processes_per_node=cores,
    )
