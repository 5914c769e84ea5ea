"""The ``collocate`` policy: CPU-only jobs on the idle cores of GPU jobs (Wu & Hong, IV-A).

A GPU job asks for a whole node's cores but keeps most of them idle (Table III: a load of
0.35-9.87 of 12). The paper's scheduler gives GPU jobs priority over CPU jobs, and larger
jobs (by ``ppn``) priority within each kind, with backfill; a GPU job's cores are all its own
during its *monitoring period*, ``P_M`` of its requested time, while its load is sampled.
After that the cores its measured load leaves idle, at most ``P_B`` of them, are lent to
CPU-only jobs until it ends. GPU jobs whose host-device copies exceed a threshold (300 MB/s
per process, section III-B3) are never collocated with: the copies slow CPU jobs down
whatever the load.

How coshare reads it:

- **Order and backfill.** GPU jobs, then CPU jobs, each by decreasing total cores, then in
  scheduler order; each job takes the first node (and devices) with room. The first job that
  finds none gets a *reservation* (Maui's backfill, reservation depth 1): the node where
  it can start soonest, judged by the requested times of what runs there (start +
  ``walltime_s``), and that start time. Later jobs (and borrowers) go on the reserved node
  only if their own requested time ends by then, so backfill never delays it. Without a
  clock in the snapshot no reservation is made.
- **Harvest pool** of a running GPU job ``G`` (a *donor*): whole cores, because cpusets
  partition cores (section III-B1, partitioned mode): ``min(P_B, floor(cores(G) - load(G)),
  cores(G) - 1)`` (it keeps one core however idle) less what CPU jobs already borrow from it.
  ``load(G)`` is what it wants: its measured load plus its run-queue delay (the time its
  tasks were runnable but waiting for a CPU, in cores; node facts, :mod:`coshare.ledger.facts`),
  the higher of the two sums over the sampled history and over the last interval; without
  wait facts, its load alone. A load that rises shrinks the pool at once. Borrowed cores never
  exceed ``cores(G) - load(G)``, so the node's combined load stays within its cores (section
  III-B2) whenever each job stays within what it holds.
- **Not harvested**, and the plan's notes say why, one note per reason: a GPU job that
  declared no requested time (no monitoring period can be defined), one still in its
  monitoring period, one with no measured load yet, one whose copy bandwidth exceeds the
  threshold or is unknown (a job the threshold cannot be checked for is not risked).
- **Give back.** When a donor's load rises after its cores were lent, so that what is lent
  exceeds its pool, the newest borrowers are asked back through the scheduler
  (:attr:`~coshare.model.Plan.requeue`), never left to starve on shared cores. On a live
  node the lent cores are out of the donor's cpuset, so its measured load can never exceed
  the cores it kept: a donor whose demand (load plus run-queue wait) fills at least
  :data:`SATURATED_SHARE` of the cores its cpuset holds (node facts, ``cpu_cores_held``)
  may need more than it has; it lends nothing, and all its borrowers are asked back. The wait
  is what shows that need where other processes share its cores: there its load alone stays
  below what it kept. (The simulator models no cpusets and publishes no such facts: there,
  the load is the demand.)
- **CPU jobs that fit no harvest** wait with the numbers: their cores, the most free on any
  node and the largest harvest open.

Pure and deterministic: no I/O, no clock (``now`` is the snapshot's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from coshare.model import MILLI, Assignment, Job, Plan, RunningJob, Snapshot, Unplaced
from coshare.policies.base import ClusterState, finish, priority_key, screened, some_names
from coshare.policies.waiting import explain_waiting, never_fits

#: The paper's values (section IV-C: "P_B is set to 9 out of 12 cores, and ... P_M to 1/3";
#: section III-B3: the 300 MB/s threshold).
DEFAULT_MONITOR_FRACTION = 1 / 3
DEFAULT_MAX_HARVEST_CORES = 9
DEFAULT_COPY_BW_LIMIT_MBPS = 300.0
#: A lender whose load fills this share of the cores its cpuset still holds is taken to need
#: its lent cores back (its load cannot show more than those cores).
SATURATED_SHARE = 0.9


@dataclass(frozen=True)
class Donor:
    """A running GPU job whose idle cores may be lent.

    Attributes:
        job: the GPU job.
        open_milli: cores it can still lend this cycle, in thousandths (whole cores).
        lent_milli: cores CPU jobs borrow from it already.
        pool_milli: cores it may lend in all: ``min(P_B, floor(cores - load), cores - 1)``.
        load_cores: its demand (:func:`measured_demand`): load plus run-queue wait.
        saturated: its demand fills the cores its cpuset holds (:data:`SATURATED_SHARE`): it
            lends nothing, and its borrowers are asked back.
        wait_cores: the run-queue wait within ``load_cores`` (``None``: no wait facts).
    """

    job: RunningJob
    open_milli: int
    lent_milli: int
    pool_milli: int
    load_cores: float
    saturated: bool = False
    wait_cores: float | None = None


def measured_load(job: RunningJob) -> float | None:
    """A job's CPU load as the pool is computed from: the higher of its mean and its last
    interval (``None``: not measured yet)."""
    loads = [v for v in (job.cpu_load_cores, job.cpu_load_last_cores) if v is not None]
    return max(loads) if loads else None


def demand_parts(job: RunningJob) -> tuple[float, float | None] | None:
    """What a job wants, as ``(load, wait)``: its measured CPU load and its run-queue delay
    (cores' worth of its tasks runnable but waiting for a CPU), taken over the sampled history
    or over the last interval, whichever sums higher. ``wait`` is ``None`` without wait facts;
    the whole is ``None`` before its load is measured."""
    pairs = [
        (load, wait)
        for load, wait in (
            (job.cpu_load_cores, job.cpu_wait_cores),
            (job.cpu_load_last_cores, job.cpu_wait_last_cores),
        )
        if load is not None
    ]
    if not pairs:
        return None
    return max(pairs, key=lambda p: p[0] + (p[1] or 0.0))


def measured_demand(job: RunningJob) -> float | None:
    """A job's demand for cores as the pool is computed from: load plus run-queue wait
    (:func:`demand_parts`); its load alone without wait facts (``None``: not measured)."""
    parts = demand_parts(job)
    return None if parts is None else parts[0] + (parts[1] or 0.0)


def harvest_pool_milli(job: RunningJob, load_cores: float, max_harvest_cores: int) -> int:
    """Whole cores a GPU job's load leaves idle, at most ``max_harvest_cores``, in milli.

    The job always keeps one whole core of its own, however low its load: its process runs
    somewhere, and the node refuses a loan that would leave its cpuset empty (a ``P_B`` equal
    to its cores would otherwise lend them all; the paper's 9 of 12 never meets this)."""
    idle = math.floor((job.cpu_milli - load_cores * MILLI) / MILLI + 1e-9)
    kept_one = math.ceil(job.cpu_milli / MILLI - 1e-9) - 1
    return max(0, min(idle, kept_one, max_harvest_cores)) * MILLI


@dataclass(frozen=True)
class CollocatePolicy:
    """GPU jobs first, CPU jobs backfilled, and onto GPU jobs' idle cores after ``P_M``.

    Attributes:
        monitor_fraction: ``P_M``, in (0, 1].
        max_harvest_cores: ``P_B``, cores.
        copy_bw_limit_mbps: donors above this copy bandwidth are never harvested.
    """

    monitor_fraction: float = DEFAULT_MONITOR_FRACTION
    max_harvest_cores: int = DEFAULT_MAX_HARVEST_CORES
    copy_bw_limit_mbps: float = DEFAULT_COPY_BW_LIMIT_MBPS
    name: str = "collocate"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place GPU jobs, then CPU jobs on free cores, then CPU jobs on harvested cores."""
        donors, notes = self.donors(snapshot)
        requeue, donors = _give_back(snapshot, donors)
        # Borrowers hold their donor's cores, not the node's: the donor's reservation covers
        # them (coshare.cycle.verify counts them the same way).
        own = tuple(
            replace(r, cpu_milli=0) if _borrows(r, snapshot) else r for r in snapshot.running
        )
        state = ClusterState(replace(snapshot, running=own), strict_threads=True)
        unplaced = never_fits(snapshot, snapshot.pending)
        candidates = sorted((j for j in snapshot.pending if j.id not in unplaced), key=_order)
        held = _holds(snapshot)
        reserved: tuple[int, float] | None = None
        waiting: list[Job] = []
        for job, may in screened(state, candidates):
            if may and _place(state, job, _banned(job, reserved, snapshot.now_s)):
                a = state.assignments[-1]
                held.append(
                    _Hold(
                        job.id,
                        a.node,
                        _end(snapshot.now_s, job.walltime_s),
                        job.total_cpu_milli,
                        job.total_memory_mib,
                        a.devices,
                        job.device_memory_mib,
                    )
                )
                continue
            waiting.append(job)
            if reserved is None and snapshot.now_s is not None:
                reserved = _reservation(state, job, held, snapshot.now_s)
        still, donors = self._harvest(state, waiting, donors, reserved, snapshot.now_s)
        reasons = explain_waiting(state, still)
        for job in still:
            reasons[job.id] = _with_harvest(reasons[job.id], job, donors)
        unplaced.update(reasons)
        plan = finish(self.name, snapshot, state, unplaced, notes)
        return replace(plan, requeue=tuple(requeue))

    def donors(self, snapshot: Snapshot) -> tuple[list[Donor], list[str]]:
        """The running GPU jobs whose cores may be lent now, and notes on those that may not."""
        # By job and node: a GPU job on several nodes lends each node's cores apart.
        lent: dict[tuple[str, str], int] = {}
        for r in snapshot.running:
            if r.harvest_from is not None:
                key = (r.harvest_from, r.node)
                lent[key] = lent.get(key, 0) + r.cpu_milli
        cores = {n.name: n.cpu_milli for n in snapshot.nodes}
        why: dict[str, list[str]] = {}
        out: list[Donor] = []
        for r in snapshot.running:
            if not r.devices or r.state != "running" or r.cpu_milli < MILLI:
                continue
            reason = self._not_donor(r, snapshot.now_s)
            parts = demand_parts(r)
            if reason is None and parts is not None:
                load, wait = parts
                demand = load + (wait or 0.0)
                pool = harvest_pool_milli(r, demand, self.max_harvest_cores)
                given = lent.get((r.id, r.node), 0)
                full = saturated(r, demand)
                if full:
                    pool = 0
                    why.setdefault(
                        f"what they want (load plus run-queue wait) fills "
                        f"{SATURATED_SHARE:g} x the cores their cpusets hold",
                        [],
                    ).append(r.id)
                out.append(Donor(r, pool - given, given, pool, demand, full, wait))
            elif reason is not None:
                why.setdefault(reason, []).append(r.id)
        notes = [
            f"GPU jobs {some_names(ids)} lend no cores: {reason}" for reason, ids in why.items()
        ]
        small = sorted(n for n, c in cores.items() if 0 < c < self.max_harvest_cores * MILLI)
        if small and any(d.job.node in small for d in out):
            notes.append(
                f"collocate.max_harvest_cores {self.max_harvest_cores} is above the "
                f"cores of nodes {some_names(small)}: their GPU jobs lend at most what "
                "their load leaves idle"
            )
        return out, notes

    def _not_donor(self, r: RunningJob, now_s: float | None) -> str | None:
        """Why a running GPU job lends no cores, or ``None`` when it may (given a load)."""
        if r.walltime_s is None:
            return (
                "no requested time (CoshareWalltime or the scheduler's limit), so no "
                "monitoring period P_M x requested time can end"
            )
        if r.copy_bw_mbps is None:
            return "copy bandwidth unknown (no NVML PCIe figure, no CoshareCopyBandwidth)"
        if r.copy_bw_mbps > self.copy_bw_limit_mbps:
            return (
                f"copy bandwidth above collocate.copy_bw_limit_mbps "
                f"{self.copy_bw_limit_mbps:g} MB/s (section III-B3)"
            )
        if now_s is None or r.start_time_s is None:
            return "no start time or clock in the snapshot"
        if now_s - r.start_time_s < self.monitor_fraction * r.walltime_s:
            return (
                f"in their monitoring period (P_M = {self.monitor_fraction:g} of the "
                "requested time)"
            )
        if measured_load(r) is None:
            return "no measured CPU load in the node's facts"
        return None

    def _harvest(
        self,
        state: ClusterState,
        jobs: Sequence[Job],
        donors: list[Donor],
        reserved: tuple[int, float] | None,
        now_s: float | None,
    ) -> tuple[list[Job], list[Donor]]:
        """Place CPU jobs on open harvest pools (first donor in snapshot order with room);
        the jobs still waiting, and the donors with what they have left."""
        open_milli = [d.open_milli for d in donors]
        waiting = []
        for job in jobs:
            if job.needs_device or job.processes < 1:
                waiting.append(job)
                continue
            banned = _banned(job, reserved, now_s)
            for k, donor in enumerate(donors):
                node = state.node_index[donor.job.node]
                if (
                    node != banned
                    and job.total_cpu_milli <= open_milli[k]
                    and job.total_memory_mib <= state.node_free_mem[node]
                ):
                    open_milli[k] -= job.total_cpu_milli
                    state.node_free_mem[node] -= job.total_memory_mib
                    state.node_jobs[node] += 1
                    state.assignments.append(
                        Assignment(job.id, donor.job.node, harvest_from=donor.job.id)
                    )
                    state.changed()
                    break
            else:
                waiting.append(job)
        return waiting, [replace(d, open_milli=m) for d, m in zip(donors, open_milli, strict=True)]


@dataclass(frozen=True)
class _Hold:
    """What a running or just-placed job holds on its node, and when its request ends."""

    job: str
    node: str
    end_s: float
    cpu_milli: int
    memory_mib: int
    devices: tuple[str, ...]
    device_memory_mib: int
    donor: str | None = None


def _end(now_s: float | None, walltime_s: float | None, start_s: float | None = None) -> float:
    start = now_s if start_s is None else start_s
    if start is None or walltime_s is None:
        return math.inf
    return start + walltime_s


def _holds(snapshot: Snapshot) -> list[_Hold]:
    return [
        _Hold(
            r.id,
            r.node,
            _end(snapshot.now_s, r.walltime_s, r.start_time_s),
            r.cpu_milli,
            r.memory_mib,
            r.devices,
            r.device_memory_mib,
            r.harvest_from,
        )
        for r in snapshot.running
    ]


def _reservation(
    state: ClusterState, job: Job, held: Sequence[_Hold], now_s: float
) -> tuple[int, float] | None:
    """The node where ``job`` can start soonest once requested times run out, and when."""
    best: tuple[float, int] | None = None
    for i, node in enumerate(state.nodes):
        if node.cpu_milli < job.total_cpu_milli or node.memory_mib < job.total_memory_mib:
            continue
        mine = [h for h in held if h.node == node.name]
        for t in sorted({now_s, *(h.end_s for h in mine if now_s < h.end_s < math.inf)}):
            alive = [h for h in mine if h.end_s > t]
            ids = {h.job for h in alive}
            # A borrower's cores are its donor's while the donor runs (verify counts so too).
            cpu = sum(h.cpu_milli for h in alive if h.donor is None or h.donor not in ids)
            mem = sum(h.memory_mib for h in alive)
            used = {d.id: 0 for d in node.devices}
            for h in alive:
                for d in h.devices:
                    used[d] = used.get(d, 0) + h.device_memory_mib
            devices = sum(
                1 for d in node.devices if d.memory_mib - used[d.id] >= job.device_memory_mib
            )
            if (
                node.cpu_milli - cpu >= job.total_cpu_milli
                and node.memory_mib - mem >= job.total_memory_mib
                and (not job.needs_device or devices >= job.device_count)
            ):
                if best is None or t < best[0]:
                    best = (t, i)
                break
    return None if best is None else (best[1], best[0])


def _banned(job: Job, reserved: tuple[int, float] | None, now_s: float | None) -> int | None:
    """The reserved node, unless ``job``'s requested time ends before the reservation."""
    if reserved is None:
        return None
    node, start_s = reserved
    return None if _end(now_s, job.walltime_s) <= start_s else node


def _place(state: ClusterState, job: Job, banned: int | None) -> bool:
    """First fit of ``job`` on any node but ``banned``."""
    if job.needs_device:
        ok = state.device_ok(job)
        if banned is not None:
            ok &= state.dev_node != banned
        nodes = state.nodes_with_devices(job, ok)
        if len(nodes) == 0:
            return False
        node = int(nodes[0])
        state.place(job, node, state.first_devices_on(node, ok, job.device_count))
        return True
    host = state.host_ok(job)
    if banned is not None:
        host[banned] = False
    hits = host.nonzero()[0]
    if len(hits) == 0:
        return False
    state.place(job, int(hits[0]))
    return True


def _order(job: Job) -> tuple[bool, int, tuple[int, float, str]]:
    """GPU jobs first, then larger ``ppn`` (total cores) first, then scheduler order."""
    return (not job.needs_device, -job.total_cpu_milli, priority_key(job))


def _borrows(r: RunningJob, snapshot: Snapshot) -> bool:
    """Whether a running job holds harvested cores of a donor that still runs on its node."""
    if r.harvest_from is None:
        return False
    return any(d.id == r.harvest_from and d.node == r.node and d.devices for d in snapshot.running)


def _give_back(snapshot: Snapshot, donors: list[Donor]) -> tuple[list[Unplaced], list[Donor]]:
    """Borrowers to requeue where a donor lends more than its pool now, newest first."""
    requeue: list[Unplaced] = []
    kept: list[Donor] = []
    for donor in donors:
        if donor.open_milli >= 0:
            kept.append(donor)
            continue
        borrowers = sorted(
            (
                r
                for r in snapshot.running
                if r.harvest_from == donor.job.id and r.node == donor.job.node
            ),
            key=lambda r: (-(r.start_time_s or 0.0), r.id),
        )
        over = -donor.open_milli
        wait = donor.wait_cores
        what = "its load" if wait is None else "its demand"
        parts = (
            ""
            if wait is None
            else (
                f" (load {donor.load_cores - wait:.3g} plus {wait:.3g} waiting for a CPU, "
                "run-queue delay)"
            )
        )
        if donor.saturated and wait is None:
            why = (
                f"its load {donor.load_cores:.3g} fills the {donor.job.cpu_cores_held} "
                f"cores it kept while lending {donor.lent_milli / MILLI:g}, so it may need "
                "more than can be measured"
            )
        elif donor.saturated:
            why = (
                f"its demand of {donor.load_cores:.3g} cores{parts} is at least "
                f"{SATURATED_SHARE:g} x the {donor.job.cpu_cores_held} cores it kept while "
                f"lending {donor.lent_milli / MILLI:g}"
            )
        else:
            why = (
                f"{what} rose to {donor.load_cores:.3g} of {donor.job.cpu_milli / MILLI:g} "
                f"cores{parts}, so it can lend {donor.pool_milli // MILLI} where "
                f"{donor.lent_milli / MILLI:g} are lent"
            )
        for r in borrowers:
            if over <= 0:
                break
            over -= r.cpu_milli
            requeue.append(
                Unplaced(
                    r.id,
                    (
                        f"GPU job {donor.job.id} on {donor.job.node} needs its cores back: {why}; "
                        "requeued through the scheduler"
                    ),
                    "no_room",
                )
            )
        # What the requeued jobs free is lent again only once they have left (next cycle).
        kept.append(replace(donor, open_milli=0))
    return requeue, kept


def saturated(job: RunningJob, demand_cores: float) -> bool:
    """Whether a GPU job whose demand is ``demand_cores`` needs every core it holds: its
    demand fills :data:`SATURATED_SHARE` of the cores its cpuset holds (node facts; ``False``
    without them)."""
    held = job.cpu_cores_held
    return held is not None and demand_cores >= SATURATED_SHARE * held


def _with_harvest(u: Unplaced, job: Job, donors: Sequence[Donor]) -> Unplaced:
    """A waiting CPU job's reason, with the largest harvest open (the numbers to act on)."""
    if job.needs_device:
        return u
    best = max(donors, key=lambda d: d.open_milli, default=None)
    if best is None:
        extra = "no GPU job lends cores now"
    else:
        extra = (
            f"the largest harvest open is {best.open_milli // MILLI} cores of GPU job "
            f"{best.job.id} on {best.job.node}, and this job needs "
            f"{job.total_cpu_milli / MILLI:g}"
        )
    return Unplaced(u.job, f"{u.reason}; {extra}", u.code)
