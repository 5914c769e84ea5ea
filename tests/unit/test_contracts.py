"""The snapshot and plan contracts: the JSON Schema files shipped in the package agree with
the parser, and every example and recorded snapshot in the repository, and what `coshare
plan --output json` prints, is valid against them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from coshare.cli.main import cli, example_snapshot, schema_text
from coshare.errors import SnapshotError
from coshare.ledger import bounds as bounds
from coshare.policies import make_policy, policy_names
from coshare.schema import decode_json, parse_plan, parse_snapshot, plan_to_dict, snapshot_to_dict
from hypothesis import given, settings

from tests.strategies import snapshots

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_text(name))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


SNAPSHOT = validator("snapshot")
PLAN = validator("plan")


def valid(check: jsonschema.Draft202012Validator, data: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in check.iter_errors(data)]


def doc_examples(kind: str) -> list[tuple[str, str]]:
    """The ```json KIND blocks of docs/*.md and README.md."""
    out = []
    for path in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        for i, block in enumerate(re.findall(rf"```json {kind}\n(.*?)```", path.read_text(), re.S)):
            out.append((f"{path.name}#{i}", block))
    return out


def test_the_schema_command_prints_the_shipped_schemas() -> None:
    for name in ("snapshot", "plan"):
        result = CliRunner().invoke(cli, ["schema", name])
        assert result.exit_code == 0
        assert json.loads(result.stdout)["title"] == f"coshare {name}"


@pytest.mark.parametrize("kind", ["snapshot", "plan"])
def test_every_example_in_the_docs_is_valid_and_parses(kind: str) -> None:
    examples = doc_examples(kind)
    assert examples, f"no ```json {kind} example in docs/"
    for where, text in examples:
        data = json.loads(text)
        assert valid(SNAPSHOT if kind == "snapshot" else PLAN, data) == [], where
        decode_json(text, where, parse_snapshot if kind == "snapshot" else parse_plan)


def test_the_bundled_examples_are_valid_snapshots() -> None:
    paths = sorted((ROOT / "common/coshare/examples").glob("*.json"))
    assert paths
    for path in paths:
        assert valid(SNAPSHOT, json.loads(path.read_text())) == [], path.name


def test_snapshots_built_from_recorded_scheduler_output_are_valid() -> None:
    from coshare.config import load_config

    from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
    from condor_addon.view import build_snapshot, parse_queue, parse_slots, read_job
    from slurm_addon.view import build_view
    from tests.unit.test_condor_view import FIXTURES as CONDOR
    from tests.unit.test_condor_view import load
    from tests.unit.test_slurm_view import KINDS, recorded

    now = float((CONDOR / "recorded_at").read_text())
    slots = parse_slots(load("slots.ads", SLOT_PROJECTION), load_config(environ={}).device_kinds)
    jobs = [j for j in (read_job(v) for v in load("jobs.ads", JOB_PROJECTION)) if j is not None]
    queue = parse_queue(jobs, slots, now_s=now, replan_after_s=300)
    condor = snapshot_to_dict(build_snapshot(slots, queue, jobs, now))
    assert condor["running"] and valid(SNAPSHOT, condor) == []
    nodes, squeue, _ = recorded()
    slurm = snapshot_to_dict(
        build_view(nodes, squeue, device_kinds=KINDS, now_s=squeue[0].submit_time_s + 60).snapshot
    )
    assert slurm["pending"] and valid(SNAPSHOT, slurm) == []


@pytest.mark.parametrize("policy", policy_names())
def test_plan_output_json_is_valid(policy: str) -> None:
    path = ROOT / "common/coshare/examples/paper-cluster.json"
    result = CliRunner().invoke(cli, ["plan", str(path), "--policy", policy, "--output", "json"])
    assert result.exit_code == 0, result.output
    assert valid(PLAN, json.loads(result.stdout)) == []


@settings(max_examples=50)
@given(snapshots())
def test_any_snapshot_and_its_plans_are_valid(snap: Any) -> None:
    data = json.loads(json.dumps(snapshot_to_dict(snap)))
    assert valid(SNAPSHOT, data) == []
    for name in ("knapsack", "exclusive"):
        assert valid(PLAN, plan_to_dict(make_policy(name).plan(snap))) == []


