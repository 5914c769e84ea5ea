"""The execute-node scripts (POSIX sh), run for real on ad files like the starter's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import classad2
import pytest
from coshare.errors import CommandFailed
from coshare.system.programs import run

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
    return {
        "_CONDOR_JOB_AD": str(tmp / "job.ad"),
        "_CONDOR_MACHINE_AD": str(tmp / "machine.ad"),
        "_CONDOR_WRAPPER_ERROR_FILE": str(tmp / "error"),
        "PATH": "/usr/bin:/bin",
    }


#: A stand-in coshare-launch that runs the job's command (what follows "--") as it is.
PASS_THROUGH = "import os, sys; cmd = sys.argv[sys.argv.index('--') + 1:]; os.execv(cmd[0], cmd)\n"


def installed_wrapper(tmp: Path, launcher: str | None = PASS_THROUGH) -> str:
    """The wrapper installed as `coshare deploy-files` writes it: next to coshare-launch
    (here a stand-in with ``launcher``'s code; ``None``: no coshare-launch)."""
    shutil.copy(WRAPPER, tmp / "coshare-job-wrapper")
    if launcher is not None:
        (tmp / "coshare-launch").write_text(launcher)
    return str(tmp / "coshare-job-wrapper")


SHOW = [
    "/bin/sh",
    "-c",
    'echo "$COSHARE_NODE;$COSHARE_DEVICES;$CUDA_VISIBLE_DEVICES;'
    '$OFFLOAD_DEVICES;$COSHARE_DEVICE_MEMORY;$COSHARE_DEVICE_THREADS"',
]


def test_wrapper_exposes_the_planned_devices(tmp_path: Path) -> None:
    env = write_ads(
        tmp_path,
        'CoshareManaged = true\nCosharePlacedNode = "node2"\nCosharePlacedDevices = "0,1"\n'
        'CoshareDeviceMemory = "2G"\nCoshareDeviceThreads = 60\n',
        'CoshareNodeName = "node2"\n',
    )
    out = run([installed_wrapper(tmp_path), *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out == "node2;0,1;0,1;0,1;2G;60"


def test_wrapper_refuses_a_managed_job_without_coshare_launch(tmp_path: Path) -> None:
    # Without coshare-launch the job would run with no group, cores, memory limit or gate.
    env = write_ads(
        tmp_path,
        'CoshareManaged = true\nCosharePlacedNode = "node2"\nCosharePlacedDevices = "0"\n',
        'CoshareNodeName = "node2"\n',
    )
    with pytest.raises(CommandFailed) as info:
        run([installed_wrapper(tmp_path, launcher=None), "/bin/echo", "ran"], timeout_s=10, env=env)
    assert "ran" not in info.value.stdout
    reason = (tmp_path / "error").read_text()
    assert reason.startswith("coshare: coshare-launch is not installed next to the job wrapper")
    assert "without coshare's limits" in reason and "coshare-launch" in info.value.stderr


def test_wrapper_refuses_a_job_that_started_on_another_node(tmp_path: Path) -> None:
    env = write_ads(
        tmp_path,
        'CoshareManaged = true\nCosharePlacedNode = "node1"\nCosharePlacedDevices = "0"\n',
        'CoshareNodeName = "node2"\n',
    )
    with pytest.raises(CommandFailed):
        run([WRAPPER, *SHOW], timeout_s=10, env=env)
    assert 'planned for node "node1" started on "node2"' in (tmp_path / "error").read_text()


def test_wrapper_compares_quoted_names_exactly(tmp_path: Path) -> None:
    name = '"node4 \\" || true || \\""'
    env = write_ads(
        tmp_path,
        f'CoshareManaged = true\nCosharePlacedNode = {name}\nCosharePlacedDevices = "1"\n',
        f"CoshareNodeName = {name}\n",
    )
    out = run([installed_wrapper(tmp_path), *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out.split(";")[:3] == ['node4 " || true || "', "1", "1"]


def test_wrapper_leaves_unmanaged_jobs_alone(tmp_path: Path) -> None:
    env = write_ads(tmp_path, 'Owner = "u"\n', 'CoshareNodeName = "node2"\n')
    out = run([WRAPPER, *SHOW], timeout_s=10, env=env).stdout.strip()
    assert out == ";;;;;"


ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))\n"


def wrapper_with_launcher(tmp: Path) -> str:
    """The wrapper installed next to a stand-in coshare-launch that prints its arguments."""
    return installed_wrapper(tmp, ARGV)


MANAGED = (
    'CoshareManaged = true\nCosharePlacedNode = "n"\nCosharePlacedDevices = "0,1"\n'
    'ClusterId = 12\nProcId = 3\nGlobalJobId = "sub@host#12.3#1700000000"\n'
    'CoshareDeviceMemory = "2G"\nCoshareDeviceThreads = 60\n'
)


def test_wrapper_runs_a_managed_job_through_coshare_launch(tmp_path: Path) -> None:
    env = write_ads(
        tmp_path,
        MANAGED + "RequestMemory = 300\n",
        'CoshareNodeName = "n"\nCpus = 2\nMemory = 384\nCoshareSocketDir = "/run/coshare/node2"\n',
    )
    out = run([wrapper_with_launcher(tmp_path), "/bin/echo", "a b"], timeout_s=10, env=env)
    assert json.loads(out.stdout) == [
        "run",
        "--socket",
        "/run/coshare/node2/control.sock",
        "--gate-socket",
        "/run/coshare/node2/gate.sock",
        "--job",
        "sub_host_12.3_1700000000",
        "--label",
        "12.3",
        "--cores",
        "2",
        "--memory-mib",
        "300",
        "--devices",
        "0,1",
        "--device-memory",
        "2G",
        "--device-threads",
        "60",
        "--chirp",
        "/usr/libexec/condor/condor_chirp",
        "--",
        "/bin/echo",
        "a b",
    ]


def test_wrapper_falls_back_to_the_slots_memory_and_the_default_sockets(tmp_path: Path) -> None:
    # HTCondor's default RequestMemory is an expression; the slot's Memory is a number. A
    # socket directory that is not a plain absolute path is not used.
    env = write_ads(
        tmp_path,
        MANAGED + "RequestMemory = ifThenElse(MemoryUsage > 0, 1, 2)\n",
        'CoshareNodeName = "n"\nCpus = 1\nMemory = 128\nCoshareSocketDir = "/tmp/$(x)"\n',
    )
    argv = json.loads(run([wrapper_with_launcher(tmp_path), "true"], timeout_s=10, env=env).stdout)
    assert argv[argv.index("--memory-mib") + 1] == "128"
    assert argv[argv.index("--socket") + 1] == "/run/coshare/control.sock"


def test_wrapper_runs_unmanaged_jobs_without_coshare_launch(tmp_path: Path) -> None:
    env = write_ads(tmp_path, 'Owner = "u"\n', 'CoshareNodeName = "n"\n')
    out = run([wrapper_with_launcher(tmp_path), "/bin/echo", "plain"], timeout_s=10, env=env)
    assert out.stdout == "plain\n"


def test_wrapper_refuses_device_ids_that_are_not_plain(tmp_path: Path) -> None:
    env = write_ads(
        tmp_path,
        'CoshareManaged = true\nCosharePlacedNode = "n"\nCosharePlacedDevices = "0;rm -rf /"\n',
        'CoshareNodeName = "n"\n',
    )
    with pytest.raises(CommandFailed):
        run([WRAPPER, *SHOW], timeout_s=10, env=env)
    assert "not a plain id list" in (tmp_path / "error").read_text()


def test_a_device_spec_with_a_second_line_is_refused() -> None:
    # grep checks each line on its own: "8192:240<newline>1:1" passed as two devices.
    with pytest.raises(CommandFailed) as info:
        run([DEVICES, "--device", "8192:240\n1:1"], timeout_s=10)
    assert info.value.returncode == 2


FACTS = str(DEPLOY / "coshare-facts")


def published(path: Path) -> tuple[str, str]:
    done = run(["sh", FACTS, "--file", str(path)], timeout_s=10)
    return done.stdout, done.stderr


def test_the_facts_line_is_published_as_one_classad_string(tmp_path: Path) -> None:
    from coshare.ledger.facts import JobLoad, NodeFacts, format_facts, parse_facts

    line = format_facts(
        NodeFacts(
            1_700_000_000.0,
            llc_ways=20,
            llc_ways_free=8,
            loads=(JobLoad("pool_vm_14.0_1795308474", 0.4, 0.5, 0.9, 600),),
        )
    )
    facts = tmp_path / "facts"
    facts.write_text(line + "\nsecond line ignored\n")
    out, _ = published(facts)
    ad = classad2.parseOne(out)
    assert list(ad) == ["CoshareNodeFacts"] and parse_facts(ad.eval("CoshareNodeFacts")).loads
    assert ad.eval("CoshareNodeFacts") == line
    assert published(tmp_path / "none") == ("", "")  # no file yet: nothing, and no error


@pytest.mark.parametrize(
    "text",
    [
        'coshare-facts;v=1;at=5;x="];Evil=1;["',
        "coshare-facts;v=1;at=5;x=\\\\",
        "rack=12",
        # longer than the 128 KiB a node may publish: refused whole, not cut short (a cut
        # window_s=3600 would read as 36)
        "coshare-facts;v=1;at=5;load="
        + ",".join(f"j{i}:0.500:0.500:1.000:3600" for i in range(5000)),
    ],
)
def test_a_facts_file_that_is_not_one_facts_line_is_not_published(
    tmp_path: Path, text: str
) -> None:
    facts = tmp_path / "facts"
    facts.write_text(text + "\n")
    out, err = published(facts)
    assert out == ""
    assert "nothing published" in err
