"""Node daemon under a socket flood: how long a well-behaved client waits for START, JOIN and
ACQUIRE while one hostile uid keeps 1,000 connections open.

The real daemon (``coshare node gate``, real cgroups, root) serves both sockets. A hostile
process, as uid 65534, opens ``--hostile`` connections, half to the gate and half to the
control socket; half of each send half a request line, the rest nothing, and whenever the
daemon closes one (refused for the per-uid limit, or timed out) it opens it again at once, so
the daemon faces the whole flood all the time. Meanwhile a well-behaved launcher, as uid 1
and a child of a trusted "scheduler daemon" (a copy of /bin/sh, as the node tests use), runs
the job life the HTCondor wrapper runs, each request on a fresh connection as coshare-launch
does: START a job (one core, device 0, one declared thread); a child JOINs it, then, inside
the job's group, ACQUIREs its thread from the gate and RELEASEs it; END. Each wait is timed
from connect to reply (``perf_counter``), first without the flood, then with it.

Target: under 100 ms while 1,000 hostile connections are open.

    flock /tmp/coshare-daemons.lock .venv/bin/python bench/node_flood.py [--hostile 1000]
        [--rounds 200] [--max-connections-per-uid N] [--line-timeout-s S] [--idle-timeout-s S]

The daemon's limits are its defaults unless given. The daemon runs with 1,024 open files (the
soft limit systemd gives a service), which 1,000 connections used to exhaust. The daemon is
started as ``python -c 'from coshare.cli.main import main; main()'``, so ``PYTHONPATH`` can point
it at another checkout's ``common/`` to measure that one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node_daemon import percentile, wait_listening

HOSTILE_UID, CLIENT_UID = 65534, 1
PYTHON = "/usr/bin/python3"  # the clients' interpreter: standard library only, as on a node
STARTER = "coshare-bench-starter"

#: Keeps N connections open as hard as it can (half gate, half control; half with half a
#: line): a slot the daemon closes, or whose connect finds the backlog full, is tried again at
#: once, in a busy loop. Prints "open" once every slot was connected once, then its counts
#: when standard input ends.
HOSTILE = r"""
import json, os, resource, selectors, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
gate, control, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sel = selectors.DefaultSelector()
stats = {"refused": 0, "timeout": 0, "closed": 0, "backlog_full": 0}
ever = set()
def try_open(slot):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    try:
        s.connect(gate if slot % 2 == 0 else control)
    except BlockingIOError:
        s.close()
        stats["backlog_full"] += 1
        return False
    if slot % 4 < 2:
        try:
            s.send(b"STAT")
        except OSError:
            pass
    sel.register(s, selectors.EVENT_READ, slot)
    ever.add(slot)
    return True
pending = list(range(n))
os.set_blocking(0, False)
sel.register(sys.stdin, selectors.EVENT_READ, None)
told = False
deadline = time.monotonic() + 10  # a daemon that stops accepting: say "open" anyway
while True:
    pending = [slot for slot in pending if not try_open(slot)]
    if not told and (len(ever) == n or time.monotonic() > deadline):
        print("open", flush=True)
        told = True
    for key, _ in sel.select(0 if pending else None):
        if key.data is None:
            if not sys.stdin.read():
                print(json.dumps({**stats, "open": len(sel.get_map()) - 1}), flush=True)
                sys.exit(0)
            continue
        s = key.fileobj
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if data.startswith(b"ERR too_many"):
            stats["refused"] += 1
        elif data.startswith(b"ERR timeout"):
            stats["timeout"] += 1
        elif not data:
            stats["closed"] += 1
        if data and not data.endswith(b"\n"):
            continue
        sel.unregister(s)
        s.close()
        pending.append(key.data)
"""

#: The well-behaved launcher: START, a child JOINs and ACQUIREs, END; prints the waits (s).
CLIENT = r"""
import json, os, socket, struct, sys, time
control, gate, rounds, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
clock = time.perf_counter
def ask(path, line):
    t0 = clock()
    s = socket.socket(socket.AF_UNIX)  # as coshare-launch connects: waits for backlog room
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 30, 0))
    s.connect(path)
    s.settimeout(30)
    s.sendall(line.encode() + b"\n")
    reply = s.makefile("rb").readline().decode().strip()
    waited = clock() - t0
    s.close()
    return reply, waited
