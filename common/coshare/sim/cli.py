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
``alibaba-2023`` (the fragmentation benchmark on the Alibaba trace) and ``trace:FILE.swf``
(replay an SWF log). This module does the I/O (trace files, the plot, the progress bar) and
hands everything else to the pure ``coshare.sim``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from coshare.bounds import (
    MAX_SIM_JOBS,
    MAX_SIM_NODES,
    MAX_SIM_SEEDS,
    MAX_SIM_SIZES,
    MAX_SIM_TOTAL_JOBS,
    MAX_SIM_WORKERS,
    SIM_KIB_PER_JOB,
    shorten,
    shorten_text,
)
from coshare.config import MAX_SETTING_S
from coshare.errors import InputError
from coshare.policies import policy_names
from coshare.sim.device import FixedModel
from coshare.sim.engine import simulate as run_sim
from coshare.sim.experiments import (
    PAPER_NODES,
    PRESSURE_JOBS_PER_NODE,
    SYNTHETIC_JOBS,
    TABLE1_JOBS,
    Comparison,
    Setup,
    Sweep,
    compare,
    paper_calibration,
    sweep,
)
from coshare.sim.fragmentation import PROTOCOLS, FragRun, arrivals, gpu_capacity, run_benchmark
from coshare.sim.jobs import host_only
from coshare.sim.metrics import summarize
from coshare.sim.paper import (
    TABLE_II_FOOTPRINT,
    TABLE_II_MAKESPAN_S,
    TABLE_II_REDUCTION,
    TABLE_III_FOOTPRINT,
)
from coshare.sim.progress import progress_bar
from coshare.sim.report import (
    comparison_json,
    comparison_table,
    frag_json,
    frag_table,
    render,
    replay_table,
    summary_dict,
    sweep_json,
    sweep_table,
)
from coshare.sim.trace_files import ALIBABA_DIR, data_dir, read_alibaba, read_swf
from coshare.sim.traces import as_gang, header_nodes, rebased
from coshare.sim.workloads import DISTRIBUTIONS

PAPER_POLICIES = ("exclusive", "random", "knapsack")
ALL_POLICIES = ("exclusive", "random", "knapsack", "bestfit", "fgd", "sharepack")



