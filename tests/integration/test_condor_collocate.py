"""The collocate policy live on the real HTCondor pool: CPU-only jobs on the
idle cores of a running GPU job, with the startd configuration of deploy/condor (a lend slot
type on every node that only jobs coshare placed on a GPU job's idle cores can match) and the
job wrapper's loan (START ``borrow=``: the node daemon takes the CPU job's cores out of the GPU
job's cpuset before the job runs).

The pool's nodes have 2 real cores each (this host's), so the GPU job holds both and can lend
one: the two CPU jobs borrow it one after the other (the second waits with the numbers
meanwhile). The other nodes are filled with unannotated jobs first, so that the lent core is
the only room a CPU job has. Short settings: ``P_M`` 0.02 of a 300-s request (6 s); the pool's
nodes publish facts every second.

What is checked is what HTCondor and the kernel say: each CPU job runs in a lend slot of the GPU
job's node while the GPU job holds that node's own slot whole; its ``cpuset.cpus`` (and the
``Cpus_allowed_list`` it printed) is disjoint from the GPU job's at that moment; the core goes
back when it ends; an unannotated job that fits only a lend slot stays idle all along.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from coshare.cli.main import policy_options
from coshare.config import load_config
from coshare.cycle.run import CycleReport, run_cycle
from coshare.errors import CoshareError
from coshare.node import lifecycle
from coshare.node.spec import parse_cpu_list
from coshare.policies import make_policy

from condor_addon import attributes as A
from condor_addon.adapter import CondorAdapter
from condor_addon.view import machine_of, node_job_id, parse_slots
from tests.integration.condor_pool import CHROOT, WORK, Pool

pytestmark = [pytest.mark.integration, pytest.mark.condor]

#: The GPU job: a low real load (busy 10 ms of every 100), for as long as it is asked to.
LOW_LOAD = """#!/usr/bin/python3
import sys, time
end = time.time() + float(sys.argv[1])
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.01:
        pass
    time.sleep(0.09)
"""
REPORT = """#!/bin/sh
grep Cpus_allowed_list /proc/self/status
sleep 15
"""
RUNNING = 2
IDLE = 1


def cycle(live: Pool) -> CycleReport:
    """One real cycle of the collocate policy with lend slots on, as `coshare condor cycle`."""
    base = live.config()
    config = replace(
        base,
        condor=replace(base.condor, lend_slots=True),
        collocate=replace(base.collocate, monitor_fraction=0.02),
        policy=replace(base.policy, name="collocate"),
    )
    adapter = CondorAdapter(live.client, config)
    return run_cycle(adapter, make_policy("collocate", policy_options(config)), adapter)


def wait_cycling(live: Pool, check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Run a cycle every half second (as the trigger would) until ``check()`` holds."""
    deadline = time.monotonic() + timeout_s
    report: CycleReport | None = None
    last = ""
    while not check():
        if time.monotonic() >= deadline:
            said = (
                ""
                if report is None
                else (
                    f"\nlast plan: {report.plan.assignments}\nwaiting: {report.plan.unplaced}"
                    f"\nnotes: {report.plan.notes} {report.notes}\napplied: {report.apply}"
                )
            )
            slots = [
                {
                    k: a.get(k)
                    for k in ("Name", "State", "Cpus", A.LEND_SLOT, "GlobalJobId", A.HARVEST_FROM)
                }
                for a in live.client.slot_ads()
            ]
            pytest.fail(
                f"timed out after {timeout_s:.0f} s: {what}{said}\nslots: {slots}\n"
                f"jobs: {live.jobs()}"
            )
        report = cycle(live)
        said_now = "; ".join(
            [f"{u.job}: {u.reason}" for u in report.plan.unplaced]
            + [n for n in report.plan.notes if "lend" in n]
        )
        if said_now != last:  # what the planner says, when it changes (shown with -s)
            print(
                f"{time.strftime('%H:%M:%S')} {said_now or '-'} "
                f"placed {[a.job for a in report.plan.assignments]}",
                flush=True,
            )
            last = said_now
        time.sleep(0.5)


