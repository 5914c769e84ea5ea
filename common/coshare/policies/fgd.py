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

Speed: a node's ``F`` is read from a table of the shapes' weights summed over
their device counts, cores and shares (:class:`_Fragmentation`), a few reads per node rather
than a pass over every shape; the same integers, so the same plans as the shape-by-shape sum.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Plan, Snapshot, ThreadMode
from coshare.policies.base import SCREEN_FROM, ClusterState, Mask, finish, priority_key, screened
from coshare.policies.waiting import explain_waiting, never_fits

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
    shapes += [
        (r.cpu_milli, r.device_memory_mib if r.devices else 0, len(r.devices))
        for r in snapshot.running
    ]
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
        frag = _Fragmentation(state, workload, self.exact, by_state=len(jobs) >= SCREEN_FROM)
        waiting = [job for job, may in screened(state, jobs) if not (may and frag.place(job))]
        unplaced.update(explain_waiting(state, waiting))
        return finish(self.name, snapshot, state, unplaced)


#: The summed-weight table of the fast path holds at most this many cells (8 bytes each);
#: a workload with more distinct (device count, host cores, device share) steps is scored
#: shape by shape, as before, a block of nodes at a time.
TABLE_CELLS = 1 << 22
#: Shape-by-shape scoring takes this many (node x slot x shape) cells at a time.
DIRECT_BLOCK_CELLS = 1 << 22