def parse_policies(text: str | None, default: Sequence[str]) -> list[str]:
    """Policy names from ``a,b,c``; unknown ones are an input error listing the known."""
    names = [p.strip() for p in text.split(",") if p.strip()] if text else list(default)
    unknown = [n for n in names if n not in policy_names()]
    if unknown or not names:
        shown = ", ".join(map(shorten, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        raise InputError(f"unknown policy {shown or '(none)'} "
                         f"(known: {', '.join(policy_names())})")  # fmt: skip
    return list(dict.fromkeys(names))


def parse_sizes(text: str | None) -> list[int] | None:
    """Cluster sizes from ``1-8`` or ``2,4,8``: at most :data:`MAX_SIM_SIZES` sizes of
    1..:data:`MAX_SIM_NODES` nodes (checked before any list is built: ``1-1000000000``)."""
    if not text:
        return None
    shown = shorten(text)
    ranges: list[tuple[int, int]] = []
    try:
        for part in text.split(",")[: MAX_SIM_SIZES + 1]:
            low, _, high = part.partition("-")
            ranges.append((int(low), int(high or low)))
    except ValueError as exc:
        raise InputError(f"--sizes {shown}: want sizes like 1-8 or 2,4,8") from exc
    if not ranges or any(not 1 <= low <= high <= MAX_SIM_NODES for low, high in ranges):
        raise InputError(f"--sizes {shown}: sizes are node counts 1..{MAX_SIM_NODES}, "
                         "low before high")  # fmt: skip
    count = sum(high - low + 1 for low, high in ranges)
    if count > MAX_SIM_SIZES:
        raise InputError(f"--sizes {shown}: {count} sizes; at most {MAX_SIM_SIZES}")
    return sorted({n for low, high in ranges for n in range(low, high + 1)})


class FiniteRange(click.FloatRange):
    """A float option within a range that also refuses ``nan`` and ``inf`` (click's own
    FloatRange lets ``nan`` through: every comparison with it is false)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:  # fmt: skip
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number in the range {self._describe_range()}",
                      param, ctx)  # fmt: skip
        return number


def check_work(runs: int, jobs: int, what: str) -> None:
    """Refuse a simulation bigger than coshare lets one command ask for, with the estimate.

    Args:
        runs: simulated runs the command would make (at least).
        jobs: jobs of its largest run.
        what: the options that size it, for the message.

    Raises:
        InputError: a run of more than :data:`MAX_SIM_JOBS` jobs, or more than
            :data:`MAX_SIM_TOTAL_JOBS` jobs over all runs.
    """
    memory_mib = jobs * SIM_KIB_PER_JOB // 1024
    if jobs > MAX_SIM_JOBS:
        raise InputError(f"{what}: one run would simulate {jobs} jobs (about {memory_mib} MiB, "
                         f"and hours); at most {MAX_SIM_JOBS} jobs per run")  # fmt: skip
    if runs * jobs > MAX_SIM_TOTAL_JOBS:
        raise InputError(f"{what}: {runs} runs of up to {jobs} jobs would simulate "
                         f"{runs * jobs} jobs; at most {MAX_SIM_TOTAL_JOBS} in all (use fewer "
                         "seeds, sizes or policies)")  # fmt: skip


def table2_report(
    jobs: int = TABLE1_JOBS,
    nodes: int = PAPER_NODES,
    seeds: Sequence[int] = (0,),
    setup: Setup | None = None,
    footprint: bool = True,
) -> tuple[str, list[Comparison]]:
    """The Table II reproduction as text (MC, MCC, MCCK with footprint), and its results."""
    setup = setup or Setup()
    per_seed = len(PAPER_POLICIES) + (4 if footprint else 0)
    if nodes > MAX_SIM_NODES:
        raise InputError(f"--nodes {nodes}: at most {MAX_SIM_NODES} nodes")
    check_work(len(seeds) * per_seed, jobs, f"--jobs {jobs} --seeds {len(seeds)}")
    with progress_bar(len(seeds) * per_seed * jobs, "Table II") as advance:
        step = _jobs_step(advance, jobs)
        comps = [compare("table1", jobs, nodes, PAPER_POLICIES, s, setup, footprint,
                         step=step) for s in seeds]  # fmt: skip
    title = (
        f"Table II reproduction: {jobs} Table I jobs on {nodes} nodes x 1 Xeon Phi 5110P, "
        f"seeds {', '.join(map(str, seeds))} (threads {setup.threads}, cycle delay "
        f"{setup.cycle_delay_s:g} s, offload share {_shares(comps)} calibrated to MC 50%)"
    )
    paper = jobs == TABLE1_JOBS and nodes == PAPER_NODES
    table = comparison_table(
        comps, title,
        TABLE_II_MAKESPAN_S if paper else None, TABLE_II_REDUCTION if paper else None,
        TABLE_II_FOOTPRINT if paper else None,
    )  # fmt: skip
    note = ("footprint: the fewest nodes that finish within exclusive's makespan on "
            f"{nodes} nodes; paper = Coviello et al., Table II (MC/MCC/MCCK).")
    return render(table, note), comps


def _jobs_step(advance: Callable[[int], None], jobs: int) -> Callable[[str], None]:
    """A ``step`` of the experiments that counts each finished run's jobs (the calibration
    run simulates the Table I set)."""

    def step(what: str) -> None:
        advance(TABLE1_JOBS if what.startswith("calibration") else jobs)

    return step


def _shares(comps: Sequence[Comparison]) -> str:
    values = sorted({round(c.offload_share, 3) for c in comps})
    return ", ".join(f"{v:.3f}" for v in values)


@dataclass(frozen=True)
class Request:
    """What ``coshare simulate`` was asked, for a workload's runner."""

    workload: str
    jobs: int | None
    nodes: int | None
    policies_text: str | None
    footprint: bool
    seeds: list[int]
    sizes: list[int] | None
    setup: Setup
    protocol: str
    batch: int
    workers: int
    data: Path | None


@dataclass(frozen=True)
class Outcome:
    """What a workload's runner produced: the table, the JSON, and what ``--plot`` draws
    (keyword arguments of :func:`coshare.sim.plot.save_figure`; empty: nothing to draw)."""

    text: str
    payload: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)


