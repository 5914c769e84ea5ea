"""Several planners over one cluster through a real PostgreSQL: plan + commit seconds and
conflicts per cycle (the live part of the measurements).

For each planner count (2, 4, 8) a fresh database on a PostgreSQL started here with
``deploy/postgres/local-postgres`` (or ``--dsn``), one simulated cluster of ``--devices``
devices (nodes of 8, all planners over all of them: fully overlapping) and ``--jobs`` pending
jobs split round-robin among the planners (widths 1, 2, 4, 8 devices at 80/10/7/3 %, a run
of 1..4 cycles, the global order = (job number, planner index)). Every planner is a process
of its own and runs ``--cycles`` cycles concurrently with the others:

1. *plan*: read the free devices (one query of ``coshare_live``), walk its pending jobs in
   the global order and give each the first free devices
   (at most ``--max-claims`` jobs a cycle);
2. *commit*: release the jobs whose run ended (before the read), ``claim`` each planned job
   (one transaction each, all or none, with active cancellation), then ``hold`` the granted
   ones (the spawn).

``--protocol sequencer`` (PICASO 4.3, :mod:`coshare.coord.sequencer`) runs the same cycles
with the engine's sequencer instead: *commit* releases the ended jobs (their devices go to
the lowest tickets waiting), polls this planner's waiting requests and holds the ready ones,
then ``request``s each newly planned job (one transaction each: a ticket, the free devices
granted in ticket order, a wait for the rest) and holds those granted whole at once. A
request is never refused or cancelled: it waits (at most ``--max-claims`` requests of a
planner in flight).

*Conflicts* per cycle: claims refused (a device went to another planner since the read, or
a higher job reserves it; sequencer: requests not granted whole at once, which wait), lower
reservations this planner's claims cancelled, and own claims cancelled by a higher job
before the hold (lost); *started*: jobs held (spawned). Printed per protocol and planner
count: the mean over planners and cycles of plan seconds, commit seconds, claims, each
conflict count and the jobs started.

    sudo python bench/picaso_engine.py [--planners 2,4,8] [--devices 10000] [--jobs 100000]
        [--cycles 3] [--max-claims 2000] [--protocol cancel,sequencer] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from coshare.alloc.layout import Domain, Layout
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease
from coshare.coord.reservations import PostgresReservations
from coshare.coord.sequencer import SequencerReservations
from coshare.errors import DoubleBooking

DEVICES_PER_NODE = 8
WIDTHS = ((1, 0.80), (2, 0.10), (4, 0.07), (8, 0.03))


def cluster(devices: int) -> Layout:
    nodes = tuple((f"n{i:05d}", DEVICES_PER_NODE) for i in range(devices // DEVICES_PER_NODE))
    return Layout((Domain("cluster", nodes),), 1, 1)


def jobs_of(planner: int, planners: int, total: int, seed: int) -> list[tuple[str, int, int]]:
    """``(job, width, run cycles)`` of this planner, in its global order."""
    rng = random.Random(seed)
    widths, weights = zip(*WIDTHS, strict=True)
    out = []
    for i in range(total):
        width = rng.choices(widths, weights)[0]
        run = rng.randint(1, 4)
        if i % planners == planner:
            out.append((f"j{i}", width, run))
    return out


def planner_main(args: tuple[str, int, int, int, int, int, int]) -> list[dict[str, float]]:
    dsn, index, planners, devices, total, cycles, max_claims = args
    layout = cluster(devices)
    lease = PlannerLease(Engine(dsn), f"p{index}", "bench", 3600)
    lease.acquire()
    store = PostgresReservations(lease, layout)
    pending = jobs_of(index, planners, total, seed=20)
    running: dict[str, int] = {}  # job -> cycle its run ends
    figures = []
    for cycle in range(cycles):
        start = time.perf_counter()
        for job in [j for j, end in running.items() if end <= cycle]:
            store.release(0, job)
            del running[job]
        release_s = time.perf_counter() - start
        start = time.perf_counter()
        free = list(store.free(0))
        planned: list[tuple[str, int, int, list[str]]] = []
        for position, (job, width, run) in enumerate(pending):
            if len(planned) >= max_claims or len(free) < 1:
                break
            if width <= len(free):
                planned.append((job, position, run, free[:width]))
                free = free[width:]
        plan_s = time.perf_counter() - start
        start = time.perf_counter()
        refused = cancelled_others = granted = 0
        won: list[tuple[str, int, int, list[str]]] = []
        for job, position, run, units in planned:
            number = int(job[1:])
            claim = store.claim(job, (number, index), [(0, u) for u in units])
            cancelled_others += len(claim.cancelled)
            if claim.granted:
                granted += 1
                won.append((job, position, run, units))
            else:
                refused += 1
        lost = 0
        started = set()
        for job, _, run, units in won:
            try:
                store.hold(0, job, units)
            except DoubleBooking:
                lost += 1  # a higher job cancelled it after the claim: it waits again
                continue
            running[job] = cycle + run
            started.add(job)
        pending = [p for p in pending if p[0] not in started]
        store.cancelled()
        commit_s = time.perf_counter() - start + release_s
        figures.append(
            {
                "plan_s": plan_s,
                "commit_s": commit_s,
                "claims": len(planned),
                "granted": granted,
                "refused": refused,
                "cancelled_others": cancelled_others,
                "lost_to_cancel": lost,
                "started": len(started),
            }
        )
    lease.engine.close()
    return figures


def sequencer_main(args: tuple[str, int, int, int, int, int, int]) -> list[dict[str, float]]:
    """One planner's cycles with the engine's sequencer (the module docstring)."""
    dsn, index, planners, devices, total, cycles, max_claims = args
    layout = cluster(devices)
    lease = PlannerLease(Engine(dsn), f"p{index}", "bench", 3600)
    lease.acquire()
    store = SequencerReservations(lease, layout)
    pending = jobs_of(index, planners, total, seed=20)
    running: dict[str, int] = {}  # job -> cycle its run ends
    waiting: dict[str, tuple[int, list[str]]] = {}  # job -> run, devices requested
    figures = []
    for cycle in range(cycles):
        start = time.perf_counter()
        for job in [j for j, end in running.items() if end <= cycle]:
            store.release(0, job)
            del running[job]
        started: set[str] = set()

        def spawn(
            job: str, run: int, units: list[str], cycle: int = cycle, started: set[str] = started
        ) -> None:
            store.hold(0, job, units)  # granted whole: never taken back, so never refused
            running[job] = cycle + run
            started.add(job)

        for job, req in (store.poll(waiting) if waiting else {}).items():
            if req.ready:
                spawn(job, *waiting.pop(job))
        release_s = time.perf_counter() - start
        start = time.perf_counter()
        free = list(store.free(0))
        planned: list[tuple[str, int, list[str]]] = []
        for job, width, run in pending:
            if len(planned) + len(waiting) >= max_claims or len(free) < 1:
                break
            if job not in waiting and width <= len(free):
                planned.append((job, run, free[:width]))
                free = free[width:]
        plan_s = time.perf_counter() - start
        start = time.perf_counter()
        granted = 0
        for job, run, units in planned:
            req = store.request(job, [(0, u) for u in units], home=index)
            if req.ready:
                granted += 1
                spawn(job, run, units)
            else:
                waiting[job] = (run, units)
        pending = [p for p in pending if p[0] not in started]
        cancelled = len(store.cancelled())
        commit_s = time.perf_counter() - start + release_s
        figures.append(
            {
                "plan_s": plan_s,
                "commit_s": commit_s,
                "claims": len(planned),
                "granted": granted,
                "refused": len(planned) - granted,
                "cancelled_others": cancelled,
                "lost_to_cancel": 0,
                "started": len(started),
                "waiting": len(waiting),
            }
        )
    lease.engine.close()
    return figures


MAINS = {"cancel": planner_main, "sequencer": sequencer_main}


def fresh_database(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    parts["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items()})


def run(
    dsn: str,
    planners_list: list[int],
    devices: int,
    jobs: int,
    cycles: int,
    max_claims: int,
    protocols: tuple[str, ...] = ("cancel",),
) -> None:
    print(
        f"{devices} devices ({devices // DEVICES_PER_NODE} nodes x {DEVICES_PER_NODE}), "
        f"{jobs} pending jobs, {cycles} cycles, at most {max_claims} claims per planner "
        "and cycle; PostgreSQL on this machine (unix socket)"
    )
    print(
        f"{'protocol':>9} {'planners':>8} {'plan s':>8} {'commit s':>9} {'claims':>7} "
        f"{'granted':>8} {'refused':>8} {'cancelled':>10} {'lost':>6} {'started':>8} "
        f"{'ms/claim':>9}   (mean per planner and cycle; sequencer: refused = waiting)"
    )
    for protocol in protocols:
        for planners in planners_list:
            db = fresh_database(dsn, f"bench_{protocol}_{planners}")
            results = planners_run(MAINS[protocol], db, planners, devices, jobs, cycles, max_claims)
            rows = [r for per in results for r in per]

            def mean(key: str, rows: list[dict[str, float]] = rows) -> float:
                return statistics.fmean(r[key] for r in rows)

            per_claim = 1000 * mean("commit_s") / max(1.0, mean("claims"))
            print(
                f"{protocol:>9} {planners:>8} {mean('plan_s'):>8.3f} "
                f"{mean('commit_s'):>9.2f} {mean('claims'):>7.0f} {mean('granted'):>8.0f} "
                f"{mean('refused'):>8.0f} {mean('cancelled_others'):>10.1f} "
                f"{mean('lost_to_cancel'):>6.1f} {mean('started'):>8.0f} "
                f"{per_claim:>9.2f}",
                flush=True,
            )
            print(
                "          per cycle: "
                + json.dumps([{k: round(v, 3) for k, v in r.items()} for r in results[0]]),
                flush=True,
            )


#: One planner process's arguments: database, index, planners, devices, jobs, cycles, claims.
PlannerArgs = tuple[str, int, int, int, int, int, int]


def planners_run(
    planner_main: Callable[[PlannerArgs], list[dict[str, float]]],
    db: str,
    planners: int,
    devices: int,
    jobs: int,
    cycles: int,
    max_claims: int,
) -> list[list[dict[str, float]]]:
    """Each of ``planners`` processes runs ``planner_main`` against database ``db``; their
    figures per cycle, planner by planner."""
    with multiprocessing.get_context("spawn").Pool(planners) as pool:
        return pool.map(
            planner_main,
            [(db, i, planners, devices, jobs, cycles, max_claims) for i in range(planners)],
        )


def main_with(run: Callable[..., None], doc: str, *, protocols: bool = False) -> None:
    """The command line both engine benchmarks share: ``run`` against ``--dsn`` or a
    PostgreSQL started here (``protocols``: with ``--protocol``, passed as ``protocols``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if protocols:
        parser.add_argument(
            "--protocol", default="cancel,sequencer", help="comma-separated: cancel, sequencer"
        )
    parser.add_argument("--planners", default="2,4,8")
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--max-claims", type=int, default=2000)
    parser.add_argument("--dsn", help="an existing PostgreSQL (default: start one here)")
    args = parser.parse_args()
    planners = [int(p) for p in args.planners.split(",")]
    extra: dict[str, tuple[str, ...]] = {}
    if protocols:
        extra["protocols"] = tuple(args.protocol.split(","))
        unknown = sorted(set(extra["protocols"]) - set(MAINS))
        if unknown:
            parser.error(f"--protocol: unknown {', '.join(unknown)} (known: {', '.join(MAINS)})")
    if args.dsn:
        run(args.dsn, planners, args.devices, args.jobs, args.cycles, args.max_claims, **extra)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.postgres import running_postgres

    with running_postgres() as server:
        run(
            server.dsn("postgres", tcp=False),
            planners,
            args.devices,
            args.jobs,
            args.cycles,
            args.max_claims,
            **extra,
        )


def main() -> None:
    main_with(run, __doc__ or "", protocols=True)


if __name__ == "__main__":
    main()
