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
from hypothesis import given
from hypothesis import strategies as st

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
    with pytest.raises(
        JobSpecError,
        match=r"no 4 contiguous ways are free \(free ways: 0-2,"
        r"6-8 of 0-9\)",
    ):
        choose_ways(0x3FF, [0x38, 0x200], 4, 1)
    with pytest.raises(
        JobSpecError,
        match=r"llc_ways=1: .* takes at least 2 per group "
        r"\(allowed: 2..20\)",
    ):
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


# -- spare ways (Spread-n-Share 4.4) and the kernel's checks -------------------------------------


def test_spare_ways_go_to_the_jobs_in_equal_shares() -> None:
    from coshare.ledger.llc import floor_share, spare_shares

    assert spare_shares(20, [("a", 4), ("b", 3)]) == {"a": 7, "b": 6}  # 13 spare: 7 + 6
    assert floor_share(20, [("a", 4), ("b", 3)]) == 6
    assert spare_shares(20, []) == {} and floor_share(20, []) == 0
    assert spare_shares(8, [("a", 4), ("b", 4)]) == {"a": 0, "b": 0}


def test_layout_packs_every_job_and_shares_what_is_left() -> None:
    from coshare.node.ways import layout_masks

    assert layout_masks(0xFFFFF, [("a", 4), ("b", 3)], False) == {"a": 0xF, "b": 0x70}
    shared = layout_masks(0xFFFFF, [("a", 4), ("b", 3)], True)
    assert shared == {"a": 0x7FF, "b": 0xFF800}  # 4 + 7 and 3 + 6: every way in use
    with pytest.raises(
        JobSpecError,
        match="job c: this node's L3 has 20 ways and coshare jobs hold 18 \\(a: 10, b: 8\\)",
    ):
        layout_masks(0xFFFFF, [("a", 10), ("b", 8), ("c", 3)], True)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.booleans())
def test_layouts_are_contiguous_disjoint_and_hold_at_least_each_jobs_ways(
    ways: list[int], share: bool
) -> None:
    from coshare.node.ways import layout_masks

    allocations = [(f"j{i}", w) for i, w in enumerate(ways)]
    if sum(ways) > 20:
        with pytest.raises(JobSpecError):
            layout_masks(0xFFFFF, allocations, share)
        return
    masks = layout_masks(0xFFFFF, allocations, share)
    union = 0
    for job, w in allocations:
        mask = masks[job]
        assert len(runs(mask)) == 1 and mask & union == 0 and mask & ~0xFFFFF == 0
        assert bin(mask).count("1") >= w
        union |= mask
    assert (union == 0xFFFFF) == (share or sum(ways) == 20)


def test_a_new_job_takes_its_ways_back_from_the_spare_shares(tmp_path: Path) -> None:
    resctrl = FakeResctrl(make_resctrl(tmp_path, min_cbm_bits=2), "c")
    first = resctrl.create("1", 4, None, {}, share_spare=True)
    assert first.mask == 0xFFFFF
    second = resctrl.create("2", 6, None, {"1": 4}, share_spare=True)  # 10 spare: 5 + 5
    assert second.mask == 0xFFE00
    assert resctrl.held_masks() == [0x1FF, 0xFFE00]
    assert resctrl.ways_free({"1": 4, "2": 6}) == 10
    with pytest.raises(JobSpecError, match="coshare jobs hold 10"):
        resctrl.create("3", 11, None, {"1": 4, "2": 6}, share_spare=True)
    assert resctrl.held_masks() == [0x1FF, 0xFFE00] and resctrl.jobs() == ["1", "2"]
    resctrl.remove("1")
    assert resctrl.relayout({"1": 4, "2": 6}, share_spare=True) == {"2": 0xFFFFF}  # 1 is gone


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("L3:0=5;1=5\n", "The mask 5 has non-consecutive 1-bits"),
        ("L3:0=4;1=4\n", "Need at least 2 bits in the mask"),
        ("L3:0=1fffff\n", "Mask out of range"),
        ("L3:0=fg\n", "Non-hex character in the mask fg"),
        ("L3:7=f\n", "Unknown domain 7"),
        ("L3:x=f\n", "Missing '=' or non-numeric domain"),
        ("L2:0=f\n", "Unknown or unsupported resource name 'L2'"),
        ("MB:0=5\n", "MB value 5 out of range [10,100]"),
        ("L3:0=f", "Buffer does not end with newline"),
    ],
)
def test_the_fake_kernel_refuses_bad_schemata_as_resctrl_does(
    tmp_path: Path, text: str, status: str
) -> None:
    root = make_resctrl(tmp_path, min_cbm_bits=2)
    resctrl = FakeResctrl(root, "c")
    resctrl.create("1", 4, None)
    before = (resctrl.path("1") / "schemata").read_text()
    with pytest.raises(CgroupError, match="Invalid argument"):
        resctrl._write(resctrl.path("1") / "schemata", text)
    assert (root / "info" / "last_cmd_status").read_text() == status + "\n"
    assert (resctrl.path("1") / "schemata").read_text() == before  # nothing changed


def test_a_mask_the_kernel_refuses_fails_the_create_and_says_why(tmp_path: Path) -> None:
    class Sparse(FakeResctrl):  # a writer that would write a mask with a hole
        def _write(self, path: Path, text: str) -> None:
            super()._write(path, text.replace("=f;", "=5;") if "L3" in text else text)

    resctrl = Sparse(make_resctrl(tmp_path), "c")
    with pytest.raises(CgroupError, match="the kernel says: The mask 5 has non-consecutive"):
        resctrl.create("1", 4, None)
    assert resctrl.jobs() == []  # no half-made group


def test_mbm_counts_add_up_over_domains_and_unavailable_is_an_error(tmp_path: Path) -> None:
    from tests.unit.fake_resctrl import add_mbm_bytes

    resctrl = FakeResctrl(make_resctrl(tmp_path / "m", mbm=True), "c")
    resctrl.create("1", 4, None)
    add_mbm_bytes(resctrl.path("1"), "0", 3000)
    add_mbm_bytes(resctrl.path("1"), "1", 500)
    assert resctrl.mbm_total_bytes("1") == 3500
    (resctrl.path("1") / "mon_data" / "mon_L3_01" / "mbm_total_bytes").write_text("Unavailable\n")
    with pytest.raises(CgroupError, match="'Unavailable' is not a number"):
        resctrl.mbm_total_bytes("1")
    plain = FakeResctrl(make_resctrl(tmp_path / "p"), "c")
    plain.create("1", 4, None)
    with pytest.raises(Unsupported, match="resctrl MBM"):
        plain.mbm_total_bytes("1")


def test_out_of_closids_is_enospc_with_the_kernels_status(tmp_path: Path) -> None:
    root = make_resctrl(tmp_path, closids=2)
    resctrl = FakeResctrl(root, "c")
    resctrl._make_group(resctrl.path("1"))
    with pytest.raises(OSError, match="No space left"):
        resctrl._make_group(resctrl.path("2"))
    assert (root / "info" / "last_cmd_status").read_text() == "Out of CLOSIDs\n"