def _paper(request: Request) -> Outcome:
    """A paper job set (``table1`` or a distribution), or all four (``synthetic``)."""
    setup, size_list = request.setup, request.sizes
    policies = parse_policies(request.policies_text, PAPER_POLICIES)
    names = list(DISTRIBUTIONS) if request.workload == "synthetic" else [request.workload]
    count = request.jobs or (TABLE1_JOBS if request.workload == "table1" else SYNTHETIC_JOBS)
    size = request.nodes or PAPER_NODES
    comparisons: dict[str, list[Comparison]] = {}
    sweeps: dict[str, list[Sweep]] = {}
    runs_each = len(policies) + (2 * (len(policies) - 1) + 1 if request.footprint else 0)
    total = len(request.seeds) * len(names) * (runs_each + len(size_list or []) * len(policies))
    check_work(total, count, f"--jobs {count}")
    with progress_bar(total * count, request.workload) as advance:
        step = _jobs_step(advance, count)
        for s in request.seeds:
            calibration = None if setup.offload_share is not None else paper_calibration(s, setup)
            for name in names:
                comparisons.setdefault(name, []).append(
                    compare(name, count, size, policies, s, setup, request.footprint,
                            step=step, calibration=calibration))  # fmt: skip
                if size_list:
                    sweeps.setdefault(name, []).append(
                        sweep(name, size_list, policies, s, setup, jobs=count,
                              step=step, calibration=calibration))  # fmt: skip
    return _paper_outcome(comparisons, sweeps, setup)


def _pressure(request: Request) -> Outcome:
    """Fig. 10: ``--jobs`` normal-distribution jobs per node over cluster sizes."""
    policies = parse_policies(request.policies_text, PAPER_POLICIES)
    per_node = request.jobs or PRESSURE_JOBS_PER_NODE
    grid = request.sizes or list(range(2, PAPER_NODES + 1))
    check_work(len(request.seeds) * len(grid) * len(policies), per_node * max(grid),
               f"--workload pressure --jobs {per_node} (per node)")  # fmt: skip
    # Runs finish in this order (seed, size, policy): each one's jobs, counted as it ends.
    runs = iter([n * per_node for _ in request.seeds for n in grid for _ in policies])
    with progress_bar(len(request.seeds) * len(policies) * per_node * sum(grid),
                      "pressure") as advance:  # fmt: skip
        sweeps = {"pressure (normal)": [
            sweep("normal", grid, policies, s, request.setup, jobs_per_node=per_node,
                  step=lambda _: advance(next(runs, 0))) for s in request.seeds
        ]}  # fmt: skip
    return _paper_outcome({}, sweeps, request.setup)


def _paper_outcome(comparisons: dict[str, list[Comparison]], sweeps: dict[str, list[Sweep]],
                   setup: Setup) -> Outcome:  # fmt: skip
    payload = {"comparisons": {k: comparison_json(v) for k, v in comparisons.items()},
               "sweeps": {k: sweep_json(v) for k, v in sweeps.items()}}  # fmt: skip
    return Outcome(_paper_text(comparisons, sweeps, setup), payload,
                   {"comparisons": comparisons, "sweeps": sweeps})  # fmt: skip


def _fragmentation(request: Request) -> Outcome:
    """The Alibaba fragmentation benchmark."""
    policies = parse_policies(request.policies_text, ALL_POLICIES)
    runs = _alibaba(policies, request.seeds, request.protocol, request.batch, request.data,
                    request.workers)  # fmt: skip
    protocols = PROTOCOLS if request.protocol == "both" else (request.protocol,)
    text = render(*[frag_table(runs, p) for p in protocols])
    payload = {"protocols": list(protocols), "batch": request.batch, **frag_json(runs)}
    return Outcome(text, payload, {"fragmentation": runs})


def _trace(request: Request) -> Outcome:
    """Replay an SWF log (``trace:PATH``)."""
    policies = parse_policies(request.policies_text, ALL_POLICIES)
    path = Path(request.workload[len("trace:"):])
    text, payload = _replay(path, policies, request.setup, request.nodes)
    return Outcome(text, payload)


#: Workloads by name: a new workload is one entry (``trace`` stands for ``trace:PATH``).
WORKLOADS: dict[str, Callable[[Request], Outcome]] = {
    "table1": _paper,
    **dict.fromkeys(DISTRIBUTIONS, _paper),
    "synthetic": _paper,
    "pressure": _pressure,
    "alibaba-2023": _fragmentation,
    "trace": _trace,
}
WORKLOAD_NAMES = tuple(name if name != "trace" else "trace:PATH" for name in WORKLOADS)


