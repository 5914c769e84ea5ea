"""Offload gate latency: acquire+release round trips with 32 concurrent clients.

The real daemon (``coshare node gate``) serves; each client is a separate process in a real
job cgroup (so the gate identifies it through SO_PEERCRED and /proc, as in production), and
times ``ACQUIRE`` + ``RELEASE`` (two requests, two replies) with ``perf_counter_ns``. The
device budget is large enough that no request waits for threads: this measures the gate,
not contention. Two loads:

- closed loop: every client sends its next request as soon as the last one is answered, so
  32 requests are always in flight (latency here is mostly queueing: by Little's law
  p50 ~ clients / throughput);
- paced: every client sleeps ``--pace-ms`` between round trips, like jobs that offload
  work between requests; this is the latency an offload sees.

Target: p50 < 200 us, p99 < 1 ms. Needs root (cgroups); ``--no-cgroups`` runs the
same server with every client treated as one job, for machines without them.

``--floor`` runs the same clients against the floor of any gate: a server on the same event
loop and socket that answers each request with a fixed reply, deciding nothing (what the
transport and the loop cost). ``--json`` prints one JSON object per load instead of the table.

    python bench/gate_latency.py [--clients 32] [--ops 2000] [--pace-ms 2] [--client python|c]
                                 [--no-cgroups | --floor] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coshare.config import NodeConfig
from node_daemon import percentile, wait_listening

CLIENT = r"""
import json, socket, sys, time
path, ops, pace_s, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
recv = sock.recv
send = sock.sendall
def call(line):
    send(line)
    data = recv(256)
    while not data.endswith(b"\n"):
        data += recv(256)
    return data
assert call(b"HELLO\n").startswith(b"OK"), "client is not in a job"
sys.stdin.read(1)  # start together
clock = time.perf_counter_ns
samples = []
for i in range(ops + 200):
    t0 = clock()
    grant = call(b"ACQUIRE 0 1\n").split()[1]
    call(b"RELEASE " + grant + b"\n")
    if i >= 200:  # warm-up excluded
        samples.append(clock() - t0)
    if pace_s:
        time.sleep(pace_s)
with open(out, "w") as f:
    json.dump(samples, f)
"""

C_CLIENT = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
static int fd;
static char buf[256];
static void call(const char *req) {
    size_t got = 0;
    if (write(fd, req, strlen(req)) < 0) exit(2);
    do { ssize_t n = read(fd, buf + got, sizeof buf - 1 - got); if (n <= 0) exit(3); got += n; }
    while (buf[got - 1] != '\n');
    buf[got] = 0;
    if (strncmp(buf, "OK", 2)) exit(4);
}
static long long now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
int main(int argc, char **argv) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int ops = atoi(argv[2]); double pace_s = atof(argv[3]); char go, req[64];
    long long *s = malloc(sizeof *s * ops);
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) return 1;
    call("HELLO\n");
    if (read(0, &go, 1) < 0) return 5;
    for (int i = 0; i < ops + 200; i++) {
        long long t0 = now();
        call("ACQUIRE 0 1\n");
        snprintf(req, sizeof req, "RELEASE %ld\n", strtol(buf + 3, NULL, 10));
        call(req);
        if (i >= 200) s[i - 200] = now() - t0;
        if (pace_s > 0) usleep((useconds_t)(pace_s * 1e6));
    }
    FILE *out = fopen(argv[4], "w");
    fputc('[', out);
    for (int i = 0; i < ops; i++) fprintf(out, i ? ",%lld" : "%lld", s[i]);
    fputs("]\n", out);
    return fclose(out);
}
"""

SERVER_NO_CGROUPS = r"""
import asyncio, signal, sys
from coshare.config import NodeConfig
from coshare.node.daemon import serve
from coshare.node.gate.state import Client
path, clients = sys.argv[1], int(sys.argv[2])
config = NodeConfig(gate_socket=path, state_dir=sys.argv[3], cgroup_root=sys.argv[3])
async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await serve(config, {"0": clients}, stop, watch=False, control=False,
                identify=lambda pid, uid: Client("bench", ("0",), clients))
asyncio.run(main())
"""

#: The floor: an asyncio protocol on a Unix socket (as the gate's connections are) that
#: answers each line (HELLO, ACQUIRE, RELEASE) with a fixed reply and decides nothing.
SERVER_FLOOR = r"""
import asyncio, signal, sys
path = sys.argv[1]
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        self.transport.write(b"".join(b"OK 1\n" if l.startswith(b"ACQUIRE") else b"OK\n"
                                      for l in lines))
async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await loop.create_unix_server(Answer, path)
    async with server:
        await stop.wait()
asyncio.run(main())
"""


