"""Real cgroups and real processes for the node helpers (marker ``cgroups``; root).

Every test gets its own coshare parent group, ``coshare-test-<pid>-<n>``, under each cgroup
hierarchy (never anything else), a state directory in /tmp, and a gate socket there; the
fixtures kill and remove what a test made even when it fails.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.cgroups import V1Cgroups, V2Cgroups
from coshare.node.lifecycle import node_cgroups

from tests.node.helpers import (
    CGROUP_ROOT,
    LAUNCHER_NAME,
    remove_parent,
    running_daemon,
    skip_reason,
    unique_parent,
)


@pytest.fixture
def node_config() -> Iterator[NodeConfig]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    state = Path(tempfile.mkdtemp(prefix="cs-node-"))  # short: unix socket paths are short
    state.chmod(0o755)  # jobs of other users reach the sockets and their records here
    config = NodeConfig(
        cgroup_root=str(CGROUP_ROOT),
        cgroup_parent=unique_parent(),
        state_dir=str(state),
        gate_socket=str(state / "gate.sock"),
        control_socket=str(state / "control.sock"),
        watch_interval_s=0.05,
        kill_timeout_s=10.0,
        trusted_launchers=(LAUNCHER_NAME,),
    )
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
    with running_daemon(node_config):
        yield node_config


@pytest.fixture
def v2() -> Iterator[V2Cgroups]:
    """A coshare parent group on the cgroup v2 mount (the root, or ``unified`` beside v1);
    skipped where there is none."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (root / "cgroup.controllers").exists():
            cgroups = V2Cgroups(root, unique_parent())
            yield cgroups
            remove_parent(cgroups)
            return
    pytest.skip(f"no cgroup v2 mount at {CGROUP_ROOT} or {CGROUP_ROOT}/unified")
