"""Planning time at scale: 1k / 10k / 100k pending jobs over 100 / 1k / 10k devices.

Devices are Xeon Phis of three models (6, 8 and 16 GiB; 228, 240 and 244 threads), two per
node; jobs are drawn like the paper's Table I (seven applications, uniform memory within each
range). Every plan is checked with coshare.verify before its time is reported.

Target (issue 2): 100,000 pending jobs over 10,000 devices planned by knapsack in under 5 s.

Two scenarios: an idle cluster (every device free: identical devices share solves), and a busy
one as a live cycle sees it (half of the jobs of a first knapsack plan still run, so devices
hold many different mixes) with a fresh set of pending jobs.

    python bench/plan_scale.py [--policies knapsack,random,exclusive] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from coshare.model import Node, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.sim.applications import phi_cluster, table1_jobs
from coshare.verify import check_plan

SIZES = [(1_000, 100), (10_000, 1_000), (100_000, 10_000)]


def busy_snapshot(nodes: tuple[Node, ...], jobs: int) -> Snapshot:
    """Half of a first knapsack plan still running, and ``jobs`` new pending jobs."""
    pool = table1_jobs(2 * jobs, seed=2)
    first = make_policy("knapsack").plan(Snapshot(nodes, (), pool[:jobs]))
    by_id = {j.id: j for j in pool}
    rng = random.Random(5)
    running = []
    for a in first.assignments:
        if rng.random() < 0.5:
            continue
        j = by_id[a.job]
        running.append(
            RunningJob(
                j.id,
                a.node,
                a.devices,
                j.device_memory_mib,
                j.device_threads,
                j.cpu_milli,
                j.memory_mib,
            )
        )
    return Snapshot(nodes, tuple(running), pool[jobs:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="knapsack,random,exclusive")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="strict", choices=["strict", "soft"])
    parser.add_argument("--scenarios", default="idle,busy")
    args = parser.parse_args()
    print(f"{'scenario':8} {'policy':10} {'jobs':>8} {'devices':>8} {'running':>8} "
          f"{'placed':>8} {'seconds':>9} {'jobs/s':>10} {'placements/s':>13}")  # fmt: skip
    cases = []
    for jobs, devices in SIZES:
        nodes = phi_cluster(devices, seed=1)
        for scenario in args.scenarios.split(","):
            if scenario == "idle":
                cases.append(
                    (scenario, jobs, devices, Snapshot(nodes, (), table1_jobs(jobs, seed=2)))
                )
            else:
                cases.append((scenario, jobs, devices, busy_snapshot(nodes, jobs)))
    for scenario, jobs, devices, snapshot in cases:
        for name in args.policies.split(","):
            policy = make_policy(name, PolicyOptions(threads=args.threads))
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                plan = policy.plan(snapshot)
                times.append(time.perf_counter() - start)
            problems = check_plan(snapshot, plan, strict_threads=args.threads == "strict")
            if problems:
                raise SystemExit(f"{name}: invalid plan: {problems[:3]}")
            best = min(times)
            print(
                f"{scenario:8} {name:10} {jobs:>8} {devices:>8} {len(snapshot.running):>8} "
                f"{plan.placed:>8} {best:>9.3f} "
                f"{jobs / best:>10.0f} {plan.placed / best:>13.0f}"
                + (f"   (median {statistics.median(times):.3f})" if args.repeat > 1 else "")
            )


if __name__ == "__main__":
    main()
