"""The annotation parser shared by both adapters: demands in, clear per-job errors out."""

from __future__ import annotations

import pytest
from coshare.annotations import ClusterLimits, extract, is_annotated, parse_job
from coshare.errors import AnnotationError
from coshare.model import Device, Node

LIMITS = ClusterLimits.of_nodes(
    [Node("a", 16000, 65536, (Device("0", 8192, 240), Device("1", 16384, 244)))]
)


def test_condor_style_keys_parse_into_a_job() -> None:
    job = parse_job(
        "12.0",
        {"CoshareDeviceMemory": 2048, "CoshareDeviceThreads": 120, "CoshareProgram": "KM"},
        limits=LIMITS, cpu_milli=2000, memory_mib=1024, priority=3, submit_time_s=7.0,
    )  # fmt: skip
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
        {"DeviceMemory": 1, "DeviceThreads": 1, "DeviceCount": 2, "Processes": 4, "Alpha": "0.9",
         "Membw": 12.5, "CopyBandwidth": 300, "Walltime": 60},
        limits=LIMITS,
    )  # fmt: skip
    assert (job.device_count, job.processes, job.alpha, job.membw_gbps) == (2, 4, 0.9, 12.5)
    assert (job.copy_bw_mbps, job.walltime_s) == (300.0, 60.0)


def test_cpu_jobs() -> None:
    job = parse_job("1", {"CoshareKind": "cpu", "CoshareMembw": 3}, cpu_milli=4000)
    assert (job.kind, job.device_count, job.device_memory_mib, job.cpu_milli) == ("cpu", 0, 0, 4000)
    assert parse_job("2", {"CoshareProgram": "EP"}).kind == "cpu"


def message(job_id: str, keys: dict[str, object]) -> str:
    with pytest.raises(AnnotationError) as info:
        parse_job(job_id, keys, limits=LIMITS)
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
