"""The write protocol: how a plan reaches the scheduler's queue, once for every scheduler.

::

    reread          the involved jobs as they are now       --> ledger.decide: what each needs
    (dry run: stop here and say what would be written)
    requeue         borrowers whose GPU job needs its cores back, in calls of
                    jobs_per_call, a fence check before each
    close           open gates the plan does not keep, in calls of jobs_per_call, a fence
                    check before each, each confirmed; if one of those jobs started, or a
                    gate did not shut, nothing more is written this cycle
    refuse          refused jobs marked with their reason
    place           the placements in batches of batch_size, up to workers at once, a fence
                    check before each: written, confirmed, and only then their gates opened
    note            wait reasons that changed (notes_per_cycle at most)

The order is what makes a crash, a kill or a lost lease at any point harmless: a gate opens
only after its job's placement is confirmed whole, and only once every gate the plan
withdrew is confirmed shut; a cycle stopped in between leaves each job with its gate shut
(the next cycle plans it again) or fully placed. A fence that raises ends the writes there
with that exception; each batch sent before it is complete.

A writer (:class:`~coshare.cycle.queue_writer.QueueWriter`) only spells the verbs in its
scheduler's terms; what it does differently is data (:class:`WriteShape`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from coshare.cycle.queue_writer import QueueWriter, WriteShape, Written
from coshare.ledger.book import Current, Decisions, Write, decide, gates_may_open
from coshare.ledger.wait_reasons import wait_reason_writes
from coshare.model import Job, Plan
from coshare.ports import ApplyReport, Fence, JobOutcome, Rejected, no_fence

T = TypeVar("T")


def involved(plan: Plan, rejected: Sequence[Rejected], to_close: Collection[str]) -> set[str]:
    """The jobs whose state the protocol re-reads: planned, left waiting, refused, and
    those whose open gate the read found expired."""
    jobs = {a.job for a in plan.assignments} | {u.job for u in plan.unplaced}
    return jobs | {r.job for r in rejected} | set(to_close)


def write_plan(
    writer: QueueWriter,
    plan: Plan,
    rejected: Sequence[Rejected],
    *,
    pending: Mapping[str, Job],
    to_close: Mapping[str, str],
    dry_run: bool,
    fence: Fence | None = None,
) -> ApplyReport:
    """Write ``plan`` (and mark ``rejected`` jobs) through ``writer`` (see the module
    docstring for the order).

    Args:
        writer: the scheduler's verbs.
        plan: the plan, checked.
        rejected: the jobs the read refused.
        pending: the read's pending jobs, by id.
        to_close: the read's pending jobs whose gate is open but whose placement no longer
            counts, with why (:attr:`coshare.ledger.book.Book.to_close`).
        dry_run: write nothing; the report says what would be written.
        fence: called before each batch of requeues, closes and placements.

    Raises:
        SchedulerError: the scheduler cannot be reached; what was written is consistent.
        Exception: what ``fence`` raises, after the batches already sent completed.
    """
    fence = no_fence if fence is None else fence
    if not (plan.assignments or plan.unplaced or rejected or to_close or plan.requeue):
        return ApplyReport(dry_run=dry_run)
    shape = writer.shape
    current = writer.reread(involved(plan, rejected, to_close))
    d = decisions(writer, plan, rejected, pending=pending, to_close=to_close, current=current)
    reasons = notes_to_write(shape, plan, current)
    if dry_run:
        return ApplyReport(
            applied=tuple(w.job for w in d.writes),
            unchanged=d.unchanged,
            skipped=d.skipped,
            failed=d.failed,
            rejected=tuple(JobOutcome(r.job, f"{shape.refusal}: {r.reason}") for r in d.refuse),
            withdrawn=d.close,
            dry_run=True,
            noted=tuple(job for job, _ in reasons),
            requeued=tuple(JobOutcome(u.job, u.reason) for u in plan.requeue),
        )
    not_requeued: dict[str, str] = {}
    for chunk in _chunks(plan.requeue, shape.jobs_per_call):
        fence()
        not_requeued.update(writer.requeue(chunk))
    requeued = tuple(JobOutcome(u.job, u.reason) for u in plan.requeue if u.job not in not_requeued)
    failed = list(d.failed) + [JobOutcome(j, f"not requeued: {e}") for j, e in not_requeued.items()]
    skipped = list(d.skipped)
    closed: set[str] = set()
    started: set[str] = set()
    not_closed: set[str] = set()
    for close_chunk in _chunks([o.job for o in d.close], shape.jobs_per_call):
        fence()
        c = writer.close(close_chunk)
        closed |= c.closed
        started |= c.started
        not_closed |= c.not_closed
        skipped += c.skipped
        failed += c.failed
    # A job the read saw waiting that runs now (another planner's, or released by hand)
    # holds what the plan may give to another: nothing more opens this cycle.
    started |= {j for j in pending if (now := current.get(j)) is not None and now.started}
    withdrawn = tuple(o for o in d.close if o.job in closed)
    gone = {o.job for o in skipped}
    writes = [w for w in d.writes if w.job not in gone]
    blocked = gates_may_open(started, not_closed)
    if blocked is not None:
        return ApplyReport(
            unchanged=d.unchanged,
            skipped=tuple(skipped) + tuple(JobOutcome(w.job, blocked) for w in writes),
            failed=tuple(failed),
            withdrawn=withdrawn,
            requeued=requeued,
        )
    marked = writer.refuse(d.refuse) if d.refuse else None
    if marked is not None:
        failed += marked.failed
    written = _place(writer, writes, fence)
    return ApplyReport(
        applied=written.applied,
        unchanged=d.unchanged,
        skipped=tuple(skipped) + written.skipped,
        failed=tuple(failed) + written.failed,
        rejected=marked.marked if marked is not None else (),
        withdrawn=withdrawn,
        noted=writer.note(reasons) if reasons else (),
        requeued=requeued,
    )


def decisions(
    writer: QueueWriter,
    plan: Plan,
    rejected: Sequence[Rejected],
    *,
    pending: Mapping[str, Job],
    to_close: Mapping[str, str],
    current: Mapping[str, Current],
) -> Decisions:
    """What applying ``plan`` writes, from the jobs as they are now
    (:func:`coshare.ledger.book.decide`), with each placement the writer cannot spell moved to
    ``failed`` with why: that job is left as it is, the others are written. Pure."""
    d = decide(plan, pending, to_close, rejected, current)
    problems = {w.job: p for w in d.writes if (p := writer.unwritable(w)) is not None}
    if not problems:
        return d
    return replace(
        d,
        writes=tuple(w for w in d.writes if w.job not in problems),
        failed=d.failed + tuple(JobOutcome(j, f"not written: {p}") for j, p in problems.items()),
    )


def notes_to_write(
    shape: WriteShape, plan: Plan, current: Mapping[str, Current]
) -> tuple[tuple[str, str | None], ...]:
    """The wait reasons to write: those that changed, on jobs that may carry one
    (``shape.notes_per_cycle`` at most). Pure."""
    recorded = {j: c.wait_reason for j, c in current.items() if c.may_note}
    writes = [
        (job, text)
        for job, text in wait_reason_writes(plan, recorded).items()
        if text is not None or shape.clears_notes
    ]
    return tuple(writes)[: shape.notes_per_cycle]


def _place(writer: QueueWriter, writes: Sequence[Write], fence: Fence) -> Written:
    """Every batch of placements, ``workers`` at once, a fence check before each."""
    if not writes:
        return Written()
    writer.reach()
    batches = _chunks(writes, writer.shape.batch_size or len(writes))

    def one(batch: Sequence[Write]) -> Written:
        fence()  # may raise: then this batch sends nothing
        return writer.place(batch, fence)

    if writer.shape.workers > 1 and len(batches) > 1:
        with ThreadPoolExecutor(max_workers=writer.shape.workers) as pool:
            parts = list(pool.map(one, batches))
    else:
        parts = [one(b) for b in batches]
    return Written(
        applied=tuple(j for p in parts for j in p.applied),
        skipped=tuple(o for p in parts for o in p.skipped),
        failed=tuple(o for p in parts for o in p.failed),
    )


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