def run_load(
    config: NodeConfig, args: argparse.Namespace, pace_ms: float, spawn: object, workdir: Path
) -> tuple[list[int], float]:
    """Start the clients, release them together, return all samples and the elapsed time."""
    assert callable(spawn)
    outs = [workdir / f"client-{pace_ms}-{i}.json" for i in range(args.clients)]
    client = [str(args.c_binary)] if args.c_binary else [sys.executable, "-c", CLIENT]
    procs = [
        spawn(i, [*client, config.gate_socket, str(args.ops), str(pace_ms / 1000.0), str(out)])
        for i, out in enumerate(outs)
    ]
    time.sleep(1.0)  # let every client connect and say HELLO
    start = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"g")
        proc.stdin.close()
    codes = [proc.wait() for proc in procs]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"clients failed: {codes}")
    samples = [s for out in outs for s in json.loads(out.read_text())]
    return sorted(samples), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--ops", type=int, default=2000, help="round trips per client")
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--no-cgroups", action="store_true")
    parser.add_argument("--floor", action="store_true", help="a server that decides nothing")
    parser.add_argument("--json", action="store_true", help="one JSON object per load")
    parser.add_argument(
        "--client",
        choices=["python", "c"],
        default="python",
        help="client processes in Python (GateClient-like) or C (cc)",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="cs-bench-"))
    parent = f"coshare-bench-{os.getpid()}"
    config = NodeConfig(
        cgroup_parent=parent, state_dir=str(workdir), gate_socket=str(workdir / "gate.sock")
    )
    env = dict(
        os.environ,
        COSHARE_CONFIG=str(workdir / "none.yaml"),
        COSHARE_NODE_CGROUP_PARENT=parent,
        COSHARE_NODE_STATE_DIR=str(workdir),
        COSHARE_NODE_GATE_SOCKET=config.gate_socket,
        COSHARE_NODE_CONTROL_SOCKET=str(workdir / "control.sock"),
    )
    (workdir / "none.yaml").write_text("")
    args.c_binary = None
    if args.client == "c":
        source = workdir / "client.c"
        source.write_text(C_CLIENT)
        args.c_binary = workdir / "client"
        subprocess.run(["cc", "-O2", "-o", str(args.c_binary), str(source)], check=True)
    records = []
    if args.floor:
        server = subprocess.Popen([sys.executable, "-c", SERVER_FLOOR, config.gate_socket])
    elif args.no_cgroups:
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SERVER_NO_CGROUPS,
                config.gate_socket,
                str(args.clients),
                str(workdir),
            ]
        )
    else:
        from coshare.node.lifecycle import job_start

        jobs = 4
        per_job = -(-args.clients // jobs)
        records = [
            job_start(config, f"bench-{j}", devices=["0"], device_threads=per_job)
            for j in range(jobs)
        ]
        coshare = str(Path(sys.executable).parent / "coshare")
        server = subprocess.Popen(
            [coshare, "node", "gate", "--no-watch", "--device", f"0={per_job * jobs}"], env=env
        )

    def spawn(i: int, argv: list[str]) -> subprocess.Popen[bytes]:
        if not records:
            return subprocess.Popen(argv, stdin=subprocess.PIPE)
        from coshare.node.lifecycle import spawn_in_group

        group = records[i % len(records)].group()
        fds = [os.open(p, os.O_WRONLY) for p in group.procs_files()]
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                preexec_fn=lambda: [os.write(fd, str(os.getpid()).encode()) for fd in fds],
            )
        finally:
            for fd in fds:
                os.close(fd)
        del spawn_in_group

    try:
        wait_listening(config.gate_socket, server)
        say = (lambda *_a, **_k: None) if args.json else print
        say(
            f"gate_latency: {args.clients} concurrent {args.client} clients (processes"
            f"{', in 4 job cgroups' if records else ', no cgroups'}), {args.ops} "
            f"ACQUIRE+RELEASE round trips each, {os.cpu_count()} CPUs"
        )
        say(f"{'load':<22} {'p50 (us)':>9} {'p99 (us)':>9} {'ops/s':>9}")
        for label, pace in (("closed loop", 0.0), (f"paced {args.pace_ms:g} ms", args.pace_ms)):
            samples, elapsed = run_load(config, args, pace, spawn, workdir)
            ops = len(samples) / elapsed
            if args.json:
                print(
                    json.dumps(
                        {
                            "load": label,
                            "clients": args.clients,
                            "client": args.client,
                            "p50_us": round(percentile(samples, 0.5) / 1000, 1),
                            "p99_us": round(percentile(samples, 0.99) / 1000, 1),
                            "round_trips_per_s": round(ops),
                        }
                    ),
                    flush=True,
                )
            say(
                f"{label:<22} {percentile(samples, 0.5) / 1000:>9.0f} "
                f"{percentile(samples, 0.99) / 1000:>9.0f} {ops:>9.0f}"
            )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        for record in records:
            record.group().remove()
        if records:
            for c in ("freezer", "cpuset", "memory"):
                top = Path("/sys/fs/cgroup") / c / parent
                if top.is_dir():
                    top.rmdir()
            v2 = Path("/sys/fs/cgroup") / parent
            if v2.is_dir():
                v2.rmdir()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
