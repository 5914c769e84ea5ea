"""What the node daemon's benchmarks share (bench/gate_latency.py, bench/node_flood.py)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, nearest rank."""
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[index])


def wait_listening(path: str, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Return once the daemon ``proc`` accepts connections on ``path``.

    Raises:
        SystemExit: it exited, or did not listen within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the node daemon exited with status {proc.returncode}")
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(path)
                return
            except OSError:
                time.sleep(0.05)
    raise SystemExit("the node daemon did not start listening")
