"""What to write into Slurm to apply a plan: pure decisions, so they are tested without Slurm.

:func:`plan_edits` asks the ledger (:func:`coshare.ledger.book.decide`) what each job needs, from
the jobs as they are *now* (re-read just before writing) and as they were when the snapshot
was taken, and turns its decisions into Slurm's terms, applied in this order:

1. **close**: every job whose gate is open (it is not held) and that the plan does not keep
   exactly where it is, is held: expired placements, jobs released by hand, refused jobs.
   The holds are confirmed by a re-read before anything is released; if one of those jobs
   started meanwhile, nothing more is written this cycle.
2. **refusals**: a refused job gets the reason in its AdminComment (it stays held).
3. **writes**: each placement as ``ReqNodeList`` and ``AdminComment`` in one update (Slurm
   never sees one without the other), with the time of this cycle; a gang's also with its
   ``NumNodes``, ``NumTasks``, ``MinCPUsNode`` (and ``TasksPerNode`` when its split is
   even), all nodes in that same one update; once a
   re-read confirms it, the job is released. A job already placed exactly so and released is
   ``unchanged`` (applying twice writes nothing); a held job that carries the same placement
   (a cycle stopped before releasing it) is written again, and its replanning clock starts
   anew.

4. **wait reasons**: a job left waiting gets the plan's short reason in its AdminComment
   (``coshare-waiting: ...``), only when it changed, and only over an empty AdminComment or
   an older reason (:func:`wait_reason_updates`).

A job that ended, started, or whose comment or AdminComment changed since the read is
skipped with the reason (it is planned again next cycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coshare.ledger.book import Current, decide
from coshare.ledger.trials import TrialRecord, format_trial
from coshare.model import MILLI, Plan
from coshare.policies.explain import wait_reason_writes
from coshare.ports import JobOutcome, Rejected

from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import (
    Placement,
    PlacementError,
    format_placement,
    format_refusal,
    format_waiting,
    parse_placement,
    waiting_reason,
    with_trial,
)
from slurm_addon.view import ClusterView, placed_of, same_nodes


@dataclass(frozen=True)
class PlacementWrite:
    """One job's placement to write, then (once confirmed) release.

    Attributes:
        job: the job id.
        node: its ReqNodeList (a gang: its first node).
        admin_comment: the placement text.
        nodes: a gang's nodes (its ReqNodeList and NumNodes); empty for a single-node job.
        tasks: a gang's tasks in all (NumTasks).
        tasks_per_node: a gang's tasks on each node when the plan split them evenly
            (TasksPerNode); 0 for an uneven split (see :func:`~slurm_addon.scontrol.update_line`).
        min_cpus_per_node: a gang's largest part's CPUs (MinCPUsNode): Slurm allocates that
            many on each node, as the ledger counts it (:func:`coshare.ledger.book.held`).
        partition: the lending partition a job of a lent core moves into (``collocate``:
            a CPU-only job placed on a GPU job's idle cores, or a GPU job that may lend);
            ``None``: it stays where it is.
    """

    job: str
    node: str
    admin_comment: str
    nodes: tuple[str, ...] = ()
    tasks: int = 0
    tasks_per_node: int = 0
    min_cpus_per_node: int = 0
    partition: str | None = None

    def confirmed(self, required_nodes: str) -> bool:
        """Whether a re-read ReqNodeList is this write's."""
        if not self.nodes:
            return required_nodes == self.node
        return same_nodes(required_nodes, self.nodes)


@dataclass(frozen=True)
class Edits:
    """Everything one apply writes, and what it decided not to write.

    Attributes:
        close: jobs to hold before anything is released, with why.
        refusals: ``(job, AdminComment)`` of refused jobs whose reason is not written yet.
        writes: placements to write and release.
        unchanged: jobs already placed exactly so.
        skipped: jobs not written, with why.
        failed: jobs that cannot be written.
        rejected: refused jobs (held, with their reason).
    """

    close: tuple[JobOutcome, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()
    writes: tuple[PlacementWrite, ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()
    rejected: tuple[JobOutcome, ...] = ()


def change_since_read(seen: SlurmJob | None, now: SlurmJob) -> str | None:
    """Why a pending job can no longer be written as planned, or ``None`` when it is as it
    was read."""
    if seen is None:
        return "was not in the snapshot"
    if now.comment != seen.comment:
        return "its comment changed since it was read; planned again next cycle"
    if now.admin_comment != seen.admin_comment:
        return "its AdminComment changed since it was read (another cycle, or an admin)"
    return None


def current(now: SlurmJob, seen: SlurmJob | None) -> Current:
    """A job as the Editor re-read it, for :func:`coshare.ledger.book.decide`."""
    try:
        placement = parse_placement(now.admin_comment)
    except PlacementError:
        placement = None
    return Current(
        id=now.id,
        state=now.state.lower() or now.phase,
        pending=now.phase == "pending",
        gate_open=not now.held,
        placed=placed_of(placement, now),
        changed=change_since_read(seen, now),
    )


def plan_edits(
    view: ClusterView,
    plan: Plan,
    rejected: Sequence[Rejected],
    current_jobs: Mapping[str, SlurmJob],
    *,
    now_s: float,
    lend_partition: str | None = None,
) -> Edits:
    """Decide the writes that apply ``plan`` (see the module docstring).

    Args:
        view: what the Source read.
        plan: the plan.
        rejected: the jobs refused by the read.
        current_jobs: the involved jobs as re-read just before writing.
        now_s: the time written into placements.
        lend_partition: ``slurm.lend_partition``: where jobs of lent cores run.
    """
    now = {i: current(j, view.jobs.get(i)) for i, j in current_jobs.items()}
    pending = {j.id: j for j in view.snapshot.pending}
    d = decide(plan, pending, view.to_close, rejected, now)
    trials = {t.job: t for t in plan.trials}
    writes: list[PlacementWrite] = []
    failed = list(d.failed)
    for w in d.writes:
        # A gang planned on one node (``-N 1-4`` at one node: ``sns`` at scale 1) is pinned
        # to NumNodes=1-1 by its write, so read back it is a single-node job: its placement
        # then records no parts, as a single-node job's (one with parts would be "gone").
        recorded = w.parts if len(w.parts) > 1 else ()
        target = Placement(
            w.node,
            w.devices,
            int(now_s),
            w.device_memory_mib,
            w.device_threads,
            recorded,
            w.llc_ways,
            w.spread,
            w.harvest_from,
        )
        if w.harvest_from is not None and lend_partition is None:
            failed.append(
                JobOutcome(w.job, "placed on lent cores, but slurm.lend_partition is not set")
            )
            continue
        moved = lend_partition if w.shares_cores and not w.parts else None
        try:
            text = format_placement(target)
            if w.job in trials:  # the trial's record starts with its placement
                text = with_trial(
                    text, format_trial(TrialRecord("placed", int(now_s), trials[w.job].partners))
                )
            if w.parts:
                counts = [p.processes for p in w.parts]
                even = counts[0] if len(set(counts)) == 1 else 0
                cpus = max(counts) * -(-pending[w.job].cpu_milli // MILLI)  # CPUs per task
                writes.append(
                    PlacementWrite(
                        w.job,
                        w.node,
                        text,
                        (w.node,) if not recorded else target.nodes,
                        sum(counts),
                        even,
                        cpus,
                    )
                )
            else:
                writes.append(PlacementWrite(w.job, w.node, text, partition=moved))
        except (PlacementError, ValueError) as exc:
            failed.append(JobOutcome(w.job, str(exc)))
    refusals = []
    for r in d.refuse:
        text = format_refusal(r.reason)
        if current_jobs[r.job].admin_comment != text:
            refusals.append((r.job, text))
    return Edits(
        close=d.close,
        refusals=tuple(refusals),
        writes=tuple(writes),
        unchanged=d.unchanged,
        skipped=d.skipped,
        failed=tuple(failed),
        rejected=tuple(JobOutcome(r.job, f"held: {r.reason}") for r in d.refuse),
    )


def wait_reason_updates(
    plan: Plan, current_jobs: Mapping[str, SlurmJob]
) -> tuple[tuple[str, str], ...]:
    """``(job, AdminComment)`` of the waiting jobs whose reason changed.

    Only a pending, held job whose AdminComment is empty or an older waiting record is
    written: a placement (the placement write replaces the record), a refusal and an
    operator's own text are left as they are.
    """
    recorded: dict[str, str | None] = {}
    for job_id, job in current_jobs.items():
        if job.phase != "pending" or not job.held:
            continue
        text = job.admin_comment.strip()
        if not text or waiting_reason(text) is not None:
            recorded[job_id] = waiting_reason(text)
    writes = wait_reason_writes(plan, recorded)
    return tuple((job, format_waiting(text)) for job, text in writes.items() if text is not None)
