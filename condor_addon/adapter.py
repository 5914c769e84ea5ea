"""The HTCondor adapter: the cycle's Source and Editor over the htcondor2 bindings.

::

    read():  collector: every slot ad ---> parse_slots --> nodes, devices, claimed slots
             schedd: managed active jobs -> parse_queue --> the ledger: pending, placed, refused
                                             build_snapshot --> Snapshot
    apply(): schedd: managed jobs again (what changed since the read?) --> plan_edits()
             --> vacate the borrowers the plan requeues (collocate), their gate closed
             --> close the open gates the plan does not keep; confirm
             --> CosharePlacedAt, CosharePlacedDevices, a borrower's CoshareHarvestFrom, a
                 gang's CosharePlacedNodes and CosharePlacedNodeDevices, CosharePlacedNode
                 (batched)
             --> hold refused jobs with their reason
             --> CoshareWaitReason of waiting jobs whose reason changed

Slots are read before jobs, so a job that starts in between is still counted (from its queue
entry, as running). One object is both Source and Editor because the Editor compares each
job with the state the Source read. :mod:`condor_addon.view` says where each fact comes from,
:mod:`condor_addon.edits` the order of the writes and why a crash at any point is harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from coshare.config import Config
from coshare.errors import CoshareError, SchedulerError
from coshare.ledger.annotations import parse_job as parse_annotations
from coshare.ledger.book import gates_may_open
from coshare.ledger.trials import (
    JobPhase,
    TrialJob,
    TrialRecord,
    TrialRecordError,
    format_trial,
    parse_trial,
)
from coshare.model import Plan
from coshare.ports import ApplyReport, Fence, JobOutcome, Rejected, SourceResult, no_fence

from condor_addon import attributes as A
from condor_addon import expressions as X
from condor_addon.client import CondorClient, open_client
from condor_addon.edits import Edits, Loans, plan_edits, wait_reason_edits
from condor_addon.errors import EditFailed
from condor_addon.view import (
    QueueJob,
    QueueView,
    build_snapshot,
    claim_key,
    current,
    foreign_planned,
    local_lenders,
    node_job_id,
    parse_queue,
    parse_slots,
    read_job,
    with_node_facts,
)

log = logging.getLogger(__name__)
#: How often, and how long at most, a trial's suspend or continue is checked until the
#: schedd confirms it (the starter acts within seconds).
CONFIRM_POLL_S = 0.25
CONFIRM_TIMEOUT_S = 15.0


def open_adapter(config: Config) -> CondorAdapter:
    """The adapter of ``coshare condor`` for a configuration."""
    return CondorAdapter(open_client(config.condor), config)


class CondorAdapter:
    """Reads one HTCondor pool and schedd and writes plans into it (Source and Editor).

    Args:
        client: the bindings edge.
        config: the whole configuration (``condor``, ``cycle`` and ``device_kinds``).
        clock: wall-clock seconds (the clock of ``QDate`` and ``CosharePlacedAt``).

    Attributes:
        jobs: the managed jobs of the last read, by id (the Editor's change check).
    """

    #: HTCondor's placement records no LLC ways and its starter hooks make no resctrl group:
    #: a live cycle refuses a plan that allocates ways (:func:`coshare.cycle.run.ways_refusal`).
    #: Placements carry a trial co-run's record and the adapter offers the trial verbs
    #: (suspend, resume, requeue; :class:`coshare.ports.TrialControl`).
    runs_trials: ClassVar[bool] = True
    writes_llc_ways: ClassVar[bool] = False
    #: A job id (``12.0``) is per schedd, so claims in the planners' engine go by
    #: ``schedd#12.0`` (:meth:`job_key`), the same key whichever schedd's planner reads the
    #: job: another planner's claim and the job read here are one.
    global_job_ids: ClassVar[bool] = True
    ways_unwritable_reason: ClassVar[str] = (
        "the HTCondor adapter records no LLC ways in a placement and its starter hooks make "
        "no resctrl group (only Slurm's Prolog does)"
    )

    #: A trial's probe through the scheduler (``policy.membw.probe_via: step``,
    #: :class:`coshare.cycle.trials.ProbeStep`) is not offered: HTCondor runs a command inside
    #: a running job only through ``condor_ssh_to_job``, which needs sshd on every execute
    #: node and runs as the job's owner, whom the node daemon does not let probe
    #: (``probe_via: facts`` reaches the node without either).
    probe_step_unsupported_reason: ClassVar[str] = (
        "HTCondor runs a command in a running job only through condor_ssh_to_job (sshd on "
        "the execute node, as the job's owner, whom the node daemon does not let probe)"
    )
    #: ``policy.membw.probe_via: facts`` (:class:`coshare.cycle.trials.FactsProbe`): each
    #: execute node's daemon reads its jobs' ``measuring`` records from their schedd
    #: (``node.trial_requests: condor``, :mod:`condor_addon.node_trials`) and answers in its
    #: facts, which the startd cron publishes: no connection from the planner to the node.
    probes_via_facts: ClassVar[bool] = True

    #: :meth:`apply` checks the planner lease's fence before each queue transaction that
    #: places, withdraws or requeues (:class:`coshare.ports.BatchFencedEditor`).
    fences_batches: ClassVar[bool] = True

    @property
    def applies_harvest(self) -> bool:
        """Whether live cycles may place CPU-only jobs on running GPU jobs' idle cores
        (``collocate``; :func:`coshare.cycle.run.harvest_refusal`): with lend slots on the
        execute nodes (``condor.lend_slots``), such a job carries its GPU job
        (``CoshareHarvestFrom``) and only a lend slot of its node admits it; its wrapper has
        the node daemon take its cores out of the GPU job's cpuset before it runs (START
        ``borrow=``), and borrowers the plan requeues are vacated, their gate closed."""
        return self.config.condor.lend_slots

    #: Why not, when :attr:`applies_harvest` is false.
    harvest_unsupported_reason: ClassVar[str] = (
        "condor.lend_slots is not set: HTCondor starts no job on cores it believes taken "
        "unless the execute nodes have coshare's lend slots "
        "(deploy/condor/config.d/20-coshare-execute.conf)"
    )

    def __init__(
        self, client: CondorClient, config: Config, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.config = config
        self.clock = clock
        self.jobs: dict[str, QueueJob] = {}
        self.sleep: Callable[[float], None] = time.sleep
        self.queue: QueueView | None = None

    # -- Source ---------------------------------------------------------------------------

    def read(self) -> SourceResult:
        """Take a snapshot of the pool and the schedd's managed jobs.

        Raises:
            SchedulerUnavailable: the collector or the schedd cannot be reached.
        """
        cluster = parse_slots(self.client.slot_ads(), self.config.device_kinds)
        jobs = self._jobs(X.ACTIVE_MANAGED_JOBS)
        now_s = self.clock()
        queue = parse_queue(
            jobs.values(),
            cluster,
            now_s=now_s,
            replan_after_s=self.config.cycle.replan_after_s,
            parallel_may_double=self.config.condor.parallel_may_double,
        )
        self.jobs, self.queue = jobs, queue
        snapshot = build_snapshot(cluster, queue, jobs.values(), now_s)
        others: tuple[str, ...] = ()
        if self.config.coordination.dsn is not None:
            # Several planners, one per schedd: the other schedds' open
            # placements hold their devices here too.
            ads, notes = self.client.other_job_ads(X.ACTIVE_MANAGED_JOBS)
            foreign, unread = foreign_planned(
                (j for j in (read_job(v) for _, v in ads) if j is not None), cluster
            )
            snapshot = replace(snapshot, running=snapshot.running + foreign)
            others = tuple(notes) + unread
        snapshot, facts_notes = with_node_facts(
            snapshot,
            cluster,
            jobs.values(),
            now_s=now_s,
            max_age_s=self.config.cycle.node_facts_max_age_s,
        )
        return SourceResult(
            snapshot,
            queue.book.rejected,
            notes=cluster.warnings + queue.warnings + facts_notes + others,
            unusable=cluster.unusable,
        )

    def _jobs(self, constraint: str) -> dict[str, QueueJob]:
        jobs = (read_job(v) for v in self.client.job_ads(constraint))
        return local_lenders(j for j in jobs if j is not None)

    def job_key(self, job_id: str) -> str:
        """A job's claim key in the planners' engine (:func:`condor_addon.view.claim_key`)."""
        return claim_key(job_id, self.config.condor.schedd)

    # -- Editor ---------------------------------------------------------------------------

    def apply(
        self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool, fence: Fence | None = None
    ) -> ApplyReport:
        """Write ``plan`` (and hold ``rejected`` jobs); see :class:`coshare.ports.Editor`;
        ``fence`` before each transaction that places, withdraws or requeues (what it raises
        ends the writes there; the gate, ``CosharePlacedNode``, is written last).

        Raises:
            SchedulerUnavailable: the schedd cannot be reached to re-read the jobs.
        """
        fence = no_fence if fence is None else fence
        queue = self.queue
        if queue is None:
            raise SchedulerError("apply() needs a read() first")
        if not (
            plan.assignments or plan.unplaced or rejected or queue.book.to_close or plan.requeue
        ):
            return ApplyReport(dry_run=dry_run)
        now_jobs = self._jobs(X.MANAGED_JOBS)
        now = {i: current(q, self.jobs.get(i)) for i, q in now_jobs.items()}
        loans = Loans(
            self.config.condor.lend_slots,
            {q.id: q.global_id for q in self.jobs.values() if q.global_id},
            frozenset(i for i, q in now_jobs.items() if q.harvest_from is not None),
            frozenset(i for i, q in now_jobs.items() if q.lender),
        )
        edits = plan_edits(plan, queue.book, rejected, now, now_s=self.clock(), loans=loans)
        d = edits.decisions
        reasons = wait_reason_edits(
            plan, {i: q.wait_reason for i, q in now_jobs.items() if q.status == A.IDLE}
        )
        verb = "would hold" if self.config.condor.hold_invalid else "left idle"
        if dry_run:
            return ApplyReport(
                applied=tuple(w.job for w in d.writes),
                unchanged=d.unchanged,
                skipped=d.skipped,
                failed=d.failed,
                withdrawn=d.close,
                dry_run=True,
                rejected=tuple(JobOutcome(r.job, f"{verb}: {r.reason}") for r in d.refuse),
                noted=tuple(j for _, ids in reasons for j in ids),
                requeued=tuple(JobOutcome(u.job, u.reason) for u in plan.requeue),
            )
        requeued, not_requeued = self._requeue(plan, fence)
        batch = _Batch(self.client, now_jobs, fence)
        batch.failed += not_requeued
        closed = batch.close_gates([o.job for o in d.close])
        withdrawn = tuple(o for o in d.close if o.job in closed)
        blocked = gates_may_open(batch.started, batch.not_closed)
        if blocked is not None:
            return ApplyReport(
                unchanged=d.unchanged,
                failed=d.failed + tuple(batch.failed),
                withdrawn=withdrawn,
                skipped=d.skipped
                + tuple(batch.skipped)
                + tuple(JobOutcome(w.job, blocked) for w in d.writes if w.job in batch.alive),
                requeued=requeued,
            )
        self._write(batch, edits)
        if self.config.condor.hold_invalid:
            marked = batch.hold(dict(edits.holds))
        else:
            marked = [JobOutcome(r.job, f"left idle: {r.reason}") for r in d.refuse]
        return ApplyReport(
            applied=tuple(w.job for w in d.writes if w.job in batch.alive),
            unchanged=d.unchanged,
            skipped=d.skipped + tuple(batch.skipped),
            failed=d.failed + tuple(batch.failed),
            rejected=tuple(marked),
            withdrawn=withdrawn,
            noted=batch.note(reasons),
            requeued=requeued,
        )

    def _requeue(
        self, plan: Plan, fence: Fence
    ) -> tuple[tuple[JobOutcome, ...], tuple[JobOutcome, ...]]:
        """Send the borrowers of ``plan.requeue`` (their GPU job needs its cores back) back
        to idle, before anything is placed: their gate closed and their loan cleared
        (``CosharePlacedNode``, ``CoshareHarvestFrom`` undefined), why in
        ``CoshareWaitReason``, then vacated at once (``condor_vacate_job -fast``): the
        starter ends the job, its wrapper's END gives the cores back, and the next cycle
        plans it again. Never left running on cores its GPU job needs.

        Returns:
            the jobs sent back, with why; those the schedd refused, with its error.
        """
        requeued: list[JobOutcome] = []
        failed: list[JobOutcome] = []
        for u in plan.requeue:
            fence()
            try:
                self.client.edit_ids([u.job], A.PLACED_NODE, X.UNDEFINED)
                self.client.edit_ids([u.job], A.HARVEST_FROM, X.UNDEFINED)
                self.client.edit_ids(
                    [u.job], A.WAIT_REASON, X.literal(" ".join(f"requeued: {u.reason}".split()))
                )
            except (CoshareError, ValueError) as exc:
                failed.append(JobOutcome(u.job, f"not requeued: {exc}"))
                continue
            error = self._act("VacateFast", u.job)
            if error is not None:
                failed.append(JobOutcome(u.job, f"not requeued: {error}"))
                continue
            requeued.append(JobOutcome(u.job, u.reason))
        return tuple(requeued), tuple(failed)

    def _write(self, batch: _Batch, edits: Edits) -> None:
        """Steps 1-3 of :mod:`condor_addon.edits`: the node, which opens the gate, last (a gang's
        node list and devices before it)."""
        batch.edit_all(edits.placed, A.PLACED_AT, X.time_value(self.clock()))
        for record, ids in edits.trials:  # before the gate opens
            batch.edit_all(ids, A.TRIAL, X.literal(record))
        for devices, ids in edits.devices:
            batch.edit_all(ids, A.PLACED_DEVICES, X.devices_value(devices))
        for lender, ids in edits.harvest:  # lent cores (collocate), before the gate opens
            batch.edit_all(
                ids, A.HARVEST_FROM, X.UNDEFINED if lender is None else X.literal(lender)
            )
        for flag, ids in edits.lenders:
            batch.edit_all(ids, A.LENDER, "true" if flag else X.UNDEFINED)
        for names, ids in edits.gang_nodes:  # a gang's nodes, then its devices on each
            batch.edit_all(ids, A.PLACED_NODES, X.nodes_value(names))
        for per_node, ids in edits.gang_devices:
            batch.edit_all(ids, A.PLACED_NODE_DEVICES, X.node_devices_value(per_node))
        for node, ids in edits.nodes:
            batch.edit_all(ids, A.PLACED_NODE, X.node_value(node))

    # -- TrialControl -----------------------------------------------------------------------

    def trial_jobs(self) -> list[TrialJob]:
        """The jobs with a ``CoshareTrial`` record, as the last read saw them (a record that
        does not read is logged and left alone)."""
        found = []
        for q in self.jobs.values():
            if q.trial is None or q.placed_node is None:
                continue
            try:
                record = parse_trial(q.id, q.trial)
            except TrialRecordError as exc:
                log.warning("%s; left as it is", exc)
                continue
            try:
                program = parse_annotations(q.id, q.annotations).program
            except CoshareError:
                program = None
            found.append(
                TrialJob(
                    q.id,
                    q.placed_node,
                    program,
                    _TRIAL_PHASES.get(q.status, "ended"),
                    q.start_time_s,
                    record,
                )
            )
        return found

    def write_trial(self, job: str, record: TrialRecord) -> str | None:
        """Set the job's ``CoshareTrial``."""
        try:
            self.client.edit_ids([job], A.TRIAL, X.literal(format_trial(record)))
        except (CoshareError, ValueError) as exc:
            return str(exc)
        return None

    def suspend(self, job: str) -> str | None:
        """``condor_suspend``: the starter stops the job (SIGSTOP), its slot stays claimed.
        Done once the schedd says so (JobStatus 7): the action returns before the starter
        has acted, and a record written earlier would be contradicted by the next read."""
        return self._act("Suspend", job) or self._confirm(job, A.SUSPENDED, "suspended")

    def resume(self, job: str) -> str | None:
        """``condor_continue``, done once the schedd no longer says suspended."""
        return self._act("Continue", job) or self._confirm(
            job, A.SUSPENDED, "continued", leave=True
        )

    def _confirm(self, job: str, status: int, what: str, *, leave: bool = False) -> str | None:
        """Wait (:data:`CONFIRM_TIMEOUT_S` at most) until the job's JobStatus is ``status``
        (``leave``: is no longer); the error when it does not."""
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        seen: object = None
        while True:
            try:
                ads = self.client.job_ads(X.job_clause(job), ("JobStatus",))
            except CoshareError as exc:
                return str(exc)
            seen = ads[0].get("JobStatus") if ads else None
            if seen is None or (seen != status) == leave:
                return None
            if time.monotonic() >= deadline:
                return (
                    f"asked, but JobStatus is {A.job_status_name(seen)} after "
                    f"{CONFIRM_TIMEOUT_S:g} s; not {what} yet"
                )
            self.sleep(CONFIRM_POLL_S)

    def requeue(self, job: str, reason: str) -> str | None:
        """Close the job's gate (``CosharePlacedNode`` and ``CoshareTrial`` cleared), write
        why into ``CoshareWaitReason``, continue it, then vacate it at once
        (``condor_vacate_job -fast``): it is idle again, and the next cycle plans it. (The
        test pool's schedd vacates no suspended job, soft or fast: it stays suspended.)"""
        try:
            self.client.edit_ids(
                [job], A.WAIT_REASON, X.literal(f"trial: {' '.join(reason.split())}")
            )
            self.client.edit_ids([job], A.TRIAL, "undefined")
            self.client.edit_ids([job], A.PLACED_NODE, "undefined")
        except CoshareError as exc:
            return str(exc)
        error = self._act("Continue", job) or self._confirm(
            job, A.SUSPENDED, "continued", leave=True
        )
        if error is not None:
            return error
        return self._act("VacateFast", job) or self._confirm(job, A.IDLE, "idle")

    def node_job_id(self, job: str) -> str:
        """The id the job wrapper gave the job on its node: its GlobalJobId in id characters
        (:func:`condor_addon.view.node_job_id`); the queue id when the read has none."""
        q = self.jobs.get(job)
        return node_job_id(q.global_id) if q is not None and q.global_id else job

    def _act(self, action: str, job: str) -> str | None:
        try:
            self.client.act_where(action, X.job_clause(job))
        except CoshareError as exc:
            return str(exc)
        return None


