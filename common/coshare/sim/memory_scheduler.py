"""A scheduler held in memory, behind the same ports as the real adapters.

::

    submit(job) --> record (pending, gate shut)
    MemoryAdapter.read()   records --> ledger.settle --> SourceResult   (as the adapters' views)
    MemoryAdapter.apply()  write_plan(MemoryWriter, ...)                (the one protocol)
    advance(t)             job ends and arrivals up to t; every job whose gate is open and
                           whose resources are free starts, on the node its placement names

The scheduler keeps each job's record the way Slurm keeps its queue: the user's annotations,
the placement coshare wrote, whether its gate is open, a refusal or a wait reason. What a
planner reads goes through :func:`coshare.ledger.book.settle` (a placement that never starts
expires after ``replan_after_s``); what it writes goes through
:func:`coshare.cycle.protocol.write_plan` with this module's :class:`MemoryWriter`. Several
:class:`MemoryAdapter` objects over one :class:`MemoryScheduler` are several planners.

:class:`Faults` makes it misbehave on purpose: a verb that fails for a job, a hook run at the
start of each verb (a job that vanishes or starts between read and write, a second planner),
a kill after some batches of placements, a controller that does not answer, jobs that never
start. :func:`problems` says what would be inconsistent (an open gate without a placement, a
device oversubscribed by started jobs).

Pure: no I/O; time is the simulated clock the caller advances.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from coshare.cycle.protocol import write_plan
from coshare.cycle.queue_writer import Closed, Marked, WriteShape, Written
from coshare.errors import CoshareError, SchedulerError
from coshare.ledger.annotations import KEYS
from coshare.ledger.book import Book, Current, Placed, Queued, Write, settle
from coshare.model import Job, Limit, Node, Plan, RunningJob, Snapshot, Unplaced
from coshare.ports import (
    ApplyReport,
    Capabilities,
    Fence,
    JobOutcome,
    Rejected,
    SourceResult,
)

#: The verbs a fault may name (``open``: a placement's gate after it is written).
VERBS = ("requeue", "close", "refuse", "place", "open", "note")


class Killed(CoshareError):
    """The planner was killed between two batches of placements (an injected fault)."""


@dataclass
class Faults:
    """What the scheduler does wrong on purpose.

    Attributes:
        fail: by ``(verb, job)`` (a verb of :data:`VERBS`), the scheduler's error: that job's
            write fails, the others go on.
        before: called with the verb's name and its jobs at the start of each verb
            (``reread`` included), before anything is done, and with ``read`` as a planner's
            read ends: a test cancels or starts a job there, or runs a second planner's
            cycle.
        kill_after_batches: :meth:`MemoryWriter.place` raises :class:`Killed` when called
            after this many batches were placed (``None``: never).
        unreachable: :meth:`MemoryWriter.reach` raises :class:`SchedulerError`.
        stuck: jobs the scheduler never starts, even with their gate open (their placement
            expires after ``replan_after_s``).
        unwritable: by job, why its placement cannot be written (as a codec refuses a name).
    """

    fail: dict[tuple[str, str], str] = field(default_factory=dict)
    before: Callable[[str, Sequence[str]], None] | None = None
    kill_after_batches: int | None = None
    unreachable: bool = False
    stuck: set[str] = field(default_factory=set)
    unwritable: dict[str, str] = field(default_factory=dict)


class Runs(Protocol):
    """How a started job runs: it ends when the runner says so
    (:meth:`MemoryScheduler.end`)."""

    def start(self, record: Record, now: float) -> None:
        """``record`` started at ``now`` on its placement."""
        ...

    def cancel(self, record: Record, now: float) -> None:
        """``record`` was ended early (requeued) at ``now``; it must not end later."""
        ...


@dataclass
class Record:
    """One job in the queue.

    Attributes:
        job: what was submitted (its annotations are made from it, :func:`annotations_of`).
        annotations: the user's coshare keys.
        run_s: how long it runs once started (the default runner's).
        state: ``pending``, ``running``, ``ended`` or ``cancelled``.
        gate_open: whether it may start.
        placed: the placement coshare wrote on it (kept while its gate is shut).
        refusal: the reason coshare refused it (it is then kept from starting).
        wait_reason: the wait reason coshare wrote on it.
        requeued: why it was requeued, when it was.
        start_s: when it last started.
        end_s: when it ended.
        holds: what it holds while it runs, one entry per node.
        opened: the order its gate was opened in (jobs start in that order).
        starts: how many times it started.
    """

    job: Job
    annotations: dict[str, object]
    run_s: float = 0.0
    state: str = "pending"
    gate_open: bool = False
    placed: Placed | None = None
    refusal: str | None = None
    wait_reason: str | None = None
    requeued: str | None = None
    start_s: float | None = None
    end_s: float | None = None
    holds: tuple[RunningJob, ...] = ()
    opened: int = 0
    starts: int = 0

    @property
    def id(self) -> str:
        return self.job.id

    def fingerprint(self) -> tuple[object, ...]:
        """What a planner compares between its read and its write: the annotations and the
        record coshare writes (a placement, a refusal), as Slurm's comment and
        AdminComment."""
        return (tuple(sorted(self.annotations.items())), self.placed, self.refusal)


#: The keys of a job's device demand.
_DEVICE_FIELDS = ("device_memory_mib", "device_threads", "device_count")


def annotations_of(job: Job) -> dict[str, object]:
    """The annotations a user would write for ``job`` (as strings, as a scheduler holds
    them): every key whose value is not the default, and a device job's memory and
    threads always."""
    base = Job(id=job.id, kind=job.kind)
    out: dict[str, object] = {}
    for spec in KEYS:
        # A compute share is no field of its own: a Job holds it as device threads.
        value = getattr(job, spec.field, None)
        if value is None:
            continue
        if job.kind == "cpu" and spec.field in _DEVICE_FIELDS:
            continue  # a CPU job names no device
        needed = job.kind == "device" and spec.field in _DEVICE_FIELDS[:2]
        if needed or spec.field == "kind" or value != getattr(base, spec.field):
            out[spec.attribute] = str(value)
    return out


class _FixedRuns:
    """The default runner: a job ends ``run_s`` after it starts."""

    def __init__(self, scheduler: MemoryScheduler) -> None:
        self.scheduler = scheduler
        self.generation: dict[str, int] = {}

    def start(self, record: Record, now: float) -> None:
        token = self.generation.get(record.id, 0) + 1
        self.generation[record.id] = token

        def end(at: float) -> None:
            if self.generation.get(record.id) == token:
                self.scheduler.end(record.id, at)

        self.scheduler.at(now + record.run_s, end)

    def cancel(self, record: Record, now: float) -> None:
        self.generation[record.id] = self.generation.get(record.id, 0) + 1


class MemoryScheduler:
    """The queue, the nodes and the simulated clock.

    Args:
        nodes: the cluster.
        replan_after_s: the ledger's placement timeout (``cycle.replan_after_s``).
        faults: what to do wrong (default: nothing).
        batch_size: placements per batch (:class:`WriteShape`).
        limits: the scheduler's limits (their ``used`` is ignored: what the jobs charged to
            them hold, running or with an open gate, is counted); a job whose ``charges``
            would take one past its ``max`` does not start, as a real scheduler's limit.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        *,
        replan_after_s: float = 300.0,
        faults: Faults | None = None,
        batch_size: int | None = 100,
        limits: Sequence[Limit] = (),
    ) -> None:
        self.nodes = tuple(nodes)
        self.limits = tuple(limits)
        self.by_name = {n.name: n for n in self.nodes}
        self.replan_after_s = replan_after_s
        self.faults = faults if faults is not None else Faults()
        self.batch_size = batch_size
        self.now = 0.0
        self.records: dict[str, Record] = {}
        self.runner: Runs = _FixedRuns(self)
        self._heap: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = itertools.count()
        self._opened = itertools.count(1)
        self._gated: dict[str, None] = {}  # pending jobs whose gate is open, in order
        self._free_cpu = {n.name: n.cpu_milli for n in self.nodes}
        self._free_mem = {n.name: n.memory_mib for n in self.nodes}
        self._free_dev = {(n.name, d.id): d.memory_mib for n in self.nodes for d in n.devices}
        self.peak_dev: dict[tuple[str, str], int] = dict.fromkeys(self._free_dev, 0)
        self.batches = 0
        self.events = 0

    # -- the queue ------------------------------------------------------------------------

    def submit(self, job: Job, run_s: float = 0.0) -> Record:
        """Put ``job`` in the queue, pending with its gate shut."""
        if job.id in self.records:
            raise SchedulerError(f"job {job.id} is already in the queue")
        record = Record(job, annotations_of(job), run_s)
        self.records[job.id] = record
        return record

    def cancel(self, job_id: str) -> None:
        """The job leaves the queue (a user's ``scancel``): it vanishes from every read."""
        record = self.records.pop(job_id, None)
        if record is None:
            return
        if record.state == "running":
            self.runner.cancel(record, self.now)
            self._release(record)
        self._gated.pop(job_id, None)

    def at(self, time_s: float, action: Callable[[float], None]) -> None:
        """Run ``action(time)`` when the clock reaches ``time_s``."""
        heapq.heappush(self._heap, (time_s, next(self._seq), action))

    def next_event_s(self) -> float | None:
        """When the next event is due (``None``: none is)."""
        return self._heap[0][0] if self._heap else None

    def advance(self, until_s: float) -> None:
        """Run every event due up to ``until_s``, starting what may start after each."""
        self.start_ready()
        while self._heap and self._heap[0][0] <= until_s:
            time_s, _, action = heapq.heappop(self._heap)
            self.now = max(self.now, time_s)
            self.events += 1
            action(self.now)
            self.start_ready()
        self.now = max(self.now, until_s)

    # -- starting and ending ----------------------------------------------------------------

    def start_ready(self) -> list[str]:
        """Start every job whose gate is open and whose resources are free, in the order
        the gates opened; returns those started."""
        started = []
        for job_id in list(self._gated):
            record = self.records.get(job_id)
            if record is None or record.state != "pending" or not record.gate_open:
                self._gated.pop(job_id, None)
                continue
            if job_id in self.faults.stuck or not self._fits(record):
                continue
            self.start(job_id)
            started.append(job_id)
        return started

    def start(self, job_id: str) -> None:
        """Start a pending job on its placement now (the scheduler's decision: a test may
        call it to start a job at a placement being withdrawn).

        Raises:
            SchedulerError: it has no placement, or its nodes or devices do not exist.
        """
        record = self.records[job_id]
        placed = record.placed
        if placed is None or record.state != "pending":
            raise SchedulerError(f"job {job_id} cannot start: no placement, or not pending")
        job = record.job
        holds = []
        for part in placed.spots:
            if part.node not in self.by_name:
                raise SchedulerError(f"job {job_id} is placed on unknown node {part.node}")
            count = part.processes or job.processes
            holds.append(
                RunningJob(
                    id=job.id,
                    node=part.node,
                    devices=part.devices,
                    device_memory_mib=job.device_memory_mib,
                    device_threads=job.device_threads,
                    cpu_milli=job.cpu_milli * count,
                    memory_mib=job.memory_mib * count,
                    start_time_s=self.now,
                    program=job.program,
                    walltime_s=job.walltime_s,
                    llc_ways=part.llc_ways,
                    membw_gbps=job.membw_gbps,
                    copy_bw_mbps=job.copy_bw_mbps,
                )
            )
        record.holds = tuple(holds)
        for held in record.holds:
            self._free_cpu[held.node] -= held.cpu_milli
            self._free_mem[held.node] -= held.memory_mib
            for d in held.devices:
                key = (held.node, d)
                self._free_dev[key] -= held.device_memory_mib
                used = self.by_device_memory(key) - self._free_dev[key]
                self.peak_dev[key] = max(self.peak_dev[key], used)
        record.state = "running"
        record.start_s = self.now
        record.starts += 1
        self._gated.pop(job_id, None)
        self.runner.start(record, self.now)

    def by_device_memory(self, key: tuple[str, str]) -> int:
        """A device's memory."""
        node = self.by_name[key[0]]
        return next(d.memory_mib for d in node.devices if d.id == key[1])

    def end(self, job_id: str, now: float) -> None:
        """A running job ended at ``now``."""
        record = self.records.get(job_id)
        if record is None or record.state != "running":
            return
        self._release(record)
        record.state = "ended"
        record.end_s = now

    def _release(self, record: Record) -> None:
        for held in record.holds:
            self._free_cpu[held.node] += held.cpu_milli
            self._free_mem[held.node] += held.memory_mib
            for d in held.devices:
                self._free_dev[(held.node, d)] += held.device_memory_mib
        record.holds = ()

    def used(self, *, gated: bool) -> dict[str, float]:
        """What the jobs charged to each limit hold: the running ones (and, with ``gated``,
        the pending ones whose gate is open: they start as soon as they fit)."""
        held = {limit.id: 0.0 for limit in self.limits}
        for r in self.records.values():
            if r.state == "running" or (gated and r.state == "pending" and r.gate_open):
                for ident, amount in r.job.charges:
                    if ident in held:
                        held[ident] += amount
        return held

    def _fits(self, record: Record) -> bool:
        placed = record.placed
        if placed is None:
            return False
        job = record.job
        if job.charges:
            held = self.used(gated=False)
            maxima = {limit.id: limit.max for limit in self.limits}
            if any(held.get(i, 0.0) + a > maxima.get(i, float("inf")) for i, a in job.charges):
                return False
        for part in placed.spots:
            if part.node not in self.by_name:
                return False
            count = part.processes or job.processes
            if self._free_cpu[part.node] < job.cpu_milli * count:
                return False
            if self._free_mem[part.node] < job.memory_mib * count:
                return False
            for d in part.devices:
                free = self._free_dev.get((part.node, d))
                if free is None or free < job.device_memory_mib:
                    return False
        return True

    # -- what the verbs change --------------------------------------------------------------

    def open_gate(self, record: Record) -> None:
        record.gate_open = True
        record.opened = next(self._opened)
        self._gated[record.id] = None

    def shut_gate(self, record: Record) -> None:
        record.gate_open = False
        self._gated.pop(record.id, None)

    def requeue(self, job_id: str, reason: str) -> None:
        """End a running job and put it back to pending, gate shut, with ``reason``."""
        record = self.records[job_id]
        self.runner.cancel(record, self.now)
        self._release(record)
        record.state = "pending"
        record.placed = None
        record.requeued = reason
        self.shut_gate(record)

    # -- reading ------------------------------------------------------------------------------

    def pending(self) -> list[Record]:
        return [r for r in self.records.values() if r.state == "pending"]

    def running(self) -> list[Record]:
        return [r for r in self.records.values() if r.state == "running"]

    def queued(self, record: Record) -> Queued:
        """A pending record as an adapter translates it for the ledger."""
        job = record.job
        return Queued(
            id=job.id,
            annotations=record.annotations,
            cpu_milli=job.cpu_milli * job.processes,
            memory_mib=job.memory_mib * job.processes,
            priority=job.priority,
            submit_time_s=job.submit_time_s,
            placed=record.placed,
            gate_open=record.gate_open,
            charges=job.charges,
        )


