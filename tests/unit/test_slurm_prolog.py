"""The node side: what the TaskProlog exports, and that the programs never fail a job."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from coshare.config import SlurmConfig
from coshare.errors import CoshareError
from coshare.node.control import launcher
from coshare.node.control.launcher import task_prolog
from coshare.node.jobs import JobRecord
from coshare.node.spec import JobSpec
from coshare.system.programs import CommandResult, run

from slurm_addon import node_hooks, prolog
from slurm_addon.allocation import Allocation
from slurm_addon.client import SlurmClient
from slurm_addon.placement import Placement, format_placement

from ..contract.slurm_recorder import Recorder, ok

P = Placement("csl-n1", ("0", "1"), 5, 2048, 120)
RECORD = JobRecord(JobSpec("42", (0,)), "v1", "/sys/fs/cgroup", "coshare")


def test_task_environment_selects_the_placed_devices() -> None:
    lines, status = prolog.task_environment(P, "csl-n1", "42")
    assert status == 0
    assert "export CUDA_VISIBLE_DEVICES=0,1" in lines
    assert "export OFFLOAD_DEVICES=0,1" in lines and "export GPU_DEVICE_ORDINAL=0,1" in lines
    assert "export COSHARE_DEVICE_MEMORY_MIB=2048" in lines
    assert not any(line.startswith("print") for line in lines)


def test_cpu_job_sees_no_device_and_a_moved_job_is_refused() -> None:
    lines, status = prolog.task_environment(Placement("n2", (), 5, 0, 0), "n2", "7")
    assert status == 0 and "export CUDA_VISIBLE_DEVICES=" in lines
    lines, status = prolog.task_environment(Placement("n2", (), 5, 0, 0), "n3", "7")
    assert status == 1
    assert lines == [f"print coshare: {prolog.moved_job('7', Placement('n2', (), 5, 0, 0), 'n3')}"]
    assert lines[0].startswith("print coshare: job 7 was placed on n2 but starts on n3; ")


def client_answering(text: str) -> tuple[SlurmClient, Recorder]:
    runner = Recorder(lambda argv, stdin: ok(argv, text + "\n"))
    return SlurmClient(SlurmConfig(), runner=runner, environ={}), runner


def test_read_placement_asks_for_one_jobs_admin_comment() -> None:
    c, runner = client_answering(format_placement(P))
    assert prolog.read_placement({"SLURM_JOB_ID": "42"}, c) == P
    assert runner.calls[0][0] == [
        "squeue",
        "--noheader",
        "--jobs",
        "42",
        "--Format",
        "admin_comment:0",
    ]
    assert prolog.read_placement({}, c) is None
    assert prolog.read_placement({"SLURM_JOB_ID": "42"}, client_answering("")[0]) is None


def test_task_prolog_refuses_a_placed_job_without_its_group(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # No record of the job in the node's state directory: coshare's Prolog did not set it up
    # here (no node daemon), so the job coshare placed would run without its limits: refused.
    monkeypatch.setattr(prolog, "read_placement", lambda environ: P)
    monkeypatch.setenv("COSHARE_CONFIG", str(node_config_file(tmp_path)))
    monkeypatch.setenv("SLURMD_NODENAME", "csl-n1")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    with pytest.raises(SystemExit) as exited:
        prolog.task_prolog_main()
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert out.startswith("print coshare: job 42 cannot run on csl-n1: ")
    assert "without coshare's limits" in out and "export" not in out


def test_task_prolog_ignores_the_users_coshare_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The TaskProlog runs in the user's environment: COSHARE_NODE_* there must not point it
    # at another socket or state directory (nor break it).
    monkeypatch.setenv("COSHARE_NODE_CONTROL_SOCKET", "/tmp/not-the-daemon.sock")
    monkeypatch.setenv("COSHARE_NOT_A_SETTING", "1")
    monkeypatch.setenv("COSHARE_CONFIG", str(node_config_file(tmp_path)))
    config = prolog.node_config(dict(os.environ), user=True)
    assert config.control_socket == str(tmp_path / "state" / "control.sock")


def node_config_file(tmp: Path) -> Path:
    state = tmp / "state"
    path = tmp / "coshare.yaml"
    path.write_text(
        f"node: {{state_dir: {state}, control_socket: {state}/control.sock, "
        f"gate_socket: {state}/gate.sock, cgroup_root: {tmp / 'no-cgroups'}}}\n"
    )
    return path


def allocation_client(line: str) -> SlurmClient:
    return SlurmClient(
        SlurmConfig(), runner=Recorder(lambda argv, stdin: ok(argv, line)), environ={}
    )


def test_prolog_sets_up_a_placed_job_with_its_allocation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = []
    monkeypatch.setattr(
        prolog,
        "prolog_client",
        lambda environ: allocation_client(
            f"cpu=2,mem=1500M,node=1,billing=2|{format_placement(P)}"
        ),
    )
    monkeypatch.setattr(prolog.node_hooks, "on_job_start", lambda *a: calls.append(a) or RECORD)
    monkeypatch.setenv("COSHARE_CONFIG", str(node_config_file(tmp_path)))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_UID", "1000")
    prolog.prolog_main()
    ((config, job, placement, allocation, uid),) = calls
    assert (job, placement, allocation, uid) == ("42", P, Allocation(2, 1500), 1000)
    assert config.state_dir == str(tmp_path / "state")


def test_prolog_refuses_a_placed_job_that_starts_on_another_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The placement names csl-n1; Slurm starts the job on csl-n2 (its ReqNodeList was changed):
    # no group is made, and the TaskProlog fails the job with the reason.
    monkeypatch.setattr(
        prolog,
        "prolog_client",
        lambda environ: allocation_client(
            f"cpu=2,mem=1500M,node=1,billing=2|{format_placement(P)}"
        ),
    )
    monkeypatch.setattr(prolog.node_hooks, "on_job_start", lambda *a: pytest.fail("set up"))
    monkeypatch.setenv("COSHARE_CONFIG", str(node_config_file(tmp_path)))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_UID", "1000")
    monkeypatch.setenv("SLURMD_NODENAME", "csl-n2")
    prolog.prolog_main()
    config = prolog.node_config({"COSHARE_CONFIG": str(node_config_file(tmp_path))})
    lines, status = task_prolog(
        config.control_socket,
        config.gate_socket,
        config.state_dir,
        {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "csl-n2"},
    )
    assert status == 1
    assert lines == [
        "print coshare: job 42 cannot run on csl-n2: job 42 was placed on csl-n1 "
        "but starts on csl-n2; coshare planned its devices and limits for csl-n1 "
        "only, so it does not run here (cancel and resubmit it, or have an "
        "operator release it to be placed again)"
    ]


def test_prolog_leaves_jobs_without_a_placement_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        prolog, "prolog_client", lambda environ: allocation_client("cpu=1,mem=256M,node=1|(null)")
    )
    monkeypatch.setattr(prolog.node_hooks, "on_job_start", lambda *a: pytest.fail("called"))
    monkeypatch.setenv("SLURM_JOB_ID", "43")
    prolog.prolog_main()


def test_a_job_whose_group_cannot_be_made_is_failed_by_its_task_prolog(tmp_path: Path) -> None:
    # The Prolog cannot drain the node for one job; it records why, and the TaskProlog (as
    # the user) prints it into the job's output and exits 1, which fails that job only.
    config = prolog.node_config({"COSHARE_CONFIG": str(node_config_file(tmp_path))})
    with pytest.raises(CoshareError, match="no cgroups at"):
        node_hooks.on_job_start(config, "42", P, Allocation(1, 100), 1000)
    lines, status = task_prolog(
        config.control_socket,
        config.gate_socket,
        config.state_dir,
        {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "csl-n1"},
    )
    assert status == 1
    assert lines[0].startswith("print coshare: job 42 cannot run on csl-n1: no cgroups at")
    assert (
        task_prolog(
            config.control_socket, config.gate_socket, config.state_dir, {"SLURM_JOB_ID": "44"}
        )
        is None
    )  # not coshare's job: nothing


def test_epilog_tells_the_user_why_coshare_killed_the_job(tmp_path: Path) -> None:
    def answer(argv: list[str], stdin: str | None) -> CommandResult:
        if argv[0] == "squeue":
            return ok(argv, format_placement(P) + "\n")
        if argv[:2] == ["scontrol", "update"]:
            return ok(argv, stderr="Job has already finished for job 42", code=1)
        if argv[0] == "sacctmgr":
            return ok(argv, " Modified jobs...\n  42\n")
        if argv[:2] == ["scontrol", "show"]:
            return ok(argv, "JobId=42 JobName=x\n   StdErr=/home/u/out dir/42.err\n")
        return ok(argv)

    runner = Recorder(answer)
    client = SlurmClient(SlurmConfig(), runner=runner, environ={})
    appended = Recorder(lambda argv, stdin: ok(argv))
    problems = node_hooks.report_kill(
        client, "42", "coshare killed job 42: too much", 1000, 100, runner=appended
    )
    assert problems == []
    sacctmgr = next(argv for argv, _ in runner.calls if argv[0] == "sacctmgr")
    killed = "killed=coshare killed job 42: too much"
    assert sacctmgr[-1] == f"AdminComment={format_placement(P)};{killed}"
    ((argv, text),) = appended.calls
    assert argv[:4] == ["setpriv", "--reuid=1000", "--regid=100", "--clear-groups"]
    assert argv[4:] == [
        "dd",
        "of=/home/u/out dir/42.err",
        "oflag=append,nofollow",
        "conv=notrunc,nocreat",
        "status=none",
    ]
    assert text == "coshare: coshare killed job 42: too much\n"


def test_programs_never_fail_the_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(environ: object) -> None:
        raise RuntimeError("squeue exploded")

    monkeypatch.setattr(prolog, "prolog_client", broken)
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    prolog.prolog_main()  # no exception: a failing Prolog would drain the node
    assert "prolog of job 9: squeue exploded" in capsys.readouterr().err

    def hook_fails(config: object, job_id: str) -> None:
        raise OSError("cgroup gone")

    monkeypatch.setattr(prolog.node_hooks, "on_job_end", hook_fails)
    prolog.epilog_main()
    assert "epilog of job 9: cgroup gone" in capsys.readouterr().err


def test_the_deployed_task_prolog_runs_coshare_launch_with_the_system_python(
    tmp_path: Path,
) -> None:
    # Installed as an admin would: the script with coshare-launch next to it. A job with no
    # coshare record on this node (no /run/coshare/jobs/job-<id>.json) prints nothing.
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "node" / "coshare-task-prolog"
    shutil.copy(deploy, tmp_path / "coshare-task-prolog")
    shutil.copy(launcher.__file__, tmp_path / "coshare-launch")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "999999999", "SLURMD_NODENAME": "n1"}
    done = run([str(tmp_path / "coshare-task-prolog")], timeout_s=30, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
