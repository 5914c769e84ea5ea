"""The collocate policy live on the real Slurm cluster: CPU-only jobs on the
idle cores of a running GPU job, with the scheduler configuration of deploy/slurm (the lending
partition ``coshare-lend``, OverSubscribe=FORCE, guarded by job_submit.lua) and the Prolog's
loan, which takes the CPU job's cores out of the GPU job's cpuset before any task runs.

Its own one-node cluster, 2 CPUs and 1 device: this host has 2 cores, and lent cores must be
real ones (each node of the session's cluster advertises 4 CPUs on the same 2 cores, sharing
them through ``node.cpu_overcommit``, where a loan would prove nothing). So the GPU job holds
both cores and can lend one: the two CPU jobs borrow it one after the other (the second waits
with the numbers meanwhile). Short settings: ``P_M`` 0.1 of a 40-s request (4 s), facts every
second.

What is checked is what Slurm and the kernel say: both CPU jobs run beside the GPU job while
Slurm counts the node's CPUs all allocated; each one's ``cpuset.cpus`` (and the
``Cpus_allowed_list`` its task printed) is disjoint from the GPU job's at that moment; an
unannotated job of the same node stays pending the whole time (Slurm's reason: Resources), and
a user can neither submit into the lending partition nor move a job there.

Give-back: a GPU job that idles through ``P_M`` lends its second core to a CPU job, then turns
busy (three spinning processes on the one core it kept) while the host is contended (two more
spinning processes on each core, outside Slurm). Its load alone cannot show that it wants
more; its run-queue delay (node facts ``wait``) can.
The next cycles requeue the borrower through Slurm (``scontrol requeuehold``, the cycle says
why with the numbers), the borrower's end gives the core back (the GPU job's cpuset is both
cores again), and the borrower waits held while the GPU job stays busy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from coshare.config import load_config
from coshare.errors import CoshareError
from coshare.node import lifecycle
from coshare.node.spec import parse_cpu_list

from slurm_addon.placement import parse_placement
from tests.prometheus import free_port

from .cluster import BIN, SCRIPT, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
USER = 65534
NODE = "csl-n1"
PREFIX = "coshare-lendtest"

#: The GPU job: a low real load (busy 10 ms of every 100), for as long as it is asked to.
LOW_LOAD = """import sys, time
end = time.time() + float(sys.argv[1])
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.01:
        pass
    time.sleep(0.09)
"""


@pytest.fixture(scope="module")
def lend_cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.fail("the Slurm integration tests start real daemons and need root")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("lending a core needs a host with 2 cores")
    directory = Path(tempfile.mkdtemp(prefix="coshare-lend-", dir="/var/tmp"))
    directory.chmod(0o755)
    env = {
        **os.environ,
        "COSHARE_SLURM_CTLD_PORT": str(free_port()),
        "COSHARE_SLURM_NODE_PORT": str(free_port()),
        "COSHARE_SLURM_DBD_PORT": str(free_port()),
        "COSHARE_SLURM_CGROUP_PREFIX": PREFIX,
    }
    start = subprocess.run(
        [
            str(SCRIPT),
            "start",
            str(directory),
            "--nodes",
            "1",
            "--devices",
            "1",
            "--cpus",
            "2",
            "--coshare-bin",
            str(BIN),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if start.returncode != 0:
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=120, env=env)
        pytest.fail(f"local Slurm cluster did not start:\n{start.stderr}")
    base = (directory / "coshare.yaml").read_text()
    (directory / "test-coshare.yaml").write_text(
        base + "policy: {name: collocate}\ncollocate: {monitor_fraction: 0.1}\n"
        "cycle: {replan_after_s: 120}\n"
    )
    cluster = Cluster(directory)
    try:
        yield cluster
    finally:
        cluster.run("scancel", "--quiet", "--user=root", check=False)
        cluster.run("scancel", "--quiet", f"--user={USER}", check=False)
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=180, env=env)
        shutil.rmtree(directory, ignore_errors=True)


#: The GPU job that turns busy: low load until the flag file exists, then three spinning
#: processes (more than the two cores it asked for) until the end.
#: Idle (as LOW_LOAD) until the file ``argv[2]`` appears, then three processes busy until
#: ``argv[2]`` + ".stop" appears: the test ends it, so a slow machine never outlives it (a
#: fixed length once ended it while the test still waited for the requeued borrower).
IDLE_THEN_BUSY = (
    LOW_LOAD.replace(
        "while time.time() < end:",
        """flag = sys.argv[2]
