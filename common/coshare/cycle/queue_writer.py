"""The port a scheduler's writer implements: the verbs the write protocol drives.

::

    reread(jobs)            the involved jobs as the queue holds them now
    unwritable(write)       why a placement cannot be put in the scheduler's text (pure)
    requeue(jobs)           running jobs back to pending, held from starting again
    close(jobs)             open gates shut, and confirmed
    refuse(refusals)        refused jobs marked with their reason, kept from starting
    reach()                 the scheduler answers (before a series of placements)
    place(batch, fence)     one batch: written, confirmed, gates opened
    note(reasons)           wait reasons written

Each verb acts on the jobs it is given and reports per job; one job's failure never raises.
A verb raises only when the scheduler cannot be reached at all
(:class:`~coshare.errors.SchedulerError`), or when ``fence`` raises. The order in which
the verbs are called, the batching and what a partial failure means are the protocol's
(:mod:`coshare.cycle.protocol`), not the writer's: a writer only says how its scheduler
spells each verb. Both adapters' writers (``condor_addon.writer``, ``slurm_addon.writer``)
and the in-memory scheduler implement it.

Pure: shapes only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from coshare.ledger.book import Current, Write
from coshare.model import Unplaced
from coshare.ports import Fence, JobOutcome, Rejected


@dataclass(frozen=True)
class WriteShape:
    """How a scheduler takes its writes: data, not code, so the protocol is one.

    Attributes:
        batch_size: placements per :meth:`QueueWriter.place` call (``None``: all in one).
        workers: batches written at once (threads); the fence is serialized by the caller.
        jobs_per_call: jobs per :meth:`~QueueWriter.requeue` and :meth:`~QueueWriter.close`
            call (one fence check before each).
        notes_per_cycle: wait reasons written per cycle at most (``None``: all); the rest
            follow in later cycles (informational).
        clears_notes: whether a wait reason is cleared when the job is placed (HTCondor's
            ``CoshareWaitReason``); ``False`` where the placement replaces it (Slurm's
            AdminComment).
        refusal: what a refused job becomes, for the report (``held``, ``left idle``).
    """

    batch_size: int | None = None
    workers: int = 1
    jobs_per_call: int = 500
    notes_per_cycle: int | None = None
    clears_notes: bool = True
    refusal: str = "held"


@dataclass(frozen=True)
class Closed:
    """What :meth:`QueueWriter.close` did.

    Attributes:
        closed: the jobs whose gate is now shut.
        started: jobs that started at the placement being withdrawn (nothing more may open).
        not_closed: jobs whose gate could not be shut (nothing more may open).
        skipped: jobs gone or started meanwhile, with why (their new placement, if any, is
            not written).
        failed: jobs whose close failed, with the scheduler's error.
    """

    closed: frozenset[str] = frozenset()
    started: frozenset[str] = frozenset()
    not_closed: frozenset[str] = frozenset()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()


@dataclass(frozen=True)
class Written:
    """What one :meth:`QueueWriter.place` batch did.

    Attributes:
        applied: jobs placed, confirmed and whose gate is open.
        skipped: jobs that ended or changed while being placed, with why (nothing opened).
        failed: jobs whose placement was not taken, with why (gate left shut).
    """

    applied: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()


@dataclass(frozen=True)
class Marked:
    """What :meth:`QueueWriter.refuse` did: the jobs marked (with what they became) and
    those whose mark failed."""

    marked: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()


class QueueWriter(Protocol):
    """A scheduler's verbs, as the write protocol calls them (see the module docstring)."""

    shape: WriteShape

    def reread(self, jobs: Collection[str]) -> Mapping[str, Current]:
        """The jobs as the queue holds them now, each compared with the last read
        (:attr:`Current.changed`); a job missing left the queue. May hold more jobs than
        asked (every managed one)."""
        ...

    def unwritable(self, write: Write) -> str | None:
        """Why ``write`` cannot be put in the scheduler's text (a name or value its codec
        refuses, a capability not configured); ``None`` when it can. Pure."""
        ...

    def requeue(self, jobs: Sequence[Unplaced]) -> Mapping[str, str]:
        """End these running jobs and put them back to pending with their reason, their gate
        shut (the next cycle plans them again); the scheduler's error by job for those it
        refused."""
        ...

    def close(self, jobs: Sequence[str]) -> Closed:
        """Shut these jobs' gates (pending jobs only: a guarded write), then confirm with a
        re-read which are shut, which started meanwhile and which could not be shut."""
        ...

    def refuse(self, refusals: Sequence[Rejected]) -> Marked:
        """Mark each refused job with its reason and keep it from starting (held), or say
        what it became where the site leaves refused jobs as they are."""
        ...

    def reach(self) -> None:
        """Check the scheduler answers before a series of placements (a stopped controller
        would cost a timeout per write, not one error); raises
        :class:`~coshare.errors.SchedulerError` when it does not."""
        ...

    def place(self, batch: Sequence[Write], fence: Fence) -> Written:
        """Write each placement whole, confirm it with a re-read, and only then open the
        gates of those confirmed and unchanged. ``fence`` is called before every further
        transaction the writer sends within the batch (the protocol called it before the
        batch); what it raises stops the batch there, no gate opened after it. May be called
        from several threads at once (``shape.workers``), each with its own batch."""
        ...

    def note(self, reasons: Sequence[tuple[str, str | None]]) -> tuple[str, ...]:
        """Write each job's wait reason (``None``: clear it); informational: a failure is
        logged, never raised. Returns the jobs whose reason was written."""
        ...
