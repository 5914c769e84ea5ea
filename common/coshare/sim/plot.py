"""Figures of ``coshare simulate --plot FILE.png`` (matplotlib, the ``plot`` extra), made to
be shown to others: titles and axes in the reader's terms with units, node
counts as integers, one error-bar convention (the mean over seeds, bars or a band from the
smallest to the largest value), legends outside the data, one panel per row so that a page
shows each at its full width, and the paper's published figure beside coshare's wherever the
paper gives numbers.

- makespan per policy and workload, grouped bars (the paper's Fig. 8; Table II's set alone),
  with Table II's makespans beside coshare's for the Table I set;
- footprint per policy and workload (the paper's Tables II and III beside coshare's);
- makespan against cluster size (Figs. 9 and 10); under constant job pressure (Fig. 10)
  also knapsack's makespan reduction, with the paper's reductions at 8 nodes;
- unallocated GPU capacity against arrivals (the fragmentation benchmark), with the
  published values at 100% arrival.

All panels go into one PNG. matplotlib is imported only here, with the Agg backend (no
display needed); :func:`require_matplotlib` fails early with an install hint.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from coshare.cli.extras import MissingExtra
from coshare.errors import InputError
from coshare.sim.experiments import (
    BASELINE,
    PAPER_NODES,
    SYNTHETIC_JOBS,
    TABLE1_JOBS,
    Comparison,
    Sweep,
)
from coshare.sim.fragmentation import PROTOCOLS, PUBLISHED_AT_100, FragRun
from coshare.sim.paper import (
    FIG_10_REDUCTION,
    PAPER_NAMES,
    TABLE_II_FOOTPRINT,
    TABLE_II_MAKESPAN_S,
    TABLE_III_FOOTPRINT,
)
from coshare.sim.report import GridRun, grid_groups

#: What a reader calls each workload.
WORKLOAD_LABELS = {
    "table1": "Table I set",
    "uniform": "uniform",
    "normal": "normal",
    "low-skew": "low resource skew",
    "high-skew": "high resource skew",
}

#: The x axis of the bar panels.
JOB_SET_LABEL = "job set (job size distribution)"

#: The y axis of a sweep's figure per metric (``--metric``), with its unit.
METRIC_LABELS = {
    "makespan_s": "makespan (s)",
    "utilization": "device core utilization (fraction, 0-1)",
    "slowdown_mean": "mean slowdown (run time / run time alone)",
    "slowdown_p95": "95th-percentile slowdown (run time / run time alone)",
    "wait_mean_s": "mean wait (s)",
    "cycles": "planning cycles (count)",
    "not_run": "jobs not run (count)",
}
#: Metrics counted in whole numbers.
INTEGER_METRICS = frozenset({"cycles", "not_run"})

#: One colour per policy, the same in every panel.
COLOURS = {
    "exclusive": "#4c72b0",
    "random": "#dd8452",
    "knapsack": "#55a868",
    "bestfit": "#c44e52",
    "fgd": "#8172b3",
}
PAPER_HATCH = "//"

#: One panel's size in inches: at 110 dpi a panel is 880 pixels wide, about a docs page's
#: width, so its text shows at its own size there.
PANEL_WIDTH_IN = 8.0
PANEL_HEIGHT_IN = 5.6

#: The published range of FGD at 100% arrival (the benchmark's table: 4.62-4.94).
FGD_PUBLISHED_RANGE = (4.62, 4.94)


def policy_label(name: str) -> str:
    """``knapsack (MCCK)``: coshare's name with the paper's where it has one."""
    return f"{name} ({PAPER_NAMES[name]})" if name in PAPER_NAMES else name


def _colour(name: str) -> str:
    return COLOURS.get(name, "#777777")


def require_matplotlib() -> Any:
    """The ``matplotlib.pyplot`` module, with a non-interactive backend.

    Raises:
        MissingExtra: matplotlib is not installed (exit status 1, as a missing extra is).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtra("--plot", "plot", "matplotlib") from exc
    return plt


