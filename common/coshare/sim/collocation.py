"""Wu & Hong's collocation experiment (section IV-C), simulated with the live policy objects.

The workload (``wu-hong``): 4 nodes of 12 cores and 3 GPUs; 32 GPU jobs of ``ppn`` 12, one
per row of Table III (each SHOC configuration, with its measured CPU load and cudaMemcpy
bandwidth), run 7-13 minutes (uniform); 300 CPU jobs, an NPB type of Table II uniformly and
``ppn`` 2, 4 or 8 (Table II's process counts), run 0.5-11 minutes. All are in the pool at
time 0; each requests 115% of its run time and is killed when it runs past it.

**The one calibrated input**: the paper gives the CPU jobs' range (0.5-11 minutes) and, from
its conventional run (where nothing slows them), their total work: 195,162 core-seconds.
Uniform run times would give 2.3 times that (about 483,000), so the range's shape is not
uniform. coshare draws them from an exponential truncated to the range, its scale set so
that the expected total is the paper's (``calibrated_cpu_scale_s``): short jobs dominate,
as the paper's remark that the killed jobs were "short CPU jobs" suggests. Nothing else is
fitted.

The execution model takes only the paper's inputs:

- a GPU job keeps ``load`` of its 12 cores busy (Table III) and is never slowed (section
  III-B2, Fig. 4: with the combined load within the cores, every GPU job stayed within 10%;
  the paper gives no model, so 0 is assumed);
- a CPU job keeps its ``ppn`` cores busy; on a GPU job's lent cores it runs ``1 + S`` times
  slower, ``S = P b e^(a B)`` (section III-B3, Table IV's ``a`` and ``b`` for its type, ``P``
  its processes, ``B`` the GPU job's copy bandwidth); elsewhere it runs at its own speed;
- the policy never lets the combined load exceed the cores (lent cores are those the load
  leaves idle), so no CPU-overcommit slowdown is modeled; the paper gives none either;
- node daemons sample loads every 60 s (:class:`~coshare.sim.facts.MeasuredFacts`), and the
  planner runs 1 s after a job ends and every 60 s while jobs wait (Maui's polling).

Metrics as the paper defines them (section IV-C): makespan; effective CPU utilization (CPU
jobs' core-seconds plus GPU jobs' load x time, over cores x makespan); GPU utilization (GPU
jobs' device-seconds over devices x makespan); jobs killed; and the GPU jobs' under-used
core-seconds split by why they were not lent. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from coshare.cycle.verify import check_plan
from coshare.errors import CoshareError
from coshare.ledger.facts import attach
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies.base import Policy
from coshare.policies.collocate import harvest_pool_milli
from coshare.sim.facts import JobTraits, MeasuredFacts, NodeHardware

#: Table III (SHOC, 12 processes): name and configuration, time alone (s), CPU load (cores
#: busy of 12), cudaMemcpy bandwidth per process (MB/s).
TABLE_III: tuple[tuple[str, float, float, float], ...] = (
    ("FFT-1", 6.50, 2.22, 39.43),
    ("FFT-120", 18.47, 1.19, 13.86),
    ("FFT-240", 30.60, 0.72, 8.36),
    ("FFT-360", 42.64, 0.54, 6.00),
    ("MD-2000", 7.91, 9.87, 0.81),
    ("MD-4000", 10.92, 7.69, 0.58),
    ("MD-10000", 20.77, 4.83, 0.31),
    ("MD-30000", 55.68, 2.82, 0.11),
    ("Reduction-1", 0.90, 1.17, 35.41),
    ("Reduction-10", 4.51, 0.70, 70.98),
    ("Reduction-20", 8.86, 0.61, 72.26),
    ("Reduction-30", 13.15, 0.59, 73.03),
    ("Scan-1", 0.44, 1.04, 36.72),
    ("Scan-4", 1.42, 0.79, 28.10),
    ("Scan-8", 2.79, 0.65, 25.80),
    ("Scan-16", 5.52, 0.57, 24.62),
    ("SGEMM-1", 1.20, 2.98, 53.19),
    ("SGEMM-4", 4.37, 1.26, 36.63),
    ("SGEMM-8", 8.58, 0.75, 33.56),
    ("SGEMM-20", 21.21, 0.35, 31.68),
    ("Sort-1", 2.74, 1.43, 140.00),
    ("Sort-8", 8.81, 1.57, 348.81),
    ("Sort-16", 16.29, 1.54, 377.08),
    ("Sort-24", 23.77, 1.54, 387.77),
    ("Spmv-1", 6.69, 5.99, 13.50),
    ("Spmv-4", 18.37, 2.60, 4.96),
    ("Spmv-8", 33.19, 1.50, 2.78),
    ("Spmv-16", 62.10, 0.86, 1.53),
    ("Triad-1", 0.75, 5.05, 576.64),
    ("Triad-10", 7.07, 4.94, 611.14),
    ("Triad-20", 14.30, 4.92, 604.20),
    ("Triad-30", 21.65, 4.99, 598.48),
)
#: Table IV: the slowdown model's coefficients ``a`` (per MB/s) and ``b`` per NPB type.
TABLE_IV: dict[str, tuple[float, float]] = {
    "CG": (0.00761, 0.00151),
    "EP": (0.0001, 0.007),
    "FT": (0.00563, 0.00230),
    "IS": (0.00420, 0.00641),
    "MG": (0.00457, 0.00330),
}
#: Table II's process counts (the CPU jobs' ``ppn``).
CPU_PPN = (2, 4, 8)

#: Section IV-C's setup and results (conventional Torque/Maui -> collocation-enabled).
NODES, CORES, GPUS_PER_NODE = 4, 12, 3
GPU_JOBS, CPU_JOBS = 32, 300
GPU_RUN_S, CPU_RUN_S = (7 * 60.0, 13 * 60.0), (0.5 * 60.0, 11 * 60.0)
REQUEST_FACTOR = 1.15
#: Section IV-C's figures per metric: (conventional run, collocation run); ``None``: not given.
PAPER: dict[str, tuple[float | None, float]] = {
    "makespan_s": (9345.0, 7857.0),
    "cpu_utilization": (0.545, 0.640),
    "gpu_utilization": (0.530, 0.631),
    "killed": (None, 2.3),
}
#: Section IV-C's split of the ~188,000 under-used core-seconds (P_M 1/3, P_B 9).
PAPER_SPLIT = {"monitoring": 0.333, "cap": 0.103, "collectible": 0.564}
#: The collectible share the paper reports for its "stronger" policy (P_M 1/5).
PAPER_STRONGER_COLLECTIBLE = 0.751
PAPER_UNDERUSED_CORE_S = 188_000.0
#: The CPU jobs' core-seconds in the paper's conventional run (section IV-C): an input that
#: fixes the run-time distribution's scale, never the result.
PAPER_CPU_CORE_S = 195_162.0
SAMPLE_INTERVAL_S = 60.0
POLL_S = 60.0
#: Nodes publish loads only: no bandwidth probe or resctrl in this experiment.
_NO_PROBE = NodeHardware()


class CollocationSimError(CoshareError):
    """A plan broke the contract in the simulation (a bug, never expected)."""


@dataclass(frozen=True)
class WuHongJob:
    """One job of the workload and what the model needs to run it.

    Attributes:
        job: what the planner sees (declared cores, devices, requested time, copy bandwidth).
        duration_s: run time alone.
        load_cores: cores it keeps busy.
        app: its Table III or Table II name.
        slowdown_ab: Table IV's ``(a, b)`` of a CPU job's type (``None`` for GPU jobs).
    """

    job: Job
    duration_s: float
    load_cores: float
    app: str
    slowdown_ab: tuple[float, float] | None = None


def wu_hong_nodes() -> tuple[Node, ...]:
    """The paper's 4 nodes: 12 cores, 3 GPUs (M2070: 6 GB, 14 SMs), 24 GB (section III-A1)."""
    gpus = tuple(Device(str(i), 6144, 14 * 1536, "m2070") for i in range(GPUS_PER_NODE))
    return tuple(Node(f"n{i + 1}", CORES * MILLI, 24 * 1024, gpus) for i in range(NODES))


