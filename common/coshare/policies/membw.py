"""The ``membw`` policy: never co-schedule two memory-bandwidth-bound jobs (poncos).

Breitbart, Weidendorfer and Trinitis, "Automatic co-scheduling based on main memory bandwidth
usage" (``shared/papers/membw-coscheduling-poncos.md``): a job's *use* of its node's memory
bandwidth is ``1 - available``, where *available* is what libDistGen's probe measures on the
free cores while the job runs (section 6, Table 1); poncos co-schedules jobs only while the
sum of their uses stays at most 90% (section 7). coshare plans the same rule:

- **A node's use** is what its probe measured (node facts, :mod:`coshare.ledger.facts`:
  ``1 - membw_avail_gbps / membw_baseline_gbps``) for the jobs that ran past their
  initialization (``init_s``) before the probe, plus an *estimate* for every other job on
  it (started later, planned, or placed this cycle). Without facts every job is estimated.
- **A job's estimate**: its program's recorded measurement (``CoshareProgram``, the
  ``programs`` table), else its declared ``CoshareMembw`` over the node's baseline (else its
  peak ``membw_gbps``), else nothing is known and it is **bandwidth-bound** (use 1.0) until
  measured: it runs only on a node with no other job.
- **Admission**: a job goes to a node with room for it (cores, memory, devices) whose use
  plus its own stays within ``max_share``, or to a node with no job at all (a job alone is
  never co-scheduled, so the rule does not apply: poncos starts its first job on an empty
  node). Jobs go in scheduler order (priority, then age), first fit in snapshot order.
- **Trial co-runs** (section 7, steps 4-9; ``trials=True``): a job of unknown use may start
  beside jobs whose use is known and leaves room, as a trial the plan names
  (:class:`~coshare.model.Trial`); the node takes nothing else until it is measured. A
  live cycle plans them where ``policy.membw.trials`` is on (off by default) and runs them
  as :mod:`coshare.ledger.trials` describes (freeze, probe, thaw, keep or suspend). The
  simulator's section 8 queues plan without them (Table 1 recorded, or nothing recorded
  and no trials) unless asked: ``coshare simulate --workload poncos --trials on`` runs the
  same policy and the same trial steps on modelled probes (:mod:`coshare.sim.poncos_trials`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from coshare.ledger.bandwidth import UNKNOWN_SHARE as UNKNOWN_SHARE
from coshare.ledger.bandwidth import job_share as job_share
from coshare.ledger.bandwidth import measured_use as measured_use
from coshare.model import Job, Node, Plan, RunningJob, Snapshot, ThreadMode, Trial, Unplaced
from coshare.policies.base import ClusterState, finish, needs_of, priority_key, screened
from coshare.policies.waiting import explain_waiting, never_fits

#: Sums are compared with this slack, so that 0.45 + 0.45 is within 0.9 in floating point.
_EPS = 1e-9


@dataclass
class NodeUse:
    """One node's planned bandwidth use while the policy plans.

    Attributes:
        used: the share of the node's bandwidth its jobs use (measured plus estimated).
        measured: the probe's part of ``used`` (``None``: no probe).
        unknown: jobs on it whose use is neither measured nor known.
        jobs: every job on it (running, planned, placed this cycle), sorted at the end.
        trial: a trial co-run starts on it this cycle; it takes no other job until the trial
            has measured (the trial's probe is of the partners it names, nothing else).
    """

    used: float = 0.0
    measured: float | None = None
    unknown: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    trial: bool = False
    closed: bool = False


def node_uses(snapshot: Snapshot, programs: Mapping[str, float], init_s: float) -> list[NodeUse]:
    """Each node's bandwidth use before this cycle places anything (in snapshot order)."""
    by_node: dict[str, list[RunningJob]] = {}
    for r in snapshot.running:
        by_node.setdefault(r.node, []).append(r)
    out = []
    for node in snapshot.nodes:
        probe = measured_use(node)
        use = NodeUse(measured=probe[0] if probe else None, used=probe[0] if probe else 0.0)
        for r in by_node.get(node.name, []):
            use.jobs.append(r.id)
            if (
                probe is not None
                and r.state == "running"
                and r.start_time_s is not None
                and r.start_time_s + init_s < probe[1]
            ):
                continue  # in the probe's figure already
            # Otherwise its use is added to the probe's: it started after the probe, or so
            # shortly before that the probe may have caught its initialization (the
            # paper probes only after it); counting it twice then errs on the safe side.
            share = job_share(r.program, r.membw_gbps, node, programs)
            if share is None:
                use.unknown.append(r.id)
                share = UNKNOWN_SHARE
            use.used += share
        out.append(use)
    return out


@dataclass(frozen=True)
class MembwPolicy:
    """Co-schedule jobs on a node only while their memory bandwidth use sums to at most
    ``max_share`` (poncos section 7).

    Attributes:
        max_share: the limit of a node's summed use (``policy.membw.max_share``).
        programs: recorded use per program (``policy.membw.programs``).
        init_s: a job is in its node's probe once it ran this long before it.
        trials: plan trial co-runs for jobs of unknown use (``policy.membw.trials``; the
            simulator's ``--trials``).
        threads: ``strict`` or ``soft`` device threads, as the other policies.
    """

    max_share: float = 0.9
    programs: Mapping[str, float] = field(default_factory=dict)
    init_s: float = 60.0
    trials: bool = False
    threads: ThreadMode = "strict"
    name: str = "membw"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place each job, in scheduler order, on the first node with room whose bandwidth
        use stays within the limit with it.

        A job no node admits waits; why is said once the walk is done, of the cluster as the
        plan leaves it (as for every policy): bandwidth, with the least used node that has
        room for it, or, where no node has room any more, the resource it lacks."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        uses = node_uses(snapshot, self.programs, self.init_s)
        books = _Books(uses, self)
        unplaced = never_fits(snapshot, snapshot.pending)
        trials: list[Trial] = []
        waiting: list[Job] = []
        turned: list[tuple[Job, _Shares]] = []
        jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        for job, may in screened(state, jobs):
            if not may:
                waiting.append(job)
                continue
            shares = _Shares(job, snapshot.nodes, self.programs)
            i = self._first_fit(state, books, job, shares)
            if i is None:
                turned.append((job, shares))
                continue
            self._place(state, job, i)
            use = uses[i]
            share = shares[i]
            if share is None and not use.jobs:
                # Alone, a job of unknown use is no trial: nothing joins it this cycle (its
                # use could be anything; the next cycle's probe measures it).
                use.closed = True
            if share is None and use.jobs:
                trials.append(Trial(job.id, snapshot.nodes[i].name, tuple(sorted(use.jobs))))
                use.trial = True
            if share is None:
                use.unknown.append(job.id)
            use.used += UNKNOWN_SHARE if share is None else share
            use.jobs.append(job.id)
            books.changed(i)
        closest = least_used_with_room(state, [job for job, _ in turned], books.used)
        blocked = {
            job.id: self._why(job, snapshot.nodes, uses, shares, i)
            for (job, shares), i in zip(turned, closest, strict=True)
            if i is not None
        }
        waiting += [job for (job, _), i in zip(turned, closest, strict=True) if i is None]
        unplaced.update(explain_waiting(state, waiting))
        unplaced.update(blocked)
        plan = finish(self.name, snapshot, state, unplaced)
        return Plan(
            plan.policy, plan.assignments, plan.unplaced, notes=plan.notes, trials=tuple(trials)
        )

    def _first_fit(
        self, state: ClusterState, books: _Books, job: Job, shares: _Shares
    ) -> int | None:
        """The first node in snapshot order with room for ``job`` that admits it."""
        if shares.same:
            admitted = books.admitting(shares.value)
            if len(admitted) == 0:
                return None  # no node admits it: no need to look for room
            hits = admitted[self._room(state, job)[admitted]]
            return int(hits[0]) if len(hits) else None
        # a declared rate: a share of its own on each node, computed for the nodes looked at
        room = np.flatnonzero(self._room(state, job)).tolist()
        return next((k for k in room if self._admits(books.uses[k], shares[k])), None)

    def _room(self, state: ClusterState, job: Job) -> np.ndarray:
        """Nodes with room for ``job``'s cores, memory and devices (bandwidth aside)."""
        if not job.needs_device:
            return state.host_ok(job)
        counts = np.bincount(state.dev_node[state.device_ok(job)], minlength=len(state.nodes))
        return counts >= job.device_count

    def _place(self, state: ClusterState, job: Job, node: int) -> None:
        if not job.needs_device:
            state.place(job, node)
            return
        ok = state.device_ok(job)
        state.place(job, node, state.least_free_on(node, ok, job.device_count))

    def _admits(self, use: NodeUse, share: float | None) -> bool:
        """Whether a job of ``share`` (``None``: unknown) may join ``use``'s node."""
        if not use.jobs:
            return True  # alone: nothing is co-scheduled
        if use.trial or use.closed:
            return False  # a job of no use at all would still change what the trial measures
        if share is not None:
            return use.used + share <= self.max_share + _EPS
        # A trial needs partners whose use is known and leaves room for some of its own.
        return self.trials and not use.unknown and use.used < self.max_share - _EPS

    def _why(
        self, job: Job, nodes: Sequence[Node], uses: Sequence[NodeUse], shares: _Shares, i: int
    ) -> Unplaced:
        """Why ``job`` waits though node ``i``, the least used with room for it, has room:
        bandwidth, with that node's figures."""
        use, share = uses[i], shares[i]
        limit = f"policy.membw.max_share {self.max_share:g}"
        if share is None:
            what = f"program {job.program!r}" if job.program else "it (no CoshareProgram)"
            live = "" if self.trials else "; trial co-runs are off (policy.membw.trials)"
            reason = (
                f"memory bandwidth: {what} has no measurement and no CoshareMembw, so it "
                f"is treated as bandwidth-bound and runs only on a node with no other "
                f"job (least used with room: {nodes[i].name} at "
                f"{use.used:.2f}{_listing(use)}){live}"
            )
        else:
            reason = (
                f"memory bandwidth: it would use {share:.2f} of a node's bandwidth; on "
                f"every node with room the sum would exceed {limit} (least used: "
                f"{nodes[i].name} at {use.used:.2f}{_listing(use)}, with it "
                f"{use.used + share:.2f})"
            )
        return Unplaced(job.id, reason, "no_room")


class _Books:
    """The nodes' bandwidth books as arrays, and per share the nodes that admit it (ascending
    node indices, kept until a node's book changes): most jobs of a cycle share a handful of
    share values (unknown, or their program's), so the admission of a node is computed once
    per value and placement, not once per job and node."""

    def __init__(self, uses: Sequence[NodeUse], policy: MembwPolicy) -> None:
        self.uses = uses
        self.policy = policy
        used, empty, open_, known = zip(*map(_book, uses), strict=True) if uses else ((),) * 4
        self.used = np.array(used, dtype=np.float64)
        self.empty = np.array(empty, dtype=np.bool_)
        self.open = np.array(open_, dtype=np.bool_)
        self.known = np.array(known, dtype=np.bool_)
        self._admitting: dict[float | None, np.ndarray] = {}

    def changed(self, i: int) -> None:
        self.used[i], self.empty[i], self.open[i], self.known[i] = _book(self.uses[i])
        self._admitting.clear()

    def admitting(self, share: float | None) -> np.ndarray:
        """The nodes that :meth:`MembwPolicy._admits` a job of ``share`` to, ascending."""
        found = self._admitting.get(share)
        if found is None:
            limit = self.policy.max_share
            if share is not None:
                mask = self.empty | (self.open & (self.used + share <= limit + _EPS))
            elif self.policy.trials:
                mask = self.empty | (self.open & self.known & (self.used < limit - _EPS))
            else:
                mask = self.empty
            found = self._admitting[share] = np.flatnonzero(mask)
        return found


def _book(use: NodeUse) -> tuple[float, bool, bool, bool]:
    """What admission reads of a node's book: its use, whether it has no job, whether it
    is open (no trial, not closed to others), and whether every use on it is known."""
    return use.used, not use.jobs, not (use.trial or use.closed), not use.unknown


def least_used_with_room(
    state: ClusterState, jobs: Sequence[Job], used: np.ndarray
) -> list[int | None]:
    """For each job, the node of least ``used`` (then the first) with room for it now (the
    cores, memory and devices of :meth:`MembwPolicy._room`), ``None`` where none has: the
    nodes in that order, each taking at once every job still looking that it has room for."""
    out: list[int | None] = [None] * len(jobs)
    if not jobs:
        return out
    need = needs_of(jobs)
    count = np.array([j.device_count if j.needs_device else 0 for j in jobs], dtype=np.int64)
    left = np.arange(len(jobs))
    for n in np.lexsort((np.arange(len(used)), used)).tolist():
        want = need[left]
        ok = (want[:, 2] <= state.node_free_cpu[n]) & (want[:, 3] <= state.node_free_mem[n])
        fitting = np.zeros(len(left), dtype=np.int64)
        for d in state.node_devs[n]:
            fits = (want[:, 0] <= state.dev_free_mem[d]) & (want[:, 1] <= state.dev_threads[d])
            if state.strict:
                fits &= want[:, 1] <= state.dev_free_thr[d]
            fitting += fits
        ok &= fitting >= count[left]
        for k in left[ok].tolist():
            out[k] = n
        left = left[~ok]
        if len(left) == 0:
            break
    return out


class _Shares:
    """A job's share of each node's bandwidth (:func:`job_share`), computed when first asked
    for: the same for every node unless it comes from a declared rate over each node's
    baseline."""

    def __init__(self, job: Job, nodes: Sequence[Node], programs: Mapping[str, float]) -> None:
        self.job, self.nodes, self.programs = job, nodes, programs
        known = job.program is not None and job.program in programs
        self.same = known or job.membw_gbps is None
        self.value = None
        if self.same and nodes:
            self.value = job_share(job.program, job.membw_gbps, nodes[0], programs)

    def __getitem__(self, i: int) -> float | None:
        if self.same:
            return self.value
        return job_share(self.job.program, self.job.membw_gbps, self.nodes[i], self.programs)


def _listing(use: NodeUse) -> str:
    """What makes up a node's use, for a message."""
    parts = []
    if use.measured is not None:
        parts.append(f"{use.measured:.2f} measured")
    if use.unknown:
        shown = ", ".join(use.unknown[:3]) + (" ..." if len(use.unknown) > 3 else "")
        parts.append(f"unmeasured {shown}")
    return f": {'; '.join(parts)}" if parts else ""


def check_membw(snapshot: Snapshot, plan: Plan, policy: MembwPolicy) -> list[str]:
    """Problems of ``plan`` against the bandwidth rule, recounted node by node (the oracle of
    the property tests; :func:`coshare.cycle.verify.check_plan` checks the other resources).

    A node that gets jobs this cycle either held nothing and gets exactly one, or its use
    (measured and estimated) plus the known shares of its new jobs is within the limit; a new
    job of unknown use is the only one of its node, or its node's last, a trial beside jobs of
    known use.
    """
    problems = []
    uses = node_uses(snapshot, policy.programs, policy.init_s)
    pending = {j.id: j for j in snapshot.pending}
    trials = {t.job: t for t in plan.trials}
    for i, node in enumerate(snapshot.nodes):
        new = [pending[a.job] for a in plan.assignments if a.node == node.name]
        before = uses[i]
        if not new or (not before.jobs and len(new) == 1):
            continue
        shares = [job_share(j.program, j.membw_gbps, node, policy.programs) for j in new]
        known = before.used + sum(s for s in shares if s is not None)
        if known > policy.max_share + _EPS:
            problems.append(f"node {node.name}: use {known:.3f} exceeds {policy.max_share}")
        for k, (job, share) in enumerate(zip(new, shares, strict=True)):
            if share is not None:
                continue
            trial = trials.get(job.id)
            if trial is None or trial.node != node.name:
                problems.append(
                    f"node {node.name}: job {job.id} of unknown use shares it without a trial"
                )
            elif before.unknown or k != len(new) - 1 or not policy.trials:
                problems.append(
                    f"node {node.name}: trial of job {job.id} beside unmeasured "
                    "jobs, or followed by others"
                )
    return problems
