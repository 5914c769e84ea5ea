"""Records per second of the SWF reader on a log whose job numbers count up, and on the same
log counting down (a log sorted by submit time whose archive numbered jobs backwards).

Both logs are generated here (120,000 records by default, job sizes and times varied as in the
HPC2N log: 1-64 processors, runs of seconds to hours), written to a temporary folder, and
read whole with the reader ``coshare simulate --workload trace:`` uses.

    python bench/swf_parse.py [--records 120000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from coshare.sim.trace_files import stream_lines
from coshare.sim.traces import SwfTally, iter_swf


def write_log(path: Path, records: int, down: bool, seed: int = 0) -> None:
    rng = random.Random(seed)
    submit = 0
    lines = ["; MaxNodes: 120", "; MaxProcs: 240"]
    for k in range(records):
        submit += rng.randint(0, 120)
        ident = records - k if down else k + 1
        procs = rng.choice((1, 1, 2, 4, 8, 16, 32, 64))
        run = rng.randint(1, 36000)
        memory_kb = rng.choice((-1, 262144, 524288, 1048576))
        lines.append(
            f"{ident} {submit} 0 {run} {procs} -1 -1 {procs} {run * 2} {memory_kb} "
            "1 1 1 1 1 1 -1 -1"
        )
    path.write_text("\n".join(lines) + "\n")


def read_seconds(path: Path) -> float:
    start = time.perf_counter()
    tally = SwfTally()
    for _ in iter_swf(stream_lines(path), str(path), tally):
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coshare-swf-bench-") as tmp:
        for label, down in (("counting up", False), ("counting down", True)):
            path = Path(tmp) / f"{label.replace(' ', '-')}.swf"
            write_log(path, args.records, down)
            best = min(read_seconds(path) for _ in range(args.repeat))
            print(
                f"{label:14s} {args.records:,} records: {best:.2f} s "
                f"({args.records / best:,.0f} records/s, best of {args.repeat})"
            )


if __name__ == "__main__":
    main()
