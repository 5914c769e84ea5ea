"""A real Prometheus for the metrics tests: started by deploy/prometheus/local-prometheus (Debian's
packages, installed with apt-get the first time), queried through its HTTP API, stopped by
its pid files. Like the pool and cluster fixtures, the test says what it scrapes."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "prometheus" / "local-prometheus"


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Prometheus:
    """A started Prometheus (and push gateway and node exporter, when asked for)."""

    dir: Path
    port: int
    pushgateway: str | None = None
    textfile_dir: Path | None = None

    def query(self, expr: str) -> list[dict[str, object]]:
        """The instant vector of ``expr`` (``/api/v1/query``)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=10) as reply:
            data = json.load(reply)
        assert data["status"] == "success", data
        result = data["data"]["result"]
        assert isinstance(result, list)
        return result

    def values(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Each series of ``expr``, by its labels (without ``__name__``, ``instance``, ``job``),
        with its value."""
        out = {}
        for item in self.query(expr):
            metric = item["metric"]
            assert isinstance(metric, dict)
            labels = tuple(
                sorted(
                    (k, v) for k, v in metric.items() if k not in ("__name__", "instance", "job")
                )
            )
            value = item["value"]
            assert isinstance(value, list)
            out[labels] = float(value[1])
        return out

    def wait_for(
        self,
        expr: str,
        check: Callable[[dict[tuple[tuple[str, str], ...], float]], bool],
        timeout_s: float = 60,
    ) -> dict[tuple[tuple[str, str], ...], float]:
        """Poll ``expr`` until ``check(values)`` holds (scrapes come every second); the
        values. Fails with what Prometheus last said."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.values(expr)
            if check(found):
                return found
            if time.monotonic() > deadline:
                targets = self.targets()
                raise AssertionError(
                    f"Prometheus never had {expr} as wanted; last: {found}; targets: {targets}"
                )
            time.sleep(0.5)

    def targets(self) -> list[tuple[str, str, str]]:
        """(job, health, last error) of every scrape target."""
        url = f"http://127.0.0.1:{self.port}/api/v1/targets"
        with urllib.request.urlopen(url, timeout=10) as reply:
            data = json.load(reply)
        return [
            (t["labels"]["job"], t["health"], t["lastError"]) for t in data["data"]["activeTargets"]
        ]


@contextlib.contextmanager
def running_prometheus(
    scrape: dict[str, str] | None = None,
    *,
    pushgateway: bool = False,
    textfile_dir: Path | None = None,
) -> Iterator[Prometheus]:
    """Prometheus scraping ``scrape`` (job -> host:port), plus a push gateway (job
    ``pushgateway``, its series keep their own job label) and a node exporter reading
    ``textfile_dir`` (job ``node``) when asked; stopped (by pid) when the block ends."""
    directory = Path(tempfile.mkdtemp(prefix="coshare-prom-", dir="/var/tmp"))
    port = free_port()
    argv = [str(SCRIPT), "start", str(directory), "--port", str(port), "--interval", "1s"]
    for job, target in (scrape or {}).items():
        argv += ["--scrape", f"{job}={target}"]
    prom = Prometheus(directory, port)
    if pushgateway:
        push_port = free_port()
        argv += ["--pushgateway", str(push_port)]
        prom.pushgateway = f"http://127.0.0.1:{push_port}"
    if textfile_dir is not None:
        prom.textfile_dir = textfile_dir
        argv += ["--textfile-dir", str(textfile_dir), "--node-exporter", str(free_port())]
    try:
        started = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        assert started.returncode == 0, f"local-prometheus did not start:\n{started.stderr}"
        yield prom
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=120)
        shutil.rmtree(directory, ignore_errors=True)
