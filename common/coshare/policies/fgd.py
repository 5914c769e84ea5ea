"""The ``fgd`` policy: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

The strongest peer of the Alibaba GPU-sharing benchmark, as restated from the authors'
simulator in ``notes/fgd-fragmentation-benchmark.md``:

- **Target workload.** Jobs are counted by shape (host cores, device share per device, device
  count); the most frequent shapes covering 95% of the jobs are kept, weighted by their counts.
  A caller that knows the workload (the benchmark: the whole pod list) passes it in; otherwise
  it is taken from the snapshot's pending and running jobs.
- **Fragment** of node ``n`` for shape ``m``, with ``R_n`` the node's total free device share:
  ``R_n`` if the shape needs no device or cannot run on ``n`` at all (too few cores, or fewer
  than ``k`` devices with enough free); otherwise the free amounts of the devices whose free
  part is smaller than the shape's request.
- **Node fragmentation** ``F_n = sum_m p_m * fragment(n, m)``.
- **Placing a job**: over every node that can take it (and, for one-device jobs, every device
  there that fits), the best score of the decrease ``F(before) - F(after)``. The authors'
  simulator scores it as Kubernetes score plugins must, an integer from 0 to 100:
  ``int(100 * sigmoid(decrease / one device))``, with ``F`` over the shapes' frequencies
  (summing to 1) and one device = 1000 milli-GPU; coshare does the same, so nodes whose
  decreases differ by a few percent of a device tie. ``exact=True`` takes the exact largest
  decrease instead. Ties go to snapshot order, then device order (the benchmark breaks them
  with a seeded random node order: shuffle the snapshot's nodes). A multi-device job takes
  the least free devices that fit on its node.

The device share is device memory (for the Alibaba mapping, GPU milli; for a Xeon Phi, MiB).
Fragmentation is summed with integer counts as weights, so it is exact; the integer score
divides by their total. Jobs are
placed in scheduler order, one at a time, each seeing the ones before. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Plan, Snapshot, ThreadMode
from coshare.policies.base import (
    ClusterState,
    explain_waiting,
    finish,
    never_fits,
    priority_key,
)

Ints = npt.NDArray[np.int64]

Shape = tuple[int, int, int]
"""(host cpu_milli of all processes, device memory per device, device count; 0 for CPU jobs)."""

S = TypeVar("S", bound=tuple[int, ...])

#: The share of jobs the kept shapes cover (the benchmark's 95%).
COVERAGE = 0.95

#: Where the sigmoid of the score is clipped: its integer value is 0 or 100 beyond +-50.
_SIGMOID_CLIP = 50.0


def job_shape(job: Job) -> Shape:
    """The shape FGD counts a job by."""
    if not job.needs_device:
        return (job.total_cpu_milli, 0, 0)
    return (job.total_cpu_milli, job.device_memory_mib, job.device_count)


def target_workload(
    shapes: Iterable[S], coverage: float = COVERAGE, limit: int | None = None
) -> tuple[tuple[S, int], ...]:
    """The most frequent shapes, with their counts, until they cover ``coverage`` of all (and
    at most ``limit`` of them).

    Ties in frequency go to the smaller shape, so the result is deterministic.
    """
    counts = Counter(shapes)
    total = sum(counts.values())
    kept: list[tuple[S, int]] = []
    covered = 0
    for shape, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if (limit is not None and len(kept) >= limit) or (total and covered >= coverage * total):
            break
        kept.append((shape, count))
        covered += count
    return tuple(kept)


def snapshot_workload(snapshot: Snapshot) -> tuple[tuple[Shape, int], ...]:
    """The target workload seen in a snapshot: its pending and running jobs."""
    shapes = [job_shape(j) for j in snapshot.pending]
    shapes += [(r.cpu_milli, r.device_memory_mib if r.devices else 0, len(r.devices))
               for r in snapshot.running]  # fmt: skip
    return target_workload(shapes)


@dataclass(frozen=True)
class FgdPolicy:
    """Place each job where it grows the expected fragmentation least (FGD)."""

    threads: ThreadMode = "strict"
    workload: tuple[tuple[Shape, int], ...] | None = None
    exact: bool = False
    name: str = "fgd"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place the pending jobs one by one, in scheduler order, by fragmentation gradient."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        unplaced = never_fits(snapshot, snapshot.pending)
        jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        workload = self.workload if self.workload is not None else snapshot_workload(snapshot)
        frag = _Fragmentation(state, workload, self.exact)
        waiting = [job for job in jobs if not frag.place(job)]
        unplaced.update(explain_waiting(state, waiting))
        return finish(self.name, snapshot, state, unplaced)


class _Fragmentation:
    """Per-node fragmentation of a :class:`ClusterState`, updated as jobs are placed.

    Devices sit in a node x slot matrix (a free amount of ``-1`` where a node has fewer
    devices). For every
    node and kept shape it holds how many devices could take one share of the shape
    (``count``) and the free amounts of the devices that could not (``small``).
    """

    def __init__(self, state: ClusterState, workload: tuple[tuple[Shape, int], ...],
                 exact: bool) -> None:  # fmt: skip
        self.state = state
        self.exact = exact
        self.total = max(sum(w for _, w in workload), 1)
        n = len(state.nodes)
        width = max((len(d) for d in state.node_devs), default=0)
        # slot -> global device index; missing slots point one past the last device
        self.slot = np.full((n, max(width, 1)), state.device_count, dtype=np.int64)
        for i, devs in enumerate(state.node_devs):
            self.slot[i, : len(devs)] = devs
        self.valid = self.slot < state.device_count
        self.cpu_m = np.array([s[0] for s, _ in workload], dtype=np.int64)
        self.dev_m = np.array([s[1] for s, _ in workload], dtype=np.int64)
        self.k_m = np.array([s[2] for s, _ in workload], dtype=np.int64)
        self.w_m = np.array([w for _, w in workload], dtype=np.int64)
        self.count = np.zeros((n, len(workload)), dtype=np.int64)
        self.small = np.zeros((n, len(workload)), dtype=np.int64)
        self.free_total = np.zeros(n, dtype=np.int64)
        self.frag = np.zeros(n, dtype=np.int64)
        self._refresh(np.arange(n))

    def _free(self, rows: Ints) -> Ints:
        free = np.append(np.clip(self.state.dev_free_mem, 0, None), -1)[self.slot[rows]]
        out: Ints = free
        return out

    def _refresh(self, rows: Ints) -> None:
        free = self._free(rows)
        fits = free[:, :, None] >= self.dev_m[None, None, :]
        self.count[rows] = fits.sum(axis=1)
        self.small[rows] = (np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0)).sum(1)
        self.free_total[rows] = np.clip(free, 0, None).sum(axis=1)
        self.frag[rows] = self._node_frag(
            self.state.node_free_cpu[rows],
            self.count[rows],
            self.small[rows],
            self.free_total[rows],
        )

    def _node_frag(self, cpu: Ints, count: Ints, small: Ints, free_total: Ints) -> Ints:
        """F for rows of (free cores, per-shape counts, per-shape small sums, total free)."""
        runs = (cpu[:, None] >= self.cpu_m[None, :]) & (count >= self.k_m[None, :])
        runs &= self.k_m[None, :] > 0
        frag_m = np.where(runs, small, free_total[:, None])
        out: Ints = frag_m @ self.w_m
        return out

    def place(self, job: Job) -> bool:
        """Place ``job`` where fragmentation grows least; ``False`` when it fits nowhere now."""
        s = self.state
        if not job.needs_device:
            nodes = np.flatnonzero(s.host_ok(job))
            if len(nodes) == 0:
                return False
            after = self._node_frag(
                s.node_free_cpu[nodes] - job.total_cpu_milli,
                self.count[nodes],
                self.small[nodes],
                self.free_total[nodes],
            )
            scale = np.array([max((int(s.dev_total_mem[d]) for d in s.node_devs[n]), default=1)
                              for n in nodes.tolist()], dtype=np.float64)  # fmt: skip
            best = int(nodes[self._best(self.frag[nodes] - after, scale)])
            s.place(job, best)
            self._refresh(np.array([best]))
            return True
        ok = s.device_ok(job)
        if not ok.any():
            return False
        if job.device_count == 1:
            node, device = self._best_single(job, np.flatnonzero(ok))
            s.place(job, node, [device])
        else:
            chosen = self._best_multi(job, ok)
            if chosen is None:
                return False
            node, devices = chosen
            s.place(job, node, devices)
        self._refresh(np.array([node]))
        return True

    def _best_single(self, job: Job, cand: Ints) -> tuple[int, int]:
        s = self.state
        cand = distinct_moves(s, cand)
        nodes, _, count, small = single_device_moves(s, self.dev_m, self.count, self.small,
                                                     job, cand)  # fmt: skip
        after = self._node_frag(s.node_free_cpu[nodes] - job.total_cpu_milli, count, small,
                                self.free_total[nodes] - job.device_memory_mib)  # fmt: skip
        best = self._best(self.frag[nodes] - after, s.dev_total_mem[cand].astype(np.float64))
        return int(nodes[best]), int(cand[best])

    def _best(self, decrease: Ints, scale: npt.NDArray[np.float64]) -> int:
        """Index of the best candidate; the first of equals (snapshot, then device order)."""
        if self.exact:
            return int(np.argmax(decrease))
        return int(np.argmax(self._score(decrease, scale)))

    def _score(self, decrease: Ints, scale: npt.NDArray[np.float64]) -> Ints:
        """The reference's integer score: ``int(100 * sigmoid(decrease / one device))``."""
        x = decrease / self.total / np.maximum(scale, 1.0)
        # exp overflows past |x| ~ 709 (a node's devices of very different sizes: issue 11);
        # the integer score is already 0 or 100 from |x| = 50, so clipping changes no score.
        x = np.clip(x, -_SIGMOID_CLIP, _SIGMOID_CLIP)
        out: Ints = (100.0 / (1.0 + np.exp(-x))).astype(np.int64)
        return out

    def _best_multi(self, job: Job, ok: npt.NDArray[np.bool_]) -> tuple[int, list[int]] | None:
        s = self.state
        best: tuple[float, int, list[int]] | None = None
        for n in s.nodes_with_devices(job, ok).tolist():
            devs = s.least_free_on(n, ok, job.device_count)
            free = self._free(np.array([n]))
            for d in devs:
                free[0, self.state.node_devs[n].index(d)] -= job.device_memory_mib
            fits = free[:, :, None] >= self.dev_m[None, None, :]
            small = np.where(~fits & (free[:, :, None] >= 0), free[:, :, None], 0).sum(1)
            after = self._node_frag(s.node_free_cpu[[n]] - job.total_cpu_milli, fits.sum(1),
                                    small, np.clip(free, 0, None).sum(1))  # fmt: skip
            decrease = np.array([self.frag[n] - after[0]])
            scale = np.array([float(s.dev_total_mem[devs[0]])])
            value = float(decrease[0] if self.exact else self._score(decrease, scale)[0])
            if best is None or value > best[0]:
                best = (value, n, sorted(devs))
        return None if best is None else (best[1], best[2])


