"""The membw trial's node side on real cgroups and processes (root):

- TRIAL over the real control socket freezes the old job while the real probe runs on its
  cores, and leaves it running (the kernel's ``freezer.state`` THAWED, the process gets CPU);
- a daemon SIGKILLed while a job is frozen leaves the freeze mark behind, and the daemon
  started again thaws the job at once (long before ``node.max_freeze_s``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from coshare.config import NodeConfig
from coshare.node import lifecycle
from coshare.node.cgroups import V1Cgroups
from coshare.node.lifecycle import job_start, spawn_in_group
from coshare.node.spec import format_cpu_list

from tests.node.helpers import (
    CGROUP_ROOT,
    COSHARE,
    cpu_ticks,
    node_env,
    running_daemon,
    stop,
    wait_for,
)
from tests.node.test_control_real import ask

pytestmark = [pytest.mark.cgroups]
BUSY = [sys.executable, "-c", "while True: pass"]


def freezer_state(config: NodeConfig, job: str) -> str:
    path = CGROUP_ROOT / "freezer" / config.cgroup_parent / f"job-{job}" / "freezer.state"
    return path.read_text().strip()


def v1_only(config: NodeConfig) -> None:
    if not isinstance(lifecycle.node_cgroups(config), V1Cgroups):
        pytest.skip("the v1 freezer is checked here")


def test_trial_freezes_the_old_job_around_a_real_probe_of_its_cores(
    gate_daemon: NodeConfig,
) -> None:
    v1_only(gate_daemon)
    old = job_start(gate_daemon, "old", cores=1)
    job_start(gate_daemon, "new", cores=1)
    busy = spawn_in_group(BUSY, old.group(), node_env(gate_daemon))
    try:
        cpus = ",".join(str(c) for c in old.spec.cpus)
        init = subprocess.run(
            [COSHARE, "node", "probe", "membw", "--init", "--cpus", cpus, "--output", "json"],
            env={**node_env(gate_daemon), "COSHARE_NODE_PROBE_ARRAY_MIB": "64"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert init.returncode == 0, init.stderr
        assert json.loads(init.stdout)["probe"]["gbps"] > 0
        reply = ask(gate_daemon, "TRIAL job=new partners=old", user=False)
        fields = dict(w.split("=", 1) for w in reply.split()[1:])
        assert reply.startswith("OK job=new "), reply
        assert 0 <= float(fields["share"]) <= 1 and fields["cpus"] == format_cpu_list(old.spec.cpus)
        assert freezer_state(gate_daemon, "old") == "THAWED"
        start = cpu_ticks(busy.pid)
        wait_for(lambda: cpu_ticks(busy.pid) > start + 2, what="the old job to run again")
        assert ask(gate_daemon, "TRIAL job=new partners=old").startswith("ERR not_allowed")
    finally:
        stop(busy)


def test_a_daemon_killed_with_a_job_frozen_thaws_it_when_it_starts_again(
    node_config: NodeConfig,
) -> None:
    v1_only(node_config)
    record = job_start(node_config, "left", cores=1)
    busy = spawn_in_group(BUSY, record.group(), node_env(node_config))
    try:
        with running_daemon(node_config) as daemon:  # node.max_freeze_s: 60 s
            assert ask(node_config, "FREEZE job=left", user=False).endswith("changed=1")
            daemon.kill()  # SIGKILL, by its pid: no clean-up of its own
            daemon.wait(30)
        assert freezer_state(node_config, "left") == "FROZEN"  # what a killed probe leaves
        with running_daemon(node_config):
            wait_for(
                lambda: freezer_state(node_config, "left") == "THAWED",
                10,
                "the restarted daemon to thaw the job",
            )
        frozen_at = cpu_ticks(busy.pid)
        wait_for(lambda: cpu_ticks(busy.pid) > frozen_at + 2, what="the job to run again")
    finally:
        stop(busy)
