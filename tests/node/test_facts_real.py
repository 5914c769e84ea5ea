"""The node's measurements and controls on real cgroups and processes (root).

- The daemon samples a busy job's CPU time from its real group (v1 ``cpuacct.usage`` here;
  v2 ``cpu.stat`` on the unified mount) and writes it to ``state_dir/facts``; and the
  run-queue delay of a job with more busy processes than cores (``/proc/<tid>/schedstat``).
- FREEZE and THAW over the real control socket stop and resume the job's processes: the
  kernel's ``freezer.state`` says FROZEN, and the process gets no CPU; both are idempotent
  and say so; only operators may ask; an unknown job is ``ERR unknown_job``.
- A job with LLC ways gets a resctrl group whose ``tasks`` holds its process (a temp dir with
  the kernel's layout: this machine has no resctrl); without resctrl the start is refused
  ``unsupported`` naming the path, and leaves no group behind.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import Unsupported
from coshare.ledger.facts import parse_facts
from coshare.node import lifecycle
from coshare.node.cgroups import V1Cgroups, V2Cgroups
from coshare.node.lifecycle import job_end, job_exec, job_start, spawn_in_group
from coshare.node.load import LoadHistory
from coshare.node.sampler import facts_path

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
from tests.unit.fake_resctrl import FakeResctrl, make_resctrl

pytestmark = pytest.mark.cgroups
PY = sys.executable
BUSY = [PY, "-c", "while True: pass"]
SAMPLING = {"COSHARE_NODE_SAMPLE_INTERVAL_S": "0.2", "COSHARE_NODE_PROBE_INTERVAL_S": "0"}


def loads_of(config: NodeConfig) -> dict[str, float]:
    try:
        text = facts_path(config).read_text().strip()
    except FileNotFoundError:
        return {}
    return {x.job: x.last_cores for x in parse_facts(text).loads}


def test_the_daemon_publishes_a_busy_jobs_load_and_an_idle_ones(node_config: NodeConfig) -> None:
    busy_job = job_start(node_config, "busy", cores=1)
    idle_job = job_start(node_config, "idle", cores=1)
    env = node_env(node_config)
    procs = [
        spawn_in_group(BUSY, busy_job.group(), env),
        spawn_in_group([PY, "-c", "import time; time.sleep(120)"], idle_job.group(), env),
    ]
    try:
        with running_daemon(node_config, env=SAMPLING):
            # A busy loop keeps about one core busy; the shared test machine may give it less.
            wait_for(
                lambda: loads_of(node_config).get("busy", 0) > 0.3,
                30,
                "the busy job's load in the facts",
            )
            loads = loads_of(node_config)
            assert loads["busy"] <= 1.2 and loads["idle"] < 0.1
            assert facts_path(node_config).stat().st_mode & 0o777 == 0o644
    finally:
        for proc in procs:
            stop(proc)


def waits_of(config: NodeConfig) -> dict[str, float]:
    try:
        text = facts_path(config).read_text().strip()
    except FileNotFoundError:
        return {}
    return {w.job: w.last_cores for w in parse_facts(text).waits}


def test_a_job_that_wants_more_cores_than_it_holds_shows_run_queue_wait(
    node_config: NodeConfig,
) -> None:
    # Two busy processes on the one core of its cpuset: together they run at most one core
    # (its load) and wait about one more (schedstat's run_delay), more where the host's other
    # work shares that core. A sleeping job waits next to nothing.
    crowded = job_start(node_config, "crowded", cores=1)
    idle_job = job_start(node_config, "idle", cores=1)
    env = node_env(node_config)
    procs = [spawn_in_group(BUSY, crowded.group(), env) for _ in range(2)]
    procs.append(spawn_in_group([PY, "-c", "import time; time.sleep(120)"], idle_job.group(), env))
    try:
        with running_daemon(node_config, env=SAMPLING):
            wait_for(
                lambda: waits_of(node_config).get("crowded", 0) > 0.5,
                30,
                "the crowded job's run-queue wait in the facts",
            )
            assert loads_of(node_config)["crowded"] <= 1.2  # its cpuset: one core
            assert waits_of(node_config)["idle"] < 0.1
    finally:
        for proc in procs:
            stop(proc)


def freezer_state(config: NodeConfig, job: str) -> str:
    path = CGROUP_ROOT / "freezer" / config.cgroup_parent / f"job-{job}" / "freezer.state"
    return path.read_text().strip()


def test_freeze_and_thaw_over_the_control_socket(gate_daemon: NodeConfig) -> None:
    if not isinstance(lifecycle.node_cgroups(gate_daemon), V1Cgroups):
        pytest.skip("the v1 freezer is checked here; v2's cgroup.freeze below")
    record = job_start(gate_daemon, "trial", cores=1)
    busy = spawn_in_group(BUSY, record.group(), node_env(gate_daemon))
    try:
        start = cpu_ticks(busy.pid)
        wait_for(lambda: cpu_ticks(busy.pid) > start + 2, what="the busy loop to run")
        assert ask(gate_daemon, "FREEZE job=trial", user=False) == "OK job=trial frozen=1 changed=1"
        assert freezer_state(gate_daemon, "trial") == "FROZEN"  # the kernel's word for it
        frozen_at = cpu_ticks(busy.pid)
        time.sleep(0.3)
        assert cpu_ticks(busy.pid) == frozen_at
        assert ask(gate_daemon, "FREEZE job=trial", user=False) == "OK job=trial frozen=1 changed=0"
        # Only operators (node.operator_uids: root) may freeze or thaw.
        assert ask(gate_daemon, "THAW job=trial").startswith(
            "ERR not_allowed job trial: THAW is for operators"
        )
        assert freezer_state(gate_daemon, "trial") == "FROZEN"
        done = subprocess.run(
            [COSHARE, "node", "thaw", "--job", "trial"],
            env=node_env(gate_daemon),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and done.stdout.strip() == "job trial thawed", done.stderr
        assert freezer_state(gate_daemon, "trial") == "THAWED"
        wait_for(lambda: cpu_ticks(busy.pid) > frozen_at + 2, what="the thawed loop to run")
        again = subprocess.run(
            [COSHARE, "node", "thaw", "--job", "trial"],
            env=node_env(gate_daemon),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.stdout.strip() == "job trial was not frozen; nothing done"
        assert (
            ask(gate_daemon, "FREEZE job=nobody", user=False)
            == "ERR unknown_job job nobody has no group on this node"
        )
    finally:
        stop(busy)


def test_a_job_frozen_too_long_is_thawed_by_the_daemon(node_config: NodeConfig) -> None:
    record = job_start(node_config, "forgotten", cores=1)
    busy = spawn_in_group(BUSY, record.group(), node_env(node_config))
    try:
        with running_daemon(node_config, env={"COSHARE_NODE_MAX_FREEZE_S": "0.5"}):
            assert ask(node_config, "FREEZE job=forgotten", user=False).endswith("changed=1")
            assert record.group().is_frozen()
            wait_for(lambda: not record.group().is_frozen(), 30, "the daemon to thaw the job")
    finally:
        stop(busy)


def test_v2_cpu_stat_and_cgroup_freeze_for_real(v2: V2Cgroups) -> None:
    group = v2.create("v2-load", (), None)
    busy = subprocess.Popen(BUSY)
    try:
        group.add(busy.pid)
        history = LoadHistory(5)
        history.add("v2-load", time.monotonic(), group.cpu_usage_s())
        time.sleep(0.5)
        history.add("v2-load", time.monotonic(), group.cpu_usage_s())
        load = history.summary("v2-load")
        assert load is not None and 0.2 < load.last_cores <= 1.2
        group.freeze()
        assert (v2.root / v2.parent / "job-v2-load" / "cgroup.freeze").read_text().strip() == "1"
        assert "frozen 1" in (v2.root / v2.parent / "job-v2-load" / "cgroup.events").read_text()
        used = group.cpu_usage_s()
        time.sleep(0.3)
        assert group.cpu_usage_s() == used  # frozen: no CPU time at all
        group.thaw()
        assert "frozen 0" in (v2.root / v2.parent / "job-v2-load" / "cgroup.events").read_text()
    finally:
        stop(busy)


def test_a_job_with_llc_ways_runs_in_its_resctrl_group(
    node_config: NodeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeResctrl(make_resctrl(tmp_path / "resctrl"), node_config.cgroup_parent)
    monkeypatch.setattr(lifecycle, "node_resctrl", lambda config: fake)
    record = job_start(node_config, "ways", cores=1, llc_ways=4, membw_percent=40)
    assert (record.spec.llc_ways, record.spec.membw_percent) == (4, 40)
    group = fake.path("ways")
    # its 4 ways and, alone on the node, the 16 spare ones as its share (node.llc_share_spare)
    assert (group / "schemata").read_text() == "L3:0=fffff;1=fffff\nMB:0=40;1=40\n"
    pid_file = tmp_path / "pid"
    result = job_exec(
        node_config,
        "ways",
        [PY, "-c", f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))"],
    )
    assert result.status == 0
    # The job's process wrote its pid to the group's tasks before it ran (children inherit).
    assert (group / "tasks").read_text() == pid_file.read_text()
    assert fake.ways_free({"ways": 4}) == 16 and fake.ways_free() == 0  # allocated / masks
    job_end(node_config, "ways")
    assert not group.exists() and fake.ways_free() == 20


def test_without_resctrl_ways_are_refused_unsupported_and_nothing_is_left(
    node_config: NodeConfig, tmp_path: Path
) -> None:
    from dataclasses import replace

    config = replace(node_config, resctrl_root=str(tmp_path / "no-resctrl"))
    with pytest.raises(Unsupported) as refused:
        job_start(config, "no-ways", cores=1, llc_ways=2)
    assert refused.value.path == str(tmp_path / "no-resctrl" / "info" / "L3" / "cbm_mask")
    assert lifecycle.node_cgroups(config).jobs() == []  # the group went with the refusal
    assert lifecycle.node_store(config).jobs() == []
