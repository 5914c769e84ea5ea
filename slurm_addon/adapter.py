"""The Slurm adapter: the cycle's Source and Editor over the Slurm command line.

::

    read():  sinfo --json, squeue --json --> build_view() --> snapshot + refused jobs
    apply(): squeue --json (again: what changed since the read?) --> plan_edits()
             --> scontrol hold      (expired placements, unplaced jobs that are not held)
             --> scontrol update    (refusal messages, one job per call)
             --> scontrol < lines   (placements: ReqNodeList + AdminComment, batched,
                                     several scontrol processes at once)
             --> squeue --json      (which placements are really written?)
             --> scontrol release   (only those, many jobs per call)

One object is both Source and Editor because the Editor compares each job with the state the
Source read. The order of the writes is what makes a crash at any point harmless: a job is
released only after its placement is confirmed, so a cycle killed in between leaves it held
with its placement, and the next cycle simply plans it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from coshare.config import Config
from coshare.errors import SchedulerError
from coshare.model import Plan
from coshare.planner import ApplyReport, JobOutcome, Rejected, SourceResult

from slurm_addon.client import SlurmClient
from slurm_addon.edits import Edits, PlacementWrite, plan_edits
from slurm_addon.jobs import SlurmJob
from slurm_addon.scontrol import UnsafeValue, chunks, update_argv, update_line
from slurm_addon.view import ClusterView, build_view

log = logging.getLogger(__name__)

#: Jobs per ``scontrol release``/``hold`` call (one argument of a few kB).
JOBS_PER_CALL = 500


@dataclass(frozen=True)
class Held:
    """A job this apply held, and why."""

    job: str
    reason: str


class SlurmAdapter:
    """Reads Slurm into snapshots and writes plans back (Source and Editor protocols).

    Args:
        client: runs the Slurm commands.
        config: the whole configuration (``slurm``, ``cycle`` and ``device_kinds``).
        clock: seconds since the epoch (placement times, replanning, aging).
    """

    def __init__(
        self, client: SlurmClient, config: Config, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.config = config
        self.clock = clock
        self.view: ClusterView | None = None
        self.held: tuple[Held, ...] = ()

    # -- Source ---------------------------------------------------------------------------

    def read(self) -> SourceResult:
        """Take a snapshot (see :mod:`slurm_addon.view` for how each job is read).

        Raises:
            SlurmControllerDown: slurmctld did not answer, after the retries.
            SlurmOutputError: squeue or sinfo printed something unreadable.
        """
        nodes = self.client.read_nodes()
        jobs = self.client.read_jobs()
        self.view = build_view(
            nodes,
            jobs,
            device_kinds=self.config.device_kinds,
            gres_name=self.config.slurm.gres_name,
            partition=self.config.slurm.partition,
            replan_after_s=self.config.cycle.replan_after_s,
            now_s=self.clock(),
        )
        for note in self.view.notes:
            log.warning("%s", note)
        return SourceResult(self.view.snapshot, self.view.rejected)

    # -- Editor ---------------------------------------------------------------------------

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        """Write a plan (see the module docstring for the order of the writes).

        Raises:
            SlurmControllerDown: slurmctld stopped answering; what was written is consistent
                and the next cycle completes it.
        """
        if self.view is None:
            raise SchedulerError("apply() needs a read() first")
        current = {j.id: j for j in self.client.read_jobs()}
        edits = plan_edits(self.view, plan, rejected, current, now_s=self.clock())
        holds = self._hold_reasons(edits)
        if dry_run:
            self.held = holds
            return ApplyReport(
                applied=tuple(w.job for w in edits.writes),
                unchanged=edits.unchanged,
                skipped=edits.skipped,
                failed=edits.failed,
                rejected=edits.rejected,
                dry_run=True,
            )
        self.held = self._hold([h.job for h in holds], holds)
        failed = list(edits.failed)
        for job_id, text in edits.refusals:
            error = self.client.update(update_argv(job_id, text))
            if error is not None:
                log.warning("job %s: could not write its refusal: %s", job_id, error)
        write_errors = self._write(edits.writes, failed)
        confirmed, skipped = self._confirm(edits.writes, write_errors, failed)
        to_release = [w.job for w in confirmed if w.release]
        released_failed = self._release(to_release)
        for job_id, error in released_failed.items():
            failed.append(JobOutcome(job_id, f"placed but not released ({error}); planned again"))
        applied = [w.job for w in confirmed if w.job not in released_failed]
        return ApplyReport(
            applied=tuple(applied),
            unchanged=edits.unchanged,
            skipped=edits.skipped + tuple(skipped),
            failed=tuple(failed),
            rejected=edits.rejected,
            dry_run=False,
        )

    def _hold_reasons(self, edits: Edits) -> tuple[Held, ...]:
        view = self.view
        assert view is not None
        refused = {o.job for o in edits.rejected}
        reasons = []
        for job_id in edits.holds:
            if job_id in view.expired:
                why = "placed but not started in time (or its node cannot take it): planned again"
            elif job_id in refused:
                why = "refused for its annotations"
            else:
                why = "not held and not placed this cycle"
            reasons.append(Held(job_id, why))
        return tuple(reasons)

    def _hold(self, job_ids: Sequence[str], reasons: Sequence[Held]) -> tuple[Held, ...]:
        errors: dict[str, str] = {}
        for chunk in chunks(job_ids, JOBS_PER_CALL):
            errors.update(self.client.hold(chunk))
        for job_id, error in errors.items():
            log.info("job %s could not be held: %s", job_id, error)
        return tuple(h for h in reasons if h.job not in errors)

    def _write(self, writes: Sequence[PlacementWrite], failed: list[JobOutcome]) -> dict[str, str]:
        """Write placements in batches, several scontrol processes at once; returns the error
        line of each job that reported one."""
        lines: list[tuple[str, str]] = []
        for w in writes:
            try:
                lines.append((w.job, update_line(w.job, w.node, w.admin_comment)))
            except UnsafeValue as exc:
                failed.append(JobOutcome(w.job, f"cannot be written safely: {exc}"))
        batches = [
            [line for _, line in chunk]
            for chunk in _chunked(lines, self.config.slurm.update_batch)
        ]
        errors: dict[str, str] = {}
        if not batches:
            return errors
        with ThreadPoolExecutor(max_workers=self.config.slurm.workers) as pool:
            for result in pool.map(self.client.run_script, batches):
                errors.update(result)
        return errors

    def _confirm(
        self,
        writes: Sequence[PlacementWrite],
        errors: dict[str, str],
        failed: list[JobOutcome],
    ) -> tuple[list[PlacementWrite], list[JobOutcome]]:
        """Re-read the queue: which placements are really there. Only those are released."""
        if not writes:
            return [], []
        now = {j.id: j for j in self.client.read_jobs()}
        confirmed: list[PlacementWrite] = []
        skipped: list[JobOutcome] = []
        already_failed = {o.job for o in failed}
        for w in writes:
            if w.job in already_failed:
                continue
            job: SlurmJob | None = now.get(w.job)
            if job is not None and job.admin_comment == w.admin_comment:
                if job.phase == "pending" and job.required_nodes == w.node:
                    confirmed.append(w)
                elif job.phase != "pending":  # it was not held and Slurm started it at once
                    confirmed.append(replace(w, release=False))
                else:
                    failed.append(JobOutcome(w.job, f"ReqNodeList is {job.required_nodes!r}"))
            elif job is None or job.phase != "pending":
                skipped.append(JobOutcome(w.job, "ended or started while it was being placed"))
            else:
                failed.append(
                    JobOutcome(w.job, errors.get(w.job, "placement not written (no error given)"))
                )
        return confirmed, skipped

    def _release(self, job_ids: Sequence[str]) -> dict[str, str]:
        errors: dict[str, str] = {}
        for chunk in chunks(job_ids, JOBS_PER_CALL):
            errors.update(self.client.release(chunk))
        return errors


def _chunked(items: Sequence[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
