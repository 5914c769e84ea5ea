"""``coshare simulate``: what sharing buys, on the paper's workloads or a real trace.

::

    coshare simulate [--workload NAME|trace:PATH] [--jobs N] [--nodes N] [--policies a,b,...]
                     [--footprint] [--seed N] [--seeds K] [--output table|json]
                     [--plot FILE.png] [--sizes 1-8] [--threads soft|strict]
                     [--cycle-delay S] [--age-limit S] [--offload-share F]
                     [--protocol online|batch|both] [--batch N] [--workers N] [--data DIR]
                     [--verify]

Workloads: ``table1`` (Table II: 1000 jobs, 8 nodes), ``uniform``, ``normal``, ``low-skew``,
``high-skew`` (Fig. 7, 400 jobs), ``synthetic`` (all four: Fig. 8 and Table III),
``pressure`` (Fig. 10: ``--jobs`` per node, 200 by default, on 2 to 8 nodes),
``alibaba-2023`` (the fragmentation benchmark on the Alibaba trace), ``wu-hong`` (the
collocation paper's section IV-C, with a P_M x P_B sweep), ``picaso`` and ``picaso-PART``
(the distributed allocation paper's tiles and scenarios), ``sns`` (Spread-n-Share's
section 6.2 job mixes; ``--sweep scaling_share=...``: section 6.3) and ``trace:FILE.swf``
(replay an SWF log; ``FILE.swf.gz`` too). This module does the I/O (trace files, the plot,
the progress bar) and hands everything else to the pure ``coshare.sim``.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from coshare.cli.app import AppContext, pass_app
from coshare.config import MAX_SETTING_S, with_overrides
from coshare.errors import ExecutorError, InputError
from coshare.ledger.bounds import (
    MAX_CORES,
    MAX_SIM_NODES,
    MAX_SIM_SEEDS,
    MAX_SIM_WORKERS,
    shorten,
)
from coshare.model import ThreadMode
from coshare.sim.dask_cluster import open_executor
from coshare.sim.experiments import (
    PAPER_NODES,
    Setup,
)
from coshare.sim.mig import MIXES
from coshare.sim.params import parameters, parse_sweeps
from coshare.sim.report import (
    GRID_METRICS,
)
from coshare.sim.runners import (
    ALL_POLICIES,
    HISTORY_READERS,
    PAPER_POLICIES,
    WORKLOAD_NAMES,
    WORKLOADS,
    HistoryAsk,
    Request,
    parse_policies,
    parse_sizes,
)


class FiniteRange(click.FloatRange):
    """A float option within a range that also refuses ``nan`` and ``inf`` (click's own
    FloatRange lets ``nan`` through: every comparison with it is false)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(
                f"{number} is not a finite number in the range {self._describe_range()}", param, ctx
            )
        return number


