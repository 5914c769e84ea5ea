"""Node facts and controls: the membw probe, FREEZE+THAW, and the load sampler.

Four figures, each on the real thing:

- **probe GB/s against cores**: :func:`coshare.node.membw.measure` (numpy, what coshare
  ships) on the first 1, 2, ... cores this process may use, next to a small C kernel doing
  the same reads (one 8-byte word per 64-byte line, one pinned thread per core, its own
  share of the array, first-touched by that thread) built here with ``cc`` where one exists.
  On a shared 2-core machine only the shape means something.
- **probe duration p50/p95**: the whole ``coshare node probe membw`` path
  (:func:`coshare.node.membw.probe`: allocation, warm pass, the measured passes, the files),
  on one core and on all of them; the target is under 1 s.
- **FREEZE+THAW round trip p50/p95**: over the real control socket of a real
  ``coshare node gate`` daemon (root, as an operator), on a job group with a busy process in
  it; a fresh connection per round trip, as ``coshare node freeze``/``thaw`` make.
- **sampler CPU cost per job per round**: the daemon's :class:`coshare.node.sampler.Sampler`
  round (read every job's CPU time from its cgroup, summarize the history, write the facts
  line) with N real job groups, in CPU seconds of this process (``time.process_time``).

The last two need root and cgroups (``--no-cgroups`` leaves them out).

    python bench/node_probe.py [--repeats 20] [--rounds 50] [--jobs 1,16,64] [--no-cgroups]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coshare.config import NodeConfig
from coshare.node.membw import ProbeFiles, array_mib, llc_bytes, measure, probe
from node_daemon import percentile, wait_listening

C_KERNEL = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static size_t share; static double seconds; static pthread_barrier_t go;
static int cores[1024]; static double moved[1024];
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9;
}
static void *stream(void *arg) {
    long i = (long)arg; cpu_set_t set; CPU_ZERO(&set); CPU_SET(cores[i], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    uint64_t *a = malloc(share), sum = 0; size_t words = share / 8;
    for (size_t j = 0; j < words; j++) a[j] = 1;       /* first touch on this core */
    pthread_barrier_wait(&go);
    double end = now() + seconds; long passes = 0;
    do { for (size_t j = 0; j < words; j += 8) sum += a[j]; passes++; } while (now() < end);
    moved[i] = (double)passes * share + (sum == 42 ? 1 : 0);
    return NULL;
}
int main(int argc, char **argv) {   /* kernel MIB SECONDS CORE... -> GB/s */
    int n = argc - 3; pthread_t t[1024];
    share = ((size_t)atol(argv[1]) << 20) / n / 64 * 64; seconds = atof(argv[2]);
    for (int i = 0; i < n; i++) cores[i] = atoi(argv[3 + i]);
    pthread_barrier_init(&go, NULL, n + 1);
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, stream, (void *)i);
    pthread_barrier_wait(&go);
    double began = now(), total = 0;
    for (int i = 0; i < n; i++) { pthread_join(t[i], NULL); total += moved[i]; }
    printf("%.3f\n", total / (now() - began) / 1e9);
    return 0;
}
"""


def core_counts(allowed: list[int]) -> list[int]:
    """1, 2, ... up to 16 cores, then powers of two, then all of them."""
    counts = [n for n in range(1, min(len(allowed), 16) + 1)]
    n = 32
    while n < len(allowed):
        counts.append(n)
        n *= 2
    if counts[-1] != len(allowed):
        counts.append(len(allowed))
    return counts


def build_c_kernel(workdir: Path) -> Path | None:
    """The C kernel, or ``None`` where this machine has no C compiler."""
    cc = shutil.which("cc")
    if cc is None:
        return None
    source = workdir / "kernel.c"
    source.write_text(C_KERNEL)
    binary = workdir / "kernel"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(binary), str(source)], check=True)
    return binary


def bandwidth_by_cores(allowed: list[int], size_mib: int, kernel: Path | None) -> None:
    print(
        f"\nprobe GB/s against cores (array {size_mib} MiB, "
        f"{'numpy and C' if kernel else 'numpy only: no cc here'}):"
    )
    print(f"{'cores':>5} {'numpy GB/s':>11} {'C GB/s':>8}")
    for n in core_counts(allowed):
        cpus = allowed[:n]
        numpy_gbps = measure(cpus, size_mib).gbps
        c_text = "-"
        if kernel is not None:
            done = subprocess.run(
                [str(kernel), str(size_mib), "0.25", *map(str, cpus)],
                capture_output=True,
                text=True,
                check=True,
            )
            c_text = f"{float(done.stdout):.2f}"
        print(f"{n:>5} {numpy_gbps:>11.2f} {c_text:>8}")


def probe_durations(allowed: list[int], size_mib: int, repeats: int, workdir: Path) -> None:
    files = ProbeFiles(workdir / "probe-state")
    probe(files, allowed, allowed, init=True, size_mib=size_mib)
    print(f"\nprobe duration (whole `coshare node probe membw` path, {repeats} runs):")
    print(f"{'cores':>5} {'p50 (s)':>8} {'p95 (s)':>8} {'GB/s p50':>9}")
    for cpus in ([allowed[0]], allowed):
        took, gbps = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            result, _ = probe(files, allowed, cpus, size_mib=size_mib)
            took.append(time.perf_counter() - start)
            gbps.append(result.measurement.gbps)
        took.sort()
        gbps.sort()
        print(
            f"{len(cpus):>5} {percentile(took, 0.5):>8.3f} {percentile(took, 0.95):>8.3f} "
            f"{percentile(gbps, 0.5):>9.2f}"
        )


