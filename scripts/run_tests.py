#!/usr/bin/env python3
"""The whole test suite as two pytest sessions side by side (``make test``).

One session runs the Slurm cluster's tests, the PostgreSQL ones, the node tests (real
cgroups) and the policies' property tests; the other runs everything else: the HTCondor
pool's tests, the other unit tests, the contract tests, the wheel's. The cluster and the
pool have their own ports, directories and cgroup parents, and each session runs its own
tests one after another as a plain pytest run does, so the suite takes about as long as
the longer session instead of both together.

Each session's output is written to a file while it runs and printed whole when it ends
(the first to end first); the exit status is 0 only when both passed. Arguments are passed
to both sessions (``scripts/run_tests.py -x``).

    scripts/run_tests.py [PYTEST ARGS...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The first session's tests; the policies' property tests (seven minutes of one core) go
#: with them so that the two sessions take about as long.
FIRST = [
    "tests/integration/slurm",
    "tests/integration/postgres",
    "tests/node",
    "tests/unit/test_properties.py",
]
SESSIONS = {
    "Slurm, PostgreSQL, node and policy property tests": FIRST,
    "HTCondor, unit, contract and the other tests": [
        *(f"--ignore={path}" for path in FIRST),
        "tests",
    ],
}


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *args]
    with tempfile.TemporaryDirectory(prefix="coshare-tests-") as tmp:
        running = {}
        for i, (name, paths) in enumerate(SESSIONS.items()):
            log = Path(tmp) / f"session-{i}.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [*pytest, *paths], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
                )
            running[name] = (proc, log, time.monotonic())
        status = 0
        while running:
            for name, (proc, log, started) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[name]
                took = time.monotonic() - started
                print(f"===== {name}: exit status {proc.returncode}, {took:.0f} s =====")
                print(log.read_text(errors="replace"), end="", flush=True)
                status = status or proc.returncode
            time.sleep(1)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