def problems(scheduler: MemoryScheduler) -> list[str]:
    """What is inconsistent in the queue: an open gate without a placement, a placement on a
    node or device that does not exist, a device, a node's cores or memory oversubscribed by
    the jobs that started, a refused job with its gate open. Empty: consistent."""
    found: list[str] = []
    for r in scheduler.records.values():
        if r.state == "pending" and r.gate_open:
            if r.placed is None:
                found.append(f"job {r.id}: gate open without a placement")
            elif any(p.node not in scheduler.by_name for p in r.placed.spots):
                found.append(f"job {r.id}: placed on a node that does not exist")
            if r.refusal is not None:
                found.append(f"job {r.id}: refused but its gate is open")
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    dev: dict[tuple[str, str], int] = {}
    for r in scheduler.running():
        for held in r.holds:
            cpu[held.node] = cpu.get(held.node, 0) + held.cpu_milli
            mem[held.node] = mem.get(held.node, 0) + held.memory_mib
            for device_id in held.devices:
                key = (held.node, device_id)
                dev[key] = dev.get(key, 0) + held.device_memory_mib
    for node in scheduler.nodes:
        if cpu.get(node.name, 0) > node.cpu_milli or mem.get(node.name, 0) > node.memory_mib:
            found.append(f"node {node.name}: host oversubscribed by started jobs")
        for d in node.devices:
            if dev.get((node.name, d.id), 0) > d.memory_mib:
                found.append(f"device {node.name}/{d.id}: memory oversubscribed by started jobs")
    return found


