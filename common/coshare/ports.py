"""The ports of the planning cycle: what a scheduler adapter offers, and what it answers.

::

    Source.read() ----------> SourceResult(snapshot, rejected, waiting, notes, unusable)
    Editor.apply(plan, rejected, dry_run) --> ApplyReport(applied, unchanged, skipped,
                                                          failed, rejected, withdrawn)
    PlanGate.settle(snapshot) / .admit(snapshot, plan)    several planners

Both scheduler adapters (``condor_addon``, ``slurm_addon``) implement the two protocols in
one object, their ``adapter`` module; the simulator keeps its own in-memory ledger. The
rules both adapters follow (when a placement counts, when it expires, what a refused job
becomes) live in :mod:`coshare.ledger.book`; this module holds only the shapes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from coshare.ledger.trials import TrialJob, TrialRecord
from coshare.model import Plan, Snapshot


@dataclass(frozen=True)
class Rejected:
    """A pending job left out of the cycle because it cannot be planned as it is.

    Attributes:
        job: the job id.
        reason: the message for the user, naming the job, the key and the allowed range.
    """

    job: str
    reason: str


@dataclass(frozen=True)
class Waiting:
    """An annotated job that is not planned this cycle for a reason of the scheduler's own
    (a begin time in the future, a dependency on a queued job); it is left as it is.

    Attributes:
        job: the job id.
        reason: why it waits, for ``show``.
    """

    job: str
    reason: str


#: The state of an :class:`Unusable` node left out because its name cannot be written.
UNWRITABLE = "unwritable"


@dataclass(frozen=True)
class Unusable:
    """A node the scheduler starts no new job on now (Slurm: drained or down; HTCondor: its
    slots drained, or its START expression false), or one whose name the adapter's writer
    cannot write into a placement (state :data:`UNWRITABLE`): left out of the snapshot, and
    shown by ``show`` with the scheduler's own words, so an admin sees why it takes nothing.

    Attributes:
        node: the node's name.
        state: the scheduler's state (``idle+DRAIN``, ``Drained/Retiring``).
        reason: the reason an admin gave, if any.
    """

    node: str
    state: str
    reason: str = ""


@dataclass(frozen=True)
class SourceResult:
    """What a Source read.

    Attributes:
        snapshot: what the policy plans.
        rejected: pending jobs refused with their message (the Editor marks them).
        waiting: annotated jobs not planned now, with why (for ``show``).
        notes: what an admin should fix (unknown device kinds, unreadable records, ...).
        unusable: nodes that take no new job now, with why (for ``show``).
    """

    snapshot: Snapshot
    rejected: tuple[Rejected, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    notes: tuple[str, ...] = ()
    unusable: tuple[Unusable, ...] = ()


class Source(Protocol):
    """Reads the scheduler into a snapshot.

    Contract: ``read`` returns the cluster's nodes with their devices; the running jobs and
    those planned by coshare but not started (``state="planned"``) with what they hold; and
    the pending *annotated* jobs, not yet planned or whose placement expired. Jobs without
    coshare annotations never appear as pending. A job that cannot be read or whose
    annotations are unusable is returned in ``rejected`` with its message, never raised: no
    one job stops a cycle. Raises :class:`~coshare.errors.SchedulerError` when the scheduler
    cannot be read at all.
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
        rejected: jobs marked (held, commented) with the reason they were refused.
        withdrawn: jobs whose open placement was closed (HTCondor: its node cleared; Slurm:
            held) because the plan no longer keeps them there, with why.
        dry_run: whether nothing was written.
        noted: jobs whose wait reason was written or cleared (only those whose reason
            changed; :func:`coshare.policies.explain.wait_reason_writes`).
        requeued: running jobs requeued through the scheduler (``Plan.requeue``: CPU-only
            jobs whose GPU job needs its lent cores back), with why.
    """

    applied: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[JobOutcome, ...] = ()
    failed: tuple[JobOutcome, ...] = ()
    rejected: tuple[JobOutcome, ...] = ()
    withdrawn: tuple[JobOutcome, ...] = ()
    dry_run: bool = False
    noted: tuple[str, ...] = ()
    requeued: tuple[JobOutcome, ...] = ()


class Editor(Protocol):
    """Writes a plan into the scheduler's queue.

    Contract: edits are batched; applying the same plan twice writes nothing the second time
    (``unchanged``); a job that vanished or changed since it was read is ``skipped`` with a
    reason, never an exception that aborts the batch; a failed write of one job is ``failed``
    and the others go on; an open placement the plan does not keep is closed, and that close
    confirmed, before any new placement is opened (:mod:`coshare.ledger.book`); with ``dry_run``
    nothing is written and the report says what would be. Raises
    :class:`~coshare.errors.SchedulerError` only when nothing can be written.
    """

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        """Apply a plan (and mark rejected jobs)."""
        ...


#: Called before each batch an Editor writes; raises to stop the writes (the planner lease's
#: fence, :mod:`coshare.coord.cycle`).
Fence = Callable[[], None]


def no_fence() -> None:
    """The fence of a cycle without a planners' engine: nothing to check."""


