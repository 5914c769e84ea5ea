"""The job-control protocol and its rules, pure: hostile requests and hostile callers."""

from __future__ import annotations

import argparse

import pytest
from coshare.ledger.annotations import parse_job
from coshare.node.control import launcher
from coshare.node.control.protocol import (
    ControlProtocolError,
    ControlRequest,
    format_start,
    parse_control,
    parse_control_reply,
)
from coshare.node.control.trust import (
    Refused,
    TrustPolicy,
    check_end,
    check_join,
    check_start,
    job_of_launcher,
)
from coshare.node.process import ProcessInfo, parse_stat, parse_uids
from hypothesis import given
from hypothesis import strategies as st

POLICY = TrustPolicy(("condor_starter", "/usr/sbin/slurmstepd"), (0, 4242))
STARTER = ProcessInfo(100, 1, 0, 0, 500, "/var/lib/chroot/usr/sbin/condor_starter")
LAUNCHER = ProcessInfo(200, 100, 1000, 1000, 600, "/usr/bin/python3.13")
CHILD = ProcessInfo(300, 200, 1000, 1000, 700, "/usr/bin/python3.13")
STEPD = ProcessInfo(400, 1, 0, 0, 800, "/usr/sbin/slurmstepd")
TASK = ProcessInfo(401, 400, 1000, 1000, 801, "/usr/sbin/slurmstepd")


def test_requests_parse_into_fields() -> None:
    request = parse_control(
        b"START job=12.0 cores=1.5 memory_mib=2048 devices=0,phi1 "
        b"device_memory_mib=1024 device_threads=60\r\n"
    )
    assert request == ControlRequest("START", "12.0", 1.5, 2048, ("0", "phi1"), 1024, 60)
    assert parse_control(format_start(request).encode()) == request
    assert parse_control(b"JOIN job=7 target=parent") == ControlRequest(
        "JOIN", "7", target="parent"
    )
    assert parse_control(b"end job=7") == ControlRequest("END", "7")
    assert parse_control(b"START job=7 devices=-").devices == ()
    assert parse_control(b"FREEZE job=7") == ControlRequest("FREEZE", "7")
    assert parse_control(b"thaw job=7\n") == ControlRequest("THAW", "7")
    ways = parse_control(b"START job=7 cores=2 llc_ways=4 membw_percent=30")
    assert (ways.llc_ways, ways.membw_percent) == (4, 30)
    assert parse_control(format_start(ways).encode()) == ways


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"", "empty request"),
        (
            b"STOP job=1",
            "unknown request 'STOP' (known: START, JOIN, END, FREEZE, THAW, LEND, RECLAIM, TRIAL)",
        ),
        (b"FREEZE", "FREEZE needs job=<id>"),
        (b"THAW job=1 cores=2", "THAW takes no field 'cores' (fields: job)"),
        (b"START job=1 llc_ways=0", "job 1: llc_ways='0' is not an integer in 1.."),
        (b"START cores=1", "START needs job=<id>"),
        (b"START job=../etc", "job id '../etc' is not usable"),
        (b"START job=1 cores=0", "job 1: cores='0' (allowed: a number > 0)"),
        (b"START job=1 cores=inf", "job 1: cores='inf'"),
        (b"START job=1 memory_mib=-5", "job 1: memory_mib='-5' is not an integer in 1.."),
        (b"START job=1 memory_mib=99999999999", "is not an integer"),
        (b"START job=1 devices=0,a;b", "job 1: devices: device id 'a;b' is not usable"),
        (b"START job=1 job=2", "field 'job' given twice"),
        (b"START job=1 target=self", "START takes no field 'target'"),
        (b"JOIN job=1 target=grandparent", "job 1: target='grandparent' (allowed: self, parent)"),
        (b"JOIN job=1 cores", "'cores' is not key=value"),
        (b"START job=1\x00", "requests hold no control characters"),
        (b"START job=\xff", "requests are ASCII"),
    ],
)
def test_bad_requests_are_refused_naming_the_job_and_field(line: bytes, message: str) -> None:
    with pytest.raises(ControlProtocolError) as info:
        parse_control(line)
    assert info.value.code == "bad_request" and message in info.value.text


def test_too_long_lines_are_refused() -> None:
    with pytest.raises(ControlProtocolError) as info:
        parse_control(b"START job=1 " + b"x" * 2000)
    assert info.value.code == "too_long"


