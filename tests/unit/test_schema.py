"""The snapshot and plan JSON contracts: round trips and one clear message per problem."""

from __future__ import annotations

import json
from typing import Any

import pytest
from coshare.errors import SnapshotError
from coshare.model import Assignment, Plan, Unplaced
from coshare.schema import (
    decode_json,
    parse_plan,
    parse_snapshot,
    plan_to_dict,
    snapshot_to_dict,
)
from hypothesis import given

from tests.strategies import snapshots

DESIGN_EXAMPLE = {
    "nodes": [
        {
            "name": "n1",
            "cores": 16,
            "memory_mib": 65536,
            "membw_gbps": 100.0,
            "llc_ways": 20,
            "devices": [{"id": "0", "memory_mib": 8192, "threads": 240}],
        }
    ],
    "running": [
        {
            "id": "7.0",
            "node": "n1",
            "device": "0",
            "device_memory_mib": 2048,
            "device_threads": 120,
            "cores": 1,
            "memory_mib": 1024,
        }
    ],
    "pending": [
        {
            "id": "8.0",
            "device_memory_mib": 1024,
            "device_threads": 60,
            "cores": 1,
            "memory_mib": 512,
            "priority": 0,
            "submit_time": 0,
        }
    ],
}


def test_the_design_example_parses_and_round_trips() -> None:
    snap = parse_snapshot(DESIGN_EXAMPLE)
    assert snap.nodes[0].membw_gbps == 100.0 and snap.nodes[0].llc_ways == 20
    assert snap.running[0].devices == ("0",) and snap.pending[0].device_threads == 60
    assert parse_snapshot(snapshot_to_dict(snap)) == snap


@given(snap=snapshots())
def test_any_snapshot_round_trips(snap: Any) -> None:
    assert parse_snapshot(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap


def test_fractional_cores_round_up_to_thousandths() -> None:
    data = json.loads(json.dumps(DESIGN_EXAMPLE))
    data["pending"][0]["cores"] = 3.1524
    assert parse_snapshot(data).pending[0].cpu_milli == 3153


def problems(data: Any) -> list[str]:
    with pytest.raises(SnapshotError) as info:
        parse_snapshot(data, "s.json")
    assert str(info.value).startswith("s.json: ")
    return list(info.value.problems)


def mutate(path: list[Any], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(DESIGN_EXAMPLE))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["pending", 0, "device_memory_mib"],
            "abc",
            'pending job "8.0": field \'device_memory_mib\' is "abc" '
            "(allowed: an integer 0..1048576)",
        ),
        (
            ["pending", 0, "device_threads"],
            -1,
            "pending job \"8.0\": field 'device_threads' is -1 (allowed: an integer 0..16777216)",
        ),
        (
            ["pending", 0, "cores"],
            -1,
            "pending job \"8.0\": field 'cores' is -1 (allowed: a number >= 0 and <= 1048576)",
        ),
        (
            ["pending", 0, "device_mem_mib"],
            5,
            "pending job \"8.0\": unknown field 'device_mem_mib'",
        ),
        (["pending", 0, "id"], KeyError, "pending[0]: missing field 'id'"),
        (["pending", 0, "kind"], "gpu", 'pending job "8.0": field \'kind\' is "gpu"'),
        (["pending", 0, "alpha"], 1.5, "pending job \"8.0\": field 'alpha' is 1.5"),
        (
            ["nodes", 0, "cores"],
            True,
            "node \"n1\": field 'cores' is true (allowed: a number > 0 and <= 1048576)",
        ),
        (
            ["nodes", 0, "devices", 0, "threads"],
            2.5,
            'node "n1": device "0": field \'threads\' is 2.5 (allowed: an integer 1..16777216)',
        ),
        (["running", 0, "node"], "n9", 'running job "7.0": field "node" names unknown node "n9"'),
        (
            ["running", 0, "device"],
            "3",
            'running job "7.0": field "device" names unknown device "3"',
        ),
        (["running", 0, "state"], "idle", 'running job "7.0": field \'state\' is "idle"'),
    ],
)
def test_each_problem_names_the_job_or_node_and_the_field(
    path: list[Any], value: Any, expected: str
) -> None:
    found = problems(mutate(path, value))
    assert any(p.startswith(expected) for p in found), found


def test_cross_document_problems() -> None:
    data = mutate(["now"], 5.0)
    data["pending"].append({"id": "8.0", "device_memory_mib": 1, "device_threads": 1})
    data["pending"].append({"id": "7.0", "device_memory_mib": 1, "device_threads": 1})
    data["nodes"].append(dict(data["nodes"][0]))
    found = problems(data)
    assert 'pending job "8.0": id appears more than once' in found
    assert 'pending job "7.0": also listed as running' in found
    assert 'node "n1": name appears more than once' in found


def test_cpu_job_with_device_fields_is_refused() -> None:
    found = problems(mutate(["pending", 0, "kind"], "cpu"))
    assert any("kind 'cpu' cannot declare" in p for p in found)


def test_not_an_object_and_bad_json() -> None:
    assert problems([1, 2]) == ["snapshot: expected an object, got [1, 2]"]
    with pytest.raises(SnapshotError, match=r"x: not valid JSON: .* line 1"):
        decode_json("{nodes: 1}", "x", parse_snapshot)


def test_many_problems_are_summarized() -> None:
    data = {"nodes": [{"name": f"n{i}"} for i in range(30)]}
    with pytest.raises(SnapshotError) as info:
        parse_snapshot(data)
    assert "60 problems" in str(info.value) and "and 40 more problems" in str(info.value)


def test_plan_round_trip_and_design_shape() -> None:
    plan = Plan(
        "knapsack",
        (Assignment("8.0", "n1", ("0",)), Assignment("10", "n2", ("0", "1"))),
        (Unplaced("9.0", "device_memory_mib 9000 exceeds every device (max 8192)", "never_fits"),),
        0.004,
    )
    data = plan_to_dict(plan)
    assert data["assignments"][0] == {"job": "8.0", "node": "n1", "device": "0"}
    assert data["assignments"][1]["device"] == "0,1"
    assert data["stats"] == {"pending": 3, "placed": 2, "seconds": 0.004}
    assert parse_plan(json.loads(json.dumps(data))) == plan


def test_bad_plan_documents_are_refused() -> None:
    with pytest.raises(SnapshotError, match="missing field 'policy'"):
        parse_plan({"assignments": []})
    with pytest.raises(SnapshotError, match="unplaced job \"1\": field 'code'"):
        parse_plan({"policy": "p", "unplaced": [{"job": "1", "reason": "r", "code": "zzz"}]})
