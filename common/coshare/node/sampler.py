"""The node daemon's measurements: each round, the node's facts for the planner.

Every ``node.sample_interval_s`` (a minute by default, the collocation paper's resolution)
the daemon reads each job's CPU time from its cgroup into the jobs' load history
(:mod:`coshare.node.load`), and its tasks' run-queue delay (``/proc/<tid>/schedstat`` of
each task its group lists) into a second history of the same length, the LLC ways resctrl
has and coshare's groups hold (:mod:`coshare.node.resctrl`), the last memory-bandwidth probe
(:mod:`coshare.node.membw`), and, where NVML starts, each GPU job's copy bandwidth (PCIe
throughput of the GPUs it holds alone, :func:`coshare.node.harvest.copy_bandwidths`); every
``node.probe_interval_s`` it first probes the cores no job holds, when the node has a
baseline. It writes the result as one line of facts
(:func:`coshare.ledger.facts.format_facts`), with the answers to the trial requests it probed
(``trial=``, :mod:`coshare.node.trial_requests`), to ``state_dir/facts``, readable by all, for the
scheduler's publisher: HTCondor's startd cron (``deploy/condor/coshare-facts``) or Slurm's
(``coshare-slurm-facts``). A measurement that fails is logged and left out of that round's
facts; it never stops the daemon.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from coshare.config import NodeConfig
from coshare.errors import CoshareError, Unsupported
from coshare.ledger.facts import JobCopy, JobCpus, JobWait, MembwFacts, NodeFacts, format_facts
from coshare.model import TrialResult
from coshare.node.cgroups import Cgroups
from coshare.node.harvest import copy_bandwidths
from coshare.node.jobs import JobRecord, JobStore
from coshare.node.load import LoadHistory, RunDelays
from coshare.node.membw import ProbeFiles, probe
from coshare.node.procfs import PROC, read_run_delays
from coshare.node.resctrl import Resctrl
from coshare.node.spec import format_cpu_list

log = logging.getLogger("coshare.node.sampler")

#: The facts file's name in ``node.state_dir``.
FACTS_FILE = "facts"


class PcieThroughput(Protocol):
    """PCIe throughput per GPU (NVML: :class:`coshare.node.nvml.NvmlMemory`)."""

    def canonical(self, device: str) -> str:
        """The GPU's index, for an index or a UUID."""
        ...

    def pcie_mbps(self) -> Mapping[str, float]:
        """TX + RX MB/s of each GPU, by index; raises :class:`~coshare.errors.NodeError`."""
        ...


def facts_path(config: NodeConfig) -> Path:
    """Where the node's facts line is."""
    return Path(config.state_dir) / FACTS_FILE