waits = {"START": [], "JOIN": [], "ACQUIRE": []}
for i in range(rounds):
    job = f"{tag}-{i}"
    reply, waited = ask(control, f"START job={job} cores=1 devices=0 device_threads=1")
    assert reply.startswith("OK"), reply
    waits["START"].append(waited)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        joined, join_s = ask(control, f"JOIN job={job}")
        granted, acquire_s = ask(gate, "ACQUIRE 1") if joined.startswith("OK") else (joined, 0)
        os.write(write_end, json.dumps([joined, join_s, granted, acquire_s]).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        joined, join_s, granted, acquire_s = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert joined.startswith("OK") and granted.startswith("OK"), (joined, granted)
    waits["JOIN"].append(join_s)
    waits["ACQUIRE"].append(acquire_s)
    reply, _ = ask(control, f"END job={job}")
    assert reply.startswith("OK"), reply
print(json.dumps(waits))
"""


def as_uid(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def run_client(workdir: Path, rounds: int, tag: str) -> dict[str, list[float]]:
    starter = workdir / STARTER
    argv = [
        str(starter),
        "-c",
        '"$@"; exit $?',
        "sh",
        *as_uid(CLIENT_UID),
        PYTHON,
        "-I",
        "-c",
        CLIENT,
        str(workdir / "control.sock"),
        str(workdir / "gate.sock"),
        str(rounds),
        tag,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"the well-behaved client failed:\n{done.stderr}")
    waits: dict[str, list[float]] = json.loads(done.stdout)
    return waits


def report(label: str, waits: dict[str, list[float]]) -> None:
    for op, samples in waits.items():
        s = sorted(samples)
        print(
            f"{label:<26} {op:<8} {percentile(s, 0.5) * 1000:>8.2f} "
            f"{percentile(s, 0.95) * 1000:>8.2f} "
            f"{s[-1] * 1000:>8.2f} {len(s):>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", type=int, default=1000, help="hostile connections")
    parser.add_argument("--rounds", type=int, default=200, help="job lives of the client")
    parser.add_argument("--max-connections-per-uid", type=int, default=None)
    parser.add_argument("--line-timeout-s", type=float, default=None)
    parser.add_argument("--idle-timeout-s", type=float, default=None)
    args = parser.parse_args()
    # timeout(1) and kill send SIGTERM: clean up (daemon, hostile, cgroups) as for Ctrl-C.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if os.geteuid() != 0:
        raise SystemExit("node_flood needs root (cgroups, other uids)")

    workdir = Path(tempfile.mkdtemp(prefix="cs-flood-"))  # short: unix socket paths are short
    workdir.chmod(0o755)
    shutil.copy(os.path.realpath("/bin/sh"), workdir / STARTER)
    (workdir / "none.yaml").write_text("")
    parent = f"coshare-bench-{os.getpid()}"
    env = dict(
        os.environ,
        COSHARE_CONFIG=str(workdir / "none.yaml"),
        COSHARE_NODE_CGROUP_PARENT=parent,
        COSHARE_NODE_STATE_DIR=str(workdir),
        COSHARE_NODE_GATE_SOCKET=str(workdir / "gate.sock"),
        COSHARE_NODE_CONTROL_SOCKET=str(workdir / "control.sock"),
        COSHARE_NODE_TRUSTED_LAUNCHERS=json.dumps([STARTER]),
        COSHARE_NODE_CPU_OVERCOMMIT="64",
    )
    for option, variable in (
        ("max_connections_per_uid", "MAX_CONNECTIONS_PER_UID"),
        ("line_timeout_s", "LINE_TIMEOUT_S"),
        ("idle_timeout_s", "IDLE_TIMEOUT_S"),
    ):
        value = getattr(args, option)
        if value is not None:  # only when given: an older daemon has no such settings
            env[f"COSHARE_NODE_{variable}"] = str(value)
    daemon_log = (workdir / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from coshare.cli.main import main; main()",
            "node",
            "gate",
            "--device",
            "0=100000",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=daemon_log,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)),
    )
    hostile = None
    try:
        wait_listening(str(workdir / "control.sock"), daemon)
        print(
            f"node_flood: {args.rounds} job lives (START, JOIN, ACQUIRE, END) of uid "
            f"{CLIENT_UID}; {os.cpu_count()} CPUs; daemon with 1024 open files"
        )
        print(f"{'':<26} {'request':<8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'n':>6}")
        report("no flood", run_client(workdir, args.rounds, "quiet"))
        hostile = subprocess.Popen(
            [
                *as_uid(HOSTILE_UID),
                PYTHON,
                "-I",
                "-c",
                HOSTILE,
                str(workdir / "gate.sock"),
                str(workdir / "control.sock"),
                str(args.hostile),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert hostile.stdout is not None and hostile.stdin is not None
        if hostile.stdout.readline().strip() != "open":
            raise SystemExit("the hostile client did not open its connections")
        started = time.monotonic()
        report(f"{args.hostile} hostile conns", run_client(workdir, args.rounds, "flood"))
        hostile.stdin.close()
        stats = json.loads(hostile.stdout.readline())
        print(
            f"hostile uid {HOSTILE_UID} over {time.monotonic() - started:.0f} s: "
            f"{stats['refused']} connections refused (too_many), {stats['timeout']} hung "
            f"up for half a line, {stats['closed']} closed idle, {stats['backlog_full']} "
            f"connects found the backlog full; {stats['open']} open at the end"
        )
    finally:
        if hostile is not None and hostile.poll() is None:
            hostile.send_signal(signal.SIGKILL)
            hostile.wait(timeout=30)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=30)
        daemon_log.close()
        subprocess.run(
            [sys.executable, "-c", "from coshare.cli.main import main; main()", "node", "cleanup"],
            env=env,
            stdout=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
