"""Helpers of the real node tests: the test's cgroup parent, polling, process CPU time."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.errors import CgroupUnavailable
from coshare.node.cgroups import V1Cgroups, V2Cgroups, open_cgroups

CGROUP_ROOT = Path("/sys/fs/cgroup")
COSHARE = str(Path(sys.executable).parent / "coshare")
#: The scheduler daemon the control tests trust: a copy of the shell under this name, so that
#: its children are "launchers" (as condor_starter's are on a real node).
LAUNCHER_NAME = "coshare-test-starter"
_numbers = itertools.count()


def skip_reason() -> str | None:
    """Why real cgroup tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "real cgroup tests need root"
    try:
        open_cgroups(CGROUP_ROOT)
    except CgroupUnavailable as exc:
        return str(exc)
    return None


def unique_parent() -> str:
    return f"coshare-test-{os.getpid()}-{next(_numbers)}"


def remove_parent(cgroups: V1Cgroups | V2Cgroups) -> None:
    """Kill and remove every job group under the test's parent, then the parent itself."""
    for job in cgroups.jobs():
        cgroups.open(job).remove()
    if isinstance(cgroups, V2Cgroups):
        tops = [cgroups.root / cgroups.parent]
    else:
        tops = [cgroups.root / c / cgroups.parent for c in cgroups.hierarchies()]
    for top in tops:
        if top.is_dir():
            top.rmdir()


def node_env(config: NodeConfig) -> dict[str, str]:
    """The environment that points the ``coshare`` command at the test's node config."""
    empty = Path(config.state_dir) / "empty-config.yaml"
    empty.write_text("")
    env = dict(os.environ)
    env.update(
        COSHARE_CONFIG=str(empty),
        COSHARE_NODE_CGROUP_ROOT=config.cgroup_root,
        COSHARE_NODE_CGROUP_PARENT=config.cgroup_parent,
        COSHARE_NODE_STATE_DIR=config.state_dir,
        COSHARE_NODE_GATE_SOCKET=config.gate_socket,
        COSHARE_NODE_CONTROL_SOCKET=config.control_socket,
        COSHARE_NODE_TRUSTED_LAUNCHERS=json.dumps(list(config.trusted_launchers)),
        COSHARE_NODE_WATCH_INTERVAL_S=str(config.watch_interval_s),
        COSHARE_NODE_KILL_TIMEOUT_S=str(config.kill_timeout_s),
        COSHARE_NODE_MAX_CONNECTIONS_PER_UID=str(config.max_connections_per_uid),
        COSHARE_NODE_LINE_TIMEOUT_S=str(config.line_timeout_s),
        COSHARE_NODE_IDLE_TIMEOUT_S=str(config.idle_timeout_s),
        COSHARE_NODE_WATCH_FAILURE_LIMIT=str(config.watch_failure_limit),
    )
    return env


def wait_for(check: object, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll ``check()`` until true; fail after ``timeout_s`` (a deadline, not a timing)."""
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def cpu_ticks(pid: int) -> int:
    """User + system CPU ticks a process has used (proc(5), fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process this test started, by its pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def make_starter(directory: Path) -> Path:
    """A program named :data:`LAUNCHER_NAME` (a copy of /bin/sh) in ``directory``."""
    path = directory / LAUNCHER_NAME
    if not path.exists():  # made once per directory (a running copy cannot be rewritten)
        shutil.copy(os.path.realpath("/bin/sh"), path)
        path.chmod(0o755)
    return path


@contextlib.contextmanager
def running_daemon(
    config: NodeConfig,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    devices: tuple[str, ...] = ("0=8", "1=4"),
    options: tuple[str, ...] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """``coshare node gate`` on ``config`` (plus ``env``, plus command-line ``options``), up
    until the block ends; stopped with SIGTERM (SIGKILL if it does not end), by its pid."""
    argv = [COSHARE, "node", "gate", *options]
    for device in devices:
        argv += ["--device", device]
    # The daemon logs to a file (a pipe nobody reads would stop it once full).
    log = daemon_log(config).open("ab")
    proc = subprocess.Popen(
        argv,
        env={**node_env(config), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=log,
        preexec_fn=preexec_fn,
    )
    log.close()

    def answers() -> bool:
        assert proc.poll() is None, daemon_log(config).read_text()
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(config.gate_socket)
            except OSError:
                return False
            return True

    try:
        wait_for(answers, what="the gate to listen")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop(proc)


def daemon_log(config: NodeConfig) -> Path:
    """Where :func:`running_daemon` writes the daemon's log."""
    return Path(config.state_dir) / "daemon.log"
