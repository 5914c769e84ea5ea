"""Hostile input through the command line: whatever an attacker or a careless admin
writes into a snapshot, a config or a trace ends in exit 2 with one message naming the place,
or in a correct plan; never a traceback, a hang or unbounded memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.cycle.verify import check_plan
from coshare.ledger.bounds import MAX_DEVICES
from coshare.policies import policy_names
from coshare.schema import MAX_SNAPSHOT_NODES, parse_plan, parse_snapshot
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin, env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback for {args}: {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr


def plan_text(text: str, *flags: str) -> tuple[int, str, str]:
    return run("plan", "-", *flags, stdin=text)


def one_error(err: str) -> str:
    """The error output is one ``coshare: error:`` message of bounded size."""
    assert err.startswith("coshare: error: "), err
    assert err.count("coshare: error:") == 1
    assert len(err) < 4000, len(err)
    return err


NODE = {
    "name": "n",
    "cores": 4,
    "memory_mib": 1000,
    "devices": [{"id": "0", "memory_mib": 1000, "threads": 8}],
}
JOB = {"id": "j", "device_memory_mib": 10, "device_threads": 1}


def snapshot(**parts: Any) -> str:
    return json.dumps({"nodes": [NODE], "pending": [JOB], **parts})


# -- hostile snapshots -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{}", "snapshot: missing field 'nodes'"),
        ('{"nodes": null}', "snapshot: missing field 'nodes'"),
        ('{"nodes": 5}', "snapshot: field 'nodes' is 5 (allowed: an array)"),
        ("[" * 100_000 + "]" * 100_000, "nested more deeply than"),
        ('{"nodes": [' + "9" * 5000 + "]}", "more than 4300 digits"),
        ('{"nodes": [], "pending": [NaN]}', "not valid JSON: NaN"),
        ('{"nodes": [], "nodes": []}', "key 'nodes' appears twice"),
        (snapshot(pending=[{**JOB, "id": "j\ud800"}]), "pending[0]: field 'id' is"),
        (snapshot(pending=[{**JOB, "id": "j\u001b[2J"}]), "holds the character '\\x1b'"),
        (snapshot(pending=[{**JOB, "id": "x" * 10**6}]), "is longer than 256 characters"),
    ],
)
def test_a_hostile_snapshot_is_one_message_and_exit_2(text: str, says: str) -> None:
    code, _, err = plan_text(text)
    assert code == 2
    assert says in one_error(err)


def test_cores_of_1e16_are_refused_with_the_bound() -> None:
    text = json.dumps({"nodes": [{**NODE, "cores": 1e16}], "pending": [JOB]})
    code, _, err = plan_text(text)
    assert code == 2
    assert "node \"n\": field 'cores' is 1e+16 (allowed: a number > 0 and <= 1048576)" in err


def test_a_node_of_more_devices_than_the_bound_is_refused_with_the_bound() -> None:
    # The JSON Schema and coshare.ledger.bounds said at most 1,024 devices a node, but the parser
    # took any number: 200,000 devices on one node (a 12 MB snapshot) planned for an hour.
    devices = [{"id": str(i), "memory_mib": 1000, "threads": 8} for i in range(1025)]
    code, _, err = plan_text(
        json.dumps({"nodes": [{**NODE, "devices": devices}], "pending": [JOB]})
    )
    assert code == 2
    assert "node \"n\": field 'devices' has 1025 entries (allowed: at most 1024)" in one_error(err)
    code, _, err = plan_text(
        json.dumps({"nodes": [{**NODE, "devices": devices[:1024]}], "pending": [JOB]})
    )
    assert code == 0, err


def test_more_nodes_than_the_schema_allows_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coshare.schema.MAX_SNAPSHOT_NODES", 3)
    nodes = [{**NODE, "name": f"n{i}"} for i in range(4)]
    code, _, err = plan_text(json.dumps({"nodes": nodes, "pending": [JOB]}))
    assert code == 2
    assert "snapshot: field 'nodes' has 4 entries (allowed: at most 3)" in one_error(err)


def test_the_parser_keeps_the_json_schemas_array_bounds() -> None:
    schema = json.loads(run("schema", "snapshot")[1])
    assert schema["properties"]["nodes"]["maxItems"] == MAX_SNAPSHOT_NODES
    assert schema["$defs"]["node"]["properties"]["devices"]["maxItems"] == MAX_DEVICES


def test_lone_surrogates_and_markup_in_ids_never_break_the_table() -> None:
    # rich markup in a name ("[/x]") used to raise MarkupError while printing the table.
    nodes = [{**NODE, "name": "n[/x]:smile:"}]
    code, out, err = plan_text(json.dumps({"nodes": nodes, "pending": [{**JOB, "id": "[/]"}]}))
    assert code == 0, err
    assert "n[/x]:smile:" in out and "[/]" in out


# -- capacity rounds down, demand up; ids differing in white space ---------------------------


def test_a_fractional_node_never_takes_a_job_of_more_cores() -> None:
    text = json.dumps(
        {
            "nodes": [{"name": "n", "cores": 3.9995, "memory_mib": 100}],
            "pending": [{"id": "j", "cores": 4}],
        }
    )
    code, out, err = plan_text(text, "--output", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["assignments"] == [] and plan["unplaced"][0]["job"] == "j"


def test_device_ids_that_differ_only_in_white_space_are_refused() -> None:
    devices = [
        {"id": "0", "memory_mib": 100, "threads": 4},
        {"id": " 0", "memory_mib": 100, "threads": 4},
    ]
    running = [{"id": "r", "node": "n", "device": "0", "device_memory_mib": 100}]
    text = json.dumps(
        {"nodes": [{**NODE, "devices": devices}], "running": running, "pending": [JOB]}
    )
    code, _, err = plan_text(text)
    assert code == 2
    assert "device[1]: field 'id' is \" 0\"" in err and "white space" in err


# -- NaN and infinities in config --------------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    [
        "policy: {age_limit_s: .nan}",
        "cycle: {replan_after_s: .nan}",
        "cycle: {replan_after_s: .inf}",
        "slurm: {retry_wait_s: -.inf}",
        "node: {watch_interval_s: .nan}",
        "cycle: {interval_s: 1e400}",
    ],
)
def test_nan_and_infinity_in_config_are_refused_naming_the_key(
    tmp_path: Path, setting: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(setting + "\n")
    code, _, err = run("config", "check", str(path))
    assert code == 2
    key = setting.split(":")[0] + "." + setting.split("{")[1].split(":")[0]
    assert key in one_error(err) and "allowed:" in err


def billion_laughs() -> str:
    """A YAML list of 9**9 strings in under 500 bytes: each anchor repeats the one before."""
    chain = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        chain.append(f"&{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "[" + ", ".join(chain) + "]"


def test_billion_laughs_config_is_refused_in_bounded_time_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(f"policy:\n  name: {billion_laughs()}\n")
    assert len(path.read_bytes()) < 500
    code, _, err = run("config", "check", str(path))
    assert code == 2
    assert "policy.name: expected a string, got [" in one_error(err)
    code, _, err = run("config", "show", env={"COSHARE_POLICY_NAME": billion_laughs()})
    assert code == 2
    assert "policy.name: expected a string" in one_error(err)


def test_yaml_errors_in_environment_variables_are_one_message() -> None:
    code, _, err = run("config", "show", env={"COSHARE_POLICY_SEED": "[unclosed"})
    assert code == 2
    assert "COSHARE_POLICY_SEED" in one_error(err)


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  name: knapsack\n  name: random\n")
    code, _, err = run("config", "check", str(path))
    assert code == 2
    assert "'name' appears twice" in one_error(err)


# -- unbounded work from small input -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--jobs", "1000000"], "one run would simulate 1000000 jobs (about 6835 MiB"),
        (["--workload", "pressure", "--jobs", "1000000"], "at most 100000 jobs per run"),
        (["--jobs", "50000", "--seeds", "20"], "would simulate 3000000 jobs; at most 2000000"),
        (["--sizes", "1-1000000000000", "--jobs", "10"], "sizes are node counts 1..10000"),
        (["--sizes", "1-100", "--jobs", "10"], "100 sizes; at most 64"),
    ],
)
def test_simulate_refuses_work_it_cannot_finish_with_the_estimate(
    args: list[str], says: str
) -> None:
    code, _, err = run("simulate", *args)
    assert code == 2
    assert says in one_error(err)


@pytest.mark.parametrize(
    "args",
    [
        ["--nodes", "1000000"],
        ["--seeds", "100000"],
        ["--workers", "100000"],
        ["--cycle-delay", "nan"],
        ["--age-limit", "inf"],
        ["--offload-share", "nan"],
    ],
)
def test_simulate_flags_out_of_range_are_click_errors_naming_the_flag(args: list[str]) -> None:
    code, _, err = run("simulate", "--jobs", "10", *args)
    assert code == 2
    assert f"Invalid value for '{args[0]}'" in err and "range" in err


def test_demo_refuses_a_run_it_cannot_finish() -> None:
    code, _, err = run("demo", "--jobs", "1000000")
    assert code == 2 and "at most 100000 jobs per run" in one_error(err)
    code, _, err = run("demo", "--nodes", "1000000000")
    assert code == 2 and "at most 10000 nodes" in one_error(err)


# -- SWF fields that are not finite, duplicate ids ---------------------------------------------


def swf(tmp_path: Path, *records: str) -> Path:
    path = tmp_path / "t.swf"
    path.write_text("\n".join(records) + "\n")
    (tmp_path / "t.swf.machines").write_text("1 m 2 4 1 1048576\n")
    return path


RECORD = "{id} {submit} 0 {run} 1 -1 -1 1 -1 -1 1 1 1 1 1 1 -1 -1"


@pytest.mark.parametrize(
    ("submit", "run_s"),
    [("0", "nan"), ("inf", "10"), ("0", "inf"), ("1e400", "10"), ("0", "١٠")],
)
def test_swf_fields_that_are_not_finite_numbers_are_refused(
    tmp_path: Path, submit: str, run_s: str
) -> None:
    path = swf(
        tmp_path,
        RECORD.format(id=1, submit=0, run=10),
        RECORD.format(id=2, submit=submit, run=run_s),
    )
    code, _, err = run("simulate", "--workload", f"trace:{path}")
    assert code == 2
    assert "line 2" in one_error(err)


def test_duplicate_swf_ids_name_the_id_and_both_lines(tmp_path: Path) -> None:
    path = swf(
        tmp_path,
        RECORD.format(id=1, submit=0, run=10),
        "; a comment",
        RECORD.format(id=1, submit=5, run=10),
    )
    code, _, err = run("simulate", "--workload", f"trace:{path}")
    assert code == 2
    assert "job 1" in one_error(err) and "line 1" in err and "line 3" in err


def test_swf_jobs_out_of_submit_order_are_refused_before_any_run(tmp_path: Path) -> None:
    # The replay streams the log and its engine stopped every run alike (exit 1, "6 runs
    # failed"); a log out of order is bad input, named by its line once.
    path = swf(
        tmp_path,
        RECORD.format(id=1, submit=100, run=10),
        "; a comment",
        RECORD.format(id=2, submit=0, run=10),
    )
    code, _, err = run("simulate", "--workload", f"trace:{path}")
    assert code == 2
    assert "line 3: job 2 submits at 0, before the job on line 1 (100)" in one_error(err)


# -- hostile JSON values anywhere: exit 2 or a sound plan ---------------------------------------

HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**60),
    st.integers(max_value=-(2**60)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 1e16, 0.5]),
    st.text(max_size=12),
    st.sampled_from(["", " 0", "0 ", "\ud800", "[/]", "0,1", "\n"]),
)
HOSTILE = st.recursive(
    HOSTILE_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def hostile_snapshots(draw: st.DrawFn) -> dict[str, Any]:
    """A valid snapshot with a few fields replaced by hostile values."""
    doc: dict[str, Any] = {
        "nodes": [
            {
                "name": "n1",
                "cores": 4,
                "memory_mib": 4096,
                "devices": [
                    {"id": "0", "memory_mib": 8192, "threads": 240},
                    {"id": "1", "memory_mib": 8192, "threads": 240},
                ],
            },
            {"name": "n2", "cores": 2.5, "memory_mib": 2048},
        ],
        "running": [
            {
                "id": "r",
                "node": "n1",
                "device": "0",
                "device_memory_mib": 1000,
                "device_threads": 60,
                "cores": 1,
                "memory_mib": 100,
            },
            {
                "id": "g",
                "node": "n1",
                "device": "1",
                "cores": 2,
                "start_time": 0,
                "walltime_s": 60,
                "copy_bw_mbps": 10,
                "cpu_load_cores": 0.5,
            },
            {"id": "b", "node": "n1", "cores": 1, "harvest_from": "g"},
        ],
        "pending": [
            {"id": "p1", "device_memory_mib": 2000, "device_threads": 60},
            {
                "id": "p2",
                "device_memory_mib": 100,
                "device_threads": 1,
                "device_count": 2,
                "processes": 2,
            },
            {"id": "p3", "kind": "cpu", "cores": 1.5, "memory_mib": 10},
        ],
        "now": 100,
    }
    places: list[tuple[Any, Any]] = [(doc, k) for k in ("nodes", "running", "pending", "now")]
    for group in ("nodes", "running", "pending"):
        for obj in doc[group]:
            places += [(obj, k) for k in [*obj, "extra"]]
    for dev in doc["nodes"][0]["devices"]:
        places += [(dev, k) for k in dev]
    for _ in range(draw(st.integers(1, 3))):
        target, key = draw(st.sampled_from(places))
        target[key] = draw(HOSTILE)
    return doc


@given(
    doc=hostile_snapshots(),
    policy=st.sampled_from(["knapsack", "fgd", "bestfit", "random", "exclusive", "collocate"]),
)
def test_hostile_json_values_give_exit_2_or_a_sound_plan(doc: dict[str, Any], policy: str) -> None:
    text = json.dumps(doc)
    code, out, err = plan_text(text, "--policy", policy, "--output", "json")
    if code == 2:
        one_error(err)
        return
    assert code == 0, err
    plan = parse_plan(json.loads(out))
    problems = check_plan(parse_snapshot(json.loads(text)), plan)
    assert problems == []
    code, _, err = plan_text(text, "--policy", policy)
    assert code == 0, err


def test_config_check_refuses_a_policy_that_does_not_exist(tmp_path: Path) -> None:
    # It said "ok"; every cycle then failed on the unknown policy.
    path = tmp_path / "c.yaml"
    path.write_text("policy: {name: knapsak}\n")
    code, _, err = run("config", "check", str(path))
    assert code == 2
    assert "unknown policy 'knapsak'" in one_error(err)


def test_input_larger_than_its_bound_is_refused_not_read_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # coshare plan /dev/zero read until memory ran out; so did a config or a trace.
    monkeypatch.setattr("coshare.cli.main.MAX_SNAPSHOT_CHARS", 2 << 20)
    monkeypatch.setattr("coshare.config.MAX_CONFIG_CHARS", 1 << 20)
    code, _, err = plan_text(" " * (3 << 20))
    assert code == 2 and "<stdin>: not read: larger than 2 MiB" in one_error(err)
    code, _, err = run("plan", "/dev/zero")
    assert code == 2 and "larger than 2 MiB" in one_error(err)
    code, _, err = run("--config", "/dev/zero", "config", "show")
    assert code == 2 and "/dev/zero: not read: larger than 1 MiB" in one_error(err)


def test_an_unknown_policy_name_is_echoed_bounded() -> None:
    # The config allows 1,024 characters of text; the message showed all of them.
    code, _, err = plan_text(json.dumps({"nodes": []}), "--policy", "k" * 1000)
    assert code == 2
    message = one_error(err)
    assert message.startswith("coshare: error: --policy: unknown policy 'kkkk")
    assert "(1000 characters)" in message
    # bounded: the name is cut; the list of known policies grows with each new one
    assert len(message) < 160 + len(", ".join(policy_names()))


def test_entries_that_are_no_objects_are_one_problem_each_and_the_message_is_bounded() -> None:
    # 100,000 nulls were 299,999 problems: "expected an object", "missing field 'id'", and a
    # duplicate id made of the missing id's placeholder.
    code, _, err = plan_text(json.dumps({"nodes": [], "pending": [None] * 100_000}))
    assert code == 2
    lines = err.splitlines()
    assert lines[0].endswith(": 100000 problems:")
    assert lines[1] == "  pending[0]: expected an object, got null"
    assert lines[-1] == "  ... and 99980 more problems"
    assert len(lines) == 22
