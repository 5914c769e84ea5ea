"""Real cgroups and real processes for the node helpers (marker ``cgroups``; root).

Every test gets its own coshare parent group, ``coshare-test-<pid>-<n>``, under each cgroup
hierarchy (never anything else), a state directory in /tmp, and a gate socket there; the
fixtures kill and remove what a test made even when it fails.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.cgroups import V1Cgroups, V2Cgroups
from coshare.node.lifecycle import node_cgroups

from tests.node.helpers import (
    CGROUP_ROOT,
    COSHARE,
    LAUNCHER_NAME,
    node_env,
    remove_parent,
    skip_reason,
    stop,
    unique_parent,
    wait_for,
)


@pytest.fixture
def node_config() -> Iterator[NodeConfig]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    state = Path(tempfile.mkdtemp(prefix="cs-node-"))  # short: unix socket paths are short
    state.chmod(0o755)  # jobs of other users reach the sockets and their records here
    config = NodeConfig(
        cgroup_root=str(CGROUP_ROOT), cgroup_parent=unique_parent(), state_dir=str(state),
        gate_socket=str(state / "gate.sock"), control_socket=str(state / "control.sock"),
        watch_interval_s=0.05, kill_timeout_s=10.0, trusted_launchers=(LAUNCHER_NAME,),
    )  # fmt: skip
    try:
        yield config
    finally:
        cgroups = node_cgroups(config)
        assert isinstance(cgroups, (V1Cgroups, V2Cgroups))
        try:
            remove_parent(cgroups)
        finally:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def gate_daemon(node_config: NodeConfig) -> Iterator[NodeConfig]:
    """``coshare node gate`` with devices 0 (8 threads) and 1 (4 threads), watchdog on."""
    proc = subprocess.Popen(
        [COSHARE, "node", "gate", "--device", "0=8", "--device", "1=4"],
        env=node_env(node_config), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip

    def answers() -> bool:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(node_config.gate_socket)
            except OSError:
                return False
            return True

    try:
        wait_for(answers, what="the gate to listen")
        yield node_config
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop(proc)
        if proc.stderr is not None:
            proc.stderr.close()
