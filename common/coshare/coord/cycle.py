"""What a live cycle does with the coordination engine.

With ``coordination.dsn`` set, :func:`coordination` takes or renews this planner's lease
before the cycle reads anything, and yields a *fence* that the cycle calls right before it
writes to the scheduler, and both adapters again before each batch they write that starts
``coordination.fence_every_s`` or more after the last check
(:class:`~coshare.ports.BatchFencedEditor`): the fence renews the lease only if it is still
this instance's with the same epoch, so a planner that lost its lease stops before its next
batch and says so (:class:`~coshare.errors.LeaseLost`, exit 1); so does one whose engine
stopped answering mid-cycle. Every batch thus starts within the lease; a write can outlive
it by one batch at most (one per writing thread: ``slurm.workers``), not by a whole plan.
An instance that does not hold the lease is standby (:class:`~coshare.errors.Standby`, exit
0: it did nothing). An unreachable engine at either point: :class:`~coshare.errors.
EngineUnavailable` naming the address, nothing written (mid-apply: nothing after the batches
sent), exit 1; the next cycle connects afresh.

With the lease comes the planner's *gate* (:class:`EngineGate`, the
:class:`~coshare.ports.PlanGate` port): the plan's device memory is claimed in the engine
before it is written, so several planners over the same nodes never book a device beyond its
memory (:mod:`coshare.coord.claims` has the rules).

The planner's ``coordination.protocol`` (active cancellation or the sequencer,
:mod:`coshare.coord.sequencer`) is recorded with its lease; a planner whose protocol differs
from a live one's over the same engine is refused at the start of its cycle, naming both.

Without ``coordination.dsn`` (the default) there is neither and the cycle runs as it always
did: one planner, no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from coshare.cli.extras import load
from coshare.config import CoordinationConfig
from coshare.coord import claims as rules
from coshare.model import Plan, Snapshot

Fence = Callable[[], None]


@dataclass(frozen=True)
class Coordinated:
    """What a coordinated cycle gets: the lease's fence and the planner's gate."""

    fence: Fence
    gate: EngineGate


class EngineGate:
    """The :class:`~coshare.ports.PlanGate` on the engine's claims.

    Args:
        claims: the planner's :class:`~coshare.coord.leases.PostgresClaims`.
        global_ids: whether the claim keys are unique across the planners that share the
            nodes (:func:`~coshare.coord.claims.admit`); an adapter says so with the class
            ``capabilities.global_job_ids`` (:class:`coshare.ports.Capabilities`).
        key: a job id as its claim key (an adapter's ``job_key``; :func:`job_key`).
    """

    def __init__(
        self, claims: Any, global_ids: bool = False, key: Callable[[str], str] = str
    ) -> None:
        self.claims = claims
        self.global_ids = global_ids
        self.key = key
        self.planner: str = claims.lease.planner
        self._read: Snapshot | None = None
        #: Figures of the last cycle, for its log: claims released, other planners' claims
        #: counted, jobs granted and refused.
        self.figures: dict[str, int] = {}

    def settle(self, snapshot: Snapshot) -> Snapshot:
        """Release this planner's claims of jobs no longer holding anything; add the other
        planners' live claims the read does not show."""
        keyed = rules.rekey(snapshot, self.key)
        self._read = keyed
        gone = rules.stale(self.claims.own_jobs(), keyed)
        released = self.claims.release(gone)
        live = self.claims.live()
        self.figures = {
            "released": released,
            "others": sum(1 for c in live if c.planner != self.planner),
        }
        added = rules.with_claims(keyed, self.planner, live, global_ids=self.global_ids).running[
            len(keyed.running) :
        ]
        return replace(snapshot, running=snapshot.running + added)

    def admit(self, snapshot: Snapshot, plan: Plan) -> Plan:
        """Claim the plan's device parts; the plan without the jobs refused."""
        job_of = {self.key(job): job for job in plan.placed_jobs}
        wanted = {
            self.key(job): tuple(replace(p, job=self.key(job)) for p in parts)
            for job, parts in rules.plan_parts(snapshot, plan).items()
        }
        # What the scheduler showed, not the other planners' claims settle added to it.
        read = self._read if self._read is not None else rules.rekey(snapshot, self.key)
        decision = self.claims.claim(
            wanted, rules.capacities(snapshot), rules.seen(read), global_ids=self.global_ids
        )
        refused = {job_of[k]: why for k, why in decision.refused.items()}
        self.figures["granted"] = len(wanted) - len(refused)
        self.figures["refused"] = len(refused)
        admitted = rules.without(plan, refused)
        if refused:
            note = (
                f"{len(refused)} job(s) lost their devices to another planner's "
                "claims made since this cycle read; they wait for the next cycle"
            )
            admitted = replace(admitted, notes=(*admitted.notes, note))
        return admitted


def job_key(adapter: object) -> Callable[[str], str]:
    """An adapter's ``job_key`` (a job id as its claim key), or the id itself."""
    key = getattr(adapter, "job_key", None)
    return key if callable(key) else str


@contextmanager
def coordination(
    config: CoordinationConfig, scheduler: str, dry_run: bool = False
) -> Iterator[Coordinated | None]:
    """The lease of planner ``config.domain`` (else ``scheduler``) for one cycle.

    Yields:
        the fence to call before writing and the gate to plan and claim through, or
        ``None`` (no engine configured, or a dry run, which writes nothing and so needs no
        lease).

    Raises:
        Standby: another instance holds the lease.
        ConfigError: a live planner over the same engine uses the other
            ``coordination.protocol``.
        LeaseLost: (from the fence) the lease is no longer this instance's.
        EngineUnavailable: the engine cannot be reached.
        MissingExtra: psycopg is not installed (``coshare[coord]``).
    """
    if config.dsn is None or dry_run:
        yield None
        return
    engine_module = load("coshare.coord.engine", "coordination.dsn")
    leases = load("coshare.coord.leases", "coordination.dsn")
    engine = engine_module.Engine(config.dsn, config.connect_timeout_s)
    try:
        lease = leases.PlannerLease(
            engine, config.domain or scheduler, config.instance, config.lease_s
        )
        lease.acquire()
        # Every planner over one engine resolves contention the same way (cancel or
        # sequencer): one of the other protocol still live refuses this one, naming both.
        load("coshare.coord.sequencer", "coordination.dsn").agree(lease, config.protocol)

        def fence() -> None:
            lease.fence()

        yield Coordinated(fence, EngineGate(leases.PostgresClaims(lease)))
    finally:
        engine.close()