#: Fewer candidates than this are scored as they are (sorting them would cost more).
DISTINCT_FROM = 64


def distinct_moves(state: ClusterState, cand: Ints) -> Ints:
    """The candidate devices of a one-device job, less those that would score the same as one
    before them: a move is scored by its node and the device's free and total memory alone
    (:func:`single_device_moves`), and ties go to the first device, so of the devices of one
    node with the same free and total memory only the first can be chosen. A node of 1,024
    idle devices is then one candidate, not 1,024 (issue 11: 64 such nodes and 2,000 jobs,
    a 5 MB snapshot within every bound, planned for minutes). ``cand`` is in ascending order
    and so is the result; in exact arithmetic the choice is the one over all of ``cand``
    (sharepack's potential is a matrix product, whose rounding can differ with a row's place
    in the batch, so two equal moves may tie differently: either is as good)."""
    if len(cand) < DISTINCT_FROM:
        return cand
    nodes, total = state.dev_node[cand], state.dev_total_mem[cand]
    if len(cand) < 2 * (np.count_nonzero(np.diff(nodes)) + 1):
        return cand  # fewer than two candidates a node: little to gain from sorting them
    if int(nodes[-1]) >= 1 << 21 or int(total.max()) >= 1 << 21:
        return cand  # beyond coshare.bounds: no key of 63 bits; score them all
    # candidates hold the job, so their free memory is >= 0; each field fits in 21 bits
    free = np.clip(state.dev_free_mem[cand], -1, 1 << 20) + 1
    key = (nodes << 42) | (free << 21) | total
    _, first = np.unique(key, return_index=True)
    out: Ints = cand[np.sort(first)]
    return out


def single_device_moves(state: ClusterState, dev_m: Ints, count: Ints, small: Ints, job: Job,
                        cand: Ints) -> tuple[Ints, Ints, Ints, Ints]:  # fmt: skip
    """For each candidate device ``cand`` of a one-device ``job``: its node, the device's
    free memory after the job (a column), and the node's per-shape counts of devices with
    room (``count``) and free memory too small for each shape (``small``) after it; the
    shapes' device memory is ``dev_m`` (FGD's fragmentation, used by the potential too)."""
    nodes = state.dev_node[cand]
    a = np.clip(state.dev_free_mem[cand], 0, None)[:, None]
    b = a - job.device_memory_mib
    g = dev_m[None, :]
    after_count = count[nodes] - (a >= g) + (b >= g)
    after_small = small[nodes] - np.where(a < g, a, 0) + np.where(b < g, b, 0)
    return nodes, b, after_count, after_small
