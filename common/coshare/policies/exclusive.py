"""The ``exclusive`` policy: one job per device, as clusters do today.

This is the paper's MC baseline (MPSS + Condor) and Spread-n-Share's CE: jobs are taken in
scheduler order (priority, then age) and each gets the first idle device it fits, for its
whole life. A CPU-only job gets a node nobody else uses. Nothing is shared, so nothing can be
oversubscribed; devices sit idle between a job's offloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from coshare.model import Plan, Snapshot
from coshare.policies.base import ClusterState, finish, place_in_order, priority_key
from coshare.policies.waiting import explain_waiting, never_fits


@dataclass(frozen=True)
class ExclusivePolicy:
    """One job per device (MC / CE)."""

    name: str = "exclusive"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Give each job, in scheduler order, the first idle device (or node) it fits."""
        state = ClusterState(snapshot, strict_threads=True)
        unplaced = never_fits(snapshot, snapshot.pending)
        candidates = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        waiting = place_in_order(state, candidates, idle_only=True)
        unplaced.update(explain_waiting(state, waiting, idle_only=True))
        return finish(self.name, snapshot, state, unplaced)