@click.command("simulate")
@click.option(
    "--workload",
    default="table1",
    show_default=True,
    metavar="NAME|trace:PATH",
    help=f"One of {', '.join(WORKLOAD_NAMES)}.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Jobs (table1: 1000, synthetic: 400; pressure: jobs per node, 200).",
)
@click.option(
    "--nodes",
    type=click.IntRange(1, MAX_SIM_NODES),
    default=None,
    help=f"Cluster size in nodes (default {PAPER_NODES}).",
)
@click.option(
    "--cores-per-node",
    type=click.IntRange(1, MAX_CORES),
    default=None,
    help="trace:PATH without a .machines file: cores of each of the --nodes nodes "
    "(default: the header's MaxProcs / MaxNodes).",
)
@click.option(
    "--policies",
    "policies_text",
    default=None,
    help="Comma-separated policies (paper workloads: exclusive,random,knapsack; "
    "alibaba-2023 and traces: all five).",
)
@click.option(
    "--footprint",
    is_flag=True,
    help="Also find each policy's footprint: the fewest nodes matching exclusive's makespan.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="First seed.")
@click.option(
    "--seeds",
    type=click.IntRange(1, MAX_SIM_SEEDS),
    default=1,
    show_default=True,
    help="Number of seeds (SEED, SEED+1, ...).",
)
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write figures to this PNG (needs matplotlib: the 'plot' extra).",
)
@click.option(
    "--sizes",
    default=None,
    help="Also sweep the cluster size, e.g. 1-8 (Fig. 9); pressure: default 2-8.",
)
@click.option(
    "--threads",
    type=click.Choice(["soft", "strict"]),
    default="soft",
    show_default=True,
    help="soft: the node's offload gate serializes offloads (COSMIC, as in the "
    "paper's MCC and MCCK); strict: declared threads per device stay within it.",
)
@click.option(
    "--cycle-delay",
    type=FiniteRange(0, MAX_SETTING_S),
    default=1.0,
    show_default=True,
    help="Seconds from an arrival or job end to the planning cycle.",
)
@click.option(
    "--age-limit",
    type=FiniteRange(0, MAX_SETTING_S),
    default=None,
    help="Knapsack aging in seconds (default: none, as in the paper).",
)
@click.option(
    "--offload-share",
    type=FiniteRange(0, 1, min_open=True),
    default=None,
    help="Part of a job's run time spent offloading (default: calibrated so "
    "exclusive reaches the paper's 50% utilization).",
)
@click.option(
    "--protocol",
    type=click.Choice(["online", "batch", "both"]),
    default="both",
    show_default=True,
    help="alibaba-2023: one pod per cycle, many, or both.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="alibaba-2023, batch protocol: pods per cycle.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_SIM_WORKERS),
    default=None,
    help="Runs in parallel: local processes, or Dask workers coshare starts "
    "(default 1, or sim.workers of the config).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "dask"]),
    default=None,
    help="Where runs execute: local processes, or Dask (the 'dask' extra); default "
    "sim.executor of the config, else local.",
)
@click.option(
    "--dask-scheduler",
    default=None,
    metavar="ADDRESS",
    help="A running Dask scheduler (tcp://host:8786); implies --executor dask. "
    "Default: sim.dask_scheduler, else coshare starts sim.dask_cluster.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 100),
    default=None,
    help="Times a run whose worker died runs again elsewhere (default 2).",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Run every point of a grid of workload or policy parameters (repeat for "
    "more keys): a table and a plot of --metric against them, error bars over seeds.",
)
@click.option(
    "--metric",
    type=click.Choice(GRID_METRICS),
    default="makespan_s",
    show_default=True,
    help="What a --sweep reports.",
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of the traces (default: $COSHARE_TRACE_DIR, else ../shared/data).",
)
@click.option("--verify", is_flag=True, help="Check every plan with coshare.cycle.verify (slower).")
@click.option(
    "--bound",
    is_flag=True,
    help="alibaba-2023: also compute the least unallocated GPU %% any placement "
    "can reach (once per protocol and seed, apart from the policies' runs).",
)
@click.option(
    "--mig",
    type=click.Choice(sorted(MIXES)),
    default=None,
    help="alibaba-2023: also run on the same GPUs as 80 GB A100s and H100s sliced into MIG "
    "instances by this mix (coshare.sim.mig), and print the unallocated GPU %% with and "
    "without MIG.",
)
@click.option(
    "--order",
    type=click.Choice(["coshare", "scheduler", "both"]),
    default="coshare",
    show_default=True,
    help="Trace and history replays: the order of waiting jobs. coshare: their own priority, "
    "then submit time; scheduler: each user's fair share (Slurm's classic factor, equal "
    "shares, 7-day half-life), as the scheduler would order them; both: each policy under each.",
)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="slurm-history: sacct's --starttime (2026-11-01, now-30days); "
    "condor-history: epoch seconds. Jobs that ended from then on.",
)
@click.option(
    "--until",
    default=None,
    metavar="WHEN",
    help="slurm-history / condor-history: the end of the window (default: now).",
)
@click.option(
    "--history-file",
    default=None,
    metavar="PATH",
    help="slurm-history / condor-history: a saved `sacct --json` or "
    "`condor_history -json` output instead of asking the scheduler.",
)
@click.option(
    "--nodes-file",
    default=None,
    metavar="PATH",
    help="slurm-history / condor-history: a saved `sinfo --json` or "
    "`condor_status -json` output instead of asking the scheduler.",
)
@click.option(
    "--device-memory",
    "device_memory",
    multiple=True,
    metavar="RULE",
    help="slurm-history / condor-history: device memory (MiB) of a job that used "
    "devices but never declared it: MiB, user:NAME=MiB or program:NAME=MiB "
    "(repeat; default: the whole device).",
)
@click.option(
    "--trials",
    type=click.Choice(["off", "on", "both"]),
    default="off",
    show_default=True,
    help="poncos: also run the queues through poncos' own sequence with trial co-runs "
    "(probe, freeze, measure, thaw, decide), nothing recorded beforehand; both: beside "
    "the same run without them.",
)
@click.option(
    "--probe-noise",
    type=FiniteRange(0, 1),
    default=0.0,
    show_default=True,
    help="poncos --trials: relative sigma of every probe's reading (--seed/--seeds draw it).",
)
@click.option(
    "--cycle",
    type=click.Choice(["engine", "live"]),
    default="engine",
    show_default=True,
    help="engine: the fast event engine; live: also run each policy through the live "
    "planning cycle (read, ledger, write protocol) on an in-memory scheduler, a cycle every "
    "--cycle-s, and print both (paper job sets, wu-hong with its lent cores, and "
    "trace:PATH, where --jobs takes the log's first jobs).",
)
@click.option(
    "--cycle-s",
    type=FiniteRange(1, MAX_SETTING_S),
    default=None,
    help="--cycle live: simulated seconds between cycles (default: cycle.interval_s of the "
    "config); placements expire after its cycle.replan_after_s.",
)
@pass_app
def simulate(
    app: AppContext,
    workload: str,
    jobs: int | None,
    nodes: int | None,
    cores_per_node: int | None,
    policies_text: str | None,
    footprint: bool,
    seed: int,
    seeds: int,
    output: str,
    plot: Path | None,
    sizes: str | None,
    threads: ThreadMode,
    cycle_delay: float,
    age_limit: float | None,
    offload_share: float | None,
    protocol: str,
    batch: int,
    workers: int | None,
    executor: str | None,
    dask_scheduler: str | None,
    retries: int | None,
    sweeps: tuple[str, ...],
    metric: str,
    data: Path | None,
    verify: bool,
    bound: bool,
    since: str | None,
    until: str | None,
    history_file: str | None,
    nodes_file: str | None,
    device_memory: tuple[str, ...],
    order: str,
    trials: str,
    probe_noise: float,
    cycle: str,
    cycle_s: float | None,
    mig: str | None,
) -> None:
    """Simulate policies on a workload and compare makespan, utilization, footprint
    (or, on the Alibaba trace, unallocated GPU capacity)."""
    run = WORKLOADS.get("trace" if workload.startswith("trace:") else workload)
    if run is None:
        raise InputError(
            f"unknown workload {shorten(workload)} (known: {', '.join(WORKLOAD_NAMES)})"
        )
    _refuse_options_that_do_not_apply(workload, cores_per_node, live=cycle == "live")
    history = _history_ask(workload, app, since, until, history_file, nodes_file, device_memory)
    if order != "coshare" and not (workload.startswith("trace:") or history is not None):
        raise click.UsageError("--order applies to trace:PATH and history replays")
    if (trials != "off" or probe_noise) and workload != "poncos":
        raise click.UsageError("--trials and --probe-noise apply to --workload poncos")
    if order == "both" and sweeps:
        raise click.UsageError("--order both runs each policy twice; with --sweep choose one")
    if mig is not None and workload != "alibaba-2023":
        raise click.UsageError("--mig applies to the alibaba-2023 workload")
    if plot is not None:
        from coshare.sim.plot import require_matplotlib

        require_matplotlib()  # fail before hours of simulation, not after
        _check_writable(plot)
    setup = Setup(
        threads=threads,
        age_limit_s=age_limit,
        cycle_delay_s=cycle_delay,
        verify=verify,
        offload_share=offload_share,
    )
    seed_list = list(range(seed, seed + seeds))
    if cycle == "live":
        if sweeps or footprint or sizes or plot is not None or order != "coshare":
            raise click.UsageError(
                "--cycle live compares the fast engine and the live cycle on one job set: "
                "leave out --sweep, --footprint, --sizes, --plot and --order"
            )
        _live(
            app,
            workload,
            jobs,
            nodes,
            cores_per_node,
            policies_text,
            seed_list,
            setup,
            output,
            cycle_s,
        )
        return
    if cycle_s is not None:
        raise click.UsageError("--cycle-s applies to --cycle live")
    points = tuple(parse_sweeps(sweeps, _sweep_keys(workload))) if sweeps else ((),)
    config = with_overrides(
        app.config,
        "sim",
        workers=workers,
        retries=retries,
        executor="dask" if dask_scheduler else executor,
        dask_scheduler=dask_scheduler,
    )
    header: dict[str, Any] = {"workload": workload, "seeds": seed_list, "setup": asdict(setup)}
    with open_executor(config) as runner:
        request = Request(
            workload,
            jobs,
            nodes,
            policies_text,
            footprint,
            seed_list,
            parse_sizes(sizes),
            setup,
            protocol,
            batch,
            config.sim.workers,
            data,
            runner,
            points,
            metric,
            cores_per_node,
            bound,
            history,
            order,
            trials,
            probe_noise,
            mig,
        )
        outcome = run(request)
    _emit(output, outcome.text, {**header, **outcome.payload})
    if plot is not None and outcome.figures:
        from coshare.sim.plot import save_figure, save_sweep_figure

        if outcome.sweep:
            save_sweep_figure(plot, **outcome.figures)
        else:
            save_figure(plot, **outcome.figures)
    if outcome.failures:
        count = len(outcome.failures)
        shown = "; ".join(f"{f.task}: {f.reason}" for f in outcome.failures[:10])
        more = f"; and {count - 10} more" if count > 10 else ""
        raise ExecutorError(
            f"{count} run{'s' if count != 1 else ''} failed (the results "
            f"above are the others'): {shown}{more}"
        )


