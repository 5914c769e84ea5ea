"""The reservation store: which job reserves or holds which core of a domain (a port).

Each domain manager of :mod:`coshare.alloc.protocol` books its own domain's cores through a
:class:`ReservationStore`; every write names the domain and the job, so a store shared by
several planners (a database table keyed by core) can back the same
protocol. :class:`InMemoryReservationStore` is the implementation the simulator and the
tests use. Either way a core is booked by at most one job: a second booking raises
:class:`~coshare.errors.DoubleBooking` and changes nothing.

A core is *free*, *reserved* by a job (committed to its request, may be released), or
*held* by a job (spawned on it, until the job ends).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from coshare.alloc.layout import Layout
from coshare.errors import DoubleBooking

State = Literal["reserved", "held"]


class ReservationStore(Protocol):
    """Bookings of cores, per domain and job.

    Contract: cores are named as in :meth:`coshare.alloc.layout.Domain.cores`; ``free``
    lists a domain's free cores in the domain's order; ``reserve`` books all or none and
    raises :class:`~coshare.errors.DoubleBooking` if any core is booked; ``hold`` turns the
    named cores (reserved by the job) into held ones and releases the job's other
    reservations in that domain; ``release`` frees everything the job books in the domain.
    Released and freed cores are returned so the caller can count them.
    """

    def free(self, domain: int) -> tuple[str, ...]:
        """The domain's cores that no job books."""
        ...

    def booked(self, domain: int, job: str, state: State = "reserved") -> tuple[str, ...]:
        """The cores ``job`` reserves (or holds) in ``domain``."""
        ...

    def reserve(self, domain: int, job: str, cores: Sequence[str]) -> None:
        """Reserve ``cores`` of ``domain`` for ``job``, all or none."""
        ...

    def hold(self, domain: int, job: str, cores: Sequence[str]) -> tuple[str, ...]:
        """Spawn ``job`` on ``cores`` (reserved by it); release its other reservations."""
        ...

    def release(self, domain: int, job: str) -> tuple[str, ...]:
        """Free every core ``job`` books in ``domain``."""
        ...


class InMemoryReservationStore:
    """A :class:`ReservationStore` in a dictionary: one entry per booked core."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._cores = [d.cores() for d in layout.domains]
        self._booking: dict[str, tuple[str, State]] = {}

    def free(self, domain: int) -> tuple[str, ...]:
        return tuple(c for c in self._cores[domain] if c not in self._booking)

    def booked(self, domain: int, job: str, state: State = "reserved") -> tuple[str, ...]:
        return tuple(c for c in self._cores[domain] if self._booking.get(c) == (job, state))

    def reserve(self, domain: int, job: str, cores: Sequence[str]) -> None:
        own = set(self._cores[domain])
        name = self._layout.domains[domain].name
        for core in cores:
            if core not in own:
                raise DoubleBooking(name, core, "(another domain)", job)
            if core in self._booking:
                raise DoubleBooking(name, core, self._booking[core][0], job)
        for core in cores:
            self._booking[core] = (job, "reserved")

    def hold(self, domain: int, job: str, cores: Sequence[str]) -> tuple[str, ...]:
        reserved = set(self.booked(domain, job))
        name = self._layout.domains[domain].name
        for core in cores:
            if core not in reserved:
                holder = self._booking.get(core, ("(nobody)", "reserved"))[0]
                raise DoubleBooking(name, core, holder, job)
        for core in cores:
            self._booking[core] = (job, "held")
        released = tuple(c for c in sorted(reserved - set(cores)))
        for core in released:
            del self._booking[core]
        return released

    def release(self, domain: int, job: str) -> tuple[str, ...]:
        mine = tuple(c for c in self._cores[domain] if self._booking.get(c, ("",))[0] == job)
        for core in mine:
            del self._booking[core]
        return mine

    def holders(self) -> dict[str, str]:
        """Every booked core and the job booking it (for invariant checks)."""
        return {core: job for core, (job, _) in self._booking.items()}
