"""Helpers of the HTCondor integration tests: the real pool started by deploy/condor/pool,
with coshare's node helpers (a root node daemon per node, coshare-launch in the job wrapper)
from the interpreter that runs the tests."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coshare.config import CondorConfig, Config, load_config
from coshare.cycle.run import CycleReport, run_cycle
from coshare.errors import SchedulerUnavailable
from coshare.policies import Policy, make_policy
from coshare.system.programs import run

from condor_addon.adapter import CondorAdapter
from condor_addon.attributes import JOB_PROJECTION
from condor_addon.client import CondorClient, open_client
from condor_addon.view import parse_slots, read_job

ROOT = Path(__file__).resolve().parents[2]
POOL_SCRIPT = ROOT / "deploy" / "condor" / "pool"
CHROOT = Path(os.environ.get("CONDOR_POOL_CHROOT", "/var/lib/coshare/condor-chroot"))
CLIENT_CONFIG = CHROOT / "pool" / "client_config"
WORK = "/tmp/coshare-itest"  # inside the chroot: jobs run there
#: The pool's node daemons run this environment's coshare (deploy/condor/pool).
COSHARE_BIN = str(Path(sys.executable).parent)
NODE_SOCKETS = CHROOT / "run" / "coshare"  # node<N>/ holds each node's sockets and records

JOB_SCRIPT = """#!/bin/sh
# coshare integration test job: record when it ran and what it was given.
start=$(date +%s.%N)
sleep "$1"
end=$(date +%s.%N)
printf '%s %s %s\\n' "$start" "$end" "${COSHARE_DEVICES:--}"
printf '%s\\n' "${COSHARE_NODE:--}"
"""


def pool(*args: str, timeout_s: float = 600, schedds: int = 1) -> str:
    """Run deploy/condor/pool with ``args`` (``schedds``: how many a start starts); its
    output."""
    env = {
        **os.environ,
        "CONDOR_POOL_COSHARE_BIN": COSHARE_BIN,
        "CONDOR_POOL_SCHEDDS": str(schedds),
    }
    return run([str(POOL_SCRIPT), *args], timeout_s=timeout_s, env=env).stdout


@dataclass
class Pool:
    """The running pool, seen from the host."""

    client: CondorClient
    htcondor: Any

    @property
    def schedd(self) -> Any:
        return self.client.schedd()

    def config(self, **cycle: float) -> Config:
        base = load_config(environ={})
        return base.__class__(
            device_kinds=base.device_kinds,
            policy=base.policy,
            knapsack=base.knapsack,
            cycle=base.cycle.__class__(**{"replan_after_s": 300.0, "interval_s": 30.0, **cycle}),
            condor=CondorConfig(config_file=str(CLIENT_CONFIG), retry_wait_s=0.1),
        )

    def cycle(
        self,
        *,
        replan_after_s: float = 300.0,
        client: CondorClient | None = None,
        hold_invalid: bool = True,
        dry_run: bool = False,
        policy: Policy | None = None,
    ) -> CycleReport:
        """One real planning cycle (knapsack, unless ``policy``), as `coshare condor cycle`
        runs it."""
        client = client or self.client
        config = self.config(replan_after_s=replan_after_s)
        config = replace(config, condor=replace(config.condor, hold_invalid=hold_invalid))
        adapter = CondorAdapter(client, config)
        return run_cycle(adapter, policy or make_policy("knapsack"), adapter, dry_run=dry_run)

    def submit(self, count: int = 1, sleep_s: float = 2, **extra: str) -> str:
        """Submit ``count`` test jobs; their cluster id."""
        desc = {
            "executable": f"{WORK}/job.sh",
            "arguments": str(sleep_s),
            "initialdir": WORK,
            "transfer_executable": "false",
            "request_memory": "64",
            "output": f"{WORK}/out.$(Cluster).$(Process)",
            "error": f"{WORK}/err.$(Cluster).$(Process)",
            **extra,
        }
        return str(self.schedd.submit(self.htcondor.Submit(desc), count=count).cluster())

    def jobs(self, constraint: str = "true") -> dict[str, dict[str, object]]:
        """The queue's jobs (projected like the Source reads them), by id."""
        out = {}
        for values in self.client.job_ads(
            constraint, (*JOB_PROJECTION, "HoldReason", "Requirements", "CoshareUserRequirements")
        ):
            job = read_job(values)
            if job is not None:
                out[job.id] = values
        return out

    def history(self, cluster: str) -> list[Any]:
        return list(
            self.schedd.history(
                f"ClusterId == {cluster}",
                projection=[
                    "ClusterId",
                    "ProcId",
                    "LastRemoteHost",
                    "CosharePlacedNode",
                    "CosharePlacedDevices",
                    "CoshareManaged",
                    "CoshareUserRequirements",
                    "Requirements",
                    "ExitCode",
                    "CoshareDeviceMemory",
                    "CoshareDeviceThreads",
                ],
            )
        )

    def node_cores(self) -> int:
        """The cores of node1 (every node of the pool has as many)."""
        [node] = [n for n in parse_slots(self.client.slot_ads(), {}).nodes if n.name == "node1"]
        return node.cpu_milli // 1000

    def node_of_machine(self) -> Mapping[str, str]:
        return parse_slots(self.client.slot_ads(), {}).node_of_machine

    def remove_all(self) -> None:
        """Empty the queue. A schedd the master is restarting (HTCondor's dedicated scheduler
        once died on its own assertion in a full run) is waited for and located again, so one
        crash of HTCondor's costs the test it happened in, not every test after it."""
        deadline = time.monotonic() + 90
        while True:
            try:
                self.schedd.act(self.htcondor.JobAction.Remove, "true")
                break
            except (self.htcondor.HTCondorException, SchedulerUnavailable):
                if time.monotonic() > deadline:
                    raise
                self.client.forget_schedd()
                time.sleep(1)
        wait_for(
            lambda: not self.client.job_ads("true", ("ClusterId",)), 60, "jobs to leave the queue"
        )

    def output(self, job_id: str) -> str:
        cluster, proc = job_id.split(".")
        return (CHROOT / WORK.lstrip("/") / f"out.{cluster}.{proc}").read_text()


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``check`` until it is true (deadline on the monotonic clock)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def start_pool(schedds: int = 1) -> Iterator[Pool]:
    """Start the pool (building the chroot the first time) with ``schedds`` schedds, yield
    it, stop it."""
    if os.geteuid() != 0:
        raise AssertionError(
            "the HTCondor integration tests need root: deploy/condor/pool "
            "builds a chroot and mounts into it (run make test as root)"
        )
    pool("start", schedds=schedds)
    work = CHROOT / WORK.lstrip("/")
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sh").write_text(JOB_SCRIPT)
    (work / "job.sh").chmod(0o755)
    os.chown(work, 4242, 4242)
    # The bindings check on the host that the job's initial directory exists (the jobs run in
    # the chroot's copy), so make the same path here.
    Path(WORK).mkdir(parents=True, exist_ok=True)
    client = open_client(CondorConfig(config_file=str(CLIENT_CONFIG), retry_wait_s=0.1))
    import htcondor2  # the bindings, configured for the pool by CondorClient

    try:
        yield Pool(client, htcondor2)
    finally:
        pool("stop")
