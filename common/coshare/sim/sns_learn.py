"""``sns`` with profiles learned from scratch (``coshare simulate --workload sns --policies
...,sns-learned``): section 6.2's job sequences, run in order per seed with one learned store
that starts empty and learns as jobs finish (:mod:`coshare.profiles.learning`: a program runs alone
at scale 1, then 2, 4, 8 until spreading stops helping; only runs alone count), beside the
same sequences under ``sns`` with the given profiles and under CE.

What the simulated profiler measures: a run's time alone at its scale, from the model's
own clock (the live node measures it from its cgroup and start record); and on a program's
first run alone, its IPC-LLC and BW-LLC curves as the data file gives them, which is what the
paper's in-run sampler records ("the UBERUN monitor module periodically modifies LLC
allocation at run time, sampling and recording the IPC and memory bandwidth", section 5.1).
Live, coshare learns run times only (a normal run gives no curve): this is said in the
report.

It renders its table with rich (:mod:`coshare.sim.report`), so it is one of the simulator's
I/O modules (tests/unit/test_purity.py); the caller reads the data file
(:func:`coshare.sim.sns_report.load_data`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from rich import box
from rich.table import Table

from coshare.model import Job, Plan, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.sns import SnsPolicy
from coshare.profiles.learning import Learned, Run, as_profile, for_policy, observe, policy_inputs
from coshare.profiles.programs import SCALES, Profile, nodes_at
from coshare.sim.device import Token
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.report import render
from coshare.sim.sns import (
    PAPER_NODES,
    RUN_S_RANGE,
    SEQUENCES,
    Cluster,
    SequenceRun,
    SnsModel,
    sequence,
)
from coshare.sim.sns import run_sequence as run_given

#: The name the learning run goes by in ``--policies`` and the report.
NAME = "sns-learned"


class LearningModel(SnsModel):
    """:class:`SnsModel` that also says, for every job that ends, what a node would have
    measured: its program, scale, run time and whether it had its nodes alone throughout."""

    def __init__(self, profiles: Mapping[str, Profile], cluster: Cluster, nodes: int) -> None:
        super().__init__(profiles, cluster)
        self.nodes = nodes
        self.finished: list[Run] = []
        self._started: dict[int, float] = {}
        self._shared: set[int] = set()

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        self._started[job] = now
        super().start(job, devices, now)

    def _rerate(self, nodes: set[str], now: float) -> None:
        for node in nodes:
            there = self._on.get(node, set())
            if len(there) > 1:
                self._shared.update(there)
        super()._rerate(nodes, now)

    def _widest(self, job: Job) -> int:
        """The largest scale the job's node range allows on the cluster."""
        most = min(job.nodes_max or job.nodes, self.nodes)
        fitting = [k for k in SCALES if nodes_at(k, job.processes, self.cluster.cores)[0] <= most]
        return max(fitting, default=1)

    def handle(self, token: Token, now: float) -> int | None:
        job = super().handle(token, now)
        if job is not None:
            sim = self._jobs[job].job
            self.finished.append(
                Run(
                    sim.id,
                    sim.program or "",
                    self.scale.get(job, 1),
                    now - self._started[job],
                    job not in self._shared,
                    widest=self._widest(sim),
                )
            )
        return job


@dataclass
class LearningPolicy:
    """``sns`` planning with what it has learned so far: before each plan it counts the jobs
    that ended since (from :attr:`LearningModel.finished`) and plans with the learned entries
    (programs still on trial run alone at their trial scale, :attr:`SnsPolicy.explore`)."""

    places_gangs: ClassVar[bool] = True

    truth: Mapping[str, Profile]
    store: dict[str, Learned]
    model: LearningModel | None = None
    age_limit_s: float | None = 3600.0
    learning_runs: int = 0
    _seen: int = 0

    @property
    def name(self) -> str:
        return NAME

    def plan(self, snapshot: Snapshot) -> Plan:
        """Count the finished jobs, then plan as ``sns`` with the learned store."""
        if self.model is not None:
            for run in self.model.finished[self._seen :]:
                entry = observe(self.store.get(run.program), run)
                if run.alone and entry.curves is None:
                    entry = replace(entry, curves=self.truth[run.program])
                self.store[run.program] = entry
            self._seen = len(self.model.finished)
        profiles, explore = policy_inputs(for_policy({}, self.store), learn=True)
        plan = SnsPolicy(profiles, "sns", age_limit_s=self.age_limit_s, explore=explore).plan(
            snapshot
        )
        self.learning_runs += sum(1 for s in plan.spreads if "is being learned" in s.note)
        return replace(plan, policy=NAME)


