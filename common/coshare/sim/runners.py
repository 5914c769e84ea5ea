"""What ``coshare simulate`` runs for each workload: one runner per experiment (the paper's
tables, pressure, the fragmentation benchmark, a trace, poncos, the collocation paper's sweep,
PICASO, Spread-n-Share, a scheduler's history), each turning a :class:`Request` into an
:class:`Outcome` (its text, its JSON and its figures); :data:`WORKLOADS` maps the names to
them. The command itself (options, checks, output) is :mod:`coshare.sim.cli`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from coshare.errors import InputError
from coshare.ledger.bounds import (
    MAX_SIM_JOBS,
    MAX_SIM_NODES,
    MAX_SIM_SIZES,
    MAX_SIM_TOTAL_JOBS,
    SIM_KIB_PER_JOB,
    shorten,
    unknown_name,
)
from coshare.policies import policy_names
from coshare.sim.executor import LocalExecutor
from coshare.sim.experiments import (
    PAPER_NODES,
    PRESSURE_JOBS_PER_NODE,
    SYNTHETIC_JOBS,
    TABLE1_JOBS,
    Comparison,
    Setup,
    Sweep,
    compare,
)
from coshare.sim.fragmentation import PROTOCOLS, FragRun, benchmark_bound, run_benchmark
from coshare.sim.history import fairness
from coshare.sim.mig import mig_nodes
from coshare.sim.mig_report import mig_caption, mig_table
from coshare.sim.paper import (
    TABLE_II_FOOTPRINT,
    TABLE_II_MAKESPAN_S,
    TABLE_II_REDUCTION,
    TABLE_III_FOOTPRINT,
)
from coshare.sim.params import Point, apply, label, value_of
from coshare.sim.picaso import PARTS as PICASO_PARTS
from coshare.sim.progress import progress_bar
from coshare.sim.replay import Replay, check_log, cluster_of, memory_reading_of, replay
from coshare.sim.report import (
    GridRun,
    comparison_json,
    comparison_table,
    frag_json,
    frag_table,
    grid_json,
    grid_table,
    render,
    replay_table,
    summary_dict,
    sweep_json,
    sweep_table,
    user_table,
)
from coshare.sim.runs import Executor, Failure, Task
from coshare.sim.trace_files import ALIBABA_DIR, data_dir, machines_path, read_alibaba
from coshare.sim.traces import unmodelled_warning
from coshare.sim.work import CompareSpec, SizesSpec, job_count, run_paper, task_count
from coshare.sim.workloads import DISTRIBUTIONS

PAPER_POLICIES = ("exclusive", "random", "knapsack")
ALL_POLICIES = ("exclusive", "random", "knapsack", "bestfit", "fgd", "sharepack")


def parse_policies(text: str | None, default: Sequence[str]) -> list[str]:
    """Policy names from ``a,b,c``; unknown ones are an input error listing the known."""
    names = [p.strip() for p in text.split(",") if p.strip()] if text else list(default)
    unknown = [n for n in names if n not in policy_names()]
    if len(unknown) == 1:
        raise InputError(f"--policies: {unknown_name('policy', unknown[0], policy_names())}")
    if unknown or not names:
        shown = ", ".join(map(shorten, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        raise InputError(
            f"--policies: unknown policy {shown or '(none)'} (known: {', '.join(policy_names())})"
        )
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
        raise InputError(
            f"--sizes {shown}: sizes are node counts 1..{MAX_SIM_NODES}, low before high"
        )
    count = sum(high - low + 1 for low, high in ranges)
    if count > MAX_SIM_SIZES:
        raise InputError(f"--sizes {shown}: {count} sizes; at most {MAX_SIM_SIZES}")
    return sorted({n for low, high in ranges for n in range(low, high + 1)})


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
        raise InputError(
            f"{what}: one run would simulate {jobs} jobs (about {memory_mib} MiB, "
            f"and hours); at most {MAX_SIM_JOBS} jobs per run"
        )
    if runs * jobs > MAX_SIM_TOTAL_JOBS:
        raise InputError(
            f"{what}: {runs} runs of up to {jobs} jobs would simulate "
            f"{runs * jobs} jobs; at most {MAX_SIM_TOTAL_JOBS} in all (use fewer "
            "seeds, sizes or policies)"
        )


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
        comps = [
            compare("table1", jobs, nodes, PAPER_POLICIES, s, setup, footprint, step=step)
            for s in seeds
        ]
    title = (
        f"Table II reproduction: {jobs} Table I jobs on {nodes} nodes x 1 Xeon Phi 5110P, "
        f"seeds {', '.join(map(str, seeds))} (threads {setup.threads}, cycle delay "
        f"{setup.cycle_delay_s:g} s, offload share {_shares(comps)} calibrated to MC 50%)"
    )
    paper = jobs == TABLE1_JOBS and nodes == PAPER_NODES
    table = comparison_table(
        comps,
        title,
        TABLE_II_MAKESPAN_S if paper else None,
        TABLE_II_REDUCTION if paper else None,
        TABLE_II_FOOTPRINT if paper else None,
    )
    note = (
        "footprint: the fewest nodes that finish within exclusive's makespan on "
        f"{nodes} nodes; paper = Coviello et al., Table II (MC/MCC/MCCK)."
    )
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
class HistoryAsk:
    """Where a history replay reads (``--workload slurm-history|condor-history``)."""

    since: str | None = None
    until: str | None = None
    history_file: str | None = None
    nodes_file: str | None = None
    rule: tuple[str, ...] = ()
    config: Any = None


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
    executor: Executor = field(default_factory=LocalExecutor)
    points: tuple[Point, ...] = ((),)
    metric: str = "makespan_s"
    cores_per_node: int | None = None
    bound: bool = False
    history: HistoryAsk | None = None
    order: str = "coshare"
    trials: str = "off"
    probe_noise: float = 0.0
    mig: str | None = None

    @property
    def swept(self) -> bool:
        """Whether ``--sweep`` asked for parameter points."""
        return self.points != ((),)


@dataclass(frozen=True)
class Outcome:
    """What a workload's runner produced: the table, the JSON, what ``--plot`` draws
    (keyword arguments of :func:`coshare.sim.plot.save_figure`, or of
    :func:`coshare.sim.plot.save_sweep_figure` for a sweep; empty: nothing to draw), and the
    runs that failed (named; the rest is still shown)."""

    text: str
    payload: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    sweep: bool = False


def _paper(request: Request) -> Outcome:
    """A paper job set (``table1`` or a distribution), or all four (``synthetic``), at each
    point of the sweep."""
    policies = tuple(parse_policies(request.policies_text, PAPER_POLICIES))
    names = list(DISTRIBUTIONS) if request.workload == "synthetic" else [request.workload]
    count = request.jobs or (TABLE1_JOBS if request.workload == "table1" else SYNTHETIC_JOBS)
    size = request.nodes or PAPER_NODES
    if request.swept and (request.footprint or request.sizes):
        raise InputError(
            "--sweep runs the policies at each point: leave out --footprint and "
            "--sizes (or sweep nodes=...)"
        )
    compares: list[CompareSpec] = []
    sizes: list[SizesSpec] = []
    for point in request.points:
        setup = apply(point, request.setup)
        jobs, nodes = value_of(point, "jobs", count), value_of(point, "nodes", size)
        for s in request.seeds:
            for name in names:
                compares.append(
                    CompareSpec(
                        name, jobs, nodes, policies, s, setup, request.footprint, label(point)
                    )
                )
                if request.sizes:
                    sizes.append(
                        SizesSpec(name, tuple((n, jobs) for n in request.sizes), policies, s, setup)
                    )
    most = max(c.jobs for c in compares)
    check_work(task_count(compares, sizes, calibrations=False), most, f"--jobs {most}")
    with progress_bar(job_count(compares, sizes), request.workload) as advance:
        results = run_paper(compares, sizes, request.executor, advance)
    if request.swept:
        runs = [
            GridRun(c.workload, point, c.seed, summary)
            for c, comp in zip(compares, results.comparisons, strict=True)
            for point in [_point_of(request.points, c)]
            for summary in comp.runs.values()
        ]
        return _sweep_outcome(request, runs, results.failures)
    comparisons: dict[str, list[Comparison]] = {}
    for comp in results.comparisons:
        comparisons.setdefault(comp.workload, []).append(comp)
    sweeps: dict[str, list[Sweep]] = {}
    for spec, found in zip(sizes, results.sweeps, strict=True):
        if found is not None:
            sweeps.setdefault(spec.workload, []).append(found)
    return _paper_outcome(comparisons, sweeps, request.setup, results.failures)


def _point_of(points: Sequence[Point], spec: CompareSpec) -> Point:
    """The point a comparison was made for (its label names it)."""
    return next(p for p in points if label(p) == spec.label)


def _sweep_outcome(request: Request, runs: list[GridRun], failures: list[Failure]) -> Outcome:
    from coshare.sim.margin import margin_json, margin_rows
    from coshare.sim.report import margin_table

    keys = [k for k, _ in request.points[0]]
    margin = margin_rows(runs)  # empty unless random and knapsack both ran
    text = render(
        grid_table(
            runs,
            keys,
            request.metric,
            f"{request.workload}: {request.metric} against "
            f"{', '.join(keys)}, seeds {_seed_text(request.seeds)}",
        ),
        *([margin_table(margin, keys)] if margin else []),
    )
    payload: dict[str, Any] = {"sweep": grid_json(runs, keys, request.metric)}
    if margin:
        payload["margin"] = margin_json(margin)
    return Outcome(
        text, payload, {"runs": runs, "keys": keys, "metric": request.metric}, failures, sweep=True
    )


def _seed_text(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 else ", ".join(map(str, seeds))


def _pressure(request: Request) -> Outcome:
    """Fig. 10: ``--jobs`` normal-distribution jobs per node over cluster sizes."""
    if request.swept:
        raise InputError("--workload pressure is itself a sweep of cluster sizes: use --sizes")
    policies = tuple(parse_policies(request.policies_text, PAPER_POLICIES))
    per_node = request.jobs or PRESSURE_JOBS_PER_NODE
    grid = request.sizes or list(range(2, PAPER_NODES + 1))
    check_work(
        len(request.seeds) * len(grid) * len(policies),
        per_node * max(grid),
        f"--workload pressure --jobs {per_node} (per node)",
    )
    sizes = [
        SizesSpec("normal", tuple((n, n * per_node) for n in grid), policies, s, request.setup)
        for s in request.seeds
    ]
    with progress_bar(job_count([], sizes), "pressure") as advance:
        results = run_paper([], sizes, request.executor, advance)
    found = [s for s in results.sweeps if s is not None]
    return _paper_outcome(
        {}, {"pressure (normal)": found} if found else {}, request.setup, results.failures
    )


def _paper_outcome(
    comparisons: dict[str, list[Comparison]],
    sweeps: dict[str, list[Sweep]],
    setup: Setup,
    failures: list[Failure],
) -> Outcome:
    payload = {
        "comparisons": {k: comparison_json(v) for k, v in comparisons.items()},
        "sweeps": {k: sweep_json(v) for k, v in sweeps.items()},
    }
    return Outcome(
        _paper_text(comparisons, sweeps, setup),
        payload,
        {"comparisons": comparisons, "sweeps": sweeps},
        failures,
    )


def _fragmentation(request: Request) -> Outcome:
    """The Alibaba fragmentation benchmark."""
    if request.swept:
        raise InputError(
            "--sweep varies the paper workloads and traces; alibaba-2023 has --protocol and --batch"
        )
    policies = parse_policies(request.policies_text, ALL_POLICIES)
    runs, failures = _alibaba(
        policies,
        request.seeds,
        request.protocol,
        request.batch,
        request.data,
        request.executor,
        request.bound,
    )
    protocols = PROTOCOLS if request.protocol == "both" else (request.protocol,)
    text = render(*[frag_table(runs, p) for p in protocols if any(r.protocol == p for r in runs)])
    payload = {"protocols": list(protocols), "batch": request.batch, **frag_json(runs)}
    if request.mig is None:
        return Outcome(text, payload, {"fragmentation": runs}, failures)
    sliced, more = _alibaba(
        policies,
        request.seeds,
        request.protocol,
        request.batch,
        request.data,
        request.executor,
        mig=request.mig,
    )
    text += render(
        mig_caption(request.mig),
        *[
            frag_table(sliced, p, published=False)
            for p in protocols
            if any(r.protocol == p for r in sliced)
        ],
        mig_table(runs, sliced, request.mig),
    )
    payload["mig"] = {"mix": request.mig, **frag_json(sliced)}
    return Outcome(text, payload, {"fragmentation": runs}, failures + more)


def _trace(request: Request) -> Outcome:
    """Replay an SWF log (``trace:PATH``) as a stream, once per policy, seed and point."""
    policies = parse_policies(request.policies_text, ALL_POLICIES)
    path = Path(request.workload[len("trace:") :])
    machines = machines_path(path)
    if request.cores_per_node is not None and machines is not None:
        raise click.UsageError(
            f"--cores-per-node does not apply to {shorten(path.name)}: "
            f"{shorten(machines.name)} beside it gives the nodes"
        )
    cluster = cluster_of(path, request.nodes, request.cores_per_node)  # before any run
    tally = check_log(path)  # and a bad record, naming its line (one pass; memory bounded)
    warning = unmodelled_warning(tally, f"trace:{path.name}")
    if warning:  # once per replay, not per job or per run
        click.echo(f"coshare: warning: {warning}", err=True)
    bytes_per_job, memory_note = memory_reading_of(path, cluster)
    if memory_note:  # said before the replay: never a silent replay of jobs that cannot run
        click.echo(f"coshare: note: {memory_note}", err=True)
    notes = [n for n in (warning, memory_note) if n]
    tasks = []
    orders = _orders(request)
    for point in request.points:
        setup = apply(point, request.setup)
        nodes = value_of(point, "nodes", request.nodes)
        for s in request.seeds:
            tasks += [
                Task(
                    " ".join(
                        filter(
                            None,
                            [f"replay of {path.name}", name, f"seed {s}", label(point), order],
                        )
                    ),
                    replay,
                    (
                        path,
                        nodes,
                        name,
                        s,
                        replace(setup, order=order),
                        request.cores_per_node,
                        bytes_per_job,
                    ),
                )
                for order in orders
                for name in policies
            ]
    with progress_bar(len(tasks), f"replay {escape(path.name)}", unit="runs") as advance:
        results = request.executor.run(tasks, lambda _: advance(1))
    done: list[tuple[Task, Replay]] = [
        (t, r)
        for i, (t, r) in enumerate(zip(tasks, results.values, strict=True))
        if i not in results.failed
    ]
    for task, found in done:  # timings go to standard error: the outputs stay reproducible
        click.echo(
            f"coshare: {task.name}: {found.events} events in {found.seconds:.1f} s "
            f"({found.events_per_s:,.0f} events/s)",
            err=True,
        )
    if request.swept:
        runs = [
            GridRun(f"trace:{path.name}", point, s, r.summary)
            for (task, r), (point, s) in zip(
                done, _trace_keys(request, policies, tasks, results.failed), strict=True
            )
        ]
        outcome = _sweep_outcome(request, runs, results.failures)
        return replace(outcome, payload={**outcome.payload, "notes": notes})
    replays = _labelled([r for _, r in done], len(orders) > 1)
    summaries = [r.summary for r in replays]
    skipped = replays[0].skipped if replays else 0
    jobs = summaries[0].jobs if summaries else 0
    title = (
        f"SWF replay of {path.name}: {jobs} jobs ({skipped} records skipped), "
        f"{summaries[0].nodes if summaries else 0} nodes; jobs wider than one node run "
        "as gangs"
    )
    payload = {
        "trace": str(path),
        "nodes": summaries[0].nodes if summaries else 0,
        "skipped_records": skipped,
        "notes": notes,
        "runs": [{**summary_dict(r.summary), "events": r.events, **_user_dict(r)} for r in replays],
    }
    text = render(replay_table(summaries, title)) if summaries else ""
    return Outcome(text + _fairness_text(replays, most=10), payload, failures=results.failures)


def _trace_keys(
    request: Request, policies: Sequence[str], tasks: Sequence[Task], failed: dict[int, Failure]
) -> list[tuple[Point, int]]:
    """(point, seed) of each trace task that ran, in task order."""
    keys = [
        (point, s)
        for point in request.points
        for s in request.seeds
        for _ in _orders(request)
        for _ in policies
    ]
    return [k for i, k in enumerate(keys) if i not in failed]


def _poncos(request: Request) -> Outcome:
    """poncos section 8: Table 1's admission matrix and the two queues."""
    from coshare.sim.poncos_report import poncos_outcome

    text, payload = poncos_outcome(request.trials, request.probe_noise, request.seeds)
    return Outcome(text, payload)


