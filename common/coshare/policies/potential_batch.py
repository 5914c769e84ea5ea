"""Large batches: one-device jobs placed by potential a chunk at a time.

Placing a job by :meth:`Potential.place` costs a fixed amount of array work (the mask of the
devices that can take it, the scoring of every candidate, bringing its node up to date),
about 0.2 ms whatever the job; 10,000 jobs cost seconds. :func:`place_chunked` scores
:data:`CHUNK` jobs at once against every candidate device (a jobs x devices matrix, the very
numbers :meth:`Potential._moves` gives one job at a time), then assigns them in order, each by
the same rule (:func:`~coshare.policies.potential._first_least`) among the devices of the
nodes no earlier job of the chunk has changed. A node a job takes is out for the rest of the
chunk; its place in the matrix goes to the next node of its group of identical nodes, which
scores the same. The nodes taken are brought up to date together when the chunk ends, or
earlier, when a job finds no device left to it (the chunk ends there and the next one starts
with that job).

Not the plan of one job at a time: there, a later job of the chunk may go to a node an earlier
one has just changed, when that node in its new state scores best; here it goes to the best
unchanged node. ``sharepack`` uses this only for cycles of more than
:data:`~coshare.policies.sharepack.BATCH_FROM_JOBS` jobs (and makes no relocation pass
after it); a smaller cycle, and the online cycle of one job, keep the one-by-one plan.
docs/sharepack.md compares the two plans on the large benchmark cases.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from coshare.model import Job
from coshare.policies.base import Mask, needs_of, unique_rows
from coshare.policies.potential import Floats, Ints, Potential

#: One-device jobs scored together in one matrix.
CHUNK = 64
#: A chunk scores only the moves its bound leaves open where they are at most one in this
#: many; else every move (the fragmentation part once per device memory size of its jobs).
FEW_OPEN = 8
#: After a chunk that scored every move, the next ones do so at once (the bound was far from
#: the rises there) until one tries the bound again: after this many chunks, twice as many
#: after each further miss in a row (a cluster where the bound never holds stops paying for
#: it; one where it holds again finds out soon).
RETRY_BOUND = 4


def place_chunked(potential: Potential, jobs: Sequence[Job], reserved: Mask) -> list[Job]:
    """Place the one-device ``jobs``, in order, a chunk at a time (module docstring), on
    devices not in ``reserved``; returns those that fit nowhere, in order."""
    left: list[Job] = []
    start = 0
    wait = 0  # chunks to go before the bound is tried again
    misses = 0  # tries in a row where it did not hold
    while start < len(jobs):
        done, bound = _chunk(potential, jobs[start : start + CHUNK], reserved, left, wait == 0)
        start += done
        if wait:
            wait -= 1
        elif bound:
            misses = 0
        else:
            wait = RETRY_BOUND << misses
            misses += 1
    return left


def _chunk(
    potential: Potential, jobs: Sequence[Job], reserved: Mask, left: list[Job], bound: bool
) -> tuple[int, bool]:
    """Place the first jobs of ``jobs`` (appending those that fit nowhere to ``left``); returns
    how many were dealt with (at least one), and whether the bound spared scoring (``bound``:
    whether to try it)."""
    p, s = potential, potential.state
    if not p.tabled:
        p._make_tables()
    needs = _Needs(jobs)
    g, t, c, h = needs.distinct.T
    cand = np.flatnonzero(p.scored_dev & ~reserved)
    nodes = s.dev_node[cand]
    cpu, mem = s.node_free_cpu[nodes], s.node_free_mem[nodes]
    ok: Mask = s.dev_free_mem[cand][None, :] >= g[:, None]
    ok &= s.dev_threads[cand][None, :] >= t[:, None]
    if s.strict:
        ok &= s.dev_free_thr[cand][None, :] >= t[:, None]
    ok &= (cpu[None, :] >= c[:, None]) & (mem[None, :] >= h[:, None])
    some = ok.any(axis=0)
    if not some.all():
        cand, nodes, cpu, mem, ok = cand[some], nodes[some], cpu[some], mem[some], ok[:, some]
    cols = _Columns(p, jobs, needs, cand, nodes, cpu, mem, ok, bound)
    cand, nodes = cols.cand, cols.nodes  # in the order of ties
    device = cols.device
    col_node = nodes.copy()
    slot_of = (p.slot[nodes] == cand[:, None]).argmax(axis=1)
    taken: list[int] = []
    taken_set: set[int] = set()
    chosen: list[tuple[Job, int, int]] = []  # placed when the chunk ends (on distinct nodes)
    dealt = 0
    for i, job in enumerate(jobs):
        col = cols.least(i)
        if col < 0:
            if taken:  # a node changed by this chunk may take it: score it afresh
                break
            left.append(job)
            dealt += 1
            continue
        d = int(device[col])
        n = int(s.dev_node[d])
        chosen.append((job, n, d))
        dealt += 1
        taken.append(n)
        taken_set.add(n)
        mine = np.flatnonzero(col_node == n)
        other = _next_member(p, n, taken_set)
        if other is None:
            cols.close(mine)
            col_node[mine] = -1
        else:
            device[mine] = np.array(s.node_devs[other], dtype=np.int64)[slot_of[mine]]
            col_node[mine] = other
    s.place_single(chosen)
    _bring_up_to_date(p, taken)
    return dealt, cols.bounded


class _Needs:
    """A chunk's needs (device memory, device threads, host cores, host memory: a row per
    job) and its distinct rows. A move's fit and rise depend on the job only through its
    row, and a chunk's jobs repeat a few shapes: the chunk x devices matrices are worked out
    once per distinct row, then copied to the jobs' rows (the very same numbers)."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.rows: Ints = needs_of(jobs)
        #: the distinct rows, the first job of each, and each job's distinct row
        self.distinct, self.first, self.which = unique_rows(self.rows)


