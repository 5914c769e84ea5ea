"""Spread-n-Share (``sns``) and compact-share (``cs``): Tang et al., SC '19, sections 3.2
and 4.3-4.4 (``shared/papers/spread-n-share.md``).

Both place CPU jobs of ``P`` processes on ``n = k * ceil(P/T)`` nodes with ``ceil(P/n)``
cores each (``T``: a node's cores in processes), sharing nodes with other jobs; they place
gangs themselves (``places_gangs``), so the shared gang wrapper leaves them alone.

**sns**, each cycle, in age order (priority, then submit time; jobs past ``age_limit_s``
first, and nothing overtakes an aged job that cannot start: the paper's "age limit", whose
value it does not give):

1. the job's demand at each scale factor (:func:`coshare.profiles.programs.demand`): ``w`` ways
   whose IPC reaches ``alpha`` x full-cache IPC, bandwidth ``b`` at ``w`` scaled to the
   cores it has on a node; ``alpha`` is the job's ``CoshareAlpha``, else ``default_alpha``;
2. the scales in order: the profile's fastest alone first, then by run time alone (section
   4.4); a scale whose run time alone is slower than ``alpha`` x scale 1's is not tried (it
   would break the threshold before sharing anything; coshare's reading of "while meeting
   the degradation constraint"), nor one outside the job's node range;
3. nodes that have ``c`` idle cores, ``w`` free ways and ``b`` free bandwidth; first within
   one group of nodes with equal idle cores (coshare takes the group with the fewest idle
   cores that holds the job: the paper does not say which), else the whole cluster; the
   ``n`` idlest by ``C_o + B_o + beta * W_o`` (occupied shares of cores, bandwidth and
   ways; ``beta`` = ``ways_weight``, 2 in the paper);
4. the placement allocates ``w`` ways on every node that has resctrl (``Node.llc_ways``);
   the ways no job is allocated are given away to the jobs holding ways there in equal
   shares and taken back when a job comes (section 4.4): each assignment says its share at
   start (``llc_ways_spare``, :mod:`coshare.ledger.llc`), the node writes it (``node.
   llc_share_spare``) and the simulator models it. Bandwidth is admitted by the profiles'
   averages (the paper's testbed had no MBA); with ``mba`` (``policy.sns.mba``) each
   spread also says ``b`` per node, which the node caps with MBA where it has it.

A job whose program has no profile runs compact (scale 1) without ways or bandwidth, noted
"no profile for X". Nodes without resctrl run jobs without way allocation, noted.

**cs** (section 3.2): the same queue and node sharing, without profiles: the lowest scale
factor that fits the idle cores now (1 when it can), nodes chosen by occupied cores alone,
no ways allocated and no bandwidth counted.

Pure and deterministic: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

import numpy as np

from coshare.ledger.bounds import shorten_text
from coshare.ledger.gangs import node_counts, split
from coshare.ledger.llc import floor_share
from coshare.model import Assignment, Job, Plan, RunningJob, Snapshot, Spread, Unplaced
from coshare.policies.aging import split_aged
from coshare.policies.base import priority_key, some_names
from coshare.policies.gang import gang_refusal
from coshare.profiles.programs import DEFAULT_ALPHA, SCALES, Demand, Profile, demand, nodes_at

Mode = Literal["sns", "cs"]

#: The paper's weight of occupied ways in the idleness score (section 4.4: "2 in our
#: prototype").
DEFAULT_WAYS_WEIGHT = 2.0


@dataclass
class _Node:
    """What one node has and holds this cycle."""

    name: str
    cores: int  # milli
    memory: int
    ways: int | None
    membw: float | None
    used_cores: int = 0
    used_memory: int = 0
    used_ways: int = 0
    used_membw: float = 0.0
    free_ways_cap: int | None = None  # node facts: ways no coshare group holds

    @property
    def free_cores(self) -> int:
        return self.cores - self.used_cores

    @property
    def free_ways(self) -> int | None:
        if self.ways is None:
            return None
        free = self.ways - self.used_ways
        return free if self.free_ways_cap is None else min(free, self.free_ways_cap)

    def score(self, ways_weight: float, cores_only: bool) -> float:
        """``C_o + B_o + beta * W_o``: how busy the node is (lower: idler)."""
        c = self.used_cores / self.cores if self.cores else 1.0
        if cores_only:
            return c
        b = self.used_membw / self.membw if self.membw else 0.0
        w = self.used_ways / self.ways if self.ways else 0.0
        return c + b + ways_weight * w


#: Larger than any node's cores or memory: a need above it fits nowhere.
_MOST = 2**62


class _Table:
    """The nodes as columns, kept in step with the :class:`_Node` list as jobs are placed, so
    that a demand's nodes are found with array operations rather than a loop per node (same
    comparisons and the same score arithmetic, so the same choice)."""

    def __init__(self, nodes: list[_Node]) -> None:
        self.nodes = nodes
        self.most_cores = max((n.cores for n in nodes), default=0)
        self.cores = np.array([n.cores for n in nodes], dtype=np.int64)
        self.memory = np.array([n.memory for n in nodes], dtype=np.int64)
        self.used_cores = np.array([n.used_cores for n in nodes], dtype=np.int64)
        self.used_memory = np.array([n.used_memory for n in nodes], dtype=np.int64)
        self.has_ways = np.array([n.ways is not None for n in nodes], dtype=bool)
        self.ways = np.array([n.ways or 0 for n in nodes], dtype=np.int64)
        self.used_ways = np.array([n.used_ways for n in nodes], dtype=np.int64)
        big = np.iinfo(np.int64).max
        self.ways_cap = np.array(
            [big if n.free_ways_cap is None else n.free_ways_cap for n in nodes], dtype=np.int64
        )
        self.has_membw = np.array([n.membw is not None for n in nodes], dtype=bool)
        self.membw = np.array([n.membw or 0.0 for n in nodes], dtype=np.float64)
        self.used_membw = np.array([n.used_membw for n in nodes], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, i: int, cores: int, memory: int, ways: int, membw: float) -> None:
        """Count a placed part on node ``i`` (in the node and in the columns)."""
        node = self.nodes[i]
        node.used_cores += cores
        node.used_memory += memory
        node.used_ways += ways
        node.used_membw += membw
        self.used_cores[i] = node.used_cores
        self.used_memory[i] = node.used_memory
        self.used_ways[i] = node.used_ways
        self.used_membw[i] = node.used_membw

    def free_cores(self) -> np.ndarray:
        return self.cores - self.used_cores

    def scores(self, idx: np.ndarray, ways_weight: float, cores_only: bool) -> np.ndarray:
        """:meth:`_Node.score` of the nodes ``idx``."""
        cores = self.cores[idx]
        c = np.where(cores != 0, self.used_cores[idx] / np.where(cores != 0, cores, 1), 1.0)
        if cores_only:
            return c
        membw = self.membw[idx]
        b = np.where(membw != 0, self.used_membw[idx] / np.where(membw != 0, membw, 1.0), 0.0)
        ways = self.ways[idx]
        w = np.where(ways != 0, self.used_ways[idx] / np.where(ways != 0, ways, 1), 0.0)
        return c + b + ways_weight * w


@dataclass(frozen=True)
class SnsPolicy:
    """Spread-n-Share (``mode="sns"``) or compact-share (``mode="cs"``); see the module
    docstring.

    Attributes:
        profiles: program profiles by ``CoshareProgram`` (:mod:`coshare.profiles.store`).
        mode: ``sns`` or ``cs``.
        default_alpha: the slowdown threshold of a job that names none (paper: 0.9).
        ways_weight: ``beta`` of the idleness score.
        age_limit_s: pending time after which nothing overtakes a job; ``None``: never.
        mba: cap each job's bandwidth per node at its ``b`` with MBA where nodes have it
            (the spread's ``membw_gbps``; section 4.4).
        explore: programs being learned from normal runs (:mod:`coshare.profiles.learning`), each
            with the scale factor its next run tries (section 4.2: "always starting with a
            scale factor of 1x and node mode of E ... The program's next execution will then
            be scaled out to 2x while remaining in the E mode"): such a job is placed at that
            scale on nodes no other job uses, and while it runs its nodes take no other job.
            A program with a profile is not explored (the caller leaves it out).
    """

    places_gangs: ClassVar[bool] = True

    profiles: Mapping[str, Profile] = field(default_factory=dict)
    mode: Mode = "sns"
    default_alpha: float = DEFAULT_ALPHA
    ways_weight: float = DEFAULT_WAYS_WEIGHT
    age_limit_s: float | None = 3600.0
    mba: bool = False
    explore: Mapping[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``sns`` or ``cs``."""
        return self.mode

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place the pending jobs in age order (see the module docstring)."""
        nodes = [
            _Node(
                n.name,
                n.cpu_milli,
                n.memory_mib,
                n.llc_ways,
                n.membw_gbps,
                free_ways_cap=n.llc_ways_free,
            )
            for n in snapshot.nodes
        ]
        index = {n.name: i for i, n in enumerate(nodes)}
        for r in snapshot.running:
            i = index.get(r.node)
            if i is not None:
                self._hold(nodes[i], r)
        table = _Table(nodes)
        assignments: list[Assignment] = []
        spreads: list[Spread] = []
        unplaced: dict[str, Unplaced] = {}
        order = sorted(snapshot.pending, key=priority_key)
        aged, young = split_aged(snapshot, order, self.age_limit_s)
        aged_ids = {j.id for j in aged}
        blocked: Job | None = None
        for job in aged + young:
            if blocked is not None:
                unplaced[job.id] = Unplaced(
                    job.id,
                    f"waits behind job {blocked.id}, past "
                    f"age_limit_s {self.age_limit_s:g}, which nothing "
                    "overtakes",
                    "not_chosen",
                )
                continue
            refusal = self._refusal(job, table)
            if refusal is not None:
                unplaced[job.id] = refusal
                continue
            placed = self._place(job, table)
            if placed is None:
                unplaced[job.id] = self._waiting(job, table)
                if job.id in aged_ids:
                    blocked = job
                continue
            parts, spread = placed
            assignments += parts
            spreads.append(spread)
        if self.mode == "sns":
            assignments = _with_spare_shares(assignments, snapshot, nodes)
        ordered = tuple(unplaced[j.id] for j in snapshot.pending if j.id in unplaced)
        # one note for all such nodes: a cluster of thousands without resctrl is one fact
        blind = sorted({n.name for n in nodes if n.ways is None})
        which = f"node {blind[0]}" if len(blind) == 1 else f"nodes {some_names(blind)}"
        notes = (
            (
                f"{which} {'has' if len(blind) == 1 else 'have'} no resctrl (llc_ways "
                "unknown): jobs there run without way allocation",
            )
            if blind
            else ()
        )
        return Plan(
            self.name,
            tuple(assignments),
            ordered,
            spreads=tuple(spreads),
            notes=notes if self.mode == "sns" else (),
        )

    def _hold(self, node: _Node, r: RunningJob) -> None:
        """Count what a running (or planned) job holds on ``node``."""
        node.used_cores += r.cpu_milli
        node.used_memory += r.memory_mib
        if self.mode == "sns" and r.program in self.explore:
            node.used_cores += node.cores  # a run being learned from has its nodes alone
        if r.llc_ways is not None:
            node.used_ways += r.llc_ways
        if r.membw_gbps is not None:
            node.used_membw += r.membw_gbps
        elif self.mode == "sns":  # no count recorded: the profile's, at the ways it holds
            profile = self.profiles.get(r.program or "")
            if profile is not None and profile.has_curves:
                ways = r.llc_ways if r.llc_ways is not None else profile.full_ways
                cores = max(1, r.cpu_milli // 1000)
                node.used_membw += profile.membw_at(ways, cores) * cores / profile.cores

    def _alpha(self, job: Job) -> float:
        return job.alpha if job.alpha is not None else self.default_alpha

    def _slots(self, job: Job, table: _Table) -> int:
        """``T``: the most of the job's processes one node holds (by cores)."""
        most = table.most_cores
        return max(1, most // job.cpu_milli) if job.cpu_milli > 0 else max(1, job.processes)

    def _demands(self, job: Job, nodes: _Table) -> tuple[list[Demand], str]:
        """The scales to try, in order, with the note a placement carries."""
        profile = self.profiles.get(job.program or "") if self.mode == "sns" else None
        slots = self._slots(job, nodes)
        allowed = node_counts(job)
        counts = allowed if job.is_gang else range(1, 2)
        trying = self._trying(job, allowed, slots, len(nodes))
        if self.mode == "cs":
            scales: tuple[int, ...] = SCALES
            note = ""
        elif trying is not None:
            scales = (trying,)
            note = (
                f"program {shorten_text(job.program or '')} is being learned: runs alone at scale "
                f"{trying}"
            )
        elif profile is None:
            scales = (1,)
            note = (
                f"no profile for {shorten_text(job.program)}: runs compact at scale 1"
                if job.program
                else "no CoshareProgram: runs compact at scale 1"
            )
        else:
            alpha = self._alpha(job)
            scales = tuple(
                k for k in profile.scale_order() if k == 1 or profile.speedup(k) >= alpha
            )
            note = ""
        out = []
        for k in scales:
            d = demand(profile, self._alpha(job), job.processes, slots, k)
            if d.nodes in counts and d.nodes <= len(nodes):
                out.append(d)
        if not out and 1 in scales:  # the job's node range admits no scale: its fewest nodes
            n = max(allowed.start, 1)
            if n <= len(nodes):
                base = demand(profile, self._alpha(job), job.processes, slots, 1)
                out.append(
                    Demand(1, n, -(-job.processes // n), base.ways, base.membw_gbps, base.speedup)
                )
        return out, note

    def _trying(self, job: Job, allowed: range, slots: int, cluster: int) -> int | None:
        """The scale a job of a program being learned tries (``None``: not learning, or its
        node range or the cluster does not allow that scale: it runs as a program without
        a profile)."""
        if self.mode != "sns" or not job.program or job.program not in self.explore:
            return None
        k = self.explore[job.program]
        n, c = nodes_at(k, job.processes, slots)
        counts = allowed if job.is_gang else range(1, 2)
        return k if n in counts and n <= cluster and c >= 1 else None

    def _alone(self, job: Job, d: Demand, table: _Table) -> bool:
        """Whether this placement is a learning run (its nodes to itself)."""
        return self._trying(job, node_counts(job), self._slots(job, table), len(table)) == d.scale

    def _refusal(self, job: Job, table: _Table) -> Unplaced | None:
        nodes = table.nodes
        if job.needs_device:
            return Unplaced(
                job.id,
                f"the {self.mode} policy places CPU jobs only (it needs a device)",
                "unsupported",
            )
        if job.is_gang:
            bad = gang_refusal(job)
            if bad is not None:
                return bad
        demands, _ = self._demands(job, table)
        if not demands:
            return Unplaced(
                job.id,
                "no scale factor gives a node count it allows "
                f"({job.nodes}..{job.nodes_max or job.nodes} nodes, cluster "
                f"{len(nodes)})",
                "never_fits",
            )
        for d in demands:
            if self._fits(job, d, table, empty=True) is not None:
                return None
        d = demands[0]
        most_ways = max((n.ways for n in nodes if n.ways is not None), default=None)
        if (
            d.ways is not None
            and most_ways is not None
            and d.ways > most_ways
            and all(n.ways is not None for n in nodes)
        ):
            program = shorten_text(job.program or "")
            return Unplaced(
                job.id,
                f"needs {d.ways} LLC ways per node (program "
                f"{program} at alpha {self._alpha(job):g}); the nodes have at "
                f"most {most_ways}",
                "never_fits",
            )
        return Unplaced(
            job.id,
            f"needs {d.nodes} nodes with {d.cores_per_node} "
            f"cores ({job.cpu_milli / 1000:g} per process) and {job.memory_mib} MiB "
            "per process even when empty; no such set in the cluster",
            "never_fits",
        )

    def _ok(self, job: Job, d: Demand, t: _Table, share: int, empty: bool) -> np.ndarray:
        """The nodes that take ``share`` of the job's processes at demand ``d`` (now, or
        ``empty``)."""
        cores = t.cores if empty else t.free_cores()
        memory = t.memory if empty else t.memory - t.used_memory
        need_cores, need_memory = job.cpu_milli * share, job.memory_mib * share
        if max(need_cores, need_memory) > _MOST:
            return np.zeros(len(t), dtype=bool)  # more than any node has (and than int64)
        ok = (need_cores <= cores) & (need_memory <= memory)
        if self.mode == "cs":
            return ok
        if not empty and self._alone(job, d, t):
            ok &= t.used_cores == 0
        if d.ways is not None:
            free = t.ways if empty else np.minimum(t.ways - t.used_ways, t.ways_cap)
            ok &= ~t.has_ways | (d.ways <= free)
        if d.membw_gbps is not None and not empty:
            more = d.membw_gbps * share / d.cores_per_node
            used = t.used_membw
            # a job alone on a node always fits its bandwidth
            ok &= ~t.has_membw | (used <= 0) | (used + more <= t.membw)
        return ok

    def _fits(self, job: Job, d: Demand, table: _Table, empty: bool = False) -> list[int] | None:
        """The ``n`` nodes for demand ``d``, or ``None``: within the group of nodes with the
        fewest equal idle cores that holds ``n``, else the whole cluster, the idlest first
        (by score, then position)."""
        ok = np.flatnonzero(self._ok(job, d, table, d.cores_per_node, empty))
        if len(ok) < d.nodes:
            return None
        if empty:
            return [int(i) for i in ok[: d.nodes]]
        idle = table.free_cores()[ok]
        if d.nodes == 1:
            within = ok[idle == idle.min()]
        else:
            values, counts = np.unique(idle, return_counts=True)
            enough = np.flatnonzero(counts >= d.nodes)
            within = ok[idle == values[enough[0]]] if len(enough) else ok
        scores = table.scores(within, self.ways_weight, self.mode == "cs")
        rank = within[np.lexsort((within, scores))]
        return [int(i) for i in rank[: d.nodes]]

    def _place(self, job: Job, table: _Table) -> tuple[list[Assignment], Spread] | None:
        nodes = table.nodes
        demands, note = self._demands(job, table)
        if self.mode == "cs":  # the lowest scale that fits now
            demands = sorted(demands, key=lambda d: d.scale)
        for d in demands:
            chosen = self._fits(job, d, table)
            if chosen is None:
                continue
            alone = self._alone(job, d, table)
            shares = split(job.processes, d.nodes)
            parts = []
            no_cat = [nodes[i].name for i in chosen if nodes[i].ways is None]
            for i, share in zip(chosen, shares, strict=True):
                node = nodes[i]
                ways = d.ways if (self.mode == "sns" and node.ways is not None) else None
                membw = (
                    d.membw_gbps * share / d.cores_per_node
                    if self.mode == "sns" and d.membw_gbps is not None
                    else None
                )
                held = node.cores if alone else job.cpu_milli * share
                table.add(i, held, job.memory_mib * share, ways or 0, membw or 0.0)
                spread = d.nodes > 1 or job.is_gang
                parts.append(
                    Assignment(
                        job.id,
                        node.name,
                        processes=share if spread else None,
                        llc_ways=ways,
                        membw_gbps=membw,
                    )
                )
            text = note
            if self.mode == "sns" and d.ways is not None and no_cat:
                shown = ", ".join(shorten_text(n) for n in no_cat[:4])
                text = f"{shown} without resctrl: runs there without way allocation"
            all_ways = d.ways if self.mode == "sns" and not no_cat else None
            cap = d.membw_gbps if self.mode == "sns" and self.mba else None
            return parts, Spread(job.id, d.scale, d.nodes, d.cores_per_node, all_ways, text, cap)
        return None

    def _waiting(self, job: Job, table: _Table) -> Unplaced:
        demands, _ = self._demands(job, table)
        tried = "; ".join(
            f"scale {d.scale}: {d.nodes} nodes x {d.cores_per_node} cores"
            + (
                f", {d.ways} ways, {d.membw_gbps:.1f} GB/s"
                if self.mode == "sns" and d.ways is not None and d.membw_gbps is not None
                else ""
            )
            for d in demands[:4]
        )
        return Unplaced(job.id, f"no set of nodes has room now ({tried}); it waits", "no_room")


def _with_spare_shares(
    assignments: list[Assignment], snapshot: Snapshot, nodes: list[_Node]
) -> list[Assignment]:
    """Each assignment with ways, with its share of its node's spare ways once every job of
    this plan has started (section 4.4: "gives away such unused resources to these jobs in
    equal shares, reclaiming them whenever a new job is dispatched to the same node")."""
    holders: dict[str, list[tuple[str, int]]] = {}
    for r in snapshot.running:
        if r.llc_ways is not None:
            holders.setdefault(r.node, []).append((r.id, r.llc_ways))
    for a in assignments:
        if a.llc_ways is not None:
            holders.setdefault(a.node, []).append((a.job, a.llc_ways))
    ways = {n.name: n.ways for n in nodes}
    out = []
    for a in assignments:
        total = ways.get(a.node)
        if a.llc_ways is not None and total is not None:
            a = replace(a, llc_ways_spare=floor_share(total, holders[a.node]))
        out.append(a)
    return out
