"""The annotation parser shared by both adapters: demands in, clear per-job errors out."""

from __future__ import annotations

import math
import re

import pytest
from coshare.errors import AnnotationError
from coshare.ledger.annotations import KEYS, ClusterLimits, extract, is_annotated, parse_job
from coshare.ledger.bounds import (
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_DEVICES,
    MAX_PROCESSES,
)
from coshare.model import Device, Node
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.docs_guides import ROOT

LIMITS = ClusterLimits.of_nodes(
    [Node("a", 16000, 65536, (Device("0", 8192, 240), Device("1", 16384, 244)))]
)


def test_condor_style_keys_parse_into_a_job() -> None:
    job = parse_job(
        "12.0",
        {"CoshareDeviceMemory": 2048, "CoshareDeviceThreads": 120, "CoshareProgram": "KM"},
        limits=LIMITS,
        cpu_milli=2000,
        memory_mib=1024,
        priority=3,
        submit_time_s=7.0,
    )
    assert (job.id, job.device_memory_mib, job.device_threads, job.program) == (
        "12.0",
        2048,
        120,
        "KM",
    )
    assert (job.cpu_milli, job.memory_mib, job.priority, job.submit_time_s) == (2000, 1024, 3, 7.0)
    assert job.kind == "device" and job.device_count == 1


@pytest.mark.parametrize(
    "keys",
    [
        {"coshare_device_memory": "2G", "coshare_device_threads": "120"},
        {"device-memory": "2048M", "DEVICE_THREADS": 120.0},
        {"CoshareDeviceMemory": '"2048"', "CoshareDeviceThreads": "120"},
        {"device_memory_mib": 2048, "device_threads": 120},
    ],
)
def test_spellings_and_units_are_equivalent(keys: dict[str, object]) -> None:
    job = parse_job("1", keys, limits=LIMITS)
    assert (job.device_memory_mib, job.device_threads) == (2048, 120)


def test_memory_with_a_unit_rounds_up() -> None:
    assert parse_job("1", {"DeviceMemory": "1.5K", "DeviceThreads": 1}).device_memory_mib == 1


def test_optional_keys() -> None:
    job = parse_job(
        "1",
        {
            "DeviceMemory": 1,
            "DeviceThreads": 1,
            "DeviceCount": 2,
            "Processes": 4,
            "Alpha": "0.9",
            "Membw": 12.5,
            "CopyBandwidth": 300,
            "Walltime": 60,
        },
        limits=LIMITS,
    )
    assert (job.device_count, job.processes, job.alpha, job.membw_gbps) == (2, 4, 0.9, 12.5)
    assert (job.copy_bw_mbps, job.walltime_s) == (300.0, 60.0)


def test_cpu_jobs() -> None:
    job = parse_job("1", {"CoshareKind": "cpu", "CoshareMembw": 3}, cpu_milli=4000)
    assert (job.kind, job.device_count, job.device_memory_mib, job.cpu_milli) == ("cpu", 0, 0, 4000)
    assert parse_job("2", {"CoshareProgram": "EP"}).kind == "cpu"


