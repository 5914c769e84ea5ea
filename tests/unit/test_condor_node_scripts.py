"""The execute-node scripts (POSIX sh), run for real on ad files like the starter's."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest
from coshare.commands import run
from coshare.errors import CommandFailed

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "condor"
DEVICES = str(DEPLOY / "coshare-devices")
WRAPPER = str(DEPLOY / "coshare-job-wrapper")


def advertised(*args: str) -> dict[str, object]:
    out = run([DEVICES, "--source", "config", *args], timeout_s=10).stdout
    ad = classad2.parseOne(out)
    return {k: ad.eval(k) for k in ad}


def test_configured_devices_are_advertised_as_classad_lists() -> None:
    ad = advertised("--device", "8192:240:phi-5110p", "--device", "16384:244")
    assert ad["CoshareNodeDeviceIds"] == ["0", "1"]
    assert ad["CoshareNodeDeviceMemory"] == [8192, 16384]
    assert ad["CoshareNodeDeviceThreads"] == [240, 244]
    assert ad["CoshareNodeDeviceModels"] == ["phi-5110p", ""]
    assert ad["CoshareNodeDeviceSource"] == "config"


def test_no_devices_is_an_empty_list_not_an_error() -> None:
    ad = advertised()
    assert ad["CoshareNodeDeviceIds"] == []
    assert ad["CoshareNodeDeviceSource"] == "none"


@pytest.mark.parametrize("spec", ['8192:240:a"b', "abc", ":240", "8192:240:x y"])
def test_a_bad_device_spec_is_refused(spec: str) -> None:
    with pytest.raises(CommandFailed) as info:
        run([DEVICES, "--device", spec], timeout_s=10)
    assert info.value.returncode == 2
    assert "MEMORY_MIB:THREADS[:MODEL]" in info.value.stderr


def write_ads(tmp: Path, job: str, machine: str) -> dict[str, str]:
    (tmp / "job.ad").write_text(job)
    (tmp / "machine.ad").write_text(machine)
    return {"_CONDOR_JOB_AD": str(tmp / "job.ad"), "_CONDOR_MACHINE_AD": str(tmp / "machine.ad"),
            "_CONDOR_WRAPPER_ERROR_FILE": str(tmp / "error"), "PATH": "/usr/bin:/bin",
            "COSHARE_NODE_HOOK": str(tmp / "no-hook")}


SHOW = ["/bin/sh", "-c", 'echo "$COSHARE_NODE;$COSHARE_DEVICES;$CUDA_VISIBLE_DEVICES;'
        '$OFFLOAD_DEVICES;$COSHARE_DEVICE_MEMORY;$COSHARE_DEVICE_THREADS"']


def test_wrapper_exposes_the_planned_devices(tmp_path: Path) -> None:
    env = write_ads(
        tmp_path,
        'CoshareManaged = true\nCosharePlacedNode = "node2"\nCosharePlacedDevices = "0,1"\n'
        'CoshareDeviceMemory = "2G"\nCoshareDeviceThreads = 60\n',
        'CoshareNodeName = "node2"\n')
    out = run([WRAPPER, *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out == "node2;0,1;0,1;0,1;2G;60"


def test_wrapper_refuses_a_job_that_started_on_another_node(tmp_path: Path) -> None:
    env = write_ads(tmp_path, 'CoshareManaged = true\nCosharePlacedNode = "node1"\n'
                    'CosharePlacedDevices = "0"\n', 'CoshareNodeName = "node2"\n')
    with pytest.raises(CommandFailed):
        run([WRAPPER, *SHOW], timeout_s=10, env=env)
    assert "planned for node \"node1\" started on \"node2\"" in (tmp_path / "error").read_text()


def test_wrapper_compares_quoted_names_exactly(tmp_path: Path) -> None:
    name = '"node4 \\" || true || \\""'
    env = write_ads(tmp_path, f'CoshareManaged = true\nCosharePlacedNode = {name}\n'
                    'CosharePlacedDevices = "1"\n', f"CoshareNodeName = {name}\n")
    out = run([WRAPPER, *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out.split(";")[:3] == ['node4 " || true || "', "1", "1"]


def test_wrapper_leaves_unmanaged_jobs_alone(tmp_path: Path) -> None:
    env = write_ads(tmp_path, "Owner = \"u\"\n", 'CoshareNodeName = "node2"\n')
    out = run([WRAPPER, *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out == ";;;;;"


def test_wrapper_runs_the_node_hook_when_installed(tmp_path: Path) -> None:
    env = write_ads(tmp_path, 'CoshareManaged = true\nCosharePlacedNode = "n"\n'
                    'CosharePlacedDevices = "0"\n', 'CoshareNodeName = "n"\n')
    hook = tmp_path / "hook"
    hook.write_text('#!/bin/sh\necho "hook saw $COSHARE_DEVICES"\nexec "$@"\n')
    hook.chmod(0o755)
    env["COSHARE_NODE_HOOK"] = str(hook)
    out = run([WRAPPER, "/bin/echo", "job"], timeout_s=10, env=env).stdout.split("\n")
    assert out[:2] == ["hook saw 0", "job"]


def test_wrapper_refuses_device_ids_that_are_not_plain(tmp_path: Path) -> None:
    env = write_ads(tmp_path, 'CoshareManaged = true\nCosharePlacedNode = "n"\n'
                    'CosharePlacedDevices = "0;rm -rf /"\n', 'CoshareNodeName = "n"\n')
    with pytest.raises(CommandFailed):
        run([WRAPPER, *SHOW], timeout_s=10, env=env)
    assert "not a plain id list" in (tmp_path / "error").read_text()
