"""``perf stat -x,`` parsing (coshare.node.perfstat) on outputs recorded with perf 6.1 (and one
composed from perf-stat(1)'s CSV format where no machine here counts: see the fixtures' README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.node.perfstat import event_name, ipc_of, parse_perf_stat_csv, why_not_counted

FIXTURES = Path(__file__).parent.parent / "fixtures" / "perf" / "6.1"
EVENTS = ("instructions", "cycles")


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_machine_without_counters_says_not_supported() -> None:
    counts = parse_perf_stat_csv(read("not-supported.csv"), EVENTS)
    assert set(counts) == {"instructions", "cycles"}
    assert counts["instructions"].value is None and counts["instructions"].status == "not supported"
    assert ipc_of(counts) is None
    assert why_not_counted(counts, EVENTS) == "perf says <not supported> for instructions"


def test_counted_software_events_and_an_unsupported_one_in_one_run() -> None:
    counts = parse_perf_stat_csv(
        read("software-counted.csv"), ("task-clock", "context-switches", "instructions")
    )
    assert counts["task-clock"].value == pytest.approx(129.33)
    assert counts["context-switches"].value == 90 and counts["context-switches"].status == "counted"
    assert counts["instructions"].value is None


def test_interval_output_with_a_not_counted_marker() -> None:
    counts = parse_perf_stat_csv(read("interval-not-counted.csv"), ("task-clock", "cycles"))
    # the intervals' task-clock deltas add up; the <not counted> interval adds nothing
    assert counts["task-clock"].value == pytest.approx(1.52 + 0.18)
    assert counts["cycles"].status == "not supported"


def test_hybrid_pmus_add_up_and_a_metric_only_line_is_no_count() -> None:
    counts = parse_perf_stat_csv(read("hardware-composed.csv"), EVENTS)
    assert counts["instructions"].value == 2.4e9 and counts["cycles"].value == 1.5e9
    assert ipc_of(counts) == pytest.approx(1.6)
    assert why_not_counted(counts, EVENTS) is None


def test_event_names_without_pmu_or_modifiers() -> None:
    assert event_name("cpu_core/instructions/") == "instructions"
    assert event_name("instructions:u") == "instructions"
    assert event_name(" cycles ") == "cycles"


def test_a_missing_event_zero_cycles_and_a_garbled_value() -> None:
    only = parse_perf_stat_csv("123,,instructions,1,100.00,,\n", EVENTS)
    assert why_not_counted(only, EVENTS) == "perf printed no cycles count"
    zero = parse_perf_stat_csv("5,,instructions,1,100.00,,\n0,,cycles,1,100.00,,\n", EVENTS)
    assert ipc_of(zero) is None and why_not_counted(zero, EVENTS) == "perf counted 0 cycles"
    for bad in ("12x,,cycles,1,100.00,,\n", "-5,,cycles,1,100.00,,\n", "nan,,cycles,1,100,,\n"):
        with pytest.raises(ValueError, match="is not a count"):
            parse_perf_stat_csv(bad, EVENTS)