def message(job_id: str, keys: dict[str, object], limits: ClusterLimits | None = LIMITS) -> str:
    with pytest.raises(AnnotationError) as info:
        parse_job(job_id, keys, limits=limits)
    assert info.value.job == job_id
    return str(info.value)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            {"CoshareDeviceMemory": "abc", "CoshareDeviceThreads": 1},
            "job 5.0: CoshareDeviceMemory='abc' is not a number "
            "(allowed: integer MiB >= 1, or with a unit (2G), at most 16384)",
        ),
        (
            {"CoshareDeviceMemory": -5, "CoshareDeviceThreads": 1},
            "CoshareDeviceMemory='-5' is negative",
        ),
        ({"CoshareDeviceMemory": 0, "CoshareDeviceThreads": 1}, "CoshareDeviceMemory='0' is zero"),
        (
            {"CoshareDeviceMemory": 20000, "CoshareDeviceThreads": 1},
            "CoshareDeviceMemory='20000' exceeds every device (largest: 16384 MiB)",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 300},
            "CoshareDeviceThreads='300' is above every device's thread limit (largest: 244) "
            "(allowed: integer >= 1, at most 244)",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1.5},
            "CoshareDeviceThreads='1.5' is not a whole number",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1, "CoshareDeviceCount": 3},
            "CoshareDeviceCount='3' is more devices than any node has (most: 2)",
        ),
        (
            {"CoshareDeviceMemory": 1},
            "CoshareDeviceThreads='' is missing (a device job must declare it)",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1, "CoshareAlpha": 0},
            "CoshareAlpha='0' is out of range (allowed: a number in (0, 1])",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1, "CoshareKind": "gpu"},
            "CoshareKind='gpu' is not a job kind (allowed: device or cpu)",
        ),
        (
            {"CoshareDeviceMemory": 1, "CoshareDeviceThreads": 1, "CoshareProgram": "a b;rm"},
            "CoshareProgram='a b;rm' is not a valid program name",
        ),
        (
            {"CoshareDeviceMemroy": 1, "CoshareDeviceThreads": 1},
            "CoshareDeviceMemroy='1' is not a coshare key (allowed: one of CoshareDeviceMemory",
        ),
        (
            {"CoshareKind": "cpu", "CoshareDeviceThreads": 1},
            "CoshareDeviceThreads='1' is set on a cpu job (allowed: absent when CoshareKind = cpu)",
        ),
        (
            {"CoshareDeviceMemory": float("nan"), "CoshareDeviceThreads": 1},
            "CoshareDeviceMemory='nan' is not a number",
        ),
    ],
)
def test_bad_values_name_the_job_the_key_and_the_allowed_range(
    keys: dict[str, object], expected: str
) -> None:
    assert expected in message("5.0", keys)


def test_all_problems_of_a_job_are_reported_together() -> None:
    text = message("7", {"CoshareDeviceMemory": "x", "CoshareDeviceThreads": -1})
    assert "CoshareDeviceMemory='x'" in text and "CoshareDeviceThreads='-1'" in text


def test_without_cluster_limits_only_the_form_is_checked() -> None:
    assert parse_job("1", {"DeviceMemory": 10**6, "DeviceThreads": 10**5}).device_threads == 10**5


def test_extract_and_is_annotated() -> None:
    ad = {"Owner": "alice", "RequestCpus": 1, "CoshareDeviceMemory": 1, "coshare_device_threads": 2}
    assert extract(ad) == {"CoshareDeviceMemory": 1, "coshare_device_threads": 2}
    assert is_annotated(ad) and not is_annotated({"Owner": "bob"})


# -- every numeric key bounded, one rule for numbers, bounded messages -------------------------

#: Every numeric key, with a value that is fine for it.
NUMERIC = {
    "CoshareDeviceMemory": 1,
    "CoshareDeviceThreads": 1,
    "CoshareDeviceCount": 1,
    "CoshareProcesses": 1,
    "CoshareAlpha": 0.5,
    "CoshareMembw": 1,
    "CoshareCopyBandwidth": 1,
    "CoshareWalltime": 1,
}

HOSTILE_NUMBERS = [
    "9" * 400,
    "1" + "0" * 50,
    "1e400",
    "-1e400",
    "inf",
    "-inf",
    "nan",
    "Infinity",
    "1_000",
    "0x10",
    "١٢٠",
    "１２",
    10**400,
    -(10**400),
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    [1],
    "1e19",
]


@pytest.mark.parametrize("key", sorted(NUMERIC))
@pytest.mark.parametrize("value", HOSTILE_NUMBERS, ids=lambda v: repr(v)[:20])
def test_hostile_numbers_are_refused_for_every_numeric_key(key: str, value: object) -> None:
    keys = {**NUMERIC, key: value}
    with pytest.raises(AnnotationError) as info:
        parse_job("5.0", keys)  # no cluster known: only coshare's own bounds apply
    text = str(info.value)
    assert text.startswith(f"job 5.0: {key}=") and "(allowed: " in text
    assert len(text) < 300


@pytest.mark.parametrize(
    "key", ["CoshareDeviceMemory", "CoshareDeviceThreads", "CoshareDeviceCount", "CoshareProcesses"]
)
def test_the_largest_allowed_value_parses_and_one_more_is_refused_saying_the_bound(
    key: str,
) -> None:
    spec = next(s for s in KEYS if s.attribute == key)
    assert spec.maximum is not None
    top = int(spec.maximum)
    parse_job("1", {**NUMERIC, key: top})
    parse_job("1", {**NUMERIC, key: str(top)})
    text = message("1", {**NUMERIC, key: top + 1}, limits=None)
    assert f"at most {top})" in text and "is larger than coshare accepts" in text


