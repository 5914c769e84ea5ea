"""``coshare simulate --cycle live``: each policy on the fast engine and on the live cycle,
side by side (:mod:`coshare.sim.live`).

The same jobs (a paper job set, or an SWF log's), the same cluster, the same policy and the
same execution model run twice: once on the fast engine (:func:`coshare.sim.engine.simulate`,
a cycle ``cycle_delay_s`` after each arrival or end), once through the live cycle
(:func:`coshare.sim.live.simulate_live`, a cycle every ``cycle_s``). ``wu-hong`` runs on the
collocation experiment's own engine (:func:`coshare.sim.collocation.run_wu_hong`, a cycle
``cycle_delay_s`` after each end and every 60 s while jobs wait) and through the live cycle
with lent cores (:func:`coshare.sim.live.run_wu_hong_live`). Pure: no I/O beyond reading
the log.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from coshare.errors import InputError
from coshare.model import Node
from coshare.sim.collocation import (
    CORES,
    CPU_JOBS,
    GPU_JOBS,
    GPUS_PER_NODE,
    NODES,
    CollocationRun,
    run_wu_hong,
)
from coshare.sim.device import ExecutionModel, FixedModel, OffloadModel
from coshare.sim.engine import simulate
from coshare.sim.experiments import (
    PAPER_NODES,
    SYNTHETIC_JOBS,
    TABLE1_JOBS,
    Setup,
    draws_for,
    paper_calibration,
)
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.live import CollocationLive, LiveOptions, LiveRun, run_wu_hong_live, simulate_live
from coshare.sim.metrics import RunSummary, summarize
from coshare.sim.report import render, summary_dict
from coshare.sim.trace_files import stream_lines
from coshare.sim.traces import SwfTally, as_gang, iter_swf, rebased
from coshare.sim.workloads import DISTRIBUTIONS, paper_cluster, realize


@dataclass(frozen=True)
class Side:
    """One policy on one job set: the fast engine's run and the live cycle's.

    Attributes:
        workload: the job set's name.
        seed: its seed.
        engine: the fast engine's figures.
        live: the live cycle's figures.
        run: the live run's tallies (placements withdrawn, writes failed or skipped).
        engine_s: CPU seconds of the engine's run.
        live_s: CPU seconds of the live run.
    """

    workload: str
    seed: int
    engine: RunSummary
    live: RunSummary
    run: LiveRun
    engine_s: float
    live_s: float


def both(
    workload: str,
    seed: int,
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    policies: Sequence[str],
    setup: Setup,
    options: LiveOptions,
    model: type[ExecutionModel],
) -> list[Side]:
    """Each policy on the fast engine, then on the live cycle."""
    sides = []
    for name in policies:
        start = time.process_time()
        engine = summarize(
            simulate(nodes, jobs, setup.policy(name, seed), options=setup.options(), model=model())
        )
        middle = time.process_time()
        run = simulate_live(nodes, jobs, setup.policy(name, seed), options=options, model=model())
        sides.append(
            Side(
                workload,
                seed,
                engine,
                summarize(run.result),
                run,
                middle - start,
                time.process_time() - middle,
            )
        )
    return sides


def paper_sides(
    workload: str,
    jobs: int,
    nodes: int,
    policies: Sequence[str],
    seeds: Sequence[int],
    setup: Setup,
    options: LiveOptions,
) -> list[Side]:
    """A paper job set (``table1`` or a distribution), both ways, per seed."""
    sides = []
    for seed in seeds:
        share = setup.offload_share
        if share is None:
            share = paper_calibration(seed, setup).offload_share
        sim_jobs = realize(draws_for(workload, jobs, seed), share)
        sides += both(
            workload,
            seed,
            paper_cluster(nodes),
            sim_jobs,
            policies,
            setup,
            options,
            OffloadModel,
        )
    return sides


def trace_sides(
    path: Path,
    cluster: tuple[Node, ...],
    policies: Sequence[str],
    seeds: Sequence[int],
    setup: Setup,
    options: LiveOptions,
    bytes_per_job: bool = False,
    first: int | None = None,
) -> list[Side]:
    """An SWF log's jobs (fixed run times; a job wider than a node a gang), both ways;
    ``first``: only its first jobs."""
    records = rebased(iter_swf(stream_lines(path), str(path), SwfTally(), bytes_per_job))
    jobs = [
        host_only(as_gang(j.job, cluster), j.run_s, j.user)
        for j in itertools.islice(records, first)
    ]
    if not jobs:
        raise InputError(f"trace:{path.name} holds no job to replay")
    sides = []
    for seed in seeds:
        sides += both(
            f"trace:{path.name}", seed, cluster, jobs, policies, setup, options, FixedModel
        )
    return sides


def live_table(sides: Sequence[Side], title: str) -> Table:
    """One row per policy and seed: the engine's and the live cycle's makespan, utilization
    (the devices', or the cores' on a cluster without devices), mean wait and cycles, and
    the live cycle's expired placements."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    columns = [
        "policy",
        "seed",
        "makespan\nengine",
        "makespan\nlive",
        "live/\nengine",
        "util\nengine",
        "util\nlive",
        "wait\nengine",
        "wait\nlive",
        "cycles\nengine",
        "cycles\nlive",
        "expired",
        "not run\neng/live",
    ]
    for c in columns:
        table.add_column(c, justify="left" if c == "policy" else "right")
    cores = any(s.run.result.devices == 0 for s in sides)
    for s in sides:
        ratio = s.live.makespan_s / s.engine.makespan_s if s.engine.makespan_s > 0 else 0.0
        table.add_row(
            s.engine.policy,
            str(s.seed),
            f"{s.engine.makespan_s:.0f}",
            f"{s.live.makespan_s:.0f}",
            f"{ratio:.2f}",
            f"{_util(s.engine, cores):.0%}",
            f"{_util(s.live, cores):.0%}",
            f"{s.engine.wait_mean_s:.0f}",
            f"{s.live.wait_mean_s:.0f}",
            str(s.engine.cycles),
            str(s.live.cycles),
            str(s.run.withdrawn),
            f"{s.engine.not_run}/{s.live.not_run}",
        )
    return table