def control(path: str, line: str) -> str:
    """One request on a fresh connection to the control socket, its reply."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.sendall(line.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(1024)
            if not chunk:
                break
            reply += chunk
    return reply.decode().strip()


def freeze_thaw(config: NodeConfig, env: dict[str, str], repeats: int) -> None:
    from coshare.node.lifecycle import job_end, job_start, spawn_in_group

    coshare = str(Path(sys.executable).parent / "coshare")
    log = (Path(config.state_dir) / "daemon.log").open("ab")  # a pipe nobody reads would fill
    server = subprocess.Popen(
        [coshare, "node", "gate", "--no-watch", "--device", "0=8"], env=env, stderr=log
    )
    log.close()
    record = job_start(config, "bench-freeze")
    busy = spawn_in_group([sys.executable, "-c", "while True: pass"], record.group(), env)
    try:
        wait_listening(config.gate_socket, server)
        took = []
        for _ in range(repeats):
            start = time.perf_counter()
            frozen = control(config.control_socket, "FREEZE job=bench-freeze")
            thawed = control(config.control_socket, "THAW job=bench-freeze")
            took.append(time.perf_counter() - start)
            if not (frozen.endswith("changed=1") and thawed.endswith("changed=1")):
                raise SystemExit(f"unexpected replies: {frozen!r}, {thawed!r}")
        took.sort()
        print(
            f"\nFREEZE+THAW round trip over the control socket ({repeats} runs, a busy "
            f"process in the group, {type(record.group()).__name__}):"
        )
        print(
            f"p50 {percentile(took, 0.5) * 1000:.2f} ms, p95 {percentile(took, 0.95) * 1000:.2f} ms"
        )
    finally:
        busy.kill()
        busy.wait()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        job_end(config, "bench-freeze")


def sampler_cost(config: NodeConfig, jobs: list[int], rounds: int) -> None:
    from coshare.node.lifecycle import job_end, job_start, node_cgroups, node_resctrl, node_store
    from coshare.node.sampler import Sampler

    print(f"\nsampler CPU cost ({rounds} rounds; CPU time of this process):")
    print(f"{'jobs':>5} {'per round (ms)':>15} {'per job per round (us)':>23}")
    for count in jobs:
        names = [f"bench-load-{i}" for i in range(count)]
        for name in names:
            job_start(config, name)
        try:
            sampler = Sampler(
                config, node_store(config), node_cgroups(config), node_resctrl(config)
            )
            sampler.round()  # the first round reads the store cold; leave it out
            start = time.process_time()
            for _ in range(rounds):
                facts = sampler.round()
            used = (time.process_time() - start) / rounds
            assert len(facts.loads) == count, facts
            print(f"{count:>5} {used * 1000:>15.3f} {used / count * 1e6:>23.1f}")
        finally:
            for name in names:
                job_end(config, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--jobs", default="1,16,64", help="job groups for the sampler")
    parser.add_argument("--array-mib", type=int, default=0, help="0: 4x the LLC, 64..1024")
    parser.add_argument("--no-cgroups", action="store_true")
    args = parser.parse_args()

    allowed = sorted(os.sched_getaffinity(0))
    size_mib = array_mib(args.array_mib, llc_bytes())
    workdir = Path(tempfile.mkdtemp(prefix="cs-probe-"))
    workdir.chmod(0o755)
    print(
        f"node_probe: {len(allowed)} cores allowed, LLC {llc_bytes()} bytes, array {size_mib} MiB"
    )
    parent = f"coshare-bench-{os.getpid()}"
    try:
        bandwidth_by_cores(allowed, size_mib, build_c_kernel(workdir))
        probe_durations(allowed, size_mib, args.repeats, workdir)
        if args.no_cgroups:
            return
        config = NodeConfig(
            cgroup_parent=parent,
            state_dir=str(workdir),
            gate_socket=str(workdir / "gate.sock"),
            control_socket=str(workdir / "control.sock"),
            probe_interval_s=0,
        )
        (workdir / "none.yaml").write_text("")
        env = dict(
            os.environ,
            COSHARE_CONFIG=str(workdir / "none.yaml"),
            COSHARE_NODE_CGROUP_PARENT=parent,
            COSHARE_NODE_STATE_DIR=str(workdir),
            COSHARE_NODE_GATE_SOCKET=config.gate_socket,
            COSHARE_NODE_CONTROL_SOCKET=config.control_socket,
            COSHARE_NODE_PROBE_INTERVAL_S="0",
        )
        freeze_thaw(config, env, args.repeats * 10)
        sampler_cost(config, [int(n) for n in args.jobs.split(",")], args.rounds)
    finally:
        hierarchies = ("freezer", "cpuset", "memory", "cpuacct", "cpu,cpuacct", "unified", "")
        for top in (Path("/sys/fs/cgroup") / c / parent for c in hierarchies):
            if top.is_dir():
                top.rmdir()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
