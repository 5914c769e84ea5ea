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
starts, or until ``replan_after_s`` passes without a start, when it is pending again
(:mod:`coshare.ledger` has the rules, :mod:`coshare.ports` the Source and Editor).
Killing the cycle at any point therefore loses nothing: the next one reads what was written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from coshare.errors import PlanInvariantError
from coshare.model import Plan, Snapshot
from coshare.policies.base import Policy
from coshare.ports import ApplyReport, Editor, JobOutcome, Rejected, Source, SourceResult, Waiting
from coshare.verify import check_plan

# The ports used to live here: their names stay importable from the planner.
__all__ = [
    "EXIT_FAILED", "EXIT_OK", "EXIT_PARTIAL", "ApplyReport", "CycleReport", "Editor",
    "JobOutcome", "Rejected", "Source", "SourceResult", "Waiting", "run_cycle", "timed_plan",
]  # fmt: skip

#: Exit statuses of a cycle, for cron and systemd.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PARTIAL = 3


@dataclass(frozen=True)
class CycleReport:
    """One cycle, end to end.

    Attributes:
        plan: the plan (with its planning time).
        apply: what the editor did.
        rejected: jobs refused (bad annotations, unreadable records).
        read_s: seconds to read the scheduler.
        apply_s: seconds to write the plan.
        snapshot: what was planned.
        waiting: annotated jobs the Source left for later, with why.
        notes: what the Source found an admin should fix.
    """

    plan: Plan
    apply: ApplyReport
    rejected: tuple[Rejected, ...] = ()
    read_s: float = 0.0
    apply_s: float = 0.0
    snapshot: Snapshot | None = field(default=None, repr=False)
    waiting: tuple[Waiting, ...] = ()
    notes: tuple[str, ...] = ()

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
        waiting=result.waiting,
        notes=result.notes,
    )
