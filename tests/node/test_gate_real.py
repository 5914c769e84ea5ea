"""The offload gate daemon with real client processes in real job cgroups (root)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.jobs import JobRecord
from coshare.node.lifecycle import job_env, job_start, spawn_in_group
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.node.helpers import COSHARE, node_env, stop, wait_for

pytestmark = pytest.mark.cgroups
PY = sys.executable
REPLY = re.compile(r"(OK( [ -~]*)?|ERR [a-z_]+ [ -~]*)")

# Runs inside a job's group: opens N connections (so the gate identifies them as that job),
# waits for each HELLO reply (the gate has then identified it), and hands the sockets over.
HANDOVER = r"""
import socket, sys
gate, back, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conns = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(gate)
    s.sendall(b"HELLO\n")
    reply = b""
    while not reply.endswith(b"\n"):
        reply += s.recv(256)
    conns.append(s)
b = socket.socket(socket.AF_UNIX)
b.connect(back)
for i in range(0, n, 64):
    socket.send_fds(b, [b"x"], [c.fileno() for c in conns[i:i + 64]])
b.close()
"""


def env_of(config: NodeConfig, record: JobRecord) -> dict[str, str]:
    """The environment job-exec gives the job's processes (gate socket, job id, devices)."""
    return job_env(config, record, node_env(config))


def job_connections(config: NodeConfig, record: JobRecord, n: int) -> list[socket.socket]:
    """``n`` gate connections made by a process in ``record``'s group, handed to this test."""
    back_path = Path(config.state_dir) / f"handover-{record.job}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(back_path))
    listener.listen(1)
    listener.settimeout(30)
    proc = spawn_in_group(
        [PY, "-c", HANDOVER, config.gate_socket, str(back_path), str(n)],
        record.group(),
        env_of(config, record),
    )
    try:
        conn, _ = listener.accept()
        fds: list[int] = []
        with conn:
            while len(fds) < n:
                _, got, _, _ = socket.recv_fds(conn, 16, 64)
                assert got, "the job's process handed over fewer connections"
                fds += got
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
        listener.close()
    out = [socket.socket(fileno=fd) for fd in fds]
    for sock in out:
        sock.settimeout(20)
    return out


def call(sock: socket.socket, line: str) -> str:
    sock.sendall(line.encode() + b"\n")
    return read_line(sock)


def read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = sock.recv(1)
        except ConnectionResetError:  # hung up on while more input was on its way
            return "<closed>"
        if not chunk:
            return "<closed>"
        data += chunk
    return data.decode().rstrip("\n")


def outsider(config: NodeConfig) -> socket.socket:
    """A connection from this test process, which is in no job's group."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(20)
    sock.connect(config.gate_socket)
    return sock


def free_threads(config: NodeConfig, device: str = "0") -> int:
    with outsider(config) as sock:
        status = call(sock, "STATUS")
    match = re.search(rf"\b{device}:free=(\d+)", status)
    assert match, status
    return int(match.group(1))


CLIENT = r"""
import os, random, sys, time
from coshare.node.gate.client import GateClient
log, rounds, declared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(log, os.O_WRONLY | os.O_APPEND)
job = os.environ["COSHARE_JOB_ID"]
with GateClient() as client:
    for _ in range(rounds):
        threads = random.randint(1, declared)
        with client.offload(threads):
            os.write(fd, f"+ {job} {threads}\n".encode())
            time.sleep(random.random() * 0.004)
            os.write(fd, f"- {job} {threads}\n".encode())
