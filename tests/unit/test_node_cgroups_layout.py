"""cgroup drivers against a temp-dir root: detection, the files written, /proc parsing.

The kernel creates a group's control files on mkdir; a temp dir does not, so these tests lay
out the files the kernel would have made and check what the drivers write into them. The
behaviour (freeze, kill, OOM) is tested on real cgroups in tests/node/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.errors import CgroupUnavailable, JobSpecError
from coshare.node.cgroups import V1Cgroups, V2Cgroups, detect_version, open_cgroups

V2_GROUP_FILES = {
    "cgroup.procs": "",
    "cgroup.events": "populated 0\nfrozen 0\n",
    "cgroup.freeze": "0",
    "cgroup.kill": "",
    "cgroup.subtree_control": "",
    "cpuset.cpus": "",
    "memory.max": "max",
    "memory.swap.max": "max",
    "memory.oom.group": "0",
    "memory.events": "oom_kill 0\n",
}


def make_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)


@pytest.fixture
def v2_root(tmp_path: Path) -> Path:
    make_files(
        tmp_path,
        {
            "cgroup.controllers": "cpuset cpu io memory pids\n",
            "cgroup.subtree_control": "cpu\n",
            "cgroup.procs": "1\n",
            "cpuset.cpus.effective": "0-3\n",
        },
    )
    make_files(tmp_path / "coshare", V2_GROUP_FILES)
    make_files(tmp_path / "coshare" / "job-7.0", V2_GROUP_FILES)
    return tmp_path


def test_v2_is_detected_and_a_job_gets_its_limits(v2_root: Path) -> None:
    assert detect_version(v2_root) == "v2"
    cgroups = open_cgroups(v2_root)
    assert isinstance(cgroups, V2Cgroups)
    group = cgroups.create("7.0", (2, 3), 256)
    job = v2_root / "coshare" / "job-7.0"
    assert (job / "cpuset.cpus").read_text() == "2-3"
    assert (job / "memory.max").read_text() == str(256 * 1024 * 1024)
    assert (job / "memory.swap.max").read_text() == "0"  # no escape into swap
    assert (job / "memory.oom.group").read_text() == "1"  # the OOM killer takes the whole job
    # Controllers are handed down from the root to coshare's group (top-down constraint).
    assert (v2_root / "cgroup.subtree_control").read_text() == "+memory"
    assert (v2_root / "coshare" / "cgroup.subtree_control").read_text() == "+memory"
    assert cgroups.jobs() == ["7.0"]
    assert group.procs_files() == (job / "cgroup.procs",)
    assert cgroups.allowed_cpus() == (0, 1, 2, 3)
    # v2 has no OOM wait queue to watch: memory.oom.group ends the whole job in the kernel.
    assert not group.is_under_oom()
    assert cgroups.parent_directories() == (v2_root / "coshare",)


def test_v2_missing_controllers_are_named(tmp_path: Path) -> None:
    make_files(tmp_path, {"cgroup.controllers": "hugetlb\n", "cgroup.subtree_control": ""})
    cgroups = V2Cgroups(tmp_path, "coshare")
    problems = cgroups.missing(["memory", "cpuset", "freeze"])
    assert len(problems) == 3
    assert "memory controller is not available" in problems[0]
    assert "lists: hugetlb" in problems[0]
    assert "cgroup.freeze is missing" in problems[2]
    with pytest.raises(CgroupUnavailable, match="cpuset controller") as info:
        cgroups.create("1", (0,), None)
    assert info.value.feature == "cpuset"


def test_v2_finds_the_job_of_a_process() -> None:
    cgroups = V2Cgroups(Path("/nonexistent"), "batch/coshare")
    assert cgroups.job_of_proc("0::/batch/coshare/job-12.0\n") == "12.0"
    assert cgroups.job_of_proc("0::/batch/coshare/job-12.0/step_1\n") == "12.0"
    assert cgroups.job_of_proc("0::/batch/coshare/other\n") is None
    assert cgroups.job_of_proc("0::/user.slice\n") is None
    assert cgroups.job_of_proc("4:memory:/batch/coshare/job-1\n") is None  # a v1 line
    assert cgroups.procs_files_of("0::/user.slice/a\n") == (
        Path("/nonexistent/user.slice/a/cgroup.procs"),
    )
    assert cgroups.procs_files_of("0::/\n") == (Path("/nonexistent/cgroup.procs"),)


@pytest.fixture
def v1_root(tmp_path: Path) -> Path:
    make_files(
        tmp_path / "cpuset",
        {
            "cgroup.procs": "",
            "cpuset.cpus": "0-7\n",
            "cpuset.mems": "0\n",
            "cpuset.effective_cpus": "0-7\n",
        },
    )
    make_files(tmp_path / "memory", {"cgroup.procs": ""})
    make_files(tmp_path / "freezer", {"cgroup.procs": ""})
    for name in ("cpuset/coshare", "cpuset/coshare/job-3"):
        make_files(tmp_path / name, {"cgroup.procs": "", "cpuset.cpus": "", "cpuset.mems": ""})
    make_files(
        tmp_path / "memory/coshare/job-3",
        {
            "cgroup.procs": "",
            "memory.limit_in_bytes": "",
            "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        },
    )
    make_files(tmp_path / "freezer/coshare/job-3", {"cgroup.procs": "", "freezer.state": ""})
    return tmp_path


def test_v1_cpuset_parents_inherit_cpus_and_mems(v1_root: Path) -> None:
    assert detect_version(v1_root) == "v1"
    cgroups = open_cgroups(v1_root)
    assert isinstance(cgroups, V1Cgroups)
    assert cgroups.hierarchies() == ["freezer", "cpuset", "memory"]
    (v1_root / "cpuset/coshare/job-3").rename(v1_root / "cpuset/job-3-aside")
    (v1_root / "cpuset/coshare").rename(v1_root / "cpuset/coshare-aside")
    # A new cpuset group takes no tasks until cpus and mems are set: coshare copies them.
    make_files(
        v1_root / "cpuset/coshare", {"cgroup.procs": "", "cpuset.cpus": "", "cpuset.mems": ""}
    )
    make_files(
        v1_root / "cpuset/coshare/job-3", {"cgroup.procs": "", "cpuset.cpus": "", "cpuset.mems": ""}
    )
    group = cgroups.create("3", (4, 5), 100)
    assert (v1_root / "cpuset/coshare/cpuset.cpus").read_text() == ""  # existed: untouched
    assert (v1_root / "cpuset/coshare/job-3/cpuset.mems").read_text() == ""
    assert (v1_root / "cpuset/coshare/job-3/cpuset.cpus").read_text() == "4-5"
    assert (v1_root / "memory/coshare/job-3/memory.limit_in_bytes").read_text() == str(100 << 20)
    # The OOM killer is off in the group: the whole job waits at its limit for the watchdog.
    oom_control = v1_root / "memory/coshare/job-3/memory.oom_control"
    assert oom_control.read_text() == "1"
    oom_control.write_text("oom_kill_disable 1\nunder_oom 0\noom_kill 2\n")
    assert group.oom_kills() == 2 and not group.is_under_oom()
    oom_control.write_text("oom_kill_disable 1\nunder_oom 1\noom_kill 0\n")
    assert group.is_under_oom()
    assert cgroups.parent_directories() == tuple(
        v1_root / c / "coshare" for c in ("freezer", "cpuset", "memory")
    )
    assert cgroups.jobs() == ["3"]
    assert cgroups.allowed_cpus() == tuple(range(8))


def test_v1_set_cpus_rewrites_a_groups_cpuset(v1_root: Path) -> None:
    # LEND and RECLAIM write a running group's cpus (the kernel moves its tasks).
    V1Cgroups(v1_root).open("3").set_cpus((1, 2, 3, 6))
    assert (v1_root / "cpuset/coshare/job-3/cpuset.cpus").read_text() == "1-3,6"
    with pytest.raises(JobSpecError, match="a cpuset holds at least one cpu"):
        V1Cgroups(v1_root).open("3").set_cpus(())


def test_v2_set_cpus_names_a_group_without_a_cpuset(v2_root: Path) -> None:
    group = V2Cgroups(v2_root).open("7.0")
    group.set_cpus((0,))
    assert (v2_root / "coshare/job-7.0/cpuset.cpus").read_text() == "0"
    (v2_root / "coshare/job-7.0/cpuset.cpus").unlink()  # made without the cpuset controller
    with pytest.raises(CgroupUnavailable, match=r"job-7.0/cpuset.cpus does not exist"):
        group.set_cpus((0,))


def test_v1_missing_hierarchy_is_named(tmp_path: Path) -> None:
    make_files(tmp_path / "freezer", {"cgroup.procs": ""})
    cgroups = V1Cgroups(tmp_path)
    with pytest.raises(CgroupUnavailable, match=r"no cgroup v1 memory hierarchy at .*/memory"):
        cgroups.create("1", (), 64)
    assert cgroups.missing(["freeze"]) == []


def test_v1_finds_the_job_of_a_process(v1_root: Path) -> None:
    cgroups = V1Cgroups(v1_root)
    text = "9:name=systemd:/\n6:freezer:/coshare/job-3\n4:memory:/other\n0::/\n"
    assert cgroups.job_of_proc(text) == "3"
    assert cgroups.job_of_proc("6:freezer:/\n4:memory:/coshare/job-3\n") is None

    # Where to put a process back: the groups another process is in, per hierarchy.
    assert cgroups.procs_files_of(
        "9:name=systemd:/\n7:cpuset:/\n6:freezer:/user/1\n4:memory,memsw:/slurm/uid_5\n"
    ) == (
        v1_root / "freezer/user/1/cgroup.procs",
        v1_root / "cpuset/cgroup.procs",
        v1_root / "memory/slurm/uid_5/cgroup.procs",
    )


def test_no_cgroups_at_all_is_reported(tmp_path: Path) -> None:
    with pytest.raises(CgroupUnavailable, match="neither a cgroup2 mount"):
        open_cgroups(tmp_path)


@pytest.mark.parametrize("parent", ["/abs", "../up", "", "a/../b"])
def test_parent_must_stay_inside_the_root(tmp_path: Path, parent: str) -> None:
    with pytest.raises(JobSpecError, match="relative path"):
        V2Cgroups(tmp_path, parent)
