"""LLC ways and memory bandwidth per job through resctrl (coshare.node.ways, .resctrl),
against a temp dir with the kernel's layout (this machine has no resctrl)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coshare.errors import CgroupError, JobSpecError, Unsupported
from coshare.node.resctrl import Resctrl
from coshare.node.ways import (
    choose_ways,
    format_runs,
    mb_percent,
    parse_mask,
    parse_schemata,
    runs,
    schemata_text,
)

from tests.unit.fake_resctrl import FakeResctrl, make_resctrl


def test_masks_and_runs() -> None:
    assert parse_mask("fffff\n") == 0xFFFFF and parse_mask("0x3c0") == 0x3C0
    for bad in ("", "xyz", "f" * 65):
        with pytest.raises(ValueError):
            parse_mask(bad)
    assert runs(0b1110_0110) == [(1, 2), (5, 3)]
    assert format_runs(0b1110_0110) == "1-2,5-7" and format_runs(0) == "none"


def test_ways_are_contiguous_free_and_first_fit() -> None:
    full = 0xFFFFF  # 20 ways
    assert choose_ways(full, [], 4, 1) == 0xF
    assert choose_ways(full, [0xF, 0x3F0], 3, 1) == 0x1C00  # after the two held runs
    assert choose_ways(full, [0x4], 4, 1) == 0x78  # ways 0-1 are too few: 3-6
    with pytest.raises(JobSpecError, match=r"no 4 contiguous ways are free \(free ways: 0-2,"
                                           r"6-8 of 0-9\)"):
        choose_ways(0x3FF, [0x38, 0x200], 4, 1)
    with pytest.raises(JobSpecError, match=r"llc_ways=1: .* takes at least 2 per group "
                                           r"\(allowed: 2..20\)"):
        choose_ways(full, [], 1, 2)
    with pytest.raises(JobSpecError, match=r"allowed: 1..20"):
        choose_ways(full, [], 21, 1)


def test_bandwidth_percentages_round_up_to_the_hardware_steps() -> None:
    assert [mb_percent(p, 10, 10) for p in (1, 10, 11, 55, 100)] == [10, 10, 20, 60, 100]
    assert mb_percent(33, 20, 15) == 35
    with pytest.raises(JobSpecError, match="membw_percent=0"):
        mb_percent(0, 10, 10)


def test_schemata_are_read_and_written_as_the_kernel_does() -> None:
    text = "    MB:0=2048;1=  16\n    L3:0=ffff;1=ffff\n"  # the kernel pads AMD's values
    schemata = parse_schemata(text)
    assert schemata.domains("L3") == ("0", "1") and schemata.mask("L3", "1") == 0xFFFF
    assert schemata.lines["MB"]["1"] == "16"
    assert schemata_text(("L3",), ("0", "1"), 0xF0, 30) == "L3:0=f0;1=f0\nMB:0=30;1=30\n"
    assert schemata_text(("L3CODE", "L3DATA"), ("0",), 0x3, None) == "L3CODE:0=3\nL3DATA:0=3\n"
    with pytest.raises(ValueError):
        parse_schemata("L3 0=f\n")


def test_a_job_gets_a_group_of_its_own_ways_and_bandwidth(tmp_path: Path) -> None:
    root = make_resctrl(tmp_path)
    resctrl = FakeResctrl(root, "coshare-slurm-n1")
    assert resctrl.cache().ways == 20 and resctrl.ways_free() == 20
    first = resctrl.create("12", 4, 25)
    assert first.path == root / "coshare-slurm-n1.job-12"
    assert (first.path / "schemata").read_text() == "L3:0=f;1=f\nMB:0=30;1=30\n"
    second = resctrl.create("13", 6, None)
    assert second.mask == 0x3F0 and second.membw_percent is None
    assert resctrl.jobs() == ["12", "13"] and resctrl.ways_free() == 10
    resctrl.add("12", os.getpid())
    assert (first.path / "tasks").read_text() == f"{os.getpid()}\n"
    with pytest.raises(CgroupError, match="No such process"):
        resctrl.add("12", 2**22 + 1)  # above pid_max: no such task
    assert (root / "info" / "last_cmd_status").read_text() == f"No task {2**22 + 1}\n"
    assert Resctrl(root, "other").jobs() == []  # another node daemon's groups are not ours
    assert resctrl.remove("12") and not resctrl.remove("12")  # idempotent
    assert resctrl.ways_free() == 14
    assert resctrl.create("14", 4, None).mask == 0xF  # the freed ways are reused


def test_what_the_node_cannot_give_is_refused(tmp_path: Path) -> None:
    resctrl = FakeResctrl(make_resctrl(tmp_path, cbm_mask="ff", closids=3, min_cbm_bits=2), "c")
    resctrl.create("1", 4, None)
    with pytest.raises(JobSpecError, match="no 5 contiguous ways are free"):
        resctrl.create("2", 5, None)
    with pytest.raises(JobSpecError, match="at least 2 per group"):
        resctrl.create("2", 1, None)
    resctrl.create("2", 2, None)
    with pytest.raises(JobSpecError, match="all 3 resctrl groups \\(CLOSIDs\\)"):
        resctrl.create("3", 2, None)
    assert not (tmp_path / "c.job-3").exists()
    with pytest.raises(JobSpecError, match="membw_percent=101"):
        resctrl.create("4", None, 101)


def test_code_and_data_prioritization_gets_both_lines(tmp_path: Path) -> None:
    resctrl = FakeResctrl(make_resctrl(tmp_path, cdp=True, mba=False, domains=("0",)), "c")
    made = resctrl.create("1", 3, None)
    assert (made.path / "schemata").read_text() == "L3CODE:0=7\nL3DATA:0=7\n"
    assert resctrl.ways_free() == 17


def test_without_resctrl_or_mba_the_answer_is_unsupported_naming_the_path(
    tmp_path: Path,
) -> None:
    nothing = Resctrl(tmp_path / "resctrl")
    with pytest.raises(Unsupported) as info:
        nothing.create("1", 2, None)
    assert info.value.path == str(tmp_path / "resctrl" / "info" / "L3" / "cbm_mask")
    assert "resctrl is not mounted there" in str(info.value)
    assert nothing.jobs() == []
    # Bandwidth alone: the same reason, not a processor without MBA (resctrl is not there).
    with pytest.raises(Unsupported) as info:
        nothing.create("1", None, 50)
    assert info.value.path == str(tmp_path / "resctrl" / "info" / "MB" / "min_bandwidth")
    assert info.value.detail == "resctrl is not mounted there"
    no_mba = FakeResctrl(make_resctrl(tmp_path / "r", mba=False), "c")
    with pytest.raises(Unsupported, match=r"resctrl MB .*info/MB/min_bandwidth"):
        no_mba.create("1", None, 50)
    assert no_mba.create("1", 2, None).membw_percent is None
    no_cat = tmp_path / "r2"
    (no_cat / "info" / "MB").mkdir(parents=True)
    with pytest.raises(Unsupported, match="offers no L3 cache allocation here"):
        Resctrl(no_cat).cache()
