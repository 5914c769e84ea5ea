"""The memory-bandwidth probe: its baseline and comparisons (pure), and the probe itself run
for a moment on this machine's cores (its mechanics; the figures are bench/node_probe.py's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from coshare.errors import ProbeError
from coshare.node.bandwidth import (
    Baseline,
    Measurement,
    ProbeResult,
    baseline_for,
    check_cpus,
    init_sets,
)
from coshare.node.membw import ProbeFiles, array_mib, llc_bytes, measure, probe

ONE_CORE = min(os.sched_getaffinity(0))


def test_init_measures_every_count_up_to_16_then_powers_of_two() -> None:
    assert init_sets((0, 1)) == [(0,), (0, 1)]
    assert init_sets((3, 1), given=(3,)) == [(1,), (1, 3), (3,)]
    big = init_sets(tuple(range(100)))
    assert [len(s) for s in big] == [*range(1, 17), 32, 64, 100]


def test_a_probe_is_compared_with_the_same_cores_else_as_many_else_interpolated() -> None:
    base = Baseline({(0,): 10.0, (0, 1): 18.0, (0, 1, 2, 3): 30.0}, 0.0, "numpy", 64)
    assert baseline_for(base, (1, 0)).gbps == 18.0
    assert baseline_for(base, (5,)).source == "1 cores (other cores of this node)"
    three = baseline_for(base, (1, 2, 3))
    assert three.gbps == 24.0 and three.source == "interpolated between 2 and 4 cores"
    assert baseline_for(base, tuple(range(8))).gbps == 30.0  # saturated
    with pytest.raises(ProbeError, match="baseline is empty"):
        baseline_for(Baseline({}, 0.0, "numpy", 64), (0,))


def test_cores_outside_the_allowed_set_are_named() -> None:
    with pytest.raises(ProbeError, match=r"cores 5,7-8 are not in this node's allowed set 0-3"):
        check_cpus((1, 5, 7, 8), (0, 1, 2, 3))
    with pytest.raises(ProbeError, match="names no core"):
        check_cpus((), (0,))
    assert check_cpus((3, 1, 1), (0, 1, 2, 3)) == (1, 3)


def test_records_read_back_and_bad_ones_say_to_init_again() -> None:
    base = Baseline({(0,): 10.5, (0, 1): 19.0}, 1700.0, "numpy", 64)
    assert Baseline.from_dict(json.loads(json.dumps(base.to_dict())), "f") == base
    for bad in (
        {"version": 2},
        {"version": 1, "entries": [{"cpus": "0", "gbps": "nan"}]},
        {"version": 1, "entries": [{"cpus": "x", "gbps": 1}]},
        [],
    ):
        with pytest.raises(ProbeError, match="run `coshare node probe membw --init` on an idle"):
            Baseline.from_dict(bad, "f")
    result = ProbeResult(Measurement((1,), 5.0, 0.25, 1700.0, 64, "numpy"), 10.0, "cpus 1")
    assert result.fraction == 0.5
    assert ProbeResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    with pytest.raises(ValueError):
        ProbeResult.from_dict({**result.to_dict(), "baseline_gbps": 0})


def test_the_array_is_four_times_the_llc_within_bounds(tmp_path: Path) -> None:
    assert array_mib(100, 1 << 30) == 100
    assert array_mib(0, 32 << 20) == 128
    assert array_mib(0, 1 << 20) == 64 and array_mib(0, 1 << 30) == 1024
    assert array_mib(0, None) == 256
    cache = tmp_path / "cpu0" / "cache"
    for index, (level, size) in enumerate((("1", "32K"), ("2", "1024K"), ("3", "32768K"))):
        (cache / f"index{index}").mkdir(parents=True)
        (cache / f"index{index}" / "level").write_text(level + "\n")
        (cache / f"index{index}" / "size").write_text(size + "\n")
    assert llc_bytes(tmp_path) == 32 << 20
    assert llc_bytes(tmp_path / "nothing") is None


def test_a_real_probe_streams_reports_and_records(tmp_path: Path) -> None:
    found = measure((ONE_CORE,), 8, seconds=0.02)
    assert found.cpus == (ONE_CORE,) and found.gbps > 0 and found.method == "numpy"
    files = ProbeFiles(tmp_path)
    with pytest.raises(
        ProbeError,
        match=r"no membw baseline for this node \(.*\); run "
        r"`coshare node probe membw --init` on an idle node",
    ):
        probe(files, (ONE_CORE,), None, size_mib=8, seconds=0.02)
    result, made = probe(files, (ONE_CORE,), None, init=True, size_mib=8, seconds=0.02)
    assert made is not None and made.by_cpus[(ONE_CORE,)] == result.measurement.gbps
    assert Baseline.from_dict(json.loads(files.baseline_path.read_text()), "f").by_cpus
    assert result.fraction == 1.0
    again, none = probe(files, (ONE_CORE,), [ONE_CORE], size_mib=8, seconds=0.02)
    assert none is None and again.baseline_source == f"cpus {ONE_CORE}"
    last = files.last()
    assert last is not None and last.to_dict() == again.to_dict()
    with pytest.raises(ProbeError, match="are not in this node's allowed set"):
        probe(files, (ONE_CORE,), [ONE_CORE + 1000], size_mib=8)


def test_a_core_the_process_may_not_use_is_a_probe_error() -> None:
    outside = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ProbeError, match=f"cannot stream on cores {outside}: core {outside}"):
        measure((outside,), 8, seconds=0.01)


def test_a_probe_record_read_back_says_the_same_share() -> None:
    # 28.8617958 / 29.0755183 rounds to 0.9926; the figures as written, 28.8618 / 29.0755,
    # to 0.9927: the record must say what its own figures give.
    from coshare.node.bandwidth import Measurement, ProbeResult

    result = ProbeResult(
        Measurement((0,), 28.861795808260084, 0.0204, 1795853870.387, 8, "numpy"),
        29.07551839093658,
        "cpus 0",
    )
    assert ProbeResult.from_dict(result.to_dict()).to_dict() == result.to_dict()