@given(st.binary(max_size=400))
def test_any_line_parses_or_is_refused_with_a_code(line: bytes) -> None:
    try:
        request = parse_control(line)
    except ControlProtocolError as exc:
        assert exc.code in ("bad_request", "too_long") and exc.text
    else:
        assert request.verb in ("START", "JOIN", "END")


def test_replies_split_into_fields_and_a_reason() -> None:
    ok, fields, _ = parse_control_reply(
        "OK job=1 started=1 leftover=2 reason=coshare killed job 1: over 64 MiB (x=y)\n"
    )
    assert ok and fields == {
        "job": "1",
        "started": "1",
        "leftover": "2",
        "reason": "coshare killed job 1: over 64 MiB (x=y)",
    }
    assert parse_control_reply("ERR not_launcher job 1: no") == (
        False,
        {"code": "not_launcher"},
        "job 1: no",
    )


# -- the rules ------------------------------------------------------------------------------


def refused(call: object, *args: object) -> Refused:
    assert callable(call)
    with pytest.raises(Refused) as info:
        call(*args)
    return info.value


def test_a_launcher_is_a_trusted_program_of_a_trusted_account() -> None:
    assert POLICY.is_launcher(STARTER)  # a chroot's starter: matched by basename
    assert POLICY.is_launcher(STEPD)  # matched by its whole path
    assert not POLICY.is_launcher(ProcessInfo(5, 1, 1000, 1000, 1, "/home/u/condor_starter"))
    assert not POLICY.is_launcher(ProcessInfo(5, 1, 0, 0, 1, "/home/u/bin/slurmstepd"))
    assert not POLICY.is_launcher(ProcessInfo(5, 1, 0, 0, 1, None))
    assert not POLICY.is_launcher(None)


def test_start_only_from_a_launcher_outside_any_group() -> None:
    check_start(POLICY, "j", LAUNCHER, 1000, STARTER, None)
    check_start(POLICY, "j", LAUNCHER, 0, None, None)  # root may
    assert refused(check_start, POLICY, "j", LAUNCHER, 1000, CHILD, None).code == "not_launcher"
    assert refused(check_start, POLICY, "j", LAUNCHER, 1000, None, None).code == "not_launcher"
    inside = refused(check_start, POLICY, "j", LAUNCHER, 1000, STARTER, "other")
    assert inside.code == "in_group" and "inside job other's group" in inside.text
    assert refused(check_start, POLICY, "j", LAUNCHER, 0, STARTER, "other").code == "in_group"
    assert refused(check_start, POLICY, "j", None, 1000, STARTER, None).code == "gone"


def test_join_of_a_launchers_child_of_the_jobs_account() -> None:
    launcher_id = (LAUNCHER.pid, LAUNCHER.start_ticks)
    assert check_join(POLICY, "j", 1000, launcher_id, 1000, CHILD, LAUNCHER, None)
    assert not check_join(POLICY, "j", 1000, launcher_id, 1000, CHILD, LAUNCHER, "j")  # done
    # Another account's process, or asked by another account.
    other = ProcessInfo(300, 200, 1001, 1001, 700, "/usr/bin/python3")
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1001, other, LAUNCHER, None).code
        == "wrong_user"
    )
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1001, CHILD, LAUNCHER, None).code
        == "wrong_user"
    )
    setuid = ProcessInfo(300, 200, 1000, 0, 700, "/usr/bin/python3")  # euid 0
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1000, setuid, LAUNCHER, None).code
        == "wrong_user"
    )
    # Not a child of this job's launcher: of another process, or of a reused launcher pid.
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1000, CHILD, STARTER, None).code
        == "not_allowed"
    )
    reused = ProcessInfo(200, 100, 1000, 1000, 999, "/usr/bin/python3")
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1000, CHILD, reused, None).code
        == "not_allowed"
    )
    # Already in another job's group: never moved from one job into another.
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 1000, CHILD, LAUNCHER, "k").code
        == "in_group"
    )
    assert (
        refused(check_join, POLICY, "j", 1000, launcher_id, 0, CHILD, LAUNCHER, "k").code
        == "in_group"
    )


def test_join_of_a_task_of_a_job_root_started() -> None:
    # Slurm: the Prolog (root) started the job; the task's parent is slurmstepd, titled with it.
    assert check_join(POLICY, "77", 1000, None, 1000, TASK, STEPD, None, "77")
    assert (
        refused(check_join, POLICY, "77", 1000, None, 1000, CHILD, LAUNCHER, None, None).code
        == "not_allowed"
    )
    assert (
        refused(check_join, POLICY, "77", None, None, 1000, TASK, STEPD, None, "77").code
        == "not_allowed"
    )