def run_learning(
    jobs: Sequence[SimJob],
    policy: LearningPolicy,
    profiles: Mapping[str, Profile],
    cluster: Cluster,
    nodes: int,
    cycle_delay_s: float,
) -> SequenceRun:
    """One sequence under the learning policy (its store carries over to the next)."""
    model = LearningModel(profiles, cluster, nodes)
    policy.model = model
    policy._seen = 0
    result = simulate(
        cluster.nodes(nodes),
        list(jobs),
        policy,
        options=SimOptions(cycle_delay_s=cycle_delay_s),
        model=model,
    )
    policy.plan(Snapshot(cluster.nodes(nodes)))  # count the last jobs' ends
    done = [r for r in result.jobs if r.start_s is not None and r.end_s is not None]
    count = max(len(done), 1)
    index = {s.job.id: i for i, s in enumerate(jobs)}
    return SequenceRun(
        NAME,
        math.fsum(r.end_s - r.submit_s for r in done) / count,  # type: ignore[operator]
        math.fsum(r.start_s - r.submit_s for r in done) / count,  # type: ignore[operator]
        math.fsum(r.end_s - r.start_s for r in done) / count,  # type: ignore[operator]
        tuple(r.slowdown or 0.0 for r in done),
        tuple(model.scale.get(index[r.id], 1) for r in done),
        len(result.jobs) - len(done),
    )


@dataclass(frozen=True)
class SeedLearning:
    """One seed's sequences in order: the runs by policy, when every program was learned
    (the first sequence after which no program was on trial; ``None``: never), the
    learning runs placed, and the learned store at the end."""

    runs: list[dict[str, SequenceRun]]
    learned_after: int | None
    learning_runs: int
    store: dict[str, Learned]


def program_times(
    jobs: Sequence[SimJob], profiles: Mapping[str, Profile], seed: int
) -> tuple[SimJob, ...]:
    """``jobs`` with every job of a program taking that program's CE run time, one per
    program and seed, uniform in :data:`coshare.sim.sns.RUN_S_RANGE`: the paper sizes each
    program's input "to make their execution time in close magnitude (50s to 1200s)"
    (section 6.1), so a program's runs take the same time, which is what learning its run
    times rests on (the given-profile runs draw a time per job)."""
    times = {
        name: random.Random(f"sns-learn:{seed}:{name}").uniform(*RUN_S_RANGE)
        for name in sorted(profiles)
    }
    return tuple(host_only(s.job, times[s.job.program or ""], s.user) for s in jobs)


def run_seed(
    profiles: Mapping[str, Profile],
    cluster: Cluster,
    seed: int,
    *,
    nodes: int = PAPER_NODES,
    age_limit_s: float | None = 3600.0,
    cycle_delay_s: float = 1.0,
    advance: Callable[[int], None] | None = None,
) -> SeedLearning:
    """Section 6.2's sequences of ``seed`` (each program at one run time,
    :func:`program_times`) in order under CE, ``sns`` (given profiles) and ``sns`` learning
    from an empty store."""
    options = PolicyOptions(sns_profiles=profiles, age_limit_s=age_limit_s)
    ce, given = make_policy("exclusive", options), make_policy("sns", options)
    learning = LearningPolicy(profiles, {}, age_limit_s=age_limit_s)
    runs = []
    learned_after = None
    for i in range(SEQUENCES):
        jobs = program_times(sequence(profiles, seed, i, nodes), profiles, seed)
        runs.append(
            {
                "exclusive": run_given(jobs, ce, profiles, cluster, nodes, cycle_delay_s),
                "sns": run_given(jobs, given, profiles, cluster, nodes, cycle_delay_s),
                NAME: run_learning(jobs, learning, profiles, cluster, nodes, cycle_delay_s),
            }
        )
        complete = all(
            n in learning.store and as_profile(learning.store[n]) is not None for n in profiles
        )
        if learned_after is None and complete:
            learned_after = i + 1
        if advance is not None:
            advance(1)
    return SeedLearning(runs, learned_after, learning.learning_runs, learning.store)


