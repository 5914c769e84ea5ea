"""Gangs for every policy: one mechanism places multi-node jobs, the policy the rest.

:class:`GangPlanner` wraps any policy (:func:`coshare.policies.make_policy` wraps them all).
Each cycle it

1. refuses gangs whose fields do not hold together (``invalid``, naming the field) and gangs
   no set of empty nodes could hold (``never_fits``, with the counts);
2. places the gangs in scheduler order (those past ``age_limit_s`` first), all nodes of a gang
   at once or none: on each node its share of the processes (:func:`coshare.ledger.gangs.split`)
   with their cores and memory, and ``device_count`` devices. With ``whole_nodes`` (the
   ``exclusive`` policy, Spread-n-Share's CE) a gang takes idle nodes and nothing else runs
   on them; the sharing policies give it a per-node share, on the nodes with the least room
   that still hold it (tight packing leaves whole nodes for wider gangs);
3. an aged gang that fits nowhere reserves, backfill style (EASY), the nodes that free up
   first: a node's expected end is the latest ``start + walltime`` of what it holds, and the
   gang's expected start (the shadow time) is the latest of its nodes'. Other jobs may use a
   reserved node only when their walltime ends before the shadow time; when an end is unknown,
   not at all;
4. hands the single-node jobs to the wrapped policy, on a snapshot where the gangs' parts are
   planned placements and whole-node gangs' and reserved nodes are left out; a second pass
   offers the reserved nodes to the single-node jobs that end before the shadow time.

Pure and deterministic like every policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from coshare.ledger.gangs import gang_problems, node_counts, split
from coshare.model import Assignment, Job, Node, Plan, RunningJob, Snapshot, Unplaced
from coshare.policies.aging import split_aged
from coshare.policies.base import ClusterState, Ints, Mask, Policy, priority_key
from coshare.policies.waiting import never_fits

#: A node's capacity when a job asks for no memory or no cores (no limit from that resource).
_UNLIMITED = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class GangPlanner:
    """A policy with gangs placed by the shared mechanism (see the module docstring).

    Attributes:
        inner: the policy that places single-node jobs.
        whole_nodes: a gang takes idle nodes and keeps them to itself (exclusive).
        strict_threads: whether declared device threads stay within the hardware's.
        age_limit_s: pending time after which a gang that fits nowhere reserves nodes.
        max_reserved_gangs: how many aged gangs may hold nodes at once.
        refuse_gangs: when set, gangs are refused ``unsupported`` with this reason and the
            wrapped policy plans the rest as it would alone (a policy whose own admission or
            reservation the shared mechanism would bypass: ``membw``, ``collocate``).
    """

    inner: Policy
    whole_nodes: bool = False
    strict_threads: bool = True
    age_limit_s: float | None = 3600.0
    max_reserved_gangs: int = 1
    refuse_gangs: str | None = None

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.inner.name

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place the gangs, then let the wrapped policy place the rest."""
        if getattr(self.inner, "places_gangs", False):
            # a policy that chooses gangs' nodes itself (Spread-n-Share's scale factor)
            # sets ``places_gangs = True`` and uses this module's pieces as it sees fit
            return self.inner.plan(snapshot)
        gangs = [j for j in snapshot.pending if j.is_gang]
        if self.refuse_gangs is not None and gangs:
            return self._refuse(snapshot, self.refuse_gangs)
        held = running_gang_nodes(snapshot) if self.whole_nodes else set()
        if not gangs and not held:
            return self.inner.plan(snapshot)  # the common case costs nothing
        state = ClusterState(snapshot, strict_threads=self.strict_threads)
        unplaced: dict[str, Unplaced] = {}
        empty = _EmptyCluster(snapshot.nodes)
        for job in gangs:
            refusal = gang_refusal(job) or gang_never_fits(empty, job)
            if refusal is not None:
                unplaced[job.id] = refusal
        for name in held:  # whole nodes of running gangs: nothing else goes there
            state.node_free_cpu[state.node_index[name]] = 0
        order = sorted((j for j in gangs if j.id not in unplaced), key=priority_key)
        aged, young = split_aged(snapshot, order, self.age_limit_s)
        aged_ids = {j.id for j in aged}
        reserved: Mask = np.zeros(len(snapshot.nodes), dtype=np.bool_)
        shadow: list[float] = []  # the earliest expected start among the reservations
        for job in aged + young:
            fits_before = _ends_before(snapshot, job, min(shadow, default=math.inf))
            cap = place_gang(state, job, self.whole_nodes, None if fits_before else reserved)
            if cap is None:
                continue
            if job.id in aged_ids and len(shadow) < self.max_reserved_gangs:
                made = reserve_nodes(
                    state, snapshot, job, reserved, self.whole_nodes, self.age_limit_s
                )
                if made is not None:
                    unplaced[job.id], start = made
                    shadow.append(start)
                    continue
            unplaced[job.id] = _waiting(job, cap, self.whole_nodes)
        return self._rest(snapshot, state, unplaced, held, reserved, min(shadow, default=0.0))

    def _refuse(self, snapshot: Snapshot, reason: str) -> Plan:
        """The wrapped policy's plan of the single-node jobs (trials and requeues kept), with
        every gang ``unsupported``."""
        singles = tuple(j for j in snapshot.pending if not j.is_gang)
        plan = self.inner.plan(replace(snapshot, pending=singles))
        refused = {
            j.id: Unplaced(j.id, f"job {j.id}: {reason}", "unsupported")
            for j in snapshot.pending
            if j.is_gang
        }
        left = {u.job: u for u in plan.unplaced} | refused
        ordered = tuple(left[j.id] for j in snapshot.pending if j.id in left)
        return replace(plan, unplaced=ordered)

    def _rest(
        self,
        snapshot: Snapshot,
        state: ClusterState,
        unplaced: dict[str, Unplaced],
        held: set[str],
        reserved: Mask,
        shadow_s: float,
    ) -> Plan:
        """The single-node jobs by the wrapped policy, around the gangs, and the merged plan."""
        gang_parts = list(state.assignments)
        out = {n for n in held}
        if self.whole_nodes:
            out |= {a.node for a in gang_parts}
        closed = out | {state.node_names[i] for i in np.flatnonzero(reserved).tolist()}
        singles = tuple(j for j in snapshot.pending if not j.is_gang)
        jobs = {j.id: j for j in snapshot.pending}
        planned = tuple(_as_running(jobs[a.job], a, snapshot.now_s) for a in gang_parts)
        first = self.inner.plan(_without(snapshot, closed, planned, singles))
        assignments = gang_parts + list(first.assignments)
        left = {u.job: u for u in first.unplaced}
        notes = list(first.notes)
        late = tuple(jobs[j] for j in left if _ends_before(snapshot, jobs[j], shadow_s))
        if late and reserved.any():
            more = tuple(_as_running(jobs[a.job], a, snapshot.now_s) for a in first.assignments)
            second = self.inner.plan(_without(snapshot, out, planned + more, late))
            assignments += second.assignments
            left.update({u.job: u for u in second.unplaced})
            for a in second.assignments:
                left.pop(a.job, None)
            notes += second.notes
        if closed:
            full = never_fits(
                snapshot, [jobs[j] for j, u in left.items() if u.code == "never_fits"]
            )
            for job_id, u in list(left.items()):
                if u.code == "never_fits" and job_id not in full:
                    left[job_id] = Unplaced(
                        job_id,
                        "fits only nodes held by gangs or reserved for one this cycle; it waits",
                        "no_room",
                    )
        unplaced.update(left)
        ordered = tuple(unplaced[j.id] for j in snapshot.pending if j.id in unplaced)
        return Plan(self.name, tuple(assignments), ordered, notes=tuple(notes))