@click.command("simulate")
@click.option("--workload", default="table1", show_default=True, metavar="NAME|trace:PATH",
              help=f"One of {', '.join(WORKLOAD_NAMES)}.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Jobs (table1: 1000, synthetic: 400; pressure: jobs per node, 200).")
@click.option("--nodes", type=click.IntRange(1, MAX_SIM_NODES), default=None,
              help=f"Cluster size in nodes (default {PAPER_NODES}).")
@click.option("--policies", "policies_text", default=None,
              help="Comma-separated policies (paper workloads: exclusive,random,knapsack; "
              "alibaba-2023 and traces: all five).")
@click.option("--footprint", is_flag=True,
              help="Also find each policy's footprint: the fewest nodes matching exclusive's "
              "makespan.")
@click.option("--seed", type=int, default=0, show_default=True, help="First seed.")
@click.option("--seeds", type=click.IntRange(1, MAX_SIM_SEEDS), default=1, show_default=True,
              help="Number of seeds (SEED, SEED+1, ...).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write figures to this PNG (needs matplotlib: the 'plot' extra).")
@click.option("--sizes", default=None,
              help="Also sweep the cluster size, e.g. 1-8 (Fig. 9); pressure: default 2-8.")
@click.option("--threads", type=click.Choice(["soft", "strict"]), default="soft",
              show_default=True,
              help="soft: the node's offload gate serializes offloads (COSMIC, as in the "
              "paper's MCC and MCCK); strict: declared threads per device stay within it.")
@click.option("--cycle-delay", type=FiniteRange(0, MAX_SETTING_S), default=1.0, show_default=True,
              help="Seconds from an arrival or job end to the planning cycle.")
@click.option("--age-limit", type=FiniteRange(0, MAX_SETTING_S), default=None,
              help="Knapsack aging in seconds (default: none, as in the paper).")
@click.option("--offload-share", type=FiniteRange(0, 1, min_open=True), default=None,
              help="Part of a job's run time spent offloading (default: calibrated so "
              "exclusive reaches the paper's 50% utilization).")
@click.option("--protocol", type=click.Choice(["online", "batch", "both"]), default="both",
              show_default=True, help="alibaba-2023: one pod per cycle, many, or both.")
@click.option("--batch", type=click.IntRange(min=1), default=100, show_default=True,
              help="alibaba-2023, batch protocol: pods per cycle.")
@click.option("--workers", type=click.IntRange(1, MAX_SIM_WORKERS), default=1, show_default=True,
              help="alibaba-2023: runs in parallel processes (one per core is plenty).")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of the traces (default: $COSHARE_TRACE_DIR, else ../shared/data).")
@click.option("--verify", is_flag=True, help="Check every plan with coshare.verify (slower).")
def simulate(workload: str, jobs: int | None, nodes: int | None, policies_text: str | None,
             footprint: bool, seed: int, seeds: int, output: str, plot: Path | None,
             sizes: str | None, threads: str, cycle_delay: float, age_limit: float | None,
             offload_share: float | None, protocol: str, batch: int, workers: int,
             data: Path | None, verify: bool) -> None:  # fmt: skip
    """Simulate policies on a workload and compare makespan, utilization, footprint
    (or, on the Alibaba trace, unallocated GPU capacity)."""
    run = WORKLOADS.get("trace" if workload.startswith("trace:") else workload)
    if run is None:
        raise InputError(f"unknown workload {shorten(workload)} "
                         f"(known: {', '.join(WORKLOAD_NAMES)})")
    if plot is not None:
        from coshare.sim.plot import require_matplotlib

        require_matplotlib()  # fail before hours of simulation, not after
    setup = Setup(threads=threads, age_limit_s=age_limit, cycle_delay_s=cycle_delay,  # type: ignore[arg-type]
                  verify=verify, offload_share=offload_share)  # fmt: skip
    seed_list = list(range(seed, seed + seeds))
    request = Request(workload, jobs, nodes, policies_text, footprint, seed_list,
                      parse_sizes(sizes), setup, protocol, batch, workers, data)  # fmt: skip
    header: dict[str, Any] = {"workload": workload, "seeds": seed_list, "setup": asdict(setup)}
    outcome = run(request)
    _emit(output, outcome.text, {**header, **outcome.payload})
    if plot is not None and outcome.figures:
        from coshare.sim.plot import save_figure

        save_figure(plot, **outcome.figures)


def _emit(output: str, text: str, payload: dict[str, Any]) -> None:
    if output == "json":
        click.echo(json.dumps(payload, indent=1))
    else:
        click.echo(text, nl=False)


