"""The node's measurement of a job at its end (coshare.node.job_usage), against temp dirs with
the kernel's cgroup v1 and v2 file formats and a resctrl mount with MBM: CPU time from the
job's cgroup, run time from the start the node recorded, alone or shared, bandwidth from
MBM where the job has a group, and each value not measured said with the path looked at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from coshare.config import NodeConfig
from coshare.node.job_usage import NO_IPC, measure_end, write_end
from coshare.node.jobs import JobRecord, JobStore
from coshare.node.spec import JobSpec
from coshare.profiles.job_end import combine, parse_end

from tests.unit.fake_resctrl import FakeResctrl, add_mbm_bytes, make_resctrl

CONTROLLERS = ("freezer", "cpuset", "memory", "cpuacct")


def v1_node(tmp_path: Path) -> NodeConfig:
    root = tmp_path / "cgroup"
    for controller in CONTROLLERS:
        (root / controller / "coshare").mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")
    return NodeConfig(
        cgroup_root=str(root),
        cgroup_version="v1",
        state_dir=str(tmp_path / "state"),
        resctrl_root=str(tmp_path / "resctrl"),
    )


def start_v1(config: NodeConfig, job: str, usage_ns: int, at_s: float, **spec: int) -> None:
    """What job_start leaves: the job's groups, its record and its start (under the lock)."""
    root = Path(config.cgroup_root)
    for controller in CONTROLLERS:
        (root / controller / "coshare" / f"job-{job}").mkdir()
    (root / "cpuacct" / "coshare" / f"job-{job}" / "cpuacct.usage").write_text(f"{usage_ns}\n")
    store = JobStore(Path(config.state_dir))
    with store.lock():
        store.write(JobRecord(JobSpec(job, (0,), **spec), "v1", str(root), "coshare"))
        store.mark_started(job, at_s)


def test_a_job_alone_gets_its_cgroup_cpu_time_and_run_time_and_says_what_it_lacks(
    tmp_path: Path,
) -> None:
    config = v1_node(tmp_path)
    start_v1(config, "41", 7_250_000_000, 1_700_000_000.0)
    end = measure_end(config, "41", "n1", "MG", 2, 2, now_s=1_700_000_012.5)
    assert end is not None
    assert (end.job, end.node, end.program, end.scale, end.nodes) == ("41", "n1", "MG", 2, 2)
    assert end.cpu_s == pytest.approx(7.25)
    assert end.ended_at - end.started_at == pytest.approx(12.5)
    assert end.alone
    assert end.ipc is None and end.unsupported["ipc"] == NO_IPC
    assert end.membw_gbps is None
    assert end.unsupported["membw_gbps"].startswith("unsupported: resctrl MBM")
    assert (
        str(Path(config.resctrl_root) / "coshare.job-41" / "mon_data")
        in (end.unsupported["membw_gbps"])
    )


def test_a_job_that_met_another_on_the_node_is_shared_even_after_the_other_ended(
    tmp_path: Path,
) -> None:
    config = v1_node(tmp_path)
    start_v1(config, "1", 1_000_000_000, 100.0)
    start_v1(config, "2", 1_000_000_000, 110.0)
    JobStore(Path(config.state_dir)).remove("2")  # job 2 ended first
    first = measure_end(config, "1", "n1", "EP", 1, 1, now_s=200.0)
    assert first is not None and not first.alone
    # a job started on an empty node after that is alone
    JobStore(Path(config.state_dir)).remove("1")
    start_v1(config, "3", 1_000_000_000, 300.0)
    third = measure_end(config, "3", "n1", "EP", 1, 1, now_s=310.0)
    assert third is not None and third.alone


def test_cgroup_v2_cpu_stat_is_read(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    group = root / "coshare" / "job-9"
    group.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (group / "cpu.stat").write_text("usage_usec 3500000\nuser_usec 3000000\nsystem_usec 500000\n")
    config = NodeConfig(
        cgroup_root=str(root),
        cgroup_version="v2",
        state_dir=str(tmp_path / "state"),
        resctrl_root=str(tmp_path / "resctrl"),
    )
    store = JobStore(Path(config.state_dir))
    with store.lock():
        store.write(JobRecord(JobSpec("9", (0,)), "v2", str(root), "coshare"))
        store.mark_started("9", 50.0)
    end = measure_end(config, "9", "n2", "CG", 1, 1, now_s=60.0)
    assert end is not None and end.cpu_s == pytest.approx(3.5)


def test_without_cpuacct_the_cpu_time_is_unsupported_naming_why(tmp_path: Path) -> None:
    config = v1_node(tmp_path)
    start_v1(config, "5", 1, 0.0)
    (Path(config.cgroup_root) / "cpuacct" / "cgroup.procs").unlink()  # not mounted
    end = measure_end(config, "5", "n1", "CG", 1, 1, now_s=1.0)
    assert end is not None and end.cpu_s is None
    why = end.unsupported["cpu_s"]
    assert why.startswith("unsupported: job CPU time:") and "cpuacct" in why
    assert config.cgroup_root in why


def test_a_job_with_a_resctrl_group_gets_its_mbm_bandwidth(tmp_path: Path) -> None:
    config = v1_node(tmp_path)
    resctrl = FakeResctrl(make_resctrl(Path(config.resctrl_root), mbm=True), "coshare")
    start_v1(config, "8", 1_000_000_000, 1000.0, llc_ways=4)
    resctrl.create("8", 4, None, {}, share_spare=False)
    add_mbm_bytes(resctrl.path("8"), "0", 30_000_000_000)
    add_mbm_bytes(resctrl.path("8"), "1", 10_000_000_000)
    end = measure_end(config, "8", "n1", "MG", 1, 1, now_s=1010.0)
    assert end is not None and end.membw_gbps == pytest.approx(4.0)
    assert "membw_gbps" not in end.unsupported


def test_no_record_or_no_recorded_start_writes_nothing(tmp_path: Path) -> None:
    config = v1_node(tmp_path)
    assert measure_end(config, "77", "n1", "MG", 1, 1) is None
    store = JobStore(Path(config.state_dir))
    store.write(JobRecord(JobSpec("78", (0,)), "v1", config.cgroup_root, "coshare"))
    assert measure_end(config, "78", "n1", "MG", 1, 1) is None  # started by an older coshare


def test_the_written_record_reads_back_and_two_nodes_make_one_run(tmp_path: Path) -> None:
    config = v1_node(tmp_path)
    start_v1(config, "12", 4_000_000_000, 100.0)
    spool = tmp_path / "spool"
    a = measure_end(config, "12", "n1", "LU", 2, 2, now_s=110.0)
    assert a is not None
    path = write_end(spool, a)
    assert path.name == "12@n1.json"
    back = parse_end(json.loads(path.read_text()), str(path))
    assert back == a
    b = back.__class__(**{**back.__dict__, "node": "n2", "ended_at": 112.0, "cpu_s": 3.0})
    run = combine([back, b])
    assert run.elapsed_s == pytest.approx(12.0)
    assert run.cpu_s == pytest.approx(7.0)
    assert run.alone and run.ipc is None and "ipc" in run.unsupported
