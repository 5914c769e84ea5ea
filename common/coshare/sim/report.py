"""What ``coshare simulate`` prints: tables a person reads and JSON for tools.

Every figure of the simulator sits next to the paper's where the paper has one, labelled
as such; aggregates over seeds give the mean and the range. Tables are rendered with rich as
plain text (as coshare.cli.render does).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.table import Table

from coshare.cli.render import output_width, render_text
from coshare.sim.experiments import BASELINE, Comparison, Sweep
from coshare.sim.fragmentation import (
    ARRIVAL_LEVELS,
    PUBLISHED_AT_100,
    FragRun,
    median_bound,
    median_unallocated,
)
from coshare.sim.history import UserFigures
from coshare.sim.metrics import RunSummary, reduction
from coshare.sim.paper import PAPER_NAMES


def render(*items: Table | str, width: int | None = None) -> str:
    """Tables and lines as plain text."""
    return render_text(*items, width=width or output_width(pipe_width=132))


def _table(title: str, columns: Sequence[str]) -> Table:
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return table


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    if not values:
        return "-"
    mean = fmt.format(statistics.fmean(values))
    if len(values) == 1 or min(values) == max(values):
        return mean
    return f"{mean} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _seeds(seeds: Iterable[int]) -> str:
    ordered = sorted(set(seeds))
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))


# -- policy comparisons (Table II, Fig. 8, Table III) ------------------------------------------


def policy_stats(comps: Sequence[Comparison]) -> dict[str, dict[str, Any]]:
    """Per policy, over the seeds: makespans, reductions against the baseline, utilizations,
    footprints, slowdowns."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(list))
    for comp in comps:
        base = comp.runs.get(BASELINE)
        for name, run in comp.runs.items():
            stats = out[name]
            stats["makespan_s"].append(run.makespan_s)
            stats["utilization"].append(run.utilization)
            stats["slowdown_mean"].append(run.slowdown_mean)
            if base is not None:
                stats["reduction"].append(reduction(run.makespan_s, base.makespan_s))
            if name in comp.footprints:
                stats["footprint"].append(comp.footprints[name].nodes)
            elif name == BASELINE and comp.footprints:
                stats["footprint"].append(comp.nodes)
    return {name: dict(stats) for name, stats in out.items()}


def _footprints(values: Sequence[int | None]) -> str:
    if not values:
        return "-"
    shown = ["none" if v is None else str(v) for v in values]
    return shown[0] if len(set(shown)) == 1 else ", ".join(shown)


def comparison_table(
    comps: Sequence[Comparison],
    title: str,
    paper_makespan: dict[str, float] | None = None,
    paper_reduction: dict[str, float] | None = None,
    paper_footprint: dict[str, int] | None = None,
) -> Table:
    """One row per policy: makespan, reduction against the baseline, utilization, footprint,
    mean slowdown; the paper's figures beside them when given."""
    stats = policy_stats(comps)
    paper = paper_makespan is not None or paper_footprint is not None
    columns = ["policy", "makespan s", "vs exclusive", "util", "footprint", "slowdown"]
    if paper:
        columns = [
            "policy",
            "makespan s",
            "paper",
            "vs exclusive",
            "paper",
            "util",
            "footprint",
            "paper",
            "slowdown",
        ]
    table = _table(title, columns)
    for name, s in stats.items():
        label = f"{name} ({PAPER_NAMES[name]})" if paper and name in PAPER_NAMES else name
        makespan = _spread(s["makespan_s"])
        versus = (
            _spread([-r for r in s.get("reduction", [])], "{:+.1%}") if name != BASELINE else "-"
        )
        util = _spread(s["utilization"], "{:.0%}")
        fp = _footprints(s.get("footprint", []))
        slow = _spread(s["slowdown_mean"], "{:.2f}")
        if paper:
            pm = (paper_makespan or {}).get(name)
            pr = (paper_reduction or {}).get(name)
            pf = (paper_footprint or {}).get(name)
            table.add_row(
                label,
                makespan,
                f"{pm:.0f}" if pm else "-",
                versus,
                f"{-pr:+.0%}" if pr else "-",
                util,
                fp,
                str(pf) if pf else "-",
                slow,
            )
        else:
            table.add_row(label, makespan, versus, util, fp, slow)
    return table


