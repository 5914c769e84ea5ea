"""The paper's experiments (section V) as functions: compare policies, footprint, cluster sweeps.

- :func:`compare`: every policy on one job set and cluster, with the footprint search of the
  sharing policies against the exclusive baseline (Table II on the Table I set; Fig. 8 and
  Table III on the synthetic distributions).
- :func:`sweep`: makespan against cluster size (Fig. 9 with a fixed job set, Fig. 10 with 200
  jobs per node).

Every run gets the policy from :func:`coshare.policies.make_policy`, the same factory the
live cycle uses. Pure: no I/O, no clock; ``step`` is called after each simulation so a caller
can show progress.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coshare.model import ThreadMode
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.base import Policy
from coshare.sim.calibrate import PAPER_MC_UTILIZATION, Calibration, calibrate
from coshare.sim.engine import SimOptions, SimResult, simulate
from coshare.sim.footprint import Footprint, search_footprint
from coshare.sim.metrics import RunSummary, summarize
from coshare.sim.workloads import (
    JOB_SETS,
    JobDraw,
    paper_cluster,
    realize,
    table1_draws,
)

#: The workloads of the paper, by command-line name.
PAPER_WORKLOADS = tuple(JOB_SETS)
#: The paper's job counts: Table I set, synthetic sets, jobs per node of Fig. 10.
TABLE1_JOBS = 1000
SYNTHETIC_JOBS = 400
PRESSURE_JOBS_PER_NODE = 200
#: The paper's cluster size and the baseline policy.
PAPER_NODES = 8
BASELINE = "exclusive"

Step = Callable[[str], None]
"""Called with a short description after each simulation."""


@dataclass(frozen=True)
class Setup:
    """How policies are built and the engine runs (the simulate command's flags).

    Attributes:
        threads: thread mode of the sharing policies; ``soft`` lets the node's offload gate
            serialize offloads (COSMIC, present in the paper's MCC and MCCK).
        age_limit_s: knapsack aging; ``None`` as in the paper.
        cycle_delay_s: from an arrival or job end to the planning cycle.
        memory_grid_mib: the knapsack's memory step.
        verify: check every plan with coshare.cycle.verify.
        offload_share: use this offload share instead of calibrating one.
        policy_params: further keyword options of the policies (``PolicyOptions``), as
            ``(name, value)`` pairs: what ``--sweep`` varies beyond the fields above.
        order: ``coshare`` (the jobs' own priority, then submit time) or ``scheduler`` (each
            user's fair-share factor: :mod:`coshare.ledger.fairshare`).
    """

    threads: ThreadMode = "soft"
    age_limit_s: float | None = None
    cycle_delay_s: float = 1.0
    memory_grid_mib: int = 64
    verify: bool = False
    offload_share: float | None = None
    policy_params: tuple[tuple[str, Any], ...] = ()
    order: str = "coshare"

    def policy(self, name: str, seed: int) -> Policy:
        """The policy ``name`` for a run with ``seed`` (the random policy's seed)."""
        return make_policy(
            name,
            PolicyOptions(
                threads=self.threads,
                seed=seed,
                age_limit_s=self.age_limit_s,
                memory_grid_mib=self.memory_grid_mib,
                **dict(self.policy_params),
            ),
        )

    def options(self) -> SimOptions:
        """The engine's options."""
        return SimOptions(
            cycle_delay_s=self.cycle_delay_s,
            verify=self.verify,
            strict_threads=self.threads == "strict",
            order=self.order,
        )


def draws_for(workload: str, jobs: int, seed: int) -> tuple[JobDraw, ...]:
    """The job set of a paper workload (``table1`` or a synthetic distribution).

    Raises:
        ValueError: for an unknown workload.
    """
    build = JOB_SETS.get(workload)
    if build is None:
        raise ValueError(f"unknown workload {workload!r} (known: {', '.join(PAPER_WORKLOADS)})")
    return build(jobs, seed)


def paper_calibration(seed: int, setup: Setup) -> Calibration:
    """The offload share for ``seed``: MC at 50% on the paper's own Table I setting
    (1000 jobs, 8 nodes), whatever set is simulated afterwards."""
    return calibrate(
        paper_cluster(PAPER_NODES),
        table1_draws(TABLE1_JOBS, seed),
        PAPER_MC_UTILIZATION,
        setup.options(),
    )


@dataclass(frozen=True)
class Comparison:
    """Policies compared on one job set.

    Attributes:
        workload: the workload's name.
        seed: its seed.
        nodes: the cluster size.
        jobs: the job count.
        offload_share: the offload share the jobs ran with.
        runs: per policy, its summary on ``nodes``.
        footprints: per sharing policy, its footprint against the baseline.
    """

    workload: str
    seed: int
    nodes: int
    jobs: int
    offload_share: float
    runs: dict[str, RunSummary]
    footprints: dict[str, Footprint] = field(default_factory=dict)


def compare(
    workload: str,
    jobs: int,
    nodes: int,
    policies: Sequence[str],
    seed: int,
    setup: Setup,
    footprint: bool = False,
    step: Step | None = None,
    calibration: Calibration | None = None,
) -> Comparison:
    """Run ``policies`` on a paper workload; optionally search each one's footprint.

    Args:
        workload: ``table1`` or a synthetic distribution.
        jobs: jobs in the set.
        nodes: the cluster size (paper nodes, one Xeon Phi each).
        policies: policy names.
        seed: seeds the job set and the random policy.
        setup: policy and engine options.
        footprint: also find, per policy other than the baseline, the smallest cluster that
            matches the baseline's makespan on ``nodes``.
        step: progress callback.
        calibration: a calibration to reuse (else one is made for ``seed``).
    """
    draws = draws_for(workload, jobs, seed)
    share, baseline = _share(workload, jobs, nodes, seed, setup, calibration, step)
    sim_jobs = realize(draws, share)

    def run(name: str, size: int) -> SimResult:
        if name == BASELINE and size == nodes and baseline is not None:
            return baseline
        result = simulate(
            paper_cluster(size), sim_jobs, setup.policy(name, seed), options=setup.options()
        )
        if step is not None:
            step(f"{workload} seed {seed}: {name} on {size} nodes")
        return result

    results = {name: run(name, nodes) for name in dict.fromkeys([*policies])}
    footprints: dict[str, Footprint] = {}
    if footprint:
        base = results.get(BASELINE) or run(BASELINE, nodes)
        for name, result in results.items():
            if name == BASELINE:
                continue
            footprints[name] = search_footprint(
                _makespan_at(run, name, {nodes: result.makespan_s}), base.makespan_s, nodes
            )
    return Comparison(
        workload,
        seed,
        nodes,
        jobs,
        share,
        {n: summarize(r) for n, r in results.items()},
        footprints,
    )


def _makespan_at(
    run: Callable[[str, int], SimResult], name: str, known: dict[int, float]
) -> Callable[[int], float]:
    """Makespan of policy ``name`` on ``n`` nodes, reusing the sizes already simulated."""

    def at(n: int) -> float:
        if n not in known:
            known[n] = run(name, n).makespan_s
        return known[n]

    return at


def _share(
    workload: str,
    jobs: int,
    nodes: int,
    seed: int,
    setup: Setup,
    calibration: Calibration | None,
    step: Step | None,
) -> tuple[float, SimResult | None]:
    """The offload share, and the baseline run if the calibration run is it."""
    if setup.offload_share is not None:
        return setup.offload_share, None
    if calibration is None:
        calibration = paper_calibration(seed, setup)
        if step is not None:
            step(f"calibration seed {seed}: exclusive on {PAPER_NODES} nodes")
    same = workload == "table1" and jobs == TABLE1_JOBS and nodes == PAPER_NODES
    return calibration.offload_share, calibration.baseline if same else None


@dataclass(frozen=True)
class Sweep:
    """Makespan against cluster size.

    Attributes:
        workload: the workload's name.
        seed: its seed.
        offload_share: the offload share the jobs ran with.
        jobs: per size, the jobs in the set.
        runs: per (policy, size), the run's summary.
    """

    workload: str
    seed: int
    offload_share: float
    jobs: dict[int, int]
    runs: dict[tuple[str, int], RunSummary]


def sweep(
    workload: str,
    sizes: Sequence[int],
    policies: Sequence[str],
    seed: int,
    setup: Setup,
    jobs: int | None = None,
    jobs_per_node: int | None = None,
    step: Step | None = None,
    calibration: Calibration | None = None,
) -> Sweep:
    """Every policy on every cluster size: a fixed job set of ``jobs`` (Fig. 9), or
    ``jobs_per_node`` jobs per node (Fig. 10, constant job pressure)."""
    if (jobs is None) == (jobs_per_node is None):
        raise ValueError("give jobs or jobs_per_node")
    share = setup.offload_share
    if share is None:
        calibration = calibration or paper_calibration(seed, setup)
        share = calibration.offload_share
    counts = {n: jobs if jobs is not None else n * (jobs_per_node or 0) for n in sizes}
    sets = {c: realize(draws_for(workload, c, seed), share) for c in set(counts.values())}
    runs: dict[tuple[str, int], RunSummary] = {}
    for n in sizes:
        for name in policies:
            result = simulate(
                paper_cluster(n), sets[counts[n]], setup.policy(name, seed), options=setup.options()
            )
            runs[(name, n)] = summarize(result)
            if step is not None:
                step(f"{workload} seed {seed}: {name} on {n} nodes")
    return Sweep(workload, seed, share, counts, runs)
