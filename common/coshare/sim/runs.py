"""The simulator's independent runs as tasks a worker can execute anywhere.

Every figure of ``coshare simulate`` comes from runs that depend on nothing but their
arguments (a workload, a policy, a seed, the parameters of a point): a calibration per seed,
a policy's run, a footprint search. Each is a module-level function here, so a worker process
or a Dask worker imports it by name and returns a small result (a summary, not the run's
per-job records). :mod:`coshare.sim.work` cuts a command into these and puts the results back
together exactly as :func:`coshare.sim.experiments.compare` and ``sweep`` do in one process
(a test holds them equal).

Pure: no I/O (a trace replay's reading is handed in as a function by the caller).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from coshare.sim.engine import simulate
from coshare.sim.experiments import Setup, draws_for, paper_calibration
from coshare.sim.footprint import Footprint, search_footprint
from coshare.sim.jobs import SimJob
from coshare.sim.metrics import RunSummary, summarize
from coshare.sim.workloads import paper_cluster, realize

Done = Callable[[int], None]
"""Called with the index of each task as it finishes (for a progress bar)."""


@dataclass(frozen=True)
class Task:
    """One independent run.

    Attributes:
        name: how messages name it (``table1 seed 3 knapsack jobs=500``).
        fn: a module-level function (workers import it by name).
        args: its arguments; values from :meth:`Executor.share` may stand among them.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Failure:
    """A task that produced no result.

    Attributes:
        task: the task's name.
        reason: why (its exception, or how often its worker died).
    """

    task: str
    reason: str


@dataclass
class Results:
    """What a stage produced: per task its value (``None`` where it failed), and per failed
    task (by index) its :class:`Failure`."""

    values: list[Any]
    failed: dict[int, Failure]

    @property
    def failures(self) -> list[Failure]:
        """The failures in the tasks' order."""
        return [self.failed[i] for i in sorted(self.failed)]


class Executor(Protocol):
    """Runs stages of tasks (implementations: :mod:`coshare.sim.executor`).

    Contract: every task runs, each at most ``1 + retries`` times when its worker dies; a task
    that raises fails at once. The values come back in the tasks' order, whatever order they
    finished in, so where they ran never shows in the results.
    """

    def share(self, value: Any) -> Any:
        """``value`` as an argument of many tasks (sent to each worker once)."""
        ...

    def run(self, tasks: Sequence[Task], done: Done | None = None) -> Results:
        """Run one stage."""
        ...


@dataclass(frozen=True)
class Share:
    """A seed's calibration: the offload share, and the exclusive run it came from.

    Attributes:
        offload_share: the calibrated share.
        baseline: exclusive on the paper's own setting (1000 Table I jobs, 8 nodes) at it.
    """

    offload_share: float
    baseline: RunSummary


def calibration(seed: int, setup: Setup) -> Share:
    """The paper calibration of ``seed`` (:func:`coshare.sim.experiments.paper_calibration`)."""
    found = paper_calibration(seed, setup)
    return Share(found.offload_share, summarize(found.baseline))


def _paper_jobs(workload: str, jobs: int, seed: int, share: float) -> tuple[SimJob, ...]:
    return realize(draws_for(workload, jobs, seed), share)


def _makespan(
    workload: str, jobs: tuple[SimJob, ...], nodes: int, policy: str, seed: int, setup: Setup
) -> Any:
    return simulate(
        paper_cluster(nodes),
        jobs,
        setup.policy(policy, seed),
        options=setup.options(),
        model=setup.model(),
    )


def policy_run(
    workload: str, jobs: int, nodes: int, policy: str, seed: int, setup: Setup, share: float
) -> RunSummary:
    """One policy on a paper job set of ``jobs`` jobs on ``nodes`` paper nodes."""
    sim_jobs = _paper_jobs(workload, jobs, seed, share)
    return summarize(_makespan(workload, sim_jobs, nodes, policy, seed, setup))


def footprint_run(
    workload: str,
    jobs: int,
    nodes: int,
    policy: str,
    seed: int,
    setup: Setup,
    share: float,
    makespan_s: float,
    target_s: float,
) -> Footprint:
    """The footprint search of ``policy`` (whose makespan on ``nodes`` is ``makespan_s``)
    against the baseline's ``target_s``, as :func:`coshare.sim.experiments.compare` does."""
    sim_jobs = _paper_jobs(workload, jobs, seed, share)
    known = {nodes: makespan_s}

    def at(n: int) -> float:
        if n not in known:
            known[n] = _makespan(workload, sim_jobs, n, policy, seed, setup).makespan_s
        return known[n]

    return search_footprint(at, target_s, nodes)
