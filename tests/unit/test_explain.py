"""The explainer (coshare.policies.explain): every node and device with the first limit that keeps a
job out, what would make it fit, and the short wait reasons the cycle writes into jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.errors import InputError
from coshare.model import Assignment, Device, Job, Node, Plan, RunningJob, Snapshot, Unplaced
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.explain import (
    MAX_WAIT_REASON_CHARS,
    explain,
    explanation_to_dict,
    wait_reason,
    wait_reason_writes,
)
from coshare.ports import Rejected, Waiting
from coshare.schema import snapshot_to_dict

from condor_addon.cli import NAMES as CONDOR_NAMES


def cluster(
    *running: RunningJob, pending: tuple[Job, ...] = (), now: float | None = None, cores: int = 8
) -> Snapshot:
    nodes = (
        Node("n1", cores * 1000, 16384, (Device("0", 8192, 240), Device("1", 8192, 240))),
        Node("n2", cores * 1000, 16384, (Device("0", 16384, 240),)),
    )
    return Snapshot(nodes, running, pending, now)


def run(
    job: str,
    mem: int,
    threads: int,
    node: str = "n1",
    device: str = "0",
    cores: int = 1000,
    state: str = "running",
) -> RunningJob:
    return RunningJob(job, node, (device,), mem, threads, cores, 1024, state)  # type: ignore[arg-type]


KNAPSACK = make_policy("knapsack")


def test_a_job_no_device_can_hold_is_told_what_to_lower() -> None:
    snap = cluster(pending=(Job("9.0", 20000, 60),))
    e = explain(snap, KNAPSACK, "9", names=CONDOR_NAMES)  # "9" finds HTCondor's "9.0"
    assert (e.job, e.state, e.code) == ("9.0", "waiting", "never_fits")
    assert e.remedies == (
        "no device has 20000 MiB: lower CoshareDeviceMemory (largest device: 16384 MiB)",
    )
    assert [(c.node, c.device, c.limit) for c in e.checks] == [
        ("n1", "0", "device memory"),
        ("n1", "1", "device memory"),
        ("n2", "0", "device memory"),
    ]
    assert e.checks[0].detail == "needs 20000 MiB, the device has 8192"
    assert e.job_fields["device_memory_mib"] == 20000


def test_a_job_that_waits_is_told_which_jobs_must_end_first() -> None:
    # Every device is full of memory: n1/0 frees enough when 7.0 ends, n2/0 needs two ends.
    snap = cluster(
        run("7.0", 6000, 60),
        run("8.0", 8000, 60, device="1"),
        run("10.0", 8000, 60, node="n2"),
        run("11.0", 7000, 60, node="n2"),
        pending=(Job("12.0", 4000, 60),),
    )
    e = explain(snap, KNAPSACK, "12.0")
    assert (e.state, e.code) == ("waiting", "no_room")
    assert e.remedies == (
        "fits n1/0 once job 7.0 ends",
        "fits n1/1 once job 8.0 ends",
        "fits n2/0 once job 10.0 ends",
    )
    assert e.checks[0].detail == "needs 4000 MiB, 2192 free (held by 7.0 running)"
    two = explain(
        cluster(
            run("10.0", 8000, 60, node="n2"),
            run("11.0", 7000, 60, node="n2"),
            run("7.0", 8192, 60),
            run("8.0", 8192, 60, device="1"),
            pending=(Job("12.0", 12000, 60),),
        ),
        KNAPSACK,
        "12.0",
    )
    assert two.remedies == ("fits n2/0 once jobs 10.0, 11.0 end",)


def test_a_waiting_job_is_told_which_later_jobs_went_first_and_why() -> None:
    # Every device has about 3 GiB free; the earlier job needs 4000 MiB, the later 2000 fits.
    snap = cluster(
        run("7.0", 5000, 60),
        run("8.0", 5000, 60, device="1"),
        run("10.0", 13000, 60, node="n2"),
        pending=(
            Job("12.0", 4000, 60, submit_time_s=100.0),
            Job("13.0", 2000, 60, submit_time_s=160.0),
        ),
    )
    e = explain(snap, KNAPSACK, "12.0")
    assert (e.state, e.code) == ("waiting", "no_room")
    placed = next(a for a in KNAPSACK.plan(snap).assignments if a.job == "13.0")
    where = f"{placed.node}/{placed.devices[0]}"
    assert e.ahead == (
        f"13.0 (submitted 60 s later) was placed on {where} this cycle",
        "why: knapsack fills each device with the set of jobs that uses it best (device memory "
        "and threads), not in submit order; a job that waited policy.age_limit_s is placed first",
    )
    assert explanation_to_dict(e)["ahead"] == list(e.ahead)
    # an earlier job placed ahead is no surprise: nothing is said of it
    first = explain(
        cluster(
            run("7.0", 5000, 60),
            run("8.0", 5000, 60, device="1"),
            run("10.0", 13000, 60, node="n2"),
            pending=(
                Job("12.0", 4000, 60, submit_time_s=200.0),
                Job("13.0", 2000, 60, submit_time_s=160.0),
            ),
        ),
        KNAPSACK,
        "12.0",
    )
    assert first.state == "waiting" and first.ahead == ()


def test_limits_are_named_in_order_threads_cores_host_memory() -> None:
    snap = cluster(
        run("7.0", 1000, 200),
        run("8.0", 1000, 10, device="1", cores=7000),
        run("10.0", 1000, 10, node="n2"),
        pending=(Job("12.0", 1000, 100, cpu_milli=2000, memory_mib=15500),),
    )
    e = explain(snap, KNAPSACK, "12.0")
    limits = {(c.node, c.device): (c.limit, c.detail) for c in e.checks}
    assert limits[("n1", "0")] == (
        "device threads",
        "needs 100 threads, 40 free (held by 7.0 running) (strict thread limit)",
    )
    assert limits[("n1", "1")][0] == "cores"
    assert limits[("n1", "1")][1].startswith("needs 2 cores, 0 free (held by 7.0 running, 8.0")
    assert limits[("n2", "0")] == (
        "host memory",
        "needs 15500 MiB, 15360 MiB free (held by 10.0 running)",
    )
    # soft threads: free threads are no limit
    soft = explain(
        snap, make_policy("knapsack", PolicyOptions(threads="soft")), "12.0", strict_threads=False
    )
    assert {(c.node, c.device): c.limit for c in soft.checks}[("n1", "0")] == "cores"


def test_gang_width_and_processes() -> None:
    snap = cluster(run("7.0", 8000, 10), pending=(Job("12.0", 4000, 60, device_count=2),))
    e = explain(snap, KNAPSACK, "12.0")
    assert ("n1", None, "device count") in [(c.node, c.device, c.limit) for c in e.checks]
    assert any(c.detail == "needs 2 devices on one node, 1 fit here" for c in e.checks)
    assert e.remedies[0] == "fits n1/0,1 once job 7.0 ends"
    gang = explain(
        cluster(pending=(Job("13.0", 100, 10, cpu_milli=3000, processes=4),)),
        KNAPSACK,
        "13.0",
        names=CONDOR_NAMES,
    )
    assert gang.checks[0].detail.startswith("needs 12 cores (4 processes), 8 free")
    assert gang.remedies == (
        "no node has 12 cores: lower request_cpus or CoshareProcesses (largest node: 8)",
    )


def test_a_device_held_back_for_an_aged_job_is_named() -> None:
    # 20.0 waited past the age limit and fits nowhere now: the device closest to fitting it
    # (n2/0) is held back for it, so 21.0, which would fit there, is told so.
    snap = cluster(
        run("7.0", 8192, 10),
        run("8.0", 8192, 10, device="1"),
        run("9.0", 12000, 10, node="n2"),
        pending=(
            Job("20.0", 8000, 60, submit_time_s=0.0),
            Job("21.0", 1000, 60, submit_time_s=9000.0),
        ),
        now=10000.0,
    )
    policy = make_policy("knapsack", PolicyOptions(age_limit_s=3600))
    aged = explain(snap, policy, "20.0")
    assert aged.code == "reserved"
    e = explain(snap, policy, "21.0")
    assert {(c.node, c.device): c.limit for c in e.checks}[("n2", "0")] == "reservation"
    assert "held back for job 20.0" in e.checks[-1].detail


def test_the_exclusive_policy_takes_only_idle_devices() -> None:
    snap = cluster(
        run("7.0", 1000, 10),
        run("8.0", 1000, 10, device="1"),
        run("9.0", 1000, 10, node="n2"),
        pending=(Job("12.0", 1000, 60),),
    )
    e = explain(snap, make_policy("exclusive"), "12.0")
    assert {c.limit for c in e.checks} == {"policy"}
    assert e.checks[0].detail == (
        "the exclusive policy takes only idle devices (held by 7.0 running)"
    )


def test_placed_refused_held_back_planned_running_and_unknown_jobs() -> None:
    snap = cluster(
        run("7.0", 1000, 10),
        run("8.0", 1000, 10, state="planned"),
        pending=(Job("12.0", 1000, 60),),
    )
    assert explain(snap, KNAPSACK, "12.0").reason.startswith("placed on n1/")
    refused = explain(snap, KNAPSACK, "13", rejected=(Rejected("13", "job 13: bad"),))
    assert (refused.state, refused.code, refused.reason) == ("refused", "invalid", "job 13: bad")
    held = explain(snap, KNAPSACK, "14", waiting=(Waiting("14", "begins later"),))
    assert (held.state, held.reason) == ("held_back", "begins later")
    assert explain(snap, KNAPSACK, "8").state == "planned"
    running = explain(snap, KNAPSACK, "7.0")
    assert (running.state, running.reason) == ("running", "running on n1/0")
    with pytest.raises(InputError, match="job 99 is not an annotated job"):
        explain(snap, KNAPSACK, "99")


def test_a_job_the_policy_did_not_choose_fits_somewhere() -> None:
    plan = Plan(
        "knapsack", (), (Unplaced("12.0", "fits n1/0 now but was not chosen", "not_chosen"),)
    )
    e = explain(cluster(pending=(Job("12.0", 1000, 60),)), KNAPSACK, "12.0", plan=plan)
    assert e.code == "not_chosen"
    assert e.remedies[0].startswith("fits n1/0 now; the policy chose other jobs")
    assert json.loads(json.dumps(explanation_to_dict(e)))["checks"][0]["limit"] is None


def test_wait_reasons_are_written_only_when_they_change() -> None:
    plan = Plan(
        "knapsack",
        (Assignment("1", "n1", ("0",)),),
        (
            Unplaced("2", "needs 240 free device threads"),
            Unplaced("3", "x\n\ty" * 200),
            Unplaced("4", "needs 240 free device threads"),
        ),
    )
    recorded = {"1": "no_room: old", "2": "no_room: needs 240 free device threads", "3": None}
    writes = wait_reason_writes(plan, recorded)
    assert writes == {"3": wait_reason(plan.unplaced[1]), "1": None}  # 4 is not ours to write
    assert len(writes["3"] or "") == MAX_WAIT_REASON_CHARS and "\n" not in (writes["3"] or "")
    assert wait_reason_writes(plan, {**recorded, "3": writes["3"], "1": None}) == {}


def test_plan_explain_on_the_command_line(tmp_path: Path) -> None:
    snap = cluster(
        run("7.0", 6000, 60),
        run("10.0", 8000, 60, node="n2"),
        pending=(Job("12.0", 4000, 60), Job("13.0", 9000, 60)),
    )
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snapshot_to_dict(snap)))
    result = CliRunner().invoke(cli, ["plan", str(path), "--explain", "13.0"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "job 13.0: waiting (no_room)" in out and "What would make it fit:" in out
    assert "n1 0 device memory needs 9000 MiB, the device has 8192" in out
    as_json = CliRunner().invoke(cli, ["plan", str(path), "--explain", "13", "--output", "json"])
    data = json.loads(as_json.stdout)
    assert data["job"] == "13.0" and data["remedies"] == ["fits n2/0 once job 10.0 ends"]
    missing = CliRunner().invoke(cli, ["plan", str(path), "--explain", "14"])
    assert missing.exit_code == 2 and "job 14 is not an annotated job" in missing.stderr
