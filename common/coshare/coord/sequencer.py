"""The sequencer alternative on the engine (PICASO 4.3): contention resolved by order, not
by cancellation.

The pure protocol's sequencer (:mod:`coshare.alloc.protocol`) is one elected domain that
numbers the requests in the order it handles them; every domain then sees them in that order
and commits its free cores head first, so no reservation is ever taken back. On the engine
the numbering is PostgreSQL's: a ``SEQUENCE`` (``coshare_ticket_seq``) gives every request
one *ticket*, and each unit is granted to the live requests waiting for it in ticket order,
by whichever transaction frees it or asks for it. No home-made server: the tables, the
sequence and transaction-level advisory locks do it.

- **A request** (:meth:`SequencerReservations.request`): the job's units are locked
  (advisory locks, in one global order), then the job draws its ticket (``nextval``) and
  waits on each unit (a row of ``coshare_waits``), then the free units are granted. Since
  the ticket is drawn while the units are locked, every request that shares a unit with it
  and draws later draws a higher ticket and sees its waits: on each unit the requests are
  granted in ticket order (first come, first served), and a request never waits behind a
  higher ticket; the lowest ticket waiting gets every unit it waits for the moment it is
  free: no deadlock, and the lowest is never starved (once running jobs end).
- **Re-requests keep the ticket**: a job requesting again (the next cycle, after a restart of
  the same lease) gets its ticket and its place back; it must name the same units (the ticket
  stands for them: to ask for others, :meth:`~SequencerReservations.release` the job, which
  leaves the queue, and request again, at the back).
- **Grants**: a unit freed by a release or a spawn goes in the same transaction to the
  lowest live ticket waiting for it, whoever's planner it is (one a dead planner's booking
  kept: at the next poll or request on it); the reservation is written under *that*
  planner's lease and epoch, so it lives and dies with it like every booking. A planner
  learns its grants with :meth:`~SequencerReservations.poll`.
- **Nothing is cancelled**: there is no cancellation here (:meth:`cancelled` is always
  empty); granted units stay reserved until the job holds or releases them.
- **Dead planners**: tickets and waits carry the planner's lease epoch like reservations;
  the views ``coshare_live_tickets`` and ``coshare_live_waits`` show only live ones, so a
  dead planner's requests stop counting the moment its lease does, and the sweeps delete
  them. A planner that comes back under a new epoch draws new tickets (its old places are
  gone: others may have been granted meanwhile).

The mode is per engine: every planner over one engine uses one protocol
(``coordination.protocol``); :func:`agree` refuses a planner whose protocol differs from a
live one's, naming both (active cancellation would otherwise take back the sequencer's
grants).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg

from coshare.alloc.layout import Layout
from coshare.alloc.store import State
from coshare.coord.engine import SWEEP, SWEEP_QUEUE, int_of
from coshare.coord.leases import PlannerLease
from coshare.coord.reservations import PostgresReservations, hold_reserved
from coshare.errors import ConfigError, CoordinationError, DoubleBooking

Cursor = psycopg.Cursor[tuple[object, ...]]
#: Offset of the sequencer's unit locks' keys (apart from the claims' and the schema's).
_SEQ_LOCKS = 0x7371 << 32  # "sq"
#: Key of the advisory lock that serializes the planners' protocol check.
_PROTOCOL_LOCK = 0x70726F74  # "prot"
#: The protocols a planner may use (``coordination.protocol``).
PROTOCOLS = ("cancel", "sequencer")

#: Grants every free unit among ``units`` to the lowest live ticket waiting for it.
_GRANT = """
WITH pick AS (
    SELECT DISTINCT ON (w.unit) w.unit, w.domain, w.job, w.ticket, w.home, w.planner, w.epoch
    FROM coshare_live_waits w
    WHERE w.unit = ANY(%(units)s::text[])
      AND NOT EXISTS (SELECT 1 FROM coshare_live r WHERE r.unit = w.unit)
    ORDER BY w.unit, w.ticket
), granted AS (
    INSERT INTO coshare_reservations (unit, domain, job, state, submit, home, planner, epoch)
    SELECT unit, domain, job, 'reserved', ticket, home, planner, epoch FROM pick
    ON CONFLICT (unit) DO NOTHING RETURNING unit, job
)
DELETE FROM coshare_waits w USING granted g WHERE w.unit = g.unit AND w.job = g.job
RETURNING w.unit, w.job
"""

#: Drops the ticket of a job that waits for nothing and reserves nothing (spawned or gone).
_DONE = """
DELETE FROM coshare_tickets t WHERE t.job = %(job)s
  AND NOT EXISTS (SELECT 1 FROM coshare_waits w WHERE w.job = t.job)
  AND NOT EXISTS (SELECT 1 FROM coshare_reservations r
                  WHERE r.job = t.job AND r.state = 'reserved')