class MemoryWriter:
    """The write protocol's verbs on a :class:`MemoryScheduler`
    (a :class:`coshare.cycle.queue_writer.QueueWriter`).

    Args:
        scheduler: the queue.
        seen: each job's :meth:`Record.fingerprint` as the planner read it.
    """

    def __init__(self, scheduler: MemoryScheduler, seen: Mapping[str, tuple[object, ...]]) -> None:
        self.scheduler = scheduler
        self.seen = seen
        self.faults = scheduler.faults
        self.shape = WriteShape(batch_size=scheduler.batch_size, jobs_per_call=500)

    def _before(self, verb: str, jobs: Iterable[str]) -> None:
        if self.faults.before is not None:
            self.faults.before(verb, tuple(jobs))

    def _error(self, verb: str, job: str) -> str | None:
        return self.faults.fail.get((verb, job))

    def _changed(self, record: Record) -> str | None:
        seen = self.seen.get(record.id)
        if seen is None:
            return "was not in the snapshot"
        if record.fingerprint() != seen:
            return "its record changed since it was read (another planner, or an admin)"
        return None

    def reread(self, jobs: Collection[str]) -> dict[str, Current]:
        self._before("reread", jobs)
        out = {}
        for job_id in jobs:
            record = self.scheduler.records.get(job_id)
            if record is None:
                continue
            pending = record.state == "pending"
            out[job_id] = Current(
                id=job_id,
                state="held" if pending and not record.gate_open else record.state,
                pending=pending,
                gate_open=record.gate_open,
                placed=record.placed,
                changed=self._changed(record),
                may_note=pending and not record.gate_open and record.refusal is None,
                wait_reason=record.wait_reason,
                started=record.state == "running",
            )
        return out

    def unwritable(self, write: Write) -> str | None:
        if write.job in self.faults.unwritable:
            return self.faults.unwritable[write.job]
        for part in write.parts or ():
            if part.node not in self.scheduler.by_name:
                return f"node {part.node} is not in the cluster"
        if write.node not in self.scheduler.by_name:
            return f"node {write.node} is not in the cluster"
        return None

    def requeue(self, jobs: Sequence[Unplaced]) -> dict[str, str]:
        self._before("requeue", [u.job for u in jobs])
        errors = {}
        for u in jobs:
            record = self.scheduler.records.get(u.job)
            error = self._error("requeue", u.job)
            if error is None and (record is None or record.state != "running"):
                error = "is not running"
            if error is not None:
                errors[u.job] = error
                continue
            self.scheduler.requeue(u.job, u.reason)
        return errors

    def close(self, jobs: Sequence[str]) -> Closed:
        self._before("close", jobs)
        failed = []
        for job_id in jobs:
            record = self.scheduler.records.get(job_id)
            if record is None or record.state != "pending":
                continue  # the guard: only a pending job's gate is shut
            error = self._error("close", job_id)
            if error is not None:
                failed.append(JobOutcome(job_id, f"not closed: {error}"))
                continue
            self.scheduler.shut_gate(record)
        closed, started, not_closed = set(), set(), set()
        for job_id in jobs:  # the confirmation: read back
            record = self.scheduler.records.get(job_id)
            if record is None or record.state in ("ended", "cancelled"):
                continue
            if record.state != "pending":
                started.add(job_id)
            elif record.gate_open:
                not_closed.add(job_id)
            else:
                closed.add(job_id)
        return Closed(
            frozenset(closed), frozenset(started), frozenset(not_closed), failed=tuple(failed)
        )

    def refuse(self, refusals: Sequence[Rejected]) -> Marked:
        self._before("refuse", [r.job for r in refusals])
        marked, failed = [], []
        for r in refusals:
            record = self.scheduler.records.get(r.job)
            error = self._error("refuse", r.job)
            if record is None or record.state != "pending":
                failed.append(JobOutcome(r.job, "not marked: no longer pending"))
            elif error is not None:
                failed.append(JobOutcome(r.job, f"not marked: {error}"))
            else:
                record.refusal = r.reason
                self.scheduler.shut_gate(record)
                marked.append(JobOutcome(r.job, f"held: {r.reason}"))
        return Marked(tuple(marked), tuple(failed))

    def reach(self) -> None:
        if self.faults.unreachable:
            raise SchedulerError("the in-memory scheduler does not answer (an injected fault)")

    def place(self, batch: Sequence[Write], fence: Fence) -> Written:
        self._before("place", [w.job for w in batch])
        limit = self.faults.kill_after_batches
        if limit is not None and self.scheduler.batches >= limit:
            raise Killed(f"killed after {limit} batches of placements (an injected fault)")
        self.scheduler.batches += 1
        records = self.scheduler.records
        skipped: list[JobOutcome] = []
        failed: list[JobOutcome] = []
        written: list[Record] = []
        for w in batch:  # the first transaction: every placement, whole
            record = records.get(w.job)
            if record is None or record.state in ("ended", "cancelled"):
                skipped.append(JobOutcome(w.job, "ended while it was being placed"))
            elif record.state != "pending":
                failed.append(JobOutcome(w.job, "started before its placement was written"))
            elif (why := self._changed(record)) is not None:
                skipped.append(JobOutcome(w.job, f"{why}; planned again"))
            elif (error := self._error("place", w.job)) is not None:
                failed.append(JobOutcome(w.job, f"placement not taken: {error}"))
            else:
                record.placed = Placed(
                    w.node,
                    w.devices,
                    self.scheduler.now,
                    w.device_memory_mib,
                    w.device_threads,
                    w.parts,
                    w.llc_ways,
                    w.harvest_from,
                )
                record.wait_reason = None
                written.append(record)
        fence()  # before the second transaction: what it raises leaves these gates shut
        applied: list[str] = []
        for record in written:  # the second: open the gates of those confirmed
            error = self._error("open", record.id)
            if error is not None:
                failed.append(JobOutcome(record.id, f"placed but not opened ({error})"))
                continue
            self.scheduler.open_gate(record)
            applied.append(record.id)
        return Written(tuple(applied), tuple(skipped), tuple(failed))

    def note(self, reasons: Sequence[tuple[str, str | None]]) -> tuple[str, ...]:
        self._before("note", [j for j, _ in reasons])
        noted = []
        for job_id, text in reasons:
            record = self.scheduler.records.get(job_id)
            if record is None or self._error("note", job_id) is not None:
                continue
            record.wait_reason = text
            noted.append(job_id)
        return tuple(noted)