def running_gang_nodes(snapshot: Snapshot) -> set[str]:
    """Nodes that hold part of a job running (or planned) on more than one node."""
    on: dict[str, set[str]] = {}
    for r in snapshot.running:
        on.setdefault(r.id, set()).add(r.node)
    return {n for nodes in on.values() if len(nodes) > 1 for n in nodes}


def gang_refusal(job: Job) -> Unplaced | None:
    """``invalid`` naming the first field of a gang that does not hold together."""
    problems = gang_problems(job)
    if not problems:
        return None
    field, value, allowed = problems[0]
    return Unplaced(job.id, f"job {job.id}: {field} is {value} (allowed: {allowed})", "invalid")


def capacity(state: ClusterState, job: Job, idle_only: bool, *, empty: bool = False) -> Ints:
    """Per node, how many of ``job``'s processes it could take now (``empty``: if it were
    empty), 0 where it lacks ``device_count`` devices that could hold the job."""
    cpu = state.node_total_cpu if empty else state.node_free_cpu
    mem = state.node_total_mem if empty else state.node_free_mem
    cap: Ints = np.full(len(state.nodes), _UNLIMITED, dtype=np.int64)
    if job.cpu_milli > 0:
        cap = np.minimum(cap, np.maximum(cpu, 0) // job.cpu_milli)
    if job.memory_mib > 0:
        cap = np.minimum(cap, np.maximum(mem, 0) // job.memory_mib)
    if job.processes_per_node is not None:
        cap = np.minimum(cap, job.processes_per_node)
    if job.needs_device:
        m, t = job.device_memory_mib, job.device_threads
        total = state.dev_total_mem if empty else state.dev_free_mem
        ok = (total >= m) & (state.dev_threads >= t)
        if state.strict and not empty:
            ok &= state.dev_free_thr >= t
        if idle_only and not empty:
            ok &= state.dev_jobs == 0
        counts = np.bincount(state.dev_node[ok], minlength=len(state.nodes))
        cap = np.where(counts >= job.device_count, cap, 0)
    if idle_only and not empty:
        cap = np.where(state.node_jobs == 0, cap, 0)
    return cap


def fewest_nodes(job: Job, cap: Ints, weights: Ints | None = None) -> int | None:
    """The fewest nodes the job may take that ``cap`` holds; ``None`` when no count does.
    ``weights``: how many nodes each entry of ``cap`` stands for (kinds of node).

    Only the counts that can exist are tried: no fewer than the largest capacity needs to
    hold every process, no more than the nodes that hold one; the counts in between are
    tested together, a block at a time, so a range up to 2**20 costs little."""
    counts = np.ones(len(cap), dtype=np.int64) if weights is None else weights
    allowed = node_counts(job)
    if not len(cap) or not len(allowed):
        return None
    top = int(cap.max())
    if top <= 0 or int(np.dot(cap.astype(np.int64), counts)) < job.processes:
        return None  # fewer places than processes, however the job is split
    order = np.argsort(cap, kind="stable")
    values = cap[order]
    # at_least[i]: nodes whose capacity is >= values[i] (a suffix sum), so "how many nodes
    # hold x" is one binary search
    at_least = np.concatenate([np.cumsum(counts[order][::-1])[::-1], [0]])
    low = max(allowed.start, -(-job.processes // top))
    high = min(allowed.stop - 1, int(at_least[int(np.searchsorted(values, 1))]))
    block = 64
    while low <= high:
        n = np.arange(low, min(high, low + block - 1) + 1, dtype=np.int64)
        q, r = np.divmod(job.processes, n)
        have = at_least[np.searchsorted(values, q)]
        have_big = np.where(r > 0, at_least[np.searchsorted(values, q + 1)], n)
        fits = np.flatnonzero((have >= n) & (have_big >= r))
        if len(fits):
            return int(n[fits[0]])
        low += block
        block *= 4
    return None


def choose_nodes(job: Job, cap: Ints, order_key: Ints) -> tuple[list[int], list[int]] | None:
    """The nodes (and processes on each) for the fewest node count that fits ``cap``, taking
    nodes by ``order_key`` (then index); ``None`` when no allowed count fits."""
    n = fewest_nodes(job, cap)
    if n is not None:
        shares = split(job.processes, n)
        big, small = shares[0], shares[-1]
        wide = shares.count(big) if big != small else 0
        order = np.lexsort((np.arange(len(cap)), order_key))
        first = order[cap[order] >= big][:wide]
        left = cap >= small
        left[first] = False
        rest = order[left[order]][: n - wide]
        return [int(i) for i in first] + [int(i) for i in rest], shares
    return None


def place_gang(
    state: ClusterState, job: Job, whole_nodes: bool, reserved: Mask | None
) -> Ints | None:
    """Place all of ``job`` on its nodes now, or nothing; nodes in ``reserved`` are not used.

    Returns:
        ``None`` when placed, else each node's capacity for it (for the reason), or an empty
        array when a quick bound turned it away."""
    if _surely_not(state, job, whole_nodes):
        return np.zeros(0, dtype=np.int64)  # turned away without the per-node counts
    cap = capacity(state, job, whole_nodes)
    if reserved is not None:
        cap = np.where(reserved, 0, cap)
    # exclusive takes nodes in order; sharing, the tightest nodes that hold a share
    key = np.zeros(len(cap), dtype=np.int64) if whole_nodes else cap
    chosen = choose_nodes(job, cap, key)
    if chosen is None:
        return cap
    nodes, shares = chosen
    ok = _device_mask(state, job, whole_nodes)
    for node, count in zip(nodes, shares, strict=True):
        devices: list[int] = []
        if job.needs_device:
            devices = (
                state.first_devices_on(node, ok, job.device_count)
                if whole_nodes
                else state.least_free_on(node, ok, job.device_count)
            )
        state.place(job, node, sorted(devices), count)
    if whole_nodes:  # the nodes are the gang's: nothing else may be planned there
        for node in nodes:
            state.node_free_cpu[node] = 0
            state.changed()
    return None


def _surely_not(state: ClusterState, job: Job, whole_nodes: bool) -> bool:
    """A quick "fewer nodes than it needs could take even one process": once a large cycle
    has filled the cluster, most gangs are turned away here without the per-device work of
    :func:`capacity`."""
    most_mem, most_cpu, most_host = state.most_free(whole_nodes)
    if (
        job.cpu_milli > most_cpu
        or job.memory_mib > most_host
        or (job.needs_device and job.device_memory_mib > most_mem)
    ):
        return True
    low = node_counts(job).start
    ok = (state.node_free_cpu >= job.cpu_milli) & (state.node_free_mem >= job.memory_mib)
    if job.needs_device:
        ok &= state.node_most_free_device_mem() >= job.device_memory_mib
    return int(np.count_nonzero(ok)) < low


def _device_mask(state: ClusterState, job: Job, idle_only: bool) -> Mask:
    m, t = job.device_memory_mib, job.device_threads
    ok: Mask = (state.dev_free_mem >= m) & (state.dev_threads >= t)
    if state.strict:
        ok &= state.dev_free_thr >= t
    if idle_only:
        ok &= state.dev_jobs == 0
    return ok


class _EmptyCluster:
    """The cluster's few distinct kinds of node, for "could it ever fit" at the cost of a kind
    rather than a node (a 10,000-device cluster has a handful)."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        kinds: dict[tuple[int, int, tuple[tuple[int, int], ...]], int] = {}
        for n in nodes:
            key = (n.cpu_milli, n.memory_mib, tuple((d.memory_mib, d.threads) for d in n.devices))
            kinds[key] = kinds.get(key, 0) + 1
        self.kinds = list(kinds)
        self.counts: Ints = np.array(list(kinds.values()), dtype=np.int64)
        self.nodes = len(nodes)

    def capacity(self, job: Job) -> Ints:
        """Per kind of node (``counts`` of each), how many of ``job``'s processes an empty one
        holds."""
        out = []
        for cpu, mem, devices in self.kinds:
            cap = _UNLIMITED
            if job.cpu_milli > 0:
                cap = min(cap, cpu // job.cpu_milli)
            if job.memory_mib > 0:
                cap = min(cap, mem // job.memory_mib)
            if job.processes_per_node is not None:
                cap = min(cap, job.processes_per_node)
            if job.needs_device:
                fit = sum(
                    1 for m, t in devices if m >= job.device_memory_mib and t >= job.device_threads
                )
                cap = cap if fit >= job.device_count else 0
            out.append(cap)
        return np.array(out, dtype=np.int64)


def gang_never_fits(empty: _EmptyCluster, job: Job) -> Unplaced | None:
    """``never_fits`` with the counts when no allowed node count fits even on empty nodes."""
    cap = empty.capacity(job)
    if fewest_nodes(job, cap, empty.counts) is not None:
        return None
    low = node_counts(job).start
    share = -(-job.processes // max(low, 1))
    able = int(empty.counts[cap >= share].sum())
    return Unplaced(
        job.id,
        f"needs {low} nodes with room for {share} processes each "
        f"({_per_process(job)}); the cluster has {able} such nodes of "
        f"{empty.nodes}",
        "never_fits",
    )


def _per_process(job: Job) -> str:
    dev = (
        (
            f", and {job.device_count} device(s) with {job.device_memory_mib} MiB and "
            f"{job.device_threads} threads per node"
        )
        if job.needs_device
        else ""
    )
    return f"{job.cpu_milli / 1000:g} cores and {job.memory_mib} MiB per process{dev}"


def _waiting(job: Job, cap: Ints, whole_nodes: bool) -> Unplaced:
    low = node_counts(job).start
    share = -(-job.processes // max(low, 1))
    now = (
        f"{int((cap >= share).sum())} have it now"
        if len(cap)
        else f"fewer than {low} have room for even one of its processes now"
    )
    idle = " idle" if whole_nodes else ""
    return Unplaced(
        job.id,
        f"needs {low}{idle} nodes with room for {share} processes each "
        f"({_per_process(job)}); {now}; it waits for running jobs to finish",
        "no_room",
    )


def expected_ends(snapshot: Snapshot, state: ClusterState) -> npt.NDArray[np.float64]:
    """Per node, when it is expected to be empty: the latest ``start + walltime`` of what it
    holds (planned parts of this cycle included), ``now`` when it holds nothing, infinity when
    an end is unknown."""
    now = snapshot.now_s if snapshot.now_s is not None else 0.0
    ends = np.full(len(state.nodes), now, dtype=np.float64)
    for r in snapshot.running:
        i = state.node_index[r.node]
        known = r.start_time_s is not None and r.walltime_s is not None
        end = r.start_time_s + r.walltime_s if known else math.inf  # type: ignore[operator]
        ends[i] = max(ends[i], end)
    jobs = {j.id: j for j in snapshot.pending}
    for a in state.assignments:
        i = state.node_index[a.node]
        wall = jobs[a.job].walltime_s
        ends[i] = max(ends[i], now + wall if wall is not None else math.inf)
    return ends


def reserve_nodes(
    state: ClusterState,
    snapshot: Snapshot,
    job: Job,
    reserved: Mask,
    whole_nodes: bool,
    age_limit_s: float | None,
) -> tuple[Unplaced, float] | None:
    """Hold back, for an aged gang that fits nowhere now, the nodes expected to empty first.

    Returns its ``reserved`` reason and the expected start (shadow time), or ``None`` when no
    set of free-to-reserve nodes could ever hold it."""
    cap = np.where(reserved, 0, capacity(state, job, False, empty=True))
    ends = expected_ends(snapshot, state)
    rank = np.argsort(np.argsort(ends, kind="stable"), kind="stable").astype(np.int64)
    chosen = choose_nodes(job, cap, rank)
    if chosen is None:
        return None
    nodes, _ = chosen
    reserved[nodes] = True
    start = float(ends[nodes].max())
    now = snapshot.now_s if snapshot.now_s is not None else 0.0
    names = ", ".join(state.node_names[i] for i in nodes[:8]) + (", ..." if len(nodes) > 8 else "")
    when = (
        f"others may use them only if they end within {start - now:.0f} s, its expected start"
        if math.isfinite(start)
        else "no other job may use them (a running job's end is unknown)"
    )
    limit = f"{age_limit_s:g}" if age_limit_s is not None else "-"
    age = now - job.submit_time_s
    return Unplaced(
        job.id,
        f"pending {age:.0f} s, past age_limit_s {limit}: {len(nodes)} nodes "
        f"({names}) are held for it; {when}",
        "reserved",
    ), start


def _ends_before(snapshot: Snapshot, job: Job, shadow_s: float) -> bool:
    """Whether ``job`` started now ends by ``shadow_s`` (walltime known)."""
    if not math.isfinite(shadow_s):
        return False
    now = snapshot.now_s if snapshot.now_s is not None else 0.0
    return job.walltime_s is not None and now + job.walltime_s <= shadow_s


def _as_running(job: Job, a: Assignment, now: float | None) -> RunningJob:
    """A planned assignment as what it holds, for the next pass."""
    count = a.processes if a.processes is not None else job.processes
    device = bool(a.devices)
    return RunningJob(
        id=job.id,
        node=a.node,
        devices=a.devices,
        device_memory_mib=job.device_memory_mib if device else 0,
        device_threads=job.device_threads if device else 0,
        cpu_milli=job.cpu_milli * count,
        memory_mib=job.memory_mib * count,
        state="planned",
        start_time_s=now,
        walltime_s=job.walltime_s,
    )


def _without(
    snapshot: Snapshot, closed: set[str], planned: tuple[RunningJob, ...], pending: tuple[Job, ...]
) -> Snapshot:
    """``snapshot`` without the ``closed`` nodes, with ``planned`` held, and only ``pending``."""
    nodes: tuple[Node, ...] = tuple(n for n in snapshot.nodes if n.name not in closed)
    running = tuple(r for r in snapshot.running + planned if r.node not in closed)
    return replace(snapshot, nodes=nodes, running=running, pending=pending)
