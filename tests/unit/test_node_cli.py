"""``coshare node``: bad input gets one message and exit status 2 (CliRunner, no root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli


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


def test_attach_to_a_job_never_started_says_so_and_moves_nothing(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["node", "job-attach", "--job", "9.0", "1"])
    assert result.exit_code == 1
    assert "job 9.0 was not started on this node" in result.output
    bad = runner.invoke(cli, ["node", "job-attach", "--job", "9.0", "abc"])
    assert bad.exit_code == 2 and "abc" in bad.output


def test_offload_without_a_gate_says_where_it_looked(runner: CliRunner, tmp_path: Path) -> None:
    sock = tmp_path / "none.sock"
    result = runner.invoke(cli, ["node", "offload", "--socket", str(sock), "--", "true"])
    assert result.exit_code == 1
    assert f"unreachable: no gate at {sock}" in result.output


def test_launch_without_a_node_daemon_says_so_and_runs_nothing(
    runner: CliRunner, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    result = runner.invoke(
        cli,
        [
            "node",
            "launch",
            "run",
            "--socket",
            str(tmp_path / "no.sock"),
            "--job",
            "5.0",
            "--cores",
            "1",
            "--",
            "touch",
            str(marker),
        ],
    )
    assert result.exit_code == 1
    assert (
        "coshare could not set up job 5.0 on this node (unreachable): no coshare node "
        "daemon at" in result.output
    )
    assert not marker.exists()
    bad = runner.invoke(
        cli,
        [
            "node",
            "launch",
            "run",
            "--socket",
            "s",
            "--job",
            "5",
            "--device-memory",
            "lots",
            "--",
            "true",
        ],
    )
    assert bad.exit_code == 1 and "device memory: 'lots' is not a size" in bad.output


def test_cleanup_without_cgroups_says_what_is_missing(runner: CliRunner) -> None:
    env = {"COSHARE_NODE_CGROUP_ROOT": "/nonexistent"}
    result = runner.invoke(cli, ["node", "cleanup"], env=env)
    assert result.exit_code == 1 and "no cgroups at /nonexistent" in result.output


def test_a_coshare_command_inside_a_job_reads_its_config(runner: CliRunner, tmp_path: Path) -> None:
    # What job-exec, coshare-launch and the TaskProlog export into a job's environment, and
    # COSHARE_TRACE_DIR, are not settings: they must not make the configuration unreadable.
    job_env = {
        "COSHARE_JOB_ID": "7",
        "COSHARE_NODE": "n1",
        "COSHARE_DEVICES": "0",
        "COSHARE_CPUS": "0-1",
        "COSHARE_GATE_SOCKET": "/run/coshare/gate.sock",
        "COSHARE_DEVICE_MEMORY": "2G",
        "COSHARE_DEVICE_MEMORY_MIB": "2048",
        "COSHARE_DEVICE_THREADS": "60",
        "COSHARE_TRACE_DIR": str(tmp_path),
    }
    result = runner.invoke(cli, ["config", "show"], env=job_env)
    assert result.exit_code == 0, result.output
    assert f"state_dir: {tmp_path / 'state'}" in result.output


def test_the_node_daemons_unit_restarts_it_for_good() -> None:
    # The daemon exits 1 when its watchdog cannot run: systemd must start a fresh
    # one, however often, and give it the open files its connection limits count on.
    unit = (Path(__file__).parents[2] / "deploy" / "node" / "coshare-node.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    assert settings["Restart"] == "on-failure"
    assert settings["StartLimitIntervalSec"] == "0"
    assert int(settings["LimitNOFILE"]) >= 4 * 2 * 256


def test_node_commands_that_print_a_result_speak_json(runner: CliRunner, tmp_path: Path) -> None:
    # A faithful fake of a cgroup v2 mount: the controllers and cpus coshare reads.
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cpuset.cpus.effective").write_text("0-3\n")
    env = {
        "COSHARE_NODE_CGROUP_ROOT": str(root),
        "COSHARE_NODE_CGROUP_VERSION": "v2",
        "COSHARE_NODE_STATE_DIR": str(tmp_path / "state"),
    }
    checked = runner.invoke(cli, ["node", "check", "--output", "json"], env=env)
    assert checked.exit_code == 0, checked.output
    data = json.loads(checked.stdout)
    caps = {c["name"]: c for c in data["capabilities"]}
    assert caps["cgroups"]["status"] == "found", caps["cgroups"]
    assert runner.invoke(cli, ["node", "check", "--output", "table"], env=env).exit_code == 0
    cleaned = runner.invoke(cli, ["node", "cleanup", "--output", "json"], env=env)
    assert cleaned.exit_code == 0, cleaned.output
    assert json.loads(cleaned.stdout) == []


def test_the_watchdog_alone_logs_its_kills_as_json(runner: CliRunner, tmp_path: Path) -> None:
    # Every long-running command takes --log-format json; `coshare node watch`
    # (the watchdog without the gate) had no such option. A faithful fake of a cgroup v1
    # memory group: a job at its limit with its OOM killer off, which the watchdog kills.
    from tests.unit.test_node_watchdog import frozen_job

    frozen_job(tmp_path / "cg", tmp_path / "state", "frozen")
    env = {
        "COSHARE_NODE_CGROUP_ROOT": str(tmp_path / "cg"),
        "COSHARE_NODE_CGROUP_VERSION": "v1",
        "COSHARE_NODE_STATE_DIR": str(tmp_path / "state"),
    }
    result = runner.invoke(cli, ["node", "watch", "--once", "--log-format", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("coshare killed job frozen: its host memory")
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    killed = [r for r in lines if r.get("job") == "frozen"]
    assert killed and killed[0]["level"] == "warning"
    assert killed[0]["resource"] == "host_memory"
    assert killed[0]["message"].startswith("coshare killed job frozen: its host memory")


def test_node_trial_sends_trial_and_prints_the_daemons_answer(
    runner: CliRunner, tmp_path: Path
) -> None:
    from tests.unit.test_trials import serve_once

    got: list[bytes] = []
    sock = tmp_path / "control.sock"
    thread = serve_once(sock, b"OK job=8 share=0.2100 available=0.7900 gbps=3.2 cpus=0\n", got)
    result = runner.invoke(
        cli, ["node", "trial", "--socket", str(sock), "--job", "8", "--partners", "5,6"]
    )
    thread.join(5)
    assert got == [b"TRIAL job=8 partners=5,6\n"]
    assert result.exit_code == 0, result.output
    assert result.output == "OK job=8 share=0.2100 available=0.7900 gbps=3.2 cpus=0\n"
    refused = tmp_path / "refused.sock"
    thread = serve_once(refused, b"ERR not_allowed job 8: TRIAL is for operators\n", got)
    result = runner.invoke(
        cli, ["node", "trial", "--socket", str(refused), "--job", "8", "--partners", "5"]
    )
    thread.join(5)
    assert (result.exit_code, result.output) == (
        1,
        "ERR not_allowed job 8: TRIAL is for operators\n",
    )
    result = runner.invoke(
        cli,
        ["node", "trial", "--socket", str(tmp_path / "none.sock"), "--job", "8", "--partners", "5"],
    )
    assert result.exit_code == 1 and result.output.startswith(
        "ERR unreachable no coshare node daemon at "
    )


def test_node_trial_refuses_bad_ids_before_asking(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        cli,
        [
            "node",
            "trial",
            "--socket",
            str(tmp_path / "none.sock"),
            "--job",
            "8",
            "--partners",
            "5,x y",
        ],
    )
    assert result.exit_code == 2 and "job id 'x y' is not usable" in result.output
