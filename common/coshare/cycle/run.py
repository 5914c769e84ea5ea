"""The planning cycle: read the scheduler, plan, write the plan back.

::

    cron / systemd timer / schedd cron
          |
          v
    Source.read() --> SourceResult(snapshot, rejected)      scheduler's queue + nodes
          |
          v
    Policy.plan(snapshot) --> Plan                           pure, no I/O; a job or node that
          |                                                  makes it fail is left out, the
          v                                                  rest planned
          (coshare.cycle.containment)
    check_plan(snapshot, plan)  -- violation? --> PlanInvariantError, nothing written
          |
          v
    Editor.apply(plan, rejected, dry_run) --> ApplyReport    batched, idempotent edits

Each of the four phases (``read``, ``plan``, ``verify``, ``apply``: :data:`PHASES`) is timed,
and reported as it ends to an optional ``on_phase(name, seconds)`` hook, so that a cycle that
fails half-way still tells its metrics (:mod:`coshare.cycle.metrics`) how far it got. The planner
itself does no I/O beyond the ports and the clock it is given.

The planner keeps no state of its own: the scheduler's queue is the ledger. A job placed by
an earlier cycle carries its placement in its own attributes; the Source reports it as a
``planned`` placement that holds its resources (so two cycles never double-book) until it
starts, or until ``replan_after_s`` passes without a start, when it is pending again
(:mod:`coshare.ledger.book` has the rules, :mod:`coshare.ports` the Source and Editor).
Killing the cycle at any point therefore loses nothing: the next one reads what was written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from coshare.cycle.containment import Contained, ContainedPlan, PolicyFailed, plan_contained
from coshare.cycle.verify import check_plan
from coshare.errors import (
    EngineUnavailable,
    LeaseLost,
    PlanInvariantError,
    StoppedBetweenBatches,
)
from coshare.ledger.limits import admit, with_waits, withhold
from coshare.ledger.mig import without_mig_parents
from coshare.model import Plan, Snapshot, Unplaced
from coshare.ports import (
    ApplyReport,
    BatchFencedEditor,
    Editor,
    Fence,
    JobOutcome,
    PlanGate,
    Policy,
    Rejected,
    Source,
    SourceResult,
    Unusable,
    Waiting,
    capabilities,
)

# The ports used to live here: their names stay importable from the planner.
__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "PHASES",
    "ApplyReport",
    "CycleReport",
    "Editor",
    "JobOutcome",
    "OnPhase",
    "Rejected",
    "Source",
    "SourceResult",
    "Waiting",
    "checked_plan",
    "run_cycle",
    "timed_plan",
    "ways_refusal",
]

#: Exit statuses of a cycle, for cron and systemd.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PARTIAL = 3

#: The phases of a cycle, in order.
PHASES = ("read", "plan", "verify", "apply")

OnPhase = Callable[[str, float], None]
"""Told each phase's name (one of :data:`PHASES`) and seconds as the phase ends."""


@dataclass(frozen=True)
class CycleReport:
    """One cycle, end to end.

    Attributes:
        plan: the plan (with its planning time).
        apply: what the editor did.
        rejected: jobs refused (bad annotations, unreadable records).
        read_s: seconds to read the scheduler.
        apply_s: seconds to write the plan.
        verify_s: seconds to check the plan (:func:`coshare.cycle.verify.check_plan`).
        snapshot: what was planned.
        waiting: annotated jobs the Source left for later, with why.
        notes: what the Source found an admin should fix.
        trials: what the cycle did with the trial co-runs (``membw`` with
            ``policy.membw.trials``; :mod:`coshare.cycle.trials`), one line each.
        contained: the policy's failures the cycle planned around
        (:mod:`coshare.cycle.containment`):
            the jobs and nodes left out, with the input that reproduces each.
        unusable: the nodes the Source left out (closed by the scheduler, or ``unwritable``:
            a name the scheduler's writer cannot write into a placement).
    """

    plan: Plan
    apply: ApplyReport
    rejected: tuple[Rejected, ...] = ()
    read_s: float = 0.0
    apply_s: float = 0.0
    snapshot: Snapshot | None = field(default=None, repr=False)
    waiting: tuple[Waiting, ...] = ()
    notes: tuple[str, ...] = ()
    verify_s: float = 0.0
    trials: tuple[str, ...] = ()
    contained: tuple[Contained, ...] = ()
    unusable: tuple[Unusable, ...] = ()

    @property
    def exit_status(self) -> int:
        """0 when every edit went through (jobs may still wait), 3 when some edits failed."""
        return EXIT_PARTIAL if self.apply.failed else EXIT_OK


def timed_plan(
    policy: Policy, snapshot: Snapshot, clock: Callable[[], float] = time.perf_counter
) -> Plan:
    """Run a policy and record how long it took (policies themselves read no clock)."""
    start = clock()
    plan = policy.plan(snapshot)
    return replace(plan, seconds=clock() - start)


