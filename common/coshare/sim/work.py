"""A paper-workload command as stages of independent runs, and its results put back together.

``coshare simulate`` on the paper's job sets asks for comparisons (every policy on one job set
and cluster, optionally with footprints: Table II, Fig. 8, Table III) and cluster-size sweeps
(Figs. 9 and 10), per seed, and, with ``--sweep``, per parameter point. This module cuts them
into the runs of :mod:`coshare.sim.runs` in three stages, each handed whole to an executor:

1. the calibration of each seed (and engine setup) that needs one;
2. every policy's run, on the compared cluster and on every swept size;
3. every footprint search (it starts from the stage-2 makespans of its policy and baseline).

and builds :class:`~coshare.sim.experiments.Comparison` and
:class:`~coshare.sim.experiments.Sweep` objects equal to what
:func:`~coshare.sim.experiments.compare` and :func:`~coshare.sim.experiments.sweep` return in
one process (``tests/unit/test_sim_work.py`` holds them equal). A failed run leaves its
comparison without that policy (and what depends on it unrun, named as such); everything else
is still returned. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coshare.sim.engine import SimOptions
from coshare.sim.experiments import (
    BASELINE,
    PAPER_NODES,
    TABLE1_JOBS,
    Comparison,
    Setup,
    Sweep,
)
from coshare.sim.footprint import Footprint
from coshare.sim.metrics import RunSummary
from coshare.sim.runs import (
    Done,
    Executor,
    Failure,
    Share,
    Task,
    calibration,
    footprint_run,
    policy_run,
)


@dataclass(frozen=True)
class CompareSpec:
    """Policies compared on one paper job set (:func:`coshare.sim.experiments.compare`).

    Attributes:
        workload: ``table1`` or a distribution.
        jobs: jobs in the set.
        nodes: the cluster size.
        policies: policy names.
        seed: the seed.
        setup: policy and engine options.
        footprint: also search each non-baseline policy's footprint.
        label: what names this point in messages (``jobs=500``; empty: nothing).
    """

    workload: str
    jobs: int
    nodes: int
    policies: tuple[str, ...]
    seed: int
    setup: Setup
    footprint: bool = False
    label: str = ""


@dataclass(frozen=True)
class SizesSpec:
    """Makespan against cluster size (:func:`coshare.sim.experiments.sweep`).

    Attributes:
        workload: ``table1`` or a distribution.
        counts: per cluster size, the jobs in its set.
        policies: policy names.
        seed: the seed.
        setup: policy and engine options.
    """

    workload: str
    counts: tuple[tuple[int, int], ...]
    policies: tuple[str, ...]
    seed: int
    setup: Setup


@dataclass
class PaperResults:
    """What the stages produced, aligned with the specs asked for.

    Attributes:
        comparisons: per :class:`CompareSpec`, its comparison (only the policies that ran).
        sweeps: per :class:`SizesSpec`, its sweep (``None`` unless every run of it ran).
        failures: every run that failed or could not run, named.
    """

    comparisons: list[Comparison]
    sweeps: list[Sweep | None]
    failures: list[Failure] = field(default_factory=list)


def _cal_key(seed: int, setup: Setup) -> tuple[int, SimOptions]:
    # The calibration depends on the seed and the engine's options only.
    return seed, setup.options()


def _name(*parts: object) -> str:
    return " ".join(str(p) for p in parts if p != "")


def task_count(
    compares: Sequence[CompareSpec], sizes: Sequence[SizesSpec], calibrations: bool = True
) -> int:
    """How many tasks the three stages run at most (for a progress bar); without the
    calibration runs (``calibrations`` False), the runs of ``--jobs`` jobs each, which is
    what the work bound of ``coshare simulate`` counts (a calibration runs the fixed
    Table I set)."""
    runs = sum(len(_run_names(c)) + _footprints(c) for c in compares)
    runs += sum(len(s.counts) * len(s.policies) for s in sizes)
    return (len(_calibration_keys(compares, sizes)) if calibrations else 0) + runs


def _run_names(c: CompareSpec) -> list[str]:
    """The policies a comparison runs: its own, and the baseline its footprints need."""
    names = list(dict.fromkeys(c.policies))
    if c.footprint and BASELINE not in names:
        names.append(BASELINE)
    return names


def _footprints(c: CompareSpec) -> int:
    """How many footprint searches a comparison runs (one per policy but the baseline)."""
    return sum(1 for n in dict.fromkeys(c.policies) if n != BASELINE) if c.footprint else 0


def _on_paper_setup(c: CompareSpec) -> bool:
    """Whether a comparison runs the calibration's own set (Table I's jobs on the paper's
    nodes), so that a calibrated one reuses the calibration's baseline run."""
    return c.workload == "table1" and c.jobs == TABLE1_JOBS and c.nodes == PAPER_NODES