while time.time() < end and not os.path.exists(flag):""",
    ).replace("import sys, time", "import os, sys, time")
    + """
for _ in range(2):
    if os.fork() == 0:
        break
while not os.path.exists(flag + ".stop") and time.time() < end + 600:
    pass
"""
)


def wait_cycling(cluster: Cluster, check: object, timeout_s: float, what: str) -> None:
    """Run a cycle every half second (as cron would, faster) until ``check()`` holds."""
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    last = ""
    while not check():
        assert time.monotonic() < deadline, (
            f"timed out after {timeout_s:.0f} s: {what}\nthe last cycle said:\n{last}\n"
            + cluster.run("squeue", "--format=%i %P %T %r %p", check=False).stdout
        )
        result = cluster.cycle()
        last = result.stdout
        assert result.returncode == 0, result.stdout + result.stderr
        time.sleep(0.5)


def submit(cluster: Cluster, work: Path, name: str, body: str, *options: str) -> str:
    script = work / f"{name}.sh"
    lines = ["#!/bin/sh", f"#SBATCH --job-name={name}", f"#SBATCH --output={work}/%j.out"]
    script.write_text("\n".join([*lines, *options, body]) + "\n")
    script.chmod(0o755)
    out = cluster.run("sbatch", "--parsable", f"--chdir={work}", str(script), user=USER)
    return out.stdout.strip().split(";")[0]


def cpuset(cluster: Cluster, job: str) -> set[int]:
    """The job's cpuset on the node, read from the kernel's file (Slurm shows a job running
    while its Prolog may still be making the group: waits for it up to 10 s)."""
    config = load_config(cluster.dir / "node" / NODE / "coshare.yaml", environ={}).node
    deadline = time.monotonic() + 10
    while True:
        try:
            return set(parse_cpu_list(lifecycle.node_cgroups(config).open(job).cpus_text()))
        except CoshareError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def shown(cluster: Cluster, job: str) -> dict[str, object]:
    """A running job as the snapshot has it (``coshare slurm show``); empty when it has none."""
    out = cluster.run(
        str(BIN / "coshare"), "--config", str(cluster.config), "slurm", "show", "--output", "json"
    ).stdout
    return next((r for r in json.loads(out)["running"] if r["id"] == job), {})


def held_cores(cluster: Cluster, job: str) -> int | None:
    """``cpu_cores_held`` of a running job in the snapshot (``coshare slurm show``)."""
    held = shown(cluster, job).get("cpu_cores_held")
    return None if held is None else int(str(held))


#: The node facts a lender is judged by, as the snapshot carries them.
FIGURES = (
    "cpu_load_cores",
    "cpu_load_last_cores",
    "cpu_wait_cores",
    "cpu_wait_last_cores",
    "cpu_cores_held",
)


def test_two_cpu_jobs_run_on_the_gpu_jobs_lent_core_with_disjoint_cpusets(
    lend_cluster: Cluster,
) -> None:
    cluster = lend_cluster
    work = cluster.dir / "user-jobs"
    work.mkdir(exist_ok=True)
    work.chmod(0o1777)
    (work / "low_load.py").write_text(LOW_LOAD)
    report = "grep Cpus_allowed_list /proc/self/status; sleep 5"
    gpu = submit(
        cluster,
        work,
        "gpu",
        f"exec /usr/bin/python3 -I {work}/low_load.py 35",
        "#SBATCH -c 2 --mem=100M",
        '#SBATCH --comment="coshare: device-memory=1000 device-threads=60 '
        'walltime=40 copy-bandwidth=10"',
    )
    cpu = [
        submit(
            cluster,
            work,
            f"cpu{i}",
            report,
            "#SBATCH -c 1 --mem=50M",
            '#SBATCH --comment="coshare: kind=cpu walltime=20"',
        )
        for i in (1, 2)
    ]
    wait_cycling(cluster, lambda: cluster.jobs()[gpu].phase == "active", 30, "the GPU job to run")
    jobs = cluster.jobs()
    assert jobs[gpu].partition == "coshare-lend" and jobs[gpu].nodes == (NODE,)
    assert cpuset(cluster, gpu) == {0, 1}
    # An unannotated job of the same user: Slurm starts it nowhere while the GPU job runs (its
    # cores are allocated in another partition), and it cannot get into the lending one.
    plain = submit(cluster, work, "plain", "echo ran", "#SBATCH -c 1 --mem=50M")
    refused = cluster.run(
        "sbatch", "--parsable", "--partition=coshare-lend", "--wrap=true", check=False, user=USER
    )
    assert refused.returncode != 0 and "Access/permission denied" in refused.stderr
    moved = cluster.run(
        "scontrol", "update", f"JobId={plain}", "Partition=coshare-lend", check=False, user=USER
    )
    assert moved.returncode != 0 and "Access/permission denied" in moved.stderr, moved.stderr

    seen: dict[str, tuple[set[int], set[int]]] = {}
    for job in cpu:

        def running(job: str = job) -> bool:
            now = cluster.jobs()
            assert now[plain].phase == "pending", now[plain]  # never beside the GPU job
            assert now[gpu].phase == "active", "the GPU job ended before the CPU jobs ran"
            if now[job].phase != "active":
                return False
            try:
                seen[job] = (cpuset(cluster, job), cpuset(cluster, gpu))
            except CoshareError as exc:
                log = (cluster.dir / "log" / f"slurmd-{NODE}.log").read_text()
                out = work / f"{job}.out"
                pytest.fail(
                    f"{exc}\n{out.read_text() if out.exists() else ''}\n"
                    + "\n".join(line for line in log.splitlines() if "coshare" in line)[-3000:]
                )
            return True

        wait_cycling(cluster, running, 25, f"CPU job {job} to run on the lent core")
        now = cluster.jobs()
        assert now[job].partition == "coshare-lend" and now[job].nodes == (NODE,)
        placement = parse_placement(now[job].admin_comment)
        assert placement is not None and placement.harvest_from == gpu, now[job].admin_comment
        mine, its = seen[job]
        assert mine and its and mine.isdisjoint(its), (mine, its)
        assert mine | its == {0, 1}
        # The node's facts tell the planner how many cores the lender keeps (give-back reads
        # it): one, while it lends the other (facts are published every second).
        wait_cycling(
            cluster,
            lambda: held_cores(cluster, gpu) == 1,
            4,
            "the facts to show the lender's one core",
        )
        if job == cpu[0]:  # one core to lend: the other waits, with the numbers
            waiting = now[cpu[1]]
            assert waiting.phase == "pending" and waiting.held, waiting
            assert "largest harvest open is 0 cores of GPU job" in waiting.admin_comment, (
                waiting.admin_comment
            )
        wait_cycling(
            cluster,
            lambda job=job: cluster.jobs()[job].phase == "ended",
            30,
            f"CPU job {job} to end",
        )
        assert cpuset(cluster, gpu) == {0, 1}  # its end gave the core back
        out = (work / f"{job}.out").read_text()
        assert set(parse_cpu_list(out.split("Cpus_allowed_list:")[1].split()[0])) == mine, out
        assert cluster.jobs()[job].state == "COMPLETED"
    assert cluster.jobs()[plain].phase == "pending"
    cluster.run("scancel", gpu)


def test_a_gpu_job_that_turns_busy_gets_its_lent_core_back_through_slurm(
    lend_cluster: Cluster,
) -> None:
    cluster = lend_cluster
    # What the test before left (its unannotated job) goes first: the node is ours alone.
    cluster.run("scancel", "--quiet", f"--user={USER}", check=False)
    deadline = time.monotonic() + 60
    while cluster.run("squeue", "--noheader", "--format=%i", check=False).stdout.split():
        assert time.monotonic() < deadline, cluster.run("squeue", check=False).stdout
        time.sleep(0.5)
    work = cluster.dir / "user-jobs"
    work.mkdir(exist_ok=True)
    work.chmod(0o1777)
    (work / "idle_then_busy.py").write_text(IDLE_THEN_BUSY)
    flag = work / "turn-busy"
    flag.unlink(missing_ok=True)
    stop = work / "turn-busy.stop"
    stop.unlink(missing_ok=True)
    gpu = submit(
        cluster,
        work,
        "gpu-busy",
        f"exec /usr/bin/python3 -I {work}/idle_then_busy.py 600 {flag}",
        "#SBATCH -c 2 --mem=100M",
        '#SBATCH --comment="coshare: device-memory=1000 device-threads=60 '
        'walltime=120 copy-bandwidth=10"',
    )
    # Its requested time ends before the GPU job's (backfill: the node is reserved then).
    borrower = submit(
        cluster,
        work,
        "borrower",
        "sleep 60",
        "#SBATCH -c 1 --mem=50M",
        '#SBATCH --comment="coshare: kind=cpu walltime=70"',
    )
    contention: list[subprocess.Popen[bytes]] = []
    try:
        wait_cycling(
            cluster, lambda: cluster.jobs()[gpu].phase == "active", 30, "the GPU job to run"
        )
        # P_M is 0.1 of its 120-s request: 12 s of monitoring, then its idle core is lent.
        wait_cycling(
            cluster,
            lambda: cluster.jobs()[borrower].phase == "active",
            45,
            "the CPU job to run on the lent core",
        )
        mine, its = cpuset(cluster, borrower), cpuset(cluster, gpu)
        assert mine.isdisjoint(its) and mine | its == {0, 1}, (mine, its)
        placement = parse_placement(cluster.jobs()[borrower].admin_comment)
        assert placement is not None and placement.harvest_from == gpu, placement
        wait_cycling(
            cluster,
            lambda: held_cores(cluster, gpu) == 1,
            5,
            "the facts to show the lender's one core",
        )
        calm = {k: shown(cluster, gpu).get(k) for k in FIGURES}
        print(f"lender idle, lending 1 core: {calm}")

        # A contended host, as this shared machine often is: two more spinning processes on
        # each core, outside Slurm. The lender's load alone now stays below what it kept.
        contention.extend(
            subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
            for core in (0, 1, 0, 1)
        )
        flag.touch()  # the GPU job turns busy: 3 spinning processes on the core it kept
        said: list[str] = []
        seen: list[dict[str, object]] = []
        deadline = time.monotonic() + 40
        while not said:
            figures = {k: shown(cluster, gpu).get(k) for k in FIGURES}
            seen.append(figures)
            assert time.monotonic() < deadline, (
                "no give-back within 40 s of the GPU job turning busy; what the snapshot "
                f"showed of it each cycle: {seen}"
            )
            result = cluster.cycle()
            assert result.returncode == 0, result.stdout + result.stderr
            said = [
                line.strip()
                for line in result.stdout.splitlines()
                if line.strip().startswith(f"requeued {borrower}:")
            ]
            time.sleep(0.5)
        print(f"lender busy, each cycle until the give-back: {seen}")
        print(said[0])
        assert (
            f"requeued {borrower}: GPU job {gpu} on {NODE} needs its cores back: its demand of "
        ) in said[0], said
        assert (
            "waiting for a CPU, run-queue delay) is at least 0.9 x the 1 cores it kept "
            "while lending 1; requeued through the scheduler" in said[0]
        ), said
        # Slurm requeued it (held: coshare places it again when a harvest opens), and its end
        # gave the core back to the GPU job's cpuset.
        wait_cycling(
            cluster,
            lambda: cluster.jobs()[borrower].phase == "pending",
            20,
            "Slurm to requeue the borrower",
        )
        assert cluster.jobs()[borrower].held, cluster.jobs()[borrower]
        deadline = time.monotonic() + 20
        while cpuset(cluster, gpu) != {0, 1}:
            assert time.monotonic() < deadline, f"the GPU job kept {cpuset(cluster, gpu)}"
            time.sleep(0.5)
        # While it stays busy, nothing is lent again: the borrower waits.
        for _ in range(6):
            result = cluster.cycle()
            assert result.returncode == 0, result.stdout + result.stderr
            now = cluster.jobs()
            assert now[gpu].phase == "active" and now[borrower].phase == "pending", now[borrower]
            time.sleep(0.5)
        print(f"lender busy, its core back: {[shown(cluster, gpu).get(k) for k in FIGURES]}")
    finally:
        stop.touch()
        for spinner in contention:
            spinner.kill()
            spinner.wait()
        cluster.run("scancel", gpu, borrower, check=False)