def _util(summary: RunSummary, cores: bool) -> float:
    """Device core utilization, or the nodes' (core-seconds) on a cluster without devices."""
    return summary.core_utilization if cores else summary.utilization


def live_json(sides: Sequence[Side], options: LiveOptions) -> dict[str, Any]:
    """The figures of both runs per policy and seed, and the live cycle's settings."""
    return {
        "cycle": "live",
        "cycle_s": options.cycle_s,
        "replan_after_s": options.replan_after_s,
        "runs": [
            {
                "workload": s.workload,
                "seed": s.seed,
                "policy": s.engine.policy,
                "engine": summary_dict(s.engine),
                "live": {
                    **summary_dict(s.live),
                    "withdrawn": s.run.withdrawn,
                    "failed": s.run.failed,
                    "skipped": s.run.skipped,
                    "rejected": s.run.rejected,
                },
            }
            for s in sides
        ],
    }


def live_text(sides: Sequence[Side], title: str) -> str:
    """The table, and why the two differ."""
    why = (
        "The live cycle plans every cycle_s, not right after each job ends: a device that "
        "frees mid-interval idles until the next cycle; a placement that does not start "
        "within replan_after_s expires and is planned again (expired)."
    )
    return render(live_table(sides, title), why)


@dataclass(frozen=True)
class LentSide:
    """One policy on Wu & Hong's workload of one seed: its engine's run and the live cycle's.

    Attributes:
        seed: the workload's seed.
        engine: the collocation engine's run.
        live: the live cycle's run.
        engine_s: CPU seconds of the engine's run.
        live_s: CPU seconds of the live run.
    """

    seed: int
    engine: CollocationRun
    live: CollocationLive
    engine_s: float
    live_s: float


def wu_hong_sides(
    policies: Sequence[str], seeds: Sequence[int], setup: Setup, options: LiveOptions
) -> list[LentSide]:
    """Wu & Hong's workload (section IV-C), each policy on its engine and through the live
    cycle, per seed."""
    sides = []
    for seed in seeds:
        for name in policies:
            start = time.process_time()
            engine = run_wu_hong(setup.policy(name, seed), seed, cycle_delay_s=setup.cycle_delay_s)
            middle = time.process_time()
            live = run_wu_hong_live(setup.policy(name, seed), seed, options)
            sides.append(LentSide(seed, engine, live, middle - start, time.process_time() - middle))
    return sides