"""


@dataclass(frozen=True)
class Request:
    """Where a job's request stands.

    Attributes:
        job: the job.
        ticket: its place in the sequencer's total order (lower first).
        granted: the units reserved for it now (in unit order).
        waiting: ``(unit, job)`` of each unit it still waits for and the job in the way:
            the one booking the unit (a lower ticket, or a job spawned on it) or the lower
            ticket it is granted to first. Never a higher ticket.
    """

    job: str
    ticket: int
    granted: tuple[str, ...]
    waiting: tuple[tuple[str, str], ...]

    @property
    def ready(self) -> bool:
        """Every unit is granted: the job can be spawned (:meth:`SequencerReservations.hold`)."""
        return not self.waiting


class SequencerReservations:
    """The :class:`~coshare.alloc.store.ReservationStore` port on PostgreSQL with the
    sequencer's total order instead of active cancellation (module docstring).

    Args:
        lease: the planner lease every write is checked against (acquired first).
        layout: the domains and their units.
    """

    def __init__(self, lease: PlannerLease, layout: Layout) -> None:
        self.lease = lease
        self.engine = lease.engine
        self.layout = layout
        self._reads = PostgresReservations(lease, layout)
        self._units = [d.cores() for d in layout.domains]
        self._domain_of = {u: i for i, units in enumerate(self._units) for u in units}

    # -- reads (as the cancelling store's: live bookings of every planner) ------------------
    def free(self, domain: int) -> tuple[str, ...]:
        return self._reads.free(domain)

    def booked(self, domain: int, job: str, state: State = "reserved") -> tuple[str, ...]:
        return self._reads.booked(domain, job, state)

    def holders(self) -> dict[str, str]:
        """Every live booked unit and its job (all planners)."""
        return self._reads.holders()

    def ticket(self, job: str) -> int | None:
        """``job``'s live ticket, or ``None`` (never requested, spawned, released, or its
        planner's lease is dead)."""
        row = self.engine.run(
            lambda cur: cur.execute(
                "SELECT ticket FROM coshare_live_tickets WHERE job = %s", (job,)
            ).fetchone()
        )
        return None if row is None else int_of(row[0])

    # -- the sequencer ----------------------------------------------------------------------
    def request(self, job: str, units: Sequence[tuple[int, str]], home: int = 0) -> Request:
        """Request ``units`` (``(domain, unit)`` pairs) for ``job``: draw its ticket (or keep
        the one it has), wait on every unit it does not book yet, and take what is granted in
        ticket order now; the rest comes as it frees (:meth:`poll`).

        Raises:
            DoubleBooking: a unit is not of the domain named with it.
            CoordinationError: the job has a live ticket for other units, or of another
                planner (nothing is changed).
            LeaseLost: the lease is no longer this instance's.
        """
        wanted = self._check(job, units)

        def work(cur: Cursor) -> Request:
            epoch = self.lease.check(cur)
            _lock(cur, wanted)
            cur.execute(SWEEP, {"units": wanted})
            cur.execute(SWEEP_QUEUE, {"units": wanted, "jobs": [job]})
            mine = self._own_ticket(cur, job)
            if mine is not None:
                ticket, had = mine
                if had != wanted:
                    raise CoordinationError(
                        f"job {job!r} already waits with ticket {ticket} for units "
                        f"{', '.join(had)}; a re-request names the same units (release the "
                        "job to ask for others: it requests again at the back)"
                    )
            else:
                ticket = _draw(cur, job, home, wanted, self.lease.planner, epoch)
                cur.execute(
                    """
                    INSERT INTO coshare_waits (unit, job, domain, ticket, home, planner, epoch)
                    SELECT u, %(j)s, d, %(t)s, %(h)s, %(p)s, %(e)s
                    FROM unnest(%(units)s::text[], %(domains)s::integer[]) AS x(u, d)
                    WHERE NOT EXISTS (SELECT 1 FROM coshare_live r
                                      WHERE r.unit = x.u AND r.job = %(j)s)
                    ON CONFLICT (unit, job) DO NOTHING""",
                    {
                        "j": job,
                        "t": ticket,
                        "h": home,
                        "p": self.lease.planner,
                        "e": epoch,
                        "units": wanted,
                        "domains": [self._domain_of[u] for u in wanted],
                    },
                )
            cur.execute(_GRANT, {"units": wanted})
            return _status(cur, job, ticket, wanted)

        return self.engine.run(work)

    def poll(self, jobs: Iterable[str] | None = None) -> dict[str, Request]:
        """Where this planner's live requests stand (``jobs`` only, if given), after granting
        their free units in ticket order (units a dead planner's booking kept are free once
        its lease is dead: someone has to grant them)."""
        only = None if jobs is None else sorted(set(jobs))

        def work(cur: Cursor) -> dict[str, Request]:
            self.lease.check(cur)
            rows = cur.execute(
                "SELECT job, ticket, units FROM coshare_live_tickets WHERE planner = %s AND "
                "(%s::text[] IS NULL OR job = ANY(%s::text[])) ORDER BY ticket",
                (self.lease.planner, only, only),
            ).fetchall()
            tickets = [(str(j), int_of(t), _units(u)) for j, t, u in rows]
            units = sorted({u for _, _, us in tickets for u in us})
            _lock(cur, units)
            cur.execute(SWEEP, {"units": units})
            cur.execute(SWEEP_QUEUE, {"units": units, "jobs": []})
            cur.execute(_GRANT, {"units": units})
            return {job: _status(cur, job, ticket, us) for job, ticket, us in tickets}

        return self.engine.run(work)

    def cancelled(self) -> tuple[str, ...]:
        """The jobs whose requests were cancelled: never any (the sequencer orders; the
        method is here so a planner reads both stores alike)."""
        return ()

    # -- the port's writes --------------------------------------------------------------
    def reserve(self, domain: int, job: str, cores: Sequence[str]) -> None:
        """Reserve ``cores`` now, all or none: they must be free with no one waiting for
        them (else :class:`~coshare.errors.DoubleBooking` naming the job booking or first
        waiting, and nothing changes). The job keeps its ticket or draws one; the cores join
        its request (granted at once, they wait behind no one)."""
        name = self.layout.domains[domain].name
        for core in cores:
            if self._domain_of.get(core) != domain:
                raise DoubleBooking(name, core, "(another domain)", job)
        units = sorted(set(cores))

        def work(cur: Cursor) -> None:
            epoch = self.lease.check(cur)
            _lock(cur, units)
            cur.execute(SWEEP, {"units": units})
            cur.execute(SWEEP_QUEUE, {"units": units, "jobs": [job]})
            booked = cur.execute(
                "SELECT unit, job FROM coshare_live WHERE unit = ANY(%s) ORDER BY unit", (units,)
            ).fetchone()
            waiting = cur.execute(
                "SELECT unit, job FROM coshare_live_waits WHERE unit = "
                "ANY(%s) AND job <> %s ORDER BY unit, ticket",
                (units, job),
            ).fetchone()
            for found in (booked, waiting):
                if found is not None:
                    raise DoubleBooking(name, str(found[0]), str(found[1]), job)
            mine = self._own_ticket(cur, job)
            if mine is None:
                ticket = _draw(cur, job, domain, units, self.lease.planner, epoch)
            else:
                ticket = mine[0]
                cur.execute(
                    "UPDATE coshare_tickets SET units = ARRAY(SELECT DISTINCT u FROM "
                    "unnest(units || %s::text[]) u ORDER BY u) WHERE job = %s",
                    (units, job),
                )
            cur.execute("DELETE FROM coshare_waits WHERE job = %s AND unit = ANY(%s)", (job, units))
            cur.execute(
                """
                INSERT INTO coshare_reservations (unit, domain, job, state, submit, home,
                                                  planner, epoch)
                SELECT u, %s, %s, 'reserved', %s, home, %s, %s
                FROM unnest(%s::text[]) AS u, coshare_tickets t WHERE t.job = %s""",
                (domain, job, ticket, self.lease.planner, epoch, units, job),
            )

        self.engine.run(work)

    def hold(self, domain: int, job: str, cores: Sequence[str]) -> tuple[str, ...]:
        """Spawn ``job`` on ``cores`` of ``domain`` (reserved by it): they are held; its other
        reservations and waits in the domain end and what they freed goes to the next
        tickets; the ticket ends once the job waits for and reserves nothing more."""
        name = self.layout.domains[domain].name

        def work(cur: Cursor) -> tuple[str, ...]:
            self.lease.check(cur)
            units = self._job_units(cur, domain, job, cores)
            _lock(cur, units)
            released = hold_reserved(cur, name, domain, job, cores)
            self._leave(cur, domain, job, units)
            return released

        return self.engine.run(work)

    def release(self, domain: int, job: str) -> tuple[str, ...]:
        """Free every unit ``job`` books in ``domain`` and end its waits there (it leaves the
        queue there); what it freed goes to the next tickets."""

        def work(cur: Cursor) -> tuple[str, ...]:
            self.lease.check(cur)
            units = self._job_units(cur, domain, job, ())
            _lock(cur, units)
            cur.execute(
                "DELETE FROM coshare_reservations WHERE domain = %s AND job = %s RETURNING unit",
                (domain, job),
            )
            freed = tuple(sorted(str(row[0]) for row in cur.fetchall()))
            self._leave(cur, domain, job, units)
            return freed

        return self.engine.run(work)

    def sweep(self) -> int:
        """Delete every dead booking, wait and ticket (of planners whose lease expired); how
        many."""

        def work(cur: Cursor) -> int:
            swept = cur.execute(SWEEP, {"units": None}).rowcount
            row = cur.execute(SWEEP_QUEUE, {"units": None, "jobs": None}).fetchone()
            return swept + (int_of(row[0]) if row else 0)

        return self.engine.run(work)

    # -- helpers ------------------------------------------------------------------------
    def _check(self, job: str, units: Sequence[tuple[int, str]]) -> list[str]:
        for domain, unit in units:
            if self._domain_of.get(unit) != domain:
                name = (
                    self.layout.domains[domain].name
                    if 0 <= domain < len(self._units)
                    else str(domain)
                )
                raise DoubleBooking(name, unit, "(another domain)", job)
        return sorted({u for _, u in units})

    def _own_ticket(self, cur: Cursor, job: str) -> tuple[int, list[str]] | None:
        """The job's live ticket and units; another planner's live ticket is refused."""
        row = cur.execute(
            "SELECT ticket, units, planner FROM coshare_live_tickets WHERE job = %s", (job,)
        ).fetchone()
        if row is None:
            return None
        if str(row[2]) != self.lease.planner:
            raise CoordinationError(
                f"job {job!r} is requested by planner {str(row[2])!r} "
                f"(ticket {int_of(row[0])}); planner "
                f"{self.lease.planner!r} may not request it too"
            )
        return int_of(row[0]), _units(row[1])

    def _job_units(self, cur: Cursor, domain: int, job: str, cores: Sequence[str]) -> list[str]:
        """The units ``job`` books or waits for in ``domain``, and ``cores``: what to lock
        (grants only turn a wait into a booking of the same unit, so the set cannot grow)."""
        rows = cur.execute(
            "SELECT unit FROM coshare_reservations WHERE domain = %s AND job = %s "
            "UNION SELECT unit FROM coshare_waits WHERE domain = %s AND job = %s",
            (domain, job, domain, job),
        ).fetchall()
        return sorted({str(r[0]) for r in rows} | set(cores))

    def _leave(self, cur: Cursor, domain: int, job: str, units: list[str]) -> None:
        """End ``job``'s waits in ``domain``, pass its freed units on, drop a finished
        ticket."""
        cur.execute("DELETE FROM coshare_waits WHERE domain = %s AND job = %s", (domain, job))
        cur.execute(
            "UPDATE coshare_tickets SET units = ARRAY(SELECT u FROM unnest(units) u "
            "WHERE NOT u = ANY(%s::text[]) ORDER BY u) WHERE job = %s",
            (list(self._units[domain]), job),
        )
        cur.execute(SWEEP, {"units": units})
        cur.execute(SWEEP_QUEUE, {"units": units, "jobs": []})
        cur.execute(_GRANT, {"units": units})
        cur.execute(_DONE, {"job": job})