BAD = [
    {"nodes": [{"name": "n1", "cores": 4, "memory_mib": 1024, "colour": "red"}]},
    {
        "nodes": [
            {
                "name": "n1",
                "cores": 4,
                "memory_mib": 1024,
                "devices": [
                    {"id": "0", "memory_mib": bounds.MAX_DEVICE_MEMORY_MIB + 1, "threads": 240}
                ],
            }
        ]
    },
    {"nodes": [{"name": "n1", "cores": -1, "memory_mib": 1024}]},
    {"nodes": [{"name": " n1", "cores": 4, "memory_mib": 1024}]},
    {"nodes": [], "pending": [{"id": "1", "device_threads": bounds.MAX_DEVICE_THREADS + 1}]},
    {"nodes": [], "pending": [{"id": "1", "kind": "gpu"}]},
    {"nodes": [], "pending": [{"id": "1", "processes": 0}]},
    {"nodes": [], "running": [{"id": "1", "node": "n1", "state": "done"}]},
    {"nodes": [], "pending": [{"id": "1,2"}]},
    {"nodes": [], "pending": [{"id": "1", "alpha": 0}]},
    {"nodes": [], "now": bounds.MAX_TIME_S * 10},
]


@pytest.mark.parametrize("document", BAD)
def test_what_the_parser_refuses_the_schema_refuses(document: dict[str, Any]) -> None:
    assert valid(SNAPSHOT, document) != []
    with pytest.raises(SnapshotError):
        parse_snapshot(document)


def test_the_schema_bounds_are_coshare_bounds() -> None:
    defs = json.loads(schema_text("snapshot"))["$defs"]
    device, pending, node = (defs[k]["properties"] for k in ("device", "pending", "node"))
    assert device["memory_mib"]["maximum"] == bounds.MAX_DEVICE_MEMORY_MIB
    assert device["threads"]["maximum"] == bounds.MAX_DEVICE_THREADS
    assert node["cores"]["maximum"] == bounds.MAX_CORES
    assert node["memory_mib"]["maximum"] == bounds.MAX_MEMORY_MIB
    assert pending["processes"]["maximum"] == bounds.MAX_PROCESSES
    assert pending["priority"]["maximum"] == bounds.MAX_PRIORITY
    assert pending["device_count"]["maximum"] == bounds.MAX_DEVICES
    assert example_snapshot().nodes


def test_the_shipped_schemas_are_emitted_from_the_typed_definitions(tmp_path: Path) -> None:
    """What ``python -m coshare.contracts.json_schema FOLDER`` writes (after a contract
    changes) is what coshare ships and ``coshare schema`` prints."""
    done = subprocess.run(
        [sys.executable, "-m", "coshare.contracts.json_schema", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["plan.schema.json", "snapshot.schema.json"]
    for name in ("snapshot", "plan"):
        assert (tmp_path / f"{name}.schema.json").read_text() == schema_text(name)


@pytest.mark.parametrize(
    "text",
    [
        '{"nodes": [], "pending": [{"id": "a", "id": "b"}]}',
        '{"nodes": [], "pending": [{"id": "a", "cores": 1, "cores": 2}]}',
        # a colon written as an escape must not hide a key given twice
        '{"nodes": [], "pending": [{"id": "a", "program": "\\u003a", "program": "\\u003a"}]}',
        '{"policy": "p", "assignments": [], "unplaced": [], "policy": "q"}',
    ],
)
def test_a_key_given_twice_inside_a_job_is_refused(text: str) -> None:
    parse = parse_plan if text.startswith('{"policy"') else parse_snapshot
    with pytest.raises(SnapshotError, match="appears twice in one object"):
        decode_json(text, "<test>", parse)


def test_a_colon_escaped_in_text_is_read_as_written() -> None:
    text = '{"nodes": [], "pending": [{"id": "a\\u003ab", "program": "x\\u003A"}]}'
    job = decode_json(text, "<test>", parse_snapshot).pending[0]
    assert (job.id, job.program) == ("a:b", "x:")


def test_a_plan_parses_the_same_through_the_typed_definitions_and_the_checker() -> None:
    from coshare.schema import _check_plan

    path = ROOT / "common/coshare/examples/paper-cluster.json"
    snap = decode_json(path.read_text(), str(path), parse_snapshot)
    for name in policy_names():
        data = json.loads(json.dumps(plan_to_dict(make_policy(name).plan(snap))))
        assert parse_plan(data) == _check_plan(data, "<test>"), name
        assert decode_json(json.dumps(data), "<test>", parse_plan) == parse_plan(data)