def run_cycle(
    source: Source,
    policy: Policy,
    editor: Editor,
    *,
    dry_run: bool = False,
    strict_threads: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    on_phase: OnPhase | None = None,
    before_write: Callable[[], None] | None = None,
    gate: PlanGate | None = None,
    fence_every_s: float = 0.0,
) -> CycleReport:
    """Run one planning cycle.

    Args:
        on_phase: told each phase's name and seconds as it ends (metrics).
        before_write: called right before the plan is written (not in a dry run); it
            raises to stop the cycle with nothing written (the planner lease's fence,
            :mod:`coshare.coord.cycle`). An Editor whose capabilities say ``fenced_batches``
            (:class:`~coshare.ports.Capabilities`) calls it again before each batch it
            writes once ``fence_every_s`` have passed since the last call (``0``: before
            every batch): what it raises then ends the writes there, the batches written
            complete.
        gate: with several planners over the same nodes (not in a dry run): settles the
            snapshot before planning (the other planners' claims count) and books the plan
            before it is written; only what it admits is written.

    Raises:
        SchedulerError: the scheduler could not be read, or nothing could be written.
        PlanInvariantError: the policy produced an unsound plan; nothing was written.
    """
    tell = on_phase if on_phase is not None else _ignore
    start = clock()
    result = source.read()
    read_s = clock() - start
    tell("read", read_s)
    snapshot = result.snapshot
    if gate is not None and not dry_run:
        snapshot = gate.settle(snapshot)
    contained = checked_plan(policy, snapshot, strict_threads=strict_threads, clock=clock)
    plan = contained.plan
    why = harvest_refusal(editor)
    if why is not None:  # harvest placements (collocate) this Editor cannot apply wait
        plan = without_harvest(plan, why)
    tell("plan", plan.seconds)
    start = clock()
    violations = check_plan(snapshot, plan, strict_threads=strict_threads)
    if plan.trials and not capabilities(editor).trials:
        # Trial co-runs need the scheduler to carry each trial's record and to suspend a pair
        # that fails (poncos section 7): an Editor that does not declare it never starts one.
        shown = ", ".join(t.job for t in plan.trials[:5])
        violations.append(
            f"the plan starts trial co-runs ({shown}), which this scheduler's adapter does not run"
        )
    refusal = ways_refusal(plan, editor)
    if refusal is not None:
        violations.append(refusal)
    verify_s = clock() - start
    tell("verify", verify_s)
    if violations:
        raise PlanInvariantError(plan.policy, violations)
    if gate is not None and not dry_run:
        plan = gate.admit(snapshot, plan)
    start = clock()
    if before_write is not None and not dry_run:
        checked = time.monotonic()  # taken before the check: the lease runs from later
        before_write()
        report = _apply_fenced(
            editor, plan, result.rejected, before_write, _Interval(checked, fence_every_s)
        )
    else:
        report = editor.apply(plan, result.rejected, dry_run=dry_run)
    apply_s = clock() - start
    tell("apply", apply_s)
    return CycleReport(
        plan=plan,
        apply=report,
        rejected=result.rejected,
        read_s=read_s,
        apply_s=apply_s,
        snapshot=snapshot,
        waiting=result.waiting,
        notes=result.notes,
        verify_s=verify_s,
        contained=contained.contained,
        unusable=result.unusable,
    )


