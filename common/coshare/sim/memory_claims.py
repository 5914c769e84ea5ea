"""The coordination engine's claims held in memory: several planners over one
:class:`~coshare.sim.memory_scheduler.MemoryScheduler`, each cycle through the same
:class:`~coshare.coord.cycle.EngineGate` as a live one with ``coordination.dsn``.

The rules are :mod:`coshare.coord.claims`'s (:func:`~coshare.coord.claims.admit`); only the
store differs from :class:`~coshare.coord.leases.PostgresClaims`: a dictionary, one
transaction being one call. Leases never expire here (a test ends a planner by dropping it).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coshare.coord.claims import Claimed, Decision, Part, admit


@dataclass
class ClaimsStore:
    """Every planner's live claims: (planner, job) -> its parts."""

    claims: dict[tuple[str, str], tuple[Part, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryLease:
    """The lease a planner holds (only its name is read)."""

    planner: str


class MemoryClaims:
    """One planner's claims in a :class:`ClaimsStore` (the interface of
    :class:`~coshare.coord.leases.PostgresClaims` that :class:`~coshare.coord.cycle.EngineGate`
    uses)."""

    def __init__(self, store: ClaimsStore, planner: str) -> None:
        self.store = store
        self.lease = MemoryLease(planner)

    def live(self) -> tuple[Claimed, ...]:
        return tuple(
            Claimed(planner, part)
            for (planner, _), parts in sorted(self.store.claims.items())
            for part in parts
        )

    def own_jobs(self) -> tuple[str, ...]:
        return tuple(sorted(j for p, j in self.store.claims if p == self.lease.planner))

    def release(self, jobs: Sequence[str]) -> int:
        released = 0
        for job in jobs:
            released += len(self.store.claims.pop((self.lease.planner, job), ()))
        return released

    def claim(
        self,
        wanted: Mapping[str, Sequence[Part]],
        capacity: Mapping[str, int],
        seen_use: Mapping[str, Mapping[str, int]],
        *,
        global_ids: bool = True,
    ) -> Decision:
        units = {p.unit for parts in wanted.values() for p in parts}
        live = [c for c in self.live() if c.part.unit in units]
        decision = admit(
            self.lease.planner,
            wanted,
            capacity,
            live,
            {u: seen_use[u] for u in units if u in seen_use},
            global_ids=global_ids,
        )
        granted: dict[str, list[Part]] = {}
        for p in decision.granted:
            granted.setdefault(p.job, []).append(p)
        for job, parts in granted.items():
            self.store.claims[(self.lease.planner, job)] = tuple(parts)
        return decision
