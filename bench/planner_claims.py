"""Several planners claiming their cycles' device memory in one PostgreSQL, as live cycles
with ``coordination:`` do (the live path; coshare.coord.claims).

For each planner count (2, 4, 8): a fresh database on a PostgreSQL started here with
``deploy/postgres/local-postgres`` (or ``--dsn``), one simulated cluster of ``--devices``
devices of 8 GiB (nodes of 8, every planner over all of them) and ``--jobs`` pending jobs
split round-robin among the planners (device memory 1-8 GiB; 1, 2 or 4 devices on one node
at 85/10/5 %; a run of 1..4 cycles). Every planner is a process of its own and runs
``--cycles`` cycles concurrently with the others, each as :class:`~coshare.coord.cycle.
EngineGate` does it:

1. *settle*: release its claims of jobs whose run ended, read every live claim;
2. *plan*: first fit of its pending jobs, in order, on the memory the live claims leave
   (at most ``--max-claims`` jobs a cycle; the stand-in for a policy, which reads nothing);
3. *claim*: :meth:`~coshare.coord.leases.PostgresClaims.claim` of the whole plan in one
   transaction (devices locked in one order, each job all or none).

*Refused*: jobs whose device another planner claimed between this planner's settle and its
claim (the conflicts resolved). Printed per planner count: the mean over planners and cycles.

    sudo python bench/planner_claims.py [--planners 2,4,8] [--devices 10000] [--jobs 100000]
        [--cycles 3] [--max-claims 2000] [--dsn DSN]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

from coshare.coord.claims import Part, unit_of
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease, PostgresClaims

sys.path.insert(0, str(Path(__file__).resolve().parent))
from picaso_engine import fresh_database, main_with, planners_run

DEVICES_PER_NODE = 8
DEVICE_MIB = 8192
WIDTHS = ((1, 0.85), (2, 0.10), (4, 0.05))

Pending = tuple[str, int, int, int]  # job, width, memory per device, run cycles


def jobs_of(planner: int, planners: int, total: int, seed: int) -> list[Pending]:
    rng = random.Random(seed)
    widths, weights = zip(*WIDTHS, strict=True)
    out = []
    for i in range(total):
        width = rng.choices(widths, weights)[0]
        memory = rng.choice((1024, 2048, 3072, 4096, 6144, 8192))
        run = rng.randint(1, 4)
        if i % planners == planner:
            out.append((f"j{i}", width, memory, run))
    return out


def planner_main(args: tuple[str, int, int, int, int, int, int]) -> list[dict[str, float]]:
    dsn, index, planners, devices, total, cycles, max_claims = args
    nodes = [f"n{i:05d}" for i in range(devices // DEVICES_PER_NODE)]
    capacity = {unit_of(n, str(d)): DEVICE_MIB for n in nodes for d in range(DEVICES_PER_NODE)}
    lease = PlannerLease(Engine(dsn), f"p{index}", "bench", 3600)
    lease.acquire()
    claims = PostgresClaims(lease)
    pending = jobs_of(index, planners, total, seed=20)
    running: dict[str, int] = {}  # job -> cycle its run ends
    figures = []
    for cycle in range(cycles):
        start = time.perf_counter()
        claims.release([j for j, end in running.items() if end <= cycle])
        running = {j: end for j, end in running.items() if end > cycle}
        live = claims.live()
        settle_s = time.perf_counter() - start
        start = time.perf_counter()
        free = dict(capacity)
        for c in live:
            free[c.part.unit] -= c.part.memory_mib
        wanted: dict[str, list[Part]] = {}
        runs: dict[str, int] = {}
        first = 0  # nodes before it have no device with 1 GiB free (the smallest job)
        for job, width, memory, run in pending:
            if len(wanted) >= max_claims:
                break
            while first < len(nodes) and all(
                free[unit_of(nodes[first], str(d))] < 1024 for d in range(DEVICES_PER_NODE)
            ):
                first += 1
            for node in nodes[first:]:
                fits = [
                    d for d in range(DEVICES_PER_NODE) if free[unit_of(node, str(d))] >= memory
                ][:width]
                if len(fits) == width:
                    wanted[job] = [Part(job, node, str(d), memory) for d in fits]
                    for d in fits:
                        free[unit_of(node, str(d))] -= memory
                    runs[job] = run
                    break
        plan_s = time.perf_counter() - start
        start = time.perf_counter()
        decision = claims.claim(wanted, capacity, {})
        claim_s = time.perf_counter() - start
        started = {p.job for p in decision.granted}
        running.update({j: cycle + runs[j] for j in started})
        pending = [p for p in pending if p[0] not in started]
        figures.append(
            {
                "settle_s": settle_s,
                "plan_s": plan_s,
                "claim_s": claim_s,
                "claims": len(wanted),
                "granted": len(started),
                "refused": len(decision.refused),
                "live": len(live),
            }
        )
    lease.engine.close()
    return figures


def run(
    dsn: str, planners_list: list[int], devices: int, jobs: int, cycles: int, max_claims: int
) -> None:
    print(
        f"{devices} devices of {DEVICE_MIB} MiB ({devices // DEVICES_PER_NODE} nodes x "
        f"{DEVICES_PER_NODE}), {jobs} pending jobs, {cycles} cycles, at most {max_claims} "
        "jobs claimed per planner and cycle; PostgreSQL on this machine (unix socket)"
    )
    print(
        f"{'planners':>8} {'settle s':>9} {'plan s':>7} {'claim s':>8} {'jobs':>6} "
        f"{'granted':>8} {'refused':>8} {'live':>7} {'ms/job':>7}   "
        "(mean per planner and cycle)"
    )
    for planners in planners_list:
        db = fresh_database(dsn, f"claims_{planners}")
        results = planners_run(planner_main, db, planners, devices, jobs, cycles, max_claims)
        rows = [r for per in results for r in per]

        def mean(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.fmean(r[key] for r in rows)

        per_job = 1000 * mean("claim_s") / max(1.0, mean("claims"))
        print(
            f"{planners:>8} {mean('settle_s'):>9.3f} {mean('plan_s'):>7.3f} "
            f"{mean('claim_s'):>8.3f} {mean('claims'):>6.0f} {mean('granted'):>8.0f} "
            f"{mean('refused'):>8.1f} {mean('live'):>7.0f} {per_job:>7.3f}",
            flush=True,
        )
        print(
            "         planner 0 per cycle: "
            + json.dumps([{k: round(v, 3) for k, v in r.items()} for r in results[0]]),
            flush=True,
        )


def main() -> None:
    main_with(run, __doc__ or "")


if __name__ == "__main__":
    main()
