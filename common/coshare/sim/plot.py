"""Figures of ``coshare simulate --plot FILE.png`` (matplotlib, the ``plot`` extra).

- makespan per policy and workload, grouped bars (the paper's Fig. 8; Table II's set alone);
- makespan against cluster size, one panel per workload (Figs. 9 and 10);
- unallocated GPU % against arrival %, one panel per protocol (the fragmentation benchmark).

All panels go into one PNG. matplotlib is imported only here, with the Agg backend (no
display needed); :func:`require_matplotlib` fails early with an install hint.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coshare.errors import InputError
from coshare.sim.experiments import Comparison, Sweep
from coshare.sim.fragmentation import PROTOCOLS, FragRun
from coshare.sim.report import GridRun, grid_groups, spread


def require_matplotlib() -> Any:
    """The ``matplotlib.pyplot`` module, with a non-interactive backend.

    Raises:
        InputError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InputError(
            "--plot needs matplotlib: pip install 'coshare[plot]' (or pip install matplotlib)"
        ) from exc
    return plt


def save_figure(path: Path, comparisons: Mapping[str, Sequence[Comparison]] | None = None,
                sweeps: Mapping[str, Sequence[Sweep]] | None = None,
                fragmentation: Sequence[FragRun] | None = None) -> None:  # fmt: skip
    """Draw whatever was simulated into one PNG at ``path``.

    Raises:
        InputError: matplotlib is missing, or the file cannot be written.
    """
    plt = require_matplotlib()
    panels: list[tuple[str, Any]] = []
    if comparisons:
        panels.append(("bars", comparisons))
    for name, group in (sweeps or {}).items():
        panels.append(("sweep", (name, group)))
    if fragmentation:
        for protocol in PROTOCOLS:
            runs = [r for r in fragmentation if r.protocol == protocol]
            if runs:
                panels.append(("frag", (protocol, runs)))
    if not panels:
        raise InputError("--plot: nothing to plot for this workload")
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    for ax, (kind, data) in zip(axes.flat, panels, strict=False):
        if kind == "bars":
            _bars(ax, data)
        elif kind == "sweep":
            _sweep(ax, *data)
        else:
            _frag(ax, *data)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    _write(plt, fig, path)


def _write(plt: Any, fig: Any, path: Path) -> None:
    """Lay out ``fig``, save it as a PNG at ``path`` and close it."""
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)


def _bars(ax: Any, comparisons: Mapping[str, Sequence[Comparison]]) -> None:
    workloads = list(comparisons)
    policies = list(dict.fromkeys(p for comps in comparisons.values() for p in comps[0].runs))
    width = 0.8 / max(len(policies), 1)
    x = np.arange(len(workloads))
    for i, policy in enumerate(policies):
        means = [statistics.fmean(c.runs[policy].makespan_s for c in comparisons[w])
                 if policy in comparisons[w][0].runs else 0.0 for w in workloads]  # fmt: skip
        ax.bar(x + (i - (len(policies) - 1) / 2) * width, means, width, label=policy)
    ax.set_xticks(x, workloads)
    ax.set_ylabel("makespan (s)")
    nodes = next(iter(comparisons.values()))[0].nodes
    ax.set_title(f"Makespan per policy, {nodes} nodes (Fig. 8)")
    ax.legend()


def _sweep(ax: Any, workload: str, sweeps: Sequence[Sweep]) -> None:
    first = sweeps[0]
    sizes = sorted({n for _, n in first.runs})
    for policy in dict.fromkeys(p for p, _ in first.runs):
        ax.plot(sizes, [statistics.fmean(s.runs[(policy, n)].makespan_s for s in sweeps)
                        for n in sizes], marker="o", label=policy)  # fmt: skip
    jobs = sorted(set(first.jobs.values()))
    what = f"{jobs[0]} jobs" if len(jobs) == 1 else f"{jobs[0]}-{jobs[-1]} jobs"
    ax.set_title(f"{workload}: makespan against cluster size\n({what})", fontsize="medium")
    ax.set_xlabel("nodes (one device each)")
    ax.set_ylabel("makespan (s)")
    ax.legend()


def _frag(ax: Any, protocol: str, runs: Sequence[FragRun]) -> None:
    grid = np.linspace(0, 130, 261)
    by_policy: dict[str, list[FragRun]] = defaultdict(list)
    for run in runs:
        by_policy[run.policy].append(run)
    for policy, group in by_policy.items():
        curves = np.array([r.unallocated_curve(grid) for r in group])
        ax.plot(grid, np.median(curves, axis=0), label=policy)
    ax.set_xlim(60, 130)
    ax.set_ylim(0, 30)
    ax.set_title(f"Alibaba fragmentation, {protocol} protocol")
    ax.set_xlabel("arrived GPU requests (% of capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.legend()


def save_sweep_figure(path: Path, runs: Sequence[GridRun], keys: Sequence[str],
                      metric: str) -> None:  # fmt: skip
    """A parameter sweep (``--sweep``) into one PNG at ``path``: the metric against the first
    swept key, one line per policy (and per value of the other keys), error bars of one
    standard deviation over the seeds; one panel per workload.

    Raises:
        InputError: matplotlib is missing, nothing ran, or the file cannot be written.
    """
    plt = require_matplotlib()
    groups = grid_groups(runs, metric)
    workloads = list(dict.fromkeys(w for w, _, _ in groups))
    if not workloads:
        raise InputError("--plot: no run of the sweep finished")
    first, others = keys[0], keys[1:]
    xs = list(dict.fromkeys(dict(p)[first] for _, p, _ in groups))
    numeric = all(isinstance(x, (int, float)) for x in xs)
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.4), squeeze=False)
    for ax, workload in zip(axes.flat, workloads, strict=False):
        lines: dict[str, list[tuple[Any, float, float]]] = defaultdict(list)
        for (w, point, policy), values in groups.items():
            if w != workload:
                continue
            params = dict(point)
            name = " ".join([policy, *[f"{k}={params[k]}" for k in others]])
            mean, sd = spread(values)
            lines[name].append((params[first], mean, sd))
        for name, rows in lines.items():
            rows.sort(key=lambda r: xs.index(r[0]))
            where = [r[0] if numeric else xs.index(r[0]) for r in rows]
            ax.errorbar(where, [r[1] for r in rows], yerr=[r[2] for r in rows], marker="o",
                        capsize=4, label=name)  # fmt: skip
        if not numeric:
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        seeds = max(len(v) for v in groups.values())
        ax.set_title(f"{workload}: {metric} against {first}\n(mean of up to {seeds} seeds, "
                     "bars: one standard deviation)", fontsize="medium")  # fmt: skip
        ax.set_xlabel(first)
        ax.set_ylabel(metric)
        ax.legend(fontsize="small")
    _write(plt, fig, path)
