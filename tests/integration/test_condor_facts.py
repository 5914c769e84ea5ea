"""Node facts through the real HTCondor pool: measured by each node's daemon,
published by the startd cron script coshare-facts as the machine attribute CoshareNodeFacts,
read by ``coshare condor show`` within one cycle; a running job frozen and thawed over its
node's control socket is really frozen (the kernel's ``freezer.state``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from coshare.ledger.facts import parse_facts

from condor_addon.view import machine_of, node_job_id
from tests.integration.condor_pool import CHROOT, CLIENT_CONFIG, COSHARE_BIN, WORK, Pool, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.condor]
#: Busy for longer than the facts can take to arrive (below) plus the freeze and thaws: a CI
#: run saw the facts late and the job end between its two thaws. The queue is emptied after.
BUSY = """#!/usr/bin/python3
import time
end = time.time() + 400
while time.time() < end:
    pass
"""


def node_command(index: str, *argv: str) -> str:
    """``coshare node ...`` with one pool node's configuration (root on the host, as the
    pool's node daemons run)."""
    env = {**os.environ, "COSHARE_CONFIG": str(CHROOT / "pool" / "coshare" / f"{index}.yaml")}
    done = subprocess.run(
        [f"{COSHARE_BIN}/coshare", "node", *argv],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def show(config: Path) -> dict[str, object]:
    done = subprocess.run(
        [f"{COSHARE_BIN}/coshare", "--config", str(config), "condor", "show", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_probe_and_load_reach_the_planner_and_a_frozen_job_is_frozen(
    live: Pool, tmp_path: Path
) -> None:
    core = min(os.sched_getaffinity(0))
    probed = json.loads(
        node_command("node1", "probe", "membw", "--init", "--cpus", str(core), "--output", "json")
    )
    gbps = probed["probe"]["gbps"]
    script = CHROOT / WORK.lstrip("/") / "busy.py"
    script.write_text(BUSY)
    script.chmod(0o755)
    cluster = live.submit(
        1,
        executable=f"{WORK}/busy.py",
        arguments="",
        **{"+CoshareDeviceMemory": "512", "+CoshareDeviceThreads": "10"},
    )
    job = f"{cluster}.0"
    report = live.cycle()
    assert [a.job for a in report.plan.assignments] == [job], report.plan.unplaced
    wait_for(lambda: live.jobs().get(job, {}).get("JobStatus") == 2, 120, "the job to run")
    ad = live.jobs()[job]
    startd = machine_of(str(ad["RemoteHost"])).split("@")[0]  # node1 .. node4
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor:\n  config_file: {CLIENT_CONFIG}\n  retry_wait_s: 0.1\n")

    def measured() -> dict[str, object] | None:
        snap = show(config)
        nodes = {n["name"]: n for n in snap["nodes"]}  # type: ignore[index,union-attr]
        running = [r for r in snap["running"] if r["id"] == job]  # type: ignore[index,union-attr]
        if (
            nodes["node1"].get("membw_avail_gbps") is None
            or not running
            or running[0].get("cpu_load_cores") is None
        ):
            return None
        return {"node": nodes["node1"], "job": running[0]}

    # The daemon samples every second; the startd cron publishes them every 60 s (the
    # execute snippet's STARTD_CRON_COSHARE_FACTS_PERIOD: config.d is read after the pool's
    # own 1 s); the startd updates the collector every 2 s (UPDATE_INTERVAL of the test pool).
    found: dict[str, dict[str, float]] = {}
    deadline = time.monotonic() + 150
    while not found:
        found = measured() or {}  # type: ignore[assignment]
        assert time.monotonic() < deadline, "the probe and the load never reached condor show"
        time.sleep(0.5)
    assert found["node"]["membw_avail_gbps"] == pytest.approx(gbps, rel=1e-3)
    assert time.time() - found["node"]["facts_at_s"] < 120  # one cron period (60 s) and the updates
    assert 0 < found["job"]["cpu_load_max_cores"] <= 1.5

    # The machine ad carries the line the node daemon wrote, and the job under its node id.
    local = node_job_id(str(ad["GlobalJobId"]))
    name = live.node_of_machine()[machine_of(str(ad["RemoteHost"]))]
    texts = {
        str(a["CoshareNodeFacts"])
        for a in live.client.slot_ads()
        if a.get("CoshareNodeName") == name and a.get("CoshareNodeFacts")
    }
    assert any(local in {x.job for x in parse_facts(t).loads} for t in texts)

    # FREEZE over the job's node's control socket: the kernel's freezer says FROZEN; THAW.
    state = (
        Path("/sys/fs/cgroup/freezer") / f"coshare-pool-{startd}" / f"job-{local}" / "freezer.state"
    )
    assert node_command(startd, "freeze", "--job", local).strip() == f"job {local} frozen"
    assert state.read_text().strip() == "FROZEN"
    assert node_command(startd, "thaw", "--job", local).strip() == f"job {local} thawed"
    assert (
        node_command(startd, "thaw", "--job", local).strip()
        == f"job {local} was not frozen; nothing done"
    )
    assert state.read_text().strip() == "THAWED"