def comparison_json(comps: Sequence[Comparison]) -> dict[str, Any]:
    """Every run, every footprint search, and the per-policy summary."""
    runs = []
    footprints = []
    for comp in comps:
        base = comp.runs.get(BASELINE)
        for run in comp.runs.values():
            row = summary_dict(run)
            row.update(seed=comp.seed, workload=comp.workload, offload_share=comp.offload_share)
            if base is not None:
                row["reduction"] = reduction(run.makespan_s, base.makespan_s)
            runs.append(row)
        for name, fp in comp.footprints.items():
            footprints.append(
                {
                    "workload": comp.workload,
                    "seed": comp.seed,
                    "policy": name,
                    "nodes": fp.nodes,
                    "target_makespan_s": fp.target_s,
                    "makespans_s": {str(k): v for k, v in fp.makespans.items()},
                }
            )
    summary = []
    for name, s in policy_stats(comps).items():
        entry: dict[str, Any] = {
            "policy": name,
            "makespan_s": statistics.fmean(s["makespan_s"]),
            "utilization": statistics.fmean(s["utilization"]),
        }
        if s.get("reduction"):
            entry["reduction"] = statistics.fmean(s["reduction"])
        if s.get("footprint"):
            entry["footprint"] = s["footprint"]
        summary.append(entry)
    return {"runs": runs, "footprints": footprints, "summary": summary}


def summary_dict(run: RunSummary) -> dict[str, Any]:
    """A run's figures for JSON (NaN, which JSON lacks, becomes null)."""

    def clean(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "policy": run.policy,
        "nodes": run.nodes,
        "jobs": run.jobs,
        "makespan_s": run.makespan_s,
        "utilization": run.utilization,
        "slowdown_mean": clean(run.slowdown_mean),
        "slowdown_p95": clean(run.slowdown_p95),
        "slowdown_max": clean(run.slowdown_max),
        "wait_mean_s": clean(run.wait_mean_s),
        "cycles": run.cycles,
        "not_run": run.not_run,
        "bounded_slowdown_mean": clean(run.bounded_slowdown_mean),
        "core_utilization": run.core_utilization,
    }


# -- sweeps (Figs. 9 and 10) -----------------------------------------------------------------


def sweep_table(sweeps: Sequence[Sweep], title: str) -> Table:
    """Makespan per cluster size (rows) and policy (columns), mean over seeds."""
    first = sweeps[0]
    policies = list(dict.fromkeys(name for name, _ in first.runs))
    sizes = sorted({n for _, n in first.runs})
    columns = ["nodes", "jobs", *[f"{p} s" for p in policies]]
    if BASELINE in policies:
        columns += [f"{p} vs exclusive" for p in policies if p != BASELINE]
    table = _table(title, columns)
    for n in sizes:
        means = {p: statistics.fmean(s.runs[(p, n)].makespan_s for s in sweeps) for p in policies}
        row = [str(n), str(first.jobs[n]), *[f"{means[p]:.0f}" for p in policies]]
        if BASELINE in policies:
            row += [
                _pct(-reduction(means[p], means[BASELINE]), True) for p in policies if p != BASELINE
            ]
        table.add_row(*row)
    return table


def sweep_json(sweeps: Sequence[Sweep]) -> list[dict[str, Any]]:
    """Every run of every sweep."""
    out = []
    for sweep in sweeps:
        for (_, n), run in sweep.runs.items():
            row = summary_dict(run)
            row.update(
                workload=sweep.workload, seed=sweep.seed, size=n, offload_share=sweep.offload_share
            )
            out.append(row)
    return out


# -- fragmentation benchmark --------------------------------------------------------------------