def truncated_exp_mean(scale_s: float, low_s: float, high_s: float) -> float:
    """Mean of an exponential of ``scale_s`` truncated to ``[low_s, high_s]``."""
    width = high_s - low_s
    tail = math.exp(-width / scale_s)
    return low_s + scale_s - width * tail / (1.0 - tail)


def calibrated_cpu_scale_s() -> float:
    """The scale at which the CPU jobs' expected core-seconds are the paper's 195,162."""
    target = PAPER_CPU_CORE_S / (CPU_JOBS * sum(CPU_PPN) / len(CPU_PPN))
    low, high = 1.0, 1e6
    for _ in range(100):  # bisection: the mean grows with the scale
        mid = (low + high) / 2
        low, high = (mid, high) if truncated_exp_mean(mid, *CPU_RUN_S) < target else (low, mid)
    return (low + high) / 2


def wu_hong_workload(seed: int) -> list[WuHongJob]:
    """The 332 jobs of section IV-C, drawn with ``seed``."""
    rng = random.Random(seed)
    scale = calibrated_cpu_scale_s()
    low, high = CPU_RUN_S
    keep = 1.0 - math.exp(-(high - low) / scale)
    jobs = []
    for k, (name, _, load, copy_bw) in enumerate(TABLE_III[:GPU_JOBS]):
        duration = rng.uniform(*GPU_RUN_S)
        job = Job(
            f"g{k + 1}",
            512,
            0,
            device_count=GPUS_PER_NODE,
            cpu_milli=CORES * MILLI,
            memory_mib=4096,
            walltime_s=REQUEST_FACTOR * duration,
            copy_bw_mbps=copy_bw,
        )
        jobs.append(WuHongJob(job, duration, load, name))
    for k in range(CPU_JOBS):
        kind, ppn = rng.choice(sorted(TABLE_IV)), rng.choice(CPU_PPN)
        duration = low - scale * math.log(1.0 - rng.random() * keep)
        job = Job(
            f"c{k + 1}",
            device_count=0,
            kind="cpu",
            cpu_milli=ppn * MILLI,
            memory_mib=ppn * 512,
            walltime_s=REQUEST_FACTOR * duration,
        )
        jobs.append(WuHongJob(job, duration, float(ppn), kind, TABLE_IV[kind]))
    return jobs


