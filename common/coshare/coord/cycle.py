"""What a live cycle does with the coordination engine (issue 20 items 3-4).

With ``coordination.dsn`` set, :func:`coordination` takes or renews this planner's lease
before the cycle reads anything, and yields a *fence* that the cycle calls right before it
writes to the scheduler: the fence renews the lease only if it is still this instance's with
the same epoch, so a planner that lost its lease stops before its next write and says so
(:class:`~coshare.errors.LeaseLost`, exit 1). An instance that does not hold the lease is
standby (:class:`~coshare.errors.Standby`, exit 0: it did nothing). An unreachable engine at
either point: :class:`~coshare.errors.EngineUnavailable` naming the address, nothing written,
exit 1; the next cycle connects afresh.

Without ``coordination.dsn`` (the default) the fence is ``None`` and the cycle runs as it
always did: one planner, no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coshare.config import CoordinationConfig
from coshare.extras import load

Fence = Callable[[], None]


@contextmanager
def coordination(config: CoordinationConfig, scheduler: str,
                 dry_run: bool = False) -> Iterator[Fence | None]:  # fmt: skip
    """The lease of planner ``config.domain`` (else ``scheduler``) for one cycle.

    Yields:
        the fence to call before writing, or ``None`` (no engine configured, or a dry run,
        which writes nothing and so needs no lease).

    Raises:
        Standby: another instance holds the lease.
        LeaseLost: (from the fence) the lease is no longer this instance's.
        EngineUnavailable: the engine cannot be reached.
        MissingExtra: psycopg is not installed (``coshare[coord]``).
    """
    if config.dsn is None or dry_run:
        yield None
        return
    postgres = load("coshare.coord.postgres", "coordination.dsn")
    engine = postgres.Engine(config.dsn, config.connect_timeout_s)
    try:
        lease = postgres.PlannerLease(engine, config.domain or scheduler, config.instance,
                                      config.lease_s)  # fmt: skip
        lease.acquire()

        def fence() -> None:
            lease.fence()

        yield fence
    finally:
        engine.close()
