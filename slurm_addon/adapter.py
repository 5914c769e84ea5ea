"""The Slurm adapter: the cycle's Source and Editor over the Slurm command line.

::

    read():  sinfo --json, squeue --json --> build_view() --> snapshot + refused jobs
    apply(): squeue --Format (what changed since the read?) --> plan_edits()
             --> scontrol hold        (open gates the plan does not keep: expired placements,
                                       jobs released by hand, refused jobs)
             --> squeue --Format      (confirm: if one of them started, stop here)
             --> scontrol update      (refusal messages, one job per call)
             --> per batch of placements, in several threads at once:
                   scontrol < lines      (ReqNodeList + AdminComment, one update per job; a
                                          gang's nodes, node count and tasks in that update)
                   squeue --Format       (which of them are really written?)
                   scontrol release      (only those, one call for the batch)
             --> scontrol update      (wait reasons that changed, at most update_batch per
                                       cycle, in several threads at once)

One object is both Source and Editor because the Editor compares each job with the state the
Source read. The order of the writes is what makes a crash at any point harmless: a job is
released only after its placement is confirmed, and only once every gate the plan withdrew
is confirmed closed; a cycle killed in between leaves each job held (the next cycle plans it
again) or placed and released. A gang is one Slurm job: all its nodes are written in its one
update and released with it, so it is never half-placed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

from coshare.config import Config
from coshare.errors import CommandFailed, CoshareError, SchedulerError, UnsafeValue
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
from coshare.system.programs import CommandResult

from slurm_addon.client import SlurmClient
from slurm_addon.comment import is_annotated
from slurm_addon.edits import PlacementWrite, plan_edits, wait_reason_updates
from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import (
    MAX_REFUSAL_CHARS,
    PlacementError,
    format_waiting,
    is_safe_token,
    parse_placement,
    trial_field,
    with_trial,
)
from slurm_addon.scontrol import chunks, update_argv, update_line
from slurm_addon.view import ClusterView, build_view, declared_use

log = logging.getLogger(__name__)

#: Jobs per ``scontrol release``/``hold`` call (one argument of a few kB).
JOBS_PER_CALL = 500


def open_adapter(config: Config) -> SlurmAdapter:
    """The adapter of ``coshare slurm`` for a configuration."""
    return SlurmAdapter(SlurmClient(config.slurm), config)


class SlurmAdapter:
    """Reads Slurm into snapshots and writes plans back (Source and Editor protocols).

    Args:
        client: runs the Slurm commands.
        config: the whole configuration (``slurm``, ``cycle`` and ``device_kinds``).
        clock: seconds since the epoch (placement times, replanning, aging).
    """

    #: The placement records each node's LLC ways (``ways=``) and the Prolog makes the job's
    #: resctrl group with them (:mod:`slurm_addon.prolog`): live cycles may apply ``sns``
    #: plans that allocate ways (:func:`coshare.cycle.run.ways_refusal`).
    #: Placements carry a trial co-run's record and the adapter offers the trial verbs
    #: (suspend, resume, requeue; :class:`coshare.ports.TrialControl`).
    runs_trials: ClassVar[bool] = True
    #: ``policy.membw.probe_via: facts`` is not offered: Slurm's node daemons read no trial
    #: requests from the queue (``node.trial_requests`` knows HTCondor's schedd only); the
    #: probe reaches a Slurm node as a step of the job instead (``probe_via: step``).
    probes_via_facts: ClassVar[bool] = False
    probe_facts_unsupported_reason: ClassVar[str] = (
        "node.trial_requests reads HTCondor's schedds only; on Slurm the probe reaches the "
        "node as a step of the trial job: probe_via: step"
    )
    writes_llc_ways: ClassVar[bool] = True
    #: Slurm's job ids are unique in the cluster, across partitions and planners: the
    #: engine's claims match another planner's claimed job to the same job read here
    #: (:func:`coshare.coord.claims.admit`).
    global_job_ids: ClassVar[bool] = True
    #: :meth:`apply` checks the planner lease's fence before each batch it sends
    #: (:class:`coshare.ports.BatchFencedEditor`).
    fences_batches: ClassVar[bool] = True

    @property
    def applies_harvest(self) -> bool:
        """Whether live cycles may place CPU-only jobs on running GPU jobs' idle cores
        (``collocate``; :func:`coshare.cycle.run.harvest_refusal`): with a lending partition
        configured, Slurm starts them there, the Prolog takes their cores out of the GPU
        job's cpuset first (:mod:`slurm_addon.node_hooks`), and requeues go through
        ``scontrol requeuehold``."""
        return self.config.slurm.lend_partition is not None

    #: Why not, when :attr:`applies_harvest` is false.
    harvest_unsupported_reason: ClassVar[str] = (
        "slurm.lend_partition is not set, and Slurm starts no job on cores it has allocated "
        "to a job of another partition (deploy/slurm/slurm.conf.snippet has the partition)"
    )

    def __init__(
        self, client: SlurmClient, config: Config, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.config = config
        self.clock = clock
        self.view: ClusterView | None = None

    # -- Source ---------------------------------------------------------------------------

    def read(self) -> SourceResult:
        """Take a snapshot (see :mod:`slurm_addon.view` for how each job is read).

        Raises:
            SlurmControllerDown: slurmctld did not answer, after the retries.
            SlurmOutputError: squeue or sinfo printed something unreadable.
        """
        notes: list[str] = []
        nodes = self.client.read_nodes(notes)
        jobs = self.client.read_jobs(notes)
        self.view = build_view(
            nodes,
            jobs,
            device_kinds=self.config.device_kinds,
            gres_name=self.config.slurm.gres_name,
            partition=self.config.slurm.partition,
            replan_after_s=self.config.cycle.replan_after_s,
            now_s=self.clock(),
            node_facts_max_age_s=self.config.cycle.node_facts_max_age_s,
            lend_partition=self.config.slurm.lend_partition,
            shared=self.config.coordination.dsn is not None,
        )
        return SourceResult(
            self.view.snapshot,
            self.view.rejected,
            self.view.waiting,
            tuple(notes) + self.view.notes,
            self.view.unusable,
        )

    # -- Editor ---------------------------------------------------------------------------

    def apply(
        self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool, fence: Fence | None = None
    ) -> ApplyReport:
        """Write a plan (see the module docstring for the order of the writes); ``fence``
        before each batch of requeues, holds and placements (what it raises ends the writes
        there, each batch sent complete).

        Raises:
            SlurmControllerDown: slurmctld stopped answering; what was written is consistent
                and the next cycle completes it.
        """
        fence = no_fence if fence is None else fence
        view = self.view
        if view is None:
            raise SchedulerError("apply() needs a read() first")
        involved = {a.job for a in plan.assignments} | {u.job for u in plan.unplaced}
        involved |= {r.job for r in rejected} | set(view.to_close)
        current = self.client.read_job_fields(sorted(involved, key=_numeric))
        edits = plan_edits(
            view,
            plan,
            rejected,
            current,
            now_s=self.clock(),
            lend_partition=self.config.slurm.lend_partition,
        )
        # Informational and one process per job (the text has spaces, which scontrol's
        # stdin language cannot carry): bounded per cycle, the rest follow next cycle.
        reasons = wait_reason_updates(plan, current)[: self.config.slurm.update_batch]
        if dry_run:
            return ApplyReport(
                applied=tuple(w.job for w in edits.writes),
                unchanged=edits.unchanged,
                skipped=edits.skipped,
                failed=edits.failed,
                rejected=edits.rejected,
                withdrawn=edits.close,
                dry_run=True,
                noted=tuple(j for j, _ in reasons),
                requeued=tuple(JobOutcome(u.job, u.reason) for u in plan.requeue),
            )
        requeued, not_requeued = self._requeue(plan, fence)
        withdrawn, blocked = self._close(edits.close, fence)
        if blocked is not None:
            return ApplyReport(
                unchanged=edits.unchanged,
                failed=edits.failed + not_requeued,
                withdrawn=withdrawn,
                requeued=requeued,
                skipped=edits.skipped + tuple(JobOutcome(w.job, blocked) for w in edits.writes),
            )
        for job_id, text in edits.refusals:
            error = self.client.update(update_argv(job_id, text))
            if error is not None:
                log.warning("job %s: could not write its refusal: %s", job_id, error)
        outcome = self._place(edits.writes, fence)
        return ApplyReport(
            applied=tuple(outcome.applied),
            unchanged=edits.unchanged,
            skipped=edits.skipped + tuple(outcome.skipped),
            failed=edits.failed + tuple(outcome.failed) + not_requeued,
            rejected=edits.rejected,
            withdrawn=withdrawn,
            noted=self._note(reasons),
            requeued=requeued,
        )

    def _requeue(
        self, plan: Plan, fence: Fence
    ) -> tuple[tuple[JobOutcome, ...], tuple[JobOutcome, ...]]:
        """Requeue the running jobs of ``plan.requeue`` (borrowers whose GPU job needs its
        cores back) with ``scontrol requeuehold``: Slurm ends them (the Epilog's end of the
        job gives the GPU job its cores back) and they wait held, to be placed again. Done
        first: the cores come back before anything new is placed.

        Returns:
            the jobs requeued, with why; those Slurm refused, with its error (the plan asks
            again next cycle while the load stays high).
        """
        requeued: list[JobOutcome] = []
        refused: dict[str, str] = {}
        for chunk in chunks([u.job for u in plan.requeue], JOBS_PER_CALL):
            fence()
            refused.update(self.client.requeue_hold(chunk))
        for u in plan.requeue:
            if u.job not in refused:
                requeued.append(JobOutcome(u.job, u.reason))
        failed = tuple(JobOutcome(j, f"not requeued: {e}") for j, e in refused.items())
        return tuple(requeued), failed

    def _note(self, reasons: Sequence[tuple[str, str]]) -> tuple[str, ...]:
        """Write wait reasons; a failure is logged, never fails the cycle (informational).

        Returns:
            the jobs whose reason was written.
        """

        def write(item: tuple[str, str]) -> str | None:
            job_id, text = item
            error = self.client.update(update_argv(job_id, text))
            if error is not None:
                log.warning("job %s: wait reason not written: %s", job_id, error)
                return None
            return job_id

        if not reasons:
            return ()
        with ThreadPoolExecutor(max_workers=self.config.slurm.workers) as pool:
            return tuple(j for j in pool.map(write, reasons) if j is not None)

    def _close(
        self, close: Sequence[JobOutcome], fence: Fence
    ) -> tuple[tuple[JobOutcome, ...], str | None]:
        """Hold the jobs whose gates the plan withdraws, and confirm it with a re-read.

        Returns:
            the jobs now held, and why nothing more may be written (``None``: go on).
        """
        if not close:
            return (), None
        ids = [o.job for o in close]
        errors: dict[str, str] = {}
        for chunk in chunks(ids, JOBS_PER_CALL):
            fence()
            errors.update(self.client.hold(chunk))
        after = self.client.read_job_fields(ids)
        started, not_closed = set(), set()
        for job_id in ids:
            job = after.get(job_id)
            if job is None or job.phase == "ended":
                continue  # gone: holds nothing any more
            if job.phase != "pending":
                started.add(job_id)
            elif not job.held:
                not_closed.add(job_id)
                log.warning(
                    "job %s could not be held: %s", job_id, errors.get(job_id, "no error given")
                )
        held = tuple(o for o in close if o.job in after and after[o.job].held)
        return held, gates_may_open(started, not_closed)

    def _place(self, writes: Sequence[PlacementWrite], fence: Fence) -> _Outcome:
        """Write, confirm and release placements, batch by batch, several batches at once."""
        outcome = _Outcome()
        batches: list[list[tuple[PlacementWrite, str]]] = [[]]
        for w in writes:
            try:
                line = update_line(
                    w.job,
                    w.node,
                    w.admin_comment,
                    nodes=w.nodes,
                    tasks=w.tasks,
                    tasks_per_node=w.tasks_per_node,
                    min_cpus_per_node=w.min_cpus_per_node,
                    partition=w.partition,
                )
            except UnsafeValue as exc:
                outcome.failed.append(JobOutcome(w.job, f"cannot be written safely: {exc}"))
                continue
            if len(batches[-1]) == self.config.slurm.update_batch:
                batches.append([])
            batches[-1].append((w, line))
        batches = [b for b in batches if b]
        if not batches:
            return outcome
        self.client.ping()  # a stopped controller would cost ~9 s per line, not one error
        with ThreadPoolExecutor(max_workers=self.config.slurm.workers) as pool:
            for part in pool.map(lambda b: self._place_batch(b, fence), batches):
                outcome.applied += part.applied
                outcome.skipped += part.skipped
                outcome.failed += part.failed
        return outcome

    def _place_batch(self, batch: Sequence[tuple[PlacementWrite, str]], fence: Fence) -> _Outcome:
        """One batch: its updates on scontrol's stdin, a re-read of just these jobs, and one
        release of those whose placement is there and whose comment did not change."""
        assert self.view is not None
        seen = self.view.jobs
        fence()  # may raise: then this batch sends nothing
        errors = self.client.run_script([line for _, line in batch])
        now = self.client.read_job_fields([w.job for w, _ in batch])
        outcome = _Outcome()
        release: list[str] = []
        for w, _ in batch:
            job = now.get(w.job)
            if job is None or job.phase == "ended":
                outcome.skipped.append(JobOutcome(w.job, "ended while it was being placed"))
            elif job.admin_comment != w.admin_comment:
                detail = errors.get(w.job, "placement not written (no error given)")
                if job.phase != "pending":
                    detail = f"started before its placement was written ({detail})"
                outcome.failed.append(JobOutcome(w.job, detail))
            elif job.phase == "pending" and not w.confirmed(job.required_nodes):
                outcome.failed.append(JobOutcome(w.job, f"ReqNodeList is {job.required_nodes!r}"))
            elif w.nodes and w.job in errors:
                # A gang's update failed in part (its node count or tasks refused): not
                # released; held with its placement, it is planned again next cycle.
                outcome.failed.append(JobOutcome(w.job, f"placement not taken: {errors[w.job]}"))
            elif w.job in seen and job.comment != seen[w.job].comment:
                # Placed for annotations it no longer has: left held, planned again.
                outcome.skipped.append(
                    JobOutcome(w.job, "its comment changed while it was placed; planned again")
                )
            elif job.held:
                release.append(w.job)
            else:
                outcome.applied.append(w.job)  # was not held: Slurm may start it at once
        for chunk in chunks(release, JOBS_PER_CALL):
            refused = self.client.release(chunk)
            for job_id in chunk:
                if job_id in refused:
                    outcome.failed.append(
                        JobOutcome(job_id, f"placed but not released ({refused[job_id]})")
                    )
                else:
                    outcome.applied.append(job_id)
        return outcome

    # -- TrialControl -----------------------------------------------------------------------

    def trial_jobs(self) -> list[TrialJob]:
        """The jobs whose placement carries a trial record, as the last read saw them (a
        record that does not read is logged and left alone)."""
        if self.view is None:
            return []
        found = []
        for job in self.view.jobs.values():
            text = trial_field(job.admin_comment) if is_annotated(job.comment) else None
            if text is None:
                continue
            try:
                record = parse_trial(job.id, text)
                placement = parse_placement(job.admin_comment)
            except (TrialRecordError, PlacementError) as exc:
                log.warning("%s; left as it is", exc)
                continue
            assert placement is not None
            found.append(
                TrialJob(
                    job.id,
                    placement.node,
                    declared_use(job)[0],
                    _TRIAL_PHASES.get(job.state, _phase(job)),
                    job.start_time_s or None,
                    record,
                )
            )
        return found

    def write_trial(self, job: str, record: TrialRecord) -> str | None:
        """Write the trial record into the job's placement (re-read first: only the field
        changes, whatever else the AdminComment holds)."""
        try:
            text = with_trial(self.client.admin_comment(job), format_trial(record))
            return self.client.update(update_argv(job, text))
        except (PlacementError, ValueError, UnsafeValue) as exc:
            return str(exc)

    def suspend(self, job: str) -> str | None:
        """``scontrol suspend``: Slurm stops the job (SIGSTOP); its suspended time does not
        count against its time limit."""
        return self._verb("suspend", job)

    def resume(self, job: str) -> str | None:
        """``scontrol resume``."""
        return self._verb("resume", job)

    def requeue(self, job: str, reason: str) -> str | None:
        """``scontrol requeuehold``: pending and held again (coshare releases a job it
        places), its placement replaced by the reason (a waiting record), so the next
        cycle plans it again."""
        error = self._verb("requeuehold", job)
        if error is not None:
            return error
        try:
            return self.client.update(
                update_argv(
                    job, format_waiting(f"trial: {' '.join(reason.split())}")[:MAX_REFUSAL_CHARS]
                )
            )
        except UnsafeValue as exc:
            return str(exc)

    def node_job_id(self, job: str) -> str:
        """A Slurm job's node daemon knows it by its job id."""
        return job

    def probe_step(
        self, node: str, job: str, argv: Sequence[str], timeout_s: float
    ) -> CommandResult:
        """A trial's probe on its node (``policy.membw.probe_via: step``;
        :class:`coshare.cycle.trials.ProbeStep`): ``argv`` as a step of the trial job."""
        if not is_safe_token(node) or not job.isdigit():
            raise CommandFailed(
                ["srun"],
                None,
                "",
                f"job {job} on node {node}: not a Slurm job id and node name to run a step with",
            )
        return self.client.step(job, node, argv, timeout_s)

    def _verb(self, verb: str, job: str) -> str | None:
        try:
            return self.client.job_verb(verb, job)
        except CoshareError as exc:
            return str(exc)


#: Slurm states of a started job, as trial co-runs see them.
_TRIAL_PHASES: dict[str, JobPhase] = {
    "SUSPENDED": "suspended",
    "RUNNING": "running",
    "COMPLETING": "ended",
}


def _phase(job: SlurmJob) -> JobPhase:
    return {"pending": "pending", "active": "running"}.get(job.phase, "ended")  # type: ignore[return-value]


@dataclass
class _Outcome:
    """What happened to the placements of one batch."""

    applied: list[str] = field(default_factory=list)
    skipped: list[JobOutcome] = field(default_factory=list)
    failed: list[JobOutcome] = field(default_factory=list)


def _numeric(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)