def copy_slowdown(processes: int, ab: tuple[float, float], copy_bw_mbps: float) -> float:
    """Section III-B3's ``S = P b e^(a B)``: a CPU job's slowdown beside a GPU job."""
    a, b = ab
    return processes * b * math.exp(a * copy_bw_mbps)


@dataclass
class _Running:
    spec: WuHongJob
    node: str
    devices: tuple[str, ...]
    start_s: float
    left_s: float  # run time alone still to do
    harvest_from: str | None = None
    rate: float = 1.0


@dataclass(frozen=True)
class CollocationRun:
    """One simulated run of the workload under one policy.

    Attributes:
        policy: the policy's name (with its P_M and P_B for ``collocate``).
        seed: the workload's seed.
        makespan_s: time of the last end.
        cpu_utilization: effective CPU utilization (section IV-C's definition).
        gpu_utilization: GPU jobs' device-seconds over devices x makespan.
        killed: jobs killed for running past their request (115% of their time alone).
        requeued: jobs requeued because a GPU job's load rose (0 with Table III's constant
            loads: the paper's irregular jobs are not modeled).
        cpu_job_core_s: CPU jobs' core-seconds (ppn x time run, killed jobs included).
        gpu_job_core_s: GPU jobs' core-seconds (12 x time run).
        idle_core_s: cores neither job kind held (scheduling).
        harvested_core_s: core-seconds CPU jobs ran on lent cores.
        underused_core_s: GPU jobs' cores their load left idle, x time.
        split: ``underused_core_s`` by why it was not lendable: ``monitoring``, ``cap`` (P_B
            and whole cores), ``copy_bw`` (above the threshold), ``collectible`` (the rest).
        cycles: planning cycles run.
        mean_cpu_slowdown: mean run time over time alone of the CPU jobs that ended.
        not_run: jobs that never ended (the live cycle's run stops when the rest can never
            start; the fast engine runs every job).
    """

    policy: str
    seed: int
    makespan_s: float
    cpu_utilization: float
    gpu_utilization: float
    killed: int
    requeued: int
    cpu_job_core_s: float
    gpu_job_core_s: float
    idle_core_s: float
    harvested_core_s: float
    underused_core_s: float
    split: dict[str, float] = field(default_factory=dict)
    cycles: int = 0
    mean_cpu_slowdown: float = 1.0
    not_run: int = 0


