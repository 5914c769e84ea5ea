"""A Slurm cycle's metrics and JSON log on the real cluster: ``coshare slurm cycle
--log-format json`` exports to a real push gateway and a real node exporter's textfile
collector, and a real Prometheus scraping both has the cycle's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.prometheus import running_prometheus

from .cluster import BIN, Cluster
from .conftest import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def test_a_cycle_exports_its_figures_and_logs_json(cluster: Cluster, tmp_path: Path) -> None:
    textfile = tmp_path / "textfile"
    with running_prometheus(pushgateway=True, textfile_dir=textfile) as prom:
        config = write_config(
            cluster, f"metrics: {{pushgateway: '{prom.pushgateway}', textfile_dir: '{textfile}'}}\n"
        )
        for i in range(3):
            cluster.submit(
                f"metrics-{i}", comment="coshare: device-memory=1000 device-threads=60", sleep_s=1
            )
        bad = cluster.submit(
            "metrics-bad", comment="coshare: device-memory=20000 device-threads=60"
        )
        result = cluster.run(
            str(BIN / "coshare"),
            "--config",
            str(config),
            "slurm",
            "cycle",
            "--log-format",
            "json",
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        records = [json.loads(line) for line in result.stderr.splitlines()]
        done = [r for r in records if r["message"].startswith("cycle done")]
        assert len(done) == 1 and done[0]["level"] == "info"
        assert done[0]["scheduler"] == "slurm" and done[0]["placed"] == 3
        refused = [r for r in records if r.get("outcome") == "refused"]
        assert [r["job"] for r in refused] == [bad], records
        assert "exceeds every device" in refused[0]["message"]
        for job in ("coshare", "node"):  # the push gateway's group; the node exporter's
            selector = f'{{scheduler="slurm",job="{job}"}}'
            for name, want in (
                ("placed_jobs", 3),
                ("pending_jobs", 3),
                ("refused_jobs", 1),
                ("exit_status", 0),
                ("plan_refused", 0),
            ):
                found = prom.wait_for(f"coshare_cycle_{name}{selector}", lambda v: bool(v))
                assert list(found.values()) == [want], (name, found)
            edits = prom.wait_for(f"coshare_cycle_edits{selector}", lambda v: len(v) == 5)
            assert edits[(("result", "written"), ("scheduler", "slurm"))] == 3
            phases = prom.wait_for(f"coshare_cycle_phase_seconds{selector}", lambda v: len(v) == 4)
            assert all(seconds >= 0 for seconds in phases.values())
