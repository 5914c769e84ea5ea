"""What each adapter would write for a plan, without a scheduler: the core's pure decisions
(:func:`coshare.cycle.protocol.decisions`) put through each adapter's codec, in the shapes
the adapters' unit tests check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coshare.config import CondorConfig, SlurmConfig
from coshare.cycle.protocol import decisions, notes_to_write
from coshare.ledger.book import Book, Current, Decisions
from coshare.model import Plan
from coshare.ports import JobOutcome, Rejected

from condor_addon.edits import Loans, Transactions, hold_reason, transactions
from condor_addon.writer import CondorWriter
from slurm_addon.edits import PlacementWrite, current
from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import format_waiting
from slurm_addon.view import ClusterView
from slurm_addon.writer import SlurmWriter


@dataclass(frozen=True)
class SlurmEdits:
    """What the Slurm writer would send: holds, refusal texts, encoded placements."""

    close: tuple[JobOutcome, ...]
    refusals: tuple[tuple[str, str], ...]
    writes: tuple[PlacementWrite, ...]
    unchanged: tuple[str, ...]
    skipped: tuple[JobOutcome, ...]
    failed: tuple[JobOutcome, ...]
    rejected: tuple[JobOutcome, ...]


def slurm_edits(
    view: ClusterView,
    plan: Plan,
    rejected: Sequence[Rejected],
    current_jobs: Mapping[str, SlurmJob],
    *,
    now_s: float,
    lend_partition: str | None = None,
) -> SlurmEdits:
    writer = SlurmWriter(None, SlurmConfig(lend_partition=lend_partition), view, now_s)  # type: ignore[arg-type]
    now = {i: current(j, view.jobs.get(i)) for i, j in current_jobs.items()}
    pending = {j.id: j for j in view.snapshot.pending}
    d = decisions(writer, plan, rejected, pending=pending, to_close=view.to_close, current=now)
    writer.admin_comments = {i: j.admin_comment for i, j in current_jobs.items()}
    refusals = tuple(writer.refusal_texts(d.refuse))
    return SlurmEdits(
        close=d.close,
        refusals=refusals,
        writes=tuple(writer.encode(w) for w in d.writes),
        unchanged=d.unchanged,
        skipped=d.skipped,
        failed=d.failed,
        rejected=tuple(JobOutcome(r.job, f"held: {r.reason}") for r in d.refuse),
    )


def slurm_notes(
    plan: Plan, current_jobs: Mapping[str, SlurmJob], batch: int = 100
) -> tuple[tuple[str, str], ...]:
    """``(job, AdminComment)`` of the waiting jobs whose reason the Slurm writer writes."""
    shape = SlurmWriter(None, SlurmConfig(update_batch=batch), None, 0.0).shape  # type: ignore[arg-type]
    now = {i: current(j, None) for i, j in current_jobs.items()}
    return tuple(
        (job, format_waiting(text))
        for job, text in notes_to_write(shape, plan, now)
        if text is not None
    )


@dataclass(frozen=True)
class CondorEdits(Transactions):
    """What the HTCondor writer would send: the decisions, the batch's transactions and the
    holds by reason."""

    decisions: Decisions = field(default_factory=Decisions)
    holds: tuple[tuple[str, tuple[str, ...]], ...] = ()


def condor_edits(
    plan: Plan,
    book: Book,
    rejected: Sequence[Rejected],
    current_jobs: Mapping[str, Current],
    *,
    now_s: float = 0.0,
    loans: Loans | None = None,
) -> CondorEdits:
    writer = CondorWriter(None, CondorConfig(), {}, lambda: now_s, lambda a, j: None)  # type: ignore[arg-type]
    pending = {j.id: j for j in book.pending}
    d = decisions(
        writer, plan, rejected, pending=pending, to_close=book.to_close, current=current_jobs
    )
    t = transactions(d.writes, now_s=now_s, loans=loans)
    holds: dict[str, list[str]] = {}
    for r in d.refuse:
        holds.setdefault(hold_reason(r.reason, r.job), []).append(r.job)
    return CondorEdits(
        **{f: getattr(t, f) for f in Transactions.__dataclass_fields__},
        decisions=d,
        holds=tuple((r, tuple(ids)) for r, ids in holds.items()),
    )
