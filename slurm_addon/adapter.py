"""The Slurm adapter: the cycle's Source and Editor over the Slurm command line.

::

    read():  sinfo --json, squeue --json --> build_view() --> snapshot + refused jobs
    apply(): the core's write protocol (coshare.cycle.protocol) with Slurm's verbs
             (slurm_addon.writer: scontrol hold/requeuehold/release, scontrol < lines,
             squeue --Format to confirm)

One object is both Source and Editor because the Editor compares each job with the state the
Source read. A job's gate is its hold; a gang is one Slurm job, all its nodes written in its
one update and released with it, so it is never half-placed.
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

from slurm_addon.client import SlurmClient
from slurm_addon.scheduling import read_scheduling, with_scheduling
from slurm_addon.trial_verbs import SlurmTrials
from slurm_addon.view import ClusterView, build_view
from slurm_addon.writer import SlurmWriter

#: Why Slurm does not offer what it does not.
WHY_NOT = {
    "probe_facts": "node.trial_requests reads HTCondor's schedds only; on Slurm the probe "
    "reaches the node as a step of the trial job: probe_via: step",
    "harvest": "slurm.lend_partition is not set, and Slurm starts no job on cores it has "
    "allocated to a job of another partition (deploy/slurm/slurm.conf.snippet has the "
    "partition)",
}


def open_adapter(config: Config) -> SlurmAdapter:
    """The adapter of ``coshare slurm`` for a configuration."""
    return SlurmAdapter(SlurmClient(config.slurm), config)


class SlurmAdapter(SlurmTrials):
    """Reads Slurm into snapshots and writes plans back (Source and Editor protocols).

    Args:
        client: runs the Slurm commands.
        config: the whole configuration (``slurm``, ``cycle`` and ``device_kinds``).
        clock: seconds since the epoch (placement times, replanning, aging).
    """

    @property
    def capabilities(self) -> Capabilities:
        """What the cycle may ask of Slurm. Trials: placements carry a trial's record, the
        trial verbs are Slurm's (:mod:`slurm_addon.trial_verbs`), the probe a step of the
        job. LLC ways: the Prolog makes each job's resctrl group (:mod:`slurm_addon.prolog`).
        Harvest: with a lending partition, Slurm starts a borrower there and the Prolog takes
        its cores out of the GPU job's cpuset first (:mod:`slurm_addon.node_hooks`). Job ids
        are unique in the cluster, across partitions and planners."""
        return Capabilities(
            trials=True,
            probe_step=True,
            llc_ways=True,
            harvest=self.config.slurm.lend_partition is not None,
            fenced_batches=True,
            global_job_ids=True,
            why_not=WHY_NOT,
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
        view = build_view(
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
        if view.snapshot.pending:
            # Slurm's own order and limits (slurm_addon.scheduling): read only when some job
            # waits for a placement, so an idle cluster costs no more than before.
            scheduling = read_scheduling(
                self.client,
                order=self.config.policy.order,
                nodes=len(nodes),
                cpus=sum(n.cpus for n in nodes),
            )
            snapshot, found = with_scheduling(view.snapshot, jobs, scheduling, self.clock())
            view = replace(view, snapshot=snapshot, notes=view.notes + found)
        self.view = view
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
        """Write a plan through the core's protocol (:mod:`coshare.cycle.protocol`) with
        Slurm's verbs (:mod:`slurm_addon.writer`); ``fence`` before each batch.

        Raises:
            SlurmControllerDown: slurmctld stopped answering; what was written is consistent
                and the next cycle completes it.
        """
        view = self.view
        if view is None:
            raise SchedulerError("apply() needs a read() first")
        return write_plan(
            SlurmWriter(self.client, self.config.slurm, view, self.clock()),
            plan,
            rejected,
            pending={j.id: j for j in view.snapshot.pending},
            to_close=view.to_close,
            dry_run=dry_run,
            fence=fence,
        )