def _wu_hong(request: Request) -> Outcome:
    """Wu & Hong's collocation experiment (section IV-C) and a P_M x P_B sweep."""
    from coshare.policies import Policy, PolicyOptions, make_policy
    from coshare.policies.collocate import CollocatePolicy
    from coshare.sim.collocation import SWEEP_HARVEST, SWEEP_MONITOR, run_wu_hong
    from coshare.sim.collocation_report import (
        CONVENTIONAL,
        runs_json,
        runs_table,
        split_table,
        sweep_table,
    )

    if request.jobs is not None or request.nodes is not None:
        raise InputError(
            "--workload wu-hong is the paper's setup (4 nodes, 32 GPU and 300 CPU "
            "jobs); --jobs and --nodes do not apply"
        )
    names = parse_policies(request.policies_text, ("exclusive", "collocate"))
    policies: dict[str, Policy] = {CONVENTIONAL: CollocatePolicy(max_harvest_cores=0)}
    policies.update({n: make_policy(n, PolicyOptions(seed=request.seeds[0])) for n in names})
    grid = [(p_m, p_b) for p_m in SWEEP_MONITOR for p_b in SWEEP_HARVEST]
    total = (len(policies) + len(grid)) * len(request.seeds)
    with progress_bar(total, "wu-hong", unit="runs") as advance:

        def one(policy: Any, params: tuple[float, int, float] | None = None) -> list[Any]:
            out = []
            for seed in request.seeds:
                out.append(
                    run_wu_hong(
                        policy, seed, split_params=params, cycle_delay_s=request.setup.cycle_delay_s
                    )
                )
                advance(1)
            return out

        groups = {name: one(policy) for name, policy in policies.items()}
        points = {
            (p_m, p_b): one(CollocatePolicy(p_m, p_b), (p_m, p_b, 300.0)) for p_m, p_b in grid
        }
    seeds = ", ".join(map(str, request.seeds))
    split_of = groups.get("collocate", groups[CONVENTIONAL])
    text = render(
        runs_table(
            groups,
            f"wu-hong: 4 nodes x 12 cores x 3 GPUs, 32 GPU + 300 CPU jobs, seeds "
            f"{seeds} (collocate: P_M 1/3, P_B 9, 300 MB/s; conventional: "
            "collocate lending nothing, the paper's Torque/Maui)",
        ),
        split_table(split_of, "wu-hong: the GPU jobs' under-used cores (P_M 1/3, P_B 9)"),
        sweep_table(points, groups[CONVENTIONAL], f"wu-hong: P_M x P_B, seeds {seeds}"),
    )
    sweep_rows = [
        {"monitor_fraction": p_m, "max_harvest_cores": p_b, "runs": runs_json(runs)}
        for (p_m, p_b), runs in points.items()
    ]
    payload = {
        "runs": {name: runs_json(runs) for name, runs in groups.items()},
        "sweep": sweep_rows,
    }
    return Outcome(text, payload)


