"""The write protocol's verbs as HTCondor spells them (a
:class:`coshare.cycle.queue_writer.QueueWriter`), over the schedd's transactions.

::

    reread     the schedd's managed jobs (all of them: one query)
    requeue    CosharePlacedNode, CoshareHarvestFrom undefined, why in CoshareWaitReason,
               then condor_vacate_job -fast (the wrapper's END gives the cores back)
    close      CosharePlacedNode = undefined on idle jobs only (a guarded edit); confirmed
    refuse     condor_hold with the reason, one action per reason (or left idle, with
               condor.hold_invalid off)
    place      the batch's transactions (condor_addon.edits), CosharePlacedNode last
    note       CoshareWaitReason, one guarded transaction per reason

A job's gate is ``CosharePlacedNode``: coshare's START expression admits a job only on the
node it names.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence

from coshare.config import CondorConfig
from coshare.cycle.queue_writer import Closed, Marked, WriteShape, Written
from coshare.errors import CoshareError
from coshare.ledger.book import Current, Write
from coshare.model import Unplaced
from coshare.ports import Fence, JobOutcome, Rejected

from condor_addon import attributes as A
from condor_addon import expressions as X
from condor_addon.client import CondorClient
from condor_addon.edits import Loans, hold_reason, transactions, write_problem
from condor_addon.errors import EditFailed
from condor_addon.source import managed_jobs
from condor_addon.view import QueueJob, current

log = logging.getLogger(__name__)


class CondorWriter:
    """HTCondor's verbs for one apply, comparing each job with the read's ``jobs``.

    Args:
        client: the bindings edge.
        config: the ``condor`` section.
        jobs: the managed jobs of the last read, by id.
        clock: wall-clock seconds (``CosharePlacedAt``).
        act: runs a job action (``VacateFast``) and returns its error, if any.
    """

    def __init__(
        self,
        client: CondorClient,
        config: CondorConfig,
        jobs: Mapping[str, QueueJob],
        clock: Callable[[], float],
        act: Callable[[str, str], str | None],
    ) -> None:
        self.client = client
        self.config = config
        self.jobs = jobs
        self.clock = clock
        self.act = act
        self.shape = WriteShape(refusal="held" if config.hold_invalid else "left idle")
        self.loans = Loans(config.lend_slots)

    def _managed(self) -> dict[str, QueueJob]:
        return managed_jobs(self.client, X.MANAGED_JOBS)

    def reread(self, jobs: Collection[str]) -> dict[str, Current]:
        now = self._managed()
        self.loans = Loans(
            self.config.lend_slots,
            {q.id: q.global_id for q in self.jobs.values() if q.global_id},
            frozenset(i for i, q in now.items() if q.harvest_from is not None),
            frozenset(i for i, q in now.items() if q.lender),
        )
        return {i: current(q, self.jobs.get(i)) for i, q in now.items()}

    def unwritable(self, write: Write) -> str | None:
        return write_problem(write)

    def requeue(self, jobs: Sequence[Unplaced]) -> dict[str, str]:
        """Each borrower's gate closed and loan cleared, why in ``CoshareWaitReason``, then
        vacated at once: never left running on cores its GPU job needs."""
        errors: dict[str, str] = {}
        for u in jobs:
            try:
                self.client.edit_ids([u.job], A.PLACED_NODE, X.UNDEFINED)
                self.client.edit_ids([u.job], A.HARVEST_FROM, X.UNDEFINED)
                why = " ".join(f"requeued: {u.reason}".split())
                self.client.edit_ids([u.job], A.WAIT_REASON, X.literal(why))
            except (CoshareError, ValueError) as exc:
                errors[u.job] = str(exc)
                continue
            error = self.act("VacateFast", u.job)
            if error is not None:
                errors[u.job] = error
        return errors

    def _drop_gone(self, ids: Sequence[str]) -> tuple[list[str], list[JobOutcome], set[str]]:
        """Re-read the queue: the jobs still idle, those that are not (with why), and those
        of them that started."""
        fresh = self._managed()
        keep: list[str] = []
        gone: list[JobOutcome] = []
        started: set[str] = set()
        for job_id in ids:
            now = fresh.get(job_id)
            if now is not None and now.status == A.IDLE:
                keep.append(job_id)
                continue
            state = "left the queue" if now is None else f"is {A.job_status_name(now.status)}"
            gone.append(JobOutcome(job_id, f"{state} while being placed; not written"))
            if now is not None and now.status not in (A.HELD, A.REMOVED, A.COMPLETED):
                started.add(job_id)
        return keep, gone, started

    def close(self, jobs: Sequence[str]) -> Closed:
        try:
            edited = self.client.edit_where(X.idle_managed(jobs), A.PLACED_NODE, X.UNDEFINED)
        except EditFailed as exc:
            failed = tuple(JobOutcome(j, f"placement not withdrawn: {exc}") for j in jobs)
            return Closed(not_closed=frozenset(jobs), failed=failed)
        if edited == len(jobs):
            return Closed(closed=frozenset(jobs))
        keep, gone, started = self._drop_gone(jobs)
        return Closed(frozenset(keep), frozenset(started), skipped=tuple(gone))

    def refuse(self, refusals: Sequence[Rejected]) -> Marked:
        if not self.config.hold_invalid:
            return Marked(tuple(JobOutcome(r.job, f"left idle: {r.reason}") for r in refusals))
        groups: dict[str, list[str]] = defaultdict(list)
        for r in refusals:
            groups[hold_reason(r.reason, r.job)].append(r.job)
        marked: list[JobOutcome] = []
        failed: list[JobOutcome] = []
        for reason, ids in groups.items():
            try:
                self.client.hold_where(X.idle_managed(ids), reason)
            except EditFailed as exc:
                failed += [JobOutcome(j, f"could not hold ({exc}): {reason}") for j in ids]
                continue
            marked += [JobOutcome(j, f"held: {reason}") for j in ids]
        return Marked(tuple(marked), tuple(failed))

    def reach(self) -> None:
        """Nothing to check: each transaction reports its own failure at once."""

    def place(self, batch: Sequence[Write], fence: Fence) -> Written:
        now_s = self.clock()  # the placement's time and its trial record's start
        t = transactions(batch, now_s=now_s, loans=self.loans)
        edits: list[tuple[Sequence[str], str, str]] = [(t.placed, A.PLACED_AT, X.time_value(now_s))]
        edits += [(ids, A.TRIAL, X.literal(record)) for record, ids in t.trials]
        edits += [(ids, A.PLACED_DEVICES, X.devices_value(d)) for d, ids in t.devices]
        edits += [
            (ids, A.HARVEST_FROM, X.UNDEFINED if g is None else X.literal(g))
            for g, ids in t.harvest
        ]
        edits += [(ids, A.LENDER, "true" if flag else X.UNDEFINED) for flag, ids in t.lenders]
        edits += [(ids, A.PLACED_NODES, X.nodes_value(n)) for n, ids in t.gang_nodes]
        edits += [
            (ids, A.PLACED_NODE_DEVICES, X.node_devices_value(d)) for d, ids in t.gang_devices
        ]
        edits += [(ids, A.PLACED_NODE, X.node_value(node)) for node, ids in t.nodes]  # the gate
        alive = {w.job for w in batch}
        skipped: list[JobOutcome] = []
        failed: list[JobOutcome] = []
        for i, (ids, attribute, value) in enumerate(edits):
            ids = [j for j in ids if j in alive]
            if not ids:
                continue
            if i > 0:
                fence()  # the protocol checked before the first; may raise: nothing more sent
            try:
                self.client.edit_ids(ids, attribute, value)
                continue
            except EditFailed:
                ids, gone, _ = self._drop_gone(ids)
                skipped += gone
                alive -= {o.job for o in gone}
            if not ids:
                continue
            try:
                self.client.edit_ids(ids, attribute, value)
            except EditFailed as exc:
                failed += [JobOutcome(j, str(exc)) for j in ids]
                alive -= set(ids)
        applied = tuple(w.job for w in batch if w.job in alive)
        return Written(applied, tuple(skipped), tuple(failed))

    def note(self, reasons: Sequence[tuple[str, str | None]]) -> tuple[str, ...]:
        """Each distinct reason in one guarded transaction (idle jobs only); a failure is
        logged."""
        groups: dict[str | None, list[str]] = defaultdict(list)
        for job, text in reasons:
            groups[text].append(job)
        noted: list[str] = []
        for text, ids in groups.items():
            value = X.UNDEFINED if text is None else X.literal(text)
            try:
                self.client.edit_where(X.idle_managed(ids), A.WAIT_REASON, value)
            except EditFailed as exc:
                log.warning("wait reason of %d jobs not written: %s", len(ids), exc)
                continue
            noted += ids
        return tuple(noted)
