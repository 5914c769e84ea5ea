"""Job cgroups on this machine's real kernel: memory, cpusets, freeze, cleanup (root)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import CgroupUnavailable, JobSpecError, JobStateError
from coshare.node.cgroups import V2Cgroups, detect_version
from coshare.node.lifecycle import job_attach, job_end, job_start, node_store, spawn_in_group
from coshare.node.spec import parse_cpu_list

from tests.node.helpers import (
    CGROUP_ROOT,
    COSHARE,
    cpu_ticks,
    node_env,
    remove_parent,
    skip_reason,
    stop,
    unique_parent,
    wait_for,
)

pytestmark = pytest.mark.cgroups
PY = sys.executable
SLEEPER = [PY, "-c", "import time; time.sleep(120)"]


def test_job_over_its_memory_is_killed_whole_and_its_neighbour_survives(
    node_config: NodeConfig, tmp_path: Path
) -> None:
    hog = job_start(node_config, "mem-hog", memory_mib=64)
    calm = job_start(node_config, "mem-calm", memory_mib=64)
    env = node_env(node_config)
    neighbour = spawn_in_group(
        [PY, "-c", "b = bytearray(16 << 20); import time; time.sleep(120)"], calm.group(), env
    )
    try:
        reason_file = tmp_path / "reason"
        # The job: a sleeper in the background, and a process allocating 200 MiB of 64.
        done = subprocess.run(
            [
                COSHARE,
                "node",
                "job-exec",
                "--job",
                "mem-hog",
                "--reason-file",
                str(reason_file),
                "--",
                "sh",
                "-c",
                f"sleep 120 & exec {PY} -c 'x = bytearray(200 << 20)'",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 137, done.stderr
        assert "host memory went over the declared 64 MiB" in done.stderr
        assert "host memory" in reason_file.read_text()
        assert hog.group().pids() == ()  # the background sleeper went with it
        assert neighbour.poll() is None  # the neighbour keeps running, in its own group
        assert neighbour.pid in calm.group().pids()
        assert job_end(node_config, "mem-calm").reason is None
        assert "64 MiB" in (job_end(node_config, "mem-hog").reason or "")
    finally:
        stop(neighbour)


def test_watchdog_kills_a_job_whose_processes_were_attached(gate_daemon: NodeConfig) -> None:
    # No job-exec here (as with a scheduler that starts the job itself): the daemon watches.
    record = job_start(gate_daemon, "attached", memory_mib=64)
    sleeper = subprocess.Popen(SLEEPER)
    hog = subprocess.Popen(
        [PY, "-c", "import sys; sys.stdin.read(); x = bytearray(200 << 20)"], stdin=subprocess.PIPE
    )
    try:
        job_attach(gate_daemon, "attached", [sleeper.pid, hog.pid])
        assert hog.stdin is not None
        hog.stdin.close()  # now allocate
        wait_for(lambda: sleeper.poll() is not None, what="the watchdog to kill the job")
        assert hog.wait(timeout=10) == -9 and sleeper.returncode == -9
        reason = node_store(gate_daemon).reason("attached")
        assert reason is not None and "over the declared 64 MiB" in reason
        assert record.group().pids() == ()
    finally:
        stop(sleeper)
        stop(hog)


def allowed_cpus_of(pid: int) -> tuple[int, ...]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    raise AssertionError("no Cpus_allowed_list")


def test_colocated_jobs_get_disjoint_cpusets(node_config: NodeConfig) -> None:
    a = job_start(node_config, "cpu-a", cores=1)
    b = job_start(node_config, "cpu-b", cores=0.5)  # fractions round up to a whole core
    assert len(a.spec.cpus) == 1 and len(b.spec.cpus) == 1
    assert set(a.spec.cpus).isdisjoint(b.spec.cpus)
    procs = [spawn_in_group(SLEEPER, r.group(), node_env(node_config)) for r in (a, b)]
    try:
        # The kernel agrees: each process may run on its job's cpus only.
        assert allowed_cpus_of(procs[0].pid) == a.spec.cpus
        assert allowed_cpus_of(procs[1].pid) == b.spec.cpus
        total = len(a.cgroups().allowed_cpus())
        with pytest.raises(JobSpecError, match="held by"):
            job_start(node_config, "cpu-c", cores=total)
        with pytest.raises(JobSpecError, match="held by job cpu-a"):
            job_start(node_config, "cpu-d", cpus=a.spec.cpus)
        with pytest.raises(JobStateError, match="already runs"):
            job_start(node_config, "cpu-a", cores=1)
    finally:
        for proc in procs:
            stop(proc)


def test_freeze_stops_a_busy_process_and_thaw_resumes_it(node_config: NodeConfig) -> None:
    record = job_start(node_config, "frozen", cores=1)
    group = record.group()
    busy = spawn_in_group([PY, "-c", "while True: pass"], group, node_env(node_config))
    try:
        start = cpu_ticks(busy.pid)
        wait_for(lambda: cpu_ticks(busy.pid) > start + 2, what="the busy loop to run")
        group.freeze()
        assert group.is_frozen()
        frozen_at = cpu_ticks(busy.pid)
        time.sleep(0.3)
        assert cpu_ticks(busy.pid) == frozen_at  # frozen: not a tick of CPU
        group.thaw()
        assert not group.is_frozen()
        wait_for(lambda: cpu_ticks(busy.pid) > frozen_at + 2, what="the thawed loop to run")
    finally:
        stop(busy)


def test_end_kills_leftovers_and_leaves_no_group_behind(node_config: NodeConfig) -> None:
    record = job_start(node_config, "cleanup", cores=1, memory_mib=128)
    group = record.group()
    # A job that leaves daemons behind: two background sleepers outlive its shell.
    shell = spawn_in_group(
        ["sh", "-c", "sleep 120 & sleep 120 & echo started"], group, node_env(node_config)
    )
    assert shell.wait(timeout=30) == 0
    wait_for(lambda: len(group.pids()) == 2, what="the two sleepers")
    end = job_end(node_config, "cleanup")
    assert end.started and end.leftover == 2 and end.reason is None
    assert not any(d.exists() for d in group.directories())
    assert node_store(node_config).read("cleanup") is None
    again = job_end(node_config, "cleanup")  # idempotent
    assert not again.started and again.leftover == 0


def test_parent_removal_leaves_nothing_of_the_test_behind() -> None:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    config = NodeConfig(cgroup_parent=unique_parent(), state_dir="/tmp/unused")
    from coshare.node.lifecycle import node_cgroups

    cgroups = node_cgroups(config)
    group = cgroups.create("x", (), None)
    proc = subprocess.Popen(SLEEPER)
    group.add(proc.pid)
    remove_parent(cgroups)  # type: ignore[arg-type]
    assert proc.wait(timeout=10) == -9
    leftovers = list(CGROUP_ROOT.glob(f"*/{config.cgroup_parent}")) + list(
        CGROUP_ROOT.glob(config.cgroup_parent)
    )
    assert leftovers == []


def test_job_run_passes_the_exit_status_on_and_cleans_up(node_config: NodeConfig) -> None:
    done = subprocess.run(
        [
            COSHARE,
            "node",
            "job-run",
            "--job",
            "run-1",
            "--cores",
            "1",
            "--memory-mib",
            "128",
            "--device",
            "0",
            "--device-threads",
            "4",
            "--",
            "sh",
            "-c",
            'echo "$COSHARE_JOB_ID $CUDA_VISIBLE_DEVICES $COSHARE_CPUS"; exit 3',
        ],
        env=node_env(node_config),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    job, devices, cpus = done.stdout.split()
    assert (job, devices) == ("run-1", "0") and len(parse_cpu_list(cpus)) == 1
    assert node_store(node_config).jobs() == []


# -- cgroup v2, where the kernel offers it ---------------------------------------------------


def test_v2_freeze_thaw_kill_and_remove_for_real(v2: V2Cgroups) -> None:
    group = v2.create("v2-job", (), None)
    busy = subprocess.Popen([PY, "-c", "while True: pass"])
    try:
        group.add(busy.pid)
        assert group.pids() == (busy.pid,)
        start = cpu_ticks(busy.pid)
        wait_for(lambda: cpu_ticks(busy.pid) > start + 2, what="the busy loop to run")
        group.freeze()
        frozen_at = cpu_ticks(busy.pid)
        time.sleep(0.3)
        assert cpu_ticks(busy.pid) == frozen_at
        group.thaw()
        wait_for(lambda: cpu_ticks(busy.pid) > frozen_at + 2, what="the thawed loop to run")
        group.remove()  # cgroup.kill (5.14+), then rmdir
        assert busy.wait(timeout=10) == -9
        assert not group.exists()
    finally:
        stop(busy)


def test_v2_limits_are_refused_precisely_where_controllers_are_missing(v2: V2Cgroups) -> None:
    offered = v2.controllers()
    for feature, args in (("memory", ((), 64)), ("cpuset", ((0,), None))):
        if feature in offered:
            continue  # a full v2 machine: the limit is enforced, tested through v1's twin
        with pytest.raises(CgroupUnavailable, match=f"the {feature} controller is not available"):
            v2.create(f"v2-{feature}", *args)  # type: ignore[arg-type]
    if detect_version(CGROUP_ROOT) == "v1" and "memory" not in offered:
        assert any("memory controller" in m for m in v2.missing(["memory"]))