def _picaso(request: Request) -> Outcome:
    """The distributed allocation paper: waits and message counts of active
    cancellation against the sequencer on its tiles and scenarios (``picaso`` runs all)."""
    from coshare.sim.picaso_report import picaso_outcome

    if request.jobs is not None or request.nodes is not None or request.policies_text:
        raise InputError(
            f"--workload {request.workload} is the paper's setup (tiles of "
            "domain managers, both policies); --jobs, --nodes and --policies "
            "do not apply"
        )
    if request.workload.startswith("picaso-worst") or request.workload == "picaso":
        check_work(len(request.seeds) * 49 * 2, 49, f"--seeds {len(request.seeds)}")
    elif request.workload == "picaso-timing":  # Fig. 9 once per assumption
        check_work(len(request.seeds) * 49 * 2 * 9, 49, f"--seeds {len(request.seeds)}")
    part = request.workload.removeprefix("picaso-") if request.workload != "picaso" else "all"
    text, payload = picaso_outcome(part, request.seeds)
    return Outcome(text, payload)


def _sns(request: Request) -> Outcome:
    """Spread-n-Share section 6.2 (36 sequences of 20 jobs per seed: exclusive = CE, cs, sns),
    or with ``--sweep scaling_share=...`` section 6.3."""
    from coshare.sim.sns import PAPER_NODES, SEQUENCES
    from coshare.sim.sns_report import paper_outcome, ratio_outcome

    if request.jobs is not None:
        raise InputError(
            "--workload sns is the paper's job mixes (20 jobs per sequence, 30 in "
            "the scaling-share sweep); --jobs does not apply"
        )
    nodes = request.nodes or PAPER_NODES
    age = request.setup.age_limit_s if request.setup.age_limit_s is not None else 3600.0
    delay = request.setup.cycle_delay_s
    if request.swept:
        if any(value_of(p, "scaling_share", None) is None for p in request.points):
            raise InputError(
                "--workload sns: a --sweep needs scaling_share=... (section 6.3); "
                "sns_default_alpha and sns_ways_weight may be swept with it"
            )
        shares = [float(value_of(p, "scaling_share", 0.0)) for p in request.points]
        params = [{k: v for k, v in p if k != "scaling_share"} for p in request.points]
        with progress_bar(len(shares) * len(request.seeds), "sns sweep", unit="runs") as advance:
            text, payload = ratio_outcome(
                shares,
                request.seeds,
                nodes=nodes,
                age_limit_s=age,
                cycle_delay_s=delay,
                params=params,
                advance=advance,
            )
        return Outcome(text, payload)
    from coshare.sim.sns_learn import NAME, learn_outcome
    from coshare.sim.sns_report import load_data

    asked = [p.strip() for p in (request.policies_text or "").split(",")]
    learn = NAME in asked  # sns with profiles learned from scratch, beside the given ones
    rest = ",".join(p for p in asked if p != NAME) or (None if not learn else "exclusive,sns")
    policies = parse_policies(rest, ("exclusive", "cs", "sns"))
    with progress_bar(SEQUENCES * len(request.seeds), "sns", unit="sequences") as advance:
        text, payload = paper_outcome(
            policies,
            request.seeds,
            nodes=nodes,
            age_limit_s=age,
            cycle_delay_s=delay,
            advance=advance,
        )
    if learn:
        with progress_bar(SEQUENCES * len(request.seeds), NAME, unit="sequences") as advance:
            profiles, cluster, _ = load_data()
            more, payload[NAME] = learn_outcome(
                profiles,
                cluster,
                request.seeds,
                nodes=nodes,
                age_limit_s=age,
                cycle_delay_s=delay,
                advance=advance,
            )
        text += more
    return Outcome(text, payload)


