"""The simulator's figures are for showing others: user terms and units in titles
and axes, integer node counts, the spread over seeds, legends outside the data, and the
paper's values beside coshare's where the paper gives them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from coshare.sim.experiments import Comparison, Sweep
from coshare.sim.footprint import Footprint
from coshare.sim.metrics import RunSummary

plt = pytest.importorskip("matplotlib.pyplot")


def summary(policy: str, makespan_s: float, nodes: int = 8, jobs: int = 1000) -> RunSummary:
    return RunSummary(policy, nodes, jobs, makespan_s, 0.5, 1.0, 1.0, 1.0, 1.0, 1, 0)


def comparison(seed: int, workload: str = "table1", jobs: int = 1000) -> Comparison:
    runs = {
        p: summary(p, m + 10 * seed, jobs=jobs)
        for p, m in (("exclusive", 3700.0), ("random", 2450.0), ("knapsack", 2400.0))
    }
    footprints = {
        p: Footprint(6 + (seed == 1 and p == "random"), 3700.0) for p in ("random", "knapsack")
    }
    return Comparison(workload, seed, 8, jobs, 0.8, runs, footprints)


def sweep(seed: int) -> Sweep:
    runs = {
        (p, n): summary(p, base - 5 * n + seed, n, 200 * n)
        for n in (2, 3, 4)
        for p, base in (("exclusive", 5900.0), ("random", 4350.0), ("knapsack", 4270.0))
    }
    return Sweep("normal", seed, 0.8, {n: 200 * n for n in (2, 3, 4)}, runs)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The figure save_figure made (kept open for the test)."""
    from coshare.sim import plot

    seen: dict[str, Any] = {}
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig))
    plot.save_figure(
        tmp_path / "f.png",
        comparisons={"table1": [comparison(0), comparison(1)]},
        sweeps={"pressure (normal)": [sweep(0), sweep(1)]},
    )
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    return seen


def visible(fig: Any) -> list[Any]:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_titles_and_axes_speak_the_readers_terms_with_units_one_panel_per_row(
    drawn: dict[str, Any],
) -> None:
    bars, footprint, sizes, reduction = visible(drawn["fig"])
    assert bars.get_ylabel() == "makespan (s)"
    assert [t.get_text() for t in bars.get_xticklabels()] == ["Table I set"]
    assert "1000 jobs on 8 nodes x 1 Xeon Phi" in bars.get_title()
    assert "mean of seeds 0-1, bars: min-max" in bars.get_title()
    assert footprint.get_ylabel() == "footprint (nodes)"
    assert sizes.get_xlabel() == "cluster size (nodes, one Xeon Phi each)"
    assert "constant job pressure: 200 normal-distribution jobs per node" in sizes.get_title()
    assert reduction.get_ylabel() == "knapsack's makespan reduction (%)"
    for ax in (footprint, sizes, reduction):  # node counts are whole numbers
        axis = ax.yaxis if ax is footprint else ax.xaxis
        ticks = [t for t in axis.get_ticklocs() if ax.get_ylim()[0] <= t or ax is not footprint]
        assert all(float(t).is_integer() for t in ticks), ax.get_title()
    # one panel per row, at a page's width; the bar panels name their x axis
    from coshare.sim import plot

    fig = drawn["fig"]
    width, height = fig.get_size_inches()
    assert width == plot.PANEL_WIDTH_IN and height == plot.PANEL_HEIGHT_IN * len(visible(fig))
    assert len({round(ax.get_position().x0, 3) for ax in visible(fig)}) == 1
    assert bars.get_xlabel() == footprint.get_xlabel() == "job set (job size distribution)"


def test_the_paper_is_drawn_beside_coshare_and_legends_cover_no_data(drawn: dict[str, Any]) -> None:
    fig = drawn["fig"]
    fig.canvas.draw()
    bars, footprint, _, reduction = visible(fig)
    labels = [t.get_text() for t in bars.get_legend().get_texts()]
    assert "knapsack (MCCK), paper" in labels and "knapsack (MCCK), coshare" in labels
    paper = [
        p.get_height()
        for c in bars.containers
        if c.get_label() == "knapsack (MCCK), paper"
        for p in c.patches
    ]
    assert paper == [2183.0]  # Table II
    assert any(c.get_label() == "random (MCC), paper" for c in footprint.containers)
    stars = [line for line in reduction.get_lines() if "paper" in line.get_label()]
    assert sorted(float(line.get_ydata()[0]) for line in stars) == [11.0, 40.0]
    for ax in visible(fig):  # error bars over seeds
        assert any(
            getattr(c, "has_yerr", False)
            or type(c).__name__ == "ErrorbarContainer"
            or getattr(c, "errorbar", None) is not None
            for c in ax.containers
        ), ax
        legend = ax.get_legend().get_window_extent()
        assert legend.y1 <= ax.get_window_extent().y0, ax.get_title()  # below the panel


def test_a_sweeps_figure_draws_the_same_min_max_bars_with_units(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from coshare.sim import plot
    from coshare.sim.report import GridRun

    seen: dict[str, Any] = {}
    monkeypatch.setattr(plt, "close", lambda fig: seen.setdefault("fig", fig))
    runs = [
        GridRun("normal", (("jobs", jobs),), seed, summary("knapsack", 1000.0 + jobs * seed))
        for jobs in (100, 150, 200)
        for seed in (0, 1, 2)
    ]
    plot.save_sweep_figure(tmp_path / "s.png", runs, ["jobs"], "makespan_s")
    (ax,) = visible(seen["fig"])
    assert ax.get_ylabel() == "makespan (s)" and ax.get_xlabel() == "jobs"
    assert "bars: min-max" in ax.get_title()
    (line,) = ax.containers
    mean = line.lines[0].get_ydata()
    assert list(mean) == [1000.0 + 100, 1000.0 + 150, 1000.0 + 200]  # mean of seeds 0-2
    segments = line.lines[2][0].get_segments()  # each bar: (x, low), (x, high)
    low, high = [float(s[0][1]) for s in segments], [float(s[1][1]) for s in segments]
    assert list(low) == [1000.0, 1000.0, 1000.0]  # seed 0: the smallest
    assert list(high) == [1200.0, 1300.0, 1400.0]  # seed 2: the largest
    ticks = [t for t in ax.get_xticks() if 100 <= t <= 200]
    assert ticks and all(float(t).is_integer() for t in ticks)