def cpuset(startd: str, job_global_id: str) -> set[int]:
    """A job's cpuset on its node, from the kernel's file (the job may show running while its
    wrapper is still setting it up: waits for it up to 10 s)."""
    config = load_config(CHROOT / "pool" / "coshare" / f"{startd}.yaml", environ={}).node
    deadline = time.monotonic() + 10
    while True:
        try:
            group = lifecycle.node_cgroups(config).open(node_job_id(job_global_id))
            return set(parse_cpu_list(group.cpus_text()))
        except CoshareError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_cpu_jobs_run_on_the_gpu_jobs_lent_core_in_a_lend_slot_with_disjoint_cpusets(
    live: Pool,
) -> None:
    if live.node_cores() < 2:
        pytest.skip("lending a core needs nodes of 2 cores")
    work = CHROOT / WORK.lstrip("/")
    for name, text in (("low_load.py", LOW_LOAD), ("report.sh", REPORT)):
        (work / name).write_text(text)
        (work / name).chmod(0o755)
    nodes = len(live.node_of_machine())
    gpu = (
        live.submit(
            1,
            executable=f"{WORK}/low_load.py",
            arguments="200",
            request_cpus="2",
            **{
                "+CoshareDeviceMemory": "1000",
                "+CoshareDeviceThreads": "60",
                "+CoshareWalltime": "300",
                "+CoshareCopyBandwidth": "10",
            },
        )
        + ".0"
    )
    wait_cycling(
        live, lambda: live.jobs().get(gpu, {}).get("JobStatus") == RUNNING, 90, "the GPU job to run"
    )
    ad = live.jobs()[gpu]
    startd = machine_of(str(ad["RemoteHost"])).split("@")[0]  # node1 .. node4
    gpu_global = str(ad["GlobalJobId"])
    assert ad.get(A.LENDER) is True  # placed as a job whose idle cores may be lent
    assert cpuset(startd, gpu_global) == {0, 1}
    # Every other node's own slot taken by an unannotated job: the lent core is the only room.
    fillers = live.submit(nodes - 1, sleep_s=300, request_cpus="2")
    wait_cycling(
        live,
        lambda: (
            sum(
                1
                for i, j in live.jobs().items()
                if i.startswith(fillers + ".") and j.get("JobStatus") == RUNNING
            )
            == nodes - 1
        ),
        90,
        "the other nodes to fill",
    )
    # The planner sees unannotated jobs only through the collector's claimed slots, which
    # lag the schedd by an update interval: wait until it shows them all.
    wait_cycling(
        live,
        lambda: (
            len(
                {
                    r.node
                    for r in parse_slots(live.client.slot_ads(), {}).running
                    if r.cpu_milli == 2000
                }
            )
            == nodes
        ),
        30,
        "the collector to show every node's own slot claimed",
    )
    # An unannotated job that would fit only a lend slot: it never runs while they are full.
    plain = live.submit(1, sleep_s=1, request_cpus="1") + ".0"
    cpu = [
        live.submit(
            1,
            executable=f"{WORK}/report.sh",
            arguments="",
            request_cpus="1",
            **{"+CoshareKind": '"cpu"', "+CoshareWalltime": "40"},
        )
        + ".0"
        for _ in range(2)
    ]

    seen: dict[str, tuple[set[int], set[int], str]] = {}
    for job in cpu:

        def running(job: str = job) -> bool:
            now = live.jobs()
            assert now[plain]["JobStatus"] == IDLE, now[plain]  # never in a lend slot
            if now.get(gpu, {}).get("JobStatus") != RUNNING:
                gone = live.schedd.history(
                    f"ClusterId == {gpu.split('.')[0]}",
                    projection=[
                        "ExitCode",
                        "ExitBySignal",
                        "HoldReason",
                        "RemoveReason",
                        "JobStatus",
                        "RemoteWallClockTime",
                        "NumJobStarts",
                    ],
                )
                pytest.fail(
                    f"the GPU job ended before the CPU jobs ran: {now.get(gpu)} "
                    f"{[dict(a) for a in gone]}\n{now}\n{live.output(gpu)}"
                )
            assert now[job]["JobStatus"] in (IDLE, RUNNING), now[job]
            if now[job]["JobStatus"] != RUNNING:
                return False
            seen[job] = (
                cpuset(startd, str(now[job]["GlobalJobId"])),
                cpuset(startd, gpu_global),
                str(now[job]["RemoteHost"]),
            )
            return True

        wait_cycling(live, running, 120, f"CPU job {job} to run on the lent core")
        mine, its, host = seen[job]
        assert host.startswith("slot2_") and machine_of(host).split("@")[0] == startd, host
        assert live.jobs()[job][A.HARVEST_FROM] == gpu_global
        assert mine and its and mine.isdisjoint(its), (mine, its)
        assert mine | its == {0, 1}
        if job == cpu[0]:  # one core to lend: the other waits, with the numbers
            waiting = live.jobs()[cpu[1]]
            assert waiting["JobStatus"] == IDLE
            assert "largest harvest open is 0 cores of GPU job" in str(
                waiting.get(A.WAIT_REASON)
            ), waiting.get(A.WAIT_REASON)
        wait_cycling(
            live,
            lambda job=job: job not in live.jobs(),
            60,  # type: ignore[misc]
            f"CPU job {job} to end",
        )
        deadline = time.monotonic() + 10
        while cpuset(startd, gpu_global) != {0, 1}:  # its end gave the core back
            assert time.monotonic() < deadline, cpuset(startd, gpu_global)
            time.sleep(0.2)
        out = live.output(job)
        assert set(parse_cpu_list(out.split("Cpus_allowed_list:")[1].split()[0])) == mine, out
        [done] = live.schedd.history(
            f"ClusterId == {job.split('.')[0]}", projection=["ExitCode", "LastRemoteHost"]
        )
        assert done["ExitCode"] == 0 and str(done["LastRemoteHost"]).startswith("slot2_")
    assert live.jobs()[plain]["JobStatus"] == IDLE