def _next_member(p: Potential, node: int, taken: set[int]) -> int | None:
    """The first node of ``node``'s group (of identical nodes) that this chunk has not
    changed: the columns of ``node`` stand for it now."""
    if not p.grouped:
        return None
    for m in p.groups[p.key_of[node]]:
        if m not in taken:
            return m
    return None


def _bring_up_to_date(p: Potential, nodes: list[int]) -> None:
    """:meth:`Potential.changed` for many nodes at once: their figures, then their groups
    and the devices scored on the nodes that became or ceased to be the first of theirs."""
    if not nodes:
        return
    rows = np.array(nodes, dtype=np.int64)
    p._refresh(rows)
    if not p.grouped:
        p._mark(rows)
        return
    heads = set(nodes)
    for n in nodes:
        members = p.groups[p.key_of[n]]
        members.remove(n)
        p.first[n] = False
        if members:
            p.first[members[0]] = True
            heads.add(members[0])
        else:
            del p.groups[p.key_of[n]]
    for n, row in zip(nodes, p._rows(rows), strict=True):
        key = row.tobytes()
        members = p.groups.setdefault(key, [])
        at = bisect.bisect(members, n)
        if at == 0:
            if members:
                p.first[members[0]] = False
                heads.add(members[0])
            p.first[n] = True
        members.insert(at, n)
        p.key_of[n] = key
    p._mark(np.array(sorted(heads), dtype=np.int64))


