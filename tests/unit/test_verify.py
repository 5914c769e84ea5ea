"""The plan checker catches every kind of violation (so the property tests' oracle can fail)."""

from __future__ import annotations

import pytest
from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Assignment, Device, Job, Node, Plan, RunningJob, Snapshot, Unplaced

NODE = Node("a", 2 * MILLI, 4096, (Device("0", 1000, 100), Device("1", 1000, 100)))


def snap(*pending: Job, running: tuple[RunningJob, ...] = ()) -> Snapshot:
    return Snapshot((NODE,), running, pending)


def test_a_sound_plan_has_no_problems() -> None:
    s = snap(Job("1", 500, 50), Job("2", 500, 50))
    plan = Plan("t", (Assignment("1", "a", ("0",)), Assignment("2", "a", ("0",))))
    assert check_plan(s, plan) == []


@pytest.mark.parametrize(
    ("plan", "pending", "expected"),
    [
        (Plan("t"), (Job("1", 1, 1),), "pending job 1 is missing from the plan"),
        (
            Plan("t", (), (Unplaced("1", "x"), Unplaced("1", "y"))),
            (Job("1", 1, 1),),
            "job 1 is unplaced 2 times",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)),), (Unplaced("1", "x"),)),
            (Job("1", 1, 1),),
            "job 1 is both assigned and unplaced",
        ),
        (Plan("t", (Assignment("9", "a", ("0",)),)), (), "job 9 is in the plan but not pending"),
        (
            Plan("t", (Assignment("1", "z", ("0",)),)),
            (Job("1", 1, 1),),
            "job 1 is assigned to unknown node z",
        ),
        (
            Plan("t", (Assignment("1", "a", ("7",)),)),
            (Job("1", 1, 1),),
            "job 1 is assigned to unknown device a/7",
        ),
        (
            Plan("t", (Assignment("1", "a", ()),)),
            (Job("1", 1, 1),),
            "job 1 needs 1 devices, got 0 on a",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0", "0")),)),
            (Job("1", 1, 1, device_count=2),),
            "job 1 is given the same device twice on a",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)), Assignment("2", "a", ("0",)))),
            (Job("1", 600, 1), Job("2", 600, 1)),
            "device a/0 memory 1200 > 1000 MiB",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)), Assignment("2", "a", ("0",)))),
            (Job("1", 1, 60), Job("2", 1, 60)),
            "device a/0 threads 120 > 100",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)),)),
            (Job("1", 1, 101),),
            "job 1 declares 101 threads, more than a/0 has (100)",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)), Assignment("2", "a", ("1",)))),
            (Job("1", 1, 1, cpu_milli=1500), Job("2", 1, 1, cpu_milli=1000)),
            "node a cores 2.5 > 2",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)),)),
            (Job("1", 1, 1, memory_mib=2048, processes=3),),
            "node a memory 6144 > 4096 MiB",
        ),
        (
            Plan("t", (Assignment("1", "a", ("0",)), Assignment("1", "a", ("1",)))),
            (Job("1", 1, 1),),
            "job 1 is assigned twice to the same node",
        ),
    ],
)
def test_each_violation_is_reported(plan: Plan, pending: tuple[Job, ...], expected: str) -> None:
    assert expected in check_plan(snap(*pending), plan)


def test_soft_mode_allows_thread_overflow_but_not_a_single_oversized_job() -> None:
    s = snap(Job("1", 1, 60), Job("2", 1, 60))
    plan = Plan("t", (Assignment("1", "a", ("0",)), Assignment("2", "a", ("0",))))
    assert check_plan(s, plan, strict_threads=False) == []
    assert check_plan(s, plan, strict_threads=True) == ["device a/0 threads 120 > 100"]


def test_running_jobs_count_and_old_overload_is_not_blamed_on_the_plan() -> None:
    running = (RunningJob("r", "a", ("0",), 900, 10),)
    s = snap(Job("1", 200, 1), running=running)
    assert check_plan(s, Plan("t", (Assignment("1", "a", ("0",)),))) == [
        "device a/0 memory 1100 > 1000 MiB"
    ]
    over = (RunningJob("r", "a", ("0",), 1500, 10),)
    assert (
        check_plan(snap(Job("1", 1, 1), running=over), Plan("t", (), (Unplaced("1", "x"),))) == []
    )
