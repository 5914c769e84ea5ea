"""The node side: what the TaskProlog exports, and that the programs never fail a job."""

from __future__ import annotations

import pytest
from coshare.config import SlurmConfig

from slurm_addon import prolog
from slurm_addon.client import SlurmClient
from slurm_addon.placement import Placement, format_placement

from ..contract.slurm_recorder import Recorder, ok

P = Placement("csl-n1", ("0", "1"), 5, 2048, 120)


def test_task_environment_selects_the_placed_devices() -> None:
    lines = prolog.task_environment(P, "csl-n1")
    assert "export CUDA_VISIBLE_DEVICES=0,1" in lines
    assert "export OFFLOAD_DEVICES=0,1" in lines and "export GPU_DEVICE_ORDINAL=0,1" in lines
    assert "export COSHARE_DEVICE_MEMORY_MIB=2048" in lines
    assert not any(line.startswith("print") for line in lines)


def test_cpu_job_sees_no_device_and_a_moved_job_is_warned() -> None:
    lines = prolog.task_environment(Placement("n2", (), 5, 0, 0), "n3")
    assert "export CUDA_VISIBLE_DEVICES=" in lines
    assert lines[-1].startswith("print coshare: warning: this job was placed on n2 but runs on n3")


def client_answering(text: str) -> tuple[SlurmClient, Recorder]:
    runner = Recorder(lambda argv, stdin: ok(argv, text + "\n"))
    return SlurmClient(SlurmConfig(), runner=runner, environ={}), runner


def test_read_placement_asks_for_one_jobs_admin_comment() -> None:
    c, runner = client_answering(format_placement(P))
    assert prolog.read_placement({"SLURM_JOB_ID": "42"}, c) == P
    assert runner.calls[0][0] == [
        "squeue", "--noheader", "--jobs", "42", "--Format", "admin_comment:0",
    ]  # fmt: skip
    assert prolog.read_placement({}, c) is None
    assert prolog.read_placement({"SLURM_JOB_ID": "42"}, client_answering("")[0]) is None


def test_task_prolog_prints_exports(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr(prolog, "read_placement", lambda environ: P)
    monkeypatch.setenv("SLURMD_NODENAME", "csl-n1")
    prolog.task_prolog_main()
    assert "export CUDA_VISIBLE_DEVICES=0,1" in capsys.readouterr().out


def test_programs_never_fail_the_job(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def broken(environ: object) -> None:
        raise RuntimeError("squeue exploded")

    monkeypatch.setattr(prolog, "read_placement", broken)
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    prolog.prolog_main()  # no exception: a failing Prolog would drain the node
    assert "prolog of job 9: squeue exploded" in capsys.readouterr().err

    def hook_fails(job_id: str, node: str) -> None:
        raise OSError("cgroup gone")

    monkeypatch.setattr(prolog.node_hooks, "on_job_end", hook_fails)
    prolog.epilog_main()
    assert "epilog of job 9: cgroup gone" in capsys.readouterr().err
