"""The simulator's progress report (coshare.sim.progress): simulated jobs with a rate and the
time left; without a terminal, a plain line every few seconds."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.sim.progress import PlainProgress, progress_bar


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_plain_line_every_few_seconds_with_rate_and_time_left() -> None:
    out, clock = io.StringIO(), Clock()
    plain = PlainProgress(1000, "table1", "jobs", out, clock, every_s=5.0)
    clock.now += 1
    plain.advance(100)
    assert out.getvalue() == ""  # not yet: lines come every 5 s
    clock.now += 4
    plain.advance(150)  # 250 jobs in 5 s: 50 jobs/s, 750 left: 15 s
    assert out.getvalue() == (
        "coshare simulate table1: 250/1000 jobs (25%), 50 jobs/s, about 15 s left\n"
    )
    clock.now += 2
    plain.advance(50)
    assert out.getvalue().count("\n") == 1
    clock.now += 3
    plain.advance(700)
    plain.finish()
    lines = out.getvalue().splitlines()
    assert lines[1] == "coshare simulate table1: 1000/1000 jobs (100%), 100 jobs/s, about 0 s left"
    assert lines[2] == "coshare simulate table1: 1000 jobs in 10 s, 100 jobs/s"


def test_a_short_run_without_a_terminal_prints_nothing() -> None:
    out = io.StringIO()
    with progress_bar(10, "x", stream=out) as advance:
        advance(10)
    assert out.getvalue() == ""


def test_unknown_total_counts_without_percentage() -> None:
    out, clock = io.StringIO(), Clock()
    plain = PlainProgress(None, "alibaba-2023", "pods", out, clock, every_s=1.0)
    clock.now += 2
    plain.advance(500)
    assert out.getvalue() == "coshare simulate alibaba-2023: 500 pods, 250 pods/s\n"


def test_simulate_counts_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coshare.sim.progress.PLAIN_EVERY_S", 0.0)  # a line at every run's end
    result = CliRunner().invoke(
        cli, ["simulate", "--jobs", "40", "--nodes", "2", "--offload-share", "0.5"]
    )
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stderr.splitlines() if x.startswith("coshare simulate table1: ")]
    assert lines and lines[0].startswith("coshare simulate table1: 40/120 jobs (33%), ")
    assert "jobs/s" in lines[0] and "s left" in lines[0]
