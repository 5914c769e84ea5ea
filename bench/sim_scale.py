"""Simulation time at scale: 10,000 Table I jobs on 1,000 Xeon Phis, every policy.

The cluster is bench/plan_scale.py's: Xeon Phis of three models (6, 8 and 16 GiB), two per
node (500 nodes); the jobs are the simulator's Table I set with the calibrated offload share
(coshare.sim.workloads). All jobs arrive at time 0, cycles follow arrivals and job ends after
the cycle delay, and every policy replans the whole pending set each cycle, as live.

Target: 10,000 jobs on 1,000 devices simulated in under 60 s.

    python bench/sim_scale.py [--jobs 10000] [--devices 1000] [--policies knapsack,...]
"""

from __future__ import annotations

import argparse
import time

from coshare.policies.base import Policy
from coshare.sim.applications import phi_cluster
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.experiments import Setup, paper_calibration
from coshare.sim.workloads import realize, table1_draws


class Timed:
    """A policy that adds up the seconds it plans (the engine itself reads no clock)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.seconds = 0.0

    def plan(self, snapshot):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        plan = self.policy.plan(snapshot)
        self.seconds += time.perf_counter() - start
        return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--policies", default="knapsack,random,exclusive,bestfit,fgd")
    parser.add_argument("--threads", default="soft", choices=["strict", "soft"])
    parser.add_argument("--cycle-delay", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    setup = Setup(threads=args.threads, cycle_delay_s=args.cycle_delay)
    share = paper_calibration(args.seed, setup).offload_share
    jobs = realize(table1_draws(args.jobs, args.seed), share)
    nodes = phi_cluster(args.devices, seed=1)
    print(
        f"{args.jobs} jobs, {args.devices} devices on {len(nodes)} nodes, threads "
        f"{args.threads}, cycle delay {args.cycle_delay:g} s, offload share {share:.3f}"
    )
    print(
        f"{'policy':10} {'seconds':>8} {'planning':>9} {'cycles':>7} {'makespan s':>11} "
        f"{'util':>6} {'not run':>8}"
    )
    for name in args.policies.split(","):
        policy = Timed(setup.policy(name, args.seed))
        start = time.perf_counter()
        result = simulate(nodes, jobs, policy, options=SimOptions(cycle_delay_s=args.cycle_delay))
        wall = time.perf_counter() - start
        print(
            f"{name:10} {wall:>8.1f} {policy.seconds:>9.1f} {result.cycles:>7} "
            f"{result.makespan_s:>11.0f} {result.utilization:>6.1%} {len(result.not_run):>8}"
        )


if __name__ == "__main__":
    main()
