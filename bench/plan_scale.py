"""Planning time at scale, on the paper's Xeon Phis and on modern 80 GB GPUs.

Two cluster kinds:

- ``phi``: Xeon Phis of three models (6, 8 and 16 GiB; 228, 240 and 244 threads), two per
  node; jobs drawn like the paper's Table I (seven applications, uniform memory within each
  range): 1k / 10k / 100k pending jobs over 100 / 1k / 10k devices.
- ``gpu``: H100s (81,559 MiB, 132 SMs), eight per node; jobs from 1 GB to 80 GB in 256 MiB
  steps, threads in whole SMs, host needs that vary (``gpu_mix.py``), so nearly every job has
  its own size: 2k and 20k pending jobs on 32 devices (4 nodes), 100k on 10,000 devices.

Two scenarios: an idle cluster, and a busy one as a live cycle sees it (half of the jobs of a
first knapsack plan still run, so devices hold many different mixes) with fresh pending jobs.
Every plan is checked with coshare.cycle.verify before its time is reported.

Targets: 100,000 pending jobs over 10,000 Xeon Phis by knapsack in under
5 s; the default policy (sharepack) on the gpu mixes, 20,000 on 32 devices and 100,000 on
10,000 devices, each in under 2 s.

A third kind, ``gang``: the ``gpu`` mix with 10% of the jobs made multi-node gangs
of 2-64 nodes (each node with the job's devices and processes), 100,000 pending over 10,000
devices, within the same 2 s budget as single-node jobs.

    python bench/plan_scale.py [--policies a,b] [--clusters phi,gpu] [--scenarios idle,busy]
                               [--repeat 3] [--largest N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from coshare.cycle.verify import check_plan
from coshare.model import Job, Node, RunningJob, Snapshot
from coshare.policies import DEFAULT_POLICY, PolicyOptions, make_policy, policy_names
from coshare.sim.applications import phi_cluster, table1_jobs
from gpu_mix import gpu_cluster, gpu_jobs

#: (cluster kind, pending jobs, devices)
SIZES = [
    ("phi", 1_000, 100),
    ("phi", 10_000, 1_000),
    ("phi", 100_000, 10_000),
    ("gpu", 2_000, 32),
    ("gpu", 20_000, 32),
    ("gpu", 100_000, 10_000),
    ("gang", 100_000, 10_000),
]
#: (cluster kind, pending jobs, devices) -> seconds the default policy should stay under
TARGETS = {("gpu", 20_000, 32): 2.0, ("gpu", 100_000, 10_000): 2.0, ("gang", 100_000, 10_000): 2.0}
#: Share of the ``gang`` mix's jobs that span nodes, and how many nodes they span.
GANG_SHARE, GANG_NODES = 0.1, (2, 64)

Cluster = Callable[[int], tuple[Node, ...]]
Jobs = Callable[[int, int], tuple[Job, ...]]


def gang_jobs(count: int, seed: int) -> tuple[Job, ...]:
    """The ``gpu`` mix with :data:`GANG_SHARE` of its jobs spanning 2-64 nodes each."""
    rng = random.Random(seed + 14)
    out = []
    for job in gpu_jobs(count, seed):
        if rng.random() < GANG_SHARE:
            nodes = rng.randint(*GANG_NODES)
            job = replace(
                job, nodes=nodes, processes=nodes * job.processes, processes_per_node=job.processes
            )
        out.append(job)
    return tuple(out)


KINDS: dict[str, tuple[Cluster, Jobs]] = {
    "phi": (lambda devices: phi_cluster(devices, seed=1), lambda n, seed: table1_jobs(n, seed)),
    "gpu": (gpu_cluster, gpu_jobs),
    "gang": (gpu_cluster, gang_jobs),
}


def busy_snapshot(nodes: tuple[Node, ...], jobs: int, draw: Jobs) -> Snapshot:
    """Half of a first knapsack plan still running, and ``jobs`` new pending jobs."""
    pool = draw(2 * jobs, 2)
    first = make_policy("knapsack").plan(Snapshot(nodes, (), pool[:jobs]))
    by_id = {j.id: j for j in pool}
    rng = random.Random(5)
    running = []
    for a in first.assignments:
        if rng.random() < 0.5:
            continue
        j = by_id[a.job]
        count = a.processes if a.processes is not None else j.processes  # a gang's part
        running.append(
            RunningJob(
                j.id,
                a.node,
                a.devices,
                j.device_memory_mib,
                j.device_threads,
                j.cpu_milli * count,
                j.memory_mib * count,
            )
        )
    return Snapshot(nodes, tuple(running), pool[jobs:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=",".join(policy_names()))
    parser.add_argument("--clusters", default="phi,gpu,gang")
    parser.add_argument("--scenarios", default="idle,busy")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="strict", choices=["strict", "soft"])
    parser.add_argument(
        "--largest", type=int, default=100_000, help="skip sizes with more pending jobs than this"
    )
    args = parser.parse_args()
    print(
        f"{'cluster':7} {'scenario':8} {'policy':10} {'jobs':>8} {'devices':>8} {'running':>8} "
        f"{'placed':>8} {'seconds':>9} {'cpu s':>8} {'jobs/s':>10}  target"
    )
    for kind, jobs, devices in SIZES:
        if kind not in args.clusters.split(",") or jobs > args.largest:
            continue
        cluster, draw = KINDS[kind]
        nodes = cluster(devices)
        for scenario in args.scenarios.split(","):
            snapshot = (
                Snapshot(nodes, (), draw(jobs, 2))
                if scenario == "idle"
                else busy_snapshot(nodes, jobs, draw)
            )
            for name in args.policies.split(","):
                measure(kind, scenario, name, jobs, devices, snapshot, args)


def measure(
    kind: str,
    scenario: str,
    name: str,
    jobs: int,
    devices: int,
    snapshot: Snapshot,
    args: argparse.Namespace,
) -> None:
    """Plan ``snapshot`` ``args.repeat`` times with policy ``name`` and print the best."""
    policy = make_policy(name, PolicyOptions(threads=args.threads))
    times, cpu = [], []
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        plan = policy.plan(snapshot)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    problems = check_plan(snapshot, plan, strict_threads=args.threads == "strict")
    if problems:
        raise SystemExit(f"{name}: invalid plan: {problems[:3]}")
    best = min(times)
    target = TARGETS.get((kind, jobs, devices)) if name == DEFAULT_POLICY else None
    verdict = "" if target is None else f"<= {target:g} s: {'met' if best <= target else 'MISSED'}"
    print(
        f"{kind:7} {scenario:8} {name:10} {jobs:>8} {devices:>8} {len(snapshot.running):>8} "
        f"{plan.placed:>8} {best:>9.3f} {min(cpu):>8.3f} {jobs / best:>10.0f}  {verdict}"
        + (f"   (median {statistics.median(times):.3f})" if args.repeat > 1 else ""),
        flush=True,
    )


if __name__ == "__main__":
    main()
