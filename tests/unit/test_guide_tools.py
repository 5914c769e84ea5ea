"""Tools the guides tell an admin to run that are neither coshare's nor a scheduler's, run as
the pages show them: ``nvidia-smi``'s query that the node's device script reads (against a
fake ``nvidia-smi`` that prints what NVIDIA's documented query prints: this machine has no
GPU), ``sysctl kernel.yama.ptrace_scope`` (the security model), ``man`` on the generated
pages (``MANPATH=man man coshare-condor-cycle``) and the snapshot decoding benchmark."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICES = ROOT / "deploy" / "condor" / "coshare-devices"

#: ``nvidia-smi --query-gpu=index,memory.total,name --format=csv,noheader,nounits`` on a
#: node of two H100s, as the driver prints it (comma and space between fields).
NVIDIA_SMI = """#!/bin/sh
[ "$*" = "--query-gpu=index,memory.total,name --format=csv,noheader,nounits" ] || exit 6
printf '0, 81559, NVIDIA H100 80GB HBM3\\n1, 81559, NVIDIA H100 80GB HBM3\\n'
"""


def devices(tmp_path: Path, *args: str, with_nvidia_smi: bool) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nvidia-smi"
    if with_nvidia_smi:
        fake.write_text(NVIDIA_SMI)
        fake.chmod(0o755)
    elif fake.exists():
        fake.unlink()
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", str(DEVICES), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def test_the_device_script_reads_nvidia_smis_query(tmp_path: Path) -> None:
    ad = devices(tmp_path, "--gpu-threads", "270336", with_nvidia_smi=True)
    assert ad.splitlines() == [
        'CoshareNodeDeviceIds = {"0", "1"}',
        "CoshareNodeDeviceMemory = {81559, 81559}",
        "CoshareNodeDeviceThreads = {270336, 270336}",
        'CoshareNodeDeviceModels = {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}',
        'CoshareNodeDeviceSource = "nvidia-smi"',
    ]
    # without nvidia-smi on the node: the devices the admin configured, and the ad says so
    ad = devices(tmp_path, "--device", "8192:240:phi-5110p", with_nvidia_smi=False)
    assert 'CoshareNodeDeviceSource = "config"' in ad and "{8192}" in ad


def test_sysctl_reads_yamas_ptrace_scope_or_says_the_kernel_has_none() -> None:
    sysctl = shutil.which("sysctl") or "/usr/sbin/sysctl"
    done = subprocess.run(
        [sysctl, "kernel.yama.ptrace_scope"], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        assert re.fullmatch(r"kernel\.yama\.ptrace_scope = [0-3]\n", done.stdout), done
    else:  # no Yama in this kernel: the page says the launcher's own flag protects it then
        assert "/proc/sys/kernel/yama/ptrace_scope" in done.stderr, done


def test_man_finds_the_generated_pages_in_the_repository() -> None:
    if shutil.which("man") is None:
        pytest.skip("man-db is not installed on this machine")
    done = subprocess.run(
        ["man", "-P", "cat", "coshare-condor-cycle"],
        capture_output=True,
        text=True,
        env={**os.environ, "MANPATH": str(ROOT / "man"), "MANWIDTH": "100"},
        check=True,
    )
    assert "coshare condor cycle [OPTIONS]" in done.stdout
    assert "Run one planning cycle" in " ".join(done.stdout.split())


#: The benchmark's smallest case (its figures' shape is checked, never their values).
SMALL = ("--jobs", "200", "--devices", "40", "--repeat", "1")


def test_the_decoding_benchmark_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "snapshot_decode.py"), *SMALL],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'common'}:{ROOT}"},
        check=True,
        timeout=120,
    )
    assert re.search(r"CPU \d+\.\d{3} s, wall \d+\.\d{3} s \(target 0\.3 s\)", done.stdout), done
