"""The coprocessor-sharing paper's workloads, with the profiles the paper does not give.

Section V of the paper runs three kinds of job sets on Xeon Phi 5110P nodes (8 GB, 240
threads, two 8-core host CPUs): 1000 instances of its Table I applications (Table II), four
synthetic distributions of 400 jobs (Figs. 7-9, Table III), and normal-distribution sets of
200 jobs per node on 2 to 8 nodes (Fig. 10). It gives each job's threads and memory range but
not how long jobs run nor how they offload. The choices made here (docs/simulator.md):

- **Memory** is drawn uniformly within the application's range in 50 MB steps (the paper's
  own example of request granularity, section IV-C), read as MiB.
- **Run time** alone on a device is uniform in 0.5..1.5 x 28.5 s, for every application and
  independent of memory and threads. 28.5 s = the paper's MC makespan (3568 s) x 8 devices /
  1000 jobs: it fixes the time unit only (every result is a ratio); the cycle delay is read
  against it.
- **Offloads**: a job alternates host phases and offloads, ``host, offload, ..., host``. The
  number of offloads is the iteration or time-step count of Table I's problem-size column,
  capped at :data:`MAX_OFFLOADS` (MD 5 time steps, SG 10 iterations; BT, SP, LU 200-400
  iterations and MC 1000 time steps -> 50); KM names none and makes 20 (Lloyd's algorithm
  iterates tens of times). Synthetic jobs make 5 to 50 offloads, uniformly.
- **Offload share** ``f`` (the part of a job's run time spent offloading) is the one
  calibrated input: the paper measured the exclusive baseline's average device core
  utilization (about 50% on the Table I set); ``f`` is set so the simulated MC reaches it
  (:func:`coshare.sim.calibrate.offload_share`). It is the same for every application and
  phase lengths vary +-50% around their mean.
- **Host side**: each job holds 1 core and 1 GiB of host memory; nodes have 16 cores and
  64 GiB, so the host is never the bottleneck (the paper: "no contention for the host").
- **Synthetic distributions** (Fig. 7): one resource level ``x`` in [0, 1] sets both memory
  (300..3400 MB, Table I's overall range) and threads (60..240 in steps of 4 = one core);
  uniform, normal (mean 0.5, sd 1/6), low and high resource skew (mean one sd lower, higher),
  the normal ones truncated to [0, 1].

Randomness comes only from seeded generators. The draws do not depend on ``f``, so one job
set can be realized with any offload share (:meth:`JobDraw.realize`). Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from coshare.model import MILLI, Device, Job, Node
from coshare.sim.applications import TABLE_I, Application
from coshare.sim.jobs import SimJob, split_phases

#: The time unit: mean run time alone (3568 s x 8 devices / 1000 jobs, paper Table II MC).
MEAN_RUN_S = 28.5
#: Run times and phase lengths vary uniformly by this fraction around their mean.
SPREAD = 0.5
#: Memory requests come in steps of this many MiB (the paper's "increments of 50MB").
MEMORY_STEP_MIB = 50
#: Offloads per job at most (beyond this the interleaving is already fine-grained).
MAX_OFFLOADS = 50
#: Offloads per job by application (Table I's problem-size column, capped; KM: none given).
OFFLOADS: dict[str, int] = {"KM": 20, "MC": 50, "MD": 5, "SG": 10, "BT": 50, "SP": 50, "LU": 50}
#: Host resources per job and per node (the paper's servers: 2 x 8 cores).
JOB_CPU_MILLI = MILLI
JOB_MEMORY_MIB = 1024
NODE_CORES = 16
NODE_MEMORY_MIB = 65536
#: The paper's coprocessor: Xeon Phi 5110P, 8 GB, 60 cores x 4 threads.
PHI_MEMORY_MIB = 8192
PHI_THREADS = 240

#: The synthetic distributions of Fig. 7, by the names the command line uses.
DISTRIBUTIONS = ("uniform", "normal", "low-skew", "high-skew")
#: Standard deviation of the normal distributions of the resource level.
SIGMA = 1.0 / 6.0
#: Synthetic ranges: Table I's overall memory range, and its thread range.
SYNTH_MEMORY_MIB = (300, 3400)
SYNTH_THREADS = (60, 240)
THREAD_STEP = 4


@dataclass(frozen=True, slots=True)
class JobDraw:
    """A job's random draws, independent of the offload share.

    Attributes:
        job: what the scheduler sees.
        duration_s: run time alone.
        host_weights: relative host phase lengths (one more than offloads).
        offload_weights: relative offload lengths.
    """

    job: Job
    duration_s: float
    host_weights: tuple[float, ...]
    offload_weights: tuple[float, ...]

    def realize(self, offload_share: float) -> SimJob:
        """The job with phases for offload share ``offload_share``."""
        return SimJob(
            self.job,
            split_phases(self.duration_s, offload_share, self.host_weights, self.offload_weights),
        )


def realize(draws: Sequence[JobDraw], offload_share: float) -> tuple[SimJob, ...]:
    """Every job of a set with phases for ``offload_share``."""
    return tuple(d.realize(offload_share) for d in draws)


def paper_cluster(nodes: int) -> tuple[Node, ...]:
    """``nodes`` servers as in the paper: 16 cores, 64 GiB, one Xeon Phi 5110P each."""
    return tuple(
        Node(
            name=f"phi{i + 1:02d}",
            cpu_milli=NODE_CORES * MILLI,
            memory_mib=NODE_MEMORY_MIB,
            devices=(Device("0", PHI_MEMORY_MIB, PHI_THREADS, "phi-5110p"),),
        )
        for i in range(nodes)
    )


def _draw(rng: random.Random, job: Job, offloads: int) -> JobDraw:
    duration = MEAN_RUN_S * rng.uniform(1.0 - SPREAD, 1.0 + SPREAD)
    host = tuple(rng.uniform(1.0 - SPREAD, 1.0 + SPREAD) for _ in range(offloads + 1))
    off = tuple(rng.uniform(1.0 - SPREAD, 1.0 + SPREAD) for _ in range(offloads))
    return JobDraw(job, duration, host, off)


def _job(index: int, memory_mib: int, threads: int, program: str | None) -> Job:
    return Job(
        id=f"{index + 1}.0",
        device_memory_mib=memory_mib,
        device_threads=threads,
        cpu_milli=JOB_CPU_MILLI,
        memory_mib=JOB_MEMORY_MIB,
        program=program,
    )


def _step(rng: random.Random, low: int, high: int, step: int) -> int:
    return low + step * rng.randint(0, (high - low) // step)


def table1_draws(count: int, seed: int = 0) -> tuple[JobDraw, ...]:
    """``count`` Table I jobs: an application uniformly, memory uniform in its range."""
    rng = random.Random(f"table1:{seed}")
    out = []
    for i in range(count):
        app: Application = rng.choice(TABLE_I)
        memory = _step(rng, app.memory_min_mib, app.memory_max_mib, MEMORY_STEP_MIB)
        offloads = min(OFFLOADS[app.name], MAX_OFFLOADS)
        out.append(_draw(rng, _job(i, memory, app.threads, app.name), offloads))
    return tuple(out)


def resource_level(rng: random.Random, distribution: str) -> float:
    """A resource level in [0, 1] drawn from one of :data:`DISTRIBUTIONS`."""
    if distribution == "uniform":
        return rng.random()
    mean = {"normal": 0.5, "low-skew": 0.5 - SIGMA, "high-skew": 0.5 + SIGMA}.get(distribution)
    if mean is None:
        raise ValueError(f"unknown distribution {distribution!r} (known: {DISTRIBUTIONS})")
    while True:  # truncated normal: redraw outside [0, 1]
        x = rng.gauss(mean, SIGMA)
        if 0.0 <= x <= 1.0:
            return x


def synthetic_draws(distribution: str, count: int, seed: int = 0) -> tuple[JobDraw, ...]:
    """``count`` synthetic jobs whose memory and threads grow together (Fig. 7)."""
    rng = random.Random(f"{distribution}:{seed}")
    lo_m, hi_m = SYNTH_MEMORY_MIB
    lo_t, hi_t = SYNTH_THREADS
    out = []
    for i in range(count):
        x = resource_level(rng, distribution)
        memory = lo_m + MEMORY_STEP_MIB * round(x * (hi_m - lo_m) / MEMORY_STEP_MIB)
        threads = lo_t + THREAD_STEP * round(x * (hi_t - lo_t) / THREAD_STEP)
        out.append(_draw(rng, _job(i, memory, threads, distribution), rng.randint(5, MAX_OFFLOADS)))
    return tuple(out)


#: The paper's job sets by name, each a builder ``(count, seed) -> draws``: a new job set is
#: one entry here.
JOB_SETS: dict[str, Callable[[int, int], tuple[JobDraw, ...]]] = {
    "table1": table1_draws,
    **{name: partial(synthetic_draws, name) for name in DISTRIBUTIONS},
}
