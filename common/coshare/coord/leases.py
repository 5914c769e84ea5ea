"""A planner's lease and the device-memory claims written under it, on the PostgreSQL engine
(:mod:`coshare.coord.engine` has the tables and the isolation rules).

- :class:`PlannerLease`: one planner's lease (a row with an expiry on the engine's clock and a
  fencing epoch raised whenever it changes hands); every write checks it first.
- :class:`PostgresClaims`: the device parts a planner's cycle placed, booked before the
  placement is written to the scheduler (the rules: :mod:`coshare.coord.claims`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg

from coshare.coord.claims import Claimed, Decision, Part, admit
from coshare.coord.engine import SWEEP, SWEEP_CLAIMS, SWEEP_QUEUE, Engine, float_of, int_of
from coshare.errors import (
    LeaseLost,
    Standby,
)


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
                return str(other[0]), float_of(other[1])
            cur.execute(SWEEP, {"units": None})
            cur.execute(SWEEP_QUEUE, {"units": None, "jobs": None})
            cur.execute(SWEEP_CLAIMS)
            return Held(int_of(row[0]), float_of(row[1]))

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
        holder, epoch, alive = str(row[0]), int_of(row[1]), bool(row[2])
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


def _claimed(row: Sequence[object]) -> Claimed:
    planner, job, node, device, memory = row
    return Claimed(str(planner), Part(str(job), str(node), str(device), int_of(memory)))
