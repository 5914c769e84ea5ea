"""The ``random`` policy: share devices, but pick jobs in random order.

The paper's MCC (MPSS + Condor + COSMIC): sharing is allowed and limits are respected, but the
cluster level is unaware of which jobs pair well: jobs are taken in a seeded random order and
each goes to the first device (in snapshot order) where it fits. In ``strict`` thread mode the
declared threads on a device stay within its hardware threads; in ``soft`` mode only memory
bounds sharing and the node's offload gate serializes offloads that would oversubscribe.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coshare.model import Plan, Snapshot, ThreadMode
from coshare.policies.base import ClusterState, finish, place_in_order
from coshare.policies.waiting import explain_waiting, never_fits


@dataclass(frozen=True)
class RandomPolicy:
    """Random order, first fit, sharing allowed (MCC)."""

    seed: int = 0
    threads: ThreadMode = "strict"
    name: str = "random"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Shuffle the pending jobs with the seed and place each on the first device with room."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        unplaced = never_fits(snapshot, snapshot.pending)
        order = sorted((j for j in snapshot.pending if j.id not in unplaced), key=lambda j: j.id)
        random.Random(self.seed).shuffle(order)
        waiting = place_in_order(state, order, idle_only=False)
        unplaced.update(explain_waiting(state, waiting))
        return finish(self.name, snapshot, state, unplaced)