def checked_plan(
    policy: Policy,
    snapshot: Snapshot,
    *,
    strict_threads: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> ContainedPlan:
    """The policy's plan of ``snapshot``, timed and checked as a live cycle checks it, with
    its failures contained (:mod:`coshare.cycle.containment`): a job or node that makes the policy
    raise, or its plan fail the check, is left out and the rest planned. The scheduler's
    limits hold around the policy (:mod:`coshare.ledger.limits`): a job that exceeds one
    alone is not offered to it, and of its placements only those that fit the limits
    together are kept, highest priority first. ``coshare plan``,
    ``show`` and every cycle plan through here, so what ``plan`` prints a cycle would write.

    Raises:
        PlanInvariantError: the policy's plans fail the check whatever is left out.
        Exception: what the policy raises whatever is left out (as it raised before).
    """
    start = clock()
    snapshot, mig_notes = without_mig_parents(snapshot)
    # the scheduler's limits (coshare.ledger.limits): a job it would not start is not planned
    planned, waits = withhold(snapshot)
    try:
        contained = plan_contained(
            policy.plan,
            planned,
            lambda snap, plan: check_plan(snap, plan, strict_threads=strict_threads),
            policy.name,
        )
    except PolicyFailed as failed:
        if failed.raised is not None:
            raise failed.raised from None
        # The violations the first check found: the whole snapshot's plan, not planned again.
        raise PlanInvariantError(policy.name, list(failed.problems)) from None
    plan = with_waits(admit(planned, contained.plan), waits)
    return replace(
        contained, plan=replace(plan, seconds=clock() - start, notes=(*mig_notes, *plan.notes))
    )


@dataclass
class _Interval:
    """When the fence last passed (``time.monotonic()`` taken before it was called), and
    how long a pass counts."""

    last: float
    every_s: float


def _apply_fenced(
    editor: Editor, plan: Plan, rejected: Sequence[Rejected], fence: Fence, interval: _Interval
) -> ApplyReport:
    """``editor.apply`` with ``fence`` before each of its batches that starts
    ``interval.every_s`` or more after the fence last passed, when the editor declares it
    can (else the fence called once, before :func:`run_cycle` calls this, is the only one).
    The lease a pass renews runs ``lease_s`` from a moment after ``interval.last``, so with
    ``every_s`` below ``lease_s`` every batch starts within the lease: a planner that lost
    it writes at most the batches already started. The fence is serialized (an Editor may
    write batches from several threads; the engine's connection is one)."""
    if not capabilities(editor).fenced_batches:
        return editor.apply(plan, rejected, dry_run=False)
    lock = threading.Lock()

    def serialized() -> None:
        with lock:
            now = time.monotonic()
            if now - interval.last < interval.every_s:
                return
            fence()
            interval.last = now

    try:
        return cast(BatchFencedEditor, editor).apply(
            plan, rejected, dry_run=False, fence=serialized
        )
    except (EngineUnavailable, LeaseLost) as exc:  # "wrote nothing" is no longer true
        raise StoppedBetweenBatches(exc) from exc


#: Why a live cycle does not apply a harvest placement through an Editor that cannot.
NOT_APPLIED = (
    "placed on the idle cores of GPU job {donor}, which this cycle cannot apply: "
    "{why}; it waits for free cores"
)
#: The reason of an Editor that says nothing of harvest placements.
NO_HARVEST = (
    "its scheduler adapter cannot start a job on cores the scheduler believes taken, "
    "nor have them taken out of the GPU job's cpuset first"
)


def without_harvest(plan: Plan, why: str = NO_HARVEST) -> Plan:
    """The plan a live cycle applies through an Editor that cannot apply harvest placements:
    they become ``unsupported`` waits, saying ``why``, and nothing is requeued.

    Applying one anyway would either fail (the scheduler believes the cores taken) or share
    cores unpartitioned (what section III-B1 measured to be slower).
    """
    harvest = [a for a in plan.assignments if a.harvest_from is not None]
    if not harvest and not plan.requeue:
        return plan
    kept = tuple(a for a in plan.assignments if a.harvest_from is None)
    waits = tuple(
        Unplaced(a.job, NOT_APPLIED.format(donor=a.harvest_from, why=why), "unsupported")
        for a in harvest
    )
    notes = plan.notes
    if plan.requeue:
        notes += (
            f"{len(plan.requeue)} jobs on lent cores would be requeued; this cycle "
            "places none there, so none is",
        )
    return replace(plan, assignments=kept, unplaced=plan.unplaced + waits, notes=notes, requeue=())


def harvest_refusal(editor: object) -> str | None:
    """Why ``editor`` cannot apply harvest placements (``collocate``: a CPU-only job on a
    running GPU job's idle cores, and the requeue of borrowers whose GPU job needs its cores
    back), or ``None`` when it can (:attr:`~coshare.ports.Capabilities.harvest`)."""
    caps = capabilities(editor)
    return None if caps.harvest else caps.why_not.get("harvest") or NO_HARVEST


def ways_refusal(plan: Plan, editor: object) -> str | None:
    """Why a live cycle must not apply ``plan`` through ``editor``: it allocates LLC ways
    or caps bandwidth with MBA (``sns``) and the editor's node side cannot make the resctrl
    groups, so the schedule would count on ways or caps nobody enforces; ``None`` when it
    may.

    The Editor may give its own reason (``why_not["llc_ways"]``)."""
    allocating = sorted(
        {s.job for s in plan.spreads if s.ways is not None}
        | {a.job for a in plan.assignments if a.llc_ways is not None}
    )
    capping = sorted({s.job for s in plan.spreads if s.membw_gbps is not None})
    caps = capabilities(editor)
    if not (allocating or capping) or caps.llc_ways:
        return None
    why = caps.why_not.get("llc_ways") or "this scheduler's adapter does not make resctrl groups"
    what = (
        f"allocates LLC ways ({', '.join(allocating[:5])})"
        if allocating
        else f"caps memory bandwidth with MBA ({', '.join(capping[:5])})"
    )
    return f"the plan {what}, which this live cycle cannot write: {why}"


def _ignore(phase: str, seconds: float) -> None:
    """The ``on_phase`` of a cycle nobody measures."""
