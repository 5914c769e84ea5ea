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

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from coshare.errors import (
    ConfigError,
    CoordinationError,
    EngineUnavailable,
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
SWEEP_CLAIMS = """
DELETE FROM coshare_claims c USING coshare_leases l
WHERE l.planner = c.planner AND (l.epoch <> c.epoch OR l.lease_until <= clock_timestamp())
"""

#: Deletes the dead bookings among ``units`` (all when ``units`` is NULL).
SWEEP = """
DELETE FROM coshare_reservations r USING coshare_leases l
WHERE l.planner = r.planner AND (l.epoch <> r.epoch OR l.lease_until <= clock_timestamp())
  AND (%(units)s::text[] IS NULL OR r.unit = ANY(%(units)s::text[]))
"""

#: Deletes the sequencer's dead waits among ``units`` and dead tickets of ``jobs`` (each: all
#: when NULL; :mod:`coshare.coord.sequencer`).
SWEEP_QUEUE = """
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


def int_of(value: object) -> int:
    """A number column as an int (psycopg types rows as ``object``)."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"expected a number from the engine, got {value!r}")


def float_of(value: object) -> float:
    """A number column (``extract`` gives ``numeric``) as a float."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"expected a number from the engine, got {value!r}")


def first_line(exc: BaseException) -> str:
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
            raise EngineUnavailable(self.address, first_line(exc)) from exc
        self._conn = conn
        try:
            conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (str(max(1, round(self.stall_s * 1000))),),
            )
        except psycopg.OperationalError as exc:
            self.close()
            raise EngineUnavailable(self.address, first_line(exc)) from exc
        if not self._schema:
            self.run(create_schema)
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
                        f"row ({first_line(exc)}); nothing of it was "
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
                raise EngineUnavailable(self.address, first_line(exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def create_schema(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
    cur.execute(SCHEMA)


@contextmanager
def engine_at(dsn: str, connect_timeout_s: float = 5.0) -> Iterator[Engine]:
    """An :class:`Engine` closed at the end of the block."""
    engine = Engine(dsn, connect_timeout_s)
    try:
        yield engine
    finally:
        engine.close()
