"""The ``sns`` workload: Spread-n-Share's section 6.2 job mixes and section 6.3's scaling-ratio
study, with an execution model driven by the program profiles.

What the paper gives and is used as input (``data/spread_n_share.json`` says, per value,
where it comes from; :mod:`coshare.sim.sns_report` reads it):

- **the cluster** (section 6.1): 8 nodes x 28 cores, 20 LLC ways, 118.26 GB/s (STREAM);
- **the mixes** (section 6.2): 36 sequences of 20 jobs drawn from the 12 programs, each of
  16 or 28 processes, all submitted at once, ``alpha`` 0.9; their scaling ratios (the share
  of CE core-hours of scaling jobs) lie in 0.4..0.8, so coshare redraws a sequence until
  its ratio does (an input property the paper states, not a result);
- **section 6.3**: 30 jobs of 28 processes, BW (scaling) and HC (neutral) at a given ratio;
- **the profiles** where its text has numbers: ways for 90% (MG 3, CG 10, BFS 18, EP and
  HC 2), bandwidth on one node (MG 112.0, CG 42.9, EP 0.09, BFS 0.12 GB/s), the classes,
  CG's 13% at scale 2 and "over 30%" at 8 for MG, LU, TS and BW.

What it does not give, and coshare assumes (docs/paper-sns.md): every other
profile value (its figures are not in the text we have); a job's CE run time, uniform in
50..1200 s (section 6.1 sizes inputs "to make their execution time in close magnitude (50s
to 1200s)"); and the execution model below.

**Execution model** (:class:`SnsModel`): a job of CE run time ``t1`` placed at scale ``k``
runs ``t1 / speedup(k)`` alone (its profile); shared, it runs at the pace of its slowest
node. On a node, a job's rate is ``ipc(w_eff) / ipc(full)`` x the bandwidth factor:

- ``c`` processes with ``w`` ways behave as the profile's 16 with ``w x 16 / c`` (per-process
  working sets; :func:`coshare.profiles.programs.demand`), relative to the full cache;
- ``w_eff``: its allocated ways plus an equal share of the ways no job holds (section 4.4's
  give-away); jobs without an allocation (``cs``, CE) share the unallocated ways in
  proportion to their cores (an assumption: no partitioning, occupancy follows activity);
- bandwidth: each job uses ``b = membw(w_eff) x c / 16`` (its profile, scaled to its ``c``
  cores there); with ``D`` the node's summed use over its peak, a job whose use is ``u`` of
  the peak alone runs at ``1 / ((1 - u) + u * max(D, 1))`` of its speed, relative to what
  the same formula gives it alone (the poncos workload's model, no fitted constant).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coshare.model import MILLI, Assignment, Job, Node
from coshare.policies.base import Policy
from coshare.profiles.programs import Profile
from coshare.sim.device import Token
from coshare.sim.engine import SimOptions, SimResult, simulate
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.rates import RatedRuns

#: Section 6.2: 36 sequences of 20 jobs on 8 nodes; jobs of 16 or 28 processes.
SEQUENCES = 36
JOBS_PER_SEQUENCE = 20
PAPER_NODES = 8
PROCESS_COUNTS = (16, 28)
#: The scaling ratios the paper's sequences have (section 6.2: "from 0.4 to 0.8").
RATIO_RANGE = (0.4, 0.8)
#: Section 6.1: execution times "in close magnitude (50s to 1200s)"; drawn uniformly.
RUN_S_RANGE = (50.0, 1200.0)
#: Section 6.3: 30 jobs of 28 processes, BW scaling and HC neutral.
RATIO_JOBS = 30
RATIO_PROCESSES = 28
RATIO_PROGRAMS = ("BW", "HC")
#: The paper's figures (sections 6.2, 6.3).
PAPER = {
    "cs_gain": 0.137,
    "sns_gain": 0.198,
    "sns_beats_cs": 26,
    "sequences": 36,
    "over_alpha": 136,
    "jobs": 720,
    "sns_max_gain": 0.421,
}


@dataclass(frozen=True)
class Cluster:
    """The nodes of the paper's cluster (section 6.1)."""

    cores: int = 28
    llc_ways: int = 20
    membw_gbps: float = 118.26
    memory_mib: int = 131072

    def nodes(self, count: int) -> tuple[Node, ...]:
        """``count`` such nodes."""
        return tuple(
            Node(
                f"sns{i + 1:02d}",
                self.cores * MILLI,
                self.memory_mib,
                membw_gbps=self.membw_gbps,
                llc_ways=self.llc_ways,
            )
            for i in range(count)
        )


