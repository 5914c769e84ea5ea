"""The snapshot's typed definitions (coshare.contracts, decoded in C) against the per-field
checker that writes the messages.

The typed path may decline anything (the checker then reads it), but what it accepts must be
exactly what the checker builds, with no problem reported: same fields, same types (``1.0``
and ``1`` are different JSON, and ``submit_time`` becomes a float either way). Both ways in
are compared: decoded values (``parse_snapshot``) and JSON text (``decode_json``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from coshare.contracts.typed import snapshot_from_data, snapshot_from_text
from coshare.model import Job, Node, Snapshot
from coshare.schema import (
    _check_snapshot,
    _parse_node,
    _parse_pending,
    parse_snapshot,
    snapshot_to_dict,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import snapshots


def _typed(document: dict[str, Any]) -> Snapshot | None:
    """The typed path's snapshot of ``document``: from its text only what it takes from the
    decoded values, the same (the text path also declines a ``null``: see no_key_twice)."""
    snapshot = snapshot_from_data(document)
    try:
        text = json.dumps(document, allow_nan=False)
    except ValueError:  # NaN and the infinities: no JSON text holds them
        return snapshot
    from_text = snapshot_from_text(text)
    if from_text is not None:
        assert typed(from_text) == typed(snapshot), document
    return snapshot


def _fast_pending(obj: object) -> Job | None:
    snapshot = _typed({"nodes": [], "pending": [obj]})
    return None if snapshot is None else snapshot.pending[0]


def _fast_pending_all(objs: list[Any]) -> list[Job] | None:
    snapshot = _typed({"nodes": [], "pending": objs})
    return None if snapshot is None else list(snapshot.pending)


def _fast_node(obj: object) -> Node | None:
    snapshot = _typed({"nodes": [obj]})
    return None if snapshot is None else snapshot.nodes[0]


#: Values that sit on, inside and outside the bounds the fields have, of every JSON type.
EDGES: list[object] = [
    None,
    True,
    False,
    [],
    {},
    [1],
    {"a": 1},
    0,
    1,
    -1,
    2,
    7,
    1024,
    1025,
    2**20,
    2**20 + 1,
    2**24,
    2**24 + 1,
    2**30,
    2**30 + 1,
    2**53,
    2**53 + 1,
    -(2**53),
    -(2**53) - 1,
    10**9,
    10**9 + 1,
    10**12,
    10**12 + 1,
    -(10**12) - 1,
    10**6,
    10**6 + 1,
    10**400,
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    1e-9,
    -1e-9,
    0.0005,
    0.0015,
    3.9995,
    1e6,
    1e9,
    1e12,
    1e12 + 1e-3,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    44544.0,
    "",
    " ",
    "a",
    " a",
    "a ",
    "1.0",
    "a,b",
    "device",
    "cpu",
    "x" * 256,
    "x" * 257,
    "x" * 1024,
    "x" * 1025,
    "\u00e9",
    "a\u202eb",
    "a\tb",
    "a\x00",
    "a\x7f",
    "LU",
    "1",
    "\u00a0a",
]
EDGE_VALUES = st.one_of(
    st.sampled_from(EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.text(max_size=8),
)

PENDING_KEYS = [
    "id",
    "device_memory_mib",
    "device_threads",
    "device_count",
    "cores",
    "memory_mib",
    "priority",
    "submit_time",
    "kind",
    "processes",
    "program",
    "alpha",
    "membw_gbps",
    "copy_bw_mbps",
    "walltime_s",
    "nodes",
    "nodes_max",
    "processes_per_node",
    "charges",
    "device_mem_mib",
]

#: A well-formed job as bench/plan_e2e.py writes 100,000 of them.
TYPICAL: dict[str, Any] = {
    "id": "1.0",
    "device_memory_mib": 44544,
    "device_threads": 264192,
    "cores": 9,
    "memory_mib": 87040,
    "priority": 0,
    "submit_time": 0.0,
    "program": "LU",
}


def typed(value: object) -> object:
    """A model object as a tuple of (type, value) per field, so ``1 != 1.0``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple((f.name, typed(getattr(value, f.name))) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return tuple(typed(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def assert_same_job(obj: object) -> None:
    fast = _fast_pending(obj)
    problems: list[str] = []
    full = _parse_pending(obj, 0, problems)
    if fast is not None:
        assert problems == [], (obj, problems)
        assert typed(fast) == typed(full), obj


@st.composite
def pending_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A typical job with some fields changed, dropped or added."""
    obj = dict(TYPICAL)
    for key in draw(st.lists(st.sampled_from(PENDING_KEYS), max_size=5)):
        if draw(st.booleans()):
            obj[key] = draw(EDGE_VALUES)
        else:
            obj.pop(key, None)
    return obj


@given(pending_objects())
def test_fast_pending_accepts_only_what_the_full_path_accepts_and_builds_the_same(
    obj: dict[str, Any],
) -> None:
    assert_same_job(obj)


def test_fast_pending_on_every_edge_value_of_every_field() -> None:
    """Exhaustively: each field of a typical job (and of a CPU job) set to each edge value."""
    for base in (TYPICAL, {"id": "2", "kind": "cpu"}):
        for key in PENDING_KEYS:
            for value in EDGES:
                assert_same_job({**base, key: value})


def test_fast_pending_takes_the_usual_jobs() -> None:
    """The typed path does fire (else the bench would measure the checker): a typical job,
    a CPU job, one with every optional number, a gang, and the defaults."""
    usual: list[dict[str, Any]] = [
        TYPICAL,
        {"id": "2", "cores": 0.5, "memory_mib": 10, "kind": "cpu"},
        {"id": "3"},
        {
            **TYPICAL,
            "alpha": 1,
            "membw_gbps": 2.5,
            "copy_bw_mbps": 0,
            "walltime_s": 60,
            "processes": 4,
            "device_count": 2,
            "kind": "device",
            "submit_time": -5,
        },
        {**TYPICAL, "nodes": 2, "nodes_max": 4, "processes": 8, "processes_per_node": 4},
        {**TYPICAL, "nodes": 2},
    ]
    for obj in usual:
        assert isinstance(_fast_pending(obj), Job), obj
        assert_same_job(obj)


def test_fast_pending_declines_what_the_full_path_refuses() -> None:
    """Each of these is refused by the full path with a message; the fast path must not
    build a job from any of them."""
    bad: list[object] = [
        {**TYPICAL, "device_mem_mib": 5},
        {**TYPICAL, "id": " 1"},
        {**TYPICAL, "id": "1,2"},
        {**TYPICAL, "cores": math.nan},
        {**TYPICAL, "cores": True},
        {**TYPICAL, "memory_mib": 2**30 + 1},
        {**TYPICAL, "submit_time": math.inf},
        {**TYPICAL, "alpha": 0},
        {**TYPICAL, "walltime_s": 0.0},
        {**TYPICAL, "kind": "cpu"},
        {**TYPICAL, "device_count": 0},
        {**TYPICAL, "program": " "},
        {**TYPICAL, "program": "a\x1b[2J"},
        {**TYPICAL, "nodes": 2, "processes": 1},
        {**TYPICAL, "nodes": 3, "nodes_max": 2},
        {**TYPICAL, "charges": {"a,b": 1}},
        {**TYPICAL, "charges": {"a": -1}},
        {**TYPICAL, "charges": {"a": math.nan}},
        {**TYPICAL, "charges": [1]},
        {key: value for key, value in TYPICAL.items() if key != "id"},
        ["not", "an", "object"],
    ]
    for obj in bad:
        problems: list[str] = []
        _parse_pending(obj, 0, problems)
        assert problems, obj
        assert _fast_pending(obj) is None, obj


DEVICE = {"id": "0", "memory_mib": 81559, "threads": 270336, "model": "H100"}
NODE: dict[str, Any] = {
    "name": "gpu00000",
    "cores": 128,
    "memory_mib": 2097152,
    "devices": [DEVICE, {**DEVICE, "id": "1"}],
}


@st.composite
def node_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj = dict(NODE)
    device = dict(DEVICE)
    for key in draw(
        st.lists(st.sampled_from(["id", "memory_mib", "threads", "model", "x"]), max_size=3)
    ):
        device[key] = draw(EDGE_VALUES)
    obj["devices"] = [device, {**DEVICE, "id": "9"}]
    for key in draw(
        st.lists(
            st.sampled_from(["name", "cores", "memory_mib", "devices", "llc_ways", "domain"]),
            max_size=3,
        )
    ):
        if draw(st.booleans()):
            obj[key] = draw(EDGE_VALUES)
        else:
            obj.pop(key, None)
    return obj


def test_fast_node_on_every_edge_value_of_every_field() -> None:
    for key in ["name", "cores", "memory_mib", "devices", "llc_ways", "domain", "x"]:
        for value in EDGES:
            assert_same_node({**NODE, key: value})
    for key in ["id", "memory_mib", "threads", "model", "x"]:
        for value in EDGES:
            assert_same_node({**NODE, "devices": [{**DEVICE, key: value}]})


def assert_same_node(obj: object) -> None:
    fast = _fast_node(obj)
    problems: list[str] = []
    full = _parse_node(obj, 0, problems)
    if fast is not None:
        assert problems == [], (obj, problems)
        assert typed(fast) == typed(full), obj


@given(node_objects())
def test_fast_node_accepts_only_what_the_full_path_accepts_and_builds_the_same(
    obj: dict[str, Any],
) -> None:
    assert_same_node(obj)


def test_fast_node_takes_the_usual_nodes_and_a_snapshot_parses_the_same() -> None:
    assert isinstance(_fast_node(NODE), Node)
    assert isinstance(_fast_node({"name": "n", "cores": 3.9995, "memory_mib": 1}), Node)
    snapshot = parse_snapshot({"nodes": [NODE], "pending": [TYPICAL, {"id": "2"}]})
    assert snapshot.nodes[0].cpu_milli == 128_000
    assert [j.id for j in snapshot.pending] == ["1.0", "2"]
    assert snapshot.pending[1].cpu_milli == 1000  # the default: one core


def assert_same_batch(objs: list[Any]) -> None:
    """The typed path takes a list only when it takes every job of it alone, and then builds
    the same jobs (the slots it sets column by column included: ``typed`` reads every
    field)."""
    batch = _fast_pending_all(objs)
    if batch is None:
        return
    singles = [_fast_pending(obj) for obj in objs]
    assert all(job is not None for job in singles), objs
    assert [typed(job) for job in batch] == [typed(job) for job in singles], objs


def test_fast_pending_all_on_every_edge_value_of_every_field() -> None:
    """Each field of one job among typical ones (and CPU jobs) set to each edge value, and
    the same value in every job (a column of one type)."""
    for base in (TYPICAL, {"id": "2", "kind": "cpu"}):
        others = [{**base, "id": f"{base['id']}-{i}"} for i in range(3)]
        for key in PENDING_KEYS:
            for value in EDGES:
                assert_same_batch([*others, {**base, key: value}])
                assert_same_batch([{**obj, key: value} for obj in others])


@given(st.lists(pending_objects(), max_size=6))
def test_fast_pending_all_takes_only_what_the_per_job_path_takes(objs: list[Any]) -> None:
    assert_same_batch([{**obj, "id": f"{i}"} if i % 2 else obj for i, obj in enumerate(objs)])


def test_fast_pending_all_takes_the_usual_snapshots() -> None:
    """It fires on the bench's jobs and on mixed optional fields, with every default."""
    usual: list[list[Any]] = [
        [TYPICAL, {**TYPICAL, "id": "2.0", "cores": 1.5, "submit_time": 3}],
        [
            {"id": "1"},
            {"id": "2", "cores": 0.0015, "memory_mib": 10, "kind": "cpu"},
            {
                **TYPICAL,
                "id": "3",
                "alpha": 1,
                "membw_gbps": 2.5,
                "copy_bw_mbps": 0,
                "walltime_s": 60,
                "processes": 4,
                "device_count": 2,
                "kind": "device",
                "submit_time": -5,
                "program": None,
            },
        ],
        [{**TYPICAL, "id": "a b", "kind": None, "device_count": None, "cores": None}],
        [],
    ]
    for objs in usual:
        assert _fast_pending_all(objs) is not None, objs
        assert_same_batch(objs)


def test_fast_pending_all_declines_what_the_per_job_path_declines() -> None:
    """One bad job among good ones: the whole list goes to the checker."""
    bad: list[object] = [
        {**TYPICAL, "id": " 1"},
        {**TYPICAL, "id": "1 "},
        {**TYPICAL, "id": "1,2"},
        {**TYPICAL, "cores": math.nan},
        {**TYPICAL, "submit_time": math.nan},
        {**TYPICAL, "cores": True},
        {**TYPICAL, "alpha": 0},
        {**TYPICAL, "kind": "cpu"},
        {**TYPICAL, "device_count": 0},
        {**TYPICAL, "program": " "},
        {**TYPICAL, "nodes": 2, "processes": 1},
        {**TYPICAL, "device_mem_mib": 5},
        {**TYPICAL, "priority": 2**53 + 1},
        ["not", "an", "object"],
    ]
    for obj in bad:
        assert _fast_pending_all([TYPICAL, obj]) is None, obj


@given(snapshots())
def test_any_snapshot_reads_the_same_through_the_typed_path_and_the_checker(snap: Any) -> None:
    """Nodes, running jobs and pending jobs of every shape the strategies draw: the typed path
    takes the snapshot's JSON, and builds what the checker builds (and what was written)."""
    data = json.loads(json.dumps(snapshot_to_dict(snap)))
    from_text = snapshot_from_text(json.dumps(data))
    checked, problems = _check_snapshot(data)
    assert problems == []
    assert from_text is not None
    assert typed(from_text) == typed(checked) == typed(snapshot_from_data(data))
    assert from_text == snap
