"""What ``coshare simulate --cycle live`` costs, and where its time goes.

Runs each policy on a paper job set through the live cycle (:mod:`coshare.sim.live`) and
prints, per policy, the CPU seconds of the run, its cycles, and the CPU seconds of each
phase of the cycle (read: the in-memory queue settled by the ledger; plan: the policy,
contained and checked; verify; apply: the write protocol), beside the fast engine's CPU
seconds on the same jobs.

    python bench/live_cycle.py [--workload table1] [--jobs 1000] [--nodes 8] [--cycle-s 30]
"""

from __future__ import annotations

import argparse
import time

from coshare.sim.engine import simulate
from coshare.sim.experiments import Setup, draws_for, paper_calibration
from coshare.sim.live import LiveOptions, simulate_live
from coshare.sim.workloads import paper_cluster, realize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="table1")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--cycle-s", type=float, default=30.0)
    parser.add_argument("--policies", default="exclusive,random,knapsack")
    args = parser.parse_args()
    setup = Setup()
    share = paper_calibration(0, setup).offload_share
    jobs = realize(draws_for(args.workload, args.jobs, 0), share)
    cluster = paper_cluster(args.nodes)
    print(
        f"{args.workload}, {args.jobs} jobs, {args.nodes} nodes, a cycle every {args.cycle_s:g} s"
    )
    for name in args.policies.split(","):
        start = time.process_time()
        simulate(cluster, jobs, setup.policy(name, 0), options=setup.options())
        engine_s = time.process_time() - start
        start, wall = time.process_time(), time.perf_counter()
        run = simulate_live(
            cluster, jobs, setup.policy(name, 0), options=LiveOptions(cycle_s=args.cycle_s)
        )
        cpu_s, wall_s = time.process_time() - start, time.perf_counter() - wall
        phases = ", ".join(f"{k} {v:.1f}" for k, v in run.phases.items())
        print(
            f"  {name:10s} engine {engine_s:5.1f} CPU s | live {cpu_s:5.1f} CPU s "
            f"({wall_s:.1f} s wall), {run.result.cycles} cycles; phases CPU s: {phases}"
        )


if __name__ == "__main__":
    main()