def save_figure(
    path: Path,
    comparisons: Mapping[str, Sequence[Comparison]] | None = None,
    sweeps: Mapping[str, Sequence[Sweep]] | None = None,
    fragmentation: Sequence[FragRun] | None = None,
) -> None:
    """Draw whatever was simulated into one PNG at ``path``.

    Raises:
        InputError: matplotlib is missing, nothing can be drawn, or the file cannot be
            written.
    """
    plt = require_matplotlib()
    from matplotlib.ticker import MaxNLocator

    integer = MaxNLocator(integer=True)
    panels: list[Callable[[Any], None]] = []
    if comparisons:
        panels.append(lambda ax: _bars(ax, comparisons))
        if any(c.footprints for comps in comparisons.values() for c in comps):
            panels.append(lambda ax: _footprints(ax, comparisons, integer))
    for name, group in (sweeps or {}).items():
        panels.append(partial(_sweep, workload=name, sweeps=group, integer=integer))
        if _pressure(group):
            panels.append(partial(_reductions, sweeps=group, integer=integer))
    for protocol in PROTOCOLS:
        runs = [r for r in fragmentation or () if r.protocol == protocol]
        if runs:
            panels.append(partial(_frag, protocol=protocol, runs=runs))
    if not panels:
        raise InputError("--plot: nothing to plot for this workload")
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(PANEL_WIDTH_IN, PANEL_HEIGHT_IN * len(panels)), squeeze=False
    )
    for ax, draw in zip(axes.flat, panels, strict=False):
        draw(ax)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    _write(plt, fig, path)


def _write(plt: Any, fig: Any, path: Path) -> None:
    """Lay out ``fig``, save it as a PNG at ``path`` and close it."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)


def _below(ax: Any, columns: int) -> None:
    """The legend under the panel, outside the data."""
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=columns,
        fontsize="small",
        frameon=False,
    )


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean, and its distance to the smallest and largest value (error bar lengths)."""
    mean = statistics.fmean(values)
    return mean, mean - min(values), max(values) - mean


def _yerr(stats: Sequence[tuple[float, float, float]]) -> Any:
    """Error bar lengths (below, above), or ``None`` where every bar has one value (no stray
    caps on a single seed)."""
    if all(low == 0 and high == 0 for _, low, high in stats):
        return None
    return np.array([[s[1] for s in stats], [s[2] for s in stats]])


def _seeds(comps: Sequence[Any]) -> str:
    seeds = sorted({c.seed for c in comps})
    return (
        f"seed {seeds[0]}"
        if len(seeds) == 1
        else f"mean of seeds {seeds[0]}-{seeds[-1]}, bars: min-max"
    )


def _policies(comparisons: Mapping[str, Sequence[Comparison]]) -> list[str]:
    return list(dict.fromkeys(p for comps in comparisons.values() for p in comps[0].runs))


def _paper_set(workload: str, comps: Sequence[Comparison]) -> bool:
    """Whether the runs are the paper's experiment (its job count and 8 nodes)."""
    first = comps[0]
    jobs = TABLE1_JOBS if workload == "table1" else SYNTHETIC_JOBS
    return (first.jobs, first.nodes) == (jobs, PAPER_NODES)


def _paper_makespans(workload: str, comps: Sequence[Comparison]) -> Mapping[str, float]:
    return TABLE_II_MAKESPAN_S if workload == "table1" and _paper_set(workload, comps) else {}


def _paper_footprints(workload: str, comps: Sequence[Comparison]) -> Mapping[str, int]:
    if not _paper_set(workload, comps):
        return {}
    return TABLE_II_FOOTPRINT if workload == "table1" else TABLE_III_FOOTPRINT.get(workload, {})


