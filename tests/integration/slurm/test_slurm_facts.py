"""Node facts through the real Slurm cluster: measured by each node's daemon, written
into the node's Extra field by coshare-slurm-facts (local-cluster runs one per node), read by
``coshare slurm show`` within one cycle; a job frozen and thawed over the node's control
socket is really frozen (the kernel's ``freezer.state``); and a user cannot forge facts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from coshare.ledger.facts import parse_facts

from .cluster import BIN, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
USER = 65534
BUSY = 'end=$(( $(date +%s) + 60 )); while [ "$(date +%s)" -lt "$end" ]; do :; done'


def show(cluster: Cluster) -> dict[str, object]:
    out = cluster.run(
        str(BIN / "coshare"), "--config", str(cluster.config), "slurm", "show", "--output", "json"
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def node_command(cluster: Cluster, node: str, *argv: str) -> str:
    """``coshare node ...`` with a node's own configuration (as root on that node)."""
    env = {**cluster.env, "COSHARE_CONFIG": str(cluster.dir / "node" / node / "coshare.yaml")}
    done = subprocess.run(
        [str(BIN / "coshare"), "node", *argv], env=env, text=True, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def wait_for(check: object, timeout_s: float, what: str) -> object:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s: {what}"
        time.sleep(0.5)


def test_probe_and_load_measured_on_a_node_reach_the_planner_and_freeze_is_real(
    cluster: Cluster,
) -> None:
    core = min(os.sched_getaffinity(0))
    probed = json.loads(
        node_command(
            cluster, "csl-n1", "probe", "membw", "--init", "--cpus", str(core), "--output", "json"
        )
    )
    gbps = probed["probe"]["gbps"]
    assert gbps > 0 and probed["probe"]["available"] == 1.0
    job = cluster.submit(
        "facts-busy", comment="coshare: device-memory=500 device-threads=10", extra=BUSY, sleep_s=0
    )
    assert cluster.cycle().returncode == 0
    wait_for(lambda: cluster.jobs()[job].phase == "active", 60, "the job to run")
    node = cluster.jobs()[job].nodes[0]

    def measured() -> dict[str, object] | None:
        snap = show(cluster)
        nodes = {n["name"]: n for n in snap["nodes"]}  # type: ignore[index,union-attr]
        running = [r for r in snap["running"] if r["id"] == job]  # type: ignore[index,union-attr]
        if (
            nodes["csl-n1"].get("membw_avail_gbps") is None
            or not running
            or running[0].get("cpu_load_cores") is None
        ):
            return None
        return {"node": nodes["csl-n1"], "job": running[0]}

    # One cycle's worth: the daemon samples every second, the publisher writes every second.
    found = wait_for(measured, 30, "the probe and the job's load in `coshare slurm show`")
    assert isinstance(found, dict)
    assert found["node"]["membw_avail_gbps"] == pytest.approx(gbps, rel=1e-3)
    assert found["node"]["membw_baseline_gbps"] == pytest.approx(gbps, rel=1e-3)
    assert time.time() - found["node"]["facts_at_s"] < 30
    assert 0 < found["job"]["cpu_load_max_cores"] <= 1.5

    # The Extra field holds the line the node daemon wrote.
    extra = {
        n["name"]: n["extra"] for n in json.loads(cluster.run("sinfo", "--json").stdout)["nodes"]
    }
    assert job in {x.job for x in parse_facts(extra[node]).loads}

    # Freeze the running job's group over the node's control socket: the kernel's freezer says
    # FROZEN; thaw it again. Twice is harmless and said so.
    state = (
        Path("/sys/fs/cgroup/freezer") / f"coshare-slurm-{node}" / f"job-{job}" / "freezer.state"
    )
    assert node_command(cluster, node, "freeze", "--job", job).strip() == f"job {job} frozen"
    assert state.read_text().strip() == "FROZEN"
    assert "was frozen already; nothing done" in node_command(cluster, node, "freeze", "--job", job)
    assert node_command(cluster, node, "thaw", "--job", job).strip() == f"job {job} thawed"
    assert state.read_text().strip() == "THAWED"
    cluster.run("scancel", job)


def test_a_user_cannot_forge_a_nodes_facts(cluster: Cluster) -> None:
    forged = cluster.run(
        "scontrol",
        "update",
        "NodeName=csl-n2",
        "Extra=coshare-facts;v=1;at=1;llc_ways=99",
        user=USER,
        check=False,
    )
    assert forged.returncode != 0
    assert "Invalid user id" in forged.stderr  # Slurm 22.05's refusal of a non-operator
    extra = {
        n["name"]: n.get("extra", "")
        for n in json.loads(cluster.run("sinfo", "--json").stdout)["nodes"]
    }
    assert "llc_ways=99" not in extra["csl-n2"]
