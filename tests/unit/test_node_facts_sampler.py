"""The node daemon's measurements and the FREEZE/THAW controls, against a temp dir with the
kernel's cgroup v1 and resctrl layouts (tests/node runs them on real cgroups)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.ledger.facts import JobLoad, JobWait, parse_facts
from coshare.node.bandwidth import Measurement, ProbeResult
from coshare.node.cgroups import V1Cgroups
from coshare.node.control.service import JobControl
from coshare.node.jobs import JobRecord, JobStore
from coshare.node.membw import ProbeFiles
from coshare.node.sampler import Sampler, facts_path
from coshare.node.spec import JobSpec

from tests.unit.fake_resctrl import FakeResctrl, make_resctrl
from tests.unit.test_node_load import fake_task

CONTROLLERS = ("freezer", "cpuset", "memory", "cpuacct")


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def job_dir(root: Path, controller: str, job: str) -> Path:
    return root / controller / "coshare" / f"job-{job}"


@pytest.fixture
def node(tmp_path: Path) -> NodeConfig:
    root = tmp_path / "cgroup"
    for controller in CONTROLLERS:
        (root / controller / "coshare").mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")
    (root / "cpuset" / "coshare" / "cpuset.effective_cpus").write_text("0-1\n")
    return NodeConfig(
        cgroup_root=str(root),
        state_dir=str(tmp_path / "state"),
        resctrl_root=str(tmp_path / "resctrl"),
        probe_interval_s=0,
        max_freeze_s=30,
    )


def add_job(
    config: NodeConfig, job: str, cpus: tuple[int, ...], usage_ns: int, llc_ways: int | None = None
) -> None:
    root = Path(config.cgroup_root)
    for controller in CONTROLLERS:
        job_dir(root, controller, job).mkdir()
        (job_dir(root, controller, job) / "cgroup.procs").write_text("")
    (job_dir(root, "cpuacct", job) / "cpuacct.usage").write_text(f"{usage_ns}\n")
    (job_dir(root, "freezer", job) / "freezer.state").write_text("THAWED\n")
    JobStore(Path(config.state_dir)).write(
        JobRecord(JobSpec(job, cpus, llc_ways=llc_ways), "v1", str(root), "coshare")
    )


def sampler(config: NodeConfig, clock: Clock, mono: Clock, proc: Path | None = None) -> Sampler:
    resctrl = FakeResctrl(make_resctrl(Path(config.resctrl_root)), "coshare")
    return Sampler(
        config,
        JobStore(Path(config.state_dir)),
        V1Cgroups(Path(config.cgroup_root)),
        resctrl,
        clock,
        mono,
        proc=proc or Path(config.state_dir) / "no-proc",
    )


def test_each_round_writes_the_nodes_facts_for_the_publishers(node: NodeConfig) -> None:
    add_job(node, "7", (0,), 1_000_000_000, llc_ways=4)
    clock, mono = Clock(1_700_000_000.0), Clock(100.0)
    measure = sampler(node, clock, mono)
    # alone, the job's group holds all 20 ways (4 of its own, 16 as its spare share); free
    # counts the ways no job is allocated, which a new job takes back
    measure.resctrl.create("7", 4, None, {}, share_spare=True)
    assert measure.resctrl.ways_free() == 0
    ProbeFiles(Path(node.state_dir)).write(
        ProbeFiles(Path(node.state_dir)).last_path,
        ProbeResult(
            Measurement((1,), 4.0, 0.25, 1_699_999_990.0, 64, "numpy"), 8.0, "cpus 1"
        ).to_dict(),
    )
    first = measure.round()
    assert first.loads == ()  # one sample: no load yet
    assert (first.llc_ways, first.llc_ways_free) == (20, 16)
    assert first.membw is not None and first.membw.fraction == 0.5
    usage = job_dir(Path(node.cgroup_root), "cpuacct", "7") / "cpuacct.usage"
    usage.write_text(f"{1_000_000_000 + 15_000_000_000}\n")  # 15 CPU s in 10 s
    clock.now += 10
    mono.now += 10
    second = measure.round()
    assert second.loads == (JobLoad("7", 1.5, 1.5, 1.5, 10.0),)
    text = facts_path(node).read_text()
    assert parse_facts(text.strip()) == second
    assert os.stat(facts_path(node)).st_mode & 0o777 == 0o644  # publishers read it
    # A group that cannot be read this round adds no sample: its job keeps what was measured,
    # and the others are measured (job 8 has one sample: no load yet).
    add_job(node, "8", (1,), 0)
    usage.write_text("garbage\n")
    clock.now += 10
    mono.now += 10
    assert measure.round().loads == second.loads
    JobStore(Path(node.state_dir)).remove("7")
    measure.round()
    assert measure.history.jobs() == ["8"]  # the ended job is forgotten


def test_each_jobs_run_queue_wait_is_published_in_cores(
    node: NodeConfig,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proc = tmp_path / "proc"
    add_job(node, "7", (0,), 0)
    tasks = [job_dir(Path(node.cgroup_root), c, "7") / "tasks" for c in ("cpuset", "cpuacct")]
    for listed in tasks:
        listed.write_text("100\n101\n")
    fake_task(proc, 100, 1_000_000_000)
    fake_task(proc, 101, 0)
    clock, mono = Clock(1_700_000_000.0), Clock(100.0)
    measure = sampler(node, clock, mono, proc)
    assert measure.round().waits == ()  # one reading: no rate yet
    # in 10 s: task 100 waited 4 s more, task 101 3 s, and a new thread 102 1 s (all of it)
    fake_task(proc, 100, 5_000_000_000)
    fake_task(proc, 101, 3_000_000_000)
    fake_task(proc, 102, 1_000_000_000)
    tasks[0].write_text("100\n101\n102\n")
    clock.now += 10
    mono.now += 10
    facts = measure.round()
    assert facts.waits == (JobWait("7", 0.8, 0.8),)
    assert parse_facts(facts_path(node).read_text().strip()).waits == facts.waits
    # then 10 s with no waiting: the last interval says 0, the history 0.4
    clock.now += 10
    mono.now += 10
    assert measure.round().waits == (JobWait("7", 0.4, 0.0),)
    # A kernel without per-task statistics: no wait facts from then on, said once with the
    # path; the loads go on.
    (proc / "100" / "schedstat").unlink()
    for _ in range(2):
        clock.now += 10
        mono.now += 10
        facts = measure.round()
        assert facts.waits == () and facts.loads
    assert measure.wait_unsupported is not None
    assert measure.wait_unsupported.path == str(proc / "100" / "schedstat")
    said = [r.getMessage() for r in caplog.records if "run-queue delay" in r.getMessage()]
    assert len(said) == 1 and str(proc / "100" / "schedstat") in said[0], said


def test_a_periodic_probe_runs_on_free_cores_only_with_a_baseline(node: NodeConfig) -> None:
    core = min(os.sched_getaffinity(0))
    config = NodeConfig(**{**node.__dict__, "probe_interval_s": 60, "probe_array_mib": 8})
    add_job(config, "7", tuple(c for c in (0, 1) if c != core), 0)
    mono = Clock(0.0)
    measure = sampler(config, Clock(1_700_000_000.0), mono)
    measure.round()
    files = ProbeFiles(Path(config.state_dir))
    assert files.last() is None  # no baseline: no probe, said once in the log
    files.write(
        files.baseline_path,
        {
            "version": 1,
            "at_s": 1.0,
            "method": "numpy",
            "array_mib": 8,
            "entries": [{"cpus": str(core), "gbps": 5.0}],
        },
    )
    mono.now += 30
    measure.round()
    assert files.last() is None  # not due yet
    mono.now += 31
    facts = measure.round()
    assert facts.membw is not None and facts.membw.cores == 1 and facts.membw.baseline_gbps == 5


def control(config: NodeConfig, line: str, uid: int = 0, clock: Clock | None = None) -> str:
    jobs = JobControl(config, clock=clock or Clock(1_700_000_000.0))
    return jobs.handle(line.encode(), os.getpid(), uid, None)


def test_freeze_and_thaw_are_idempotent_and_say_so(node: NodeConfig) -> None:
    add_job(node, "7", (0,), 0)
    state = job_dir(Path(node.cgroup_root), "freezer", "7") / "freezer.state"
    assert control(node, "FREEZE job=7") == "OK job=7 frozen=1 changed=1"
    assert state.read_text() == "FROZEN"
    assert JobStore(Path(node.state_dir)).frozen_since("7") == 1_700_000_000.0
    assert control(node, "FREEZE job=7") == "OK job=7 frozen=1 changed=0"
    assert control(node, "THAW job=7") == "OK job=7 frozen=0 changed=1"
    assert state.read_text() == "THAWED"
    assert control(node, "THAW job=7") == "OK job=7 frozen=0 changed=0"
    assert JobStore(Path(node.state_dir)).frozen_since("7") is None


def test_only_operators_freeze_known_jobs_of_a_node_with_a_freezer(node: NodeConfig) -> None:
    add_job(node, "7", (0,), 0)
    assert control(node, "FREEZE job=7", uid=1000) == (
        "ERR not_allowed job 7: FREEZE is for operators (node.operator_uids), not uid 1000"
    )
    assert control(node, "THAW job=9") == "ERR unknown_job job 9 has no group on this node"
    freezer = Path(node.cgroup_root) / "freezer"
    (freezer / "cgroup.procs").unlink()  # no freezer hierarchy mounted
    reply = control(node, "FREEZE job=7")
    assert reply.startswith(
        f"ERR unsupported job 7: unsupported: freeze: no cgroup v1 freezer hierarchy at {freezer}"
    )


def test_a_job_frozen_too_long_is_thawed_by_the_daemon(node: NodeConfig) -> None:
    add_job(node, "7", (0,), 0)
    clock = Clock(1_700_000_000.0)
    jobs = JobControl(node, clock=clock)
    assert jobs.handle(b"FREEZE job=7", os.getpid(), 0, None).endswith("changed=1")
    clock.now += 29
    assert jobs.thaw_overdue() == []
    clock.now += 2
    assert jobs.thaw_overdue() == ["7"]
    assert (
        job_dir(Path(node.cgroup_root), "freezer", "7") / "freezer.state"
    ).read_text() == "THAWED"
    assert JobStore(Path(node.state_dir)).frozen_since("7") is None