def underused_split(
    jobs: Sequence[WuHongJob],
    monitor_fraction: float,
    max_harvest_cores: int,
    copy_bw_limit_mbps: float,
) -> dict[str, float]:
    """The GPU jobs' idle core-seconds by why they could not be lent (section IV-C's split).

    Computed from the jobs' own run times, loads and requests, as the paper's accounting:
    idle during the monitoring period, idle above ``P_B`` (or the part of a core a whole-core
    cpuset cannot lend), idle on a GPU job above the copy threshold, and the rest.
    """
    out = {"monitoring": 0.0, "cap": 0.0, "copy_bw": 0.0, "collectible": 0.0}
    for spec in jobs:
        job = spec.job
        if not job.needs_device or job.walltime_s is None:
            continue
        idle = job.total_cpu_milli / MILLI - spec.load_cores
        watched = min(spec.duration_s, monitor_fraction * job.walltime_s)
        rest = spec.duration_s - watched
        out["monitoring"] += idle * watched
        if (job.copy_bw_mbps or 0.0) > copy_bw_limit_mbps:
            out["copy_bw"] += idle * rest
            continue
        probe = RunningJob(job.id, "", cpu_milli=job.total_cpu_milli)
        pool = harvest_pool_milli(probe, spec.load_cores, max_harvest_cores) / MILLI
        out["collectible"] += pool * rest
        out["cap"] += (idle - pool) * rest
    return out


def run_wu_hong(
    policy: Policy,
    seed: int,
    *,
    split_params: tuple[float, int, float] | None = None,
    cycle_delay_s: float = 1.0,
) -> CollocationRun:
    """Run the workload of ``seed`` under ``policy``; every plan is checked with
    :func:`coshare.cycle.verify.check_plan` (the simulation stops on a broken plan).

    Args:
        split_params: ``(P_M, P_B, threshold)`` for the under-used split (default: the
            paper's 1/3, 9, 300).
    """
    return _Sim(wu_hong_nodes(), wu_hong_workload(seed), policy, cycle_delay_s).run(
        seed, split_params or (1 / 3, 9, 300.0)
    )


def wu_hong_facts(jobs: Sequence[WuHongJob]) -> MeasuredFacts:
    """What the node daemons publish in this experiment: each job's load (Table III's, or a
    CPU job's ``ppn``), sampled every :data:`SAMPLE_INTERVAL_S`; no bandwidth probe."""
    return MeasuredFacts(
        traits={s.job.id: JobTraits(cpu_load_cores=s.load_cores) for s in jobs},
        default=_NO_PROBE,
        sample_interval_s=SAMPLE_INTERVAL_S,
    )


