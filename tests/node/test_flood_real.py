"""A flood of the node daemon's sockets from one uid leaves other uids served:
the real daemon, real cgroups, real processes under two real uids (root).

uid 65534 opens 1,000 connections to each socket, half of them sending half a line, half
nothing, and keeps them; meanwhile uid 1 starts a job through the control socket (as a
launcher), asks it for an unknown job, and takes device threads from the gate from inside a
job's group. The daemon runs with 1,024 descriptors (systemd's soft default), which the flood
alone used to exhaust.
"""

from __future__ import annotations

import json
import resource
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.lifecycle import job_env, job_start, spawn_in_group

from tests.node.helpers import make_starter, node_env, running_daemon, stop, wait_for

pytestmark = pytest.mark.cgroups
PYTHON = "/usr/bin/python3"
HOSTILE_UID, OTHER_UID = 65534, 1
PER_UID = 40
FLOOD = 1000


def as_uid(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


#: Opens N connections to each socket (even ones send half a line), says "open", and on each
#: line of standard input prints what the connections got so far, per socket (JSON).
HOSTILE = r"""
import json, resource, socket, struct, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
paths, n = sys.argv[1:3], int(sys.argv[3])
conns = {p: [] for p in paths}
stuck = set()  # a socket whose backlog stayed full for 2 s: not tried again
for i in range(n):
    for path in paths:
        s = None
        if path not in stuck:
            s = socket.socket(socket.AF_UNIX)  # waits (2 s at most) for room in the backlog
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 2, 0))
            try:
                s.connect(path)
            except OSError:
                s.close()  # not accepted at all
                s = None
                stuck.add(path)
        if s is not None and i % 2 == 0:
            try:
                s.sendall(b"STAT")
            except OSError:
                pass  # refused and closed already
        conns[path].append(s)
print("open", flush=True)
state = {p: [b""] * n for p in paths}
for _ in sys.stdin:
    report = {}
    for path in paths:
        counts = {}
        for i, s in enumerate(conns[path]):
            if s is None:
                key = "unaccepted"
            else:
                s.setblocking(False)
                try:
                    while chunk := s.recv(4096):
                        state[path][i] += chunk
                    ended = True
                except BlockingIOError:
                    ended = False
                except ConnectionResetError:
                    ended = True
                got = state[path][i]
                key = got.split(b" ")[1].decode() if got.startswith(b"ERR ") else (
                    "closed" if ended else "open")
                if key != "open" and i % 2 == 0:
                    key += "/partial"
            counts[key] = counts.get(key, 0) + 1
        report[path] = counts
    print(json.dumps(report), flush=True)
"""

ASK = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
print(s.makefile().readline().strip(), flush=True)
"""


def ask(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def small_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_a_flood_from_one_uid_leaves_other_uids_served(node_config: NodeConfig) -> None:
    config = replace(
        node_config, max_connections_per_uid=PER_UID, line_timeout_s=6.0, idle_timeout_s=8.0
    )
    starter = str(make_starter(Path(config.state_dir)))
    with running_daemon(config, preexec_fn=small_descriptor_limit):
        hostile = subprocess.Popen(
            [
                *as_uid(HOSTILE_UID),
                PYTHON,
                "-I",
                "-c",
                HOSTILE,
                config.gate_socket,
                config.control_socket,
                str(FLOOD),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert hostile.stdin is not None and hostile.stdout is not None
            assert hostile.stdout.readline().strip() == "open"

            def report() -> dict[str, dict[str, int]]:
                assert hostile.stdin is not None and hostile.stdout is not None
                hostile.stdin.write("\n")
                hostile.stdin.flush()
                got: dict[str, dict[str, int]] = json.loads(hostile.stdout.readline())
                return got

            # The flooding uid gets its share of each socket, no more: the rest is refused.
            def shares() -> list[tuple[int, int]]:
                got = report()
                return [
                    (
                        counts.get("open", 0),
                        counts.get("too_many", 0)
                        + counts.get("too_many/partial", 0)
                        + counts.get("unaccepted", 0),
                    )
                    for counts in got.values()
                ]

            wait_for(
                lambda: shares() == [(PER_UID, FLOOD - PER_UID)] * 2,
                timeout_s=30,
                what="the flood's connections beyond the limit to be refused",
            )
            assert all(c.get("unaccepted", 0) == 0 for c in report().values())  # none waited 2 s

            # uid 1 is served meanwhile: a launcher's START and an unknown job's END on the
            # control socket, and an ACQUIRE from inside a job's group on the gate.
            start = ask(
                [
                    starter,
                    "-c",
                    '"$@"; exit $?',
                    "sh",
                    *as_uid(OTHER_UID),
                    PYTHON,
                    "-I",
                    "-c",
                    ASK,
                    config.control_socket,
                    "START job=served cores=1",
                ]
            )
            assert start.startswith("OK job=served cpus="), start
            assert ask(
                [
                    *as_uid(OTHER_UID),
                    PYTHON,
                    "-I",
                    "-c",
                    ASK,
                    config.control_socket,
                    "END job=nothing",
                ]
            ).startswith("ERR unknown_job")
            record = job_start(
                config, "served-gate", devices=["0"], device_threads=2, uid=OTHER_UID
            )
            out = Path(config.state_dir) / "acquired"
            proc = spawn_in_group(
                [
                    "sh",
                    "-c",
                    '"$@" > "$0"',
                    str(out),
                    *as_uid(OTHER_UID),
                    PYTHON,
                    "-I",
                    "-c",
                    ASK,
                    config.gate_socket,
                    "ACQUIRE 2",
                ],
                record.group(),
                job_env(config, record, node_env(config)),
            )
            assert proc.wait(timeout=60) == 0
            assert out.read_text().startswith("OK "), out.read_text()
            during = report()  # the flood was still there while uid 1 was served
            assert all(counts.get("open", 0) > 0 for counts in during.values()), during

            # Half-sent lines are answered "timeout" and hung up; silent ones closed, silently.
            wait_for(
                lambda: all("open" not in counts for counts in report().values()),
                timeout_s=30,
                what="the flood's connections to time out",
            )
            last = report()
            for path in (config.gate_socket, config.control_socket):
                assert last[path]["timeout/partial"] == PER_UID // 2, last
                assert last[path]["closed"] == PER_UID // 2, last
        finally:
            stop(hostile)
            for pipe in (hostile.stdin, hostile.stdout):
                if pipe is not None:
                    pipe.close()
