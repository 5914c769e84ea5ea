"""The scheduler's limits in the snapshot (``limits``) and what pending jobs are charged to
them (``charges``): read, checked and written back the same way."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from coshare.errors import SnapshotError
from coshare.model import Limit
from coshare.schema import decode_json, job_to_dict, parse_snapshot, snapshot_to_dict

LIMIT = {"id": "qos-gpu", "name": "MaxTRESPerUser gres/gpu=4", "holder": "user alice"}
JOB = {"id": "7", "device_memory_mib": 10, "device_threads": 1}


def document(limits: list[Any], charges: Any) -> dict[str, Any]:
    job = dict(JOB) if charges is None else {**JOB, "charges": charges}
    return {"nodes": [], "pending": [job], "limits": limits}


def both_ways(doc: dict[str, Any]) -> Any:
    """The snapshot from decoded values and from its text: the same, or the same error."""
    try:
        from_data = parse_snapshot(doc)
    except SnapshotError as exc:
        with pytest.raises(SnapshotError) as again:
            decode_json(json.dumps(doc), "<test>", parse_snapshot)
        assert again.value.problems == exc.problems
        raise
    assert decode_json(json.dumps(doc), "<test>", parse_snapshot) == from_data
    return from_data


def problems_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SnapshotError) as err:
        both_ways(doc)
    return list(err.value.problems)


def test_limits_and_charges_are_read_and_written_back_the_same() -> None:
    doc = document(
        [{**LIMIT, "max": 4, "used": 3}, {**LIMIT, "id": "acct", "max": 1e12, "used": 0.5}],
        {"qos-gpu": 1, "acct": 0.25},
    )
    snap = both_ways(doc)
    assert snap.limits == (
        Limit("qos-gpu", "MaxTRESPerUser gres/gpu=4", "user alice", 4.0, 3.0),
        Limit("acct", "MaxTRESPerUser gres/gpu=4", "user alice", 1e12, 0.5),
    )
    assert snap.pending[0].charges == (("qos-gpu", 1.0), ("acct", 0.25))
    again = json.loads(json.dumps(snapshot_to_dict(snap)))
    assert again["limits"][0] == {**LIMIT, "max": 4.0, "used": 3.0}
    assert again["pending"][0]["charges"] == {"qos-gpu": 1.0, "acct": 0.25}
    assert parse_snapshot(again) == snap


def test_no_limits_and_no_charges_write_nothing() -> None:
    snap = both_ways(document([], None))
    assert snap.limits == () and snap.pending[0].charges == ()
    assert "limits" not in snapshot_to_dict(snap)
    assert "charges" not in job_to_dict(snap.pending[0])
    assert both_ways({"nodes": [], "pending": [{**JOB, "charges": {}}]}).pending[0].charges == ()


def test_a_charge_to_a_limit_the_snapshot_does_not_list_names_the_job_and_the_field() -> None:
    problems = problems_of(document([{**LIMIT, "max": 4, "used": 0}], {"qos-cpu": 1}))
    assert problems == [
        'pending job "7": field \'charges\' names limit "qos-cpu", which the snapshot does '
        "not list (allowed: the ids of its limits)"
    ]


@pytest.mark.parametrize("field", ["max", "used"])
@pytest.mark.parametrize("value", [-1, 1e13, math.nan, math.inf, "4", True, None])
def test_a_limit_out_of_range_is_refused_with_the_range(field: str, value: Any) -> None:
    limit = {**LIMIT, "max": 4, "used": 0, field: value}
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(document([limit], None))
    (problem,) = err.value.problems
    assert problem.startswith('limit "qos-gpu": ')
    if value is None:
        assert problem.endswith(f"missing field {field!r}")
    else:
        assert f"field {field!r} is " in problem
        assert problem.endswith("(allowed: a number >= 0 and <= 1000000000000)")


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ({"name": "x" * 201}, "field 'name' is"),
        ({"holder": "a\x1b[2J"}, "field 'holder' is"),
        ({"holder": " "}, "field 'holder' is"),
        ({"id": "a,b"}, 'limit "a,b": field \'id\' is "a,b": it holds a comma'),
        ({"id": " a"}, "limit[0]: field 'id' is \" a\": it has white space"),
        ({"colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_a_limit_with_bad_text_is_refused(limit: dict[str, Any], says: str) -> None:
    problems = problems_of(document([{**LIMIT, "max": 4, "used": 0, **limit}], None))
    assert len(problems) == 1 and says in problems[0], problems
    if "name" in limit or "holder" in limit:
        assert "(allowed: a string of 1..200 characters, no control characters)" in problems[0]


@pytest.mark.parametrize(
    ("charges", "why"),
    [
        ({"qos-gpu": -1}, 'charges -1 to "qos-gpu"'),
        ({"qos-gpu": 1e13}, 'charges 10000000000000.0 to "qos-gpu"'),
        ({"qos-gpu": "1"}, 'charges "1" to "qos-gpu"'),
        ({"a,b": 1}, 'names the limit "a,b"'),
        ({" qos-gpu": 1}, 'names the limit " qos-gpu"'),
        ([1], ""),
        ({f"l{i}": 1 for i in range(65)}, ""),
    ],
)
def test_a_bad_charge_names_the_job_the_field_and_the_range(charges: Any, why: str) -> None:
    problems = problems_of(document([{**LIMIT, "max": 4, "used": 0}], charges))
    assert problems[0].startswith("pending job \"7\": field 'charges' is "), problems
    assert why in problems[0]
    assert problems[0].endswith(
        "(allowed: an object of at most 64 limit ids (1..256 characters, no white space at "
        "either end, no control characters, no commas) to numbers >= 0 and <= 1000000000000)"
    )


def test_a_charge_of_nan_in_decoded_values_is_refused() -> None:
    with pytest.raises(SnapshotError, match="field 'charges' is"):
        parse_snapshot(document([{**LIMIT, "max": 4, "used": 0}], {"qos-gpu": math.nan}))


def test_a_limit_id_given_twice_is_refused() -> None:
    limits = [{**LIMIT, "max": 4, "used": 0}, {**LIMIT, "max": 2, "used": 0}]
    assert problems_of(document(limits, None)) == ['limit "qos-gpu": id appears more than once']
