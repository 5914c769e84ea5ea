"""Node facts in the simulator: what a node daemon would measure, from each job's traits.

The live planner sees node facts (:mod:`coshare.ledger.facts`): each running job's CPU load, the
memory bandwidth still available on a node's free cores, its LLC ways and the free ones.
So that a policy sees the same inputs simulated, the engine asks a :class:`FactsModel` for
every node's facts each cycle and attaches them with :func:`coshare.ledger.facts.attach`, the very
function the adapters use after parsing what the nodes published.

:class:`MeasuredFacts` models the measurement, not just the truth:

- **sampling**: facts are as of the last sampling round (every ``sample_interval_s``, the
  collocation paper's minute); a job is in them once it ran a whole interval, and its history
  covers at most ``history`` intervals;
- **CPU load**: each job's declared trait (``cpu_load_cores``: for example Table III of the
  collocation paper gives each GPU benchmark's load); constant, so mean, last and highest
  agree;
- **memory bandwidth**: the probe on the free cores finds the node's idle baseline times
  ``1 - sum`` of the running jobs' shares (poncos section 7: a job's use is ``1 -
  available``), never below ``min_available`` (the probe's own accesses always complete,
  section 6: it never reads 0);
- **LLC ways**: the node's ways less those of the running jobs that hold some.

What a job's traits are is its workload's business (the workloads give them from the papers);
a job without traits contributes nothing, as a job the node cannot measure. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coshare.ledger.facts import JobLoad, MembwFacts, NodeFacts
from coshare.model import Node, RunningJob


@dataclass(frozen=True)
class JobTraits:
    """How a job loads its node when it runs.

    Attributes:
        cpu_load_cores: cores it keeps busy (its cgroup's CPU time per second).
        membw_share: share of its node's memory bandwidth it uses (0..1).
        llc_ways: LLC ways its resctrl group holds.
    """

    cpu_load_cores: float | None = None
    membw_share: float | None = None
    llc_ways: int | None = None


@dataclass(frozen=True)
class NodeHardware:
    """What a node's probe and resctrl would find when it is idle.

    Attributes:
        membw_baseline_gbps: the probe's bandwidth on the idle node's free cores.
        probe_cores: cores the probe runs on (for the facts' ``membw_cores``).
        llc_ways: ways resctrl offers (``None``: no resctrl).
    """

    membw_baseline_gbps: float | None = None
    probe_cores: int = 1
    llc_ways: int | None = None


class FactsModel(Protocol):
    """Yields every node's facts at a cycle.

    Contract: ``facts`` returns facts only for nodes of ``nodes``, measured no later than
    ``now_s``; a node it has nothing for is left out (planned without facts).
    """

    def facts(
        self, now_s: float, nodes: Sequence[Node], running: Sequence[RunningJob]
    ) -> Mapping[str, NodeFacts]:
        """The facts each node published last, as of ``now_s``."""
        ...


@dataclass(frozen=True)
class MeasuredFacts:
    """Facts as node daemons sampling every ``sample_interval_s`` would publish them.

    Attributes:
        traits: each job's traits, by job id.
        hardware: each node's idle measurements, by node name (``default`` for the others).
        default: the hardware of a node not named in ``hardware`` (``None``: no facts for it).
        sample_interval_s: the daemons' sampling interval.
        history: intervals of load history a daemon keeps.
        min_available: the least share of bandwidth a probe ever finds.
    """

    traits: Mapping[str, JobTraits] = field(default_factory=dict)
    hardware: Mapping[str, NodeHardware] = field(default_factory=dict)
    default: NodeHardware | None = None
    sample_interval_s: float = 60.0
    history: int = 60
    min_available: float = 0.05

    def facts(
        self, now_s: float, nodes: Sequence[Node], running: Sequence[RunningJob]
    ) -> Mapping[str, NodeFacts]:
        sampled = math.floor(now_s / self.sample_interval_s) * self.sample_interval_s
        by_node: dict[str, list[RunningJob]] = {}
        for job in running:
            if job.state == "running":
                by_node.setdefault(job.node, []).append(job)
        out = {}
        for node in nodes:
            hardware = self.hardware.get(node.name, self.default)
            if hardware is None:
                continue
            jobs = by_node.get(node.name, [])
            out[node.name] = NodeFacts(
                sampled,
                self._membw(hardware, jobs, sampled),
                hardware.llc_ways,
                self._free_ways(hardware, jobs),
                self._loads(jobs, sampled),
            )
        return out

    def _loads(self, jobs: Sequence[RunningJob], sampled: float) -> tuple[JobLoad, ...]:
        loads = []
        for job in sorted(jobs, key=lambda j: j.id):
            load = self.traits.get(job.id, JobTraits()).cpu_load_cores
            if load is None or job.start_time_s is None:
                continue
            # Sampled at every interval boundary from the first after its start: two samples
            # (one whole interval) make a load.
            first = (
                math.ceil(job.start_time_s / self.sample_interval_s - 1e-9) * self.sample_interval_s
            )
            intervals = round((sampled - first) / self.sample_interval_s)
            if intervals < 1:
                continue
            window = min(intervals, self.history) * self.sample_interval_s
            loads.append(JobLoad(job.id, load, load, load, window))
        return tuple(loads)

    def _membw(
        self, hardware: NodeHardware, jobs: Sequence[RunningJob], sampled: float
    ) -> MembwFacts | None:
        if hardware.membw_baseline_gbps is None:
            return None
        # The probe ran at ``sampled``: a job started since is not in it.
        used = sum(
            self.traits.get(j.id, JobTraits()).membw_share or 0.0
            for j in jobs
            if j.start_time_s is None or j.start_time_s < sampled
        )
        available = max(1.0 - used, self.min_available)
        return MembwFacts(
            hardware.membw_baseline_gbps * available,
            hardware.membw_baseline_gbps,
            hardware.probe_cores,
            sampled,
        )

    def _free_ways(self, hardware: NodeHardware, jobs: Sequence[RunningJob]) -> int | None:
        if hardware.llc_ways is None:
            return None
        held = sum(self.traits.get(j.id, JobTraits()).llc_ways or 0 for j in jobs)
        return max(hardware.llc_ways - held, 0)
