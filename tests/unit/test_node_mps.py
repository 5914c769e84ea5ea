"""MPS limits (coshare.node.mps) and what coshare-launch makes of the daemon's reply."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coshare.node.control.launcher import mps_environment, task_prolog
from coshare.node.mps import mps_fields, mps_running, thread_percent


def test_the_limits_are_the_declared_memory_and_the_thread_share() -> None:
    assert mps_fields(("0", "1"), 4096, 20, {"0": 80, "1": 108}) == (
        " mps_memory_mib=4096 mps_percent=25"
    )  # the smaller device's share, rounded up
    assert mps_fields((), 4096, 20, {"0": 80}) == ""
    assert mps_fields(("0",), None, None, {}) == ""
    assert thread_percent(1, 108) == 1 and thread_percent(500, 108) == 100
    assert thread_percent(10, None) is None


def test_mps_runs_only_where_its_control_pipe_is(tmp_path: Path) -> None:
    running, seen = mps_running(str(tmp_path))
    assert not running and seen.startswith(f"no MPS control pipe at {tmp_path / 'control'}")
    (tmp_path / "control").write_text("")
    assert mps_running(str(tmp_path)) == (False, f"{tmp_path / 'control'} is no MPS control pipe")
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert mps_running(str(tmp_path)) == (True, f"MPS control pipe at {tmp_path / 'control'}")


def test_the_launcher_sets_both_variables_per_device_the_job_sees() -> None:
    reply = {"mps_memory_mib": "20480", "mps_percent": "25"}
    assert mps_environment(reply, "2,3") == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M,1=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    assert mps_environment({}, "2,3") == {}
    assert mps_environment(reply, "-") == {}
    assert mps_environment({"mps_percent": "x;rm"}, "0") == {}  # only digits pass


def test_slurms_task_prolog_exports_them_from_the_join_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "job-42.json").write_text("{}")
    monkeypatch.setattr(
        "coshare.node.control.launcher.request",
        lambda socket, line: {
            "job": "42",
            "devices": "0",
            "cpus": "1",
            "device_memory_mib": "4096",
            "device_threads": "27",
            "mps_memory_mib": "4096",
            "mps_percent": "25",
        },
    )  # the daemon's JOIN reply, as join_reply writes it
    found = task_prolog("/x.sock", "/g.sock", str(tmp_path), {"SLURM_JOB_ID": "42"})
    assert found is not None
    lines, status = found
    assert status == 0
    assert "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in lines
    assert "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in lines


def test_node_check_says_which_gpu_memory_limit_is_in_force(tmp_path: Path) -> None:
    from coshare.config import NodeConfig
    from coshare.node.check import gpu_limit_capability

    none = gpu_limit_capability(NodeConfig())
    assert (none.status, none.detail) == (
        "missing",
        "none: nothing holds a GPU job to its declared device memory",
    )
    watchdog = gpu_limit_capability(NodeConfig(device_memory="nvml"))
    assert watchdog.status == "found" and watchdog.detail.startswith("the NVML watchdog kills")
    down = gpu_limit_capability(
        NodeConfig(gpu_limits="mps", mps_pipe_dir=str(tmp_path), device_memory="nvml")
    )
    assert down.status == "found"  # the watchdog holds while MPS is down, and says so
    assert down.detail.startswith(f"node.gpu_limits is mps, but no MPS control pipe at {tmp_path}")
    os.mkfifo(tmp_path / "control")
    up = gpu_limit_capability(NodeConfig(gpu_limits="mps", mps_pipe_dir=str(tmp_path)))
    assert up.status == "found" and up.detail.startswith("mps: each job's pinned memory")