def _live(
    app: AppContext,
    workload: str,
    jobs: int | None,
    nodes: int | None,
    cores_per_node: int | None,
    policies_text: str | None,
    seeds: list[int],
    setup: Setup,
    output: str,
    cycle_s: float | None,
) -> None:
    """``--cycle live``: each policy on the fast engine and through the live cycle."""
    from coshare.sim.live import LiveOptions
    from coshare.sim.live_report import WU_HONG_POLICIES, live_outcome

    options = LiveOptions(
        cycle_s=cycle_s if cycle_s is not None else app.config.cycle.interval_s,
        replan_after_s=app.config.cycle.replan_after_s,
        strict_threads=setup.threads == "strict",
        check=setup.verify,
    )
    default: tuple[str, ...] = PAPER_POLICIES if not workload.startswith("trace:") else ALL_POLICIES
    default = WU_HONG_POLICIES if workload == "wu-hong" else default
    text, payload = live_outcome(
        workload,
        jobs=jobs,
        nodes=nodes,
        cores_per_node=cores_per_node,
        policies=parse_policies(policies_text, default),
        seeds=seeds,
        setup=setup,
        options=options,
    )
    header = {"workload": workload, "seeds": seeds, "setup": asdict(setup)}
    _emit(output, text, {**header, **payload})