def _units(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"expected a text array from the engine, got {value!r}")
    return sorted(str(u) for u in value)


def _lock(cur: Cursor, units: Sequence[str]) -> None:
    """Lock ``units`` for the sequencer (transaction advisory locks in one global order, so
    two requests never deadlock on them; hash collisions only serialize more)."""
    cur.execute(
        "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtext(u)::bigint + %s "
        "AS k FROM unnest(%s::text[]) AS u ORDER BY k) x",
        (_SEQ_LOCKS, list(units)),
    )


def _draw(cur: Cursor, job: str, home: int, units: list[str], planner: str, epoch: int) -> int:
    """A new ticket for ``job`` (its units locked by the caller)."""
    row = cur.execute(
        """
        INSERT INTO coshare_tickets (job, ticket, home, units, planner, epoch)
        VALUES (%s, nextval('coshare_ticket_seq'), %s, %s, %s, %s) RETURNING ticket""",
        (job, home, units, planner, epoch),
    ).fetchone()
    assert row is not None
    return int_of(row[0])


def _status(cur: Cursor, job: str, ticket: int, units: Sequence[str]) -> Request:
    booked = {
        str(u): str(j)
        for u, j in cur.execute(
            "SELECT unit, job FROM coshare_live WHERE unit = ANY(%s)", (list(units),)
        ).fetchall()
    }
    rest = [u for u in units if booked.get(u) != job]
    first = {
        str(u): str(j)
        for u, j in cur.execute(
            "SELECT DISTINCT ON (unit) unit, job FROM coshare_live_waits WHERE unit = ANY(%s) "
            "AND ticket < %s ORDER BY unit, ticket",
            (rest, ticket),
        ).fetchall()
    }
    return Request(
        job,
        ticket,
        tuple(u for u in units if booked.get(u) == job),
        tuple((u, booked.get(u) or first.get(u, "(nobody)")) for u in rest),
    )