def scaling_ratio(jobs: Sequence[SimJob], profiles: Mapping[str, Profile]) -> float:
    """The share of CE core-hours (processes x CE run time) of the scaling jobs."""
    total = math.fsum(s.job.processes * s.duration_s for s in jobs)
    scaling = math.fsum(
        s.job.processes * s.duration_s
        for s in jobs
        if profiles[s.job.program or ""].program_class == "scaling"
    )
    return scaling / total if total > 0 else 0.0


def _job(
    index: int, program: str, processes: int, profile: Profile, nodes_max: int, run_s: float
) -> SimJob:
    job = Job(
        f"{index + 1}-{program}",
        kind="cpu",
        device_count=0,
        processes=processes,
        cpu_milli=MILLI,
        memory_mib=1024,
        program=program,
        submit_time_s=index * 1e-3,
        nodes=1,
        nodes_max=1 if profile.single_node else nodes_max,
    )
    return host_only(job, run_s)


def sequence(
    profiles: Mapping[str, Profile],
    seed: int,
    index: int,
    nodes: int = PAPER_NODES,
    jobs: int = JOBS_PER_SEQUENCE,
) -> tuple[SimJob, ...]:
    """Sequence ``index`` of seed ``seed``: ``jobs`` jobs, a program uniformly of the 12 and
    16 or 28 processes each, redrawn until the scaling ratio is in :data:`RATIO_RANGE`."""
    rng = random.Random(f"sns:{seed}:{index}")
    names = sorted(profiles)
    for _ in range(10_000):
        out = []
        for i in range(jobs):
            name = rng.choice(names)
            out.append(
                _job(
                    i,
                    name,
                    rng.choice(PROCESS_COUNTS),
                    profiles[name],
                    nodes,
                    rng.uniform(*RUN_S_RANGE),
                )
            )
        if RATIO_RANGE[0] <= scaling_ratio(out, profiles) <= RATIO_RANGE[1]:
            return tuple(out)
    raise ValueError("no sequence with a scaling ratio in range after 10000 draws")


def ratio_mix(
    profiles: Mapping[str, Profile], share: float, seed: int, nodes: int = PAPER_NODES
) -> tuple[SimJob, ...]:
    """Section 6.3: :data:`RATIO_JOBS` jobs of 28 processes, ``round(share x 30)`` of them BW
    (scaling), the others HC (neutral), in random order."""
    rng = random.Random(f"sns-ratio:{seed}:{share:.6f}")
    count = round(share * RATIO_JOBS)
    names = [RATIO_PROGRAMS[0]] * count + [RATIO_PROGRAMS[1]] * (RATIO_JOBS - count)
    rng.shuffle(names)
    return tuple(
        _job(i, n, RATIO_PROCESSES, profiles[n], nodes, rng.uniform(*RUN_S_RANGE))
        for i, n in enumerate(names)
    )


@dataclass
class _Part:
    node: str
    cores: int
    ways: int | None


