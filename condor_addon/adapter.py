"""The HTCondor adapter: the cycle's Source and Editor over the htcondor2 bindings.

::

    read():  collector: every slot ad ---> parse_slots --> nodes, devices, claimed slots
             schedd: managed active jobs -> parse_queue --> the ledger: pending, placed, refused
                                             build_snapshot --> Snapshot
    apply(): the core's write protocol (coshare.cycle.protocol) with HTCondor's verbs
             (condor_addon.writer: guarded schedd transactions, CosharePlacedNode last)

Slots are read before jobs, so a job that starts in between is still counted (from its queue
entry, as running). One object is both Source and Editor because the Editor compares each
job with the state the Source read. :mod:`condor_addon.view` says where each fact comes from,
:mod:`condor_addon.edits` the order of a batch's transactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from coshare.config import Config
from coshare.cycle.protocol import write_plan
from coshare.errors import SchedulerError
from coshare.model import Plan
from coshare.ports import ApplyReport, Capabilities, Fence, Rejected, SourceResult

from condor_addon import expressions as X
from condor_addon.client import CondorClient, open_client
from condor_addon.trial_verbs import CondorTrials
from condor_addon.view import (
    QueueJob,
    QueueView,
    build_snapshot,
    claim_key,
    foreign_planned,
    local_lenders,
    parse_queue,
    parse_slots,
    read_job,
    with_node_facts,
)
from condor_addon.writer import CondorWriter

#: Why HTCondor does not offer what it does not.
WHY_NOT = {
    "llc_ways": "the HTCondor adapter records no LLC ways in a placement and its starter "
    "hooks make no resctrl group (only Slurm's Prolog does)",
    # condor_ssh_to_job needs sshd on every execute node and runs as the job's owner;
    # probe_via: facts reaches the node without either.
    "probe_step": "HTCondor runs a command in a running job only through condor_ssh_to_job "
    "(sshd on the execute node, as the job's owner, whom the node daemon does not let probe)",
    "harvest": "condor.lend_slots is not set: HTCondor starts no job on cores it believes "
    "taken unless the execute nodes have coshare's lend slots "
    "(deploy/condor/config.d/20-coshare-execute.conf)",
}


def open_adapter(config: Config) -> CondorAdapter:
    """The adapter of ``coshare condor`` for a configuration."""
    return CondorAdapter(open_client(config.condor), config)


class CondorAdapter(CondorTrials):
    """Reads one HTCondor pool and schedd and writes plans into it (Source and Editor).

    Args:
        client: the bindings edge.
        config: the whole configuration (``condor``, ``cycle`` and ``device_kinds``).
        clock: wall-clock seconds (the clock of ``QDate`` and ``CosharePlacedAt``).

    Attributes:
        jobs: the managed jobs of the last read, by id (the Editor's change check).
    """

    @property
    def capabilities(self) -> Capabilities:
        """What the cycle may ask of HTCondor. Trials: placements carry a trial's record
        (``CoshareTrial``), the verbs are ``condor_suspend``/``continue``/``vacate``
        (:mod:`condor_addon.trial_verbs`), and each execute node's daemon reads its jobs'
        ``measuring`` records from their schedd and answers in its facts (``probe_via:
        facts``, :mod:`condor_addon.node_trials`). Harvest: with lend slots, a borrower
        carries its GPU job (``CoshareHarvestFrom``), only a lend slot of its node admits it,
        and its wrapper has the node daemon take its cores out of the GPU job's cpuset
        before it runs. Claims in the planners' engine go by ``schedd#12.0``
        (:meth:`job_key`): the same key whichever schedd's planner reads the job."""
        return Capabilities(
            trials=True,
            probe_facts=True,
            harvest=self.config.condor.lend_slots,
            fenced_batches=True,
            global_job_ids=True,
            why_not=WHY_NOT,
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
        """Write ``plan`` (and hold ``rejected`` jobs) through the core's protocol
        (:mod:`coshare.cycle.protocol`) with HTCondor's verbs (:mod:`condor_addon.writer`);
        ``fence`` before each transaction that places, withdraws or requeues.

        Raises:
            SchedulerUnavailable: the schedd cannot be reached to re-read the jobs.
        """
        queue = self.queue
        if queue is None:
            raise SchedulerError("apply() needs a read() first")
        return write_plan(
            CondorWriter(self.client, self.config.condor, self.jobs, self.clock, self._act),
            plan,
            rejected,
            pending={j.id: j for j in queue.book.pending},
            to_close=queue.book.to_close,
            dry_run=dry_run,
            fence=fence,
        )
