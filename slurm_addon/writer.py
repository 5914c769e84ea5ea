"""The write protocol's verbs as Slurm spells them (a
:class:`coshare.cycle.queue_writer.QueueWriter`).

::

    reread     squeue --Format of the involved jobs
    requeue    scontrol requeuehold 1,2,...
    close      scontrol hold 1,2,...; squeue --Format (confirm)
    refuse     scontrol update AdminComment=coshare-refused: ... (one job per call: the text
               quotes the user's annotations, so it travels as an argument, never as a line)
    reach      scontrol ping
    place      scontrol < lines (ReqNodeList + AdminComment, a gang's nodes and tasks in the
               same update; the batch's lines shared among a few scontrol processes that run
               at once, each line whole); squeue --Format (which are really written?);
               scontrol release of those only, in one call
    note       scontrol update AdminComment=coshare-waiting: ... (several processes at once)

A job's gate is its hold: coshare's jobs wait held and a placement releases them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor

from coshare.config import SlurmConfig
from coshare.cycle.queue_writer import Closed, Marked, WriteShape, Written
from coshare.errors import UnsafeValue
from coshare.ledger.book import Current, Write
from coshare.model import Unplaced
from coshare.ports import Fence, JobOutcome, Rejected

from slurm_addon.client import SlurmClient
from slurm_addon.edits import PlacementWrite, current, placement_write
from slurm_addon.placement import PlacementError, format_refusal, format_waiting
from slurm_addon.scontrol import chunks, update_argv
from slurm_addon.view import ClusterView

log = logging.getLogger(__name__)

#: Jobs per ``scontrol release``/``hold`` call (one argument of a few kB).
JOBS_PER_CALL = 500
#: scontrol processes that share one batch's update lines, at most, and the fewest lines
#: worth a process of their own. Each line is one RPC whose time is mostly waiting (the
#: credential, slurmctld's reply), so processes at once overlap the waits: 1,000 lines took
#: 3.9-4.9 s in one process and 1.0-1.3 s in eight on the 2-core machine (bench/slurm_apply.py).
PROCESSES_PER_BATCH = 4
MIN_LINES_PER_PROCESS = 16


class SlurmWriter:
    """Slurm's verbs for one apply, comparing each job with the read ``view``.

    Args:
        client: runs the Slurm commands.
        config: the ``slurm`` section.
        view: what the Source read.
        now_s: the time written into placements.
    """

    def __init__(
        self, client: SlurmClient, config: SlurmConfig, view: ClusterView, now_s: float
    ) -> None:
        self.client = client
        self.config = config
        self.view = view
        self.now_s = now_s
        self.shape = WriteShape(
            batch_size=config.update_batch,
            workers=config.workers,
            jobs_per_call=JOBS_PER_CALL,
            # Informational and one process per job (the text has spaces, which scontrol's
            # stdin language cannot carry): bounded per cycle, the rest follow next cycle.
            notes_per_cycle=config.update_batch,
            clears_notes=False,  # a placement replaces the waiting record
        )
        self.admin_comments: dict[str, str] = {}

    def reread(self, jobs: Collection[str]) -> dict[str, Current]:
        now = self.client.read_job_fields(sorted(jobs, key=_numeric))
        self.admin_comments = {i: j.admin_comment for i, j in now.items()}
        return {i: current(j, self.view.jobs.get(i)) for i, j in now.items()}

    def encode(self, write: Write) -> PlacementWrite:
        """``write`` as Slurm takes it.

        Raises:
            PlacementError, ValueError, UnsafeValue: it cannot be written.
        """
        return placement_write(write, self.now_s, self.config.lend_partition)

    def unwritable(self, write: Write) -> str | None:
        try:
            self.encode(write).line()
        except (PlacementError, ValueError, UnsafeValue) as exc:
            return str(exc)
        return None

    def requeue(self, jobs: Sequence[Unplaced]) -> dict[str, str]:
        """``scontrol requeuehold``: Slurm ends them (the Epilog's end of the job gives the
        GPU job its cores back) and they wait held, to be placed again."""
        return self.client.requeue_hold([u.job for u in jobs])

    def close(self, jobs: Sequence[str]) -> Closed:
        errors = self.client.hold(jobs)
        after = self.client.read_job_fields(jobs)
        started, not_closed = set(), set()
        for job_id in jobs:
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
        held = frozenset(j for j in jobs if j in after and after[j].held)
        return Closed(held, frozenset(started), frozenset(not_closed))

    def refusal_texts(self, refusals: Sequence[Rejected]) -> list[tuple[str, str]]:
        """``(job, AdminComment)`` of the refused jobs whose reason is not written yet (as
        the last re-read saw them)."""
        texts = [(r.job, format_refusal(r.reason)) for r in refusals]
        return [(job, text) for job, text in texts if self.admin_comments.get(job) != text]

    def refuse(self, refusals: Sequence[Rejected]) -> Marked:
        """The reason into the AdminComment (unless it is there already); the job stays
        held. A failed write is logged: the job stays held either way."""
        for job, text in self.refusal_texts(refusals):
            error = self.client.update(update_argv(job, text))
            if error is not None:
                log.warning("job %s: could not write its refusal: %s", job, error)
        return Marked(tuple(JobOutcome(r.job, f"held: {r.reason}") for r in refusals))

    def reach(self) -> None:
        self.client.ping()

    def place(self, batch: Sequence[Write], fence: Fence) -> Written:
        """One batch: its updates on the standard input of a few scontrol processes at once
        (:func:`shares`), then, once all have finished, a re-read of just these jobs, and one
        release of those whose placement is there and whose comment did not change."""
        writes = [self.encode(w) for w in batch]
        errors = self.client.run_scripts(shares([w.line() for w in writes]))
        now = self.client.read_job_fields([w.job for w in writes])
        seen = self.view.jobs
        applied: list[str] = []
        skipped: list[JobOutcome] = []
        failed: list[JobOutcome] = []
        release: list[str] = []
        for w in writes:
            job = now.get(w.job)
            if job is None or job.phase == "ended":
                skipped.append(JobOutcome(w.job, "ended while it was being placed"))
            elif job.admin_comment != w.admin_comment:
                detail = errors.get(w.job, "placement not written (no error given)")
                if job.phase != "pending":
                    detail = f"started before its placement was written ({detail})"
                failed.append(JobOutcome(w.job, detail))
            elif job.phase == "pending" and not w.confirmed(job.required_nodes):
                failed.append(JobOutcome(w.job, f"ReqNodeList is {job.required_nodes!r}"))
            elif w.nodes and w.job in errors:
                # A gang's update failed in part (its node count or tasks refused): not
                # released; held with its placement, it is planned again next cycle.
                failed.append(JobOutcome(w.job, f"placement not taken: {errors[w.job]}"))
            elif w.job in seen and job.comment != seen[w.job].comment:
                # Placed for annotations it no longer has: left held, planned again.
                skipped.append(
                    JobOutcome(w.job, "its comment changed while it was placed; planned again")
                )
            elif job.held:
                release.append(w.job)
            else:
                applied.append(w.job)  # was not held: Slurm may start it at once
        for chunk in chunks(release, JOBS_PER_CALL):
            refused = self.client.release(chunk)
            for job_id in chunk:
                if job_id in refused:
                    why = f"placed but not released ({refused[job_id]})"
                    failed.append(JobOutcome(job_id, why))
                else:
                    applied.append(job_id)
        return Written(tuple(applied), tuple(skipped), tuple(failed))

    def note(self, reasons: Sequence[tuple[str, str | None]]) -> tuple[str, ...]:
        """One update per job, several at once; a failure is logged."""

        def write(item: tuple[str, str | None]) -> str | None:
            job_id, text = item
            assert text is not None  # clears_notes is off
            error = self.client.update(update_argv(job_id, format_waiting(text)))
            if error is not None:
                log.warning("job %s: wait reason not written: %s", job_id, error)
                return None
            return job_id

        with ThreadPoolExecutor(max_workers=self.config.workers) as pool:
            return tuple(j for j in pool.map(write, reasons) if j is not None)


def shares(lines: Sequence[str]) -> list[list[str]]:
    """``lines`` in at most :data:`PROCESSES_PER_BATCH` contiguous shares of at least
    :data:`MIN_LINES_PER_PROCESS` lines (one share when there are fewer; none for no lines),
    each line whole."""
    count = max(1, min(PROCESSES_PER_BATCH, len(lines) // MIN_LINES_PER_PROCESS))
    size = -(-len(lines) // count) if lines else 1
    return list(chunks(lines, size))


def _numeric(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)
