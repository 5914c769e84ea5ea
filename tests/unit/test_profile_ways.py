"""The way sweep of ``coshare profile ways`` (coshare.node.waysweep; Spread-n-Share 4.1, 5.1)
against a fake resctrl kernel (tests/unit/fake_resctrl.py) and a fake ``perf`` that writes
perf 6.1's ``-x,`` format with counts for the ways of the group its caller is in
(tests/fixtures/perf/fake/perf). This machine has neither resctrl nor hardware counters: there
the command says ``unsupported`` with the path it looked at (last test)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli import profile as profile_cli
from coshare.cli.main import cli
from coshare.errors import InputError, Unsupported
from coshare.node.waysweep import default_way_counts, sweep
from coshare.profiles.store import read_profile

from tests.unit.fake_resctrl import FakeResctrl, make_resctrl

FAKE_PERF = str(Path(__file__).parent.parent / "fixtures" / "perf" / "fake" / "perf")
IPC = "2=0.62,4=0.91,8=1.08,20=1.2"
MBM = "2=9e9,4=7e9,8=5.5e9,20=5e9"


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeResctrl:
    root = make_resctrl(tmp_path / "resctrl", mbm=True)
    monkeypatch.setenv("FAKE_RESCTRL", str(root))
    monkeypatch.setenv("FAKE_PERF_IPC", IPC)
    monkeypatch.setenv("FAKE_MBM_BYTES", MBM)
    return FakeResctrl(root, "coshare")


def ticks() -> object:
    counter = itertools.count()
    return lambda: float(next(counter))  # each run takes exactly 1 s


def test_the_sweep_measures_ipc_and_bandwidth_at_each_way_count(node: FakeResctrl) -> None:
    found = sweep(node, "MG", ["true"], perf=FAKE_PERF, clock=ticks())  # type: ignore[arg-type]
    assert found.node_ways == 20 and found.membw_unsupported is None
    assert [p.ways for p in found.points] == [2, 4, 8, 20]  # the paper's samples (5.1)
    # the fake perf reported the IPC of the ways of the group this process was in
    assert [p.ipc for p in found.points] == pytest.approx([0.62, 0.91, 1.08, 1.2])
    assert [p.membw_gbps for p in found.points] == pytest.approx([9.0, 7.0, 5.5, 5.0])
    assert found.falls() == []
    # the group is gone and this process is back in the default group
    assert node.jobs() == [] and str(os.getpid()) in (node.root / "tasks").read_text().split()


def test_the_median_of_repeats_and_a_falling_curve_is_reported(
    node: FakeResctrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PERF_IPC", "2=0.7,4=0.65,6=0.9")
    found = sweep(node, "CG", ["true"], [6, 2, 4], perf=FAKE_PERF, repeat=3)
    assert [p.ways for p in found.points] == [2, 4, 6]
    assert all(len(p.seconds) == 3 for p in found.points)
    assert found.falls() == ["IPC falls from 0.7 at 2 ways to 0.65 at 4"]


def test_without_mbm_the_bandwidth_is_missing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_resctrl(tmp_path / "r", mbm=False, cbm_mask="7ff")  # 11 ways, no L3_MON
    monkeypatch.setenv("FAKE_RESCTRL", str(root))
    monkeypatch.setenv("FAKE_PERF_IPC", "2=0.5,4=0.8,8=0.9,11=1.0")
    found = sweep(FakeResctrl(root, "coshare"), "EP", ["true"], perf=FAKE_PERF)
    assert [p.ways for p in found.points] == [2, 4, 8, 11]
    assert all(p.membw_gbps is None for p in found.points)
    assert found.membw_unsupported is not None
    assert str(root / "info" / "L3_MON" / "mon_features") in found.membw_unsupported


@pytest.mark.parametrize("mode", ["not-supported", "not-counted"])
def test_counters_perf_cannot_count_are_unsupported_naming_perf(
    node: FakeResctrl, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("FAKE_PERF_MODE", mode)
    with pytest.raises(
        Unsupported, match=f"perf says <{mode.replace('-', ' ')}> for instructions"
    ) as caught:
        sweep(node, "MG", ["true"], perf=FAKE_PERF)
    assert caught.value.path == f"{FAKE_PERF} stat -e instructions,cycles"
    assert node.jobs() == []  # no group left behind


def test_no_perf_program_is_unsupported(node: FakeResctrl, tmp_path: Path) -> None:
    with pytest.raises(Unsupported, match="no perf program"):
        sweep(node, "MG", ["true"], perf=str(tmp_path / "no-perf"))
    assert node.jobs() == []


def test_a_failing_program_and_bad_way_counts_are_refused(node: FakeResctrl) -> None:
    with pytest.raises(InputError, match="the program failed under perf \\(status 1\\)"):
        sweep(node, "MG", ["false"], perf=FAKE_PERF)
    with pytest.raises(InputError, match=r"--ways 21: .* 20 ways .*allowed: 1\.\.20"):
        sweep(node, "MG", ["true"], [2, 21], perf=FAKE_PERF)
    with pytest.raises(InputError, match="at least two way counts"):
        sweep(node, "MG", ["true"], [4], perf=FAKE_PERF)
    node.create("7", 4, None)  # a job's group: the sweep wants the node to itself
    with pytest.raises(InputError, match="jobs 7 have resctrl groups on this node"):
        sweep(node, "MG", ["true"], perf=FAKE_PERF)
    assert node.jobs() == ["7"]


def test_default_way_counts() -> None:
    assert default_way_counts(20) == (2, 4, 8, 20)
    assert default_way_counts(11) == (2, 4, 8, 11)
    assert default_way_counts(4) == (2, 4)


def test_the_command_writes_the_curves_into_the_draft_and_import_takes_it(
    node: FakeResctrl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profile_cli, "open_resctrl", FakeResctrl)
    draft = tmp_path / "MG.draft"
    draft.write_text(
        json.dumps({"program": "MG", "run_time_s": {"1": 100, "2": 80, "4": 75, "8": 90}})
    )
    out = CliRunner().invoke(
        cli,
        [
            "profile",
            "ways",
            "MG",
            "--into",
            str(draft),
            "--cores",
            "16",
            "--resctrl",
            str(node.root),
            "--perf",
            FAKE_PERF,
            "--",
            "true",
        ],
    )
    assert out.exit_code == 0, out.output
    assert " 2 of 20 ways: IPC 0.6200" in out.output
    data = json.loads(draft.read_text())
    assert data["ways"] == [2, 4, 8, 20] and data["ipc"] == [0.62, 0.91, 1.08, 1.2]
    assert data["cores"] == 16 and len(data["membw_gbps"]) == 4
    assert all(b > 0 for b in data["membw_gbps"])  # bytes over wall time (not asserted exactly)
    assert "perf stat instructions/cycles" in data["sources"]["ipc"]
    store = tmp_path / "store"
    out = CliRunner().invoke(cli, ["profile", "import", str(draft), "--store", str(store)])
    assert out.exit_code == 0, out.output
    profile = read_profile(store / "MG.json")
    assert profile.ways_for(0.9) == 8 and profile.best_scale == 4


def test_the_command_without_mbm_records_ipc_and_says_bandwidth_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_resctrl(tmp_path / "r", mbm=False)
    monkeypatch.setenv("FAKE_RESCTRL", str(root))
    monkeypatch.setenv("FAKE_PERF_IPC", IPC)
    monkeypatch.setattr(profile_cli, "open_resctrl", FakeResctrl)
    draft = tmp_path / "d.json"
    draft.write_text(json.dumps({"program": "MG", "membw_gbps": [1, 2]}))  # stale: dropped
    out = CliRunner().invoke(
        cli,
        [
            "profile",
            "ways",
            "MG",
            "--into",
            str(draft),
            "--cores",
            "8",
            "--resctrl",
            str(root),
            "--perf",
            FAKE_PERF,
            "--ways",
            "2,20",
            "--",
            "true",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "membw_gbps not measured (unsupported: resctrl MBM" in out.output
    data = json.loads(draft.read_text())
    assert data["ways"] == [2, 20] and "membw_gbps" not in data


def test_on_this_machine_the_command_says_unsupported_with_the_path(tmp_path: Path) -> None:
    # No --resctrl: the configured node.resctrl_root (/sys/fs/resctrl), which this machine
    # lacks; if a machine running this has resctrl, the perf check comes next.
    if Path("/sys/fs/resctrl/info").is_dir():
        pytest.skip("this machine has resctrl")
    draft = tmp_path / "d.json"
    out = CliRunner().invoke(
        cli, ["profile", "ways", "MG", "--into", str(draft), "--cores", "4", "--", "true"]
    )
    assert out.exit_code == 1
    assert (
        "unsupported: resctrl L3 (cache ways): resctrl is not mounted there "
        "(/sys/fs/resctrl/info/L3/cbm_mask)"
    ) in out.output
    assert not draft.exists()
