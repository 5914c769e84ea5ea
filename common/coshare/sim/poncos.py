"""The ``poncos`` workload: poncos' Table 1 and the two queues of its section 8.

Breitbart, Weidendorfer and Trinitis (``shared/papers/membw-coscheduling-poncos.md``). What
the paper gives, and is used as input:

- **Table 1**: ``distgen_membw_available()`` on half the cores while the application runs
  on the other half; a job's *use* is ``1 - available`` (Hydro 52.7%, LAMA 46.6%, MPIBlast
  92.5%, Heat alg. 2 41.0%, Heat alg. 9 76.5% available).
- **The setup** (section 8): one node, two scheduling domains of 8 cores (4 per socket);
  every job uses one domain (``heat ... -t 8``), so two jobs share the node at most.
- **The queues**: heat2, heat9, heat9, heat2, heat9, heat9; and LAMA, MPIBlast, LAMA.
- **The rule** (section 7): co-schedule while the uses sum to at most 90%.

What the paper does *not* give as text, and what coshare assumes (labelled in the output):

- **Run times alone**: only LAMA's is in the text (44.0 s on 8 threads, section 4); the
  others are plotted (Fig. 1) but not printed, so every application is assumed to take the
  same 44.0 s. Makespans are therefore in units of one run; the *order* of the schedule and
  which pairs co-run do not depend on it.
- **Slowdown**: the paper measured that co-running bandwidth-bound jobs "drastically
  reduces the performance of both" (section 5) and that Heat alg. 2 runs slower beside
  alg. 9 (Fig. 7, values not printed). :class:`BandwidthModel` is the simplest model with
  that shape and no fitted constant: a job spends ``1 - u`` of its time computing and ``u``
  streaming memory (``u`` its Table 1 use); while the uses of a node's jobs sum to ``D > 1``
  every stream gets ``1/D`` of what it asks, so the job runs at ``1 / ((1 - u) + u * D)``
  of its speed alone. Below ``D = 1`` nothing slows, so the model cannot show the slowdown
  of Fig. 7 (heat2 + heat9 sum to 0.825).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coshare.model import MILLI, Job, Node, RunningJob, Snapshot
from coshare.policies.base import Policy
from coshare.policies.exclusive import ExclusivePolicy
from coshare.policies.membw import MembwPolicy
from coshare.sim.device import Token
from coshare.sim.engine import SimOptions, SimResult, simulate
from coshare.sim.facts import JobTraits, MeasuredFacts, NodeHardware
from coshare.sim.jobs import SimJob, host_only
from coshare.sim.rates import RatedRuns

#: Table 1: ``distgen_membw_available()`` in percent, by program (the paper's names aside).
AVAILABLE_PERCENT: dict[str, float] = {
    "hydro": 52.7,
    "lama": 46.6,
    "mpiblast": 92.5,
    "heat2": 41.0,
    "heat9": 76.5,
}
NAMES = {
    "hydro": "Hydro",
    "lama": "LAMA",
    "mpiblast": "MPIBlast",
    "heat2": "Heat alg. 2",
    "heat9": "Heat alg. 9",
}
#: Each program's use, ``1 - available`` (Table 1's second column): the recorded measurements.
USE: dict[str, float] = {p: round(1 - a / 100, 3) for p, a in AVAILABLE_PERCENT.items()}
#: Section 8 as written: "poncos will prevent the co-scheduling of Hydro, Lama, Heat with
#: algorithm 9 with each other, whereas all other combinations are fine".
PAPER_TEXT_REFUSED = frozenset({"hydro", "lama", "heat9"})
QUEUES: dict[str, tuple[str, ...]] = {
    "queue 1": ("heat2", "heat9", "heat9", "heat2", "heat9", "heat9"),
    "queue 2": ("lama", "mpiblast", "lama"),
    # Not the paper's: two bandwidth-bound runs first, where the rule has something to do.
    "queue 3": ("heat2", "heat2", "heat9", "heat9"),
}
#: LAMA's CG solver on 8 threads (section 4, text); assumed for every application.
RUN_ALONE_S = 44.0
DOMAIN_CORES = 8
#: The node: 2 x 8 cores, 128 GB (section 2); its probe's baseline is arbitrary (shares count).
NODE = Node("poncos", 2 * DOMAIN_CORES * MILLI, 128 * 1024)
BASELINE_GBPS = 40.0
MAX_SHARE = 0.9
#: poncos waits out each application's initialization with a timer "that fits well with our
#: test applications" (section 7, value not given); the node daemons sample every 10 s here.
INIT_S = 10.0


class BandwidthModel(RatedRuns):
    """Jobs on one node slow down while their memory bandwidth uses sum above 1 (see the
    module docstring); CPU jobs only, the engine tells it each job's node (``on_node``)."""

    def __init__(self, use_by_program: Mapping[str, float]) -> None:
        super().__init__()
        self.use_by_program = use_by_program
        self._use: dict[int, float] = {}
        self._node: dict[int, str] = {}

    def on_node(self, job: int, node: str) -> None:
        """The engine's hook: ``job`` is about to start on ``node``."""
        self._node[job] = node

    def start(self, job: int, devices: tuple[int, ...], now: float) -> None:
        sim_job = self._jobs[job]
        self._use[job] = self.use_by_program.get(sim_job.job.program or "", 0.0)
        node = self._node[job]
        self._begin(job, sim_job.duration_s, (node,), now)
        self._rerate(node, now)

    def handle(self, token: Token, now: float) -> int | None:
        job = self._current(token)
        if job is None:
            return None  # its rate changed after this end was scheduled
        node = self._node[job]
        self._leave(job, (node,))
        self._rerate(node, now)
        return job

    def demand(self, node: str) -> float:
        """The summed use of the jobs running on ``node``."""
        return sum(self._use[j] for j in self._on.get(node, ()))

    def _rerate(self, node: str, now: float) -> None:
        total = self.demand(node)
        for j in sorted(self._on.get(node, ())):
            u = self._use[j]
            self._set_rate(j, 1.0 if total <= 1.0 else 1.0 / ((1.0 - u) + u * total), now)