class _Batch:
    """The writes of one apply: which jobs are still going, skipped or failed."""

    def __init__(self, client: CondorClient, jobs: Mapping[str, QueueJob], fence: Fence) -> None:
        self.client = client
        self.fence = fence
        self.alive: set[str] = set(jobs)
        self.skipped: list[JobOutcome] = []
        self.failed: list[JobOutcome] = []
        self.started: set[str] = set()
        self.not_closed: set[str] = set()

    def _drop_gone(self, ids: Sequence[str]) -> list[str]:
        """Re-read the queue; mark jobs no longer idle as skipped; return those still idle."""
        fresh = {
            j.id: j
            for j in (read_job(v) for v in self.client.job_ads(X.MANAGED_JOBS))
            if j is not None
        }
        keep: list[str] = []
        for job_id in ids:
            now = fresh.get(job_id)
            if now is not None and now.status == A.IDLE:
                keep.append(job_id)
                continue
            state = "left the queue" if now is None else f"is {A.job_status_name(now.status)}"
            self.skipped.append(JobOutcome(job_id, f"{state} while being placed; not written"))
            self.alive.discard(job_id)
            if now is not None and now.status not in (A.HELD, A.REMOVED, A.COMPLETED):
                self.started.add(job_id)
        return keep

    def close_gates(self, ids: Sequence[str]) -> set[str]:
        """Step 0: ``CosharePlacedNode = undefined`` on idle jobs only (a guarded edit), then
        confirmed: a job that is no longer idle is ``started`` (unless it was held or left),
        one whose edit failed is ``not_closed``.

        Returns:
            the jobs whose gate is now closed.
        """
        if not ids:
            return set()
        self.fence()
        try:
            edited = self.client.edit_where(X.idle_managed(ids), A.PLACED_NODE, X.UNDEFINED)
        except EditFailed as exc:
            for job_id in ids:
                self.failed.append(JobOutcome(job_id, f"placement not withdrawn: {exc}"))
                self.alive.discard(job_id)
            self.not_closed.update(ids)
            return set()
        if edited < len(ids):
            return set(self._drop_gone(ids))
        return set(ids)

    def edit_all(self, ids: Sequence[str], attribute: str, value: str) -> None:
        """One transaction for ``ids``; on failure, retry once without the jobs that left."""
        ids = [j for j in ids if j in self.alive]
        if not ids:
            return
        self.fence()  # may raise: then nothing more is written
        try:
            self.client.edit_ids(ids, attribute, value)
            return
        except EditFailed:
            ids = self._drop_gone(ids)
        try:
            self.client.edit_ids(ids, attribute, value)
        except EditFailed as exc:
            for job_id in ids:
                self.failed.append(JobOutcome(job_id, str(exc)))
                self.alive.discard(job_id)

    def note(self, reasons: Sequence[tuple[str | None, Sequence[str]]]) -> tuple[str, ...]:
        """Step 5: each group's wait reason, one guarded transaction per reason (idle jobs
        only). Informational: a failure is logged, never fails the cycle.

        Returns:
            the jobs whose reason was written or cleared.
        """
        noted: list[str] = []
        for text, ids in reasons:
            value = X.UNDEFINED if text is None else X.literal(text)
            try:
                self.client.edit_where(X.idle_managed(ids), A.WAIT_REASON, value)
            except EditFailed as exc:
                log.warning("wait reason of %d jobs not written: %s", len(ids), exc)
                continue
            noted += ids
        return tuple(noted)

    def hold(self, groups: Mapping[str, Sequence[str]]) -> list[JobOutcome]:
        """Hold each group of refused jobs with its reason (guarded: idle jobs only)."""
        outcomes: list[JobOutcome] = []
        for reason, ids in groups.items():
            try:
                self.client.hold_where(X.idle_managed(ids), reason)
            except EditFailed as exc:
                self.failed += [JobOutcome(j, f"could not hold ({exc}): {reason}") for j in ids]
                continue
            outcomes += [JobOutcome(j, f"held: {reason}") for j in ids]
        return outcomes


#: HTCondor's JobStatus as trial co-runs see it.
_TRIAL_PHASES: dict[int, JobPhase] = {
    A.IDLE: "pending",
    A.RUNNING: "running",
    A.TRANSFERRING_OUTPUT: "running",
    A.SUSPENDED: "suspended",
}
