"""poncos' own sequence in the simulator: probe, trial co-run, freeze, measure, thaw, decide.

Section 7 of Breitbart, Weidendorfer and Trinitis (``shared/papers/membw-coscheduling-
poncos.md``) starts the first job alone, probes the free cores once it is past its
initialization (step 3), starts the next job beside it (4), waits out that job's
initialization (5), freezes the first (6), probes its cores (7), thaws it (8) and keeps the
pair only while the measured uses sum to at most 90% (9; else the new job is paused until
the first ends). :func:`run_with_trials` runs a queue of section 8 that way on one node,
with nothing recorded beforehand, through the live code:

- **plan**: :class:`~coshare.policies.membw.MembwPolicy` with ``trials`` on plans each
  cycle, on the node facts a daemon would publish (its periodic probe, step 3), and names
  the trial co-runs;
- **trial steps**: :func:`coshare.cycle.trial_steps.run_trials` moves every trial one step per
  cycle (``advance``, ``decide``: the same functions a live cycle calls) through a
  :class:`~coshare.ports.TrialControl` kept here (records, suspend, resume, requeue) and a
  :class:`~coshare.ports.TrialProbe` that *models* the measurement (:class:`ModelledProbe`);
  what the trials measured is recorded per program and planned with from then on, as a
  live cycle does with ``policy.membw.record_file``.

What is modelled, and from what:

- **What a probe reads** (both the node's periodic probe and a trial's): the available
  bandwidth the true uses leave (Table 1: ``1 - sum`` of the uses of the jobs it sees, at
  least :data:`MIN_AVAILABLE`), times ``1 + noise * z`` with ``z`` standard normal: the
  noise is relative to the reading, as the probe times an array walk (section 6). ``z`` is
  drawn from ``seed`` and the probe's identity (node and time, or job and request), so a run
  is reproducible and a reading does not change with how often it is looked at.
- **What a trial costs**: its partners are frozen for ``probe_s`` (section 6: one
  ``distgen_membw_available()`` call takes "less than a second": 1 s, from the text); the
  job on trial co-runs from its start to its probe (``init_s``), slowed by
  :class:`~coshare.sim.poncos.BandwidthModel`'s rule where the pair sums above 1, and a
  suspended job holds its cores until its partners end. The decision takes effect when the
  probe starts (the probe's second is charged to the frozen partners only).
- **Cycles**: on every job end (as the engine's) and every ``cycle_s`` (the periodic cycle
  that moves trials on; 5 s, assumed); the node probes every ``sample_s`` (10 s, as the
  no-trial run's facts).

Each bandwidth decision is checked against the same rule on the true (Table 1) uses: every
trial's keep or suspend, and every co-run the plan starts on recorded (measured) shares
(:class:`Decision`). A job the plan holds back is not counted as a decision: it is asked
again every cycle, on fresher figures, and what holding it back cost is in the makespan.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from coshare.cycle.trial_steps import run_trials
from coshare.ledger.facts import MembwFacts, NodeFacts, attach
from coshare.ledger.trials import (
    TrialJob,
    TrialLimits,
    TrialRecord,
    measured_programs,
    merge_programs,
)
from coshare.model import Job, Plan, RunningJob, Snapshot
from coshare.policies.membw import MembwPolicy
from coshare.ports import ProbeResult
from coshare.sim.engine import SimulationError
from coshare.sim.poncos import BASELINE_GBPS, DOMAIN_CORES, INIT_S, MAX_SHARE, NODE, USE, _job
from coshare.sim.poncos import RUN_ALONE_S as _RUN_ALONE_S

#: The least share of bandwidth a probe ever reads (section 6: its own accesses complete).
MIN_AVAILABLE = 0.05
#: One ``distgen_membw_available()`` call: "less than a second" (section 6, text).
PROBE_S = 1.0
#: The periodic cycle (assumed; live cycles default to ``cycle.interval_s`` 30 s, scaled
#: here to 44-s runs).
CYCLE_S = 5.0
#: The node's probe interval (as the no-trial run's ``MeasuredFacts``).
SAMPLE_S = 10.0
#: Float slack for times and work.
_EPS = 1e-9
#: A run that has not ended by then is stuck (a bug): it stops with an error.
_HORIZON_S = 1e6


@dataclass(frozen=True)
class TrialSetup:
    """How a queue runs with trials.

    Attributes:
        trials: plan trial co-runs (``policy.membw.trials``); off: today's default.
        noise: relative sigma of every probe's reading (0: exact).
        seed: the noise's seed.
        probe_s: how long a trial's partners stay frozen.
        init_s: ``policy.membw.init_s`` (the existing run's 10 s).
        cycle_s: the periodic cycle.
        sample_s: the node's probe interval.
        max_share: the 90% rule.
    """

    trials: bool = True
    noise: float = 0.0
    seed: int = 0
    probe_s: float = PROBE_S
    init_s: float = INIT_S
    cycle_s: float = CYCLE_S
    sample_s: float = SAMPLE_S
    max_share: float = MAX_SHARE


@dataclass(frozen=True)
class Decision:
    """One bandwidth decision, beside what the rule decides on the true uses.

    Attributes:
        at_s: when.
        job: the job decided on.
        kind: ``trial`` (kept or suspended after its probe) or ``admit`` (started beside
            the node's jobs on a recorded, that is measured, share).
        others: the jobs on the node it was decided beside.
        co_run: whether it co-runs (kept, admitted) or not (suspended, refused).
        true_sum: its true use plus theirs (Table 1).
        truth: what the rule decides on ``true_sum``.
    """

    at_s: float
    job: str
    kind: str
    others: tuple[str, ...]
    co_run: bool
    true_sum: float
    truth: bool

    @property
    def wrong(self) -> bool:
        """Whether it differs from the rule on the true uses."""
        return self.co_run != self.truth


@dataclass(frozen=True)
class JobRun:
    """What happened to one job: ``start_s``/``end_s``, and seconds suspended."""

    id: str
    start_s: float
    end_s: float
    suspended_s: float


@dataclass(frozen=True)
class TrialRun:
    """One queue run with (or without) trials.

    Attributes:
        setup: how it ran.
        makespan_s: from 0 to the last end.
        jobs: each job, in queue order.
        trials: trial co-runs the plan started.
        decisions: every bandwidth decision (:class:`Decision`).
        measured: each program's share as the trials recorded it.
        frozen_s: partner-seconds frozen by probes.
    """

    setup: TrialSetup
    makespan_s: float
    jobs: tuple[JobRun, ...]
    trials: int
    decisions: tuple[Decision, ...]
    measured: Mapping[str, float]
    frozen_s: float

    @property
    def wrong(self) -> int:
        """Decisions that differ from the rule on the true uses."""
        return sum(d.wrong for d in self.decisions)


def reading(noise: float, seed: int, *key: int) -> float:
    """The factor ``1 + noise * z`` of one probe, ``z`` drawn from ``seed`` and ``key`` (any
    integers: a negative seed is as good as another)."""
    if noise == 0.0:
        return 1.0
    z = np.random.default_rng([seed % 2**63, *key]).standard_normal()
    return 1.0 + noise * float(z)


def _program_of(job_id: str) -> str:
    return job_id.split("-", 1)[1]


@dataclass
class _Job:
    job: Job
    left: float
    phase: str = "pending"  # pending, running, suspended, ended
    start_s: float | None = None
    end_s: float | None = None
    frozen_until: float = -math.inf
    suspended_since: float | None = None
    suspended_s: float = 0.0
    record: TrialRecord | None = None


class ModelledProbe:
    """A trial's probe (:class:`~coshare.ports.TrialProbe`) on modelled bandwidth: with the
    partners frozen the node runs only the job on trial, so the probe reads ``1 - use`` of
    it (Table 1), noisy; the partners are frozen for ``probe_s``."""

    def __init__(self, sim: _Queue) -> None:
        self.sim = sim

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        sim = self.sim
        for p in partners:
            sim.jobs[p].frozen_until = sim.now + sim.setup.probe_s
            sim.frozen_s += sim.setup.probe_s
        true = max(1.0 - USE[program or ""], MIN_AVAILABLE)
        index = list(sim.jobs).index(job)
        factor = reading(sim.setup.noise, sim.setup.seed, 1, index, round(sim.now * 1000))
        return ProbeResult(min(max(1.0 - true * factor, 0.0), 1.0))


class _Queue:
    """The node, its jobs and the scheduler's trial verbs (:class:`~coshare.ports.TrialControl`)."""

    def __init__(self, queue: Sequence[str], setup: TrialSetup) -> None:
        self.setup = setup
        self.jobs: dict[str, _Job] = {}
        for k, program in enumerate(queue):
            job = _job(f"{k + 1}-{program}", program, submit_s=k * 1e-3)
            self.jobs[job.id] = _Job(job, _RUN_ALONE_S)
        self.now = 0.0
        self.frozen_s = 0.0
        self.trials = 0
        self.decisions: list[Decision] = []
        self.facts: NodeFacts | None = None

    # -- TrialControl ------------------------------------------------------------------

    def trial_jobs(self) -> Sequence[TrialJob]:
        return [
            TrialJob(j.job.id, NODE.name, j.job.program, j.phase, j.start_s, j.record)  # type: ignore[arg-type]
            for j in self.jobs.values()
            if j.record is not None
        ]

    def write_trial(self, job: str, record: TrialRecord) -> str | None:
        self.jobs[job].record = record
        return None

    def suspend(self, job: str) -> str | None:
        j = self.jobs[job]
        if j.phase != "running":
            return f"job {job} is {j.phase}"
        j.phase, j.suspended_since = "suspended", self.now
        return None

    def resume(self, job: str) -> str | None:
        j = self.jobs[job]
        if j.phase != "suspended" or j.suspended_since is None:
            return f"job {job} is {j.phase}"
        j.suspended_s += self.now - j.suspended_since
        j.phase, j.suspended_since = "running", None
        return None

    def requeue(self, job: str, reason: str) -> str | None:
        j = self.jobs[job]  # a requeued job starts again from the beginning
        j.phase, j.left, j.start_s, j.record, j.suspended_since = (
            "pending",
            _RUN_ALONE_S,
            None,
            None,
            None,
        )
        return None

    def node_job_id(self, job: str) -> str:
        return job

    # -- the node ----------------------------------------------------------------------

    def on_node(self) -> list[_Job]:
        return [j for j in self.jobs.values() if j.phase in ("running", "suspended")]

    def active(self) -> list[_Job]:
        """Jobs using bandwidth now: running, not frozen."""
        return [
            j for j in self.jobs.values() if j.phase == "running" and j.frozen_until <= self.now
        ]

    def rates(self) -> dict[str, float]:
        active = self.active()
        total = sum(USE[j.job.program or ""] for j in active)
        out = {}
        for j in active:
            u = USE[j.job.program or ""]
            out[j.job.id] = 1.0 if total <= 1.0 else 1.0 / ((1.0 - u) + u * total)
        return out

    def sample(self) -> None:
        """The node's periodic probe, when one is due (step 3): it sees the jobs running
        (and not frozen) that started before it."""
        at = math.floor(self.now / self.setup.sample_s + _EPS) * self.setup.sample_s
        if self.facts is not None and self.facts.at_s >= at:
            return
        used = sum(
            USE[j.job.program or ""]
            for j in self.active()
            if j.start_s is not None and j.start_s < at
        )
        true = max(1.0 - used, MIN_AVAILABLE)
        factor = reading(self.setup.noise, self.setup.seed, 0, round(at * 1000))
        avail = max(true * factor, 0.0) * BASELINE_GBPS
        self.facts = NodeFacts(at, MembwFacts(avail, BASELINE_GBPS, DOMAIN_CORES, at))

    def snapshot(self) -> Snapshot:
        running = tuple(
            RunningJob(
                j.job.id,
                NODE.name,
                cpu_milli=j.job.cpu_milli,
                program=j.job.program,
                start_time_s=j.start_s,
            )
            for j in self.on_node()
        )
        pending = tuple(j.job for j in self.jobs.values() if j.phase == "pending")
        snapshot = Snapshot((NODE,), running, pending, now_s=self.now)
        assert self.facts is not None
        return attach(snapshot, {NODE.name: self.facts})

    # -- the cycle ---------------------------------------------------------------------

    def cycle(self) -> None:
        self.sample()
        snapshot = self.snapshot()
        measured = measured_programs(self.trial_jobs())
        programs = merge_programs({}, measured)
        s = self.setup
        policy = MembwPolicy(
            max_share=s.max_share, programs=programs, init_s=s.init_s, trials=s.trials
        )
        plan = policy.plan(snapshot) if snapshot.pending else None
        if plan is not None:
            self._apply(snapshot, plan)
        if s.trials:
            limits = TrialLimits(s.max_share, s.init_s)
            report = run_trials(self, ModelledProbe(self), snapshot, programs, limits, self.now)
            running = {r.id for r in snapshot.running}
            for step in report.steps:
                rec = step.record
                if rec is not None and rec.why in ("within_limit", "over_limit"):
                    partners = [p for p in rec.partners if p in running]
                    self._decide(step.job, "trial", partners, rec.state == "kept")

    def _apply(self, snapshot: Snapshot, plan: Plan) -> None:
        """Start the plan's jobs (a trial's with its ``placed`` record, as the live cycle
        writes it with the placement) and note its bandwidth decisions."""
        named = {t.job: t for t in plan.trials}
        others = [r.id for r in snapshot.running]  # and those placed before it this cycle
        for a in plan.assignments:
            j = self.jobs[a.job]
            trial = named.get(a.job)
            if trial is not None:
                self.trials += 1
                j.record = TrialRecord("placed", int(self.now), trial.partners)
            elif others:
                self._decide(a.job, "admit", others, True)
            j.phase, j.start_s = "running", self.now
            others.append(a.job)

    def _decide(self, job: str, kind: str, others: Sequence[str], co_run: bool) -> None:
        true_sum = USE[_program_of(job)] + sum(USE[_program_of(o)] for o in others)
        self.decisions.append(
            Decision(
                self.now,
                job,
                kind,
                tuple(sorted(others)),
                co_run,
                round(true_sum, 6),
                true_sum <= self.setup.max_share + _EPS,
            )
        )

    def run(self) -> TrialRun:
        next_tick = 0.0
        due = True  # the jobs arrive at 0
        while any(j.phase != "ended" for j in self.jobs.values()):
            if self.now >= next_tick - _EPS:
                due = True
                next_tick += self.setup.cycle_s
            if due:
                self.cycle()
                due = False
            rates = self.rates()
            ends = [self.now + self.jobs[i].left / r for i, r in rates.items()]
            thaws = [j.frozen_until for j in self.jobs.values() if j.frozen_until > self.now]
            then = min([next_tick, *ends, *thaws])
            if then > _HORIZON_S:
                stuck = ", ".join(i for i, j in self.jobs.items() if j.phase != "ended")
                raise SimulationError(
                    f"poncos trials: {stuck} not ended by {_HORIZON_S:g} s (a stuck run)"
                )
            for i, r in rates.items():
                self.jobs[i].left -= (then - self.now) * r
            self.now = then
            for i in rates:
                j = self.jobs[i]
                if j.left <= _EPS * _RUN_ALONE_S:
                    j.phase, j.end_s, due = "ended", self.now, True
        return TrialRun(
            self.setup,
            max((j.end_s or 0.0) for j in self.jobs.values()),
            tuple(
                JobRun(j.job.id, j.start_s or 0.0, j.end_s or math.inf, j.suspended_s)
                for j in self.jobs.values()
            ),
            self.trials,
            tuple(self.decisions),
            dict(measured_programs(self.trial_jobs())),
            self.frozen_s,
        )


def run_with_trials(queue: Sequence[str], setup: TrialSetup) -> TrialRun:
    """Run ``queue`` (programs of :data:`~coshare.sim.poncos.USE`) on section 8's node with
    nothing recorded, planning and running trial co-runs as ``setup`` says."""
    return _Queue(queue, setup).run()


def summary(runs: Sequence[TrialRun]) -> dict[str, float]:
    """Figures over runs of one queue (seeds): makespan mean, min, max; trials, decisions
    and wrong ones per run (means)."""
    spans = [r.makespan_s for r in runs]
    return {
        "makespan_s": float(np.mean(spans)),
        "makespan_min_s": min(spans),
        "makespan_max_s": max(spans),
        "trials": float(np.mean([r.trials for r in runs])),
        "decisions": float(np.mean([len(r.decisions) for r in runs])),
        "wrong": float(np.mean([r.wrong for r in runs])),
        "frozen_s": float(np.mean([r.frozen_s for r in runs])),
    }
