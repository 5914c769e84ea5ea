"""CPU seconds of the whole ``coshare plan`` process for the default policy (sharepack), on
the cluster shapes where the free room exceeds the pending work, and on the largest batch.

Cases (``--cases``), each a snapshot written once under ``--dir``, then planned by a fresh
``coshare plan --output json`` process (its start-up and the snapshot's parsing included):

- ``phi-1k``, ``phi-10k``, ``phi-100k``: 1,000 / 10,000 / 100,000 pending jobs of the paper's
  Table I mix (``coshare.sim.applications``) on 10,000 Xeon Phis (5,000 nodes of two);
- ``gpu-10k``: 10,000 jobs of the modern GPU mix (``gpu_mix.py``) on 10,000 H100s;
- ``phi-busy-1k``: 1,000 fresh jobs on the 10,000 Xeon Phis while half of a knapsack plan of
  20,000 jobs still runs (devices hold many different mixes, so few nodes are alike).

Prints, per case, the jobs placed, and the child's CPU seconds (user + system, the
operating system's own accounting) and wall seconds: the best and the median of
``--repeat`` runs. ``--write DIR`` only writes the snapshots (for ``farm-bench`` of
``coshare plan DIR/CASE.json``). ``--coshare`` names the command to time (default: the
``coshare`` of this interpreter's environment), so one script times two checkouts:

    python bench/default_policy.py [--cases phi-1k,phi-10k,phi-100k,gpu-10k,phi-busy-1k]
                                   [--repeat 3]
                                   [--dir /tmp/default-policy] [--write] [--coshare PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from coshare.model import RunningJob, Snapshot
from coshare.policies import make_policy
from coshare.schema import snapshot_to_dict
from coshare.sim.applications import phi_cluster, table1_jobs
from gpu_mix import gpu_cluster, gpu_jobs

DEVICES = 10_000


def busy(fresh: int) -> Snapshot:
    """``fresh`` new Table I jobs while half of a knapsack plan of 20,000 still runs."""
    nodes = phi_cluster(DEVICES, seed=1)
    pool = table1_jobs(20_000, 7)
    first = make_policy("knapsack").plan(Snapshot(nodes, (), pool))
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
                j.total_cpu_milli,
                j.total_memory_mib,
            )
        )
    jobs = tuple(replace(j, id=f"new{j.id}") for j in table1_jobs(fresh, 3))
    return Snapshot(nodes, tuple(running), jobs)


CASES: dict[str, Callable[[], Snapshot]] = {
    "phi-1k": lambda: Snapshot(phi_cluster(DEVICES, seed=1), (), table1_jobs(1_000, 2)),
    "phi-10k": lambda: Snapshot(phi_cluster(DEVICES, seed=1), (), table1_jobs(10_000, 2)),
    "phi-100k": lambda: Snapshot(phi_cluster(DEVICES, seed=1), (), table1_jobs(100_000, 2)),
    "gpu-10k": lambda: Snapshot(gpu_cluster(DEVICES), (), gpu_jobs(10_000, 2)),
    "phi-busy-1k": lambda: busy(1_000),
}

#: case -> CPU seconds of the whole process the default policy should stay under
TARGETS = {"phi-1k": 1.0, "phi-10k": 1.0, "phi-100k": 2.0, "gpu-10k": 1.0, "phi-busy-1k": 1.0}


def write(case: str, folder: Path) -> Path:
    """The snapshot of ``case`` as JSON under ``folder`` (written once)."""
    path = folder / f"{case}.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(snapshot_to_dict(CASES[case]())))
    return path


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Run ``argv`` to its end: its CPU seconds, wall seconds and standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/default-policy"))
    parser.add_argument("--write", action="store_true", help="write the snapshots, plan none")
    parser.add_argument(
        "--coshare", default=os.path.join(os.path.dirname(sys.executable), "coshare")
    )
    args = parser.parse_args()
    for case in args.cases.split(","):
        path = write(case, args.dir)
        if args.write:
            print(path)
            continue
        cpu, wall, placed = [], [], 0
        for _ in range(args.repeat):
            c, w, out = timed([args.coshare, "plan", "--output", "json", str(path)])
            cpu.append(c)
            wall.append(w)
            placed = len({a["job"] for a in json.loads(out)["assignments"]})
        target = TARGETS[case]
        verdict = "met" if statistics.median(cpu) <= target else "MISSED"
        print(
            f"{case:9} placed {placed:7d}  cpu s best {min(cpu):6.2f} median "
            f"{statistics.median(cpu):6.2f}  wall s median {statistics.median(wall):6.2f}  "
            f"target <= {target:g} CPU s: {verdict}",
            flush=True,
        )


if __name__ == "__main__":
    main()
