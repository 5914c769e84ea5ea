"""Configuration: defaults < file < environment < flags; unknown keys list the valid ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.config import Config, load_config, with_overrides
from coshare.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_without_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    assert load_config(None, environ={}) == Config()
    assert load_config(write(tmp_path, ""), environ={}) == Config()


def test_file_values_are_loaded_into_frozen_dataclasses(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "device_kinds:\n  mic: {memory_mib: 8192, threads: 240}\n"
                        "policy: {name: random, threads: soft, age_limit_s: null}\n"
                        "knapsack: {memory_grid_mib: 50}\n"),
        environ={},
    )  # fmt: skip
    assert config.device_kinds["mic"].threads == 240
    assert (config.policy.name, config.policy.threads, config.policy.age_limit_s) == (
        "random",
        "soft",
        None,
    )
    assert config.knapsack.memory_grid_mib == 50
    with pytest.raises(AttributeError):
        config.policy.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "polcy: {}\n",
            "unknown key 'polcy' (valid keys: cycle, device_kinds, knapsack, policy, slurm)",
        ),
        (
            "policy: {nmae: x}\n",
            "policy: unknown key 'nmae' (valid keys: age_limit_s, "
            "max_reserved_devices, name, seed, threads)",
        ),
        ("policy: {threads: lax}\n", "policy.threads: 'lax' is not one of 'strict', 'soft'"),
        ("policy: {seed: one}\n", "policy.seed: expected an integer, got 'one'"),
        ("knapsack: {memory_grid_mib: 0}\n", "knapsack.memory_grid_mib: 0 is below the minimum 1"),
        ("device_kinds: {mic: {memory_mib: 1}}\n", "device_kinds.mic: missing key 'threads'"),
        ("- a\n", "expected a mapping of sections"),
        ("policy: [\n", "not valid YAML"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert expected in str(info.value)
    assert str(tmp_path / "c.yaml") in str(info.value)


def test_environment_overrides_the_file_and_flags_override_both(tmp_path: Path) -> None:
    path = write(tmp_path, "policy: {name: random, seed: 1}\n")
    config = load_config(
        path, environ={"COSHARE_POLICY_SEED": "7", "COSHARE_KNAPSACK_MEMORY_GRID_MIB": "32"}
    )
    assert (config.policy.name, config.policy.seed, config.knapsack.memory_grid_mib) == (
        "random",
        7,
        32,
    )
    flagged = with_overrides(config, "policy", name="knapsack", seed=None)
    assert (flagged.policy.name, flagged.policy.seed) == ("knapsack", 7)
    with pytest.raises(ConfigError, match=r"policy\.threads"):
        with_overrides(config, "policy", threads="lax")


def test_config_file_from_the_environment_and_bad_variables(tmp_path: Path) -> None:
    path = write(tmp_path, "policy: {name: exclusive}\n")
    assert load_config(None, environ={"COSHARE_CONFIG": str(path)}).policy.name == "exclusive"
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(None, environ={"COSHARE_CONFIG": str(tmp_path / "missing.yaml")})
    with pytest.raises(ConfigError, match="COSHARE_POLCY_NAME names no setting"):
        load_config(None, environ={"COSHARE_POLCY_NAME": "x"})
    with pytest.raises(ConfigError, match="policy: unknown key 'nam'"):
        load_config(None, environ={"COSHARE_POLICY_NAM": "x"})
