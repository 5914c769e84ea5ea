"""Seconds to snapshot a real Slurm cluster and apply a plan for 1,000 pending jobs.

Starts the local cluster (deploy/slurm/local-cluster: 8 nodes x 4 fake devices, root, apt)
unless --cluster names a running one, submits N annotated held jobs small enough that all of
them fit (64 MiB, 4 threads each: 60 per device), sets the partition DOWN so that released
jobs stay queued instead of loading this machine with 1,000 sleeps, then runs one cycle in
process (read: sinfo + squeue --json; plan: knapsack; apply: a quick re-read, then per batch
the scontrol updates, a confirming re-read and one release) and prints where the time went.
Each setting of placements per scontrol process (--batches) and parallel batches
(--workers) gets a freshly started cluster and fresh jobs (finished jobs stay in squeue for
MinJobAge and would slow the later reads); --batches 1 is one scontrol process per job, the
unbatched baseline.

The floor beside each apply is one scontrol process reading one update line per placed job
(the same placements written again); the target is apply <= 1.5 x floor, and under 5 s for
1,000 pending jobs (one scontrol call is ~4 ms here).

``--json`` prints one JSON object per setting instead of the table (``grid.py`` reads them).

    python bench/slurm_apply.py [--jobs 1000] [--batches 250] [--workers 1,2,4]
                                [--cluster DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from coshare.config import load_config
from coshare.cycle.run import run_cycle
from coshare.policies import make_policy

from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient
from slurm_addon.scontrol import update_line

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "slurm" / "local-cluster"


def submit(directory: Path, jobs: int, env: dict[str, str]) -> list[str]:
    """Submit ``jobs`` annotated jobs (held by the job_submit plugin); their ids."""
    script = directory / "bench-job.sh"
    script.write_text(
        '#!/bin/sh\n#SBATCH --comment="coshare: device-memory=64 '
        'device-threads=4"\n#SBATCH --output=/dev/null\nsleep 1\n'
    )
    ids = []
    for _ in range(jobs):
        done = subprocess.run(
            ["sbatch", "--parsable", str(script)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        ids.append(done.stdout.strip())
    return ids


def write_floor(client: SlurmClient, applied: tuple[str, ...]) -> float:
    """Seconds of the floor of any apply: one scontrol process reading one update line per
    placed job (the same placements written again, as read back from the queue)."""
    jobs = client.read_job_fields(list(applied))
    lines = [
        update_line(job, jobs[job].required_nodes, jobs[job].admin_comment)
        for job in applied
        if "," not in jobs[job].required_nodes
    ]
    start = time.perf_counter()
    client.run_script(lines)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--batches", default="250")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--cluster", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per setting")
    args = parser.parse_args()
    say = (lambda *_a, **_k: None) if args.json else print

    own = args.cluster is None
    directory = args.cluster or Path(
        tempfile.mkdtemp(prefix="coshare-slurm-bench-", dir="/var/tmp")
    )
    directory.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}

    def fresh_cluster() -> None:
        if own:
            subprocess.run([str(SCRIPT), "stop", str(directory)], check=False, capture_output=True)
            subprocess.run(
                [
                    str(SCRIPT),
                    "start",
                    str(directory),
                    "--nodes",
                    "8",
                    "--devices",
                    "4",
                    "--cpus",
                    "256",
                    "--memory-mib",
                    "131072",
                ],
                check=True,
                capture_output=True,
            )

    fresh_cluster()
    base = load_config(directory / "coshare.yaml", environ={})
    try:
        say(f"{args.jobs} pending jobs, 8 nodes x 4 devices; seconds per cycle phase")
        say(
            f"{'batch':>6} {'workers':>8} {'placed':>7} {'read':>7} {'plan':>7} "
            f"{'apply':>7} {'total':>7} {'floor':>7} {'apply/floor':>12}"
        )
        for batch in (int(b) for b in args.batches.split(",")):
            for workers in (int(w) for w in args.workers.split(",")):
                fresh_cluster()
                subprocess.run(["scancel", "--quiet", "--partition=main"], env=env, check=False)
                subprocess.run(
                    ["scontrol", "update", "PartitionName=main", "State=DOWN"], env=env, check=True
                )
                submit(directory, args.jobs, env)
                config = replace(
                    base,
                    slurm=replace(base.slurm, update_batch=batch, workers=workers, lock_file=None),
                )
                adapter = SlurmAdapter(SlurmClient(config.slurm), config)
                start = time.perf_counter()
                report = run_cycle(adapter, make_policy("knapsack"), adapter)
                total = time.perf_counter() - start
                assert not report.apply.failed, report.apply.failed[:3]
                floor = write_floor(adapter.client, report.apply.applied)
                if args.json:
                    row = {
                        "jobs": args.jobs,
                        "batch": batch,
                        "workers": workers,
                        "placed": len(report.apply.applied),
                        "read_s": round(report.read_s, 3),
                        "plan_s": round(report.plan.seconds, 3),
                        "apply_s": round(report.apply_s, 3),
                        "total_s": round(total, 3),
                        "floor_s": round(floor, 3),
                        "ratio": round(report.apply_s / floor, 2),
                    }
                    print(json.dumps(row), flush=True)
                say(
                    f"{batch:>6} {workers:>8} {len(report.apply.applied):>7} "
                    f"{report.read_s:>7.3f} {report.plan.seconds:>7.3f} "
                    f"{report.apply_s:>7.3f} {total:>7.3f} {floor:>7.3f} "
                    f"{report.apply_s / floor:>12.2f}"
                )
    finally:
        subprocess.run(["scancel", "--quiet", "--partition=main"], env=env, check=False)
        if own:
            subprocess.run([str(SCRIPT), "stop", str(directory)], check=False)
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