class LentCoreModel:
    """How the workload's jobs run once started: the execution model of this module's
    docstring, whoever decides the starts (the fast engine here, the live cycle's in-memory
    scheduler in :mod:`coshare.sim.live`).

    A CPU job on a running GPU job's lent cores (``harvest_from``) runs ``1 + S`` times
    slower (:func:`copy_slowdown`) while that job runs, at its own speed once it ended; a job
    still running at its request (115% of its time alone) is killed. The caller moves the
    clock forward (:meth:`advance`) and ends what is due (:meth:`end_due`, at
    :meth:`next_end_s`); every start and stop changes the rates at once.
    """

    def __init__(self, nodes: Sequence[Node], jobs: Sequence[WuHongJob]) -> None:
        self.nodes = tuple(nodes)
        self.specs = {s.job.id: s for s in jobs}
        self.running: dict[str, _Running] = {}
        self.ended: dict[str, tuple[float, float, bool]] = {}  # start, end, killed
        self.harvested_core_s = 0.0
        self.requeued = 0
        self.now = 0.0

    def start(
        self, job_id: str, node: str, devices: tuple[str, ...], harvest_from: str | None, now: float
    ) -> None:
        """``job_id`` starts at ``now`` on ``node`` (on ``harvest_from``'s lent cores)."""
        self.advance(now)
        spec = self.specs[job_id]
        self.running[job_id] = _Running(spec, node, devices, now, spec.duration_s, harvest_from)
        self.rates()

    def stop(self, job_id: str, now: float) -> None:
        """``job_id`` is requeued at ``now``: its work is lost; it starts again later."""
        self.advance(now)
        if self.running.pop(job_id, None) is not None:
            self.requeued += 1
        self.rates()

    def next_end_s(self) -> float:
        """When the next running job ends or is killed (``inf``: none runs)."""
        best = math.inf
        for r in self.running.values():
            deadline = r.start_s + (r.spec.job.walltime_s or math.inf)
            best = min(best, self.now + r.left_s / r.rate, deadline)
        return best

    def advance(self, t: float) -> None:
        """Run every job at its rate from the model's clock to ``t``."""
        if t <= self.now:
            return
        span = t - self.now
        for r in self.running.values():
            r.left_s -= span * r.rate
            if r.harvest_from is not None and r.harvest_from in self.running:
                self.harvested_core_s += span * r.spec.job.total_cpu_milli / MILLI
        self.now = t

    def end_due(self, now: float) -> list[str]:
        """End every job done or past its request at ``now``; returns them."""
        self.advance(now)
        done = [
            (i, r)
            for i, r in self.running.items()
            if r.left_s <= 1e-6 or now >= r.start_s + (r.spec.job.walltime_s or math.inf) - 1e-6
        ]
        for i, r in done:
            self.ended[i] = (r.start_s, now, r.left_s > 1e-6)
            del self.running[i]
        if done:
            self.rates()
        return [i for i, _ in done]

    def rates(self) -> None:
        """Each running job's speed: ``1 / (1 + S)`` beside its lender, else 1."""
        for r in self.running.values():
            donor = self.running.get(r.harvest_from or "")
            if donor is None or r.spec.slowdown_ab is None:
                r.rate = 1.0
                continue
            bw = donor.spec.job.copy_bw_mbps or 0.0
            slow = copy_slowdown(int(r.spec.load_cores), r.spec.slowdown_ab, bw)
            r.rate = 1.0 / (1.0 + slow)

    def result(
        self, policy: str, seed: int, split_params: tuple[float, int, float], cycles: int
    ) -> CollocationRun:
        """Section IV-C's metrics of the jobs that ended."""
        makespan = max((end for _, end, _ in self.ended.values()), default=0.0)
        cpu_core_s = gpu_core_s = busy = device_s = 0.0
        slowdowns = []
        for i, (start, end, killed) in self.ended.items():
            spec = self.specs[i]
            ran = end - start
            busy += spec.load_cores * ran
            if spec.job.needs_device:
                gpu_core_s += spec.job.total_cpu_milli / MILLI * ran
                device_s += spec.job.device_count * ran
            else:
                cpu_core_s += spec.load_cores * ran
                if not killed:
                    slowdowns.append(ran / spec.duration_s)
        cores = sum(n.cpu_milli for n in self.nodes) / MILLI
        devices = sum(len(n.devices) for n in self.nodes)
        total = cores * makespan
        split = underused_split(list(self.specs.values()), *split_params)
        # Lent cores are counted in both kinds' core-seconds; the idle is what neither held.
        idle = total - cpu_core_s - gpu_core_s + self.harvested_core_s
        return CollocationRun(
            policy=policy,
            seed=seed,
            makespan_s=makespan,
            cpu_utilization=busy / total if total else 0.0,
            gpu_utilization=device_s / (devices * makespan) if makespan else 0.0,
            killed=sum(1 for _, _, k in self.ended.values() if k),
            requeued=self.requeued,
            cpu_job_core_s=cpu_core_s,
            gpu_job_core_s=gpu_core_s,
            idle_core_s=idle,
            harvested_core_s=self.harvested_core_s,
            underused_core_s=sum(split.values()),
            split=split,
            cycles=cycles,
            mean_cpu_slowdown=sum(slowdowns) / len(slowdowns) if slowdowns else 1.0,
            not_run=len(self.specs) - len(self.ended),
        )


