"""The discrete-event engine: jobs arrive, a policy plans them every cycle, they run and end.

::

    arrival / job end at t ──> no cycle due? schedule one at t + cycle_delay_s
                                   │
    cycle at t' ──> Snapshot(nodes, running, pending, now=t') ──> policy.plan() ──> Plan
                                   │                                             │
                                   └──── every assignment starts at t' <─────────┘
    execution model: host phases and offloads; tells the engine when each job ends

Cycles are event-driven: the planner runs only after something arrived or ended, once per
``cycle_delay_s`` at most (the scheduler's negotiation cycle, which the paper blames for part
of its overhead), never on idle ticks. A planned job starts at the cycle's time, on the node
and devices of its assignment, and holds its declared resources until it ends. The policy is
the same object the live cycle uses; the engine gives it the snapshot a live Source would.

Events at the same instant run in this order: job events, then arrivals, then the cycle, so
a cycle sees everything that happened at its time. The engine keeps its own ledger of device
memory and host resources and stops with :class:`SimulationError` if a plan would exceed
them (or, with ``verify``, if :func:`coshare.cycle.verify.check_plan` finds anything). A job the
plan says never fits (``never_fits``: no node of the cluster could hold it empty) is decided
then and never planned again: the cluster does not change, and a log with many such jobs
would otherwise cost every cycle each of them. When no event is left but jobs still wait
(they fit no node, or the policy holds them back), the run ends and reports them as not run.
With a facts model (:mod:`coshare.sim.facts`) every cycle's snapshot also carries the node
facts a live cycle would read (each running job's CPU load, available memory bandwidth, LLC
ways), attached by the same function the adapters use.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from coshare.cycle.verify import check_plan
from coshare.errors import CoshareError
from coshare.ledger.facts import attach
from coshare.ledger.fairshare import DEFAULT_HALF_LIFE_S, FairShare
from coshare.model import MILLI, Assignment, Node, RunningJob, Snapshot
from coshare.policies.base import Policy
from coshare.sim.device import ExecutionModel, OffloadModel, Token
from coshare.sim.facts import FactsModel
from coshare.sim.jobs import SimJob

#: Order of simultaneous events.
_JOB_EVENT, _ARRIVAL, _CYCLE = 0, 1, 2

Progress = Callable[[int], None]
"""Called with the number of jobs ended so far, after each job ends."""

Record = Callable[["JobRecord"], None]
"""Called with each job's record as it ends (and, at the end, each job that never ran)."""


class SimulationError(CoshareError):
    """A policy produced a plan the simulated cluster cannot hold (a bug, never expected)."""