def _calibration_keys(
    compares: Sequence[CompareSpec], sizes: Sequence[SizesSpec]
) -> set[tuple[int, SimOptions]]:
    """One calibration per (seed, engine options) of the specs that need one."""
    specs: list[CompareSpec | SizesSpec] = [*compares, *sizes]
    return {_cal_key(c.seed, c.setup) for c in specs if c.setup.offload_share is None}


def run_paper(
    compares: Sequence[CompareSpec],
    sizes: Sequence[SizesSpec],
    executor: Executor,
    done: Done | None = None,
) -> PaperResults:
    """Run every comparison and size sweep in three stages on ``executor``.

    ``done`` is called as each run ends with the number of jobs it simulated (a footprint
    search counts its jobs once), so a progress bar counts simulated jobs; the
    total is :func:`job_count`.
    """
    failures: list[Failure] = []
    shares = _calibrations(compares, sizes, executor, done, failures)

    def share_of(seed: int, setup: Setup) -> Share | float | None:
        if setup.offload_share is not None:
            return setup.offload_share
        return shares.get(_cal_key(seed, setup))

    # Stage 2: runs. Each entry: (spec index, policy, size) -> task index.
    tasks: list[Task] = []
    where: dict[tuple[str, int, str, int], int] = {}
    reused: dict[int, RunSummary] = {}
    for k, c in enumerate(compares):
        share = share_of(c.seed, c.setup)
        names = _run_names(c)
        if share is None:
            failures += [
                Failure(
                    _name(c.workload, "seed", c.seed, n, c.label),
                    f"not run: calibration seed {c.seed} failed",
                )
                for n in names
            ]
            continue
        offload = share if isinstance(share, float) else share.offload_share
        same = isinstance(share, Share) and _on_paper_setup(c)
        for name in names:
            if name == BASELINE and same and isinstance(share, Share):
                reused[k] = share.baseline  # compare() reuses the calibration's MC run
                continue
            where[("c", k, name, c.nodes)] = len(tasks)
            tasks.append(
                Task(
                    _name(c.workload, "seed", c.seed, name, "on", c.nodes, "nodes", c.label),
                    policy_run,
                    (c.workload, c.jobs, c.nodes, name, c.seed, c.setup, offload),
                )
            )
    for k, s in enumerate(sizes):
        share = share_of(s.seed, s.setup)
        if share is None:
            failures.append(
                Failure(
                    _name(s.workload, "seed", s.seed, "sizes"),
                    f"not run: calibration seed {s.seed} failed",
                )
            )
            continue
        offload = share if isinstance(share, float) else share.offload_share
        for n, count in s.counts:
            for name in s.policies:
                where[("s", k, name, n)] = len(tasks)
                tasks.append(
                    Task(
                        _name(s.workload, "seed", s.seed, name, "on", n, "nodes"),
                        policy_run,
                        (s.workload, count, n, name, s.seed, s.setup, offload),
                    )
                )
    runs = executor.run(tasks, _by_jobs(tasks, done))
    failures += runs.failures

    def got(key: tuple[str, int, str, int]) -> RunSummary | None:
        if key[0] == "c" and key[2] == BASELINE and key[1] in reused:
            return reused[key[1]]
        index = where.get(key)
        if index is None or index in runs.failed:
            return None
        value: RunSummary = runs.values[index]
        return value

    # Stage 3: footprints.
    fp_tasks: list[Task] = []
    fp_where: dict[tuple[int, str], int] = {}
    for k, c in enumerate(compares):
        if not c.footprint or share_of(c.seed, c.setup) is None:
            continue
        base = got(("c", k, BASELINE, c.nodes))
        offload = _offload(share_of(c.seed, c.setup))
        for name in dict.fromkeys(c.policies):
            if name == BASELINE:
                continue
            mine = got(("c", k, name, c.nodes))
            task = _name(c.workload, "seed", c.seed, name, "footprint", c.label)
            if base is None or mine is None:
                failures.append(Failure(task, "not run: its run or the baseline's failed"))
                continue
            fp_where[(k, name)] = len(fp_tasks)
            fp_tasks.append(
                Task(
                    task,
                    footprint_run,
                    (
                        c.workload,
                        c.jobs,
                        c.nodes,
                        name,
                        c.seed,
                        c.setup,
                        offload,
                        mine.makespan_s,
                        base.makespan_s,
                    ),
                )
            )
    fps = executor.run(fp_tasks, _by_jobs(fp_tasks, done)) if fp_tasks else None
    if fps is not None:
        failures += fps.failures

    comparisons = []
    for k, c in enumerate(compares):
        found = {
            n: r for n in dict.fromkeys(c.policies) if (r := got(("c", k, n, c.nodes))) is not None
        }
        footprints: dict[str, Footprint] = {}
        for name in dict.fromkeys(c.policies):
            index = fp_where.get((k, name))
            if fps is not None and index is not None and index not in fps.failed:
                footprints[name] = fps.values[index]
        comparisons.append(
            Comparison(
                c.workload,
                c.seed,
                c.nodes,
                c.jobs,
                _offload(share_of(c.seed, c.setup)),
                found,
                footprints,
            )
        )
    sweeps: list[Sweep | None] = []
    for k, s in enumerate(sizes):
        cells = {(name, n): got(("s", k, name, n)) for n, _ in s.counts for name in s.policies}
        complete = {key: r for key, r in cells.items() if r is not None}
        share = share_of(s.seed, s.setup)
        sweeps.append(
            Sweep(s.workload, s.seed, _offload(share), dict(s.counts), complete)
            if share is not None and len(complete) == len(cells)
            else None
        )
    return PaperResults(comparisons, sweeps, failures)


