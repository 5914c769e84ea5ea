"""Seconds to snapshot and apply a plan for 1,000 idle jobs on the real HTCondor pool.

    .venv/bin/python bench/condor_apply.py [--jobs 1000] [--repeat 3]

Restarts the local pool (deploy/condor/pool) with 300 cores and plenty of memory per node, so
host cores never limit the plan, then, per scenario and repetition: submits the jobs (their
own Requirements never match, so placed jobs stay idle and the queue stays as planned),
runs one cycle as ``coshare condor cycle`` does (in this process: no interpreter start-up),
and prints read / plan / apply seconds. Target: snapshot + apply under 3 s.

Scenarios:
  table-i   Table I jobs of the coprocessor-sharing paper (60-240 threads, 300-3400 MiB):
            the knapsack places as many as the pool's 7 devices hold.
  tiny      64 MiB, 1 thread, soft thread mode (only memory bounds sharing): all 1,000 jobs
            are placed, the largest apply.
A figure, never an assertion: tests do not time anything.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from coshare.config import CondorConfig, load_config
from coshare.cycle.run import run_cycle
from coshare.model import ThreadMode
from coshare.policies import PolicyOptions, make_policy
from coshare.sim.applications import table1_job

from condor_addon.adapter import CondorAdapter
from condor_addon.client import CondorClient, open_client

ROOT = Path(__file__).resolve().parents[1]
CHROOT = Path(os.environ.get("CONDOR_POOL_CHROOT", "/var/lib/coshare/condor-chroot"))


def restart_pool() -> None:
    env = {**os.environ, "CONDOR_POOL_CPUS": "300", "CONDOR_POOL_MEMORY_MIB": "1000000"}
    subprocess.run([str(ROOT / "deploy/condor/pool"), "restart"], env=env, check=True)


def submit(client: CondorClient, htcondor: object, jobs: int, scenario: str) -> None:
    schedd = client.schedd()
    rng = random.Random(1)
    items = []
    for i in range(jobs):
        if scenario == "tiny":
            memory, threads = 64, 1
        else:
            job = table1_job(rng, str(i))
            memory, threads = job.device_memory_mib, job.device_threads
        items.append({"mem": str(memory), "thr": str(threads)})
    desc = htcondor.Submit(
        {  # type: ignore[attr-defined]
            "executable": "/bin/true",
            "initialdir": "/tmp",
            "transfer_executable": "false",
            "requirements": "CoshareNeverStart =?= true",
            "request_memory": "64",
            "+CoshareDeviceMemory": "$(mem)",
            "+CoshareDeviceThreads": "$(thr)",
        }
    )
    schedd.submit(desc, itemdata=iter(items))


def remove_all(client: CondorClient, htcondor: object) -> None:
    schedd = client.schedd()
    schedd.act(htcondor.JobAction.Remove, "true")  # type: ignore[attr-defined]
    while schedd.query("true", projection=["ClusterId"]):
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    restart_pool()
    condor = CondorConfig(config_file=str(CHROOT / "pool" / "client_config"))
    client = open_client(condor)
    import htcondor2  # the bindings, configured for the pool by CondorClient

    base = load_config(environ={})
    config = replace(base, condor=condor, cycle=replace(base.cycle, replan_after_s=300))
    print(
        f"{args.jobs} idle annotated jobs, 4 nodes / 7 devices, knapsack; best of "
        f"{args.repeat} (all runs listed)"
    )
    print(
        f"{'scenario':10} {'placed':>6} {'read s':>8} {'plan s':>8} {'apply s':>8} "
        f"{'read+apply s':>13}"
    )
    try:
        for scenario in ("table-i", "tiny"):
            rows = []
            for _ in range(args.repeat):
                remove_all(client, htcondor2)
                submit(client, htcondor2, args.jobs, scenario)
                adapter = CondorAdapter(client, config)
                threads: ThreadMode = "soft" if scenario == "tiny" else "strict"
                policy = make_policy("knapsack", PolicyOptions(threads=threads))
                report = run_cycle(adapter, policy, adapter, strict_threads=threads == "strict")
                assert report.exit_status == 0, report.apply
                rows.append((report.read_s + report.apply_s, report))
            for total, report in sorted(rows, key=lambda r: r[0]):
                print(
                    f"{scenario:10} {len(report.apply.applied):>6} {report.read_s:>8.3f} "
                    f"{report.plan.seconds:>8.3f} {report.apply_s:>8.3f} {total:>13.3f}"
                )
    finally:
        remove_all(client, htcondor2)
        subprocess.run([str(ROOT / "deploy/condor/pool"), "stop"], check=True)


if __name__ == "__main__":
    main()