#: Each scheduler's history reader (``module:function``, loaded when asked: the adapters'
#: own code, as ``coshare condor`` and ``coshare slurm`` are).
HISTORY_READERS = {
    "slurm-history": ("slurm_addon.history:read_history", "slurm"),
    "condor-history": ("condor_addon.history:read_history", "condor"),
}


def _history(request: Request) -> Outcome:
    """Replay the cluster's own finished jobs, read from its scheduler (live or saved), once
    per policy and seed."""
    from coshare.cli.extras import load
    from coshare.sim.history import parse_rule
    from coshare.sim.replay import replay_jobs

    ask = request.history or HistoryAsk()
    target, scheduler = HISTORY_READERS[request.workload]
    reader = load(target, f"coshare simulate --workload {request.workload}")
    found, notes = reader(
        ask.config,
        since=ask.since,
        until=ask.until,
        history_file=ask.history_file,
        nodes_file=ask.nodes_file,
        rule=parse_rule(ask.rule),
    )
    summary = found.summary()
    for problem in found.problems:  # one line each, before the replay: the rest still runs
        click.echo(f"coshare: note: {problem}", err=True)
    for note in notes:
        click.echo(f"coshare: note: {note}", err=True)
    if found.ruled:
        click.echo(
            f"coshare: note: {found.ruled} jobs used devices without declaring their "
            "device memory: the --device-memory rule gave it (default: the whole "
            "device)",
            err=True,
        )
    policies = parse_policies(request.policies_text, ALL_POLICIES)
    cluster = tuple(found.nodes)
    orders = _orders(request)
    tasks = [
        Task(
            f"{request.workload} {name} seed {s} {order}",
            replay_jobs,
            (found.jobs, cluster, name, s, replace(request.setup, order=order)),
        )
        for s in request.seeds
        for order in orders
        for name in policies
    ]
    with progress_bar(len(tasks), request.workload, unit="runs") as advance:
        results = request.executor.run(tasks, lambda _: advance(1))
    ran = [r for i, r in enumerate(results.values) if i not in results.failed]
    replays = _labelled(ran, len(orders) > 1)
    summaries = [r.summary for r in replays]
    title = (
        f"{scheduler} history: {len(found.jobs)} jobs of {len(summary['users'])} users "
        f"({len(found.problems)} records left out, {found.never_ran} never ran), "
        f"{len(cluster)} nodes"
    )
    payload = {
        "history": summary,
        "nodes": len(cluster),
        "notes": list(notes),
        "jobs": found.records(),
        "runs": [{**summary_dict(r.summary), "events": r.events, **_user_dict(r)} for r in replays],
    }
    text = render(replay_table(summaries, title)) if summaries else ""
    text += _fairness_text(replays)
    return Outcome(text, payload, failures=results.failures)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _orders(request: Request) -> list[str]:
    """The job orders a replay runs (``--order``; ``both``: coshare's, then the scheduler's)."""
    return ["coshare", "scheduler"] if request.order == "both" else [request.order]


