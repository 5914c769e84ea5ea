"""Configuration: defaults < file < environment < flags; unknown keys list the valid ones."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from pathlib import Path
from typing import Any

import pytest
from coshare.config import (
    Config,
    ConfigWarning,
    DeviceKind,
    _range,
    build,
    load_config,
    to_dict,
    with_overrides,
)
from coshare.errors import ConfigError
from coshare.ledger.bounds import plain


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
        write(
            tmp_path,
            "device_kinds:\n  mic: {memory_mib: 8192, threads: 240}\n"
            "policy: {name: random, threads: soft, age_limit_s: null}\n"
            "knapsack: {memory_grid_mib: 50}\n",
        ),
        environ={},
    )
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
            "unknown key 'polcy' (valid keys: "
            + ", ".join(sorted(f.name for f in dataclasses.fields(Config)))
            + ")",
        ),
        (
            "policy: {nmae: x}\n",
            "policy: unknown key 'nmae' (valid keys: age_limit_s, "
            "max_reserved_devices, max_reserved_gangs, membw, name, order, priority_band, "
            "seed, sns, threads)",
        ),
        ("policy: {threads: lax}\n", "policy.threads: 'lax' is not one of 'strict', 'soft'"),
        ("policy: {seed: one}\n", "policy.seed: expected an integer, got 'one'"),
        (
            "knapsack: {memory_grid_mib: 0}\n",
            "knapsack.memory_grid_mib: 0 is out of range (allowed: an integer 1..1048576)",
        ),
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
    # Not settings: ignored, with a warning naming the nearest setting.
    with pytest.warns(ConfigWarning, match="COSHARE_POLCY_NAME .*did you mean COSHARE_POLICY_NAME"):
        assert load_config(None, environ={"COSHARE_POLCY_NAME": "x"}) == Config()
    with pytest.warns(ConfigWarning, match="COSHARE_POLICY_NAM is not a setting"):
        assert load_config(None, environ={"COSHARE_POLICY_NAM": "x"}) == Config()
    with pytest.warns(ConfigWarning, match="the node section's keys are .*state_dir"):
        load_config(None, environ={"COSHARE_NODE_FLAVOUR": "x"})


def test_node_section_takes_files_and_environment(tmp_path: Path) -> None:
    text = "node: {devices: {'0': 240, phi1: 244}, cgroup_version: v1}\n"
    config = load_config(write(tmp_path, text), environ={"COSHARE_NODE_STATE_DIR": "/tmp/x"})
    assert dict(config.node.devices) == {"0": 240, "phi1": 244}
    assert config.node.cgroup_version == "v1"
    assert config.node.state_dir == "/tmp/x"
    assert config.node.gate_socket == "/run/coshare/gate.sock"
    with pytest.raises(ConfigError, match=r"node\.device_memory: 'cuda' is not one of"):
        load_config(write(tmp_path, "node: {device_memory: cuda}\n"), environ={})


# -- every number finite and in range, keys once, YAML errors as one message -----------------


def numeric_settings() -> list[tuple[str, str, dataclasses.Field[Any]]]:
    """Every numeric setting of every section: (section, key, field)."""
    out = []
    hints = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        cls = hints[section.name]
        if not dataclasses.is_dataclass(cls):
            cls = DeviceKind
        for f in dataclasses.fields(cls):
            hint = str(typing.get_type_hints(cls)[f.name])
            if "int" in hint or "float" in hint:
                out.append((section.name, f.name, f))
    return out


@pytest.mark.parametrize(
    ("section", "key", "spec"), numeric_settings(), ids=lambda v: v if isinstance(v, str) else ""
)
@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf", "1e400", "-1", "above"])
def test_every_numeric_setting_refuses_nan_infinity_and_out_of_range_naming_key_and_range(
    tmp_path: Path, section: str, key: str, spec: dataclasses.Field[Any], bad: str
) -> None:
    low, high = _range(key, spec.metadata)
    if bad == "-1" and low < 0:
        return
    if bad == "above":
        bad = str(int(high) * 10 + 1)
    if section == "device_kinds":
        other = "threads" if key == "memory_mib" else "memory_mib"
        text = f"device_kinds: {{mic: {{{other}: 1, {key}: {bad}}}}}\n"
        path = "device_kinds.mic." + key
    elif key == "devices":
        text, path = f"node: {{devices: {{'0': {bad}}}}}\n", "node.devices.0"
    elif key in ("trusted_launcher_uids", "operator_uids"):
        text, path = f"node: {{{key}: [{bad}]}}\n", f"node.{key}[0]"
    else:
        text, path = f"{section}: {{{key}: {bad}}}\n", f"{section}.{key}"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    message = str(info.value)
    assert f"{path}: " in message and f"..{plain(high)})" in message, message


@pytest.mark.parametrize("section", ["policy", "cycle", "slurm", "node", "coordination"])
def test_every_default_is_within_its_own_range(section: str) -> None:
    # build() checks the defaults too when they are written out and read back.
    defaults = {section: to_dict(getattr(Config(), section))}
    assert build(Config, defaults) == Config()


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            write(tmp_path, "policy:\n  name: knapsack\n  seed: 1\n  name: random\n"), environ={}
        )
    assert "key 'name' appears twice (first on line 2)" in str(info.value)
    assert "line 4" in str(info.value)


def test_merge_keys_still_override_what_they_merge(tmp_path: Path) -> None:
    text = "device_kinds:\n  a: &a {memory_mib: 1, threads: 2}\n  b: {<<: *a, threads: 3}\n"
    config = load_config(write(tmp_path, text), environ={})
    assert config.device_kinds["b"] == DeviceKind(memory_mib=1, threads=3)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[unclosed", "not valid YAML"),
        ("{a: 1, a: 2}", "appears twice"),
        ("9" * 5000, "too many digits"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
)
def test_bad_yaml_in_an_environment_variable_names_the_variable(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, environ={"COSHARE_POLICY_SEED": value, "COSHARE_CONFIG": "/dev/null"})
    assert "environment variable COSHARE_POLICY_SEED" in str(info.value)
    assert says in str(info.value)


def test_text_settings_refuse_control_characters_and_huge_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, 'slurm: {lock_file: "/run/x\\n/etc/passwd"}\n'), environ={})
    assert "slurm.lock_file: " in str(info.value) and "\\n" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "policy: {name: " + "x" * 100_000 + "}\n"), environ={})
    assert "longer than 1024 characters" in str(info.value) and len(str(info.value)) < 400
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "node: {devices: {' 0': 240}}\n"), environ={})
    assert "node.devices: the name ' 0' has white space at its start or end" in str(info.value)


def test_a_file_that_is_not_utf8_is_one_message(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"policy: {name: \xff}\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path, environ={})


def test_coshare_variables_that_are_not_settings_are_left_alone() -> None:
    # With COSHARE_TRACE_DIR set (as the suite is run), every node command refused to start;
    # a coshare tool run inside a job sees the variables the node helpers export to it.
    environ = {
        "COSHARE_TRACE_DIR": "/x",
        "COSHARE_NODE": "n1",
        "COSHARE_DEVICES": "0",
        "COSHARE_CPUS": "0-1",
        "COSHARE_JOB_ID": "7",
        "COSHARE_CONFIG": "/dev/null",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning for these
        assert load_config(None, environ=environ) == Config()
    # any other COSHARE_ variable is no setting either: ignored, and said (it may be a slip)
    unrelated = {"COSHARE_X": "1", "COSHARE_MY_TOOL_HOME": "/opt", "COSHARE_": ""}
    with pytest.warns(ConfigWarning) as said:
        assert load_config(None, environ={**environ, **unrelated}) == Config()
    assert sorted(str(w.message).split()[2] for w in said) == sorted(unrelated)
    # a setting's variable is still read, and a bad value of one still refused
    assert (
        load_config(None, environ={**environ, "COSHARE_POLICY_NAME": "random"}).policy.name
        == "random"
    )
    with pytest.raises(ConfigError, match="environment variable COSHARE_POLICY_SEED"):
        load_config(None, environ={**environ, "COSHARE_POLICY_SEED": "[1"})
    # renamed keys keep working from the environment too
    with pytest.warns(FutureWarning, match="condor.retries is deprecated"):
        assert load_config(None, environ={"COSHARE_CONDOR_RETRIES": "5"}).condor.retry_attempts == 5


def test_config_check_reports_every_problem_at_once(tmp_path: Path) -> None:
    text = (
        "policy: {name: knapsak, threads: lax, seed: -1}\n"
        "knapsack: {memory_grid_mib: 0}\ncycle: {replan_after_s: .nan, colour: red}\n"
        "nodes: {}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ={})
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'c.yaml'}: 7 problems:")
    for expected in (
        "config: unknown key 'nodes'",
        "policy.name: unknown policy 'knapsak' (did you mean knapsack? known: ",
        "policy.threads: 'lax' is not one of",
        "policy.seed: -1 is out of range",
        "knapsack.memory_grid_mib: 0 is out of range",
        "cycle.replan_after_s: nan is out of range",
        "cycle: unknown key 'colour'",
    ):
        assert expected in message, expected
    assert len(caught.value.problems) == 7  # type: ignore[attr-defined]


# -- coordination (several planners through PostgreSQL) ----------------------------------------
def test_coordination_is_absent_by_default() -> None:
    assert Config().coordination.dsn is None  # one planner, no engine: nothing changes


def test_active_cancellation_is_the_default_protocol_and_the_sequencer_a_choice(
    tmp_path: Path,
) -> None:
    assert Config().coordination.protocol == "cancel"
    config = load_config(write(tmp_path, "coordination: {protocol: sequencer}\n"), environ={})
    assert config.coordination.protocol == "sequencer"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "coordination: {lease_s: .nan}",
            "coordination.lease_s: nan is out of range (allowed: a number 1..86400)",
        ),
        ("coordination: {lease_s: 0.5}", "coordination.lease_s: 0.5 is out of range"),
        (
            "coordination: {connect_timeout_s: .inf}",
            "coordination.connect_timeout_s: inf is out of range (allowed: a number 0.1..300)",
        ),
        (
            "coordination: {domain: 'a b'}",
            "coordination.domain: 'a b' is not a name (allowed: 1..128 of A-Z",
        ),
        ("coordination: {instance: '-x'}", "coordination.instance: '-x' is not a name"),
        ("coordination: {dsn: 5}", "coordination.dsn: expected a string, got 5"),
        ("coordination: {lease: 5}", "coordination: unknown key 'lease'"),
        ("coordination: {protocol: paxos}", "coordination.protocol: 'paxos'"),
    ],
)
def test_bad_coordination_settings_are_refused_by_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text + "\n"), environ={})
    assert message in str(info.value), str(info.value)


def test_coordination_settings_from_the_environment() -> None:
    config = load_config(
        None,
        environ={
            "COSHARE_COORDINATION_DSN": "host=/run/pg port=5433",
            "COSHARE_COORDINATION_LEASE_S": "45",
        },
    )
    assert config.coordination.dsn == "host=/run/pg port=5433"
    assert config.coordination.lease_s == 45.0


def test_a_dsn_that_is_no_connection_string_is_a_config_error() -> None:
    from coshare.coord.engine import address_of

    assert address_of("host=/run/pg port=5433 password=secret") == "/run/pg:5433"
    assert address_of("postgresql://u:secret@db.example:6000/coshare") == "db.example:6000"
    with pytest.raises(ConfigError, match=r"coordination\.dsn: not a PostgreSQL connection"):
        address_of("nonsense")


def test_two_keys_that_name_one_device_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, 'node:\n  devices: {0: 240, "0": 60}\n'), environ={})
    assert "node.devices: the name '0' is given twice" in str(caught.value)


def test_a_config_of_comments_only_is_an_empty_config(tmp_path: Path) -> None:
    commented = load_config(
        write(tmp_path, "# nothing set yet\n# policy: {name: random}\n"), environ={}
    )
    assert commented == load_config(write(tmp_path, ""), environ={}) == Config()