def _bars(ax: Any, comparisons: Mapping[str, Sequence[Comparison]]) -> None:
    workloads = list(comparisons)
    policies = _policies(comparisons)
    papers = {w: _paper_makespans(w, comparisons[w]) for w in workloads}
    # each policy's paper bar right beside its coshare bar
    slots = [
        (p, paper)
        for p in policies
        for paper in (False, True)
        if not paper or any(p in papers[w] for w in workloads)
    ]
    width = 0.8 / len(slots)
    x = np.arange(len(workloads))
    for i, (policy, paper) in enumerate(slots):
        offset = (i - (len(slots) - 1) / 2) * width
        if paper:
            heights = [papers[w].get(policy, np.nan) for w in workloads]
            ax.bar(
                x + offset,
                heights,
                width,
                color="white",
                edgecolor=_colour(policy),
                hatch=PAPER_HATCH,
                label=f"{policy_label(policy)}, paper",
            )
            continue
        stats = [
            _spread([c.runs[policy].makespan_s for c in comparisons[w]])
            if policy in comparisons[w][0].runs
            else (np.nan, 0.0, 0.0)
            for w in workloads
        ]
        ax.bar(
            x + offset,
            [s[0] for s in stats],
            width,
            color=_colour(policy),
            yerr=_yerr(stats),
            capsize=3,
            label=f"{policy_label(policy)}, coshare",
        )
    ax.set_xticks(x, [WORKLOAD_LABELS.get(w, w) for w in workloads])
    ax.set_xlabel(JOB_SET_LABEL)
    ax.set_ylabel("makespan (s)")
    first = next(iter(comparisons.values()))
    jobs = sorted({c.jobs for comps in comparisons.values() for c in comps})
    figure = "Table II" if workloads == ["table1"] else "Fig. 8"
    if not any(papers.values()):
        figure += (
            ", whose values it does not print"
            if figure == "Fig. 8"
            else ": not drawn, another job count or cluster size"
        )
    ax.set_title(
        f"Makespan per policy: {'/'.join(map(str, jobs))} jobs on {first[0].nodes} "
        f"nodes x 1 Xeon Phi\n({_seeds(first)}; the paper's {figure})",
        fontsize="medium",
    )
    _below(ax, min(len(slots), 3))


def _footprints(ax: Any, comparisons: Mapping[str, Sequence[Comparison]], integer: Any) -> None:
    workloads = list(comparisons)
    policies = _policies(comparisons)
    papers = {w: _paper_footprints(w, comparisons[w]) for w in workloads}
    drawn = any(papers.values())
    width = 0.8 / ((2 if drawn else 1) * len(policies))
    x = np.arange(len(workloads))
    for i, policy in enumerate(policies):
        slots = 2 if drawn else 1
        offset = (slots * i - (slots * len(policies) - 1) / 2) * width
        values = []
        for w in workloads:
            found = [
                c.nodes if policy == BASELINE else c.footprints[policy].nodes
                for c in comparisons[w]
                if policy == BASELINE or policy in c.footprints
            ]
            values.append(
                _spread([float(v) for v in found if v is not None])
                if any(v is not None for v in found)
                else (np.nan, 0.0, 0.0)
            )
        ax.bar(
            x + offset,
            [v[0] for v in values],
            width,
            color=_colour(policy),
            yerr=_yerr(values),
            capsize=3,
            label=f"{policy_label(policy)}, coshare",
        )
        if drawn:
            paper = [papers[w].get(policy, np.nan) for w in workloads]
            ax.bar(
                x + offset + width,
                paper,
                width,
                color="white",
                edgecolor=_colour(policy),
                hatch=PAPER_HATCH,
                label=f"{policy_label(policy)}, paper",
            )
    ax.set_xticks(x, [WORKLOAD_LABELS.get(w, w) for w in workloads])
    ax.set_xlabel(JOB_SET_LABEL)
    ax.yaxis.set_major_locator(integer)
    ax.set_ylabel("footprint (nodes)")
    first = next(iter(comparisons.values()))
    source = (
        "the paper's Tables II and III"
        if drawn
        else "the paper's Tables II and III are for its job sets on 8 nodes: not drawn"
    )
    ax.set_title(
        "Footprint: the fewest nodes that finish within exclusive's makespan on "
        f"{first[0].nodes} nodes\n({_seeds(first)}; {source})",
        fontsize="medium",
    )
    _below(ax, 3)


