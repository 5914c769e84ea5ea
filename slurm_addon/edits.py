"""What to write into Slurm to apply a plan: pure decisions, so they are tested without Slurm.

:func:`plan_edits` compares the plan with the jobs as they are *now* (re-read just before
writing) and as they were when the snapshot was taken:

- a job that ended, started, or whose comment or AdminComment changed since the read is
  skipped with the reason (it is planned again next cycle);
- a job already placed exactly so and released is ``unchanged`` (applying twice writes
  nothing);
- otherwise its placement is written (ReqNodeList and AdminComment in one update, so Slurm
  never sees one without the other) with the time of this cycle, and if it is held it is
  released afterwards. A held job that already carries the same placement is written again
  too (a cycle stopped before releasing it, or its placement expired): the replanning
  clock starts anew;
- planned jobs that did not start in time, and unplaced jobs that are not held, are held;
- refused jobs get the reason in their AdminComment and are held.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coshare.model import Plan
from coshare.planner import JobOutcome, Rejected

from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import (
    Placement,
    PlacementError,
    format_placement,
    format_refusal,
    parse_placement,
)
from slurm_addon.view import ClusterView


@dataclass(frozen=True)
class PlacementWrite:
    """One job's placement to write.

    Attributes:
        job: the job id.
        node: its ReqNodeList.
        admin_comment: the placement text.
        release: whether it is held and must be released once the write is confirmed.
    """

    job: str
    node: str
    admin_comment: str
    release: bool


@dataclass(frozen=True)
class Edits:
    """Everything one apply writes, and what it decided not to write."""

    writes: tuple[PlacementWrite, ...] = ()
    holds: tuple[str, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()
    rejected: tuple[JobOutcome, ...] = ()


def change_since_read(seen: SlurmJob | None, now: SlurmJob | None) -> str | None:
    """Why a job can no longer be written as planned, or ``None`` when it is as it was."""
    if now is None:
        return "left the queue since it was read"
    if now.phase != "pending":
        return f"is {now.state.lower()} now, no longer pending"
    if seen is None:
        return "was not in the snapshot"
    if now.comment != seen.comment:
        return "its comment changed since it was read; planned again next cycle"
    if now.admin_comment != seen.admin_comment:
        return "its AdminComment changed since it was read (another cycle, or an admin)"
    return None


def _current_placement(job: SlurmJob) -> Placement | None:
    try:
        return parse_placement(job.admin_comment)
    except PlacementError:
        return None


def plan_edits(
    view: ClusterView,
    plan: Plan,
    rejected: Sequence[Rejected],
    current: Mapping[str, SlurmJob],
    *,
    now_s: float,
) -> Edits:
    """Decide the writes that apply ``plan`` (see the module docstring)."""
    seen = view.jobs or {}
    pending = {j.id: j for j in view.snapshot.pending}
    writes: list[PlacementWrite] = []
    holds: list[str] = []
    unchanged: list[str] = []
    skipped: list[JobOutcome] = []
    failed: list[JobOutcome] = []

    by_job: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for a in plan.assignments:
        by_job[a.job].append((a.node, a.devices))
    for job_id, spots in by_job.items():
        job = pending.get(job_id)
        if job is None:
            failed.append(JobOutcome(job_id, "is in the plan but was not pending"))
            continue
        if len(spots) != 1:
            failed.append(
                JobOutcome(job_id, "spans several nodes; the Slurm adapter places one node")
            )
            continue
        node, devices = spots[0]
        target = Placement(node, devices, int(now_s), job.device_memory_mib, job.device_threads)
        try:
            text = format_placement(target)
        except PlacementError as exc:
            failed.append(JobOutcome(job_id, str(exc)))
            continue
        now = current.get(job_id)
        existing = _current_placement(now) if now is not None else None
        if (
            now is not None
            and now.phase == "pending"
            and not now.held
            and existing is not None
            and existing.same_spot(target)
            and now.required_nodes == node
        ):
            unchanged.append(job_id)
            continue
        why = change_since_read(seen.get(job_id), now)
        if why is not None:
            skipped.append(JobOutcome(job_id, why))
            continue
        assert now is not None
        writes.append(PlacementWrite(job_id, node, text, release=now.held))

    def still_as_read(job_id: str) -> SlurmJob | None:
        now = current.get(job_id)
        return now if change_since_read(seen.get(job_id), now) is None else None

    for u in plan.unplaced:
        now = still_as_read(u.job)
        if u.job in view.unheld and now is not None and not now.held:
            holds.append(u.job)  # never let an unplaced annotated job start
    for job_id in view.expired:
        now = still_as_read(job_id)
        if now is not None and not now.held:
            holds.append(job_id)

    refusals: list[tuple[str, str]] = []
    outcomes: list[JobOutcome] = []
    for r in rejected:
        now = still_as_read(r.job)
        if now is None:
            continue
        outcomes.append(JobOutcome(r.job, r.reason))
        text = format_refusal(r.reason)
        if now.admin_comment != text:
            refusals.append((r.job, text))
        if not now.held:
            holds.append(r.job)

    return Edits(
        writes=tuple(writes),
        holds=tuple(dict.fromkeys(holds)),
        refusals=tuple(refusals),
        unchanged=tuple(unchanged),
        skipped=tuple(skipped),
        failed=tuple(failed),
        rejected=tuple(outcomes),
    )