def _labelled(replays: list[Replay], both: bool) -> list[Replay]:
    """With both orders, each run's policy named with the order it ran under."""
    if not both:
        return replays
    return [
        replace(r, summary=replace(r.summary, policy=f"{r.summary.policy} ({r.order} order)"))
        for r in replays
    ]


def _user_dict(replay: Replay) -> dict[str, Any]:
    """Each user's figures of a run and Jain's index over them, for the JSON."""
    if not replay.users:
        return {}
    return {
        "fairness_jain": _finite(fairness(replay.users)),
        "users": {u: f.as_dict() for u, f in replay.users.items()},
    }


def _fairness_text(replays: Sequence[Replay], most: int | None = None) -> str:
    """How evenly each run treats the users (Jain's index), and the users' mean waits (the
    ``most`` users with the most jobs, when given; the JSON has every user)."""
    runs = [r for r in replays if r.users]
    if not runs:
        return ""
    text = (
        "\nFairness over users (Jain's index of their mean bounded slowdown; 1 is equal): "
        + ", ".join(f"{r.summary.policy} {fairness(r.users):.3f}" for r in runs)
        + "\n"
    )
    users = {u: f.jobs for r in runs for u, f in r.users.items()}
    shown = sorted(users, key=lambda u: (-users[u], u))[:most] if most else sorted(users)
    title = "" if most is None or len(users) <= most else f" ({len(shown)} of {len(users)} users)"
    table = user_table(
        [(r.summary.policy, {u: r.users[u] for u in shown if u in r.users}) for r in runs]
    )
    table.title = f"{table.title}{title}"
    return text + render(table)