class Sampler:
    """One node's measurements, round after round.

    Args:
        config: the node section.
        store: the node's job records.
        cgroups: the cgroup driver (for free cores).
        resctrl: the resctrl mount.
        clock: epoch seconds (the facts' time).
        monotonic: seconds for load intervals (never jumps).
        pcie: PCIe throughput of the node's GPUs; ``None``: no NVML here (no copy facts).
        proc: the proc(5) mount (tasks' ``schedstat``).
        trials: the trial answers to publish for the node's jobs
            (:meth:`coshare.node.trial_requests.NodeTrials.published`); ``None``: none.

    Attributes:
        wait_unsupported: why no run-queue delay is published (``None``: it is measured).
    """

    def __init__(
        self,
        config: NodeConfig,
        store: JobStore,
        cgroups: Cgroups,
        resctrl: Resctrl,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        pcie: PcieThroughput | None = None,
        proc: Path = PROC,
        trials: Callable[[Sequence[str]], tuple[TrialResult, ...]] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.cgroups = cgroups
        self.resctrl = resctrl
        self.clock = clock
        self.monotonic = monotonic
        self.pcie = pcie
        self.history = LoadHistory(config.load_history)
        self.proc = proc
        self.trials = trials
        self.delays = RunDelays()
        self.wait_history = LoadHistory(config.load_history)
        self.wait_unsupported: Unsupported | None = None
        self.files = ProbeFiles(Path(config.state_dir))
        self.next_probe_s = 0.0
        self._said: set[str] = set()

    def _once(self, key: str, message: str, *args: object) -> None:
        """Log a lasting condition once, not every round."""
        if key not in self._said:
            self._said.add(key)
            log.warning(message, *args)

    def loads(self, records: list[JobRecord]) -> None:
        """Add each job's CPU time to its history, and its tasks' run-queue delay to the
        other; forget jobs that ended."""
        jobs = [r.job for r in records]
        for kept in (self.history, self.delays, self.wait_history):
            kept.retain(jobs)
        now = self.monotonic()
        for record in records:
            try:
                group = record.group(self.config.kill_timeout_s)
                used = group.cpu_usage_s()
            except (CoshareError, OSError) as exc:  # one job's group must not hide the others
                log.debug("job %s: no CPU time this round: %s", record.job, exc)
                continue
            self.history.add(record.job, now, used)
            self.wait(record.job, group.task_ids, now)

    def wait(self, job: str, task_ids: Callable[[], tuple[int, ...]], now: float) -> None:
        """Add the run-queue delay of ``job``'s tasks to its wait history. A kernel without
        per-task scheduler statistics stops it for good (said once, with the path)."""
        if self.wait_unsupported is not None:
            return
        try:
            delays = read_run_delays(task_ids(), self.proc)
        except Unsupported as exc:
            self.wait_unsupported = exc
            self._once("wait", "no run-queue delay facts: %s", exc)
            return
        except (CoshareError, OSError) as exc:
            log.debug("job %s: no run-queue delay this round: %s", job, exc)
            return
        self.wait_history.add(job, now, self.delays.add(job, delays))

    def waits(self) -> tuple[JobWait, ...]:
        """Each job's run-queue delay, in cores, over the history and its last interval
        (none where the kernel does not count it: never a figure it did not measure)."""
        if self.wait_unsupported is not None:
            return ()
        return tuple(
            JobWait(s.job, s.mean_cores, s.last_cores) for s in self.wait_history.summaries()
        )

    def ways(self) -> tuple[int | None, int | None]:
        """The node's LLC ways and the free ones; ``(None, None)`` without resctrl."""
        try:
            # free: the ways no job is allocated (its own, from the records), whether or not
            # they are lent out as spare shares now (lent ways are reclaimed for a new job)
            allocated = {
                r.job: r.spec.llc_ways for r in self.store.records() if r.spec.llc_ways is not None
            }
            return self.resctrl.cache().ways, self.resctrl.ways_free(allocated)
        except (CoshareError, OSError) as exc:
            self._once("ways", "no LLC way facts: %s", exc)
            return None, None

    def free_cpus(self, records: list[JobRecord]) -> tuple[int, ...]:
        """Cores no job holds (where a periodic probe runs)."""
        held = {c for r in records for c in r.spec.cpus}
        return tuple(c for c in self.cgroups.allowed_cpus() if c not in held)

    def probe_if_due(self, records: list[JobRecord]) -> None:
        """Probe the free cores when ``node.probe_interval_s`` has passed and the node has a
        baseline (never without: a probe then has nothing to be compared with)."""
        interval = self.config.probe_interval_s
        now = self.monotonic()
        if interval <= 0 or now < self.next_probe_s:
            return
        self.next_probe_s = now + interval
        if not self.files.baseline_path.exists():
            self._once(
                "baseline",
                "no membw probes: no baseline in %s (run `coshare node "
                "probe membw --init` on the idle node)",
                self.files.baseline_path,
            )
            return
        free = self.free_cpus(records)
        if not free:
            log.debug("no membw probe: every core is held by a job")
            return
        try:
            result, _ = probe(
                self.files,
                self.cgroups.allowed_cpus(),
                free,
                size_mib=self.config.probe_array_mib,
                clock=self.clock,
            )
        except (CoshareError, OSError) as exc:
            log.error("membw probe on cores %s failed: %s", format_cpu_list(free), exc)
            return
        log.info(
            "membw probe on cores %s: %.2f GB/s, %.0f%% of the idle %.2f GB/s",
            format_cpu_list(free),
            result.measurement.gbps,
            100 * result.fraction,
            result.baseline_gbps,
        )

    def membw(self) -> MembwFacts | None:
        """The last recorded probe, as facts."""
        last = self.files.last()
        if last is None:
            return None
        m = last.measurement
        return MembwFacts(m.gbps, last.baseline_gbps, len(m.cpus), m.at_s)

    def copies(self, records: list[JobRecord]) -> tuple[JobCopy, ...]:
        """Each GPU job's copy bandwidth now; none without NVML, or when NVML fails."""
        if self.pcie is None:
            return ()
        try:
            per_gpu = self.pcie.pcie_mbps()
        except (CoshareError, OSError) as exc:
            log.error("no copy bandwidth facts this round: %s", exc)
            return ()
        devices = {r.job: [self.pcie.canonical(d) for d in r.spec.devices] for r in records}
        return tuple(JobCopy(job, mbps) for job, mbps in copy_bandwidths(devices, per_gpu).items())

    def round(self) -> NodeFacts:
        """Measure, write ``state_dir/facts``, and return the facts.

        Raises:
            NodeError: the job records cannot be listed, or the facts cannot be written.
        """
        records = self.store.records()
        self.probe_if_due(records)
        self.loads(records)
        ways, free = self.ways()
        # The cores each pinned job holds now: a lender's load never exceeds them (collocate).
        held = tuple(JobCpus(r.job, len(r.spec.cpus)) for r in records if r.spec.cpus)
        trials = self.trials([r.job for r in records]) if self.trials is not None else ()
        facts = NodeFacts(
            self.clock(),
            self.membw(),
            ways,
            free,
            tuple(self.history.summaries()),
            self.copies(records),
            held,
            self.waits(),
            trials,
        )
        write_facts(facts_path(self.config), format_facts(facts))
        return facts


def write_facts(path: Path, text: str) -> None:
    """Write the facts line atomically, readable by all (a publisher may run as another
    account, or inside HTCondor's chroot)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    tmp.chmod(0o644)
    os.replace(tmp, path)
