"""The HTCondor adapter: the cycle's Source and Editor over the htcondor2 bindings.

::

    read():  the pool's slot ads and the schedd's managed jobs (condor_addon.source)
    apply(): the core's write protocol (coshare.cycle.protocol) with HTCondor's verbs
             (condor_addon.writer: guarded schedd transactions, CosharePlacedNode last)

One object is both Source and Editor because the Editor compares each job with the state the
Source read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from coshare.config import Config
from coshare.cycle.protocol import write_plan
from coshare.errors import SchedulerError
from coshare.model import Plan
from coshare.ports import ApplyReport, Capabilities, Fence, Rejected, SourceResult

from condor_addon.client import CondorClient, open_client
from condor_addon.source import read_pool
from condor_addon.trial_verbs import CondorTrials
from condor_addon.view import (
    QueueJob,
    QueueView,
    claim_key,
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
        """Take a snapshot of the pool and the schedd's managed jobs
        (:func:`condor_addon.source.read_pool`)."""
        read = read_pool(self.client, self.config, self.clock())
        self.jobs, self.queue = read.jobs, read.queue
        return read.result

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
