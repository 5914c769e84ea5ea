"""The HTCondor Source: one collector query and one schedd query into a snapshot.

::

    collector: every slot ad ------> parse_slots --> nodes, devices, claimed slots
    schedd: managed active jobs ---> parse_queue --> pending, planned, refused
                                      build_snapshot --> Snapshot

Slots are read before jobs, so a job that starts in between is still counted (from its queue
entry, as running). See :mod:`condor_addon.ads` for where each fact comes from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from coshare.config import DeviceKind
from coshare.planner import SourceResult

from condor_addon import expressions as X
from condor_addon.ads import QueueJob, build_snapshot, parse_queue, parse_slots, read_job
from condor_addon.client import CondorClient


class CondorSource:
    """Reads one HTCondor pool and schedd (see :class:`coshare.planner.Source`).

    Args:
        client: the bindings edge.
        device_kinds: limits of device models that advertise no memory or threads.
        replan_after_s: a placed job that has not started after this long is planned again.
        clock: wall-clock seconds (the clock of ``QDate`` and ``CosharePlacedAt``).

    Attributes:
        jobs: the managed jobs of the last read, by id (the Editor's change check).
        warnings: what the last read found wrong with the pool's ads, for the admin.
    """

    def __init__(
        self,
        client: CondorClient,
        *,
        device_kinds: Mapping[str, DeviceKind],
        replan_after_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.device_kinds = device_kinds
        self.replan_after_s = replan_after_s
        self.clock = clock
        self.jobs: dict[str, QueueJob] = {}
        self.warnings: tuple[str, ...] = ()

    def read(self) -> SourceResult:
        """Take a snapshot of the pool and the schedd's managed jobs.

        Raises:
            SchedulerUnavailable: the collector or the schedd cannot be reached.
        """
        cluster = parse_slots(self.client.slot_ads(), self.device_kinds)
        jobs = [j for j in (read_job(v) for v in self.client.job_ads(X.ACTIVE_MANAGED_JOBS))
                if j is not None]  # fmt: skip
        now_s = self.clock()
        queue = parse_queue(jobs, cluster, now_s=now_s, replan_after_s=self.replan_after_s)
        self.jobs = {j.id: j for j in jobs}
        self.warnings = cluster.warnings + queue.warnings
        return SourceResult(build_snapshot(cluster, queue, jobs, now_s), queue.rejected)