def wu_hong_table(sides: Sequence[LentSide], title: str) -> Table:
    """One row per policy and seed: section IV-C's makespan (s), effective CPU and GPU
    utilization, the core-seconds CPU jobs ran on lent cores (``lent``), jobs killed and
    cycles, engine beside live, and the live cycle's expired placements."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    columns = [
        "policy",
        "seed",
        "makespan\nengine",
        "makespan\nlive",
        "live/\nengine",
        "CPU\nengine",
        "CPU\nlive",
        "GPU\nengine",
        "GPU\nlive",
        "lent\nengine",
        "lent\nlive",
        "killed\neng/live",
        "cycles\neng/live",
        "expired",
    ]
    for c in columns:
        table.add_column(c, justify="left" if c == "policy" else "right")
    for s in sides:
        e, live = s.engine, s.live.result
        ratio = live.makespan_s / e.makespan_s if e.makespan_s > 0 else 0.0
        table.add_row(
            e.policy,
            str(s.seed),
            f"{e.makespan_s:.0f}",
            f"{live.makespan_s:.0f}",
            f"{ratio:.2f}",
            f"{e.cpu_utilization:.0%}",
            f"{live.cpu_utilization:.0%}",
            f"{e.gpu_utilization:.0%}",
            f"{live.gpu_utilization:.0%}",
            f"{e.harvested_core_s:.0f}",
            f"{live.harvested_core_s:.0f}",
            f"{e.killed}/{live.killed}",
            f"{e.cycles}/{live.cycles}",
            str(s.live.tally.withdrawn),
        )
    return table


def wu_hong_json(sides: Sequence[LentSide], options: LiveOptions) -> dict[str, Any]:
    """Section IV-C's figures of both runs per policy and seed, and the live cycle's
    settings."""
    return {
        "cycle": "live",
        "cycle_s": options.cycle_s,
        "replan_after_s": options.replan_after_s,
        "runs": [
            {
                "workload": "wu-hong",
                "seed": s.seed,
                "policy": s.engine.policy,
                "engine": asdict(s.engine),
                "live": {
                    **asdict(s.live.result),
                    "withdrawn": s.live.tally.withdrawn,
                    "failed": s.live.tally.failed,
                    "skipped": s.live.tally.skipped,
                    "rejected": s.live.tally.rejected,
                },
            }
            for s in sides
        ],
    }


def wu_hong_text(sides: Sequence[LentSide], title: str, options: LiveOptions) -> str:
    """The table, and why the two differ."""
    why = (
        f"The collocation engine plans 1 s after each job ends and every 60 s while jobs "
        f"wait; the live cycle plans every {options.cycle_s:g} s: cores and GPUs freed "
        "mid-interval idle until the next cycle, so the live makespan is longer and the "
        "utilizations lower. Lent core-seconds differ as the starts do: a GPU job lends only "
        "after its monitoring period and a sampled load, from the first cycle after them. "
        "Both run the same jobs under the same execution model (a borrower slows beside "
        "its lender's copies; a job past its request is killed); a placement that does not "
        "start within replan_after_s expires (expired)."
    )
    never = [
        f"{s.engine.policy} seed {s.seed}: {s.live.result.not_run} jobs never ran live"
        for s in sides
        if s.live.result.not_run
    ]
    return render(wu_hong_table(sides, title), why, *never)


#: Workloads ``--cycle live`` runs (and ``trace:PATH``).
LIVE_WORKLOADS = ("table1", *DISTRIBUTIONS, "wu-hong")
#: The policies ``--cycle live`` compares on ``wu-hong`` when ``--policies`` names none.
WU_HONG_POLICIES = ("exclusive", "collocate")


def live_outcome(
    workload: str,
    *,
    jobs: int | None,
    nodes: int | None,
    cores_per_node: int | None,
    policies: Sequence[str],
    seeds: Sequence[int],
    setup: Setup,
    options: LiveOptions,
) -> tuple[str, dict[str, Any]]:
    """The text and JSON of ``coshare simulate --cycle live``.

    Raises:
        InputError: a workload the live cycle does not run.
    """
    if workload.startswith("trace:"):
        from coshare.sim.replay import cluster_of, memory_reading_of

        path = Path(workload[len("trace:") :])
        cluster = cluster_of(path, nodes, cores_per_node)
        bytes_per_job, _ = memory_reading_of(path, cluster)
        sides = trace_sides(path, cluster, policies, seeds, setup, options, bytes_per_job, jobs)
        first = f", its first {jobs} jobs" if jobs is not None else ""
        title = f"trace:{path.name}{first}: {len(cluster)} nodes"
    elif workload == "wu-hong":
        if jobs is not None or nodes is not None:
            raise InputError(
                "--workload wu-hong is the paper's setup (4 nodes, 32 GPU and 300 CPU "
                "jobs); --jobs and --nodes do not apply"
            )
        lent = wu_hong_sides(policies, seeds, setup, options)
        title = (
            f"wu-hong: {NODES} nodes x {CORES} cores x {GPUS_PER_NODE} GPUs, {GPU_JOBS} GPU + "
            f"{CPU_JOBS} CPU jobs; collocation engine vs live cycle every {options.cycle_s:g} s"
        )
        return wu_hong_text(lent, title, options), wu_hong_json(lent, options)
    elif workload in LIVE_WORKLOADS:
        count = jobs or (TABLE1_JOBS if workload == "table1" else SYNTHETIC_JOBS)
        size = nodes or PAPER_NODES
        sides = paper_sides(workload, count, size, policies, seeds, setup, options)
        title = f"{workload}: {count} jobs, {size} nodes"
    else:
        raise InputError(
            f"--cycle live runs {', '.join(LIVE_WORKLOADS)} and trace:PATH, not {workload}"
        )
    title += f"; fast engine vs live cycle every {options.cycle_s:g} s"
    return live_text(sides, title), live_json(sides, options)
