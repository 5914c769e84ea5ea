"""Planning time at scale: 1k / 10k / 100k pending jobs over 100 / 1k / 10k devices.

Devices are Xeon Phis of three models (6, 8 and 16 GiB; 228, 240 and 244 threads), two per
node; jobs are drawn like the paper's Table I (seven applications, uniform memory within each
range). Every plan is checked with coshare.verify before its time is reported.

Target (issue 2): 100,000 pending jobs over 10,000 devices planned by knapsack in under 5 s.

    python bench/plan_scale.py [--policies knapsack,random,exclusive] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from coshare.model import Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.verify import check_plan
from coshare.workloads import phi_cluster, table1_jobs

SIZES = [(1_000, 100), (10_000, 1_000), (100_000, 10_000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="knapsack,random,exclusive")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="strict", choices=["strict", "soft"])
    args = parser.parse_args()
    print(f"{'policy':10} {'jobs':>8} {'devices':>8} {'placed':>8} {'seconds':>9} "
          f"{'jobs/s':>10} {'placements/s':>13}")  # fmt: skip
    for jobs, devices in SIZES:
        snapshot = Snapshot(phi_cluster(devices, seed=1), (), table1_jobs(jobs, seed=2))
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
                f"{name:10} {jobs:>8} {devices:>8} {plan.placed:>8} {best:>9.3f} "
                f"{jobs / best:>10.0f} {plan.placed / best:>13.0f}"
                + (f"   (median {statistics.median(times):.3f})" if args.repeat > 1 else "")
            )


if __name__ == "__main__":
    main()