def frag_table(runs: Sequence[FragRun], protocol: str) -> Table:
    """Median unallocated GPU % per policy and arrival level, for one protocol."""
    mine = [r for r in runs if r.protocol == protocol]
    seeds = _seeds(r.seed for r in mine)
    label = {
        "online": "online protocol: one pod per cycle (comparable to the published table)",
        "batch": "batch protocol: a cycle plans many pending pods (as coshare runs live)",
    }
    table = _table(
        f"Alibaba GPU-sharing fragmentation, {label.get(protocol, protocol)}; unallocated GPU %, "
        f"median of seeds {seeds}; bound: the least any placement of the pods submitted by "
        "100% can leave unallocated",
        [
            "policy",
            *[f"{level}%" for level in ARRIVAL_LEVELS],
            "range at 100%",
            "published",
            "idle GPUs",
            "no cores",
            "partial",
            "bound",
        ],
    )
    by_policy: dict[str, list[FragRun]] = defaultdict(list)
    for run in mine:
        by_policy[run.policy].append(run)
    for name, group in by_policy.items():
        at100 = [r.unallocated_at(100) for r in group]
        # the published "random" picks a random node; coshare's random is MCC (random job
        # order, first fit), a different policy: only the peers implemented alike are shown
        published = PUBLISHED_AT_100.get(name) if name in ("bestfit", "fgd") else None

        def where(key: str, group: list[FragRun] = group) -> str:
            values = [r.at_100[key] for r in group if key in r.at_100]
            return f"{statistics.median(values):.2f}" if values else "-"

        table.add_row(
            name,
            *[f"{median_unallocated(group, level):.2f}" for level in ARRIVAL_LEVELS],
            f"{min(at100):.2f}-{max(at100):.2f}",
            f"{published:.2f}" if published is not None and protocol == "online" else "-",
            where("idle_gpus"),
            where("idle_gpus_no_cores"),
            where("partial"),
            _bound(group),
        )
    return table


def _bound(runs: Sequence[FragRun]) -> str:
    """The least unallocated % any placement can reach at 100% arrival (median of seeds)."""
    value = median_bound(runs, 100)
    return f"{value:.2f}" if value is not None else "-"


def frag_json(runs: Sequence[FragRun]) -> dict[str, Any]:
    """Medians per protocol and policy, and every seed's readings."""
    results = []
    groups: dict[tuple[str, str], list[FragRun]] = defaultdict(list)
    for run in runs:
        groups[(run.protocol, run.policy)].append(run)
    for (protocol, name), group in groups.items():
        results.append(
            {
                "protocol": protocol,
                "policy": name,
                "unallocated_gpu_pct": {
                    str(lv): median_unallocated(group, lv) for lv in ARRIVAL_LEVELS
                },
                "per_seed": [
                    {
                        "seed": r.seed,
                        "placed": r.placed,
                        "dropped": r.dropped,
                        "unallocated_gpu_pct": {
                            str(lv): r.unallocated_at(lv) for lv in ARRIVAL_LEVELS
                        },
                        "unallocated_at_100_pct": r.at_100,
                        "bound_unallocated_gpu_pct": {str(lv): v for lv, v in r.bound.items()},
                    }
                    for r in group
                ],
            }
        )
    return {
        "levels": list(ARRIVAL_LEVELS),
        "results": results,
        "published_online_at_100": PUBLISHED_AT_100,
    }


# -- trace replay ----------------------------------------------------------------------------


def replay_table(runs: Sequence[RunSummary], title: str) -> Table:
    """One row per policy of a trace replay."""
    base = next((r for r in runs if r.policy == BASELINE), None)
    table = _table(
        title,
        [
            "policy",
            "makespan s",
            "vs exclusive",
            "mean wait s",
            "bounded slowdown",
            "node use",
            "jobs run",
            "not run",
            "cycles",
        ],
    )
    for run in runs:
        table.add_row(
            run.policy,
            f"{run.makespan_s:.0f}",
            _pct(-reduction(run.makespan_s, base.makespan_s), True)
            if base and run is not base
            else "-",
            f"{run.wait_mean_s:.0f}",
            f"{run.bounded_slowdown_mean:.2f}",
            f"{run.core_utilization:.1%}",
            str(run.jobs - run.not_run),
            str(run.not_run),
            str(run.cycles),
        )
    return table