def admits(old: str, new: str, max_share: float = MAX_SHARE) -> bool:
    """Whether the ``membw`` policy starts a ``new`` job beside a running ``old`` one, with
    Table 1 recorded: the live policy asked, on a one-node snapshot."""
    running = RunningJob(
        "old", NODE.name, cpu_milli=DOMAIN_CORES * MILLI, program=old, start_time_s=0.0
    )
    snapshot = Snapshot((NODE,), (running,), (_job("new", new),))
    return MembwPolicy(max_share=max_share, programs=USE).plan(snapshot).placed == 1


def _job(job_id: str, program: str, submit_s: float = 0.0) -> Job:
    return Job(
        job_id,
        kind="cpu",
        device_count=0,
        cpu_milli=DOMAIN_CORES * MILLI,
        program=program,
        submit_time_s=submit_s,
    )


@dataclass(frozen=True)
class Variant:
    """One way to run a queue.

    Attributes:
        name: as printed.
        policy: the policy.
        note: what it stands for.
    """

    name: str
    policy: Policy
    note: str


VARIANTS = (
    Variant("dedicated", ExclusivePolicy(), "one job at a time (the paper's dedicated runs)"),
    Variant(
        "membw",
        MembwPolicy(max_share=MAX_SHARE, programs=USE, init_s=INIT_S),
        "the 90% rule, Table 1 recorded per program",
    ),
    Variant(
        "membw, nothing recorded",
        MembwPolicy(max_share=MAX_SHARE, init_s=INIT_S),
        "the 90% rule, no record and no trial co-runs (the live cycles today)",
    ),
    Variant(
        "cores only",
        MembwPolicy(max_share=float("inf"), programs=USE, init_s=INIT_S),
        "two jobs per node whatever their bandwidth (no rule)",
    ),
)


def queue_jobs(queue: Sequence[str]) -> list[SimJob]:
    """The queue's jobs, in order, all submitted at 0 (priority: queue order)."""
    return [
        host_only(_job(f"{k + 1}-{p}", p, submit_s=k * 1e-3), RUN_ALONE_S)
        for k, p in enumerate(queue)
    ]


def run_queue(queue: Sequence[str], variant: Variant) -> SimResult:
    """Run ``queue`` on the node under ``variant``; the policy reads the facts a node daemon
    would publish (its probe finding the baseline less the running jobs' uses)."""
    jobs = queue_jobs(queue)
    facts = MeasuredFacts(
        traits={s.job.id: JobTraits(membw_share=USE[s.job.program or ""]) for s in jobs},
        default=NodeHardware(membw_baseline_gbps=BASELINE_GBPS, probe_cores=DOMAIN_CORES),
        sample_interval_s=10.0,
    )
    return simulate(
        [NODE],
        jobs,
        variant.policy,
        options=SimOptions(cycle_delay_s=0.0),
        model=BandwidthModel(USE),
        facts=facts,
    )
