"""The job-control socket with real processes: launchers, other users, hostile callers (root).

A copy of the shell named ``coshare-test-starter`` plays the scheduler daemon the node trusts
(as condor_starter or slurmstepd do on a real node); job processes run as uid 65534 with the
system's python3 and coshare-launch (standard library only), as on a node where coshare's own
environment is not readable by users.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.control import launcher, service
from coshare.node.control.service import JobControl
from coshare.node.jobs import job_of_pid
from coshare.node.lifecycle import job_start, node_cgroups, node_store, spawn_in_group
from coshare.node.process import ProcessInfo
from coshare.node.procfs import read_process
from coshare.node.spec import parse_cpu_list
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.node.helpers import LAUNCHER_NAME, make_starter, node_env, stop, wait_for

pytestmark = pytest.mark.cgroups
USER = 65534
PYTHON = "/usr/bin/python3"
LAUNCH = [PYTHON, "-I", launcher.__file__]
AS_USER = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups"]
# One request on a new connection; prints the reply line (a client of any language would do).
ASK = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
print(s.makefile().readline().strip(), flush=True)
if len(sys.argv) > 3:
    sys.stdin.read()  # stay alive (a launcher waiting for its job) until told
"""
REPORT = "import os; print(open('/proc/self/status').read().split('Cpus_allowed_list:')[1].split()[0], os.environ.get('COSHARE_CPUS'), os.environ.get('COSHARE_JOB_ID'), flush=True)"  # noqa: E501


def under_starter(config: NodeConfig, argv: Sequence[str], title: str | None = None) -> list[str]:
    """``argv`` as a child of the trusted starter, whose command line starts with ``title``
    (slurmstepd names its job there: ``slurmstepd: [77.batch]``)."""
    starter = str(make_starter(Path(config.state_dir)))
    retitle = "import os, sys; os.execv(sys.argv[1], sys.argv[2:])"
    return [
        PYTHON,
        "-I",
        "-c",
        retitle,
        starter,
        title or LAUNCHER_NAME,
        "-c",
        '"$@"; exit $?',
        "sh",
        *argv,
    ]


