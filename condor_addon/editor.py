"""The HTCondor Editor: write a plan into the schedd's queue, in batches, crash-safely.

A placement is three job attributes, written in this order, each as one schedd transaction
per group of jobs that get the same value (``Schedd.edit`` with a list of job ids)::

    0. CosharePlacedNode = undefined      jobs the plan moves, leaves unplaced or skips
                                          while their gate is open on an expired placement:
                                          closes the gates first (guarded: idle jobs only)
    1. CosharePlacedAt = <now>            all jobs of the plan, one transaction
    2. CosharePlacedDevices = "0,1"       one transaction per device set
    3. CosharePlacedNode = "node2"        one transaction per node: opens the gate

The gate (the job's Requirements, set by the schedd's transform) opens only at step 3, and a
job reaches step 3 only after its own steps 1 and 2 succeeded. So a crash or SIGKILL at any
point leaves every job either with its gate closed (the next cycle plans it again) or fully
placed; never a job that could start on a device it was not given.

Before writing, the Editor reads the jobs again: one that left the queue, is no longer idle,
or whose annotations or placement changed since the Source read them is ``skipped`` with the
reason; one already placed exactly so is ``unchanged`` (re-running a cycle writes nothing).
A transaction that fails (a job vanished in between) is retried once without the jobs that
are gone; what still fails is ``failed`` and planned again next cycle.

Step 0 matters because the planner counted every pending job's old placement as free: a job
whose placement expired must not keep an open gate there unless the plan put it back exactly
there. If one of those jobs *started* at its old placement before its gate closed, the plan
is no longer sound for that device, so nothing more is written this cycle (the next cycle
reads the truth from the collector).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from coshare.model import Plan
from coshare.planner import ApplyReport, JobOutcome, Rejected

from condor_addon import attributes as A
from condor_addon import expressions as X
from condor_addon.ads import QueueJob, read_job
from condor_addon.client import CondorClient, EditFailed


@dataclass(frozen=True)
class Write:
    """One job to place.

    Attributes:
        job: the job id.
        node: the planned node.
        devices: the planned device ids.
        moving: the job's gate is open on another placement and must be closed first.
    """

    job: str
    node: str
    devices: tuple[str, ...]
    moving: bool = False


def _changed(now: QueueJob, then: QueueJob) -> bool:
    """Whether a job was edited since it was read (annotations or placement)."""
    return (
        {k.lower(): v for k, v in now.annotations.items()}
        != {k.lower(): v for k, v in then.annotations.items()}
        or now.placed_node != then.placed_node
        or now.placed_devices != then.placed_devices
        or now.placed_at != then.placed_at
    )


def classify(
    plan: Plan, current: Mapping[str, QueueJob], read: Mapping[str, QueueJob] | None = None
) -> tuple[list[Write], list[str], list[JobOutcome]]:
    """Decide, per planned job, whether to write it, leave it, or skip it.

    Args:
        plan: the plan to apply.
        current: the managed jobs as the schedd lists them now.
        read: the same jobs as the Source read them; ``None`` skips the change check.

    Returns:
        ``(writes, unchanged, skipped)``.
    """
    where: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for a in plan.assignments:
        where[a.job].append((a.node, a.devices))
    writes: list[Write] = []
    unchanged: list[str] = []
    skipped: list[JobOutcome] = []
    for job_id, places in where.items():
        now = current.get(job_id)
        if now is None:
            skipped.append(JobOutcome(job_id, "left the queue (or is not coshare-managed)"))
        elif now.status != A.IDLE:
            skipped.append(JobOutcome(job_id, f"is {A.job_status_name(now.status)} now"))
        elif read is not None and job_id in read and _changed(now, read[job_id]):
            skipped.append(JobOutcome(job_id, "changed since it was read; planned next cycle"))
        elif len(places) != 1:
            skipped.append(JobOutcome(job_id, "spans several nodes, which HTCondor jobs cannot"))
        else:
            node, devices = places[0]
            if now.placement == (node, tuple(devices)):
                unchanged.append(job_id)
            else:
                writes.append(Write(job_id, node, tuple(devices), moving=now.placement is not None))
    return writes, unchanged, skipped


class CondorEditor:
    """Applies plans to one schedd (see the module docstring for the order of writes).

    Args:
        client: the bindings edge.
        hold_invalid: hold jobs refused for their annotations (else only report them).
        clock: wall-clock seconds, for ``CosharePlacedAt``.
        read: the jobs as the Source last read them, for the change check.
    """

    def __init__(
        self,
        client: CondorClient,
        *,
        hold_invalid: bool = True,
        clock: Callable[[], float] = time.time,
        read: Callable[[], Mapping[str, QueueJob]] | None = None,
    ) -> None:
        self.client = client
        self.hold_invalid = hold_invalid
        self.clock = clock
        self.read = read

    def _current(self) -> dict[str, QueueJob]:
        jobs = (read_job(v) for v in self.client.job_ads(X.MANAGED_JOBS))
        return {j.id: j for j in jobs if j is not None}

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        """Write ``plan`` (and hold ``rejected`` jobs); see :class:`coshare.planner.Editor`."""
        if not plan.assignments and not rejected:
            return ApplyReport(dry_run=dry_run)
        current = self._current()
        writes, unchanged, skipped = classify(plan, current,
                                              self.read() if self.read else None)  # fmt: skip
        holds, hold_skips = self._holds(rejected, current)
        skipped += hold_skips
        if dry_run:
            verb = "would hold" if self.hold_invalid else "left idle"
            return ApplyReport(
                applied=tuple(w.job for w in writes), unchanged=tuple(unchanged),
                skipped=tuple(skipped), dry_run=True,
                rejected=tuple(JobOutcome(j, f"{verb}: {r}") for r, ids in holds.items()
                               for j in ids),
            )  # fmt: skip
        run = _Batch(self.client, current)
        stay = set(unchanged) | {w.job for w in writes if not w.moving}
        pending = {a.job for a in plan.assignments} | {u.job for u in plan.unplaced}
        gates = [j for j in sorted(pending - stay)
                 if j in current and current[j].status == A.IDLE and current[j].placed_node]
        if not run.close_gates(gates):
            started = ", ".join(sorted(run.started))
            reason = (f"not written: {started} started at an expired placement while this "
                      "cycle planned; planning again next cycle")
            return ApplyReport(unchanged=tuple(unchanged),
                               skipped=tuple(skipped) + tuple(run.skipped)
                               + tuple(JobOutcome(w.job, reason) for w in writes
                                       if w.job in run.alive),
                               failed=tuple(run.failed))  # fmt: skip
        run.edit_all([w.job for w in writes], A.PLACED_AT, X.time_value(self.clock()))
        by_devices: dict[tuple[str, ...], list[str]] = defaultdict(list)
        by_node: dict[str, list[str]] = defaultdict(list)
        for w in writes:
            by_devices[w.devices].append(w.job)
            by_node[w.node].append(w.job)
        for devices, ids in sorted(by_devices.items()):
            run.edit_all(ids, A.PLACED_DEVICES, X.devices_value(devices))
        for node, ids in sorted(by_node.items()):
            run.edit_all(ids, A.PLACED_NODE, X.node_value(node))
        if self.hold_invalid:
            outcomes = run.hold(holds)
        else:
            outcomes = [JobOutcome(j, f"left idle: {r}") for r, ids in holds.items() for j in ids]
        return ApplyReport(
            applied=tuple(w.job for w in writes if w.job in run.alive),
            unchanged=tuple(unchanged),
            skipped=tuple(skipped) + tuple(run.skipped),
            failed=tuple(run.failed),
            rejected=tuple(outcomes),
        )

    def _holds(
        self, rejected: Iterable[Rejected], current: Mapping[str, QueueJob]
    ) -> tuple[dict[str, list[str]], list[JobOutcome]]:
        """Group the idle rejected jobs by hold reason; the others are skipped."""
        groups: dict[str, list[str]] = defaultdict(list)
        skipped: list[JobOutcome] = []
        for r in rejected:
            now = current.get(r.job)
            if now is None or now.status != A.IDLE:
                state = "left the queue" if now is None else A.job_status_name(now.status)
                skipped.append(JobOutcome(r.job, f"not held ({state}): {r.reason}"))
            else:
                groups[X.hold_reason(r.reason, r.job)].append(r.job)
        return groups, skipped


class _Batch:
    """The writes of one apply: which jobs are still going, skipped or failed."""

    def __init__(self, client: CondorClient, current: Mapping[str, QueueJob]) -> None:
        self.client = client
        self.current = dict(current)
        self.alive: set[str] = set(current)
        self.skipped: list[JobOutcome] = []
        self.failed: list[JobOutcome] = []
        self.started: set[str] = set()

    def _drop_gone(self, ids: Sequence[str]) -> list[str]:
        """Re-read the queue; mark jobs no longer idle as skipped; return those still idle."""
        fresh = {j.id: j for j in (read_job(v) for v in self.client.job_ads(X.MANAGED_JOBS))
                 if j is not None}  # fmt: skip
        keep: list[str] = []
        for job_id in ids:
            now = fresh.get(job_id)
            if now is not None and now.status == A.IDLE:
                keep.append(job_id)
                continue
            state = "left the queue" if now is None else f"is {A.job_status_name(now.status)}"
            self.skipped.append(JobOutcome(job_id, f"{state} while being placed; not written"))
            self.alive.discard(job_id)
            if now is not None and now.status != A.HELD:
                self.started.add(job_id)
        return keep

    def close_gates(self, ids: Sequence[str]) -> bool:
        """Step 0: ``CosharePlacedNode = undefined`` on idle jobs only (guarded edit).

        Returns:
            ``False`` when the cycle must stop: a gate could not be closed, or a job started
            at its expired placement.
        """
        if not ids:
            return True
        try:
            edited = self.client.edit_where(X.idle_managed(ids), A.PLACED_NODE, X.UNDEFINED)
        except EditFailed as exc:
            for job_id in ids:
                self.failed.append(JobOutcome(job_id, str(exc)))
                self.alive.discard(job_id)
            return False
        if edited < len(ids):
            self._drop_gone(ids)
        return not self.started

    def edit_all(self, ids: Sequence[str], attribute: str, value: str) -> None:
        """One transaction for ``ids``; on failure, retry once without the jobs that left."""
        ids = [j for j in ids if j in self.alive]
        if not ids:
            return
        try:
            self.client.edit_ids(ids, attribute, value)
            return
        except EditFailed:
            ids = self._drop_gone(ids)
        try:
            self.client.edit_ids(ids, attribute, value)
        except EditFailed as exc:
            for job_id in ids:
                self.failed.append(JobOutcome(job_id, str(exc)))
                self.alive.discard(job_id)

    def hold(self, groups: Mapping[str, Sequence[str]]) -> list[JobOutcome]:
        """Hold each group of refused jobs with its reason (guarded: idle jobs only)."""
        outcomes: list[JobOutcome] = []
        for reason, ids in groups.items():
            try:
                self.client.hold_where(X.idle_managed(ids), reason)
            except EditFailed as exc:
                self.failed += [JobOutcome(j, f"could not hold ({exc}): {reason}") for j in ids]
                continue
            outcomes += [JobOutcome(j, f"held: {reason}") for j in ids]
        return outcomes