class _Columns:
    """The rises of a chunk's jobs (rows) on its candidate devices (columns), scored only
    where they may be the least.

    A move's rise is at least ``g (run_a - W) / W`` plus its stranding rise: every shape
    loses at most the job's ``g`` MiB of fragment, and the shapes that ran with device memory
    up to the device's free ``a`` (weight ``run_a`` of ``W``) lose none. The bound is a
    product per cell, in the very operations of the rise, so in floating point too no rise is
    below it. Each job's move of least bound is scored first; then the moves whose bound is
    not above that move's rise; a job whose least scored move has gone (its node changed)
    scores the moves whose bound is not above the least rise left (:meth:`least`)."""

    def __init__(
        self,
        p: Potential,
        jobs: Sequence[Job],
        needs: _Needs,
        cand: Ints,
        nodes: Ints,
        cpu: Ints,
        mem: Ints,
        ok_distinct: Mask,
        bound: bool = True,
    ) -> None:
        s = p.state
        need = needs.rows
        # the columns in the order of ties (least room left, then most free device memory,
        # then first): the move of least rise is then the first of the least (an argmin)
        a = np.maximum(s.dev_free_mem[cand], 0)
        free_total = p.free_total[nodes]
        order = np.lexsort((cand, -free_total, a))
        cand, nodes, cpu, mem = cand[order], nodes[order], cpu[order], mem[order]
        ok_distinct = ok_distinct[:, order]
        self.a, self.free_total = a[order], free_total[order]
        self.p, self.jobs, self.need, self.cand, self.nodes = p, jobs, need, cand, nodes
        self.cpu, self.mem = cpu, mem
        #: the device each column stands for now (one of a node in the same state as its own)
        self.device = cand.copy()
        g = need[:, 0]
        self.base = nodes * p.run_w.shape[1]
        at = self.base + p.dev_m.searchsorted(self.a, side="right")
        self.run_a = p.run_w.ravel()[at]
        self.tight_a = p.tight_w.ravel()[at]
        self.lost_a = p.tight_e.ravel()[at]
        self.run_cpu, self.run_mem = p.run_cpu[nodes], p.run_mem[nodes]
        strand = _stranding_rises(p, needs.distinct, self.free_total, cpu, mem)
        self.strand = strand[needs.which]
        ok = ok_distinct[needs.which]
        self.rise: Floats = np.full(ok.shape, np.inf)
        self.scored: Mask = np.zeros(ok.shape, dtype=np.bool_)
        self.low = self.rise
        self.open: Mask = np.ones(len(cand), dtype=np.bool_)
        #: each job's column as the chunk began (-1: none); its own while that is open
        self.pick = np.full(len(jobs), -1, dtype=np.int64)
        #: whether the bound spared scoring every move
        self.bounded = False
        rows = np.flatnonzero(ok.any(axis=1))
        if not len(rows):
            self.bounded = bound
            return
        if bound:
            low: Floats = (g[:, None] * (self.run_a - p.weight)[None, :]) / p.weight
            low += p.stranding * self.strand
            np.copyto(low, np.inf, where=~ok)
            self.low = low
            self.bounded = self._score_promising(rows)
        if not self.bounded:  # every move scored: none is left for a bound to let in
            self._score_all(needs, strand, ok_distinct)
            self.scored = ok
            self.low = self.rise
        self.pick[rows] = self.rise[rows].argmin(axis=1)

    def _score_all(self, needs: _Needs, strand: Floats, ok: Mask) -> None:
        """Score every move, once per distinct row of needs (``strand`` and ``ok``: theirs):
        the fragmentation part once per device memory size, the moves that stop a shape for
        want of cores or host memory row by row; then each job's row is its needs' row."""
        p = self.p
        sizes, which = np.unique(needs.distinct[:, 0], return_inverse=True)
        which = which.reshape(-1)
        b = self.a[None, :] - sizes[:, None]
        bt = self.base[None, :] + p.dev_m.searchsorted(b, side="right")
        tight = self.tight_a[None, :] - p.tight_w.ravel()[bt]
        lost = self.lost_a[None, :] - p.tight_e.ravel()[bt] - sizes[:, None] * tight
        frag = (
            b * (self.run_a[None, :] - p.run_w.ravel()[bt] - tight)
            + lost
            - sizes[:, None] * (p.weight - self.run_a)[None, :]
        )[which]
        c, h = needs.distinct[:, 2], needs.distinct[:, 3]
        stops = (self.run_cpu[None, :] > self.cpu[None, :] - c[:, None]) | (
            self.run_mem[None, :] > self.mem[None, :] - h[:, None]
        )
        stops &= ok
        for i in np.flatnonzero(stops.any(axis=1)).tolist():
            hit = np.flatnonzero(stops[i])
            job = self.jobs[int(needs.first[i])]
            frag[i, hit] = p._frag_rise(job, self.cand[hit], self.nodes[hit])
        rise: Floats = frag / p.weight
        rise += p.stranding * strand
        np.copyto(rise, np.inf, where=~ok)
        self.rise = rise[needs.which]

    def _score_promising(self, rows: Ints) -> bool:
        """Score, for each job of ``rows``, its first move of least bound, then the moves that
        could beat it; ``False`` (and none of the latter scored) where they are more than
        one cell in :data:`FEW_OPEN` (the bound is far from the rises: all are scored)."""
        sub = self.low[rows]
        probe = sub.argmin(axis=1)
        self._score(rows, probe)
        r = self.rise[rows, probe][:, None]
        ahead = np.arange(len(self.cand))[None, :] < probe[:, None]
        more = ((sub < r) | ((sub == r) & ahead)) & ~self.scored[rows]
        if int(more.sum()) * FEW_OPEN > more.size:
            return False
        at = np.nonzero(more)
        self._score(rows[at[0]], at[1])
        return True

    def _score(self, rows: Ints, cols: Ints) -> None:
        """:meth:`Potential._moves` for the cells (rows, cols)."""
        if not len(rows):
            return
        p = self.p
        g, c, h = self.need[rows, 0], self.need[rows, 2], self.need[rows, 3]
        b = self.a[cols] - g
        bt = self.base[cols] + p.dev_m.searchsorted(b, side="right")
        run_a = self.run_a[cols]
        run_b = p.run_w.ravel()[bt]
        tight = self.tight_a[cols] - p.tight_w.ravel()[bt]
        lost = self.lost_a[cols] - p.tight_e.ravel()[bt] - g * tight
        frag = b * (run_a - run_b - tight) + lost - g * (p.weight - run_a)
        stops = (self.run_cpu[cols] > self.cpu[cols] - c) | (
            self.run_mem[cols] > self.mem[cols] - h
        )
        if stops.any():
            hit = np.flatnonzero(stops)
            for r in np.unique(rows[hit]).tolist():
                cells = hit[rows[hit] == r]
                devices = self.device[cols[cells]]
                frag[cells] = p._frag_rise(self.jobs[r], devices, p.state.dev_node[devices])
        self.rise[rows, cols] = frag / p.weight + p.stranding * self.strand[rows, cols]
        self.scored[rows, cols] = True

    def least(self, i: int) -> int:
        """The column job ``i`` goes to among the open ones (-1: none can take it): the least
        rise, ties in the order of ties. The moves that could beat the least scored one are
        scored first (all of them were, unless its column has closed since)."""
        first = int(self.pick[i])
        if first < 0 or self.open[first]:
            return first
        rise, low, scored = self.rise[i], self.low[i], self.scored[i]
        while True:
            pick = int(rise.argmin())
            best = rise[pick]
            if best == np.inf:  # nothing scored is open: score the first of least bound
                at = int(low.argmin())
                if low[at] == np.inf:
                    return -1
                self._score(np.array([i]), np.array([at]))
                continue
            if self.low is self.rise:  # every move was scored: none beats it
                return pick
            beats = low < best
            beats[:pick] |= low[:pick] == best  # a tie goes to the first
            more = np.flatnonzero(beats & ~scored)
            if not len(more):
                return pick
            self._score(np.full(len(more), i, dtype=np.int64), more)

    def close(self, cols: Ints) -> None:
        """The columns ``cols`` can take no more jobs of this chunk."""
        self.low[:, cols] = np.inf
        self.rise[:, cols] = np.inf
        self.open[cols] = False


def _stranding_rises(p: Potential, need: Ints, free_total: Ints, cpu: Ints, mem: Ints) -> Floats:
    """:meth:`Potential._stranding_rise` for every job (a row each) and node (a column)."""
    free = free_total.astype(np.float64)
    if p.rho_cpu <= 0:
        return np.zeros((len(need), len(free)))
    g, _, c, h = need.T
    rho_cpu, rho_mem = max(p.rho_cpu, 1e-12), max(p.rho_mem, 1e-12)
    x = free - cpu / rho_cpu
    dx = -g + c / rho_cpu
    if p.rho_mem <= 0:
        low = np.maximum(x, 0.0)
        only: Floats = np.maximum(-low[None, :], (x - low)[None, :] + dx[:, None])
        return only
    y = free - mem / rho_mem
    dy = -g + h / rho_mem
    before = np.maximum(np.maximum(x, y), 0.0)
    out: Floats = (x - before)[None, :] + dx[:, None]
    np.maximum(-before[None, :], out, out=out)
    np.maximum(out, (y - before)[None, :] + dy[:, None], out=out)
    return out