def _pressure(sweeps: Sequence[Sweep]) -> bool:
    """Whether the job set grows with the cluster (constant job pressure, Fig. 10)."""
    counts = sweeps[0].jobs
    return len(set(counts.values())) > 1


def _sweep_stats(
    sweeps: Sequence[Sweep], value: Callable[[Sweep, int], float], sizes: Sequence[int]
) -> np.ndarray:
    return np.array([_spread([value(s, n) for s in sweeps]) for n in sizes])


def _makespan(s: Sweep, n: int, policy: str) -> float:
    return s.runs[(policy, n)].makespan_s


def _reduction(s: Sweep, n: int, base: str) -> float:
    """Knapsack's makespan reduction against ``base`` on ``n`` nodes, in percent."""
    return 100 * (1 - s.runs[("knapsack", n)].makespan_s / s.runs[(base, n)].makespan_s)


def _sweep(ax: Any, workload: str, sweeps: Sequence[Sweep], integer: Any) -> None:
    first = sweeps[0]
    sizes = sorted({n for _, n in first.runs})
    for policy in dict.fromkeys(p for p, _ in first.runs):
        stats = _sweep_stats(sweeps, partial(_makespan, policy=policy), sizes)
        ax.errorbar(
            sizes,
            stats[:, 0],
            yerr=_yerr([tuple(r) for r in stats]),
            marker="o",
            capsize=3,
            color=_colour(policy),
            label=policy_label(policy),
        )
    ax.xaxis.set_major_locator(integer)
    ax.set_xlabel("cluster size (nodes, one Xeon Phi each)")
    ax.set_ylabel("makespan (s)")
    name = workload.split(" (")[0] if not _pressure(sweeps) else "normal"
    if _pressure(sweeps):
        per_node = first.jobs[sizes[0]] // sizes[0]
        what = f"constant job pressure: {per_node} {name}-distribution jobs per node"
        figure = "Fig. 10"
    else:
        what = f"{first.jobs[sizes[0]]} jobs ({WORKLOAD_LABELS.get(name, name)})"
        figure = "Fig. 9"
    ax.set_title(
        f"Makespan against cluster size, {what}\n({_seeds(sweeps)}; the paper's "
        f"{figure}, whose values it does not print)",
        fontsize="medium",
    )
    _below(ax, 3)


def _reductions(ax: Any, sweeps: Sequence[Sweep], integer: Any) -> None:
    first = sweeps[0]
    sizes = sorted({n for _, n in first.runs})
    policies = {p for p, _ in first.runs}
    if "knapsack" not in policies:
        ax.set_visible(False)
        return
    for base in ("exclusive", "random"):
        if base not in policies:
            continue
        stats = _sweep_stats(sweeps, partial(_reduction, base=base), sizes)
        ax.errorbar(
            sizes,
            stats[:, 0],
            yerr=_yerr([tuple(r) for r in stats]),
            marker="o",
            capsize=3,
            color=_colour(base),
            label=f"vs {policy_label(base)}, coshare",
        )
        ax.plot(
            [PAPER_NODES],
            [100 * FIG_10_REDUCTION[base]],
            marker="*",
            markersize=14,
            linestyle="none",
            color=_colour(base),
            markeredgecolor="black",
            label=f"vs {policy_label(base)}, paper (text of section V, 8 nodes)",
        )
    ax.xaxis.set_major_locator(integer)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("cluster size (nodes, one Xeon Phi each)")
    ax.set_ylabel("knapsack's makespan reduction (%)")
    ax.set_title(
        f"Knapsack (MCCK) against the baselines, constant job pressure\n"
        f"({_seeds(sweeps)}; the paper's Fig. 10)",
        fontsize="medium",
    )
    _below(ax, 2)