class SnsModel(RatedRuns):
    """Jobs run at their profile's scale speedup, slowed by the ways and bandwidth they get
    on their nodes (see the module docstring). CPU jobs only; the engine tells it each
    job's parts (``on_part``)."""

    def __init__(self, profiles: Mapping[str, Profile], cluster: Cluster) -> None:
        super().__init__()
        self.profiles = profiles
        self.cluster = cluster
        self._parts: dict[int, list[_Part]] = {}
        self.scale: dict[int, int] = {}

    def on_part(self, job: int, part: Assignment, processes: int) -> None:
        """The engine's hook: ``job`` is about to start ``processes`` on ``part.node``."""
        self._parts.setdefault(job, []).append(_Part(part.node, processes, part.llc_ways))

    def _profile(self, job: int) -> Profile:
        return self.profiles[self._jobs[job].job.program or ""]

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        sim = self._jobs[job]
        parts = self._parts[job]
        minimum = -(-sim.job.processes // self.cluster.cores)
        k = max(1, len(parts) // minimum)
        profile = self._profile(job)
        self.scale[job] = k
        speedup = profile.speedup(k) if k in profile.run_time_s else 1.0
        self._begin(job, sim.duration_s / speedup, (p.node for p in parts), now)
        self._rerate({p.node for p in parts}, now)

    def handle(self, token: Token, now: float) -> int | None:
        job = self._current(token)
        if job is None:
            return None  # its rate changed after this end was scheduled
        nodes = {p.node for p in self._parts[job]}
        self._leave(job, nodes)
        self._rerate(nodes, now)
        return job

    def ways_of(self, node: str) -> dict[int, float]:
        """Each job's effective ways on ``node`` (allocation plus its share of the rest)."""
        jobs = sorted(self._on.get(node, ()))
        parts = {j: next(p for p in self._parts[j] if p.node == node) for j in jobs}
        allocated = sum(p.ways for p in parts.values() if p.ways is not None)
        spare = max(0.0, self.cluster.llc_ways - allocated)
        free_riders = [j for j in jobs if parts[j].ways is None]
        out: dict[int, float] = {}
        if free_riders:
            cores = sum(parts[j].cores for j in free_riders)
            for j in jobs:
                w = parts[j].ways
                out[j] = float(w) if w is not None else spare * parts[j].cores / cores
        else:
            for j in jobs:
                out[j] = float(parts[j].ways or 0) + spare / len(jobs)
        return out

    def node_factor(self, node: str) -> dict[int, float]:
        """Each job's speed on ``node`` relative to running alone there."""
        ways = self.ways_of(node)
        peak = self.cluster.membw_gbps
        use: dict[int, float] = {}
        alone: dict[int, float] = {}
        for j, w in ways.items():
            profile = self._profile(j)
            cores = next(p.cores for p in self._parts[j] if p.node == node)
            use[j] = profile.membw_at(w, cores) * cores / profile.cores / peak
            alone[j] = profile.membw_at(profile.full_ways, cores) * cores / profile.cores / peak
        total = math.fsum(use.values())
        out = {}
        for j, w in ways.items():
            profile = self._profile(j)
            cores = next(p.cores for p in self._parts[j] if p.node == node)
            full = profile.ipc_at(profile.full_ways, cores)
            u = min(1.0, alone[j])
            shared = 1.0 / ((1.0 - u) + u * max(total, 1.0))
            solo = 1.0 / ((1.0 - u) + u * max(alone[j], 1.0))
            out[j] = min(1.0, profile.ipc_at(w, cores) / full) * min(1.0, shared / solo)
        return out

    def _rerate(self, nodes: set[str], now: float) -> None:
        affected = sorted({j for n in nodes for j in self._on.get(n, ())})
        factors: dict[str, dict[int, float]] = {}
        for j in affected:
            rate = 1.0
            for p in self._parts[j]:
                if p.node not in factors:
                    factors[p.node] = self.node_factor(p.node)
                rate = min(rate, factors[p.node][j])
            self._set_rate(j, max(rate, 1e-6), now)


@dataclass(frozen=True)
class SequenceRun:
    """One policy on one job sequence.

    Attributes:
        policy: its name.
        turnaround_s: mean submit-to-finish time of the jobs (the paper's throughput is its
            reciprocal).
        wait_s: mean submit-to-start time.
        run_s: mean start-to-finish time.
        normalized: each job's run time over its CE run time alone.
        scales: each job's scale factor.
        not_run: jobs that never ran.
    """

    policy: str
    turnaround_s: float
    wait_s: float
    run_s: float
    normalized: tuple[float, ...]
    scales: tuple[int, ...] = field(default=())
    not_run: int = 0

    def over(self, alpha: float) -> int:
        """Jobs whose run time exceeds their CE run time / ``alpha``."""
        return sum(1 for x in self.normalized if x > 1.0 / alpha + 1e-9)


def run_sequence(
    jobs: Sequence[SimJob],
    policy: Policy,
    profiles: Mapping[str, Profile],
    cluster: Cluster,
    nodes: int = PAPER_NODES,
    cycle_delay_s: float = 1.0,
) -> SequenceRun:
    """Run ``jobs`` under ``policy`` with :class:`SnsModel`."""
    model = SnsModel(profiles, cluster)
    options = SimOptions(cycle_delay_s=cycle_delay_s)
    result: SimResult = simulate(
        cluster.nodes(nodes), list(jobs), policy, options=options, model=model
    )
    done = [r for r in result.jobs if r.start_s is not None and r.end_s is not None]
    turnaround = [r.end_s - r.submit_s for r in done]  # type: ignore[operator]
    wait = [r.start_s - r.submit_s for r in done]  # type: ignore[operator]
    run = [r.end_s - r.start_s for r in done]  # type: ignore[operator]
    normalized = tuple(r.slowdown or 0.0 for r in done)
    index = {s.job.id: i for i, s in enumerate(jobs)}
    scales = tuple(model.scale.get(index[r.id], 1) for r in done)
    count = max(len(done), 1)
    return SequenceRun(
        policy.name,
        math.fsum(turnaround) / count,
        math.fsum(wait) / count,
        math.fsum(run) / count,
        normalized,
        scales,
        len(result.jobs) - len(done),
    )
