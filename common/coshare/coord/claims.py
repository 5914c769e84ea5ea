"""Claims: the device memory several planners share, booked in the engine before any write.
Pure: the rules; :class:`~coshare.coord.leases.PostgresClaims` runs
them inside one transaction of the engine.

A *claim* is one job's declared memory on one device (``node/device``), booked by its
planner under that planner's lease. A cycle with ``coordination.dsn`` set:

1. reads its scheduler, then :func:`with_claims` adds the live claims of *other* planners
   that its read does not show yet (a job another planner is writing right now) as planned
   placements, so its policy plans around them;
2. claims every device part of its plan in one transaction (:func:`admit`): a job whose
   parts do not all fit under each device's memory, counting every live claim and every job
   the read saw on the device once each, is taken out of the plan and waits
   (``no_room``, naming the device and the other planner's use); nothing of it is written;
3. writes the rest to the scheduler (the lease's fence first);
4. next cycle, releases its claims of jobs its read no longer shows placed or running
   (:func:`stale`): ended, removed, or pending again.

A claim lives while its planner's lease does: a planner that dies leaves claims that are dead
once its lease expires; the jobs it wrote are in the scheduler's queue by then, where every
planner's read counts them (the scheduler's queue stays the ledger; the engine only closes
the window between one planner's read and another's write).

Why this is deadlock-free without active cancellation: a cycle claims all parts of a job (a
gang's on every node) in one transaction that locks the devices it touches in one global
order, and writes only what it holds; a job that does not get everything holds nothing and
waits for the next cycle. There is no hold-and-wait across planners (PICASO section 2's
condition), so the reservation protocol of :mod:`coshare.alloc` is not needed for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from coshare.model import Plan, RunningJob, Snapshot, Unplaced


@dataclass(frozen=True, slots=True)
class Part:
    """One job's declared memory on one device.

    Attributes:
        job: the job id.
        node: the node's name.
        device: the device id on that node.
        memory_mib: the job's declared device memory there.
    """

    job: str
    node: str
    device: str
    memory_mib: int

    @property
    def unit(self) -> str:
        """The device's key in the engine."""
        return unit_of(self.node, self.device)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A live claim as the engine holds it: a :class:`Part` and the planner that booked it."""

    planner: str
    part: Part


def unit_of(node: str, device: str) -> str:
    """A device's key: ``node/device`` (node names carry no ``/``)."""
    return f"{node}/{device}"


def capacities(snapshot: Snapshot) -> dict[str, int]:
    """Every device's memory, by its key."""
    return {unit_of(n.name, d.id): d.memory_mib for n in snapshot.nodes for d in n.devices}


