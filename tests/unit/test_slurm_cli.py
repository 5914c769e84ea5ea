"""``coshare slurm``: registered lazily, the config section (and its renamed keys), and a busy
lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.config import load_config
from coshare.errors import ConfigError


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def test_slurm_group_is_listed_and_documented() -> None:
    result = CliRunner().invoke(cli, ["slurm", "--help"])
    assert result.exit_code == 0
    assert "cycle" in result.output and "show" in result.output


def test_slurm_section_from_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("slurm: {config_file: /etc/slurm/other.conf, workers: 4}\n")
    config = load_config(path, environ={"COSHARE_SLURM_PARTITION": "gpu"})
    assert config.slurm.config_file == "/etc/slurm/other.conf" and config.slurm.workers == 4
    assert config.slurm.partition == "gpu" and config.slurm.gres_name == "gpu"


def test_the_old_key_conf_still_works_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("slurm: {conf: /etc/slurm/other.conf}\n")
    with pytest.warns(FutureWarning, match="slurm.conf is deprecated.*slurm.config_file"):
        config = load_config(path, environ={})
    assert config.slurm.config_file == "/etc/slurm/other.conf"
    path.write_text("slurm: {conf: /a, config_file: /b}\n")
    with pytest.raises(ConfigError, match="same setting"):
        load_config(path, environ={})


def test_the_command_line_says_a_deprecated_key_once_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"slurm: {{conf: /x, lock_file: null, bin_dir: {tmp_path / 'none'}}}\n")
    result = CliRunner().invoke(cli, ["--config", str(path), "slurm", "cycle"])
    assert result.stderr.count("coshare: warning: config key slurm.conf is deprecated") == 1


def test_unknown_slurm_key_lists_the_valid_ones(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("slurm: {partiton: gpu}\n")
    result = CliRunner().invoke(cli, ["--config", str(path), "slurm", "cycle"])
    assert result.exit_code == 2
    assert "unknown key 'partiton'" in result.stderr and "partition" in result.stderr


def test_overlapping_cycle_does_nothing_and_exits_zero(tmp_path: Path) -> None:
    lock = tmp_path / "cycle.lock"
    path = tmp_path / "c.yaml"
    path.write_text(f"slurm: {{lock_file: {lock}, bin_dir: {tmp_path / 'nothing-here'}}}\n")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = CliRunner().invoke(cli, ["--config", str(path), "slurm", "cycle"])
    finally:
        os.close(fd)
    assert result.exit_code == 0 and "this one did nothing" in result.output


def test_missing_slurm_commands_give_one_message_and_status_1(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"slurm: {{lock_file: null, bin_dir: {tmp_path / 'nothing-here'}}}\n")
    result = CliRunner().invoke(cli, ["--config", str(path), "slurm", "cycle"])
    assert result.exit_code == 1
    assert "cannot run" in result.stderr and "Traceback" not in result.output


def test_deploy_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy/slurm/coshare.yaml.example"
    config = load_config(example, environ={})
    assert config.slurm.partition == "gpu" and "v100" in config.device_kinds
