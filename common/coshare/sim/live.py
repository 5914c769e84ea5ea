"""The live cycle on a simulated clock: ``coshare simulate --cycle live``.

::

    t = 0, cycle_s, 2 cycle_s, ...            (event-driven: idle stretches are skipped)
      scheduler.advance(t)        arrivals, job ends; gated jobs whose resources are free start
      run_cycle(adapter, policy, adapter)     read -> ledger.settle -> plan -> check
                                              -> write_plan (the one protocol)
      scheduler.start_ready()     what the cycle opened starts at once

The planner is :func:`coshare.cycle.run.run_cycle`, the same one ``coshare slurm cycle`` runs;
the scheduler is :class:`~coshare.sim.memory_scheduler.MemoryScheduler`; the jobs run under
the fast engine's execution model (:mod:`coshare.sim.device`), so the two differ only where
the live cycle does: it plans every ``cycle_s`` rather than right after each job ends, and a
placement that does not start expires after ``replan_after_s`` (:mod:`coshare.ledger.book`).

A cycle runs at every multiple of ``cycle_s`` while a job waits. The clock jumps to the
first multiple at or after the next event when no job waits, or when a cycle placed nothing
on a cluster where nothing runs and no gate is open (nothing can change before the next
arrival). The run ends when no job waits or runs and none is to arrive, or when jobs still
wait on such an idle cluster with nothing left to arrive (they never fit: reported as not
run, as the fast engine does). The result is a :class:`~coshare.sim.engine.SimResult`,
summarized as the fast engine's.

:func:`run_wu_hong_live` runs Wu & Hong's workload (:mod:`coshare.sim.collocation`) the same
way: the scheduler lends a running GPU job's cores to the borrowers ``collocate`` places on
them, reads the node daemons' loads as that experiment's engine does, and the jobs run under
its :class:`~coshare.sim.collocation.LentCoreModel`; the result is its
:class:`~coshare.sim.collocation.CollocationRun`.

Pure: no I/O; the clock is simulated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.cycle.run import PHASES, run_cycle
from coshare.model import MILLI, Job, Node
from coshare.policies.base import Policy
from coshare.sim.collocation import (
    CollocationRun,
    LentCoreModel,
    wu_hong_facts,
    wu_hong_nodes,
    wu_hong_workload,
)
from coshare.sim.device import ExecutionModel, OffloadModel, Token
from coshare.sim.engine import JobRecord, SimResult, SimulationError
from coshare.sim.jobs import SimJob
from coshare.sim.memory_scheduler import MemoryAdapter, MemoryScheduler, Record, problems

#: Defaults of ``--cycle-s`` and of the placement timeout (``cycle`` of the configuration).
DEFAULT_CYCLE_S = 30.0
DEFAULT_REPLAN_AFTER_S = 300.0


@dataclass(frozen=True)
class LiveOptions:
    """How the live cycle runs.

    Attributes:
        cycle_s: simulated seconds between two cycles (``cycle.interval_s``).
        replan_after_s: a placement not started after this long expires
            (``cycle.replan_after_s``).
        strict_threads: whether plans are checked with declared threads within each device.
        batch_size: placements per batch of the write protocol.
        check: check the queue's consistency after every cycle (slower; tests).
    """

    cycle_s: float = DEFAULT_CYCLE_S
    replan_after_s: float = DEFAULT_REPLAN_AFTER_S
    strict_threads: bool = False
    batch_size: int | None = 100
    check: bool = False


@dataclass(frozen=True)
class LiveRun:
    """One run of the live cycle.

    Attributes:
        result: the run, as the fast engine reports one.
        withdrawn: placements closed by a later cycle (expired: not started within
            ``replan_after_s``), summed over the cycles.
        failed: writes that failed, summed over the cycles.
        skipped: writes skipped (the job changed or left between read and write).
        rejected: refusals marked, summed over the cycles.
        phases: CPU-clock seconds of each phase of the cycle (``read``, ``plan``, ``verify``,
            ``apply``: :data:`coshare.cycle.run.PHASES`), summed over the cycles: where a
            live run's time goes.
    """

    result: SimResult
    withdrawn: int = 0
    failed: int = 0
    skipped: int = 0
    rejected: int = 0
    phases: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Tally:
    """What the live cycle did over a run (:class:`LiveRun`'s fields, and the cycles)."""

    cycles: int
    withdrawn: int
    failed: int
    skipped: int
    rejected: int
    phases: Mapping[str, float]


class _ModelRuns:
    """Runs started jobs under an execution model; tells the scheduler when each ends."""

    def __init__(
        self,
        scheduler: MemoryScheduler,
        model: ExecutionModel,
        jobs: Sequence[SimJob],
        index: dict[str, int],
    ) -> None:
        self.scheduler = scheduler
        self.model = model
        self.index = index
        self.jobs = jobs
        self.device_index: dict[tuple[str, str], int] = {}
        threads: list[int] = []
        for node in scheduler.nodes:
            for d in node.devices:
                self.device_index[(node.name, d.id)] = len(threads)
                threads.append(d.threads)
        self.threads = threads
        model.bind(jobs, threads, self._schedule)

    def _schedule(self, time_s: float, token: Token) -> None:
        def happen(now: float) -> None:
            ended = self.model.handle(token, now)
            if ended is not None:
                self.scheduler.end(self.jobs[ended].job.id, now)

        self.scheduler.at(time_s, happen)

    def start(self, record: Record, now: float) -> None:
        devices = tuple(self.device_index[(h.node, d)] for h in record.holds for d in h.devices)
        self.model.start(self.index[record.id], devices, now)

    def cancel(self, record: Record, now: float) -> None:
        raise SimulationError(
            f"job {record.id} was requeued: the execution model cannot stop a running job"
        )


def simulate_live(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    policy: Policy,
    *,
    options: LiveOptions | None = None,
    model: ExecutionModel | None = None,
) -> LiveRun:
    """Run ``jobs`` on ``nodes`` with ``policy`` planning through the live cycle.

    Raises:
        SimulationError: job ids are not unique, or (with ``check``) the queue became
            inconsistent.
    """
    options = options or LiveOptions()
    model = model or OffloadModel()
    index = {s.job.id: i for i, s in enumerate(jobs)}
    if len(index) != len(jobs):
        raise SimulationError("job ids must be unique")
    scheduler = MemoryScheduler(
        nodes, replan_after_s=options.replan_after_s, batch_size=options.batch_size
    )
    runs = _ModelRuns(scheduler, model, jobs, index)
    scheduler.runner = runs
    for sim in jobs:
        scheduler.at(sim.job.submit_time_s, _arrival(scheduler, sim.job, sim.duration_s))
    t = _drive(scheduler, policy, options)
    result = _result(policy.name, scheduler, jobs, model, runs.threads, t.cycles)
    return LiveRun(result, t.withdrawn, t.failed, t.skipped, t.rejected, t.phases)


def _drive(scheduler: MemoryScheduler, policy: Policy, options: LiveOptions) -> Tally:
    """Cycle on ``scheduler``'s clock until no job waits or runs and none is to arrive (or
    those left wait on an idle cluster with nothing to arrive)."""
    adapter = MemoryAdapter(scheduler)
    cycles = withdrawn = failed = skipped = rejected = 0
    phases = dict.fromkeys(PHASES, 0.0)

    def tell(phase: str, seconds: float) -> None:
        phases[phase] += seconds

    t = 0.0
    while True:
        scheduler.advance(t)
        waiting = scheduler.pending()
        if waiting:
            cycles += 1
            report = run_cycle(
                adapter,
                policy,
                adapter,
                strict_threads=options.strict_threads,
                clock=time.process_time,
                on_phase=tell,
            )
            scheduler.start_ready()
            withdrawn += len(report.apply.withdrawn)
            failed += len(report.apply.failed)
            skipped += len(report.apply.skipped)
            rejected += len(report.apply.rejected)
            if options.check and (found := problems(scheduler)):
                raise SimulationError(f"t={t:g}: " + "; ".join(found[:5]))
            idle = (
                not report.apply.applied
                and not scheduler.running()
                and not any(r.gate_open for r in scheduler.pending())
            )
            upcoming = scheduler.next_event_s()
            if idle and upcoming is None:
                break  # nothing runs, nothing is placed, nothing will arrive: they never fit
            if idle and upcoming is not None:
                # an empty cluster took none of them: nothing changes before the next arrival
                t = max(t + options.cycle_s, _on_grid(upcoming, options.cycle_s))
            else:
                t += options.cycle_s
            continue
        upcoming = scheduler.next_event_s()
        if upcoming is None:
            break
        t = max(t + options.cycle_s, _on_grid(upcoming, options.cycle_s))
    return Tally(cycles, withdrawn, failed, skipped, rejected, phases)


@dataclass(frozen=True)
class CollocationLive:
    """One run of Wu & Hong's workload (:mod:`coshare.sim.collocation`) through the live
    cycle.

    Attributes:
        result: section IV-C's metrics, as the fast engine reports them.
        tally: what the live cycle did (placements expired, writes failed...).
    """

    result: CollocationRun
    tally: Tally


class _LentRuns:
    """Runs started jobs under the collocation experiment's execution model
    (:class:`~coshare.sim.collocation.LentCoreModel`, the fast engine's own): a borrower
    slows beside its lender, a job past its request is killed; tells the scheduler when each
    ends."""

    def __init__(self, scheduler: MemoryScheduler, model: LentCoreModel) -> None:
        self.scheduler = scheduler
        self.model = model
        self.due_s = math.inf
        self.generation = 0

    def start(self, record: Record, now: float) -> None:
        [held] = record.holds  # the workload has no gangs
        self.model.start(record.id, held.node, held.devices, held.harvest_from, now)
        self._wake()

    def cancel(self, record: Record, now: float) -> None:
        self.model.stop(record.id, now)
        self._wake()

    def _wake(self) -> None:
        """Ask the scheduler's clock for the model's next end (rates changed)."""
        due = self.model.next_end_s()
        if due == self.due_s:
            return  # the event asked for already is the one
        self.due_s = due
        self.generation += 1
        if math.isinf(due):
            return
        token = self.generation

        def happen(now: float) -> None:
            if token != self.generation:
                return  # a start or an end since moved it
            self.due_s = math.inf
            for job_id in self.model.end_due(now):
                self.scheduler.end(job_id, now)
            self._wake()

        self.scheduler.at(due, happen)


def run_wu_hong_live(
    policy: Policy,
    seed: int,
    options: LiveOptions | None = None,
    *,
    split_params: tuple[float, int, float] | None = None,
) -> CollocationLive:
    """Wu & Hong's workload of ``seed`` (:func:`~coshare.sim.collocation.run_wu_hong`'s)
    through the live cycle: the in-memory scheduler starts borrowers on their lender's
    cores, the node daemons' loads are :func:`~coshare.sim.collocation.wu_hong_facts`', and
    every job runs under the fast engine's :class:`~coshare.sim.collocation.LentCoreModel`.
    A requeued job starts over (its work is lost), as on the fast engine.

    Raises:
        SimulationError: (with ``check``) the queue became inconsistent.
    """
    options = options or LiveOptions()
    nodes = wu_hong_nodes()
    jobs = wu_hong_workload(seed)
    scheduler = MemoryScheduler(
        nodes,
        replan_after_s=options.replan_after_s,
        batch_size=options.batch_size,
        facts=wu_hong_facts(jobs),
    )
    model = LentCoreModel(nodes, jobs)
    scheduler.runner = _LentRuns(scheduler, model)
    whole = min(d.threads for n in nodes for d in n.devices)
    for spec in jobs:
        job = spec.job
        if job.needs_device and job.device_threads == 0:
            # the engine's GPU jobs leave threads undeclared; a user declares the whole GPU
            # (the queue refuses 0), which changes no placement: each takes all 3 of a node
            job = replace(job, device_threads=whole)
        scheduler.at(job.submit_time_s, _arrival(scheduler, job, spec.duration_s))
    tally = _drive(scheduler, policy, options)
    result = model.result(policy.name, seed, split_params or (1 / 3, 9, 300.0), tally.cycles)
    return CollocationLive(result, tally)


def _arrival(scheduler: MemoryScheduler, job: Job, run_s: float) -> Callable[[float], None]:
    def arrive(now: float) -> None:
        scheduler.submit(job, run_s)

    return arrive


def _on_grid(time_s: float, cycle_s: float) -> float:
    """The first cycle at or after ``time_s``."""
    return math.ceil(time_s / cycle_s) * cycle_s


def _result(
    policy: str,
    scheduler: MemoryScheduler,
    jobs: Sequence[SimJob],
    model: ExecutionModel,
    threads: list[int],
    cycles: int,
) -> SimResult:
    records = []
    busy_core_s = 0.0
    makespan = 0.0
    for sim in jobs:
        r = scheduler.records.get(sim.job.id)
        ran = r is not None and r.end_s is not None and r.start_s is not None
        on = r.placed.spots if (r is not None and r.placed is not None and ran) else ()
        if ran and r is not None and r.end_s is not None and r.start_s is not None:
            makespan = max(makespan, r.end_s)
            count = sum(p.processes or sim.job.processes for p in on)
            busy_core_s += sim.job.cpu_milli * count / MILLI * (r.end_s - r.start_s)
        records.append(
            JobRecord(
                id=sim.job.id,
                submit_s=sim.job.submit_time_s,
                duration_s=sim.duration_s,
                start_s=r.start_s if ran and r is not None else None,
                end_s=r.end_s if ran and r is not None else None,
                node=",".join(p.node for p in on),
                devices=tuple(d for p in on for d in p.devices),
                user=sim.user,
            )
        )
    devices = [(n.name, d) for n in scheduler.nodes for d in n.devices]
    return SimResult(
        policy=policy,
        nodes=len(scheduler.nodes),
        devices=len(devices),
        makespan_s=makespan,
        jobs=tuple(records),
        cycles=cycles,
        busy_thread_s=tuple(model.busy_thread_s),
        thread_capacity=tuple(threads),
        peak_threads=tuple(model.peak_threads),
        peak_memory_mib=tuple(scheduler.peak_dev[(n, d.id)] for n, d in devices),
        memory_capacity_mib=tuple(d.memory_mib for _, d in devices),
        busy_core_s=busy_core_s,
        core_capacity=sum(n.cpu_milli for n in scheduler.nodes) / MILLI,
        events=scheduler.events,
    )
