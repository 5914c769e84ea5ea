"""Tables of the Wu & Hong experiment (:mod:`coshare.sim.collocation`), the paper beside.

Pure: builds text, does no I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rich import box
from rich.table import Table

from coshare.sim.collocation import (
    PAPER,
    PAPER_SPLIT,
    PAPER_STRONGER_COLLECTIBLE,
    PAPER_UNDERUSED_CORE_S,
    CollocationRun,
)

#: The label of the paper's conventional Torque/Maui run: ``collocate`` lending nothing.
CONVENTIONAL = "conventional"


def _table(title: str, columns: Sequence[str]) -> Table:
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return table


def _mean(runs: Sequence[CollocationRun], attr: str) -> float:
    return statistics.fmean(float(getattr(r, attr)) for r in runs)


def _span(runs: Sequence[CollocationRun], attr: str, fmt: str = "{:.0f}") -> str:
    values = [float(getattr(r, attr)) for r in runs]
    mean = fmt.format(statistics.fmean(values))
    if min(values) == max(values):
        return mean
    return f"{mean} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _paper(key: str, which: int | None) -> str:
    """`` (paper)`` for a metric of the paper's run ``which``; empty for other policies."""
    if which is None:
        return ""
    value = PAPER[key][which]
    if value is None:
        return " (-)"
    return f" ({value:.1%})" if key.endswith("utilization") else f" ({value:g})"


def runs_table(groups: Mapping[str, Sequence[CollocationRun]], title: str) -> Table:
    """One row per policy: the paper's section IV-C figures, coshare's beside (paper's in
    parentheses: its conventional run for ``conventional``, its collocation run for
    ``collocate``)."""
    base = groups.get(CONVENTIONAL)
    table = _table(
        title,
        [
            "policy",
            "makespan s (paper)",
            "vs conventional (paper)",
            "CPU util (paper)",
            "GPU util (paper)",
            "killed (paper)",
            "lent core-s",
            "CPU job slowdown",
        ],
    )
    for name, runs in groups.items():
        which = {CONVENTIONAL: 0, "collocate": 1}.get(name)
        change = "-"
        if base is not None and name != CONVENTIONAL:
            change = f"{_mean(runs, 'makespan_s') / _mean(base, 'makespan_s') - 1:+.1%}"
            change += " (-15.9%)" if name == "collocate" else ""
        table.add_row(
            name,
            _span(runs, "makespan_s") + _paper("makespan_s", which),
            change,
            f"{_mean(runs, 'cpu_utilization'):.1%}" + _paper("cpu_utilization", which),
            f"{_mean(runs, 'gpu_utilization'):.1%}" + _paper("gpu_utilization", which),
            f"{_mean(runs, 'killed'):.1f}" + _paper("killed", which),
            _span(runs, "harvested_core_s"),
            f"{_mean(runs, 'mean_cpu_slowdown'):.3f}",
        )
    return table


def split_table(runs: Sequence[CollocationRun], title: str) -> Table:
    """The GPU jobs' under-used core-seconds by why they were not lent, and what was."""
    table = _table(title, ["share of under-used core-s", "coshare", "paper"])
    total = _mean(runs, "underused_core_s")

    def share(*keys: str) -> str:
        return f"{sum(statistics.fmean(r.split[k] for r in runs) for k in keys) / total:.1%}"

    for key, label in (
        ("monitoring", "in the monitoring period (P_M)"),
        ("cap", "above P_B (and part-cores)"),
        ("copy_bw", "on GPU jobs above the copy threshold"),
        ("collectible", "collectible"),
    ):
        paper = PAPER_SPLIT.get(key)
        table.add_row(label, share(key), "-" if paper is None else f"{paper:.1%}")
    table.add_row(
        "collectible, copy threshold's included",
        share("collectible", "copy_bw"),
        f"{PAPER_SPLIT['collectible']:.1%}",
    )
    table.add_row("actually lent", f"{_mean(runs, 'harvested_core_s') / total:.1%}", "> 32%")
    table.add_row("under-used core-s", f"{total:.0f}", f"~{PAPER_UNDERUSED_CORE_S:.0f}")
    return table


def sweep_table(
    points: Mapping[tuple[float, int], Sequence[CollocationRun]],
    base: Sequence[CollocationRun],
    title: str,
) -> Table:
    """Makespan, kills, lent core-seconds and collectible share per ``(P_M, P_B)`` (the
    paper's "stronger" policy, P_M 1/5, reaches a collectible share of 75.1%)."""
    table = _table(
        title,
        [
            "P_M",
            "P_B",
            "makespan s",
            "vs conventional",
            "killed",
            "lent core-s",
            "collectible share",
        ],
    )
    table.caption = (
        f"paper, P_M 1/5: collectible {PAPER_STRONGER_COLLECTIBLE:.1%}; P_B 0 is "
        "the conventional run"
    )
    base_s = _mean(base, "makespan_s")
    for (p_m, p_b), runs in points.items():
        share = statistics.fmean(r.split["collectible"] for r in runs) / _mean(
            runs, "underused_core_s"
        )
        table.add_row(
            f"{p_m:.3g}",
            str(p_b),
            _span(runs, "makespan_s"),
            f"{_mean(runs, 'makespan_s') / base_s - 1:+.1%}",
            f"{_mean(runs, 'killed'):.1f}",
            f"{_mean(runs, 'harvested_core_s'):.0f}",
            f"{share:.1%}",
        )
    return table


def runs_json(runs: Sequence[CollocationRun]) -> list[dict[str, Any]]:
    """Every run, every field."""
    return [asdict(r) for r in runs]
