"""A compute node's install and start: the size the base install adds to an empty venv, and
how long ``coshare --help`` and ``coshare node --help`` take to start.

    python bench/startup.py [WHEEL]

WHEEL: a built wheel (``python -m build``); without it one is built from this tree
(``pip wheel --no-deps``). The wheel's base (no extras) goes into a fresh venv; its
site-packages is measured with ``du`` against an empty venv's. Each command runs 5 times in
that venv; the median wall time and the process's CPU time (user + system) are printed. To
compare before/after on the same machine, ``farm-bench -n 5 -- VENV/bin/coshare --help``.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5


def sh(*argv: str | Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=True, env=env
    ).stdout


def site_packages_mib(venv: Path) -> float:
    (site,) = venv.glob("lib/python3*/site-packages")
    return int(sh("du", "-sk", site).split()[0]) / 1024


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        argv, capture_output=True, check=True, env={**os.environ, "COSHARE_CONFIG": os.devnull}
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if argv:
            wheel = Path(argv[0]).resolve()
        else:
            sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", ROOT)
            (wheel,) = (tmp / "dist").glob("coshare-*.whl")
        sh(sys.executable, "-m", "venv", tmp / "empty")
        sh(sys.executable, "-m", "venv", tmp / "node")
        sh(tmp / "node/bin/python", "-m", "pip", "install", "-q", wheel)
        empty, node = site_packages_mib(tmp / "empty"), site_packages_mib(tmp / "node")
        print(f"wheel: {wheel.name}")
        print(
            f"node install (base, no extras): {node - empty:.1f} MiB over an empty venv "
            f"({node:.1f} - {empty:.1f} MiB of site-packages)"
        )
        for args in (["--help"], ["node", "--help"]):
            runs = [timed([str(tmp / "node/bin/coshare"), *args]) for _ in range(RUNS)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            print(
                f"coshare {' '.join(args)}: wall median {wall:.3f} s, CPU median {cpu:.3f} s "
                f"(of {RUNS}; min {min(r[0] for r in runs):.3f}, "
                f"max {max(r[0] for r in runs):.3f} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