class BatchFencedEditor(Editor, Protocol):
    """An Editor that checks a fence before each batch of writes (class attribute
    ``fences_batches = True``; both adapters): a planner whose lease was lost, or
    whose engine cannot be reached, stops before its next batch, not only before its first.

    Contract: ``fence`` is called (from any of the Editor's threads; the caller serializes
    it) before every batch of placements, holds or requeues is sent to the scheduler; what
    it raises ends :meth:`apply` at once with that exception. Each batch already sent is
    complete (written, confirmed, released or not) so the queue stays consistent and the next
    cycle finishes the rest.
    """

    def apply(
        self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool, fence: Fence | None = None
    ) -> ApplyReport:
        """Apply a plan, calling ``fence`` before each batch."""
        ...


class Adapter(Source, Editor, Protocol):
    """A scheduler adapter: its Source and Editor in one object (the Editor compares each job
    with what the Source read)."""


class PlanGate(Protocol):
    """Where a planner's cycle meets the other planners over the same nodes (the
    engine's claims, :mod:`coshare.coord.claims`).

    Contract: :meth:`settle` is called after the read and before planning: it releases this
    planner's claims of jobs the read no longer shows holding anything, and returns the
    snapshot with the other planners' claims the read does not show yet, as planned
    placements. :meth:`admit` is called after the plan was checked and before anything is
    written: it books the plan's device parts, each job all or none, and returns the plan
    with the jobs it could not book moved to ``unplaced`` with the reason; only what it
    returns may be written. Both raise :class:`~coshare.errors.CoordinationError` (nothing
    written) when the engine is unreachable or the lease is lost.
    """

    def settle(self, snapshot: Snapshot) -> Snapshot:
        """Release stale claims; the snapshot with the other planners' live claims."""
        ...

    def admit(self, snapshot: Snapshot, plan: Plan) -> Plan:
        """Book the plan's parts; the plan that may be written."""
        ...


@dataclass(frozen=True)
class ProbeResult:
    """What a trial's probe measured.

    Attributes:
        share: the job on trial's share of its node's memory bandwidth (``1 - available``
            on its partners' cores while they were frozen); ``None`` when the probe failed.
        error: why it failed (empty when it did not); for a pending one, what it waits for.
        pending: no result yet, and no failure either: the node answers later
            (``policy.membw.probe_via: facts``: the result comes with the node's facts);
            the job stays ``measuring`` and the next cycle looks again.
    """

    share: float | None
    error: str = ""
    pending: bool = False


class TrialProbe(Protocol):
    """Measures a trial co-run (poncos section 7, steps 6-8).

    Contract: freeze ``partners`` on ``node``, probe the memory bandwidth available on their
    cores, thaw them whatever happened, and return the share of ``job``; a failure or a
    timeout is a :class:`ProbeResult` with ``share=None`` and the reason, never raised. A
    probe whose node answers later (through its facts) returns ``pending`` until the answer
    to this request (``requested_at_s``) is there. A test may inject measurements through
    the same interface (:class:`coshare.cycle.trials.InjectedProbe`).
    """

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int,
    ) -> ProbeResult:
        """Measure ``job`` on ``node`` with ``partners`` frozen; ``requested_at_s``: the
        ``at`` of the job's ``measuring`` record (the request a later answer names)."""
        ...


class TrialControl(Protocol):
    """What a scheduler adapter offers trial co-runs: the jobs with a trial record (from its
    last ``read``), and the scheduler's own verbs for the wait after a failed trial.

    Contract: each verb acts on one job and returns ``None`` when done, else the error text
    (never raised: one job never stops the others); ``suspend`` and ``resume`` use the
    scheduler's suspension (Slurm ``scontrol suspend``/``resume``: the suspended time does
    not count against the time limit; HTCondor ``condor_suspend``/``condor_continue``), never
    a silent freeze; ``requeue`` puts a job back into the queue as pending, its placement
    and trial record replaced by ``reason``, so the next cycle plans it again.
    """

    def trial_jobs(self) -> Sequence[TrialJob]:
        """The jobs with a trial record, as the last ``read`` saw them."""
        ...

    def write_trial(self, job: str, record: TrialRecord) -> str | None:
        """Write ``job``'s trial record (with its placement)."""
        ...

    def suspend(self, job: str) -> str | None:
        """Suspend a running job through the scheduler."""
        ...

    def resume(self, job: str) -> str | None:
        """Resume a job the scheduler suspended."""
        ...

    def requeue(self, job: str, reason: str) -> str | None:
        """Put a job back to pending with ``reason``."""
        ...

    def node_job_id(self, job: str) -> str:
        """The id the job's node daemon knows it by (Slurm: the job id; HTCondor: its
        GlobalJobId in id characters), for the node's TRIAL request."""
        ...