class _Sim:
    """The fast engine: a cycle ``cycle_delay_s`` after each end, and every :data:`POLL_S`
    while jobs wait; starts take effect at once."""

    def __init__(
        self, nodes: tuple[Node, ...], jobs: list[WuHongJob], policy: Policy, cycle_delay_s: float
    ) -> None:
        self.nodes = nodes
        self.model = LentCoreModel(nodes, jobs)
        self.specs = self.model.specs
        self.running = self.model.running
        self.policy = policy
        self.delay = cycle_delay_s
        self.pending: dict[str, None] = dict.fromkeys(s.job.id for s in jobs)
        self.cycles = 0
        self.facts = wu_hong_facts(jobs)

    def run(self, seed: int, split_params: tuple[float, int, float]) -> CollocationRun:
        now, due = 0.0, self.delay
        while self.pending or self.running:
            tick = (math.floor(now / POLL_S) + 1) * POLL_S if self.pending else math.inf
            t = min(self.model.next_end_s(), due, tick)
            if math.isinf(t):
                raise CollocationSimError(
                    f"jobs {', '.join(list(self.pending)[:5])} can never start"
                )
            now = t
            if self.model.end_due(now):
                due = min(due, now + self.delay)
            if now >= due or now >= tick:
                if now >= due:
                    due = math.inf
                self._cycle(now)
        return self.model.result(self.policy.name, seed, split_params, self.cycles)

    def _snapshot(self, now: float) -> Snapshot:
        running = []
        for i, r in self.running.items():
            job = r.spec.job
            running.append(
                RunningJob(
                    i,
                    r.node,
                    r.devices,
                    job.device_memory_mib,
                    job.device_threads,
                    job.total_cpu_milli,
                    job.total_memory_mib,
                    start_time_s=r.start_s,
                    walltime_s=job.walltime_s,
                    copy_bw_mbps=job.copy_bw_mbps,
                    harvest_from=r.harvest_from if r.harvest_from in self.running else None,
                )
            )
        pending = tuple(self.specs[i].job for i in self.pending)
        snap = Snapshot(self.nodes, tuple(running), pending, now_s=now)
        return attach(snap, self.facts.facts(now, snap.nodes, snap.running))

    def _cycle(self, now: float) -> None:
        if not self.pending:
            return
        self.cycles += 1
        snapshot = self._snapshot(now)
        plan = self.policy.plan(snapshot)
        problems = check_plan(snapshot, plan)
        if problems:
            raise CollocationSimError(f"{plan.policy} at t={now:g}: " + "; ".join(problems[:3]))
        for u in plan.requeue:  # through the scheduler: the job starts again later
            self.model.stop(u.job, now)
            self.pending[u.job] = None
        for a in plan.assignments:
            del self.pending[a.job]
            self.model.start(a.job, a.node, a.devices, a.harvest_from, now)


#: The sweep of ``P_M`` and ``P_B`` printed beside the paper's runs (section IV-C names
#: 1/3 and 9, and a "stronger" 1/5 whose ``P_B`` the text garbles; 2 and 12 bracket it).
SWEEP_MONITOR = (1 / 5, 1 / 3, 1 / 2)
SWEEP_HARVEST = (2, 6, 9, 12)