#: A time as sacct takes it (2026-11-01, 2026-11-01T08:00, now-30days) or epoch seconds:
#: checked whole before it becomes an argument.
_WHEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9:.+-]{0,39}")


def _history_ask(
    workload: str,
    app: AppContext,
    since: str | None,
    until: str | None,
    history_file: str | None,
    nodes_file: str | None,
    rule: tuple[str, ...],
) -> HistoryAsk | None:
    """Where a history replay reads; ``None`` for other workloads.

    Raises:
        click.UsageError: a history option given to another workload.
        InputError: a time that is not one of the allowed forms.
    """
    given = {
        "--since": since,
        "--until": until,
        "--history-file": history_file,
        "--nodes-file": nodes_file,
        "--device-memory": rule or None,
    }
    if workload not in HISTORY_READERS:
        named = [flag for flag, value in given.items() if value is not None]
        if named:
            raise click.UsageError(
                f"{', '.join(named)} apply to --workload slurm-history or condor-history only"
            )
        return None
    for flag, value in (("--since", since), ("--until", until)):
        if value is not None and not _WHEN.fullmatch(value):
            raise InputError(
                f"{flag} {shorten(value)}: a date (2026-11-01), a time "
                "(2026-11-01T08:00), now-30days or epoch seconds"
            )
    return HistoryAsk(since, until, history_file, nodes_file, rule, app.config)


def _check_writable(path: Path) -> None:
    """Refuse an output file whose folder is missing or not writable, before the run."""
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"--plot {path}: no such folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--plot {path}: folder {folder} is not writable")


#: The options of ``coshare simulate`` that a trace replay does not use: the log gives the
#: jobs and the cluster's use, so they are refused rather than silently ignored.
_NOT_FOR_TRACES = {
    "jobs": "--jobs",
    "footprint": "--footprint",
    "sizes": "--sizes",
    "offload_share": "--offload-share",
    "protocol": "--protocol",
    "batch": "--batch",
}


def _refuse_options_that_do_not_apply(
    workload: str, cores_per_node: int | None, live: bool = False
) -> None:
    """Refuse (exit 2) an option given on the command line that ``workload`` would ignore
    (``live``: ``--cycle live``, where ``--jobs`` takes a trace's first jobs).

    Raises:
        click.UsageError: ``--cores-per-node`` for a workload that is not a trace, or an
            option of :data:`_NOT_FOR_TRACES` for a trace.
    """
    if not workload.startswith("trace:"):
        if cores_per_node is not None:
            raise click.UsageError(
                f"--cores-per-node applies to trace:PATH replays only (the "
                f"workload {shorten(workload)} sets its own nodes)"
            )
        return
    context = click.get_current_context()
    given = [
        flag
        for name, flag in _NOT_FOR_TRACES.items()
        if context.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        and not (live and name == "jobs")
    ]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not "
            "apply to a trace replay: the log gives the jobs (options of a "
            "replay: --nodes, --cores-per-node, --policies, --seed(s), "
            "--sweep)"
        )


def _sweep_keys(workload: str) -> list[str] | None:
    """The keys ``--sweep`` may vary on ``workload`` (``None``: every parameter)."""
    if workload.startswith("trace:"):
        skip = ("jobs", "offload_share", "oversubscribe", "scaling_share")  # no offloads
        return [k for k in parameters() if k not in skip]
    if workload == "sns":
        return ["scaling_share", "sns_default_alpha", "sns_ways_weight"]
    return [k for k in parameters() if k != "scaling_share"]


def _emit(output: str, text: str, payload: dict[str, Any]) -> None:
    if output == "json":
        click.echo(json.dumps(payload, indent=1))
    else:
        click.echo(text, nl=False)
