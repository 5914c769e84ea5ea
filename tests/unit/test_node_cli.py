"""``coshare node``: bad input gets one message and exit status 2 (CliRunner, no root)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli import cli


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    (tmp_path / "c.yaml").write_text("")
    monkeypatch.setenv("COSHARE_CONFIG", str(tmp_path / "c.yaml"))
    monkeypatch.setenv("COSHARE_NODE_STATE_DIR", str(tmp_path / "state"))
    return CliRunner()


def test_node_commands_are_listed(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["node", "--help"])
    assert result.exit_code == 0
    for command in ("gate", "offload", "job-start", "job-exec", "job-end", "job-run", "check"):
        assert command in result.output


def test_bad_job_id_is_refused_before_anything_is_made(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["node", "job-start", "--job", "../etc", "--cores", "1"])
    assert result.exit_code == 2
    assert "job id '../etc' is not usable" in result.output


def test_gate_without_devices_says_how_to_give_them(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["node", "gate"])
    assert result.exit_code == 2
    assert "--device ID=THREADS" in result.output
    result = runner.invoke(cli, ["node", "gate", "--device", "0:240"])
    assert result.exit_code == 2 and "expected ID=THREADS" in result.output


def test_exec_of_a_job_never_started_says_so(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["node", "job-exec", "--job", "9.0", "--", "true"])
    assert result.exit_code == 1
    assert "job 9.0 was not started on this node" in result.output


def test_offload_without_a_gate_says_where_it_looked(runner: CliRunner, tmp_path: Path) -> None:
    sock = tmp_path / "none.sock"
    result = runner.invoke(cli, ["node", "offload", "--socket", str(sock), "--", "true"])
    assert result.exit_code == 1
    assert f"unreachable: no gate at {sock}" in result.output
