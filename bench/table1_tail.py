"""Why the knapsack gains little over random in the simulator: what runs at the end.

For the Table II setting (1000 Table I jobs, 8 nodes), prints per policy the makespan, the
device core utilization over the whole run and over its last fifth, and per application the
share of its jobs that start in the last fifth. The knapsack's value 1 - (t/T)^2 prefers jobs
with few threads, so thread-heavy jobs (BT: 240 threads, value 0) wait until the end, where
they share badly.

    python bench/table1_tail.py [--seed 0] [--threads soft] [--cycle-delay 1]
"""

from __future__ import annotations

import argparse
from collections import Counter

from coshare.sim.applications import TABLE_I
from coshare.sim.device import OffloadModel
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.experiments import Setup, paper_calibration
from coshare.sim.workloads import paper_cluster, realize, table1_draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", default="soft", choices=["strict", "soft"])
    parser.add_argument("--cycle-delay", type=float, default=1.0)
    args = parser.parse_args()
    setup = Setup(threads=args.threads, cycle_delay_s=args.cycle_delay)
    share = paper_calibration(args.seed, setup).offload_share
    jobs = realize(table1_draws(1000, args.seed), share)
    program = {s.job.id: s.job.program for s in jobs}
    total = Counter(program.values())
    apps = [a.name for a in TABLE_I]
    print(f"seed {args.seed}, threads {args.threads}, offload share {share:.3f}")
    print(
        f"{'policy':10} {'makespan':>9} {'util':>6} {'util last 1/5':>14}   "
        + " ".join(f"{a:>5}" for a in apps)
        + "   (% of each app starting in the last 1/5)"
    )
    for name in ("exclusive", "random", "knapsack"):
        model = OffloadModel(record=True)
        options = SimOptions(cycle_delay_s=args.cycle_delay)
        result = simulate(
            paper_cluster(8), jobs, setup.policy(name, args.seed), options=options, model=model
        )
        tail = 0.8 * result.makespan_s
        busy = sum(
            t * (end - max(start, tail)) for _, start, end, t, _ in model.offloads if end > tail
        )
        util_tail = busy / (sum(result.thread_capacity) * (result.makespan_s - tail))
        late = Counter(program[r.id] for r in result.jobs if (r.start_s or 0.0) >= tail)
        shares = " ".join(f"{100 * late[a] / total[a]:>5.0f}" for a in apps)
        print(
            f"{name:10} {result.makespan_s:>9.0f} {result.utilization:>6.1%} "
            f"{util_tail:>14.1%}   {shares}"
        )


if __name__ == "__main__":
    main()
