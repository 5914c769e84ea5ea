"""PICASO's reservations on the PostgreSQL engine: cores booked per domain in the global
order, with active cancellation of lower jobs (PICASO 4.2); the sequencer alternative is
:mod:`coshare.coord.sequencer`. Written under a planner's lease (:mod:`coshare.coord.leases`);
the tables and isolation rules: :mod:`coshare.coord.engine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from coshare.alloc.layout import Layout
from coshare.alloc.store import State
from coshare.coord.engine import SWEEP, int_of
from coshare.coord.leases import PlannerLease
from coshare.errors import (
    DoubleBooking,
)


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
            cur.execute(SWEEP, {"units": units})
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
            cur.execute(SWEEP, {"units": wanted})
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
                elif state == "reserved" and (int_of(o_submit), int_of(o_home), other) > me:
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
        return self.engine.run(lambda cur: cur.execute(SWEEP, {"units": None}).rowcount)

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


class _Undo(Exception):
    """Rolls a claim's transaction back and carries its answer out."""

    def __init__(self, claim: Claim) -> None:
        super().__init__("undo")
        self.claim = claim
