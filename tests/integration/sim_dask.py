"""A what-if sweep whose Dask workers are jobs of a real scheduler, shared by the
Slurm and HTCondor tests: the same sweep runs locally (the reference) and on Dask worker jobs
started by dask-jobqueue; one worker job is cancelled while the sweep runs; the printed JSON
must be the reference's, byte for byte."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

COSHARE = str(Path(sys.executable).parent / "coshare")
#: 18 runs of a few seconds each (about 37 CPU s, 20 s on two local processes on an idle
#: machine): long enough that a worker job is cancelled while the sweep runs.
SWEEP = [
    "simulate",
    "--workload",
    "uniform",
    "--nodes",
    "4",
    "--offload-share",
    "0.5",
    "--seeds",
    "3",
    "--sweep",
    "jobs=800,1200,1600",
    "--policies",
    "exclusive,knapsack",
    "--output",
    "json",
]


@functools.lru_cache(maxsize=1)
def reference() -> str:
    """The sweep's JSON from local processes (computed once per test session)."""
    done = subprocess.run(
        [COSHARE, *SWEEP, "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COSHARE_CONFIG": "/dev/null"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def sweep_with_a_cancel(
    config: Path,
    env: Mapping[str, str],
    workers: Callable[[], list[str]],
    cancel: Callable[[str], None],
) -> subprocess.CompletedProcess[str]:
    """Run the sweep with ``config`` (2 worker jobs); once both worker jobs run (``workers``
    lists the running ones), ``cancel`` one of them."""
    reference()
    out = err = None
    proc = subprocess.Popen(
        [COSHARE, "--config", str(config), *SWEEP, "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        deadline = time.monotonic() + 180
        running: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            running = workers()
            if len(running) >= 2:
                break
            time.sleep(0.5)
        assert len(running) >= 2, f"worker jobs never ran: {running}"
        # At once: on an idle machine the sweep needs little more than the workers' start, so
        # waiting for them to start runs could outlast it. A worker cancelled before or while
        # it runs one costs the sweep that run at most.
        assert proc.poll() is None, "the sweep ended before a worker could be cancelled"
        cancel(running[0])
        out, err = proc.communicate(timeout=600)
    finally:
        if out is None:  # not communicated: its pipes are still open (closed here)
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