def ask(config: NodeConfig, line: str, *, starter: bool = False, user: bool = True) -> str:
    argv = [*(AS_USER if user else []), PYTHON, "-I", "-c", ASK, config.control_socket, line]
    if starter:
        argv = under_starter(config, argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def launch(
    config: NodeConfig, job: str, command: Sequence[str], *extra: str, user: bool = True
) -> subprocess.Popen[str]:
    """coshare-launch run for ``job``, started by the trusted starter, as the job's user."""
    argv = [
        *(AS_USER if user else []),
        *LAUNCH,
        "run",
        "--socket",
        config.control_socket,
        "--gate-socket",
        config.gate_socket,
        "--job",
        job,
        *extra,
        "--",
        *command,
    ]
    return subprocess.Popen(
        under_starter(config, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def groups_left(config: NodeConfig) -> list[str]:
    return node_cgroups(config).jobs()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running(config: NodeConfig, job: str) -> tuple[int, int]:
    """(launcher pid, job process pid) once the job's one process runs in its group."""
    group = node_cgroups(config).open(job)
    wait_for(lambda: len(group.pids()) == 1, what=f"job {job} to run")
    (pid,) = group.pids()
    return parent_of(pid), pid


def test_launched_jobs_get_disjoint_cores_and_a_hog_is_killed_whole(
    gate_daemon: NodeConfig,
) -> None:
    config = gate_daemon
    neighbour = launch(
        config,
        "calm",
        [PYTHON, "-c", REPORT + "; import time; time.sleep(3)"],
        "--cores",
        "1",
        "--memory-mib",
        "64",
    )
    assert neighbour.stdout is not None
    calm_cpus, calm_env, calm_job = neighbour.stdout.readline().split()
    hog = launch(
        config,
        "hog",
        [
            "sh",
            "-c",
            f'{PYTHON} -c "{REPORT}"; sleep 30 & '
            f"{PYTHON} -c 'x = bytearray(300 << 20)'; echo survived",
        ],
        "--cores",
        "1",
        "--memory-mib",
        "64",
        "--label",
        "7.0",
    )
    status, out, err = finish(hog)
    hog_cpus, hog_env, _ = out.splitlines()[0].split()
    assert status == launcher.KILLED_STATUS, err
    assert "survived" not in out  # stopped at its limit, killed as a whole
    assert "coshare: coshare killed job 7.0: its host memory went over the declared 64 MiB" in err
    assert finish(neighbour)[0] == 0  # the neighbour completes
    assert calm_job == "calm" and calm_cpus == calm_env and hog_cpus == hog_env
    assert set(parse_cpu_list(calm_cpus)).isdisjoint(parse_cpu_list(hog_cpus))
    assert groups_left(config) == [] and node_store(config).jobs() == []


def test_start_is_refused_to_a_process_no_trusted_launcher_started(
    gate_daemon: NodeConfig,
) -> None:
    reply = ask(gate_daemon, "START job=rogue cores=1 memory_mib=99999")
    assert reply.startswith("ERR not_launcher job rogue: process ")
    assert "was not started by a trusted launcher" in reply
    assert groups_left(gate_daemon) == []


def test_a_job_cannot_start_another_or_join_another_jobs_group(gate_daemon: NodeConfig) -> None:
    config = gate_daemon
    mine = job_start(config, "mine", uid=USER)
    job_start(config, "other", uid=USER)
    replies = []
    for n, line in enumerate(("START job=bigger cores=1", "JOIN job=other")):
        out = Path(config.state_dir) / f"reply-{n}"
        # A process of job "mine" (inside its group) asks; its reply goes to a file.
        argv = [
            "sh",
            "-c",
            '"$@" > "$0"',
            str(out),
            *AS_USER,
            PYTHON,
            "-I",
            "-c",
            ASK,
            config.control_socket,
            line,
        ]
        assert spawn_in_group(argv, mine.group(), node_env(config)).wait(timeout=60) == 0
        replies.append(out.read_text().strip())
    assert replies[0].startswith("ERR in_group job bigger: process ")
    assert "inside job mine's group; a job cannot start another" in replies[0]
    assert replies[1].startswith("ERR in_group job other: process ")
    assert "already in job mine's group" in replies[1]
    assert groups_left(config) == ["mine", "other"]


def test_a_second_start_of_a_running_job_is_refused(gate_daemon: NodeConfig) -> None:
    config = gate_daemon
    first = launch(config, "twice", ["sleep", "30"], "--cores", "1")
    launcher_pid, _ = running(config, "twice")
    try:
        reply = ask(config, "START job=twice cores=1", starter=True)
        assert reply.startswith("ERR running job twice already runs on this node")
    finally:
        os.kill(launcher_pid, signal.SIGTERM)  # as the scheduler's removal does
    status, _, _ = finish(first)
    # The launcher passed SIGTERM on to the job and then ended by it too, as the job did.
    assert status == 128 + signal.SIGTERM
    assert groups_left(config) == []


def test_join_is_refused_to_other_users_and_to_processes_the_launcher_did_not_start(
    gate_daemon: NodeConfig,
) -> None:
    config = gate_daemon
    # A launcher (as the job's user) that started job "j" and waits.
    holder = subprocess.Popen(
        under_starter(
            config,
            [
                *AS_USER,
                PYTHON,
                "-I",
                "-c",
                ASK,
                config.control_socket,
                "START job=j cores=1",
                "wait",
            ],
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("OK job=j cpus=")
        # Another account, even root's own test process as a non-child, may not join it.
        other_uid = ["setpriv", "--reuid=1", "--regid=1", "--clear-groups"]
        reply = subprocess.run(
            [*other_uid, PYTHON, "-I", "-c", ASK, config.control_socket, "JOIN job=j"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        assert reply.startswith("ERR wrong_user job j runs as uid 65534")
        reply = ask(config, "JOIN job=j")  # the right user, but no child of the launcher
        assert reply.startswith("ERR not_allowed job j: process ")
        assert "is not a child of the job's launcher" in reply
        reply = ask(config, "JOIN job=j", starter=True)  # a child of the starter, not of j's
        assert "is not a child of the job's launcher" in reply
        assert ask(config, "END job=j").startswith("ERR not_allowed job j: only its launcher")
        assert node_cgroups(config).open("j").pids() == ()
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_a_sigkilled_launchers_job_is_reaped(gate_daemon: NodeConfig) -> None:
    config = gate_daemon
    proc = launch(config, "orphan", ["sleep", "60"], "--cores", "1")
    launcher_pid, sleeper = running(config, "orphan")
    # Kill the launcher alone (no END is sent), then its job as the scheduler would.
    os.kill(launcher_pid, signal.SIGKILL)
    assert node_store(config).jobs() == ["orphan"]  # the job still runs: nothing is reaped
    os.kill(sleeper, signal.SIGKILL)
    finish(proc)
    wait_for(
        lambda: node_store(config).jobs() == [] and groups_left(config) == [],
        what="the daemon to reap the abandoned group",
    )


def test_task_prolog_joins_its_task_and_the_daemon_adopts_tasks_that_skipped_it(
    gate_daemon: NodeConfig,
) -> None:
    # Slurm's shape: root's Prolog made job 77; slurmstepd (titled with the job) starts the
    # task as the user, and the TaskProlog, a child of the task, JOINs its parent.
    config = gate_daemon
    record = job_start(config, "77", cores=1, devices=["0"], device_threads=4, uid=USER)
    script = (
        f"{' '.join(LAUNCH)} task-prolog --socket {config.control_socket} "
        f"--gate-socket {config.gate_socket} --state-dir {config.state_dir}; "
        f'{PYTHON} -c "{REPORT}"'
    )
    task = under_starter(config, [*AS_USER, "sh", "-c", script], title="slurmstepd: [77.batch]")
    done = subprocess.run(
        task,
        capture_output=True,
        text=True,
        timeout=60,
        env={"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    exports, report = done.stdout.splitlines()[:-1], done.stdout.splitlines()[-1]
    assert f"export COSHARE_CPUS={','.join(map(str, record.spec.cpus))}" in exports
    assert {"export CUDA_VISIBLE_DEVICES=0", "export COSHARE_DEVICE_THREADS=4"} <= set(exports)
    assert report.split()[0] == ",".join(map(str, record.spec.cpus))  # the task ran pinned
    # A task whose TaskProlog never ran: the daemon moves it into the job's group.
    skipped = subprocess.Popen(
        under_starter(config, [*AS_USER, "sleep", "60"], title="slurmstepd: [77.0]")
    )
    try:
        wait_for(lambda: len(record.group().pids()) == 1, what="the daemon to adopt the task")
    finally:
        stop(skipped)


def test_hostile_control_input_gets_an_error_and_the_daemon_keeps_serving(
    gate_daemon: NodeConfig,
) -> None:
    @settings(max_examples=80, deadline=None, database=None)
    @given(st.binary(max_size=300))
    @example(b"START job=../../etc cores=1")
    @example(b"START job=x cores=nan memory_mib=-1")
    @example(b"JOIN job=x target=grandparent")
    @example(b"END job=x job=y")
    @example(b"START job=x uid=0 " + b"devices=0," * 200)
    def fuzz(data: bytes) -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(gate_daemon.control_socket)
            sock.sendall(data.replace(b"\n", b" ") + b"\n")
            reply = sock.makefile("rb").readline()
        assert reply.startswith(b"ERR "), reply
        assert ask(gate_daemon, "END job=nothing-here").startswith("ERR unknown_job")

    fuzz()
    assert groups_left(gate_daemon) == []


# Run by a job as its user: what the kernel says about its launcher (the job's parent).
TRACE_PARENT = r"""
import ctypes, os
launcher = os.getppid()
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
attached = libc.ptrace(PTRACE_ATTACH, launcher, None, None) == 0
errno = ctypes.get_errno()
if attached:
    os.waitpid(launcher, 0)
    libc.ptrace(PTRACE_DETACH, launcher, None, None)
print(os.stat(f"/proc/{launcher}/status").st_uid, "attached" if attached else os.strerror(errno))
"""


def test_the_job_cannot_trace_its_launcher(gate_daemon: NodeConfig) -> None:
    # coshare-launch runs as the job's user outside the job's group; the job is its child and
    # same-uid ptrace is allowed here (no Yama). The launcher made itself not dumpable: its
    # /proc/PID files are root's (proc(5)), and the job's PTRACE_ATTACH is refused.
    proc = launch(gate_daemon, "tracer", [PYTHON, "-c", TRACE_PARENT], "--cores", "1")
    status, out, err = finish(proc)
    assert status == 0, err
    assert out.split() == ["0", "Operation", "not", "permitted"], out


@pytest.mark.parametrize("same_tick", [False, True])
def test_a_pid_reused_while_joining_is_never_moved_into_the_group(
    node_config: NodeConfig, monkeypatch: pytest.MonkeyPatch, same_tick: bool
) -> None:
    # A task of root-started job 77 asks to JOIN; between the daemon's checks and its write of
    # the pid to cgroup.procs the task dies and a root process takes its pid (forced through
    # ns_last_pid). The daemon must notice, refuse, and put that process back. ``same_tick``:
    # the newcomer started in the task's clock tick (/proc counts 10 ms ticks; it happens
    # here one run in many), so /proc shows it with the task's start time: the pidfd alone
    # tells them apart.
    config = node_config
    record = job_start(config, "77", uid=USER)
    task = subprocess.Popen(
        under_starter(config, [*AS_USER, "sleep", "60"], title="slurmstepd: [77.batch]")
    )
    victim: list[subprocess.Popen[bytes]] = []
    try:
        children = Path(f"/proc/{task.pid}/task/{task.pid}/children")
        wait_for(lambda: children.read_text().split() != [], what="the task to start")
        (target,) = map(int, children.read_text().split())
        # setpriv, then (same pid) the sleep it execs as the user.
        wait_for(
            lambda: (info := read_process(target)) is not None and info.uid == USER,
            what="the task to run as the user",
        )
        start = read_process(target)
        assert start is not None
        group_type = type(record.group())
        original = group_type.add

        def racing_add(group: object, pid: int) -> None:
            if pid == target and not victim:
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="the task reaped")
                victim.append(spawn_with_pid(pid, ["sleep", "60"]))
            original(group, pid)  # type: ignore[arg-type]

        monkeypatch.setattr(group_type, "add", racing_add)
        if same_tick:

            def read_in_one_tick(pid: int, proc: Path = Path("/proc")) -> ProcessInfo | None:
                info = read_process(pid, proc)
                if info is not None and pid == target and victim:
                    return replace(info, start_ticks=start.start_ticks)
                return info

            monkeypatch.setattr(service, "read_process", read_in_one_tick)
        reply = JobControl(config).handle(b"JOIN job=77", target, USER, start.start_ticks)
        assert reply == f"ERR gone job 77: process {target} ended while it joined"
        (taken,) = victim
        assert taken.pid == target
        assert job_of_pid(taken.pid, node_cgroups(config)) is None  # put back where it was
        assert (
            Path(f"/proc/{taken.pid}/cgroup").read_text() == Path("/proc/self/cgroup").read_text()
        )
        assert record.group().pids() == ()
    finally:
        for proc in (*victim, task):
            stop(proc)


def spawn_with_pid(pid: int, argv: list[str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` with process id ``pid`` (root: /proc/sys/kernel/ns_last_pid)."""
    last = Path("/proc/sys/kernel/ns_last_pid")
    for _ in range(500):  # other processes on the machine may take the pid first
        last.write_text(str(pid - 1))
        proc = subprocess.Popen(argv)
        if proc.pid == pid:
            return proc
        stop(proc)
    pytest.fail(f"could not start a process with pid {pid}")


MPS_REPORT = (
    "import os; print(os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'), "
    "os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'), flush=True)"
)


@pytest.mark.parametrize("mps", [True, False])
def test_a_placed_gpu_job_starts_with_its_mps_limits_where_mps_runs(
    node_config: NodeConfig, tmp_path: Path, mps: bool
) -> None:
    from tests.node.helpers import running_daemon

    pipes = tmp_path / "mps"
    pipes.mkdir()
    if mps:
        os.mkfifo(pipes / "control")  # what nvidia-cuda-mps-control makes in its pipe dir
    env = {"COSHARE_NODE_GPU_LIMITS": "mps", "COSHARE_NODE_MPS_PIPE_DIR": str(pipes)}
    with running_daemon(node_config, env=env, devices=("0=80", "1=80")):
        job = launch(
            node_config,
            "gpujob",
            [PYTHON, "-I", "-c", MPS_REPORT],
            "--cores",
            "1",
            "--devices",
            "0,1",
            "--device-memory",
            "20G",
            "--device-threads",
            "20",
        )
        status, out, err = finish(job)
    assert status == 0, err
    if mps:  # its declared memory on each device it sees, and 20 of 80 threads: 25%
        assert out.split() == ["0=20480M,1=20480M", "25"]
    else:  # no control daemon: nothing set, and the daemon says the watchdog holds it alone
        assert out.split() == ["None", "None"]
        log = (Path(node_config.state_dir) / "daemon.log").read_text()
        assert "node.gpu_limits is mps, but no MPS control pipe at" in log