"""


def test_concurrent_clients_never_hold_more_than_the_budget(gate_daemon: NodeConfig) -> None:
    declared = {"conc-a": 4, "conc-b": 4, "conc-c": 6}
    records = [
        job_start(gate_daemon, job, devices=["0"], device_threads=threads)
        for job, threads in declared.items()
    ]
    log = Path(gate_daemon.state_dir) / "offloads.log"
    log.write_text("")
    rounds = 25
    clients = [
        spawn_in_group(
            [PY, "-c", CLIENT, str(log), str(rounds), str(declared[r.job])],
            r.group(),
            env_of(gate_daemon, r),
        )
        for r in records
        for _ in range(2)
    ]
    try:
        assert [c.wait(timeout=120) for c in clients] == [0] * len(clients)
    finally:
        for client in clients:
            stop(client)
    # Replay the log (O_APPEND writes land in the order they happened): each interval lies
    # inside its grant, so any overlap beyond the budget would be an oversubscription.
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * rounds * len(clients)
    total, per_job, peak = 0, dict.fromkeys(declared, 0), 0
    for line in lines:
        sign, job, threads = line.split()
        delta = int(threads) if sign == "+" else -int(threads)
        total += delta
        per_job[job] += delta
        peak = max(peak, total)
        assert total <= 8, f"device 0 oversubscribed: {total} threads held"
        assert per_job[job] <= declared[job], f"{job} holds more than it declared"
    assert peak > max(declared.values())  # jobs did share the device
    wait_for(lambda: free_threads(gate_daemon) == 8, what="all threads back")


HOLDER = r"""
import sys, time
from coshare.node.gate.client import GateClient
client = GateClient()
client.acquire(8)
print("held", flush=True)
time.sleep(120)
"""


def test_a_sigkilled_clients_threads_come_back_at_once(gate_daemon: NodeConfig) -> None:
    holder_job = job_start(gate_daemon, "kill-a", devices=["0"], device_threads=8)
    waiter_job = job_start(gate_daemon, "kill-b", devices=["0"], device_threads=2)
    holder = spawn_in_group([PY, "-c", HOLDER], holder_job.group(), env_of(gate_daemon, holder_job))
    try:
        assert holder.stdout is None  # inherits ours; wait through the gate instead
        wait_for(lambda: free_threads(gate_daemon) == 0, what="the holder's grant")
        (waiter,) = job_connections(gate_daemon, waiter_job, 1)
        with waiter:
            assert call(waiter, "TRY 2").startswith("ERR busy")
            waiter.sendall(b"ACQUIRE 0 2\n")  # waits in the queue
            holder.send_signal(signal.SIGKILL)
            assert holder.wait(timeout=10) == -signal.SIGKILL
            assert re.fullmatch(r"OK \d+ 0 2", read_line(waiter))
            assert free_threads(gate_daemon) == 6
        wait_for(lambda: free_threads(gate_daemon) == 8, what="the waiter's threads back")
    finally:
        stop(holder)


def test_a_client_cannot_claim_another_jobs_threads_or_more_than_declared(
    gate_daemon: NodeConfig,
) -> None:
    a = job_start(gate_daemon, "own-a", devices=["0"], device_threads=4)
    b = job_start(gate_daemon, "own-b", devices=["0", "1"], device_threads=2)
    (conn_a,) = job_connections(gate_daemon, a, 1)
    (conn_b,) = job_connections(gate_daemon, b, 1)
    with conn_a, conn_b, outsider(gate_daemon) as stranger:
        assert call(conn_a, "HELLO") == "OK job=own-a devices=0 threads=4"
        assert call(conn_a, "ACQUIRE 0 5").startswith("ERR over_declared")
        assert call(conn_a, "ACQUIRE 1 1").startswith("ERR not_your_device")
        assert call(conn_b, "ACQUIRE 2").startswith("ERR no_device")  # two devices: name one
        grant = call(conn_b, "ACQUIRE 0 2").split()[1]
        assert call(conn_a, f"RELEASE {grant}").startswith("ERR unknown_grant")
        assert free_threads(gate_daemon) == 6  # b still holds its 2
        assert call(stranger, "HELLO").startswith("ERR not_a_job")
        assert call(stranger, "ACQUIRE 0 1").startswith("ERR not_a_job")
        assert call(conn_b, f"RELEASE {grant}") == "OK"
        assert free_threads(gate_daemon) == 8


valid_ish = st.sampled_from(
    [
        b"ACQUIRE 0 3\n",
        b"ACQUIRE 4\n",
        b"TRY 1\n",
        b"RELEASE 1\n",
        b"RELEASE 999999\n",
        b"HELLO\n",
        b"STATUS\n",
        b"ACQUIRE 1 1\n",
        b"ACQUIRE 0 2147483648\n",
        b"\r\n",
    ]
)
chunks = st.lists(st.one_of(st.binary(max_size=300), valid_ish), max_size=6)


def test_hostile_input_gets_errors_and_the_daemon_keeps_serving(gate_daemon: NodeConfig) -> None:
    record = job_start(gate_daemon, "fuzz", devices=["0"], device_threads=4)
    pool = job_connections(gate_daemon, record, 120)

    @settings(max_examples=len(pool) - 10, deadline=None, database=None)
    @given(chunks)
    @example([b"A" * 5000])  # one endless line: too_long, then the gate hangs up
    @example([b"A" * 300, b"\nSTATUS\n" * 50])
    @example([b"\x00\xff" * 200 + b"\n"])
    @example([b"ACQUIRE 0 3\n", b"ACQUIRE 0 3\n"])  # holds 3 of 4: would deadlock
    @example([b"ACQ", b"UIRE 0 1\nRELE", b"ASE 1\n"])  # split across writes
    def fuzz(data: list[bytes]) -> None:
        sock = pool.pop()
        with sock:
            try:
                for chunk in data:
                    sock.sendall(chunk)
                sock.sendall(b"\nSTATUS\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # hung up on a too-long line, as documented
            while True:
                line = read_line(sock)
                if line == "<closed>" or line.startswith("OK 0:free="):
                    break
                assert REPLY.fullmatch(line), line
        # The daemon still answers everyone else.
        with outsider(gate_daemon) as probe:
            assert call(probe, "STATUS").startswith("OK 0:free=")

    try:
        fuzz()
    finally:
        for sock in pool:
            sock.close()
    # Every grant the fuzzing connections got came back when they closed.
    wait_for(lambda: free_threads(gate_daemon) == 8, what="all threads back")
    assert free_threads(gate_daemon, "1") == 4


def test_context_manager_and_offload_command_inside_a_job(gate_daemon: NodeConfig) -> None:
    job_start(gate_daemon, "ctx", devices=["0"], device_threads=3)
    script = (
        "from coshare.node.gate.client import GateClient, offload\n"
        "with offload(2) as grant:\n"
        "    print('grant', grant.device, grant.threads)\n"
        "    print('free', GateClient().status()['0']['free'])\n"
    )
    done = subprocess.run(
        [
            COSHARE,
            "node",
            "job-exec",
            "--job",
            "ctx",
            "--",
            "sh",
            "-c",
            f"{PY} -c \"$0\" && {COSHARE} node offload -- sh -c 'echo offloaded'",
            script,
        ],
        env=node_env(gate_daemon),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["grant 0 2", "free 6", "offloaded"]
    refused = subprocess.run(
        [
            COSHARE,
            "node",
            "job-exec",
            "--job",
            "ctx",
            "--",
            COSHARE,
            "node",
            "offload",
            "--threads",
            "4",
            "--",
            "true",
        ],
        env=node_env(gate_daemon),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "over_declared: 4 threads asked, job ctx declared 3" in refused.stderr


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on this machine")
def test_a_c_program_speaks_the_protocol(gate_daemon: NodeConfig, tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / "common/coshare/node/gate/examples/offload.c"
    binary = tmp_path / "offload"
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Werror", "-o", str(binary), str(source)], check=True, timeout=120
    )
    job_start(gate_daemon, "c-job", devices=["0"], device_threads=5)
    done = subprocess.run(
        [COSHARE, "node", "job-exec", "--job", "c-job", "--", str(binary), "5"],
        env=node_env(gate_daemon),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"granted: OK \d+ 0 5\nreleased\n", done.stdout)
    assert os.path.exists(gate_daemon.gate_socket)


def test_a_too_long_line_gets_its_error_before_the_gate_hangs_up(
    gate_daemon: NodeConfig,
) -> None:
    record = job_start(gate_daemon, "long", devices=["0"], device_threads=4)
    (sock,) = job_connections(gate_daemon, record, 1)
    with sock:
        assert re.fullmatch(r"OK \d+ 0 4", call(sock, "ACQUIRE 4"))
        sock.sendall(b"B" * 300 + b"\n" + b"STATUS\n" * 20)
        assert read_line(sock).startswith("ERR too_long")
        assert read_line(sock) == "<closed>"
        # Its grant came back at once, though the client has not closed yet.
        assert free_threads(gate_daemon) == 8
