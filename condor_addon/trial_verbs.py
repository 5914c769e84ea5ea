"""The trial co-runs' verbs as HTCondor spells them (:class:`coshare.ports.TrialControl`):
``condor_suspend``, ``condor_continue`` and ``condor_vacate_job -fast``, each confirmed
by the schedd, and the trial's record in ``CoshareTrial``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from coshare.errors import CoshareError
from coshare.ledger.annotations import parse_job as parse_annotations
from coshare.ledger.trials import (
    JobPhase,
    TrialJob,
    TrialRecord,
    TrialRecordError,
    format_trial,
    parse_trial,
)

from condor_addon import attributes as A
from condor_addon import expressions as X
from condor_addon.client import CondorClient
from condor_addon.view import QueueJob, node_job_id

log = logging.getLogger(__name__)
#: How often, and how long at most, a trial's suspend or continue is checked until the
#: schedd confirms it (the starter acts within seconds).
CONFIRM_POLL_S = 0.25
CONFIRM_TIMEOUT_S = 15.0


class CondorTrials:
    """The trial verbs of :class:`condor_addon.adapter.CondorAdapter`, on its client and
    its last read."""

    client: CondorClient
    jobs: dict[str, QueueJob]
    sleep: Callable[[float], None]

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


#: HTCondor's JobStatus as trial co-runs see it.
_TRIAL_PHASES: dict[int, JobPhase] = {
    A.IDLE: "pending",
    A.RUNNING: "running",
    A.TRANSFERRING_OUTPUT: "running",
    A.SUSPENDED: "suspended",
}