def agree(lease: PlannerLease, protocol: str) -> None:
    """Record that ``lease``'s planner uses ``protocol``; refuse it if a live planner over the
    same engine uses the other one.

    Raises:
        ConfigError: naming both planners and their protocols (nothing is recorded).
        LeaseLost: the lease is no longer this instance's.
    """
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"coordination.protocol: unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})"
        )

    def work(cur: Cursor) -> tuple[str, str] | None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PROTOCOL_LOCK,))
        lease.check(cur)
        self_planner = lease.planner
        other = cur.execute(
            """
            SELECT p.planner, p.protocol FROM coshare_protocols p
            JOIN coshare_leases l ON l.planner = p.planner
            WHERE l.lease_until > clock_timestamp() AND p.planner <> %s AND p.protocol <> %s
            ORDER BY p.planner LIMIT 1""",
            (self_planner, protocol),
        ).fetchone()
        if other is not None:
            return str(other[0]), str(other[1])
        cur.execute(
            "INSERT INTO coshare_protocols (planner, protocol) VALUES (%s, %s) "
            "ON CONFLICT (planner) DO UPDATE SET protocol = excluded.protocol",
            (self_planner, protocol),
        )
        return None

    clash = lease.engine.run(work)
    if clash is not None:
        raise ConfigError(
            f"coordination.protocol: planner {lease.planner!r} uses {protocol!r} "
            f"but planner {clash[0]!r}, live on the same engine, uses "
            f"{clash[1]!r}; all planners over one engine use one protocol "
            "(change one, or wait until the other's lease has expired)"
        )


Store = PostgresReservations | SequencerReservations


def reservations(lease: PlannerLease, layout: Layout, protocol: str = "cancel") -> Store:
    """The reservation store of ``protocol`` (``cancel``: active cancellation,
    :class:`~coshare.coord.reservations.PostgresReservations`; ``sequencer``:
    :class:`SequencerReservations`), after :func:`agree` recorded it."""
    agree(lease, protocol)
    if protocol == "sequencer":
        return SequencerReservations(lease, layout)
    return PostgresReservations(lease, layout)