#: Workloads by name: a new workload is one entry (``trace`` stands for ``trace:PATH``).
WORKLOADS: dict[str, Callable[[Request], Outcome]] = {
    "table1": _paper,
    **dict.fromkeys(DISTRIBUTIONS, _paper),
    "synthetic": _paper,
    "pressure": _pressure,
    "alibaba-2023": _fragmentation,
    "trace": _trace,
    "poncos": _poncos,
    "wu-hong": _wu_hong,
    "picaso": _picaso,
    **{f"picaso-{part}": _picaso for part in PICASO_PARTS},
    "sns": _sns,
    **dict.fromkeys(HISTORY_READERS, _history),
}
WORKLOAD_NAMES = tuple(name if name != "trace" else "trace:PATH" for name in WORKLOADS)


def _paper_text(
    comparisons: dict[str, list[Comparison]], sweeps: dict[str, list[Sweep]], setup: Setup
) -> str:
    items = []
    for name, comps in comparisons.items():
        first = comps[0]
        seeds = ", ".join(str(c.seed) for c in comps)
        paper_fp = TABLE_II_FOOTPRINT if name == "table1" else TABLE_III_FOOTPRINT.get(name)
        paper_set = (name == "table1" and first.jobs == TABLE1_JOBS) or (
            name in DISTRIBUTIONS and first.jobs == SYNTHETIC_JOBS
        )
        paper_set = paper_set and first.nodes == PAPER_NODES
        table2 = name == "table1" and paper_set
        title = (
            f"{name}: {first.jobs} jobs on {first.nodes} nodes, seeds {seeds} (threads "
            f"{setup.threads}, cycle delay {setup.cycle_delay_s:g} s, offload share "
            f"{_shares(comps)})"
        )
        items.append(
            comparison_table(
                comps,
                title,
                TABLE_II_MAKESPAN_S if table2 else None,
                TABLE_II_REDUCTION if table2 else None,
                paper_fp if paper_set and any(c.footprints for c in comps) else None,
            )
        )
    for name, group in sweeps.items():
        items.append(
            sweep_table(
                group,
                f"{name}: makespan against cluster size, seeds "
                f"{', '.join(str(s.seed) for s in group)}",
            )
        )
    return render(*items)


