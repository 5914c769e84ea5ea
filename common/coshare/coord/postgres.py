"""PostgreSQL as the planners' coordination engine: planner leases and reservations.

Tables (created on first use, idempotently, under a transaction-level advisory lock so that
planners starting together do not race on the catalogue):

``coshare_leases``
    one row per planner (its domain name): the instance that holds it, a fencing *epoch*
    (raised whenever the lease changes hands or lapses) and ``lease_until`` on the engine's
    clock (``clock_timestamp()``: planners' clocks never enter).
``coshare_reservations``
    one row per booked unit (a core ``node/index`` or a device): the job, ``reserved`` or
    ``held``, the job's place in the global order (submission time stamp, home domain id,
    job id: PICASO section 5) and the planner and epoch that wrote it. The primary key on the
    unit is what makes double booking impossible whatever the planners do: a second insert of
    a unit fails (or, with ``ON CONFLICT DO NOTHING``, is not made).
``coshare_claims``
    one row per device part of a job a planner's cycle placed (job, node, device, declared
    memory), booked before the placement is written to the scheduler and kept until the
    job ends or is removed (:class:`PostgresClaims`, the rules in
    :mod:`coshare.coord.claims`); live while its planner's lease is, like a reservation.
``coshare_cancellations``
    the requests active cancellation took back, for their planner to learn (it requests
    them again, PICASO 4.2).
``coshare_tickets``, ``coshare_waits``, the sequence ``coshare_ticket_seq``
    the sequencer alternative (PICASO 4.3, :mod:`coshare.coord.sequencer`): one ticket per
    requesting job, and one wait per unit a ticket asks for and has not been granted yet;
    live with their planner's lease like a reservation.
``coshare_protocols``
    which protocol (``cancel`` or ``sequencer``) each planner uses: planners of different
    protocols over one engine are refused (:func:`coshare.coord.sequencer.agree`).

A booking is *live* while its planner's lease row has the same epoch and has not expired
(the view ``coshare_live``): a planner that dies leaves bookings that are dead from the
moment its lease is, with no one needing to clean them; :meth:`PostgresReservations.sweep`
(run by every writer on the units it touches, and by every lease acquisition on the whole
table) deletes dead rows. After ``lease_s`` nothing is left reserved by a dead planner.

Isolation: READ COMMITTED with explicit row locks, not SERIALIZABLE. The unique key prevents
double booking under any isolation; the locks order the decisions around it: every write
transaction first takes its lease row ``FOR SHARE`` and checks holder, epoch and expiry (a
takeover updates that row, so it waits for the writes in flight of the old holder and every
later write of the old holder fails the check: the epoch is a fencing token); active
cancellation takes the contested units ``FOR UPDATE`` in unit order before it decides.
SERIALIZABLE would give the same result with aborts instead of waits, and every contested
reservation would need a retry loop; with row locks only a deadlock between two planners
(cancelling each other's jobs in opposite orders) aborts, and that is retried
(:data:`RETRIES`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from coshare.alloc.layout import Layout
from coshare.alloc.store import State
from coshare.coord.claims import Claimed, Decision, Part, admit
from coshare.errors import (
    ConfigError,
    CoordinationError,
    DoubleBooking,
    EngineUnavailable,
    LeaseLost,
    Standby,
)

T = TypeVar("T")

#: How often a transaction aborted by a deadlock or a serialization failure is retried.
RETRIES = 8
#: Key of the advisory lock that serializes schema creation.
_SCHEMA_LOCK = 0x636F7368  # "cosh"

SCHEMA = """
CREATE TABLE IF NOT EXISTS coshare_leases (
    planner     text PRIMARY KEY,
    holder      text NOT NULL,
    epoch       bigint NOT NULL,
    lease_until timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS coshare_reservations (
    unit    text PRIMARY KEY,
    domain  integer NOT NULL,
    job     text NOT NULL,
    state   text NOT NULL CHECK (state IN ('reserved', 'held')),
    submit  bigint NOT NULL,
    home    integer NOT NULL,
    planner text NOT NULL REFERENCES coshare_leases (planner),
    epoch   bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS coshare_reservations_domain ON coshare_reservations (domain);
CREATE INDEX IF NOT EXISTS coshare_reservations_job ON coshare_reservations (job);
CREATE INDEX IF NOT EXISTS coshare_reservations_planner
    ON coshare_reservations (planner, epoch);
CREATE TABLE IF NOT EXISTS coshare_cancellations (
    job     text NOT NULL,
    planner text NOT NULL,
    by_job  text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS coshare_claims (
    job        text NOT NULL,
    node       text NOT NULL,
    device     text NOT NULL,
    unit       text NOT NULL,
    memory_mib bigint NOT NULL CHECK (memory_mib >= 0),
    planner    text NOT NULL REFERENCES coshare_leases (planner),
    epoch      bigint NOT NULL,
    PRIMARY KEY (planner, job, node, device)
);
CREATE INDEX IF NOT EXISTS coshare_claims_unit ON coshare_claims (unit);
CREATE OR REPLACE VIEW coshare_live_claims AS
    SELECT c.* FROM coshare_claims c
    JOIN coshare_leases l ON l.planner = c.planner AND l.epoch = c.epoch
    WHERE l.lease_until > clock_timestamp();
CREATE OR REPLACE VIEW coshare_live AS
    SELECT r.* FROM coshare_reservations r
    JOIN coshare_leases l ON l.planner = r.planner AND l.epoch = r.epoch
    WHERE l.lease_until > clock_timestamp();
CREATE SEQUENCE IF NOT EXISTS coshare_ticket_seq;
CREATE TABLE IF NOT EXISTS coshare_tickets (
    job     text PRIMARY KEY,
    ticket  bigint NOT NULL UNIQUE,
    home    integer NOT NULL,
    units   text[] NOT NULL,
    planner text NOT NULL REFERENCES coshare_leases (planner),
    epoch   bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS coshare_waits (
    unit    text NOT NULL,
    job     text NOT NULL,
    domain  integer NOT NULL,
    ticket  bigint NOT NULL,
    home    integer NOT NULL,
    planner text NOT NULL REFERENCES coshare_leases (planner),
    epoch   bigint NOT NULL,
    PRIMARY KEY (unit, job)
);
CREATE INDEX IF NOT EXISTS coshare_waits_ticket ON coshare_waits (unit, ticket);
CREATE INDEX IF NOT EXISTS coshare_waits_job ON coshare_waits (job);
CREATE TABLE IF NOT EXISTS coshare_protocols (
    planner  text PRIMARY KEY REFERENCES coshare_leases (planner),
    protocol text NOT NULL CHECK (protocol IN ('cancel', 'sequencer'))
);
CREATE OR REPLACE VIEW coshare_live_tickets AS
    SELECT t.* FROM coshare_tickets t
    JOIN coshare_leases l ON l.planner = t.planner AND l.epoch = t.epoch
    WHERE l.lease_until > clock_timestamp();
CREATE OR REPLACE VIEW coshare_live_waits AS
    SELECT w.* FROM coshare_waits w
    JOIN coshare_leases l ON l.planner = w.planner AND l.epoch = w.epoch
    WHERE l.lease_until > clock_timestamp();
"""

#: Deletes every dead claim (of planners whose lease expired or changed hands).
_SWEEP_CLAIMS = """
DELETE FROM coshare_claims c USING coshare_leases l
WHERE l.planner = c.planner AND (l.epoch <> c.epoch OR l.lease_until <= clock_timestamp())
"""

#: Deletes the dead bookings among ``units`` (all when ``units`` is NULL).
_SWEEP = """
DELETE FROM coshare_reservations r USING coshare_leases l
WHERE l.planner = r.planner AND (l.epoch <> r.epoch OR l.lease_until <= clock_timestamp())
  AND (%(units)s::text[] IS NULL OR r.unit = ANY(%(units)s::text[]))
"""

#: Deletes the sequencer's dead waits among ``units`` and dead tickets of ``jobs`` (each: all
#: when NULL; :mod:`coshare.coord.sequencer`).
_SWEEP_QUEUE = """
WITH w AS (
    DELETE FROM coshare_waits w USING coshare_leases l
    WHERE l.planner = w.planner AND (l.epoch <> w.epoch OR l.lease_until <= clock_timestamp())
      AND (%(units)s::text[] IS NULL OR w.unit = ANY(%(units)s::text[]))
    RETURNING 1
), t AS (
    DELETE FROM coshare_tickets t USING coshare_leases l
    WHERE l.planner = t.planner AND (l.epoch <> t.epoch OR l.lease_until <= clock_timestamp())
      AND (%(jobs)s::text[] IS NULL OR t.job = ANY(%(jobs)s::text[]))
    RETURNING 1
)
SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM t)
"""


def address_of(dsn: str) -> str:
    """Where ``dsn`` points, for messages: ``host:port`` (or ``socket-dir:port``), never the
    password or other options.

    Raises:
        ConfigError: ``dsn`` is not a connection string.
    """
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"coordination.dsn: not a PostgreSQL connection string ({exc})") from exc
    host = str(parts.get("host") or parts.get("hostaddr") or "(libpq's default socket)")
    return f"{host}:{parts.get('port') or 5432}"


def _int(value: object) -> int:
    """A number column as an int (psycopg types rows as ``object``)."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"expected a number from the engine, got {value!r}")


def _float(value: object) -> float:
    """A number column (``extract`` gives ``numeric``) as a float."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"expected a number from the engine, got {value!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Engine:
    """One connection to the engine, opened on first use and again after it broke.

    Args:
        dsn: libpq connection string or URL.
        connect_timeout_s: how long a connection attempt may take.

    Every failure to reach the engine, or a connection lost mid-transaction, becomes
    :class:`~coshare.errors.EngineUnavailable` naming :attr:`address`; the transaction in
    flight is then rolled back by the server (nothing it wrote stays).
    """

    def __init__(self, dsn: str, connect_timeout_s: float = 5.0) -> None:
        self.dsn = dsn
        self.address = address_of(dsn)
        self.connect_timeout_s = connect_timeout_s
        #: The server ends this connection when a transaction of it waits on the client
        #: longer (``idle_in_transaction_session_timeout``): a planner paused or stalled
        #: mid-transaction must not keep its row locks, which would stop a takeover.
        self.stall_s = 30.0
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._schema = False

    def limit_stall(self, seconds: float) -> None:
        """Lower :attr:`stall_s` to ``seconds`` (a lease sets half its length); a connection
        already open is closed and the next one has it."""
        if seconds < self.stall_s:
            self.stall_s = seconds
            self.close()

    def connection(self) -> psycopg.Connection[tuple[object, ...]]:
        """The open connection (opened now if need be), schema in place."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                application_name="coshare",
                connect_timeout=max(1, round(self.connect_timeout_s)),
            )
        except psycopg.OperationalError as exc:
            raise EngineUnavailable(self.address, _first_line(exc)) from exc
        self._conn = conn
        try:
            conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (str(max(1, round(self.stall_s * 1000))),),
            )
        except psycopg.OperationalError as exc:
            self.close()
            raise EngineUnavailable(self.address, _first_line(exc)) from exc
        if not self._schema:
            self.run(_create_schema)
            self._schema = True
        return conn

    def run(self, work: Callable[[psycopg.Cursor[tuple[object, ...]]], T]) -> T:
        """``work(cursor)`` in one transaction, retried after a deadlock or serialization
        failure (it must then be safe to run again: it is rolled back first)."""
        for attempt in range(RETRIES + 1):
            conn = self.connection()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    return work(cur)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
                if attempt == RETRIES:
                    raise CoordinationError(
                        f"coordination engine at {self.address}: a "
                        f"transaction was aborted {RETRIES + 1} times in a "
                        f"row ({_first_line(exc)}); nothing of it was "
                        "written"
                    ) from exc
                time.sleep(0.01 * (attempt + 1))
            except psycopg.Error as exc:
                # Lost connections (refused, reset, shut down, or ended by the server's
                # idle-in-transaction timeout); other errors are bugs and propagate.
                if not (
                    isinstance(
                        exc, (psycopg.OperationalError, pg_errors.IdleInTransactionSessionTimeout)
                    )
                    or conn.broken
                    or conn.closed
                ):
                    raise
                self.close()
                raise EngineUnavailable(self.address, _first_line(exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def _create_schema(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
    cur.execute(SCHEMA)


@dataclass(frozen=True)
class Held:
    """A lease as held now: its epoch and the seconds it has left (engine's clock)."""

    epoch: int
    left_s: float


class PlannerLease:
    """The lease of one planner (``planner``), as instance ``instance`` sees it.

    :meth:`acquire` takes it (free or expired) or renews it (already ours); another holder's
    unexpired lease raises :class:`~coshare.errors.Standby`. :meth:`check` (inside a write
    transaction) and :meth:`fence` (before a scheduler write) raise
    :class:`~coshare.errors.LeaseLost` once it is no longer ours with the same epoch.

    Args:
        engine: the engine.
        planner: the planner's domain name (same for both instances of one planner).
        instance: this instance's name (``None``: the host name).
        lease_s: how long a lease lasts from its last renewal.
    """

    def __init__(self, engine: Engine, planner: str, instance: str | None, lease_s: float) -> None:
        self.engine = engine
        self.planner = planner
        self.instance = instance or socket.gethostname()
        self.lease_s = lease_s
        self.epoch: int | None = None
        # Takeover waits for the old holder's transaction in flight (its FOR SHARE lock on
        # the lease row); a holder stalled inside one is cut off after half a lease.
        engine.limit_stall(lease_s / 2)

    def acquire(self) -> Held:
        """Take or renew the lease; sweep dead bookings.

        Raises:
            Standby: another instance holds it.
            EngineUnavailable: the engine cannot be reached.
        """

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> Held | tuple[str, float]:
            cur.execute(
                """
                INSERT INTO coshare_leases AS l (planner, holder, epoch, lease_until)
                VALUES (%(p)s, %(h)s, 1, clock_timestamp() + %(s)s * interval '1 second')
                ON CONFLICT (planner) DO UPDATE SET
                    holder = excluded.holder,
                    epoch = CASE WHEN l.holder = excluded.holder
                                  AND l.lease_until > clock_timestamp()
                                 THEN l.epoch ELSE l.epoch + 1 END,
                    lease_until = excluded.lease_until
                WHERE l.holder = excluded.holder OR l.lease_until <= clock_timestamp()
                RETURNING epoch, extract(epoch FROM lease_until - clock_timestamp())
            """,
                {"p": self.planner, "h": self.instance, "s": self.lease_s},
            )
            row = cur.fetchone()
            if row is None:
                cur.execute(
                    "SELECT holder, extract(epoch FROM lease_until - clock_timestamp()) "
                    "FROM coshare_leases WHERE planner = %s",
                    (self.planner,),
                )
                other = cur.fetchone()
                assert other is not None
                return str(other[0]), _float(other[1])
            cur.execute(_SWEEP, {"units": None})
            cur.execute(_SWEEP_QUEUE, {"units": None, "jobs": None})
            cur.execute(_SWEEP_CLAIMS)
            return Held(_int(row[0]), _float(row[1]))

        got = self.engine.run(work)
        if isinstance(got, tuple):
            self.epoch = None
            raise Standby(self.planner, self.instance, got[0], max(0.0, got[1]))
        self.epoch = got.epoch
        return got

    def check(self, cur: psycopg.Cursor[tuple[object, ...]]) -> int:
        """Inside a write transaction: lock the lease row (``FOR SHARE``: a takeover waits
        for this transaction) and make sure it is still ours; its epoch.

        Raises:
            LeaseLost: never acquired, expired, or taken over.
        """
        if self.epoch is None:
            raise LeaseLost(self.planner, self.instance, None, "never acquired")
        cur.execute(
            "SELECT holder, epoch, lease_until > clock_timestamp() FROM coshare_leases "
            "WHERE planner = %s FOR SHARE",
            (self.planner,),
        )
        row = cur.fetchone()
        if row is None:
            raise LeaseLost(self.planner, self.instance, None, "no lease row")
        holder, epoch, alive = str(row[0]), _int(row[1]), bool(row[2])
        if holder != self.instance or epoch != self.epoch:
            raise LeaseLost(
                self.planner,
                self.instance,
                holder,
                f"instance {holder!r} holds it now, epoch {epoch}",
            )
        if not alive:
            raise LeaseLost(
                self.planner,
                self.instance,
                None,
                f"it expired: not renewed within {self.lease_s:g} s",
            )
        return epoch

    def fence(self) -> Held:
        """Renew the lease only if it is still ours with the same epoch (right before a
        write to the scheduler: the write then has ``lease_s`` before anyone else may take
        over).

        Raises:
            LeaseLost: it is not.
            EngineUnavailable: the engine cannot be reached.
        """

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> Held:
            self.check(cur)
            cur.execute(
                "UPDATE coshare_leases SET lease_until = clock_timestamp() + %s * "
                "interval '1 second' WHERE planner = %s",
                (self.lease_s, self.planner),
            )
            assert self.epoch is not None
            return Held(self.epoch, self.lease_s)

        return self.engine.run(work)

    def release(self) -> None:
        """Give the lease up now (a clean shutdown): the other instance may take over at once
        and this instance's bookings are dead."""

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
            cur.execute(
                "UPDATE coshare_leases SET lease_until = clock_timestamp() "
                "WHERE planner = %s AND holder = %s AND epoch = %s",
                (self.planner, self.instance, self.epoch),
            )

        if self.epoch is not None:
            self.engine.run(work)
            self.epoch = None


@dataclass(frozen=True)
class Claim:
    """What :meth:`PostgresReservations.claim` did.

    Attributes:
        granted: the units now reserved for the job (in unit order).
        cancelled: lower jobs whose reservations it cancelled (active cancellation).
        conflicts: ``(unit, job)`` of the units it could not take: held, or reserved by a
            higher job, or taken in between.
    """

    granted: tuple[str, ...]
    cancelled: tuple[str, ...]
    conflicts: tuple[tuple[str, str], ...]


Order = tuple[int, int]


class PostgresReservations:
    """The :class:`~coshare.alloc.store.ReservationStore` port on PostgreSQL, written under
    one planner's lease.

    Args:
        lease: the planner lease every write is checked against (acquired first).
        layout: the domains and their units (``free`` lists a domain's units).
        orders: each job's place in the global order, ``(submit, home)``; a job not in it
            ranks as ``(0, domain)`` (the highest: never cancelled).

    Reads see only live bookings (any planner's); writes refuse with
    :class:`~coshare.errors.DoubleBooking` and change nothing, as the in-memory store does.
    """

    def __init__(
        self, lease: PlannerLease, layout: Layout, orders: dict[str, Order] | None = None
    ) -> None:
        self.lease = lease
        self.engine = lease.engine
        self.layout = layout
        self.orders = orders if orders is not None else {}
        self._units = [d.cores() for d in layout.domains]

    # -- reads --------------------------------------------------------------------------
    def free(self, domain: int) -> tuple[str, ...]:
        taken = set(self._column("SELECT unit FROM coshare_live WHERE domain = %s", (domain,)))
        return tuple(u for u in self._units[domain] if u not in taken)

    def booked(self, domain: int, job: str, state: State = "reserved") -> tuple[str, ...]:
        mine = set(
            self._column(
                "SELECT unit FROM coshare_live WHERE domain = %s AND job = %s AND state = %s",
                (domain, job, state),
            )
        )
        return tuple(u for u in self._units[domain] if u in mine)

    def holders(self) -> dict[str, str]:
        """Every live booked unit and its job (all planners)."""
        rows = self.engine.run(
            lambda cur: cur.execute("SELECT unit, job FROM coshare_live").fetchall()
        )
        return {str(u): str(j) for u, j in rows}

    # -- the port's writes --------------------------------------------------------------
    def reserve(self, domain: int, job: str, cores: Sequence[str]) -> None:
        name = self.layout.domains[domain].name
        own = set(self._units[domain])
        for core in cores:
            if core not in own:
                raise DoubleBooking(name, core, "(another domain)", job)
        submit, home = self.orders.get(job, (0, domain))

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
            epoch = self.lease.check(cur)
            units = sorted(cores)
            cur.execute(_SWEEP, {"units": units})
            got = self._insert(cur, domain, job, units, submit, home, epoch)
            if len(got) < len(units):
                taken = sorted(set(units) - set(got))[0]
                holder = cur.execute(
                    "SELECT job FROM coshare_reservations WHERE unit = %s", (taken,)
                ).fetchone()
                raise DoubleBooking(
                    name, taken, str(holder[0]) if holder else "(another job)", job
                )  # rolls the whole transaction back: all or none

        self.engine.run(work)

    def hold(self, domain: int, job: str, cores: Sequence[str]) -> tuple[str, ...]:
        name = self.layout.domains[domain].name

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> tuple[str, ...]:
            self.lease.check(cur)
            return hold_reserved(cur, name, domain, job, cores)

        return self.engine.run(work)

    def release(self, domain: int, job: str) -> tuple[str, ...]:
        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> tuple[str, ...]:
            self.lease.check(cur)
            cur.execute(
                "DELETE FROM coshare_reservations WHERE domain = %s AND job = %s RETURNING unit",
                (domain, job),
            )
            return tuple(sorted(str(row[0]) for row in cur.fetchall()))

        return self.engine.run(work)

    # -- the global order and active cancellation ----------------------------------------
    def claim(
        self, job: str, order: Order, units: Sequence[tuple[int, str]], *, partial: bool = False
    ) -> Claim:
        """Reserve ``units`` (``(domain, unit)`` pairs) for ``job`` at ``order`` (submission
        time stamp, home domain id), cancelling lower jobs' reservations in the way.

        A unit reserved (not held) by a job lower in the global order
        ``(submit, home, job)`` is taken: all of that job's reservations are released (the
        paper's cancel follows the whole request) and its planner finds the job in
        :meth:`cancelled` and requests it again. Held units and higher jobs' reservations are
        conflicts. ``partial``: keep what was granted (the paper's incremental commit);
        otherwise all or none (a conflict undoes the cancellations too).
        """
        submit, home = order
        me = (submit, home, job)

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> Claim:
            epoch = self.lease.check(cur)
            wanted = sorted({u for _, u in units})
            domain_of = {u: d for d, u in units}
            cur.execute(_SWEEP, {"units": wanted})
            cur.execute(
                "SELECT unit, job, state, submit, home FROM coshare_reservations "
                "WHERE unit = ANY(%s) ORDER BY unit FOR UPDATE",
                (wanted,),
            )
            conflicts: list[tuple[str, str]] = []
            victims: set[str] = set()
            taken: set[str] = set()
            for unit, other, state, o_submit, o_home in cur.fetchall():
                unit, other = str(unit), str(other)
                if other == job:
                    taken.add(unit)  # ours already
                elif state == "reserved" and (_int(o_submit), _int(o_home), other) > me:
                    victims.add(other)
                else:
                    conflicts.append((unit, other))
            if conflicts and not partial:
                return Claim((), (), tuple(conflicts))
            for victim in sorted(victims):
                cur.execute(
                    "DELETE FROM coshare_reservations WHERE job = %s AND "
                    "state = 'reserved' RETURNING planner",
                    (victim,),
                )
                planners = {str(row[0]) for row in cur.fetchall()}
                for planner in sorted(planners):
                    cur.execute(
                        "INSERT INTO coshare_cancellations (job, planner, by_job) "
                        "VALUES (%s, %s, %s)",
                        (victim, planner, job),
                    )
            blocked = {u for u, _ in conflicts}
            rest = [u for u in wanted if u not in blocked and u not in taken]
            got: list[str] = []
            for domain in sorted({domain_of[u] for u in rest}):
                got += self._insert(
                    cur,
                    domain,
                    job,
                    [u for u in rest if domain_of[u] == domain],
                    submit,
                    home,
                    epoch,
                )
            late = sorted(set(rest) - set(got))
            if late:
                rows = cur.execute(
                    "SELECT unit, job FROM coshare_reservations WHERE unit = ANY(%s)", (late,)
                ).fetchall()
                found = {str(u): str(j) for u, j in rows}
                conflicts += [(u, found.get(u, "(another job)")) for u in late]
                if not partial:
                    raise _Undo(Claim((), (), tuple(conflicts)))
            return Claim(tuple(sorted(taken | set(got))), tuple(sorted(victims)), tuple(conflicts))

        try:
            return self.engine.run(work)
        except _Undo as undo:
            return undo.claim

    def cancelled(self) -> tuple[str, ...]:
        """The jobs of this planner whose requests were cancelled since the last call
        (they wait again); taken off the engine's list."""

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> tuple[str, ...]:
            self.lease.check(cur)
            cur.execute(
                "DELETE FROM coshare_cancellations WHERE planner = %s RETURNING job",
                (self.lease.planner,),
            )
            return tuple(sorted({str(row[0]) for row in cur.fetchall()}))

        return self.engine.run(work)

    def sweep(self) -> int:
        """Delete every dead booking (of planners whose lease expired); how many."""
        return self.engine.run(lambda cur: cur.execute(_SWEEP, {"units": None}).rowcount)

    # -- helpers ------------------------------------------------------------------------
    def _insert(
        self,
        cur: psycopg.Cursor[tuple[object, ...]],
        domain: int,
        job: str,
        units: Sequence[str],
        submit: int,
        home: int,
        epoch: int,
    ) -> list[str]:
        cur.execute(
            """
            INSERT INTO coshare_reservations (unit, domain, job, state, submit, home, planner,
                                              epoch)
            SELECT u, %(d)s, %(j)s, 'reserved', %(s)s, %(h)s, %(p)s, %(e)s
            FROM unnest(%(units)s::text[]) AS u ORDER BY u
            ON CONFLICT (unit) DO NOTHING RETURNING unit""",
            {
                "d": domain,
                "j": job,
                "s": submit,
                "h": home,
                "p": self.lease.planner,
                "e": epoch,
                "units": list(units),
            },
        )
        return [str(row[0]) for row in cur.fetchall()]

    def _column(self, sql: str, params: tuple[object, ...]) -> list[str]:
        rows = self.engine.run(lambda cur: cur.execute(sql, params).fetchall())
        return [str(row[0]) for row in rows]


class PostgresClaims:
    """Device-memory claims of one planner's cycles (:mod:`coshare.coord.claims` has the
    rules), written under its lease.

    Args:
        lease: the planner's lease (acquired first); every write checks it.
    """

    def __init__(self, lease: PlannerLease) -> None:
        self.lease = lease
        self.engine = lease.engine

    def live(self) -> tuple[Claimed, ...]:
        """Every live claim (all planners)."""
        rows = self.engine.run(
            lambda cur: cur.execute(
                "SELECT planner, job, node, device, memory_mib FROM coshare_live_claims"
            ).fetchall()
        )
        return tuple(_claimed(row) for row in rows)

    def own_jobs(self) -> tuple[str, ...]:
        """The jobs this planner holds live claims for."""
        rows = self.engine.run(
            lambda cur: cur.execute(
                "SELECT DISTINCT job FROM coshare_live_claims WHERE planner = %s",
                (self.lease.planner,),
            ).fetchall()
        )
        return tuple(sorted(str(row[0]) for row in rows))

    def release(self, jobs: Sequence[str]) -> int:
        """Release this planner's claims of ``jobs`` (ended, removed, pending again); how
        many parts were released.

        Raises:
            LeaseLost: the lease is no longer this instance's (nothing is released).
        """

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> int:
            self.lease.check(cur)
            cur.execute(
                "DELETE FROM coshare_claims WHERE planner = %s AND job = ANY(%s)",
                (self.lease.planner, list(jobs)),
            )
            return cur.rowcount

        return self.engine.run(work) if jobs else 0

    def claim(
        self,
        wanted: Mapping[str, Sequence[Part]],
        capacity: Mapping[str, int],
        seen_use: Mapping[str, Mapping[str, int]],
        *,
        global_ids: bool = True,
    ) -> Decision:
        """Book ``wanted``'s jobs, each all or none, in one transaction (:func:`admit`).

        The devices involved are locked first (transaction-level advisory locks, in one
        global order, so two planners claiming overlapping devices never deadlock and the
        second sees the first's claims); then the live claims on them are read and
        :func:`~coshare.coord.claims.admit` decides; the granted parts are inserted (a job
        claimed again replaces its earlier parts).

        Raises:
            LeaseLost: the lease is no longer this instance's (nothing is booked).
        """
        units = sorted({p.unit for parts in wanted.values() for p in parts})

        def work(cur: psycopg.Cursor[tuple[object, ...]]) -> Decision:
            epoch = self.lease.check(cur)
            # hashtext collisions only serialize two devices more than needed.
            cur.execute(
                "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT "
                "hashtext(u)::bigint + %s AS k FROM unnest(%s::text[]) AS u) x "
                "ORDER BY k",
                (_CLAIM_LOCKS, units),
            )
            cur.execute(
                "SELECT planner, job, node, device, memory_mib FROM coshare_live_claims"
                " WHERE unit = ANY(%s)",
                (units,),
            )
            live = [_claimed(row) for row in cur.fetchall()]
            decision = admit(
                self.lease.planner,
                wanted,
                capacity,
                live,
                {u: seen_use[u] for u in units if u in seen_use},
                global_ids=global_ids,
            )
            jobs = sorted({p.job for p in decision.granted})
            cur.execute(
                "DELETE FROM coshare_claims WHERE planner = %s AND job = ANY(%s)",
                (self.lease.planner, jobs),
            )
            rows: dict[tuple[str, str, str], int] = {}
            for p in decision.granted:
                key = (p.job, p.node, p.device)
                rows[key] = rows.get(key, 0) + p.memory_mib
            if rows:
                cur.execute(
                    """
                    INSERT INTO coshare_claims (job, node, device, unit, memory_mib, planner,
                                                epoch)
                    SELECT j, n, d, n || '/' || d, m, %s, %s
                    FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[]) AS x(j, n, d, m)
                """,
                    (
                        self.lease.planner,
                        epoch,
                        [k[0] for k in rows],
                        [k[1] for k in rows],
                        [k[2] for k in rows],
                        list(rows.values()),
                    ),
                )
            return decision

        if not wanted:
            return Decision((), {})
        return self.engine.run(work)


#: Offset of the claim locks' keys (apart from other advisory locks of the database).
_CLAIM_LOCKS = 0x636C << 32  # "cl"


def hold_reserved(
    cur: psycopg.Cursor[tuple[object, ...]], name: str, domain: int, job: str, cores: Sequence[str]
) -> tuple[str, ...]:
    """Inside a writer's transaction: ``job``'s live reservations of ``cores`` become held
    and its other reservations in ``domain`` are released (the paper's spawn; both stores);
    the units released.

    Raises:
        DoubleBooking: a core is not reserved for ``job`` (naming the domain ``name``, the
            core and who holds it).
    """
    cur.execute(
        """
        UPDATE coshare_reservations r SET state = 'held'
        FROM coshare_live l
        WHERE r.unit = l.unit AND r.unit = ANY(%s) AND r.job = %s AND r.state = 'reserved'
        RETURNING r.unit""",
        (list(cores), job),
    )
    done = {str(row[0]) for row in cur.fetchall()}
    missing = [c for c in cores if c not in done]
    if missing:
        holder = cur.execute(
            "SELECT job FROM coshare_live WHERE unit = %s", (missing[0],)
        ).fetchone()
        raise DoubleBooking(name, missing[0], str(holder[0]) if holder else "(nobody)", job)
    cur.execute(
        "DELETE FROM coshare_reservations WHERE domain = %s AND job = %s AND "
        "state = 'reserved' RETURNING unit",
        (domain, job),
    )
    return tuple(sorted(str(row[0]) for row in cur.fetchall()))


def _claimed(row: Sequence[object]) -> Claimed:
    planner, job, node, device, memory = row
    return Claimed(str(planner), Part(str(job), str(node), str(device), _int(memory)))


class _Undo(Exception):
    """Rolls a claim's transaction back and carries its answer out."""

    def __init__(self, claim: Claim) -> None:
        super().__init__("undo")
        self.claim = claim


@contextmanager
def engine_at(dsn: str, connect_timeout_s: float = 5.0) -> Iterator[Engine]:
    """An :class:`Engine` closed at the end of the block."""
    engine = Engine(dsn, connect_timeout_s)
    try:
        yield engine
    finally:
        engine.close()
