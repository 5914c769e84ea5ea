"""Each job's CPU load from its cgroup's CPU time (coshare.node.load) and the cgroup files it
reads, against a temp dir with the kernel's layout (tests/node measures a real job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.errors import CgroupError, CgroupUnavailable, Unsupported
from coshare.ledger.facts import JobLoad
from coshare.node.cgroups import V1Cgroups, V2Cgroups
from coshare.node.load import (
    LoadHistory,
    RunDelays,
    parse_cpu_stat,
    parse_cpuacct_usage,
    parse_schedstat,
)
from coshare.node.procfs import read_run_delays


def test_cpu_time_is_read_in_seconds_from_both_versions() -> None:
    assert parse_cpuacct_usage("2500000000\n") == 2.5
    assert parse_cpu_stat("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n") == 1.5
    for bad in ("", "-1", "12 ns", "1e9"):
        with pytest.raises(ValueError):
            parse_cpuacct_usage(bad)
    with pytest.raises(ValueError, match="no usage_usec"):
        parse_cpu_stat("user_usec 5\n")
    with pytest.raises(ValueError):
        parse_cpu_stat("usage_usec lots\n")


def test_a_history_gives_the_mean_last_and_highest_load_over_its_window() -> None:
    history = LoadHistory(3)
    assert history.summary("a") is None
    history.add("a", 0.0, 10.0)
    assert history.summary("a") is None  # one sample is no load yet
    for t, cpu in ((60, 40), (120, 160), (180, 190), (240, 250)):  # loads 0.5, 2, 0.5, 1
        history.add("a", float(t), float(cpu))
    # Three intervals kept (60..240): mean (250-40)/180, last 1.0, highest 2.0.
    assert history.summary("a") == JobLoad("a", pytest.approx(210 / 180), 1.0, 2.0, 180.0)


def test_a_counter_that_goes_back_starts_afresh_and_ended_jobs_are_forgotten() -> None:
    history = LoadHistory(5)
    history.add("a", 0.0, 100.0)
    history.add("a", 10.0, 110.0)
    history.add("a", 20.0, 3.0)  # the job's group was made anew: not a negative load
    assert history.summary("a") is None
    history.add("a", 30.0, 13.0)
    assert history.summary("a") == JobLoad("a", 1.0, 1.0, 1.0, 10.0)
    history.add("a", 30.0, 99.0)  # no later than the last sample: ignored
    history.add("b", 0.0, 0.0)
    history.retain(["b"])
    assert history.jobs() == ["b"]
    with pytest.raises(ValueError):
        LoadHistory(0)


def test_groups_of_both_versions_report_their_cpu_time(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    for controller in ("freezer", "cpuset", "memory", "cpuacct"):
        (v1 / controller / "coshare" / "job-7").mkdir(parents=True)
        (v1 / controller / "cgroup.procs").write_text("")
    (v1 / "cpuacct" / "coshare" / "job-7" / "cpuacct.usage").write_text("3000000000\n")
    assert V1Cgroups(v1).open("7").cpu_usage_s() == 3.0
    (v1 / "cpuacct" / "coshare" / "job-7" / "cpuacct.usage").write_text("junk\n")
    with pytest.raises(CgroupError, match=r"cpuacct\.usage"):
        V1Cgroups(v1).open("7").cpu_usage_s()
    no_acct = tmp_path / "v1b"
    (no_acct / "freezer").mkdir(parents=True)
    (no_acct / "freezer" / "cgroup.procs").write_text("")
    with pytest.raises(CgroupUnavailable, match="no cgroup v1 cpuacct hierarchy"):
        V1Cgroups(no_acct).open("7").cpu_usage_s()
    v2 = tmp_path / "v2"
    (v2 / "coshare" / "job-7").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("")
    (v2 / "coshare" / "job-7" / "cpu.stat").write_text("usage_usec 250000\n")
    assert V2Cgroups(v2).open("7").cpu_usage_s() == 0.25
    (v2 / "coshare" / "job-7" / "cpu.stat").unlink()
    with pytest.raises(CgroupUnavailable, match=r"cpu\.stat is missing"):
        V2Cgroups(v2).open("7").cpu_usage_s()


# Run-queue delay: /proc/<tid>/schedstat is "<ns on a CPU> <ns waiting on a run queue>
# <timeslices>\n" (Documentation/scheduler/sched-stats.rst); /proc/<tid>/stat gives the
# task's start time (field 22). A fake /proc tree with that layout:


def fake_task(proc: Path, tid: int, wait_ns: int, start: int = 1000, run_ns: int = 5) -> None:
    base = proc / str(tid)
    base.mkdir(parents=True, exist_ok=True)
    (base / "schedstat").write_text(f"{run_ns} {wait_ns} 3\n")
    fields = ["S", "1", *["0"] * 17, str(start), "0"]  # field 3 (state) .. field 23
    (base / "stat").write_text(f"{tid} (py thon) {' '.join(fields)}\n")


def test_the_run_queue_delay_is_the_second_schedstat_field() -> None:
    assert parse_schedstat("56990326 223258273 198\n") == 223258273
    for bad in ("", "1 2", "1 2 3 4", "1 -2 3", "a b c", "1 2.5 3"):
        with pytest.raises(ValueError):
            parse_schedstat(bad)


def test_tasks_delays_are_read_and_gone_tasks_left_out(tmp_path: Path) -> None:
    fake_task(tmp_path, 10, 2_000_000_000, start=77)
    fake_task(tmp_path, 11, 5)
    assert read_run_delays([10, 11, 12], tmp_path) == {(10, 77): 2_000_000_000, (11, 1000): 5}
    (tmp_path / "11" / "stat").unlink()  # ended between the two reads
    assert read_run_delays([11], tmp_path) == {}


def test_a_kernel_without_schedstat_is_unsupported_naming_the_path(tmp_path: Path) -> None:
    fake_task(tmp_path, 10, 1)
    (tmp_path / "10" / "schedstat").unlink()  # the task is there, its statistics are not
    with pytest.raises(Unsupported) as no_stats:
        read_run_delays([10], tmp_path)
    assert no_stats.value.path == str(tmp_path / "10" / "schedstat")
    assert "CONFIG_SCHED_INFO" in str(no_stats.value)
    (tmp_path / "10" / "schedstat").write_text("1 2\n")  # a layout this code does not read
    with pytest.raises(Unsupported, match=r"not 'run_ns wait_ns slices'"):
        read_run_delays([10], tmp_path)


def test_run_delays_count_what_each_task_gained_and_never_go_back() -> None:
    delays = RunDelays()
    assert delays.add("j", {(1, 0): 4_000_000_000}) == 0.0  # the first reading is the base
    # task 1 gained 1 s; task 2 is new (born since): all its 0.5 s count
    assert delays.add("j", {(1, 0): 5_000_000_000, (2, 9): 500_000_000}) == 1.5
    # task 1 ended: nothing goes back; pid 2 reused by another task (a new start time)
    assert delays.add("j", {(2, 50): 250_000_000}) == 1.75
    delays.retain([])
    assert delays.add("j", {(2, 50): 900_000_000}) == 0.0  # forgotten: a new base


def test_the_task_lists_of_both_versions_are_read(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    for controller in ("cpuset", "cpuacct"):
        group = v1 / controller / "coshare" / "job-7"
        (group / "sub").mkdir(parents=True)
        (v1 / controller / "cgroup.procs").write_text("")
        (group / "cgroup.procs").write_text("")
        (group / "tasks").write_text("10\n11\n")
        (group / "sub" / "tasks").write_text("12\n")
    (v1 / "cpuset" / "coshare" / "cpuset.effective_cpus").write_text("0-1\n")
    assert V1Cgroups(v1).open("7").task_ids() == (10, 11, 12)
    v2 = tmp_path / "v2"
    group = v2 / "coshare" / "job-7"
    group.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (group / "cgroup.threads").write_text("20\n21\n")
    assert V2Cgroups(v2).open("7").task_ids() == (20, 21)