@dataclass(frozen=True)
class SimOptions:
    """How the engine runs.

    Attributes:
        cycle_delay_s: seconds from the event that triggers a cycle to the cycle itself.
        verify: check every plan with :func:`coshare.cycle.verify.check_plan` (slower).
        strict_threads: whether ``verify`` also holds declared threads within each device.
        order: ``coshare``: jobs keep their own priority (the policies order by it, then by
            submit time); ``scheduler``: each cycle gives every pending job its user's
            fair-share factor as its priority (:mod:`coshare.ledger.fairshare`, from the cores the
            users' jobs held), as the scheduler would order them.
        half_life_s: the fair share's usage half-life.
    """

    cycle_delay_s: float = 1.0
    verify: bool = False
    strict_threads: bool = True
    order: str = "coshare"
    half_life_s: float = DEFAULT_HALF_LIFE_S


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job.

    Attributes:
        id: the job id.
        submit_s: arrival time.
        duration_s: run time alone.
        start_s: when it started (``None``: it never ran).
        end_s: when it ended.
        node: where it ran.
        devices: device ids there.
        gate_wait_s: seconds its offloads waited for device threads.
        user: who submitted it (empty when unknown).
    """

    id: str
    submit_s: float
    duration_s: float
    start_s: float | None = None
    end_s: float | None = None
    node: str = ""
    devices: tuple[str, ...] = ()
    gate_wait_s: float = 0.0
    user: str = ""

    def bounded_slowdown(self, bound_s: float = 10.0) -> float | None:
        """Time in the system over run time alone, run times under ``bound_s`` counted as
        ``bound_s``, at least 1 (Feitelson's bounded slowdown, the usual metric of SWF
        replays); ``None`` when it never ran."""
        if self.start_s is None or self.end_s is None:
            return None
        return max(1.0, (self.end_s - self.submit_s) / max(self.duration_s, bound_s))

    @property
    def slowdown(self) -> float | None:
        """Run time over run time alone (1.0: it never waited for its device)."""
        if self.start_s is None or self.end_s is None or self.duration_s <= 0:
            return None
        return (self.end_s - self.start_s) / self.duration_s


@dataclass(frozen=True)
class SimResult:
    """One simulated run.

    Attributes:
        policy: the policy's name.
        nodes: nodes in the cluster.
        devices: devices in the cluster.
        makespan_s: from time 0 to the last job's end.
        jobs: one record per job, in input order.
        cycles: planning cycles run.
        busy_thread_s: per device, thread-seconds of offloads run.
        thread_capacity: per device, hardware threads.
        peak_threads: per device, the most offload threads in use at once.
        peak_memory_mib: per device, the most declared memory held at once.
        memory_capacity_mib: per device, its memory.
        busy_core_s: core-seconds held by the jobs that ran (all nodes of a gang).
        core_capacity: cores of the cluster.
        events: events the engine handled (arrivals, job events, cycles).
    """

    policy: str
    nodes: int
    devices: int
    makespan_s: float
    jobs: tuple[JobRecord, ...]
    cycles: int
    busy_thread_s: tuple[float, ...] = ()
    thread_capacity: tuple[int, ...] = ()
    peak_threads: tuple[int, ...] = ()
    peak_memory_mib: tuple[int, ...] = ()
    memory_capacity_mib: tuple[int, ...] = field(default=())
    busy_core_s: float = 0.0
    core_capacity: float = 0.0
    events: int = 0

    @property
    def core_utilization(self) -> float:
        """Average node utilization: core-seconds held by jobs over cores x makespan."""
        capacity = self.core_capacity * self.makespan_s
        return self.busy_core_s / capacity if capacity > 0 else 0.0

    @property
    def not_run(self) -> tuple[str, ...]:
        """Jobs that never started."""
        return tuple(r.id for r in self.jobs if r.start_s is None)

    @property
    def utilization(self) -> float:
        """Average device core utilization: offload thread-seconds over threads x makespan."""
        capacity = sum(self.thread_capacity) * self.makespan_s
        # fsum: correctly rounded, so the figure does not depend on the interpreter
        # (Python 3.12 changed sum() of floats; Dask workers may run another version)
        return math.fsum(self.busy_thread_s) / capacity if capacity > 0 else 0.0


def simulate(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob] | Iterator[SimJob],
    policy: Policy,
    *,
    options: SimOptions | None = None,
    model: ExecutionModel | None = None,
    progress: Progress | None = None,
    facts: FactsModel | None = None,
    record: Record | None = None,
) -> SimResult:
    """Run ``jobs`` on ``nodes`` under ``policy`` until every job that can run has ended.

    Args:
        nodes: the cluster.
        jobs: the jobs; each arrives at its ``job.submit_time_s``. Ids must be unique. An
            *iterator* is a stream (a trace read as it is replayed): its jobs must
            come in submit order, each is read when the one before it arrives, and a job is
            forgotten when it ends (its record goes to ``record``; ``SimResult.jobs`` stays
            empty), so memory holds the jobs in flight, not the whole stream.
        policy: plans every cycle.
        options: cycle delay and checks.
        model: how jobs run (default: :class:`OffloadModel`).
        progress: called after each job ends.
        facts: what the nodes would measure, attached to every cycle's snapshot (default:
            no node facts, as a cluster whose nodes publish none).
        record: called with each job's record when it ends, and with the records of the
            jobs that never ran when the run ends.

    Raises:
        SimulationError: a plan exceeds the cluster (or breaks the contract, with verify), or
            a stream's job arrives before the one before it.
    """
    engine = _Engine(
        nodes, jobs, policy, options or SimOptions(), model or OffloadModel(), progress, record
    )
    engine.facts = facts
    return engine.run()


class _Engine:
    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob] | Iterator[SimJob],
        policy: Policy,
        options: SimOptions,
        model: ExecutionModel,
        progress: Progress | None,
        record: Record | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        # A stream keeps its live jobs by index (arrived, not ended); a sequence is kept.
        self.stream: Iterator[tuple[int, SimJob]] | None = None
        self.live: dict[int, SimJob] = {}
        self.jobs: Sequence[SimJob] | dict[int, SimJob] = self.live
        if isinstance(jobs, Iterator):
            self.stream = enumerate(jobs)
        else:
            self.jobs = jobs
        self.policy = policy
        self.options = options
        self.fair = FairShare(options.half_life_s) if options.order == "scheduler" else None
        self.model = model
        self.progress = progress
        self.record = record
        self.index = {s.job.id: i for i, s in enumerate(jobs)} if self.stream is None else {}
        if self.stream is None and len(self.index) != len(self.jobs):
            raise SimulationError("job ids must be unique")
        self.arrived_s = -math.inf
        self.ended = 0
        self.makespan_s = 0.0
        self.events = 0
        self.dev_index: dict[tuple[str, str], int] = {}
        threads: list[int] = []
        memory: list[int] = []
        for node in self.nodes:
            for dev in node.devices:
                self.dev_index[(node.name, dev.id)] = len(threads)
                threads.append(dev.threads)
                memory.append(dev.memory_mib)
        self.threads = threads
        self.dev_mem = memory
        self.used_mem = [0] * len(memory)
        self.peak_mem = [0] * len(memory)
        self.node_cpu = {n.name: n.cpu_milli for n in self.nodes}
        self.node_mem = {n.name: n.memory_mib for n in self.nodes}
        self.heap: list[tuple[float, int, int, Token]] = []
        self.seq = 0
        self.pending: dict[str, int] = {}
        # keyed by (job, node): a gang holds one entry per node
        self.running: dict[tuple[str, str], RunningJob] = {}
        self.placed: dict[int, list[tuple[str, tuple[str, ...], tuple[int, ...], int]]] = {}
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.cycle_due: float | None = None
        self.cycles = 0
        self.busy_core_s = 0.0
        self.facts: FactsModel | None = None

    def push(self, time: float, kind: int, token: Token) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, kind, self.seq, token))

    def trigger(self, now: float) -> None:
        if self.cycle_due is None:
            self.cycle_due = now + self.options.cycle_delay_s
            self.push(self.cycle_due, _CYCLE, (-1, -1))

    def next_arrival(self) -> None:
        """Read the stream's next job and schedule its arrival."""
        assert self.stream is not None
        for i, sim in self.stream:
            if sim.job.submit_time_s < self.arrived_s:
                raise SimulationError(
                    f"job {sim.job.id} submits at {sim.job.submit_time_s:g}, "
                    f"before the job read before it ({self.arrived_s:g}): "
                    "a stream must come in submit order"
                )
            self.arrived_s = sim.job.submit_time_s
            self.live[i] = sim
            self.push(sim.job.submit_time_s, _ARRIVAL, (i, -1))
            return

    def run(self) -> SimResult:
        self.model.bind(self.jobs, self.threads, lambda t, tok: self.push(t, _JOB_EVENT, tok))
        if isinstance(self.jobs, Sequence):
            for i, sim in enumerate(self.jobs):
                self.push(sim.job.submit_time_s, _ARRIVAL, (i, -1))
        else:
            self.next_arrival()
        while self.heap:
            now, kind, _, token = heapq.heappop(self.heap)
            self.events += 1
            if kind == _JOB_EVENT:
                ended = self.model.handle(token, now)
                if ended is not None:
                    self.finish(ended, now)
            elif kind == _ARRIVAL:
                job_id = self.jobs[token[0]].job.id
                if self.stream is not None:
                    if job_id in self.index:
                        raise SimulationError(f"job id {job_id} is in flight twice")
                    self.index[job_id] = token[0]
                    self.next_arrival()
                self.pending[job_id] = token[0]
                self.trigger(now)
            else:
                self.cycle_due = None
                self.cycle(now)
        return self.result()

    def cycle(self, now: float) -> None:
        if not self.pending:
            return
        self.cycles += 1
        pending = tuple(self.jobs[i].job for i in self.pending.values())
        if self.fair is not None:
            self.accrue(now)
            users = [self.jobs[i].user for i in self.pending.values()]
            ranks = self.fair.priorities(users)
            pending = tuple(
                replace(j, priority=ranks[u]) for j, u in zip(pending, users, strict=True)
            )
        snapshot = Snapshot(self.nodes, tuple(self.running.values()), pending, now_s=now)
        if self.facts is not None:
            snapshot = attach(snapshot, self.facts.facts(now, snapshot.nodes, snapshot.running))
        plan = self.policy.plan(snapshot)
        if self.options.verify:
            problems = check_plan(snapshot, plan, strict_threads=self.options.strict_threads)
            if problems:
                raise SimulationError(
                    f"policy {plan.policy} at t={now:g}: " + "; ".join(problems[:5])
                )
        for u in plan.unplaced:
            if u.code == "never_fits":
                # The simulated cluster never changes: a job no node can hold is decided once
                # (it never runs), not planned again every cycle.
                self.pending.pop(u.job, None)
        parts: dict[str, list[Assignment]] = {}
        for a in plan.assignments:  # a gang's nodes start together, all or nothing
            parts.setdefault(a.job, []).append(a)
        for job_id, on in parts.items():
            j = self.index[job_id]
            if j in self.placed or job_id not in self.pending:
                raise SimulationError(f"job {job_id} placed twice")
            self.placed[j] = []
            for a in on:
                self.begin(j, a.node, a.devices, now, a.processes, a)
            del self.pending[job_id]
            self.start[j] = now
            self.model.start(j, tuple(d for part in self.placed[j] for d in part[2]), now)

    def begin(
        self,
        j: int,
        node: str,
        device_ids: tuple[str, ...],
        now: float,
        processes: int | None,
        part: Assignment | None = None,
    ) -> None:
        """Take what job ``j`` holds on ``node`` (a gang: its ``processes`` there)."""
        job = self.jobs[j].job
        count = job.processes if processes is None else processes
        devices = tuple(self.dev_index[(node, d)] for d in device_ids)
        for d in devices:
            self.used_mem[d] += job.device_memory_mib
            if self.used_mem[d] > self.dev_mem[d]:
                raise SimulationError(
                    f"{self.policy.name} oversubscribes the memory of {node}/"
                    f"{device_ids[devices.index(d)]} at t={now:g}"
                )
            self.peak_mem[d] = max(self.peak_mem[d], self.used_mem[d])
        self.node_cpu[node] -= job.cpu_milli * count
        self.node_mem[node] -= job.memory_mib * count
        if self.node_cpu[node] < 0 or self.node_mem[node] < 0:
            raise SimulationError(f"{self.policy.name} oversubscribes host of {node} at t={now:g}")
        self.placed[j].append((node, device_ids, devices, count))
        self.running[(job.id, node)] = RunningJob(
            id=job.id,
            node=node,
            devices=device_ids,
            device_memory_mib=job.device_memory_mib,
            device_threads=job.device_threads,
            cpu_milli=job.cpu_milli * count,
            memory_mib=job.memory_mib * count,
            start_time_s=now,
            program=job.program,
            walltime_s=job.walltime_s,
            llc_ways=part.llc_ways if part is not None else None,
            membw_gbps=part.membw_gbps if part is not None else None,
        )
        # A model that slows jobs by what shares their node (memory bandwidth: the poncos
        # workload) learns the node first, each node of a gang; device models need only the
        # devices, told once per job in cycle().
        on_node = getattr(self.model, "on_node", None)
        if on_node is not None:
            on_node(j, node)
        # A model that needs the whole part (Spread-n-Share: processes and ways on the node)
        on_part = getattr(self.model, "on_part", None)
        if on_part is not None and part is not None:
            on_part(j, part, count)

    def finish(self, j: int, now: float) -> None:
        if j in self.end:
            raise SimulationError(f"job {self.jobs[j].job.id} ended twice")
        job = self.jobs[j].job
        if self.fair is not None:
            self.accrue(now)  # charged up to its end, while it still holds its cores
        for node, _, devices, count in self.placed[j]:
            self.busy_core_s += job.cpu_milli * count / MILLI * (now - self.start[j])
            for d in devices:
                self.used_mem[d] -= job.device_memory_mib
            self.node_cpu[node] += job.cpu_milli * count
            self.node_mem[node] += job.memory_mib * count
            del self.running[(job.id, node)]
        self.end[j] = now
        self.ended += 1
        self.makespan_s = max(self.makespan_s, now)
        if self.record is not None:
            self.record(self.job_record(j))
        if self.stream is not None:  # forget it: memory holds the jobs in flight only
            del self.live[j], self.index[job.id], self.placed[j], self.start[j], self.end[j]
        if self.progress is not None:
            self.progress(self.ended)
        self.trigger(now)

    def accrue(self, now: float) -> None:
        """Charge each user's fair-share usage for the cores their running jobs held."""
        assert self.fair is not None
        self.fair.accrue(
            (
                (self.jobs[self.index[r.id]].user, r.cpu_milli / MILLI)
                for r in self.running.values()
            ),
            now,
        )

    def job_record(self, j: int) -> JobRecord:
        sim = self.jobs[j]
        on = self.placed.get(j, [])
        node = ",".join(part[0] for part in on)  # a gang: every node it ran on
        device_ids = tuple(d for part in on for d in part[1])
        return JobRecord(
            id=sim.job.id,
            submit_s=sim.job.submit_time_s,
            duration_s=sim.duration_s,
            start_s=self.start.get(j),
            end_s=self.end.get(j),
            node=node,
            devices=device_ids,
            gate_wait_s=self.model.gate_wait_s(j) if j in self.start else 0.0,
            user=sim.user,
        )

    def result(self) -> SimResult:
        records: list[JobRecord] = []
        if self.stream is None:
            records = [self.job_record(j) for j in range(len(self.jobs))]
        elif self.record is not None:  # what is left never ran
            for j in sorted(self.live):
                self.record(self.job_record(j))
        if self.record is not None and self.stream is None:
            for r in records:
                if r.start_s is None:
                    self.record(r)
        return SimResult(
            policy=self.policy.name,
            nodes=len(self.nodes),
            devices=len(self.threads),
            makespan_s=self.makespan_s,
            jobs=tuple(records),
            cycles=self.cycles,
            busy_thread_s=tuple(self.model.busy_thread_s),
            thread_capacity=tuple(self.threads),
            peak_threads=tuple(self.model.peak_threads),
            peak_memory_mib=tuple(self.peak_mem),
            memory_capacity_mib=tuple(self.dev_mem),
            busy_core_s=self.busy_core_s,
            core_capacity=sum(n.cpu_milli for n in self.nodes) / MILLI,
            events=self.events,
        )