def _by_jobs(tasks: Sequence[Task], done: Done | None) -> Done | None:
    """``done`` called with the jobs of the task that ended (its second argument: the
    ``jobs`` of :func:`policy_run` and :func:`footprint_run`)."""
    if done is None:
        return None
    counts = [int(t.args[1]) for t in tasks]
    return lambda i: done(counts[i])


def job_count(compares: Sequence[CompareSpec], sizes: Sequence[SizesSpec]) -> int:
    """The jobs :func:`run_paper` reports through ``done`` when every run ends (the total of
    a progress bar that counts simulated jobs)."""
    total = len(_calibration_keys(compares, sizes)) * TABLE1_JOBS
    for c in compares:
        names = _run_names(c)
        reused = c.setup.offload_share is None and _on_paper_setup(c) and BASELINE in names
        total += c.jobs * (len(names) - int(reused) + _footprints(c))
    total += sum(count * len(s.policies) for s in sizes for _, count in s.counts)
    return total


def _offload(share: Share | float | None) -> float:
    if share is None:
        return float("nan")
    return share if isinstance(share, float) else share.offload_share


def _calibrations(
    compares: Sequence[CompareSpec],
    sizes: Sequence[SizesSpec],
    executor: Executor,
    done: Done | None,
    failures: list[Failure],
) -> dict[tuple[int, SimOptions], Share]:
    """Stage 1: one calibration per (seed, engine options) that needs one."""
    wanted: dict[tuple[int, SimOptions], Setup] = {}
    specs: list[CompareSpec | SizesSpec] = [*compares, *sizes]
    for spec in specs:
        if spec.setup.offload_share is None:
            wanted.setdefault(_cal_key(spec.seed, spec.setup), spec.setup)
    if not wanted:
        return {}
    keys = list(wanted)
    tasks = [
        Task(f"calibration seed {seed}", calibration, (seed, wanted[key]))
        for key in keys
        for seed in [key[0]]
    ]
    results = executor.run(tasks, None if done is None else lambda _: done(TABLE1_JOBS))
    failures += results.failures
    out: dict[tuple[int, SimOptions], Share] = {}
    for i, key in enumerate(keys):
        if i not in results.failed:
            value: Any = results.values[i]
            out[key] = value
    return out
