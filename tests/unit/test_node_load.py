"""Each job's CPU load from its cgroup's CPU time (coshare.node.load) and the cgroup files it
reads, against a temp dir with the kernel's layout (tests/node measures a real job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.errors import CgroupError, CgroupUnavailable
from coshare.facts import JobLoad
from coshare.node.cgroups import V1Cgroups, V2Cgroups
from coshare.node.load import LoadHistory, parse_cpu_stat, parse_cpuacct_usage


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
