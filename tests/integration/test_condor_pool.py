"""coshare on a real HTCondor pool (deploy/condor/pool: Debian's condor 23.9.6 in a chroot,
four startds with fake Xeon Phi devices, node 4 named with quotes and ClassAd operators).

Each test submits real jobs, runs real cycles, and checks HTCondor's own records (queue,
history: the slot each job ran in) and what each job saw (its output).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from coshare.config import CondorConfig
from coshare.errors import SchedulerUnavailable
from coshare.policies import make_policy

from condor_addon.client import CondorClient, EditFailed, configure_bindings, open_client
from condor_addon.view import machine_of
from tests.faulty_policies import CrashesOnJob
from tests.integration.condor_pool import (
    CHROOT,
    CLIENT_CONFIG,
    ROOT,
    Pool,
    pool,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.condor]

# The coshare command of the interpreter that runs the tests (the project's venv under make).
COSHARE = str(Path(sys.executable).with_name("coshare"))

DEVICES = {  # the pool's devices (deploy/condor/pool): memory MiB, hardware threads
    ("node1", "0"): (8192, 240),
    ("node1", "1"): (8192, 240),
    ("node2", "0"): (8192, 240),
    ("node2", "1"): (8192, 240),
    ("node3", "0"): (16384, 240),
    ('node4 " || true || "', "0"): (8192, 240),
    ('node4 " || true || "', "1"): (8192, 240),
}
QUOTED = 'node4 " || true || "'


def annotated(memory: int | str, threads: int | str) -> dict[str, str]:
    """Submit-file annotations; strings are ClassAd expressions as a user would write them."""
    return {"+CoshareDeviceMemory": str(memory), "+CoshareDeviceThreads": str(threads)}


def test_jobs_run_where_planned_and_no_device_is_oversubscribed(live: Pool) -> None:
    sizes = [
        (1024, 30),
        (2048, 60),
        (3072, 120),
        (5000, 60),
        (6000, 240),
        (9000, 120),
        (512, 240),
        (2048, 120),
    ]
    clusters: dict[str, tuple[int, int]] = {}
    for memory, threads in sizes:
        cluster = live.submit(
            3, sleep_s=random.Random(memory).choice([2, 3, 4]), **annotated(memory, threads)
        )
        clusters[cluster] = (memory, threads)
    plain = live.submit(6, sleep_s=2)
    planned: dict[str, tuple[str, tuple[str, ...]]] = {}
    deadline = time.monotonic() + 300
    while live.jobs() and time.monotonic() < deadline:
        report = live.cycle()
        assert report.exit_status == 0, report.apply
        assert plain not in {a.job.split(".")[0] for a in report.plan.assignments}
        for a in report.plan.assignments:
            if a.job in report.apply.applied:
                planned[a.job] = (a.node, a.devices)
        time.sleep(1)
    assert not live.jobs(), "jobs still queued after 300 s"

    nodes = live.node_of_machine()
    spans: dict[tuple[str, str], list[tuple[float, float, int, int]]] = defaultdict(list)
    for cluster, (memory, threads) in clusters.items():
        for ad in live.history(cluster):
            job = f"{ad['ClusterId']}.{ad['ProcId']}"
            node = nodes[machine_of(ad["LastRemoteHost"])]
            devices = tuple(ad["CosharePlacedDevices"].split(","))
            assert ad["ExitCode"] == 0
            assert (node, devices) == planned[job] == (ad["CosharePlacedNode"], devices)
            start, end, seen = live.output(job).splitlines()[0].split()
            assert seen == ",".join(devices)  # what the wrapper handed the job
            for device in devices:
                spans[(node, device)].append((float(start), float(end), memory, threads))
    assert QUOTED in {node for node, _ in spans}, "no job ran on the quoted node"
    for device, runs in spans.items():
        for start, _, _, _ in runs:  # the load at every start is the peak load
            load = [(m, t) for s, e, m, t in runs if s <= start < e]
            memory, threads = DEVICES[device]
            assert sum(m for m, _ in load) <= memory, (device, load)
            assert sum(t for _, t in load) <= threads, (device, load)
    for ad in live.history(plain):  # unannotated jobs: untouched, never planned
        assert "CoshareManaged" not in ad and "CoshareUserRequirements" not in ad
        assert "Coshare" not in str(ad["Requirements"])
        assert ad["ExitCode"] == 0


def test_bad_annotations_hold_those_jobs_and_the_cycle_goes_on(live: Pool) -> None:
    good = live.submit(2, sleep_s=60, **annotated(1024, 60))
    text = live.submit(1, **annotated('"lots"', 60))
    negative = live.submit(1, **annotated(-5, 60))
    threads = live.submit(1, **annotated(512, '"many"'))
    huge = live.submit(1, **annotated(99999, 60))
    injected = live.submit(1, **annotated('"1\\" || true || \\""', 60))
    report = live.cycle()
    assert report.exit_status == 0
    assert {a.job for a in report.plan.assignments} == {f"{good}.0", f"{good}.1"}
    reasons = {r.job: r.reason for r in report.rejected}
    assert "CoshareDeviceMemory='lots' is not a number" in reasons[f"{text}.0"]
    assert "CoshareDeviceMemory='-5' is negative" in reasons[f"{negative}.0"]
    assert "CoshareDeviceThreads='many' is not a number" in reasons[f"{threads}.0"]
    assert "exceeds every device (largest: 16384 MiB)" in reasons[f"{huge}.0"]
    assert "is not a number" in reasons[f"{injected}.0"]
    jobs = live.jobs()
    for cluster in (text, negative, threads, huge, injected):
        job = jobs[f"{cluster}.0"]
        assert job["JobStatus"] == 5  # held, with the reason naming key and allowed range
        assert str(job["HoldReason"]).startswith("coshare: CoshareDevice"), sorted(job.items())
        assert "allowed:" in str(job["HoldReason"])
    wait_for(
        lambda: all(
            j["JobStatus"] == 2 for i, j in live.jobs().items() if i.startswith(f"{good}.")
        ),
        60,
        "the good jobs to start",
    )


def test_an_absurd_annotation_holds_that_job_and_the_others_are_placed(live: Pool) -> None:
    # A device memory of 400 digits crashed every cycle (OverflowError).
    good = live.submit(3, requirements="CoshareNeverStart =?= true", **annotated(1024, 60))
    absurd = live.submit(1, **annotated('"' + "9" * 400 + '"', 60))
    report = live.cycle()
    assert report.exit_status == 0
    assert set(report.apply.applied) == {f"{good}.{p}" for p in range(3)}
    reason = {r.job: r.reason for r in report.rejected}[f"{absurd}.0"]
    assert reason.startswith(f"job {absurd}.0: CoshareDeviceMemory='9999")
    assert len(reason) < 400  # the value is shown bounded
    job = live.jobs()[f"{absurd}.0"]
    assert job["JobStatus"] == 5, job  # held, with the reason naming the key
    assert str(job["HoldReason"]).startswith("coshare: CoshareDeviceMemory='9999")


def test_a_policy_that_crashes_on_one_job_still_places_every_other_job(live: Pool) -> None:
    cluster = live.submit(4, requirements="CoshareNeverStart =?= true", **annotated(1024, 60))
    bad = f"{cluster}.2"
    report = live.cycle(policy=CrashesOnJob(make_policy("knapsack"), bad))
    assert report.exit_status == 0
    assert set(report.apply.applied) == {f"{cluster}.{p}" for p in (0, 1, 3)}
    assert [c.jobs for c in report.contained] == [(bad,)]
    # in the queue: the others' placements, and the reason of the one left out, for its owner
    jobs = live.jobs()
    for p in (0, 1, 3):
        assert jobs[f"{cluster}.{p}"].get("CosharePlacedNode"), jobs[f"{cluster}.{p}"]
    assert not jobs[bad].get("CosharePlacedNode")
    shown = pool("exec", "condor_q", "-af", "ClusterId", "ProcId", "CoshareWaitReason").splitlines()
    reasons = {
        f"{line.split()[0]}.{line.split()[1]}": line.split(maxsplit=2)[2]
        for line in shown
        if line.startswith(cluster)
    }
    assert reasons[bad].startswith(
        "policy_failed: the knapsack policy failed while planning "
        "this job (IndexError: index 0 is out of bounds"
    )


def test_dry_run_writes_nothing_and_a_second_cycle_writes_nothing(live: Pool) -> None:
    cluster = live.submit(4, requirements="CoshareNeverStart =?= true", **annotated(2048, 60))
    before = live.jobs(f"ClusterId == {cluster}")
    dry = live.cycle(dry_run=True)
    assert len(dry.apply.applied) == 4 and dry.apply.dry_run
    assert live.jobs(f"ClusterId == {cluster}") == before
    first = live.cycle()
    assert len(first.apply.applied) == 4
    second = live.cycle()
    assert (second.plan.pending, second.apply.applied) == (0, ())  # planned jobs hold devices
    jobs = live.jobs()
    assert all(jobs[f"{cluster}.{p}"]["CosharePlacedNode"] for p in range(4))


def test_a_placement_that_never_starts_is_planned_again_after_the_timeout(live: Pool) -> None:
    cluster = live.submit(2, requirements="CoshareNeverStart =?= true", **annotated(2048, 60))
    live.cycle()
    stamped = {j: v["CosharePlacedAt"] for j, v in live.jobs().items()}
    kept = live.cycle(replan_after_s=300)
    assert kept.plan.pending == 0 and kept.snapshot is not None
    assert {r.id for r in kept.snapshot.running if r.state == "planned"} == set(stamped)
    time.sleep(1.1)
    again = live.cycle(replan_after_s=1)
    assert {a.job for a in again.plan.assignments} == {f"{cluster}.0", f"{cluster}.1"}
    # Same place: nothing to write (idempotent); elsewhere: rewritten with a new time.
    for job in again.apply.applied:
        assert live.jobs()[job]["CosharePlacedAt"] > stamped[job]
    assert set(again.apply.applied) | set(again.apply.unchanged) == set(stamped)


class DyingClient(CondorClient):
    """The real client, whose process "dies" (raises) after ``budget`` edit transactions: the
    queue is left exactly as a SIGKILL at that point would leave it."""

    def __init__(self, budget: int) -> None:
        config = CondorConfig(config_file=str(CLIENT_CONFIG), retry_wait_s=0.1)
        super().__init__(config, configure_bindings(config.config_file))
        self.budget = budget

    def _spend(self) -> None:
        if self.budget == 0:
            raise KeyboardInterrupt("killed mid-apply")
        self.budget -= 1

    def edit_ids(self, job_ids, attribute, value):  # type: ignore[no-untyped-def]
        self._spend()
        return super().edit_ids(job_ids, attribute, value)

    def edit_where(self, constraint, attribute, value):  # type: ignore[no-untyped-def]
        self._spend()
        return super().edit_where(constraint, attribute, value)


def assert_consistent(live: Pool) -> int:
    """Every open gate belongs to a complete placement, and the open gates together
    oversubscribe no device. Returns the number of open gates."""
    load: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    open_gates = 0
    for job, ad in live.jobs("CoshareManaged =?= true").items():
        if not ad.get("CosharePlacedNode"):
            continue
        open_gates += 1
        devices = str(ad.get("CosharePlacedDevices") or "").split(",")
        assert ad.get("CosharePlacedAt"), job
        assert len(devices) == 1 and (ad["CosharePlacedNode"], devices[0]) in DEVICES, job
        key = (str(ad["CosharePlacedNode"]), devices[0])
        load[key][0] += int(ad["CoshareDeviceMemory"])  # type: ignore[call-overload]
        load[key][1] += int(ad["CoshareDeviceThreads"])  # type: ignore[call-overload]
    for key, (memory, threads) in load.items():
        assert memory <= DEVICES[key][0] and threads <= DEVICES[key][1], (key, memory, threads)
    return open_gates


def test_a_cycle_killed_mid_apply_leaves_the_queue_consistent_and_converges(live: Pool) -> None:
    live.submit(40, requirements="CoshareNeverStart =?= true", **annotated(1500, 60))
    live.submit(10, requirements="CoshareNeverStart =?= true", **annotated(5000, 120))
    deaths = 0
    for budget in range(40):  # die after 0, 1, 2, ... transactions, until a cycle completes
        try:
            live.cycle(client=DyingClient(budget), replan_after_s=0)
        except KeyboardInterrupt:
            deaths += 1
            assert_consistent(live)
            continue
        break
    assert deaths >= 5  # every step of the apply was interrupted at least once
    final = live.cycle(replan_after_s=0)
    assert final.exit_status == 0
    settled = live.cycle(replan_after_s=300)
    assert settled.apply.applied == () and settled.plan.pending == len(settled.plan.unplaced)
    assert assert_consistent(live) == len(final.plan.placed_jobs)


def test_sigkill_of_the_cycle_command_at_random_moments_converges(
    live: Pool, tmp_path: Path
) -> None:
    live.submit(300, requirements="CoshareNeverStart =?= true", **annotated(700, 30))
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\ncycle: {{replan_after_s: 0}}\n")
    command = [COSHARE, "--config", str(config), "condor", "cycle"]
    rng = random.Random(4)
    for _ in range(4):
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_consistent(live)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert assert_consistent(live) > 0


def test_schedd_or_collector_down_is_a_clear_error_and_exit_1(live: Pool, tmp_path: Path) -> None:
    config = tmp_path / "coshare.yaml"
    coshare = [COSHARE, "--config", str(config)]
    # 29619: in coshare's port range, used by no daemon of the pool (collector 29618, others
    # 29620-29699), so nothing answers there.
    config.write_text(
        f"condor: {{config_file: {CLIENT_CONFIG}, collector: '127.0.0.1:29619',"
        " retry_attempts: 2, retry_wait_s: 0}\n"
    )
    down = subprocess.run([*coshare, "condor", "cycle"], capture_output=True, text=True)
    assert down.returncode == 1
    assert "coshare: error: cannot query the collector 127.0.0.1:29619 after 2 attempts" in (
        down.stderr
    )
    config.write_text(
        f"condor: {{config_file: {CLIENT_CONFIG}, retry_attempts: 2, retry_wait_s: 0}}\n"
    )
    subprocess.run(
        [str(ROOT / "deploy/condor/pool"), "exec", "condor_off", "-schedd"],
        check=True,
        capture_output=True,
    )
    try:
        wait_for(
            lambda: (
                subprocess.run([*coshare, "condor", "cycle"], capture_output=True).returncode == 1
            ),
            30,
            "the cycle to notice the schedd is gone",
        )
        gone = subprocess.run([*coshare, "condor", "cycle"], capture_output=True, text=True)
        assert gone.returncode == 1
        assert gone.stderr.startswith("coshare: error: ") and "schedd" in gone.stderr
        assert "Traceback" not in gone.stderr
    finally:
        subprocess.run(
            [str(ROOT / "deploy/condor/pool"), "exec", "condor_on", "-schedd"],
            check=True,
            capture_output=True,
        )
        wait_for(lambda: _schedd_up(), 60, "the schedd to come back")
        live.client.forget_schedd()


def _schedd_up() -> bool:
    try:
        config = CondorConfig(config_file=str(CLIENT_CONFIG), retry_attempts=1)
        open_client(config).job_ads("false")
    except (SchedulerUnavailable, EditFailed):
        return False
    return True


def test_show_prints_the_pool_and_the_next_plan(live: Pool, tmp_path: Path) -> None:
    live.submit(2, requirements="CoshareNeverStart =?= true", **annotated(2048, 60))
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")
    shown = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "show"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "4 nodes, 7 devices" in shown and "2 pending" in shown
    assert os.path.exists(CHROOT / "pool" / "client_config")


def test_a_drained_node_takes_nothing_and_show_says_why(live: Pool, tmp_path: Path) -> None:
    # condor_drain, through the bindings: the node's slots turn "Drained"; the cycle leaves
    # the node out (as Slurm's drained nodes) and show lists it with the drain reason.
    startd_name = next(m for m, n in live.node_of_machine().items() if n == "node3")
    location = live.htcondor.Collector().locate(live.htcondor.DaemonType.Startd, startd_name)
    startd = live.htcondor.Startd(location)
    request = startd.drainJobs(reason="coshare-test firmware")
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")

    def show() -> str:
        return subprocess.run(
            [COSHARE, "--config", str(config), "condor", "show"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    try:
        wait_for(lambda: "Nodes that take no jobs now" in show(), 60, "node3 to be drained")
        flat = " ".join(show().split())
        assert "3 nodes, 6 devices (and 1 nodes taking no jobs)" in flat, flat
        assert "node3 Drained/" in flat and "coshare-test firmware" in flat, flat
        live.submit(1, requirements="CoshareNeverStart =?= true", **annotated(12000, 60))
        report = live.cycle(dry_run=True)  # only node3's 16 GiB device could hold it
        assert report.plan.placed == 0
        [refused] = report.rejected
        assert "exceeds every device (largest: 8192 MiB)" in refused.reason
    finally:
        startd.cancelDrainJobs(request)
    wait_for(lambda: "Nodes that take no jobs now" not in show(), 60, "node3 to take jobs")


def test_waiting_jobs_carry_their_reason_and_explain_says_what_would_make_them_fit(
    live: Pool, tmp_path: Path
) -> None:
    # 240 threads each: one job per device (7 devices), so 3 of 10 wait.
    cluster = live.submit(10, requirements="CoshareNeverStart =?= true", **annotated(4096, 240))
    first = live.cycle()
    waiting = sorted(u.job for u in first.plan.unplaced)
    assert len(first.apply.applied) == 7 and len(waiting) == 3
    assert sorted(first.apply.noted) == waiting
    # what the owner sees with HTCondor's own tool
    shown = pool("exec", "condor_q", "-af", "ClusterId", "ProcId", "CoshareWaitReason").splitlines()
    reasons = {
        f"{line.split()[0]}.{line.split()[1]}": line.split(maxsplit=2)[2]
        for line in shown
        if line.startswith(cluster)
    }
    for job in waiting:
        assert reasons[job].startswith("no_room: needs 240 free device threads"), reasons[job]
    placed = sorted(set(reasons) - set(waiting))
    assert all(reasons[job] == "undefined" for job in placed)
    # unchanged reasons are not written again
    assert live.cycle().apply.noted == ()
    # explain, as the admin runs it
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")
    explained = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "explain", waiting[0], "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(explained.stdout)
    assert (data["state"], data["code"]) == ("waiting", "no_room")
    assert len(data["checks"]) == 7 and {c["limit"] for c in data["checks"]} == {"device threads"}
    assert data["remedies"][0].startswith("fits ") and " once job " in data["remedies"][0]
    table = subprocess.run(
        [COSHARE, "--config", str(config), "condor", "explain", waiting[0]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"job {waiting[0]}: waiting (no_room)" in table and "What would make it fit:" in table
    # a job placed later has its reason cleared
    live.schedd.act(
        live.htcondor.JobAction.Remove,
        f"ClusterId == {cluster} && ProcId == {placed[0].split('.')[1]}",
    )
    wait_for(lambda: placed[0] not in live.jobs(), 60, "the removed job to leave")
    third = live.cycle()
    moved = [a.job for a in third.plan.assignments]
    assert len(moved) == 1 and moved[0] in waiting and moved[0] in third.apply.noted
    assert live.jobs()[moved[0]].get("CoshareWaitReason") is None