class MemoryAdapter:
    """One planner's Source and Editor over a :class:`MemoryScheduler` (several planners:
    several adapters over one scheduler)."""

    capabilities = Capabilities(
        fenced_batches=True,
        global_job_ids=True,
        why_not={
            "harvest": "the in-memory scheduler does not model lent cores",
            "llc_ways": "the in-memory scheduler makes no resctrl groups",
        },
    )

    def __init__(self, scheduler: MemoryScheduler) -> None:
        self.scheduler = scheduler
        self.book: Book | None = None
        self.seen: dict[str, tuple[object, ...]] = {}

    def read(self) -> SourceResult:
        """The queue, settled by the ledger's rules (:func:`coshare.ledger.book.settle`)."""
        s = self.scheduler
        pending = s.pending()
        self.seen = {r.id: r.fingerprint() for r in pending}
        book = settle(
            [s.queued(r) for r in pending],
            s.nodes,
            now_s=s.now,
            replan_after_s=s.replan_after_s,
            gangs=True,
        )
        self.book = book
        running = tuple(h for r in s.running() for h in r.holds)
        held = s.used(gated=True)  # a placed job not started yet holds its charges too
        limits = tuple(replace(limit, used=held[limit.id]) for limit in s.limits)
        snapshot = Snapshot(
            s.nodes, running + book.planned, book.pending, now_s=s.now, limits=limits
        )
        if s.faults.before is not None:
            s.faults.before("read", ())
        return SourceResult(snapshot, book.rejected, notes=book.notes)

    def apply(
        self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool, fence: Fence | None = None
    ) -> ApplyReport:
        """Write ``plan`` through the core's protocol with :class:`MemoryWriter`."""
        book = self.book
        if book is None:
            raise SchedulerError("apply() needs a read() first")
        return write_plan(
            MemoryWriter(self.scheduler, self.seen),
            plan,
            rejected,
            pending={j.id: j for j in book.pending},
            to_close=book.to_close,
            dry_run=dry_run,
            fence=fence,
        )