def test_a_task_of_another_job_of_the_same_user_cannot_join() -> None:
    # The same user's task under the slurmstepd of job 78 asks to join job 77.
    other = refused(check_join, POLICY, "77", 1000, None, 1000, TASK, STEPD, None, "78")
    assert other.code == "not_allowed"
    assert "started by process 400 (slurmstepd, uid 0), which serves job 78" in other.text
    untitled = refused(check_join, POLICY, "77", 1000, None, 1000, TASK, STEPD, None, None)
    assert "which names no job in its title" in untitled.text
    assert check_join(POLICY, "77", 1000, None, 0, TASK, STEPD, None, "78")  # root may


def test_a_task_of_a_slurm_job_never_starts_a_job() -> None:
    task = refused(check_start, POLICY, "99", TASK, 1000, STEPD, None, "77")
    assert task.code == "not_launcher" and "is a task of Slurm job 77" in task.text
    check_start(POLICY, "99", TASK, 0, STEPD, None, "77")  # root may
    check_start(POLICY, "j", LAUNCHER, 1000, STARTER, None, None)  # HTCondor's starter: untitled


def test_end_by_the_launcher_or_root() -> None:
    launcher_id = (LAUNCHER.pid, LAUNCHER.start_ticks)
    check_end("j", launcher_id, LAUNCHER, 1000)
    check_end("j", None, None, 0)
    assert refused(check_end, "j", launcher_id, CHILD, 1000).code == "not_allowed"
    assert refused(check_end, "j", None, LAUNCHER, 1000).code == "not_allowed"


def test_slurmstepd_titles_name_their_job() -> None:
    assert job_of_launcher("slurmstepd: [1234.batch]") == "1234"
    assert job_of_launcher("slurmstepd: [77.0] -c x") == "77"
    assert job_of_launcher("slurmstepd: [77.extern]") == "77"
    assert job_of_launcher("condor_starter -f -a slot1_1") is None
    assert job_of_launcher("xslurmstepd: [1.0]") is None


def test_proc_files_parse() -> None:
    stat = "42 (a) b)) S 7 " + " ".join(str(n) for n in range(5, 25))
    assert parse_stat(stat) == ("S", 7, 22)
    assert parse_uids("Name:\tx\nUid:\t1000\t0\t0\t0\n") == (1000, 0)
    with pytest.raises(ValueError):
        parse_stat("garbage")
    with pytest.raises(ValueError):
        parse_uids("Name: x\n")


# -- the launcher's side of the protocol (standard library only) -----------------------------


def launch_args(**values: str) -> argparse.Namespace:
    base = {
        "job": "1.0",
        "cores": "",
        "memory_mib": "",
        "devices": "",
        "device_memory": "",
        "device_threads": "",
    }
    return argparse.Namespace(**{**base, **values})


def test_the_launchers_start_lines_are_requests_of_the_protocol() -> None:
    line = launcher.start_line(
        launch_args(
            cores="2", memory_mib="300", devices="0,1", device_memory='"2G"', device_threads='"60"'
        )
    )
    assert parse_control(line.encode()) == ControlRequest(
        "START", "1.0", 2.0, 300, ("0", "1"), 2048, 60
    )
    with pytest.raises(ValueError, match="device memory: 'lots' is not a size"):
        launcher.start_line(launch_args(device_memory="lots"))
    with pytest.raises(ValueError, match="device_threads '30 \\+ 30' is unusable"):
        launcher.start_line(launch_args(device_threads="30 + 30"))


@pytest.mark.parametrize("text", ["2048", "2G", "512M", "1.5G", "1.5GiB", "3 gb", "1T", "7.2"])
def test_the_launcher_reads_sizes_as_the_annotation_parser_does(text: str) -> None:
    job = parse_job("1", {"CoshareDeviceMemory": text, "CoshareDeviceThreads": 1})
    assert launcher.memory_mib(text) == job.device_memory_mib


def test_the_launcher_imports_only_the_standard_library() -> None:
    import ast
    import sys
    from pathlib import Path

    tree = ast.parse(Path(launcher.__file__).read_text())
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names


def test_classad_strings_are_quoted_for_chirp() -> None:
    assert launcher.classad_string('a "b" \\c') == '"a \\"b\\" \\\\c"'
