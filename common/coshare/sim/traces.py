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
The ``.machines`` companion (``id name nodes cpus_per_node speed ram_kb``) gives the nodes.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass

from coshare.errors import InputError
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


def _int(row: dict[str, str], key: str, where: str) -> int:
    try:
        return int(float(row[key]))
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{where}: field {key!r} is {row.get(key)!r} (want a number)") from exc


def parse_alibaba_nodes(text: str, source: str = "node list") -> tuple[Node, ...]:
    """Nodes of ``openb_node_list_*.csv`` (``sn,cpu_milli,memory_mib,gpu,model``)."""
    nodes = []
    for i, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        where = f"{source} line {i}"
        gpus = _int(row, "gpu", where)
        model = row.get("model") or ""
        nodes.append(
            Node(
                name=row.get("sn") or f"node{i}",
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
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
        count = _int(row, "num_gpu", where)
        share = _int(row, "gpu_milli", where) if count else 0
        if count and not 0 < share <= GPU_MILLI:
            raise TraceError(f"{where}: gpu_milli {share} outside 1..{GPU_MILLI}")
        deleted = row.get("deletion_time") or ""
        pods.append(
            TracePod(
                job=Job(
                    id=row.get("name") or f"pod{i}",
                    device_memory_mib=share,
                    device_threads=share,
                    device_count=count,
                    cpu_milli=_int(row, "cpu_milli", where),
                    memory_mib=_int(row, "memory_mib", where),
                    kind="device" if count else "cpu",
                ),
                created_s=float(row.get("creation_time") or 0.0),
                deleted_s=float(deleted) if deleted else None,
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
    """

    job: Job
    run_s: float


@dataclass(frozen=True)
class SwfTrace:
    """An SWF file: its jobs, and how many records were skipped."""

    jobs: tuple[SwfJob, ...]
    skipped: int


def parse_swf(lines: Iterable[str], source: str = "SWF") -> SwfTrace:
    """Jobs of a Standard Workload Format file (comment lines start with ``;``)."""
    jobs = []
    skipped = 0
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith(";"):
            continue
        fields = text.split()
        if len(fields) < 18:
            raise TraceError(f"{source} line {number}: {len(fields)} fields, SWF has 18")
        try:
            values = [float(f) for f in fields[:18]]
        except ValueError as exc:
            raise TraceError(f"{source} line {number}: a field is not a number") from exc
        job_id, submit, _, run, alloc, _, used_kb, req, _, req_kb = values[:10]
        procs = int(alloc if alloc > 0 else req)
        if run <= 0 or procs <= 0:
            skipped += 1
            continue
        memory_kb = req_kb if req_kb > 0 else max(used_kb, 0)
        jobs.append(
            SwfJob(
                Job(
                    id=str(int(job_id)),
                    device_count=0,
                    kind="cpu",
                    cpu_milli=MILLI,
                    memory_mib=int(-(-memory_kb // 1024)),
                    processes=procs,
                    submit_time_s=submit,
                    walltime_s=values[8] if values[8] > 0 else None,
                ),
                run,
            )
        )
    return SwfTrace(tuple(jobs), skipped)


def parse_swf_machines(text: str, source: str = "machines") -> tuple[Node, ...]:
    """Nodes of an SWF ``.machines`` file: ``id name nodes cpus_per_node speed ram_kb``."""
    nodes: list[Node] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith(";"):
            continue
        if len(fields) < 6:
            raise TraceError(f"{source} line {number}: want 'id name nodes cpus speed ram_kb'")
        try:
            count, cpus, ram_kb = int(fields[2]), int(fields[3]), int(fields[5])
        except ValueError as exc:
            raise TraceError(
                f"{source} line {number}: nodes, cpus and ram_kb are integers"
            ) from exc
        nodes += [Node(f"{fields[1]}{len(nodes) + i + 1:03d}", cpus * MILLI, ram_kb // 1024)
                  for i in range(count)]  # fmt: skip
    if not nodes:
        raise TraceError(f"{source}: no machines")
    return tuple(nodes)