def user_table(runs: Sequence[tuple[str, Mapping[str, UserFigures]]]) -> Table:
    """Each user's jobs and mean wait under each policy of a history replay."""
    table = _table("mean wait per user, s", ["user", "jobs", *(policy for policy, _ in runs)])
    for name in sorted({u for _, users in runs for u in users}):
        figures = [users.get(name) for _, users in runs]
        jobs = next((f.jobs for f in figures if f is not None), 0)
        table.add_row(
            name or "(none)",
            str(jobs),
            *(f"{f.wait_s / f.jobs:.0f}" if f and f.jobs else "-" for f in figures),
        )
    return table


# -- parameter sweeps (--sweep) ----------------------------------------------------------------

#: What a parameter sweep can report: the numeric figures of a run.
GRID_METRICS = (
    "makespan_s",
    "utilization",
    "slowdown_mean",
    "slowdown_p95",
    "wait_mean_s",
    "cycles",
    "not_run",
)


@dataclass(frozen=True)
class GridRun:
    """One run of a parameter sweep.

    Attributes:
        workload: the workload (a paper job set, or ``trace:NAME``).
        point: the swept parameters' values.
        seed: the seed.
        summary: the run's figures.
    """

    workload: str
    point: tuple[tuple[str, Any], ...]
    seed: int
    summary: RunSummary


def grid_groups(
    runs: Sequence[GridRun], metric: str
) -> dict[tuple[str, tuple[tuple[str, Any], ...], str], list[float]]:
    """The metric's values over seeds, per (workload, point, policy), in run order."""
    groups: dict[tuple[str, tuple[tuple[str, Any], ...], str], list[float]] = {}
    for run in runs:
        value = float(getattr(run.summary, metric))
        groups.setdefault((run.workload, run.point, run.summary.policy), []).append(value)
    return groups


def spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value; NaN values are left out)."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0


def grid_table(runs: Sequence[GridRun], keys: Sequence[str], metric: str, title: str) -> Table:
    """One row per workload, point and policy: the metric's mean, standard deviation and
    range over the seeds that ran."""
    columns = ["workload", *keys, "policy", f"{metric} mean", "sd", "min-max", "seeds"]
    table = _table(title, columns)
    for (workload, point, policy), values in grid_groups(runs, metric).items():
        mean, sd = spread(values)
        shown = dict(point)
        fmt = "{:.3f}" if metric == "utilization" or metric.startswith("slowdown") else "{:.1f}"
        table.add_row(
            workload,
            *[str(shown.get(k, "-")) for k in keys],
            policy,
            fmt.format(mean),
            fmt.format(sd),
            f"{fmt.format(min(values))}-{fmt.format(max(values))}",
            str(len(values)),
        )
    return table


def grid_json(runs: Sequence[GridRun], keys: Sequence[str], metric: str) -> dict[str, Any]:
    """Every run with its parameters, and per workload, point and policy the metric's mean
    and standard deviation over seeds."""
    rows = [
        {"workload": r.workload, "seed": r.seed, "params": dict(r.point), **summary_dict(r.summary)}
        for r in runs
    ]
    summary = []
    for (workload, point, policy), values in grid_groups(runs, metric).items():
        mean, sd = spread(values)
        summary.append(
            {
                "workload": workload,
                "params": dict(point),
                "policy": policy,
                "mean": None if math.isnan(mean) else mean,
                "sd": None if math.isnan(sd) else sd,
                "seeds": len(values),
            }
        )
    return {"keys": list(keys), "metric": metric, "runs": rows, "summary": summary}
