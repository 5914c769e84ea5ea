"""The trial co-runs' verbs as Slurm spells them (:class:`coshare.ports.TrialControl`):
``scontrol suspend``/``resume``/``requeuehold``, the trial's record in the placement, and
the probe as a step of the job (``srun --jobid --overlap``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from coshare.errors import CommandFailed, CoshareError, UnsafeValue
from coshare.ledger.trials import (
    JobPhase,
    TrialJob,
    TrialRecord,
    TrialRecordError,
    format_trial,
    parse_trial,
)
from coshare.system.programs import CommandResult

from slurm_addon.client import SlurmClient
from slurm_addon.comment import is_annotated
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
from slurm_addon.scontrol import update_argv
from slurm_addon.view import ClusterView, declared_use

log = logging.getLogger(__name__)


class SlurmTrials:
    """The trial verbs of :class:`slurm_addon.adapter.SlurmAdapter`, on its client and its
    last read."""

    client: SlurmClient
    view: ClusterView | None

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
