"""The planning cycle: read the scheduler, plan, write the plan back.

::

    cron / systemd timer / schedd cron
          |
          v
    Source.read() --> SourceResult(snapshot, rejected)      scheduler's queue + nodes
          |
          v
    Policy.plan(snapshot) --> Plan                           pure, no I/O
          |
          v
    check_plan(snapshot, plan)  -- violation? --> PlanInvariantError, nothing written
          |
          v
    Editor.apply(plan, rejected, dry_run) --> ApplyReport    batched, idempotent edits

The planner keeps no state of its own: the scheduler's queue is the ledger. A job placed by
an earlier cycle carries its placement in its own attributes; the Source reports it as a
``planned`` placement that holds its resources (so two cycles never double-book) until it
starts, or until ``replan_after_s`` passes without a start, when it is pending again.
Killing the cycle at any point therefore loses nothing: the next one reads what was written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from coshare.errors import PlanInvariantError
from coshare.model import Plan, Snapshot
from coshare.policies.base import Policy
from coshare.verify import check_plan

#: Exit statuses of a cycle, for cron and systemd.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PARTIAL = 3


@dataclass(frozen=True)
class Rejected:
    """A pending job left out of the cycle because its annotations are unusable.

    Attributes:
        job: the job id.
        reason: the message for the user, naming the key and the allowed range.
    """

    job: str
    reason: str


@dataclass(frozen=True)
class SourceResult:
    """What a Source read: the snapshot to plan, and the jobs it had to refuse."""

    snapshot: Snapshot
    rejected: tuple[Rejected, ...] = ()


class Source(Protocol):
    """Reads the scheduler into a snapshot.

    Contract: ``read`` returns the cluster's nodes with their devices; the running jobs and
    those planned by coshare but not started (``state="planned"``) with what they hold; and
    the pending *annotated* jobs, not yet planned or planned longer ago than the replanning
    timeout. Jobs without coshare annotations never appear. A job whose annotations are
    unusable is returned in ``rejected`` with its message, never raised. Raises
    :class:`~coshare.errors.SchedulerError` when the scheduler cannot be read at all.
    """

    def read(self) -> SourceResult:
        """Take a snapshot of the scheduler."""
        ...


@dataclass(frozen=True)
class JobOutcome:
    """What happened to one job when a plan was applied."""

    job: str
    detail: str


@dataclass(frozen=True)
class ApplyReport:
    """What an Editor did.

    Attributes:
        applied: jobs whose placement was written (or would be, in a dry run).
        unchanged: jobs already placed exactly so (re-running a cycle is a no-op).
        skipped: jobs that ended or changed between read and write; nothing was written.
        failed: jobs whose write failed; they are planned again next cycle.
        rejected: jobs marked (held, commented) with their annotation problem.
        dry_run: whether nothing was written.
    """

    applied: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()
    rejected: tuple[JobOutcome, ...] = ()
    dry_run: bool = False


class Editor(Protocol):
    """Writes a plan into the scheduler's queue.

    Contract: edits are batched; applying the same plan twice writes nothing the second time
    (``unchanged``); a job that vanished or changed since it was read is ``skipped`` with a
    reason, never an exception that aborts the batch; a failed write of one job is ``failed``
    and the others go on; with ``dry_run`` nothing is written and the report says what would
    be. Raises :class:`~coshare.errors.SchedulerError` only when nothing can be written.
    """

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        """Apply a plan (and mark rejected jobs)."""
        ...


@dataclass(frozen=True)
class CycleReport:
    """One cycle, end to end.

    Attributes:
        plan: the plan (with its planning time).
        apply: what the editor did.
        rejected: jobs refused for bad annotations.
        read_s: seconds to read the scheduler.
        apply_s: seconds to write the plan.
    """

    plan: Plan
    apply: ApplyReport
    rejected: tuple[Rejected, ...] = ()
    read_s: float = 0.0
    apply_s: float = 0.0
    snapshot: Snapshot | None = field(default=None, repr=False)

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
) -> CycleReport:
    """Run one planning cycle.

    Raises:
        SchedulerError: the scheduler could not be read, or nothing could be written.
        PlanInvariantError: the policy produced an unsound plan; nothing was written.
    """
    start = clock()
    result = source.read()
    read_s = clock() - start
    plan = timed_plan(policy, result.snapshot, clock)
    violations = check_plan(result.snapshot, plan, strict_threads=strict_threads)
    if violations:
        raise PlanInvariantError(plan.policy, violations)
    start = clock()
    report = editor.apply(plan, result.rejected, dry_run=dry_run)
    return CycleReport(
        plan=plan,
        apply=report,
        rejected=result.rejected,
        read_s=read_s,
        apply_s=clock() - start,
        snapshot=result.snapshot,
    )
