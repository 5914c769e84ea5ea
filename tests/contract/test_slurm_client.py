"""The Slurm client's edge: retries while slurmctld is unreachable (instant, injected sleep),
errors translated into coshare's tree, SLURM_CONF passed on."""

from __future__ import annotations

import pytest
from coshare.config import SlurmConfig
from coshare.errors import CommandFailed

from slurm_addon.client import SlurmClient
from slurm_addon.errors import SlurmControllerDown

from .slurm_recorder import Recorder, ok, recorded


def client(answer, attempts: int = 3, sleeps: list[float] | None = None, **kw):  # type: ignore[no-untyped-def]
    runner = Recorder(answer)
    config = SlurmConfig(retry_attempts=attempts, retry_wait_s=0.5, **kw)
    sink = sleeps if sleeps is not None else []
    return SlurmClient(config, runner=runner, sleep=sink.append, environ={"PATH": "/bin"}), runner


def test_reads_recorded_outputs_and_passes_slurm_conf() -> None:
    c, runner = client(
        lambda a, s: ok(a, recorded("squeue-mixed.json")),
        config_file="/x/slurm.conf",
        bin_dir="/opt/slurm/bin",
    )
    assert len(c.read_jobs()) == 11
    assert runner.calls[0][0] == ["/opt/slurm/bin/squeue", "--json"]


def test_controller_down_is_retried_then_raised() -> None:
    sleeps: list[float] = []
    c, runner = client(lambda a, s: ok(a, recorded("squeue-controller-down.json")), sleeps=sleeps)
    with pytest.raises(SlurmControllerDown, match="slurmctld is not answering"):
        c.read_jobs()
    assert len(runner.calls) == 3 and sleeps == [0.5, 1.0]


def test_recovery_within_the_retries() -> None:
    answers = iter([recorded("squeue-controller-down.json"), recorded("squeue-mixed.json")])
    c, runner = client(lambda a, s: ok(a, next(answers)))
    assert len(c.read_jobs()) == 11 and len(runner.calls) == 2


def test_ping_down_and_timeouts_count_as_controller_down() -> None:
    c, _ = client(lambda a, s: ok(a, recorded("scontrol-ping-down.txt"), code=1), attempts=1)
    with pytest.raises(SlurmControllerDown):
        c.ping()

    def hang(argv: list[str], stdin: str | None) -> object:
        raise CommandFailed(argv, None, "", "\n(timed out)")

    c, runner = client(hang, attempts=2)
    with pytest.raises(SlurmControllerDown, match="timed out"):
        c.read_nodes()
    assert len(runner.calls) == 2


def test_a_missing_program_is_not_retried() -> None:
    def missing(argv: list[str], stdin: str | None) -> object:
        raise CommandFailed(argv, None, "", "cannot run squeue: No such file or directory")

    c, runner = client(missing)
    with pytest.raises(CommandFailed, match="cannot run squeue"):
        c.read_jobs()
    assert len(runner.calls) == 1


def test_release_returns_per_job_errors_from_recorded_output() -> None:
    c, runner = client(lambda a, s: ok(a, "", recorded("scontrol-release-errors.txt"), code=1))
    errors = c.release(["1", "99998", "5"])
    assert set(errors) == {"1", "99998"}
    assert runner.calls[0][0] == ["scontrol", "release", "1,99998,5"]


def test_script_goes_on_stdin() -> None:
    def answer(argv: list[str], stdin: str | None):  # type: ignore[no-untyped-def]
        if argv[1:] == ["ping"]:
            return ok(argv, "Slurmctld(primary) at vm is UP\n")
        return ok(argv, "", recorded("scontrol-batch-errors.txt"), code=1)

    c, runner = client(answer)
    errors = c.run_script(["update JobId=3 ReqNodeList=n1 AdminComment=x\n"])
    assert "3" in errors
    assert runner.calls == [(["scontrol"], "update JobId=3 ReqNodeList=n1 AdminComment=x\n")]