def seen(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """What the read shows on each device: job -> declared memory (running and planned)."""
    use: dict[str, dict[str, int]] = {}
    for r in snapshot.running:
        for device in r.devices:
            jobs = use.setdefault(unit_of(r.node, device), {})
            jobs[r.id] = jobs.get(r.id, 0) + r.device_memory_mib
    return use


def plan_parts(snapshot: Snapshot, plan: Plan) -> dict[str, tuple[Part, ...]]:
    """The device parts of each placed job of ``plan``, in the plan's order (jobs placed on
    no device have none and need no claim)."""
    memory = {j.id: j.device_memory_mib for j in snapshot.pending}
    parts: dict[str, list[Part]] = {}
    for a in plan.assignments:
        for device in a.devices:
            parts.setdefault(a.job, []).append(Part(a.job, a.node, device, memory.get(a.job, 0)))
    return {job: tuple(p) for job, p in parts.items() if p}


@dataclass(frozen=True)
class Decision:
    """What :func:`admit` decided.

    Attributes:
        granted: the parts to book, in order.
        refused: job -> why it waits (one sentence naming the device and the use there).
    """

    granted: tuple[Part, ...]
    refused: Mapping[str, str]


def admit(
    planner: str,
    wanted: Mapping[str, Sequence[Part]],
    capacity: Mapping[str, int],
    live: Iterable[Claimed],
    seen_use: Mapping[str, Mapping[str, int]],
    *,
    global_ids: bool = True,
) -> Decision:
    """Which of ``wanted``'s jobs may be booked, in order, each all or none.

    A device's use is every live claim on it (any planner) plus every job the planner's read
    saw there that holds no live claim (counted once: a job both claimed and seen is its
    claim). A job is granted when each of its parts fits beside that use and the parts
    granted before it; its parts then count for the jobs after it.

    ``global_ids``: job ids are unique across the planners (Slurm's job ids are
    cluster-wide), so a seen job and another planner's claim of the same id are one job.
    When they are not (HTCondor's ``12.0`` is per schedd), only this planner's own claims
    are matched to what it saw, and another planner's job seen and claimed counts twice
    (over-counts, never under), until that planner releases the claim.

    Args:
        planner: the claiming planner (its own live claims of the same job are replaced).
        wanted: job -> its parts (:func:`plan_parts`).
        capacity: device key -> memory; a device missing here refuses the job.
        live: the live claims on the devices involved.
        seen_use: the planner's read (:func:`seen`).
    """
    claimed_jobs: dict[str, set[str]] = {}  # unit -> jobs whose claim stands for the seen job
    use: dict[str, int] = {}
    holders: dict[str, dict[str, str]] = {}  # unit -> job -> planner, for the message
    for c in live:
        if c.planner == planner and c.part.job in wanted:
            continue  # this planner claims the job again now
        unit = c.part.unit
        use[unit] = use.get(unit, 0) + c.part.memory_mib
        if global_ids or c.planner == planner:
            claimed_jobs.setdefault(unit, set()).add(c.part.job)
        holders.setdefault(unit, {})[c.part.job] = c.planner
    for unit, jobs in seen_use.items():
        for job, mib in jobs.items():
            if job not in claimed_jobs.get(unit, set()):
                use[unit] = use.get(unit, 0) + mib
    granted: list[Part] = []
    refused: dict[str, str] = {}
    for job, parts in wanted.items():
        extra: dict[str, int] = {}
        for p in parts:
            extra[p.unit] = extra.get(p.unit, 0) + p.memory_mib
        why = None
        for unit, mib in sorted(extra.items()):
            cap = capacity.get(unit)
            if cap is None:
                why = f"device {unit} is not known to the engine's claim"
                break
            if use.get(unit, 0) + mib > cap:
                others = sorted({pl for pl in holders.get(unit, {}).values() if pl != planner})
                by = f" (claims of planner {', '.join(others)})" if others else ""
                why = (
                    f"job {job}: another planner booked device {unit} first: "
                    f"{use.get(unit, 0)} of {cap} MiB in use{by}, {mib} MiB more do not "
                    "fit; it waits for the next cycle"
                )
                break
        if why is not None:
            refused[job] = why
            continue
        for unit, mib in extra.items():
            use[unit] = use.get(unit, 0) + mib
        granted.extend(parts)
    return Decision(tuple(granted), refused)


def without(plan: Plan, refused: Mapping[str, str]) -> Plan:
    """``plan`` with the ``refused`` jobs moved from its assignments to its unplaced jobs."""
    if not refused:
        return plan
    return replace(
        plan,
        assignments=tuple(a for a in plan.assignments if a.job not in refused),
        unplaced=plan.unplaced
        + tuple(Unplaced(job, why, "no_room") for job, why in refused.items()),
        spreads=tuple(s for s in plan.spreads if s.job not in refused),
        trials=tuple(t for t in plan.trials if t.job not in refused),
    )


def with_claims(
    snapshot: Snapshot, planner: str, live: Iterable[Claimed], *, global_ids: bool = True
) -> Snapshot:
    """``snapshot`` with the live claims of other planners that its read does not show as
    planned placements (they hold their device memory until the read shows the job; with
    ``global_ids`` false, as :func:`admit`, a read never shows another planner's claim)."""
    shown = {(r.id, r.node, d) for r in snapshot.running for d in r.devices}
    known = {unit_of(n.name, d.id) for n in snapshot.nodes for d in n.devices}
    extra: dict[tuple[str, str], list[Part]] = {}
    for c in live:
        p = c.part
        if c.planner == planner or p.unit not in known:
            continue
        if global_ids and (p.job, p.node, p.device) in shown:
            continue
        extra.setdefault((f"{c.planner}:{p.job}" if not global_ids else p.job, p.node), []).append(
            p
        )
    if not extra:
        return snapshot
    added = tuple(
        RunningJob(
            id=job,
            node=node,
            devices=tuple(p.device for p in parts),
            device_memory_mib=max(p.memory_mib for p in parts),
            cpu_milli=0,
            state="planned",
        )
        for (job, node), parts in sorted(extra.items())
    )
    return replace(snapshot, running=snapshot.running + added)


def rekey(snapshot: Snapshot, key: Callable[[str], str]) -> Snapshot:
    """``snapshot`` with every job id as its claim key (:func:`key`: an adapter's own ids
    made unique across planners, e.g. HTCondor's ``12.0`` as ``schedd#12.0``)."""
    return replace(
        snapshot,
        running=tuple(replace(r, id=key(r.id)) for r in snapshot.running),
        pending=tuple(replace(j, id=key(j.id)) for j in snapshot.pending),
    )


def stale(own: Iterable[str], snapshot: Snapshot) -> tuple[str, ...]:
    """This planner's claimed jobs that its read no longer shows holding anything (ended,
    removed, or pending again): their claims are released."""
    holding = {r.id for r in snapshot.running}
    return tuple(sorted({job for job in own if job not in holding}))