def _gain(runs: Sequence[dict[str, SequenceRun]], name: str) -> float:
    return statistics.fmean(r["exclusive"].turnaround_s / r[name].turnaround_s for r in runs) - 1


def learn_outcome(
    profiles: Mapping[str, Profile],
    cluster: Cluster,
    seeds: Sequence[int],
    *,
    nodes: int = PAPER_NODES,
    age_limit_s: float | None = 3600.0,
    cycle_delay_s: float = 1.0,
    advance: Callable[[int], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The text and JSON of the learned-profile run beside the given-profile one."""
    results = {
        seed: run_seed(
            profiles,
            cluster,
            seed,
            nodes=nodes,
            age_limit_s=age_limit_s,
            cycle_delay_s=cycle_delay_s,
            advance=advance,
        )
        for seed in seeds
    }
    title = (
        f"sns with profiles learned from scratch ({NAME}) beside the given profiles: per "
        f"seed the {SEQUENCES} sequences in order (each program at one CE run time, drawn "
        "per seed), one learned store starting empty; "
        "throughput vs CE (mean over sequences), all sequences and those after every "
        "program was learned"
    )
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for column in (
        "seed",
        "sns (given)",
        NAME,
        "learned after",
        "given, after",
        "learned, after",
        "learning runs",
        "over alpha (learned)",
    ):
        table.add_column(column, justify="right")
    payload: dict[str, Any] = {"seeds": {}}
    for seed, result in results.items():
        after = result.runs[result.learned_after :] if result.learned_after is not None else []
        over = sum(r[NAME].over(0.9) for r in result.runs)
        jobs = sum(len(r[NAME].normalized) for r in result.runs)
        row = {
            "sns_gain": _gain(result.runs, "sns"),
            "learned_gain": _gain(result.runs, NAME),
            "learned_after": result.learned_after,
            "sns_gain_after": _gain(after, "sns") if after else None,
            "learned_gain_after": _gain(after, NAME) if after else None,
            "learning_runs": result.learning_runs,
            "over_alpha": over,
            "jobs": jobs,
            "classes": {
                n: (p.program_class if (p := as_profile(e)) is not None else "learning")
                for n, e in sorted(result.store.items())
            },
        }
        payload["seeds"][seed] = row
        table.add_row(
            str(seed),
            f"{row['sns_gain']:+.1%}",
            f"{row['learned_gain']:+.1%}",
            f"{result.learned_after} of {SEQUENCES}" if result.learned_after else "never",
            f"{row['sns_gain_after']:+.1%}" if after else "-",
            f"{row['learned_gain_after']:+.1%}" if after else "-",
            str(result.learning_runs),
            f"{over} of {jobs}",
        )
    if len(results) > 1:
        rows = list(payload["seeds"].values())
        after = [r for r in rows if r["learned_gain_after"] is not None]

        def mean(key: str, of: list[dict[str, Any]] = rows) -> float:
            return statistics.fmean(r[key] for r in of)

        table.add_row(
            "mean",
            f"{mean('sns_gain'):+.1%}",
            f"{mean('learned_gain'):+.1%}",
            f"{mean('learned_after'):.1f}" if len(after) == len(rows) else "-",
            f"{mean('sns_gain_after', after):+.1%}" if after else "-",
            f"{mean('learned_gain_after', after):+.1%}" if after else "-",
            f"{mean('learning_runs'):.1f}",
            f"{mean('over_alpha'):.1f} of {mean('jobs'):.0f}",
        )
    agree = {
        seed: sum(
            1
            for n, c in r["classes"].items()
            if c == profiles[n].program_class or (c == "learning")
        )
        for seed, r in payload["seeds"].items()
    }
    payload["classes_agree"] = agree
    lines = [
        "Learning (coshare.profiles.learning, section 4.2): a program runs alone at scale 1, "
        "then 2, 4, 8 until a run is over 5% slower than its best; only runs alone count. The "
        "simulated profiler records a run's time alone, and on a program's first run alone "
        "its IPC/BW-LLC curves from the data file (the paper samples them within runs); "
        "live, coshare learns run times only (no curve from a normal run).",
        "Classes learned as the data file's (or still learning), per seed: "
        + ", ".join(f"{s}: {a} of {len(profiles)}" for s, a in agree.items())
        + ".",
    ]
    return render(table, *lines), payload