def test_numbers_follow_one_rule_for_every_key() -> None:
    job = parse_job(
        "1",
        {
            "CoshareDeviceMemory": " 1.5e3 ",
            "CoshareDeviceThreads": "+120",
            "CoshareWalltime": ".5",
            "CoshareAlpha": "1",
        },
    )
    assert (job.device_memory_mib, job.device_threads, job.walltime_s) == (1500, 120, 0.5)
    for key in ("CoshareDeviceMemory", "CoshareDeviceThreads"):  # Arabic-Indic 120
        assert "is not a number" in message("1", {**NUMERIC, key: "١٢٠"}, limits=None)


def test_a_key_given_twice_under_two_spellings_is_refused_naming_both() -> None:
    text = message("5.0", {"device-memory": "1G", "device-memory-mib": "2G", "device-threads": 1})
    assert "device-memory-mib='2G' names the same key as device-memory (given twice)" in text


def test_the_schedulers_own_request_is_bounded_too() -> None:
    with pytest.raises(AnnotationError) as info:
        parse_job("1", NUMERIC, cpu_milli=10**303, memory_mib=-1, processes=10**19)
    text = str(info.value)
    assert "requested cores per process=" in text and "(allowed: 0..1048576)" in text
    assert "requested memory MiB per process='-1'" in text
    assert "requested processes='10000000000000000000'" in text


def test_values_and_keys_in_messages_are_bounded_and_printable() -> None:
    text = message("1", {**NUMERIC, "CoshareProgram": "x" * 10**6 + "\x1b[2J"}, limits=None)
    assert len(text) < 300 and "\x1b" not in text
    text = message("1", {**NUMERIC, "Coshare" + "y" * 10**6: 1}, limits=None)
    assert len(text) < 1000


def test_program_names_are_checked_whole() -> None:
    assert parse_job("1", {**NUMERIC, "CoshareProgram": " KM\n"}).program == "KM"
    for name in ("KM\nX", "KM\n\n;x", "K" * 65):
        assert "is not a valid program name" in message(
            "1", {**NUMERIC, "CoshareProgram": name}, limits=None
        )


ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=50),
    st.sampled_from(HOSTILE_NUMBERS),
    st.lists(st.integers(), max_size=3),
    st.builds(lambda n: f"{n}{'G' if n % 2 else 'k'}", st.integers(-(10**20), 10**20)),
)
ANY_KEY = st.one_of(
    st.sampled_from([s.attribute for s in KEYS] + ["device-memory-mib", "DEVICE_THREADS"]),
    st.text(max_size=20),
)


@given(keys=st.dictionaries(ANY_KEY, ANY_VALUE, max_size=6), limits=st.sampled_from([None, LIMITS]))
def test_any_annotations_give_a_job_within_the_bounds_or_one_bounded_error(
    keys: dict[str, object], limits: ClusterLimits | None
) -> None:
    try:
        job = parse_job("1", keys, limits=limits)
    except AnnotationError as exc:
        assert len(str(exc)) < 600 * max(len(keys), 1) + 200
        return
    assert 0 <= job.device_memory_mib <= MAX_DEVICE_MEMORY_MIB
    assert 0 <= job.device_threads <= MAX_DEVICE_THREADS
    assert 0 <= job.device_count <= MAX_DEVICES and 1 <= job.processes <= MAX_PROCESSES
    for value in (job.alpha, job.membw_gbps, job.copy_bw_mbps, job.walltime_s):
        assert value is None or math.isfinite(value)


def test_the_bad_value_the_user_guide_shows_is_the_message_a_job_gets() -> None:
    page = (ROOT / "docs" / "annotations.md").read_text()
    shown = page.split("**A bad value**", 1)[1].split("```\n", 2)[1].strip()
    found = re.fullmatch(r"job (\S+): (\w+)='([^']*)' .*", shown)
    assert found is not None, shown
    job, key, value = found.groups()
    assert message(job, {key: value, "CoshareDeviceThreads": 60}) == shown