class _Fragmentation:
    """Per-node fragmentation of a :class:`ClusterState`, updated as jobs are placed.

    Devices sit in a node x slot matrix (a free amount of ``-1`` where a node has fewer
    devices). ``F`` of a node reads only its free cores and its devices' free amounts:
    with those sorted from most free down, ``f_1 >= ... >= f_D``, a shape of device share
    ``g`` with ``f_{j+1} < g <= f_j`` fits on exactly ``j`` devices, the ``j`` most free,
    whose free amounts add up to ``B_j``. Such a shape counts ``R_n - B_j`` if it runs on the
    node (its ``k <= j`` devices and its cores ``<= `` the free cores) and ``R_n`` if not, so

        ``F_n = R_n * sum_m p_m - sum_j B_j * P(k <= j, cores <= free cores,
        f_{j+1} < g <= f_j)``

    where ``P`` sums the weights of the device shapes in that box. ``P`` comes from a table
    of weights summed over the shapes' distinct device counts, cores and shares (an
    inclusive prefix sum in all three), so a node costs ``D`` table reads, not one pass
    over every shape. The sums are of integers: the same ``F`` as the shape-by-shape sum
    (``tests/unit/test_fgd_fast.py`` compares both with that sum, kept there as it was).
    """

    def __init__(
        self,
        state: ClusterState,
        workload: tuple[tuple[Shape, int], ...],
        exact: bool,
        by_state: bool = True,
    ) -> None:
        self.state = state
        self.exact = exact
        self.total = max(sum(w for _, w in workload), 1)
        n = len(state.nodes)
        width = max(max((len(d) for d in state.node_devs), default=0), 1)
        # slot -> global device index; missing slots point one past the last device
        self.slot = np.full((n, width), state.device_count, dtype=np.int64)
        starts = np.zeros(n, dtype=np.int64)
        for i, devs in enumerate(state.node_devs):
            self.slot[i, : len(devs)] = devs
            starts[i] = devs[0] if devs else 0
        self.dev_slot = np.arange(state.device_count, dtype=np.int64) - starts[state.dev_node]
        biggest = np.append(state.dev_total_mem, 0)[self.slot].max(axis=1)
        has = np.array([bool(devs) for devs in state.node_devs], dtype=np.bool_)
        self.node_scale = np.where(has, biggest, 1).astype(np.float64)
        self.cpu_m = np.array([s[0] for s, _ in workload], dtype=np.int64)
        self.dev_m = np.array([s[1] for s, _ in workload], dtype=np.int64)
        self.k_m = np.array([s[2] for s, _ in workload], dtype=np.int64)
        self.w_m = np.array([w for _, w in workload], dtype=np.int64)
        self.w_all = int(self.w_m.sum())
        self.table = _weight_table(self.cpu_m, self.dev_m, self.k_m, self.w_m, width)
        # free amounts (none below 0) and -1 for the missing slots' index; the ledger changes
        # only where this class places jobs, and :meth:`_placed` copies those changes
        self.dev_free = np.append(np.clip(state.dev_free_mem, 0, None), -1)
        self.frag = self.of(self._free(np.arange(n)), state.node_free_cpu)
        self.fits_nowhere: set[tuple[bool, int, int, int, int, int]] = set()
        # Nodes in the same state (by slot: free and total memory, free and hardware threads;
        # free cores and host memory) take every job alike and score every move alike: each
        # gets the number of its state, and a one-device job is offered only the devices of
        # the first node of each state (the head), where ties go anyway (an idle cluster of
        # 1,250 equal nodes: one node's moves, not 1,250 nodes')
        # (numbered only for a large cycle: numbering every node costs more than it saves
        # when a plan places a job or a few, as the online protocol's thousands of plans do)
        self._sizes = np.append(state.dev_total_mem, 0)[self.slot]
        self._states: dict[tuple[object, ...], int] = {}
        self.node_state = (
            np.array([self._state_of(i) for i in range(n)], dtype=np.int64) if by_state else None
        )
        #: the nodes in each state now, ascending (numbered nodes only)
        self._members: dict[int, list[int]] = {}
        #: the devices of each state's first node
        self.head_dev: Mask = np.zeros(state.device_count, dtype=np.bool_)
        #: the devices in the very state (free and total memory, free and hardware threads)
        #: of one before them on their node: it takes every job they take, scoring the same
        self.repeat_dev: Mask = np.zeros(state.device_count, dtype=np.bool_)
        if self.node_state is not None:
            for i, number in enumerate(self.node_state.tolist()):
                self._members.setdefault(number, []).append(i)
            for members in self._members.values():
                self.head_dev[state.node_devs[members[0]]] = True
            for i in range(n):
                self._mark_repeats(i)

    def _state_of(self, node: int) -> int:
        s = self.state
        devs = s.node_devs[node]
        part = slice(devs[0], devs[-1] + 1) if devs else slice(0, 0)
        key = (
            s.dev_free_mem[part].tobytes(),
            s.dev_free_thr[part].tobytes(),
            s.dev_threads[part].tobytes(),
            self._sizes[node].tobytes(),
            int(s.node_free_cpu[node]),
            int(s.node_free_mem[node]),
        )
        return self._states.setdefault(key, len(self._states))

    def _mark_repeats(self, node: int) -> None:
        """:attr:`repeat_dev` for the devices of ``node`` (value by value: a node of a few
        devices costs less so than in whole-array steps)."""
        s = self.state
        devs = s.node_devs[node]
        if len(devs) < 2:
            return
        part = slice(devs[0], devs[-1] + 1)
        seen: set[tuple[int, int, int, int]] = set()
        repeat: list[bool] = []
        for key in zip(
            s.dev_free_mem[part].tolist(),
            s.dev_total_mem[part].tolist(),
            s.dev_free_thr[part].tolist(),
            s.dev_threads[part].tolist(),
            strict=True,
        ):
            repeat.append(key in seen)
            seen.add(key)
        self.repeat_dev[part] = repeat

    def _moved(self, node: int, old: int, new: int) -> None:
        """``node`` went from state ``old`` to ``new``: the heads of both follow."""
        devs = self.state.node_devs[node]
        members = self._members[old]
        if members[0] == node:
            self.head_dev[devs] = False
            if len(members) > 1:
                self.head_dev[self.state.node_devs[members[1]]] = True
        members.remove(node)
        if not members:
            del self._members[old]
        members = self._members.setdefault(new, [])
        at = bisect.bisect(members, node)
        if at == 0:
            if members:
                self.head_dev[self.state.node_devs[members[0]]] = False
            self.head_dev[devs] = True
        members.insert(at, node)

    def _free(self, rows: Ints) -> Ints:
        out: Ints = self.dev_free[self.slot[rows]]
        return out

    def of(self, free: Ints, cpu: Ints) -> Ints:
        """``F`` of nodes in the given states: free amounts by slot (``-1``: no device), a
        row each, and free cores."""
        if self.table is None:
            return self._direct(free, cpu)
        t = self.table
        top = np.sort(free, axis=1)[:, ::-1]  # most free first; missing slots (-1) last
        most = np.cumsum(np.maximum(top, 0), axis=1)  # B_j: the j most free devices
        if t.share_rank is not None:  # shares <= f_j
            upper = t.share_rank[np.minimum(top, len(t.share_rank) - 2) + 1]
        else:
            upper = np.searchsorted(t.shares, top, side="right")
        lower = np.zeros_like(upper)  # shares <= f_{j+1}
        lower[:, :-1] = upper[:, 1:]
        cores = np.searchsorted(t.cores, cpu, side="right")[:, None] * (len(t.shares) + 1)
        base = t.layer_base[None, :] + cores
        runs = t.cells[base + upper] - t.cells[base + lower]
        out: Ints = most[:, -1] * self.w_all - (most * runs).sum(axis=1)
        return out

    def _direct(self, free: Ints, cpu: Ints) -> Ints:
        """``F`` shape by shape (a workload too varied for the table), a block at a time."""
        out: Ints = np.zeros(len(free), dtype=np.int64)
        block = max(1, DIRECT_BLOCK_CELLS // max(free.shape[1] * len(self.w_m), 1))
        for at in range(0, len(free), block):
            f = free[at : at + block, :, None]
            fits = f >= self.dev_m[None, None, :]
            small = np.where(~fits & (f >= 0), f, 0).sum(axis=1)
            runs = (cpu[at : at + block, None] >= self.cpu_m[None, :]) & (
                fits.sum(axis=1) >= self.k_m[None, :]
            )
            runs &= self.k_m[None, :] > 0
            total = np.clip(f[:, :, 0], 0, None).sum(axis=1)
            out[at : at + block] = np.where(runs, small, total[:, None]) @ self.w_m
        return out

    def _placed(self, node: int, frag: int) -> None:
        """``node`` took a job, which leaves it with fragmentation ``frag`` (the ``F`` its
        move was scored with: the state it was scored in is the state it is in now)."""
        devs = self.state.node_devs[node]
        if devs:
            part = slice(devs[0], devs[-1] + 1)
            self.dev_free[part] = np.clip(self.state.dev_free_mem[part], 0, None)
        self.frag[node] = frag
        if self.node_state is not None:
            old, new = int(self.node_state[node]), self._state_of(node)
            if new != old:
                self.node_state[node] = new
                self._moved(node, old, new)
                self._mark_repeats(node)

    def place(self, job: Job) -> bool:
        """Place ``job`` where fragmentation grows least; ``False`` when it fits nowhere now.

        Whether a job fits anywhere reads only its needs and the ledger, and placing jobs
        only takes from the ledger: a job with the needs of one that fitted nowhere fits
        nowhere either, and is not looked at again (on a full cluster most of a large batch
        waits: tens of thousands of jobs of a few thousand needs)."""
        needs = (
            job.needs_device,
            job.device_memory_mib,
            job.device_threads,
            job.device_count,
            job.total_cpu_milli,
            job.total_memory_mib,
        )
        if needs in self.fits_nowhere:
            return False
        if self._place(job):
            return True
        self.fits_nowhere.add(needs)
        return False

    def _place(self, job: Job) -> bool:
        s = self.state
        if not job.needs_device:
            nodes = np.flatnonzero(s.host_ok(job))
            if len(nodes) == 0:
                return False
            after = self.of(self._free(nodes), s.node_free_cpu[nodes] - job.total_cpu_milli)
            pick = self._best(self.frag[nodes] - after, self.node_scale[nodes])
            s.place(job, int(nodes[pick]))
            self._placed(int(nodes[pick]), int(after[pick]))
            return True
        ok = s.device_ok(job)
        if not ok.any():
            return False
        if job.device_count == 1:
            if self.node_state is None:
                cand = distinct_moves(s, np.flatnonzero(ok))
            else:  # the devices of a node in its state, and on it, in theirs, first
                cand = np.flatnonzero(ok & self.head_dev & ~self.repeat_dev)
            node, devices, frag = self._best_single(job, cand)
        else:
            chosen = self._best_multi(job, ok)
            if chosen is None:
                return False
            node, devices, frag = chosen
        s.place(job, node, devices)
        self._placed(node, frag)
        return True

    def _best_single(self, job: Job, cand: Ints) -> tuple[int, list[int], int]:
        """The node and device for one-device ``job`` among the devices ``cand``, and the
        node's fragmentation after it."""
        s = self.state
        nodes = s.dev_node[cand]
        free = self._free(nodes)
        free[np.arange(len(cand)), self.dev_slot[cand]] -= job.device_memory_mib
        after = self.of(free, s.node_free_cpu[nodes] - job.total_cpu_milli)
        best = self._best(self.frag[nodes] - after, s.dev_total_mem[cand].astype(np.float64))
        return int(nodes[best]), [int(cand[best])], int(after[best])

    def _best(self, decrease: Ints, scale: npt.NDArray[np.float64]) -> int:
        """Index of the best candidate; the first of equals (snapshot, then device order)."""
        if self.exact:
            return int(np.argmax(decrease))
        return int(np.argmax(self._score(decrease, scale)))

    def _score(self, decrease: Ints, scale: npt.NDArray[np.float64]) -> Ints:
        """The reference's integer score: ``int(100 * sigmoid(decrease / one device))``."""
        x = decrease / self.total / np.maximum(scale, 1.0)
        # exp overflows past |x| ~ 709 (a node's devices of very different sizes);
        # the integer score is already 0 or 100 from |x| = 50, so clipping changes no score.
        x = np.clip(x, -_SIGMOID_CLIP, _SIGMOID_CLIP)
        out: Ints = (100.0 / (1.0 + np.exp(-x))).astype(np.int64)
        return out

    def _best_multi(self, job: Job, ok: Mask) -> tuple[int, list[int], int] | None:
        """The node and devices for multi-device ``job`` (the least free that hold it on
        each node), and the node's fragmentation after it."""
        s = self.state
        nodes = s.nodes_with_devices(job, ok)
        if len(nodes) == 0:
            return None
        chosen = [s.least_free_on(n, ok, job.device_count) for n in nodes.tolist()]
        free = self._free(nodes)
        rows = np.repeat(np.arange(len(nodes)), job.device_count)
        devs = np.array(chosen, dtype=np.int64).reshape(-1)
        free[rows, self.dev_slot[devs]] -= job.device_memory_mib
        after = self.of(free, s.node_free_cpu[nodes] - job.total_cpu_milli)
        scale = s.dev_total_mem[[c[0] for c in chosen]].astype(np.float64)
        best = self._best(self.frag[nodes] - after, scale)
        return int(nodes[best]), sorted(chosen[best]), int(after[best])


@dataclass(frozen=True)
class _Table:
    """The device shapes' weights summed over boxes, for :meth:`_Fragmentation.of`.

    ``cores`` and ``shares`` are the distinct host cores and device shares of the shapes in
    ascending order; ``cells[layer_base[j - 1] + a * (len(shares) + 1) + b]`` is the weight of
    the shapes of 1 to ``j`` devices among the ``a`` least cores and the ``b`` least shares.
    ``share_rank[f + 1]`` is how many shares are ``<= f`` for a free amount ``f`` from -1 to
    the largest share (and beyond it: all), when that list is short enough to hold.
    """

    cores: Ints
    shares: Ints
    layer_base: Ints
    cells: Ints
    share_rank: Ints | None


#: Free amounts are ranked among the shares by a list indexed by the amount up to this
#: largest share (8 MiB of list); beyond it by binary search.
RANK_LIST_UP_TO = 1 << 20


def _weight_table(cpu_m: Ints, dev_m: Ints, k_m: Ints, w_m: Ints, width: int) -> _Table | None:
    """The summed-weight table of a workload for nodes of up to ``width`` devices; ``None``
    when it would take more than :data:`TABLE_CELLS` cells. Shapes of more devices than a
    node has never run anywhere and are left out."""
    use = (k_m > 0) & (k_m <= width)
    cpu_at, cpu_i = np.unique(cpu_m[use], return_inverse=True)
    dev_at, dev_i = np.unique(dev_m[use], return_inverse=True)
    k_at, k_i = np.unique(k_m[use], return_inverse=True)
    shape = (len(k_at) + 1, len(cpu_at) + 1, len(dev_at) + 1)
    if shape[0] * shape[1] * shape[2] > TABLE_CELLS:
        return None
    cells = np.zeros(shape, dtype=np.int64)
    np.add.at(cells, (k_i.reshape(-1) + 1, cpu_i.reshape(-1) + 1, dev_i.reshape(-1) + 1), w_m[use])
    for axis in range(3):
        np.cumsum(cells, axis=axis, out=cells)
    # the layer for j = 1..width devices that fit: how many distinct counts are <= j
    layer = np.searchsorted(k_at, np.arange(1, width + 1), side="right").astype(np.int64)
    largest = int(dev_at[-1]) if len(dev_at) else 0
    rank = None
    if largest <= RANK_LIST_UP_TO:
        rank = np.searchsorted(dev_at, np.arange(-1, largest + 1), side="right").astype(np.int64)
    return _Table(
        cpu_at.astype(np.int64),
        dev_at.astype(np.int64),
        layer * shape[1] * shape[2],
        cells.reshape(-1),
        rank,
    )


#: Fewer candidates than this are scored as they are (sorting them would cost more).
DISTINCT_FROM = 64
#: Where no node has more candidates than this, a candidate's repeats are found among the
#: few before it on its node (a comparison each); else by a sort of all of them.
NEAR_RUN = 16


def distinct_moves(state: ClusterState, cand: Ints) -> Ints:
    """The candidate devices of a one-device job, less those that would score the same as one
    before them: a move is scored by its node and the device's free and total memory alone
    (:func:`single_device_moves`), and ties go to the first device, so of the devices of one
    node with the same free and total memory only the first can be chosen. A node of 1,024
    idle devices is then one candidate, not 1,024 (64 such nodes and 2,000 jobs,
    a 5 MB snapshot within every bound, planned for minutes). ``cand`` is in ascending order
    and so is the result; in exact arithmetic the choice is the one over all of ``cand``
    (sharepack's potential is a matrix product, whose rounding can differ with a row's place
    in the batch, so two equal moves may tie differently: either is as good).

    A node's candidates are next to each other in ``cand``: where none has more than
    :data:`NEAR_RUN`, each is compared with the few before it (a GPU node of 8 devices: 7
    comparisons over the list, not a sort of it); else the first of each is found by a
    sort (:func:`first_of_each`)."""
    if len(cand) < DISTINCT_FROM:
        return cand
    nodes = state.dev_node[cand]
    starts = np.flatnonzero(np.diff(nodes)) + 1  # where a node's candidates begin
    if len(cand) < 2 * (len(starts) + 1):
        return cand  # fewer than two candidates a node: little to gain from comparing them
    total = state.dev_total_mem[cand]
    if int(nodes.max()) >= 1 << 21 or int(total.max()) >= 1 << 21:
        return cand  # beyond coshare.ledger.bounds: no key of 63 bits; score them all
    # candidates hold the job, so their free memory is >= 0; each field fits in 21 bits
    free = np.clip(state.dev_free_mem[cand], -1, 1 << 20) + 1
    key = (nodes << 42) | (free << 21) | total
    longest = int(np.diff(starts, prepend=0, append=len(cand)).max())
    if longest > NEAR_RUN:
        out: Ints = cand[first_of_each(key)]
        return out
    first: Mask = np.ones(len(key), dtype=np.bool_)
    for back in range(1, longest):  # equal keys are on one node: at most longest - 1 apart
        first[back:] &= key[back:] != key[:-back]
    kept: Ints = cand[first]
    return kept


def first_of_each(key: Ints) -> Ints:
    """The positions (ascending) of the first occurrence of each value of ``key``: what
    ``np.unique(key, return_index=True)`` gives, sorted, without its stable sort (a
    third of the time of fgd's large cycles went to it): an unstable sort, then the least
    position among each run of equal values."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(key)
    ordered = key[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out: Ints = np.sort(np.minimum.reduceat(order, starts))
    return out


def single_device_moves(
    state: ClusterState, dev_m: Ints, count: Ints, small: Ints, job: Job, cand: Ints
) -> tuple[Ints, Ints, Ints, Ints]:
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
