"""Replaying an SWF log as a stream: one run, one task (``--workload trace:FILE.swf``).

The log is read a line at a time while the engine runs (:func:`coshare.sim.engine.simulate`
with an iterator): a job is parsed when the one before it arrives and forgotten when it ends,
and its figures are folded into a :class:`~coshare.sim.metrics.StreamSummary`, so memory
holds the jobs in flight, not the log: a log of a million jobs replays in the memory of its
busiest moment (``bench/sim_sweep.py`` measures it). Because nothing depends on the log's
length, a streamed log is not refused for its size; each line is bounded
(:data:`coshare.sim.trace_files.MAX_LINE_CHARS`) and every field as before.

Each task opens the log itself (a Dask worker elsewhere needs the path to be visible there,
as on a shared file system) and reports its events per second. A log of up to
:data:`KEEP_PARSED_BYTES` is parsed once per process and its records kept for every run of it
there (each policy and seed): the parse, not the replay, was most of a short run. I/O: reads
files, reads the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coshare.errors import InputError
from coshare.ledger.bounds import MAX_CORES, MAX_MEMORY_MIB, shorten_text
from coshare.model import MILLI, Node
from coshare.sim.device import FixedModel
from coshare.sim.engine import JobRecord, simulate
from coshare.sim.experiments import Setup
from coshare.sim.history import UserFigures
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.metrics import RunSummary, StreamSummary
from coshare.sim.trace_files import machines_path, read_machines, stream_lines
from coshare.sim.traces import (
    SwfJob,
    SwfTally,
    as_gang,
    header_nodes,
    iter_swf,
    memory_reading,
    rebased,
    swf_header_line,
)


@dataclass(frozen=True)
class Replay:
    """One policy's replay of a log.

    Attributes:
        summary: the run's figures.
        skipped: records skipped (no run time or processors).
        events: events the engine handled.
        seconds: wall time of the replay (reading included).
        users: each user's figures (jobs that name their user).
        order: the order of waiting jobs it ran under (``coshare`` or ``scheduler``).
    """

    summary: RunSummary
    skipped: int
    events: int
    seconds: float
    users: Mapping[str, UserFigures] = field(default_factory=dict)
    order: str = "coshare"

    @property
    def events_per_s(self) -> float:
        """Events handled per second of wall time."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


def is_swf(path: Path) -> bool:
    """Whether ``path`` names an SWF log coshare replays: ``.swf``, or ``.swf.gz`` as the
    Parallel Workloads Archive publishes them."""
    return path.name.endswith((".swf", ".swf.gz"))


def cluster_of(
    path: Path, nodes: int | None, cores_per_node: int | None = None
) -> tuple[Node, ...]:
    """The nodes of the log at ``path``: its ``.machines`` file (the first ``nodes`` of
    them); else ``nodes`` nodes of ``cores_per_node`` cores when both are given; else the
    cluster its header states (:func:`~coshare.sim.traces.header_nodes`, with
    ``cores_per_node`` cores a node when given), the first ``nodes`` of it. Without a
    ``.machines`` file the memory is unknown, so memory requests do not limit placement.

    Raises:
        InputError: not an SWF log; ``cores_per_node`` with a ``.machines`` file (it fixes
            the nodes) or out of range; neither a ``.machines`` file, both options, nor
            ``MaxNodes`` / ``MaxProcs`` in its header.
    """
    where = f"trace:{shorten_text(str(path))}"
    if not is_swf(path):
        raise InputError(
            f"{where}: only SWF logs (.swf, .swf.gz) are replayed; the Alibaba "
            "pod list is the alibaba-2023 workload"
        )
    if cores_per_node is not None and not 1 <= cores_per_node <= MAX_CORES:
        raise InputError(f"--cores-per-node {cores_per_node} (allowed: 1..{MAX_CORES})")
    if cores_per_node is not None and machines_path(path) is not None:
        raise InputError(
            f"{where}: --cores-per-node does not apply: "
            f"{shorten_text(str(machines_path(path)))} gives the nodes"
        )
    machines = read_machines(path)
    if machines is None and cores_per_node is not None and nodes:
        return tuple(
            Node(f"n{i + 1:05d}", cores_per_node * MILLI, MAX_MEMORY_MIB) for i in range(nodes)
        )
    if machines is None:  # the header's MaxNodes / MaxProcs
        machines = header_nodes(_header(path), where, cores_per_node)
    return machines[:nodes] if nodes else machines


def _header(path: Path) -> SwfTally:
    """The header of the log at ``path``: its comment lines up to the first record (SWF 2.2
    puts the header first), read as a stream."""
    tally = SwfTally()
    for line in stream_lines(path):
        text = line.strip()
        if text and not text.startswith(";"):
            break
        if text:
            swf_header_line(text, tally.header)
    return tally


#: A log up to this size is parsed once per process and its records kept for every run of
#: it (each policy, each seed); a larger one is streamed by each run, as memory then holds
#: only the jobs in flight.
KEEP_PARSED_BYTES = 64 << 20


