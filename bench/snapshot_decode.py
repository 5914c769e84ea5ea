"""Decoding and validating a snapshot of 100,000 pending jobs on 10,000 devices: the JSON text
into the model, every field checked (``coshare.schema.decode_json`` with ``parse_snapshot``,
what ``coshare plan`` does with its input).

The snapshot is the idle Xeon Phi cluster of ``plan_scale.py`` and ``plan_e2e.py``; it is
built and written first (not timed), then read ``--repeat`` times; the best CPU seconds of the
process and the best wall seconds of one read are printed (target: 0.3 s).

    python bench/snapshot_decode.py [--jobs 100000] [--devices 10000] [--repeat 5]
        [--snapshot FILE]   read FILE (written first when it does not exist)

Before and after a change, the whole process (imports and the file read included), e.g. this
tree against the main checkout:

    farm-bench -n 5 -- .venv/bin/python bench/snapshot_decode.py --repeat 1 --snapshot S.json \\
        --vs '/work/main/.venv/bin/python /work/main/bench/snapshot_decode.py --repeat 1
              --snapshot S.json'
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from coshare.model import Snapshot
from coshare.schema import decode_json, parse_snapshot, snapshot_to_dict
from coshare.sim.applications import phi_cluster, table1_jobs


def write_snapshot(path: Path, jobs: int, devices: int) -> None:
    snapshot = Snapshot(phi_cluster(devices, seed=1), (), table1_jobs(jobs, seed=2))
    path.write_text(json.dumps(snapshot_to_dict(snapshot)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--snapshot", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = args.snapshot or Path(folder) / "snapshot.json"
        if not path.exists():
            write_snapshot(path, args.jobs, args.devices)
        text = path.read_text()
        cpu: list[float] = []
        wall: list[float] = []
        for _ in range(args.repeat):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            snapshot = decode_json(text, str(path), parse_snapshot)
            cpu.append(time.process_time() - cpu0)
            wall.append(time.perf_counter() - wall0)
    devices = sum(len(n.devices) for n in snapshot.nodes)
    print(
        f"decode + validate: {len(snapshot.pending):,} pending jobs on {devices:,} devices "
        f"({len(text) / 2**20:.1f} MiB of JSON), best of {args.repeat}: "
        f"CPU {min(cpu):.3f} s, wall {min(wall):.3f} s (target 0.3 s)"
    )


if __name__ == "__main__":
    main()
