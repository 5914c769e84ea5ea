"""The model's job is a msgspec struct (built in C) that the standard library's dataclass
functions still take as the frozen dataclass it was."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from coshare.model import Job


def a_job() -> Job:
    return Job("7.0", 8192, 60, cpu_milli=1500, charges=(("user alice", 1.0),), program="LU")


def test_dataclass_functions_take_a_job() -> None:
    job = a_job()
    assert dataclasses.is_dataclass(job)
    names = [f.name for f in dataclasses.fields(Job)]
    assert names[:4] == ["id", "device_memory_mib", "device_threads", "device_count"]
    assert names == list(Job.__struct_fields__)
    moved = dataclasses.replace(job, id="8.0", priority=3)
    assert (moved.id, moved.priority, moved.device_memory_mib, moved.charges) == (
        "8.0",
        3,
        8192,
        (("user alice", 1.0),),
    )
    assert dataclasses.asdict(job)["cpu_milli"] == 1500
    assert {f.name: f.default for f in dataclasses.fields(Job)}["cpu_milli"] == 1000


def test_a_job_is_frozen_hashable_and_copies() -> None:
    job = a_job()
    with pytest.raises(AttributeError):
        job.id = "9.0"  # type: ignore[misc]
    assert job == a_job() and hash(job) == hash(a_job())
    assert job != dataclasses.replace(job, alpha=0.9)
    assert pickle.loads(pickle.dumps(job)) == job
    assert copy.deepcopy(job) == job
    assert {job: 1}[a_job()] == 1


def test_defaults_and_properties_are_the_dataclasss() -> None:
    job = Job("1.0")
    assert (job.device_count, job.cpu_milli, job.kind, job.processes, job.nodes) == (
        1,
        1000,
        "device",
        1,
        1,
    )
    assert job.needs_device and not job.is_gang
    assert (
        Job("2.0", kind="cpu", device_count=0, cpu_milli=500, processes=4).total_cpu_milli == 2000
    )