def _alibaba(
    policies: Sequence[str],
    seeds: Sequence[int],
    protocol: str,
    batch: int,
    data: Path | None,
    executor: Executor,
    bound: bool = False,
    mig: str | None = None,
) -> tuple[list[FragRun], list[Failure]]:
    """The benchmark's runs; ``mig``: on the trace's GPUs sliced by that MIG mix
    (:func:`coshare.sim.mig.mig_nodes`; no bound: it is of whole GPUs)."""
    trace = read_alibaba(data_dir(data) / ALIBABA_DIR)
    pods = tuple(p.job for p in trace.pods)
    protocols = PROTOCOLS if protocol == "both" else (protocol,)
    cluster = trace.nodes if mig is None else mig_nodes(trace.nodes, mig)
    label = "alibaba-2023" if mig is None else f"alibaba-2023 mig:{mig}"
    bound = bound and mig is None
    nodes, shared_pods = executor.share(cluster), executor.share(pods)
    tasks = [
        Task(
            f"{label} {proto} {name} seed {s}",
            run_benchmark,
            (nodes, shared_pods, name, proto, s, batch),
        )
        for proto in protocols
        for name in policies
        for s in seeds
    ]
    keys = [(proto, s) for proto in protocols for s in seeds] if bound else []
    tasks += [
        Task(
            f"{label} {proto} bound seed {s}",
            benchmark_bound,
            (nodes, shared_pods, proto, s, batch),
        )
        for proto, s in keys
    ]
    with progress_bar(len(tasks), label, unit="runs") as advance:
        results = executor.run(tasks, lambda _: advance(1))
    count = len(tasks) - len(keys)
    floors = {
        key: results.values[count + i]
        for i, key in enumerate(keys)
        if count + i not in results.failed
    }
    runs = [
        replace(r, bound=floors.get((r.protocol, r.seed), {}))
        for i, r in enumerate(results.values[:count])
        if i not in results.failed
    ]
    return runs, results.failures
