"""A node whose name coshare cannot write into a job, on the real HTCondor pool.

The schedd replaces ``$$(...)`` in every attribute of a job when it starts it (a job whose
attribute names a ``$$(X)`` the slot lacks is held: "Cannot expand $$ expression"), so a
placement on a node named ``node2$$(Name)`` would never read back as that name. The node's
name is changed at run time with ``condor_update_machine_ad`` (all its slots); the cycle must
leave it out, say why, and run every job on the other nodes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from coshare.ports import UNWRITABLE

from condor_addon import expressions as X
from condor_addon.view import machine_of
from tests.integration.condor_pool import CHROOT, CLIENT_CONFIG, Pool, pool, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.condor]

COSHARE = str(Path(sys.executable).with_name("coshare"))
RENAMED = "node2$$(Name)"


def rename(live: Pool, machine: str, name: str) -> None:
    """Advertise ``CoshareNodeName = name`` on every slot of ``machine`` until the startd
    restarts, and wait until the collector shows it."""
    ad = CHROOT / "tmp" / "coshare-rename.ad"
    ad.write_text(f"CoshareNodeName = {X.literal(name)}\n")
    pool("exec", "condor_update_machine_ad", "-name", machine, "/tmp/coshare-rename.ad")
    wait_for(lambda: live.node_of_machine().get(machine) == name, 60, f"{machine} named {name}")


def test_a_node_whose_name_the_schedd_would_rewrite_takes_nothing_and_the_others_run(
    live: Pool, tmp_path: Path
) -> None:
    machine = next(m for m, n in live.node_of_machine().items() if n == "node2")
    rename(live, machine, RENAMED)
    try:
        config = tmp_path / "coshare.yaml"
        config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")
        shown = subprocess.run(
            [COSHARE, "--config", str(config), "condor", "show"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        flat = " ".join(shown.split())
        assert "3 nodes, 5 devices (and 1 nodes taking no jobs)" in flat, flat
        assert f"{RENAMED} {UNWRITABLE} name not writable" in flat, flat

        cluster = live.submit(
            6, sleep_s=2, **{"+CoshareDeviceMemory": "3000", "+CoshareDeviceThreads": "120"}
        )
        planned: set[str] = set()
        deadline = time.monotonic() + 240
        while live.jobs() and time.monotonic() < deadline:
            report = live.cycle()
            assert report.exit_status == 0, report.apply
            assert [u.node for u in report.unusable if u.state == UNWRITABLE] == [RENAMED]
            assert any(
                n.startswith(f"node {RENAMED}: its name cannot be written") for n in report.notes
            ), report.notes
            planned |= {a.node for a in report.plan.assignments}
            held = {i: j.get("HoldReason") for i, j in live.jobs().items() if j["JobStatus"] == 5}
            assert not held, held
            time.sleep(1)
        assert not live.jobs(), "jobs still queued after 240 s"
        assert planned and RENAMED not in planned, planned
        ran_on = {machine_of(ad["LastRemoteHost"]) for ad in live.history(cluster)}
        assert machine not in ran_on and len(live.history(cluster)) == 6
        assert all(ad["ExitCode"] == 0 for ad in live.history(cluster))
    finally:
        rename(live, machine, "node2")
