"""The memory watchdog keeps running while its device memory backend fails, and the daemon
exits non-zero when the watchdog cannot run: the real daemon, a real job
cgroup (root).

The device memory backend is NVML: its bindings are replaced by tests/node/fake_nvml (one GPU
that is lost, or that stops answering), the one part this machine cannot produce. On cgroup
v1 a job's group has the kernel's OOM killer off: a job at its limit waits, frozen, until the
watchdog kills it, so a watchdog that died would leave it there for good.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.lifecycle import job_start, node_store, spawn_in_group

from tests.node.helpers import daemon_log, node_env, running_daemon, stop, wait_for

pytestmark = pytest.mark.cgroups
PY = sys.executable
FAKE_NVML = str(Path(__file__).parent / "fake_nvml")


def nvml_env(mode: str) -> dict[str, str]:
    return {"COSHARE_NODE_DEVICE_MEMORY": "nvml", "PYTHONPATH": FAKE_NVML, "FAKE_NVML": mode}


def test_a_lost_gpu_does_not_stop_the_host_memory_watchdog(node_config: NodeConfig) -> None:
    config = node_config
    with running_daemon(config, env=nvml_env("lost")) as daemon:
        record = job_start(
            config, "frozen", cores=1, memory_mib=64, devices=["0"], device_memory_mib=100
        )
        hog = spawn_in_group(
            [PY, "-c", "x = bytearray(300 << 20); print('survived')"],
            record.group(),
            node_env(config),
        )
        try:
            # Every round NVML fails for the GPU; host memory is still watched: the job that
            # reached its limit is killed as a whole, with the reason.
            assert hog.wait(timeout=60) == -9
            reason = node_store(config).reason("frozen")
            assert reason is not None and reason.startswith(
                "coshare killed job frozen: its host memory went over the declared 64 MiB"
            )
            assert daemon.poll() is None
        finally:
            stop(hog)
    assert daemon.returncode == 0  # it served on, and stopped when told
    log = daemon_log(config).read_text()
    assert (
        "device memory cannot be read (1 rounds in a row); host memory is still watched: "
        "NVML cannot list the processes of GPU 0" in log
    ), log


def test_the_daemon_exits_non_zero_when_a_watchdog_round_never_ends(
    node_config: NodeConfig,
) -> None:
    # NVML stops answering: the round cannot finish. After watch_failure_limit x
    # max(watch_interval_s, kill_timeout_s) the daemon gives up and exits 1, for its service
    # manager to restart it, rather than serve on without a watchdog.
    config = replace(node_config, watch_failure_limit=2, kill_timeout_s=0.5)
    with running_daemon(config, env=nvml_env("hang")) as daemon:
        assert daemon.wait(timeout=60) == 1
    err = daemon_log(config).read_text()
    assert "coshare: error: a memory watchdog round did not finish in 1 s" in err, err
    assert not Path(config.gate_socket).exists() and not Path(config.control_socket).exists()


def test_without_the_nvml_bindings_the_daemon_says_so_and_exits_1(
    node_config: NodeConfig,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['pynvml'] = None; from coshare.cli.main import main; main()",
            "node",
            "gate",
            "--device",
            "0=8",
        ],
        env={**node_env(node_config), "COSHARE_NODE_DEVICE_MEMORY": "nvml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "device memory watching needs NVML bindings" in done.stderr
    wait_for(lambda: not Path(node_config.gate_socket).exists(), what="the socket removed")
