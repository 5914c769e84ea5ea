"""Events per second of ``coshare simulate --workload trace:`` on the bundled HPC2N excerpt
and on a generated log of Alea's extended SWF (a MetaCentrum 2013 shape: 68 nodes of 80 and
12 cores, epoch submit times, memory in bytes for the whole job, node lists after field 18),
each with ``exclusive`` and ``knapsack``.

    python bench/replay_speed.py [--jobs 17900]

Prints each run's events per second and the whole command's wall seconds; the Alea log is
written to a temporary folder (no MetaCentrum data is shipped or fetched).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HPC2N = ROOT.parent / "shared" / "data" / "hpc2n-swf-excerpt" / "hpc2n.swf"


def alea_log(folder: Path, jobs: int) -> Path:
    lines = []
    for k in range(jobs):
        procs = (1, 2, 4, 8, 12)[k % 5]
        memory_bytes = (1 + k % 7) * (1 << 30)
        run = 300 + (37 * k) % 7200
        lines.append(
            f"{k + 1} {1356994800 + 90 * k} -1 {run} {procs} -1 -1 {procs} "
            f"{run * 2} {memory_bytes} 1 {1 + k % 40} 1 -1 1 -1 -1 -1 "
            "zewura1 q_2h:infiniband"
        )
    log = folder / "metacentrum.swf"
    log.write_text("\n".join(lines) + "\n")
    (folder / "metacentrum.swf.machines").write_text(
        "0 zewura 20 80 1 536870912\n1 minos 48 12 1 25165824\n"
    )
    return log


def replay(log: Path) -> None:
    env = {**os.environ, "COSHARE_CONFIG": os.devnull}
    start = time.perf_counter()
    coshare = str(Path(sys.executable).parent / "coshare")
    argv = [
        coshare,
        "simulate",
        "--workload",
        f"trace:{log}",
        "--policies",
        "exclusive,knapsack",
        "--output",
        "json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    for line in done.stderr.splitlines():
        found = re.search(
            r"replay of (\S+) (\w+) seed \d+: (\d+) events in ([\d.]+) s "
            r"\(([\d,]+) events/s\)",
            line,
        )
        if found:
            name, policy, events, seconds, rate = found.groups()
            print(
                f"{name:18s} {policy:10s} {int(events):>9,} events {float(seconds):7.1f} s "
                f"{rate:>10s} events/s"
            )
    print(f"{log.name:18s} whole command (both policies): {wall:.1f} s wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=17_900)
    args = parser.parse_args()
    if HPC2N.exists():
        replay(HPC2N)
    with tempfile.TemporaryDirectory(prefix="coshare-replay-bench-") as tmp:
        replay(alea_log(Path(tmp), args.jobs))


if __name__ == "__main__":
    main()