def _paper_text(comparisons: dict[str, list[Comparison]], sweeps: dict[str, list[Sweep]],
                setup: Setup) -> str:  # fmt: skip
    items = []
    for name, comps in comparisons.items():
        first = comps[0]
        seeds = ", ".join(str(c.seed) for c in comps)
        paper_fp = TABLE_II_FOOTPRINT if name == "table1" else TABLE_III_FOOTPRINT.get(name)
        paper_set = (name == "table1" and first.jobs == TABLE1_JOBS) or (
            name in DISTRIBUTIONS and first.jobs == SYNTHETIC_JOBS)
        paper_set = paper_set and first.nodes == PAPER_NODES
        table2 = name == "table1" and paper_set
        title = (f"{name}: {first.jobs} jobs on {first.nodes} nodes, seeds {seeds} (threads "
                 f"{setup.threads}, cycle delay {setup.cycle_delay_s:g} s, offload share "
                 f"{_shares(comps)})")  # fmt: skip
        items.append(comparison_table(
            comps, title,
            TABLE_II_MAKESPAN_S if table2 else None, TABLE_II_REDUCTION if table2 else None,
            paper_fp if paper_set and any(c.footprints for c in comps) else None,
        ))  # fmt: skip
    for name, group in sweeps.items():
        items.append(sweep_table(group, f"{name}: makespan against cluster size, seeds "
                                        f"{', '.join(str(s.seed) for s in group)}"))  # fmt: skip
    return render(*items)


def _alibaba(policies: Sequence[str], seeds: Sequence[int], protocol: str, batch: int,
             data: Path | None, workers: int = 1) -> list[FragRun]:  # fmt: skip
    trace = read_alibaba(data_dir(data) / ALIBABA_DIR)
    pods = tuple(p.job for p in trace.pods)
    protocols = PROTOCOLS if protocol == "both" else (protocol,)
    tasks = [(proto, name, s) for proto in protocols for name in policies for s in seeds]
    per_run = len(arrivals(pods, gpu_capacity(trace.nodes), seeds[0]))
    with progress_bar(per_run * len(tasks), "alibaba-2023", unit="pods") as advance:
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(run_benchmark, trace.nodes, pods, name, proto, s, batch)
                           for proto, name, s in tasks]  # fmt: skip
                for _ in as_completed(futures):
                    advance(per_run)
                return [f.result() for f in futures]
        runs: list[FragRun] = []
        for proto, name, s in tasks:
            done = [0]

            def step(n: int, done: list[int] = done) -> None:
                advance(n - done[0])
                done[0] = n

            runs.append(run_benchmark(trace.nodes, pods, name, proto, s, batch, step))
        return runs


def _replay(path: Path, policies: Sequence[str], setup: Setup,
            nodes: int | None) -> tuple[str, dict[str, Any]]:  # fmt: skip
    where = f"trace:{shorten_text(str(path))}"
    if path.suffix != ".swf":
        raise InputError(f"{where}: only SWF logs (.swf) are replayed; the Alibaba pod list is "
                         "the alibaba-2023 workload")  # fmt: skip
    trace, machines = read_swf(path)
    if machines is None:  # the header's MaxNodes / MaxProcs (issue 14)
        machines = header_nodes(trace, where)
    cluster = machines[:nodes] if nodes else machines
    check_work(len(policies), len(trace.jobs), where)
    jobs = [host_only(as_gang(j.job, cluster), j.run_s) for j in rebased(trace.jobs)]
    summaries = []
    with progress_bar(len(policies) * len(jobs), f"replay {escape(path.name)}") as advance:
        for name in policies:
            ended = [0]

            def step(n: int, ended: list[int] = ended) -> None:  # n: jobs ended so far
                advance(n - ended[0])
                ended[0] = n

            result = run_sim(cluster, jobs, setup.policy(name, 0), options=setup.options(),
                             model=FixedModel(), progress=step)  # fmt: skip
            summaries.append(summarize(result))
    title = (f"SWF replay of {path.name}: {len(jobs)} jobs ({trace.skipped} records skipped), "
             f"{len(cluster)} nodes; jobs wider than one node run as gangs")
    payload = {"trace": str(path), "nodes": len(cluster), "skipped_records": trace.skipped,
               "runs": [summary_dict(s) for s in summaries]}  # fmt: skip
    return render(replay_table(summaries, title)), payload