@dataclass(frozen=True)
class _Parsed:
    """A log's records, parsed once, and what the parse counted."""

    key: tuple[str, int, int, bool]  # path, mtime (ns), size, memory reading: a change rereads
    records: tuple[SwfJob, ...]
    tally: SwfTally


_parsed: _Parsed | None = None


def _parse_once(path: Path, bytes_per_job: bool = False) -> _Parsed | None:
    """The records of the log at ``path``, parsed on the first call for this file as it is
    now (and this reading of its memory fields) and kept; ``None`` for a log larger than
    :data:`KEEP_PARSED_BYTES` (streamed)."""
    global _parsed
    try:
        stat = path.stat()
    except OSError:
        return None  # the stream says why
    key = (str(path), stat.st_mtime_ns, stat.st_size, bytes_per_job)
    if _parsed is not None and _parsed.key == key:
        return _parsed
    if stat.st_size > KEEP_PARSED_BYTES:
        return None
    tally = SwfTally()
    records = tuple(iter_swf(stream_lines(path), str(path), tally, bytes_per_job))
    _parsed = _Parsed(key, records, tally)
    return _parsed


def memory_reading_of(path: Path, cluster: tuple[Node, ...]) -> tuple[bool, str | None]:
    """How the log at ``path`` states memory (:func:`coshare.sim.traces.memory_reading`),
    judged on ``cluster``, and what to tell the admin before the replay."""
    parsed = _parse_once(path)
    records = parsed.records if parsed is not None else iter_swf(stream_lines(path), str(path))
    return memory_reading(records, cluster, f"trace:{shorten_text(path.name)}")


def check_log(path: Path) -> SwfTally:
    """Read the whole log once, so that a bad record stops the command with its line (exit
    2) before any run starts, instead of failing every run's task alike; what it counted
    (the fields coshare cannot model among them, for one warning per replay). The records
    are kept for the runs when the log is small enough (:data:`KEEP_PARSED_BYTES`).

    Raises:
        InputError: the log cannot be read, or a record is malformed or given twice.
    """
    parsed = _parse_once(path)
    if parsed is not None:
        return parsed.tally
    tally = SwfTally()
    for _ in iter_swf(stream_lines(path), str(path), tally):
        pass
    return tally


def replay(
    path: Path,
    nodes: int | None,
    policy: str,
    seed: int,
    setup: Setup,
    cores_per_node: int | None = None,
    bytes_per_job: bool = False,
) -> Replay:
    """Replay the SWF log at ``path`` under ``policy`` as a stream (FixedModel run times), on
    :func:`cluster_of` ``(path, nodes, cores_per_node)``; ``bytes_per_job``: its memory
    fields hold bytes for the whole job (:func:`memory_reading_of`).

    Raises:
        InputError: the log or its machines cannot be read, or a record is malformed or out
            of submit order.
    """
    started = time.perf_counter()
    cluster = cluster_of(path, nodes, cores_per_node)
    parsed = _parse_once(path, bytes_per_job)
    tally = parsed.tally if parsed is not None else SwfTally()
    records = rebased(
        parsed.records
        if parsed is not None
        else iter_swf(stream_lines(path), str(path), tally, bytes_per_job)
    )
    # a job that one node cannot hold runs as a gang
    jobs = (host_only(as_gang(j.job, cluster), j.run_s, j.user) for j in records)
    return _run(cluster, jobs, policy, seed, setup, started, tally.skipped)


def _run(
    cluster: tuple[Node, ...],
    jobs: Iterator[SimJob],
    policy: str,
    seed: int,
    setup: Setup,
    started: float,
    skipped: int = 0,
) -> Replay:
    """One replay of a stream of jobs: the run's figures, and each user's (jobs that name
    their user)."""
    figures = StreamSummary()
    per_user: dict[str, UserFigures] = {}

    def record(done: JobRecord) -> None:
        figures.add(done)
        bounded = done.bounded_slowdown()
        if not done.user or done.start_s is None or bounded is None:
            return
        mine = per_user.setdefault(done.user, UserFigures())
        mine.jobs += 1
        mine.wait_s += done.start_s - done.submit_s
        mine.bounded += bounded

    result = simulate(
        cluster,
        jobs,
        setup.policy(policy, seed),
        options=setup.options(),
        model=FixedModel(),
        record=record,
    )
    return Replay(
        figures.summary(result),
        skipped,
        result.events,
        time.perf_counter() - started,
        dict(sorted(per_user.items())),
        setup.order,
    )


def replay_jobs(
    jobs: tuple[SwfJob, ...],
    cluster: tuple[Node, ...],
    policy: str,
    seed: int,
    setup: Setup,
) -> Replay:
    """Replay jobs already read (a cluster's history: :mod:`coshare.sim.history`) under
    ``policy`` on ``cluster``, as :func:`replay` replays a log's (FixedModel run times), with
    each user's waits and bounded slowdowns."""
    started = time.perf_counter()
    return _run(
        cluster, (host_only(j.job, j.run_s, j.user) for j in jobs), policy, seed, setup, started
    )