def _frag(ax: Any, protocol: str, runs: Sequence[FragRun]) -> None:
    grid = np.linspace(0, 130, 261)
    by_policy: dict[str, list[FragRun]] = defaultdict(list)
    for run in runs:
        by_policy[run.policy].append(run)
    for policy, group in by_policy.items():
        curves = np.array([r.unallocated_curve(grid) for r in group])
        ax.plot(grid, np.median(curves, axis=0), color=_colour(policy), label=f"{policy}, coshare")
        if len(group) > 1:
            ax.fill_between(
                grid,
                curves.min(axis=0),
                curves.max(axis=0),
                alpha=0.2,
                color=_colour(policy),
                linewidth=0,
            )
        if policy in PUBLISHED_AT_100 and protocol == "online":
            published = PUBLISHED_AT_100[policy]
            low, high = FGD_PUBLISHED_RANGE if policy == "fgd" else (published, published)
            ax.errorbar(
                [100],
                [published],
                yerr=[[published - low], [high - published]],
                marker="*",
                markersize=12,
                linestyle="none",
                color=_colour(policy),
                markeredgecolor="black",
                capsize=3,
                label=f"{policy}, published (100%)",
            )
    ax.set_xlim(60, 130)
    ax.set_ylim(0, 30)
    seeds = sorted({r.seed for r in runs})
    spread = "" if len(seeds) == 1 else ", band: min-max"
    what = "one pod per cycle" if protocol == "online" else "a batch of pods per cycle"
    ax.set_title(
        f"Alibaba GPU trace: unallocated GPU capacity, {protocol} protocol "
        f"({what})\n(median of seeds {seeds[0]}-{seeds[-1]}{spread}; the "
        "benchmark's table at 100%)",
        fontsize="medium",
    )
    ax.set_xlabel("GPU requests arrived (% of the cluster's GPU capacity)")
    ax.set_ylabel("unallocated GPU capacity (%)")
    _below(ax, 3)


def save_sweep_figure(
    path: Path, runs: Sequence[GridRun], keys: Sequence[str], metric: str
) -> None:
    """A parameter sweep (``--sweep``) into one PNG at ``path``: the metric against the first
    swept key, one line per policy (and per value of the other keys), the mean over the seeds
    with bars from the smallest to the largest value (as :func:`save_figure` draws); one
    panel per workload, one per row.

    Raises:
        InputError: matplotlib is missing, nothing ran, or the file cannot be written.
    """
    plt = require_matplotlib()
    from matplotlib.ticker import MaxNLocator

    groups = grid_groups(runs, metric)
    workloads = list(dict.fromkeys(w for w, _, _ in groups))
    if not workloads:
        raise InputError("--plot: no run of the sweep finished")
    first, others = keys[0], keys[1:]
    xs = list(dict.fromkeys(dict(p)[first] for _, p, _ in groups))
    numeric = all(isinstance(x, (int, float)) for x in xs)
    fig, axes = plt.subplots(
        len(workloads), 1, figsize=(PANEL_WIDTH_IN, PANEL_HEIGHT_IN * len(workloads)), squeeze=False
    )
    for ax, workload in zip(axes.flat, workloads, strict=False):
        lines: dict[str, list[tuple[Any, float, float, float]]] = defaultdict(list)
        for (w, point, policy), values in groups.items():
            if w != workload:
                continue
            params = dict(point)
            name = " ".join([policy, *[f"{k}={params[k]}" for k in others]])
            finite = [v for v in values if math.isfinite(v)]
            if finite:
                lines[name].append((params[first], *_spread(finite)))
        for name, rows in lines.items():
            rows.sort(key=lambda r: xs.index(r[0]))
            where = [r[0] if numeric else xs.index(r[0]) for r in rows]
            ax.errorbar(
                where,
                [r[1] for r in rows],
                yerr=_yerr([r[1:] for r in rows]),
                marker="o",
                capsize=4,
                label=name,
            )
        if not numeric:
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        elif all(isinstance(x, int) for x in xs):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if metric in INTEGER_METRICS:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        seeds = max(len(v) for v in groups.values())
        ax.set_title(
            f"{workload}: {metric} against {first}\n(mean of up to {seeds} seeds, bars: min-max)",
            fontsize="medium",
        )
        ax.set_xlabel(first)
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.grid(axis="y", alpha=0.3)
        _below(ax, 3)
    _write(plt, fig, path)
