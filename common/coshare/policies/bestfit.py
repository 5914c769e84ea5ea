"""The ``bestfit`` policy: the fragmentation benchmark's strongest simple peer.

BestFit as the Alibaba GPU-sharing benchmark defines it (Weng et al., ATC'23; restated in
``notes/fgd-fragmentation-benchmark.md``): each job, in scheduler order, goes to the node
that is left with the least

    0.5 * free cores / C  +  0.5 * free device share / D

after placing it, where ``C`` is the largest node's cores and ``D`` the most devices on one node
(128 cores and 8 GPUs on the Alibaba cluster, the benchmark's constants), or a ``scale``
given by the caller (so a snapshot of part of the cluster scores like the whole). A device's
free share is its free memory over its memory (for a GPU-sharing pod, the free part of the
GPU). Within the node the job takes the device with the least free memory that still holds it (a
``device_count`` > 1 job: the least free ones). Ties go to snapshot order, then device order;
the benchmark breaks node ties by a seeded random node order, which a caller gets by
shuffling the snapshot's nodes.

Like every policy it respects device memory, host cores and memory, and device threads in
``strict`` mode. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Plan, Snapshot, ThreadMode
from coshare.policies.base import ClusterState, finish, priority_key, screened
from coshare.policies.waiting import explain_waiting, never_fits

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BestFitPolicy:
    """Least leftover of host cores and device share, node by node (the benchmark's BestFit)."""

    threads: ThreadMode = "strict"
    scale: tuple[int, int] | None = None
    name: str = "bestfit"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place each pending job, in scheduler order, where it leaves the least room."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        unplaced = never_fits(snapshot, snapshot.pending)
        jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        scorer = _Scorer(state, self.scale)
        waiting = [job for job, may in screened(state, jobs) if not (may and scorer.place(job))]
        unplaced.update(explain_waiting(state, waiting))
        return finish(self.name, snapshot, state, unplaced)


class _Scorer:
    """The BestFit score over a :class:`ClusterState`, kept up to date as jobs are placed."""

    def __init__(self, state: ClusterState, scale: tuple[int, int] | None) -> None:
        self.state = state
        if scale is None:
            scale = (
                int(state.node_total_cpu.max(initial=0)),
                max((len(d) for d in state.node_devs), default=0),
            )
        self.cpu_norm = float(max(scale[0], 1))
        self.dev_norm = float(max(scale[1], 1))
        self.dev_size = np.maximum(state.dev_total_mem, 1).astype(np.float64)
        share = np.clip(state.dev_free_mem, 0, None) / self.dev_size
        self.share: Floats = np.bincount(
            state.dev_node, weights=share, minlength=len(state.nodes)
        ).astype(np.float64)

    def _placed(self, node: int) -> None:
        """Bring ``node``'s free device share up to date after a placement on it (summed in
        device order, as the first sum was, so the figure is the one a new sum would give)."""
        s = self.state
        total = 0.0
        for d in s.node_devs[node]:
            total += max(float(s.dev_free_mem[d]), 0.0) / float(self.dev_size[d])
        self.share[node] = total

    def _score(self, node_cpu_after: Floats, node_share_after: Floats) -> Floats:
        out: Floats = 0.5 * node_cpu_after / self.cpu_norm + 0.5 * node_share_after / self.dev_norm
        return out

    def place(self, job: Job) -> bool:
        """Place ``job`` at its best fit; ``False`` when it fits nowhere now."""
        s = self.state
        if not job.needs_device:
            ok = s.host_ok(job)
            if not ok.any():
                return False
            score = self._score(
                (s.node_free_cpu - job.total_cpu_milli).astype(np.float64), self.share
            )
            score = np.where(ok, score, np.inf)
            s.place(job, int(np.argmin(score)))
            return True
        ok = s.device_ok(job)
        if not ok.any():
            return False
        share = self.share
        cpu_after = (s.node_free_cpu - job.total_cpu_milli).astype(np.float64)
        if job.device_count == 1:
            cand = np.flatnonzero(ok)
            nodes = s.dev_node[cand]
            score = self._score(
                cpu_after[nodes], share[nodes] - job.device_memory_mib / self.dev_size[cand]
            )
            best = least(cand, score, s.dev_free_mem)
            node = int(s.dev_node[best])
            s.place(job, node, [best])
            self._placed(node)
            return True
        choice: tuple[float, int, list[int]] | None = None
        for n in s.nodes_with_devices(job, ok).tolist():
            devs = s.least_free_on(n, ok, job.device_count)
            after = share[n] - sum(job.device_memory_mib / self.dev_size[d] for d in devs)
            value = float(self._score(np.array([cpu_after[n]]), np.array([after]))[0])
            if choice is None or value < choice[0]:
                choice = (value, n, devs)
        if choice is None:
            return False
        s.place(job, choice[1], sorted(choice[2]))
        self._placed(choice[1])
        return True


def least(cand: npt.NDArray[np.int64], score: Floats, free: npt.NDArray[np.int64]) -> int:
    """The candidate device (``cand``, ascending) of least ``score``, then least ``free``
    memory, then the first: the order a sort by those keys puts first, found by narrowing
    the ties of each key in turn (a full sort of thousands of candidates per job would
    cost more than the rest of the placement)."""
    tied = cand[score == score.min()]
    if len(tied) > 1:
        left = free[tied]
        tied = tied[left == left.min()]
    return int(tied[0])
