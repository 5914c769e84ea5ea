"""Configuration: a YAML file loaded into frozen dataclasses.

Precedence, lowest first: the defaults below < the YAML file < ``COSHARE_<SECTION>_<KEY>``
environment variables < command-line flags (applied by the CLI with :func:`with_overrides`).
The file is found at ``--config PATH``, else ``$COSHARE_CONFIG``, else
``/etc/coshare/config.yaml`` when it exists; nothing is read at import time.

Unknown keys are errors that list the valid keys; values are checked for type and range.
One generic loader (:func:`build`) reads every section, so a new section is one more
dataclass field on :class:`Config`. A key that was renamed (a section's ``RENAMED``) still
works for one release, with a ``FutureWarning`` naming the new key; given under both names
it is an error.

Example (also ``coshare config show``)::

    device_kinds:
      phi-5110p: {memory_mib: 8192, threads: 240}
    policy:
      name: sharepack       # exclusive | random | knapsack | bestfit | fgd | sharepack
      threads: strict       # strict: declared threads per device never exceed T; soft: may
      seed: 0
      age_limit_s: 3600     # jobs older than this are placed first (null: never)
      order: scheduler      # scheduler: the scheduler's own priority orders jobs; coshare
      priority_band: 0      # knapsack: jobs this many priority units apart fill devices apart
    knapsack:
      memory_grid_mib: 64
    node:
      devices: {"0": 240}   # offload gate: hardware threads per device
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union

import yaml

from coshare.errors import ConfigError
from coshare.ledger.book import kind_index
from coshare.ledger.bounds import (
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_THREADS,
    MAX_MEMORY_MIB,
    MAX_SIM_WORKERS,
    plain,
    shorten,
    shorten_text,
    unknown_name,
)
from coshare.ledger.ids import ALLOWED_ID, MAX_TEXT_CHARS, id_problem, text_problem
from coshare.model import DeviceKind as DeviceKind  # moved to the model; this name stays
from coshare.model import ThreadMode
from coshare.system.files import MAX_CONFIG_CHARS, TooLarge, read_bounded

PlanOrder = Literal["scheduler", "coshare"]
"""``policy.order``: whose priority orders the jobs coshare plans (:class:`PolicyConfig`)."""

C = TypeVar("C")

DEFAULT_CONFIG_PATH = Path("/etc/coshare/config.yaml")
ENV_PREFIX = "COSHARE_"
#: ``COSHARE_`` variables coshare itself uses that are not settings, with what each is: where
#: the config, the traces and the node scripts are, what the node helpers export to a job,
#: and what the deploy/ scripts read. Every other ``COSHARE_`` variable is a setting
#: (``COSHARE_<SECTION>_<KEY>``) or is warned about; these are never warned about.
NOT_SETTINGS: Mapping[str, tuple[str, str]] = {
    # where things are
    "COSHARE_CONFIG": ("where", "the YAML configuration (else /etc/coshare/config.yaml)"),
    "COSHARE_TRACE_DIR": ("where", "the traces' folder of `coshare simulate` (else --data)"),
    "COSHARE_LIBEXEC": (
        "where",
        "HTCondor configuration macro: where coshare-devices, coshare-facts and the job "
        "wrapper are installed (/usr/libexec/coshare)",
    ),
    "COSHARE_BIN": ("where", "deploy/condor/pool: the coshare command's folder (a venv's bin/)"),
    # what a job is given by the node helpers
    "COSHARE_JOB_ID": ("job", "the job's id on its node (its node daemon's name for it)"),
    "COSHARE_NODE": ("job", "the node the job runs on, as its placement names it"),
    "COSHARE_DEVICES": ("job", "the devices of the job's placement, by the plan's ids"),
    "COSHARE_CPUS": ("job", "the cores of the job's group (a cpu list)"),
    "COSHARE_GATE_SOCKET": ("job", "the node's offload gate socket"),
    "COSHARE_DEVICE_MEMORY": ("job", "the device memory the job declared (HTCondor)"),
    "COSHARE_DEVICE_MEMORY_MIB": ("job", "the device memory the job declared, MiB (Slurm)"),
    "COSHARE_DEVICE_THREADS": ("job", "the device threads the job declared"),
    "COSHARE_DEVICE_COMPUTE": ("job", "the compute share the job declared (HTCondor)"),
    "COSHARE_SPREAD": ("job", "a Spread-n-Share job's spread: scale, nodes, cores per node"),
    "COSHARE_LLC_WAYS": ("job", "a Spread-n-Share job's LLC ways on this node"),
    "COSHARE_MEMBW_PERCENT": ("job", "a Spread-n-Share job's memory bandwidth cap (MBA), %"),
    "COSHARE_LEND_SLOT_TYPE": (
        "deploy",
        "HTCondor configuration macro: the slot type of the execute nodes' lend slots",
    ),
    # the deploy/ scripts' own (local clusters, the trigger, the facts publisher)
    "COSHARE_SLURM_CTLD_PORT": ("deploy", "deploy/slurm/local-cluster: slurmctld's port"),
    "COSHARE_SLURM_NODE_PORT": ("deploy", "deploy/slurm/local-cluster: the slurmds' first port"),
    "COSHARE_SLURM_DBD_PORT": ("deploy", "deploy/slurm/local-cluster: slurmdbd's port"),
    "COSHARE_SLURM_CGROUP_PREFIX": (
        "deploy",
        "deploy/slurm/local-cluster: the cgroup folder its slurmds' jobs go under",
    ),
    "COSHARE_PG_PORT": ("deploy", "deploy/postgres: the local PostgreSQL's port"),
    "COSHARE_PG_LISTEN": ("deploy", "deploy/postgres: the address it listens on"),
    "COSHARE_TRIGGER": (
        "deploy",
        "HTCondor configuration macro: the coshare command the schedd's trigger runs",
    ),
    "COSHARE_TRIGGER_ARGS": ("deploy", "HTCondor configuration macro: the trigger's arguments"),
    "COSHARE_TRIGGER_CONFIG": ("deploy", "HTCondor configuration macro: the trigger's config"),
    "COSHARE_TRIGGER_LOG": ("deploy", "HTCondor configuration macro: the trigger's log file"),
    "COSHARE_FACTS": ("deploy", "HTCondor startd cron job name of coshare-facts"),
}


class ConfigWarning(UserWarning):
    """A setting that is probably mistyped but harms nothing (an environment variable that
    looks like a setting and is not one): said on standard error, never fatal."""


def _default_device_kinds() -> Mapping[str, DeviceKind]:
    return {
        # Intel Xeon Phi 5110P: 60 cores x 4 hardware threads, 8 GB (the paper's cluster).
        "phi-5110p": DeviceKind(memory_mib=8192, threads=240),
        # NVIDIA GPUs: threads = SMs x 2048 resident threads.
        "v100-16g": DeviceKind(memory_mib=16384, threads=80 * 2048),
        "a100-40g": DeviceKind(memory_mib=40960, threads=108 * 2048),
        "h100-80g": DeviceKind(memory_mib=81559, threads=132 * 2048),
    }


#: A ``CoshareProgram`` name (coshare.ledger.annotations' rule).
_PROGRAM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


#: A command on the nodes (``policy.membw.probe_command``): a name or a path, nothing a
#: shell or srun would read otherwise.
_COMMAND_PATH = re.compile(r"[A-Za-z0-9_./+-]{1,4096}")


def _default_membw_programs() -> Mapping[str, float]:
    return {}


@dataclass(frozen=True)
class MembwConfig:
    """Options of the ``membw`` policy (poncos, Breitbart et al., sections 6-7).

    Attributes:
        max_share: the jobs on one node use at most this share of its memory bandwidth
            together (poncos section 7: 0.9, "a decrease in performance once congestion on
            the main memory gets closer to the maximum"); a job alone on a node always runs.
        init_s: a running job counts as measured by its node's probe only once it ran this
            long before the probe (poncos section 7 waits out the initialization phase with a
            timer).
        max_suspend_s: a job suspended after a failed trial co-run longer than this is
            requeued with the reason.
        programs: recorded measurements: each program's (``CoshareProgram``) share of its
            node's bandwidth, ``1 - available`` as the probe measured it (Table 1); an
            entry here wins over a measured one.
        trials: live trial co-runs (poncos section 7): a job of unknown use starts beside
            jobs of known use, is measured after ``init_s`` with them frozen, and is kept or
            suspended through the scheduler (:mod:`coshare.ledger.trials`); off: it waits for a
            node of its own.
        record_file: the JSON file where the cycle records each program's measured share,
            so that the next job of that program needs no trial; ``null``: only the trial
            records of jobs still in the queue remember it.
        probe_inject_file: test hook: the trials' measurements are read from this JSON file
            (``{"jobs": {ID: share}, "programs": {NAME: share}}``, ``null`` a failed
            probe) instead of probing the node; for tests on noisy machines.
        probe_socket: the node daemon's control socket a trial's probe asks (``{node}`` is
            the node's name), as seen where the probe is sent from (``probe_via``).
        probe_timeout_s: a trial's probe that takes longer fails (the job is unmeasured).
        probe_via: how a trial's probe reaches the node's daemon: ``socket``, from the
            planner's host (``probe_socket`` must be reachable there: the planner runs on
            the node, or the nodes' sockets are on a shared path); ``step``, through the
            scheduler, as a step of the trial job on its node that runs ``coshare node
            trial`` (Slurm: ``srun --jobid=J --overlap``; HTCondor offers none); ``facts``,
            no connection to the node at all (HTCondor): the node's daemon reads the trial's
            ``measuring`` record from the scheduler (``node.trial_requests``), probes, and
            answers in its node facts (:class:`coshare.cycle.trials.FactsProbe`).
        facts_wait_s: ``probe_via: facts``: a trial whose answer is not in its node's facts
            this long after the request (the ``measuring`` record) failed its probe (the job
            is unmeasured). The answer takes the daemon's ``node.sample_interval_s``, the
            publisher's period (HTCondor's startd cron: 60 s) and the startd's collector
            update (``UPDATE_INTERVAL``, 300 s by default) at most, and the next cycle.
        probe_command: ``coshare`` on the nodes, for ``probe_via: step`` (a name found in
            the step's ``PATH``, or an absolute path).
    """

    max_share: float = field(default=0.9, metadata={"min": 0, "max": 1})
    init_s: float = field(default=60.0, metadata={"min": 0})
    max_suspend_s: float = field(default=3600.0, metadata={"min": 0})
    programs: Mapping[str, float] = field(
        default_factory=_default_membw_programs, metadata={"min": 0, "max": 1}
    )
    trials: bool = False
    record_file: str | None = None
    probe_inject_file: str | None = None
    probe_socket: str = "/run/coshare/control.sock"
    probe_timeout_s: float = field(default=30.0, metadata={"min": 0.1, "max": 3600})
    probe_via: Literal["socket", "step", "facts"] = "socket"
    probe_command: str = "coshare"
    facts_wait_s: float = field(default=600.0, metadata={"min": 1, "max": 86400})

    def __post_init__(self) -> None:
        if _COMMAND_PATH.fullmatch(self.probe_command) is None:
            raise ConfigError(
                f"policy.membw.probe_command: {shorten(self.probe_command)} is "
                "not a command name or path (allowed: 1-4096 of A-Z a-z 0-9 "
                "_ . / + -)"
            )
        # The keys are CoshareProgram values, so they follow that annotation's rule
        # (coshare.ledger.annotations): a key no job can name would be a silent typo.
        for name in self.programs:
            if _PROGRAM_NAME.fullmatch(name) is None:
                raise ConfigError(
                    f"policy.membw.programs: {shorten(name)} is not a program "
                    "name (allowed: 1-64 of A-Z a-z 0-9 _ . -, as CoshareProgram)"
                )


@dataclass(frozen=True)
class SnsConfig:
    """Options of the ``sns`` and ``cs`` policies (Spread-n-Share, Tang et al., sections
    4.3-4.4).

    Attributes:
        profiles_dir: the profile store, one ``PROGRAM.json`` per program
            (:mod:`coshare.profiles.store`); every file is checked when a cycle starts, and a
            bad one stops it naming the file and field. ``null``: no profiles (every job runs
            compact, "no profile for X").
        default_alpha: the slowdown threshold of a job without ``CoshareAlpha``, in (0, 1]
            (section 4.3: 0.9).
        ways_weight: ``beta``, the weight of occupied LLC ways in the idleness score
            ``C_o + B_o + beta * W_o`` (section 4.4: 2).
        mba: cap each placed job's memory bandwidth on every node at what ``sns`` admitted
            for it (its profile's ``b``), with Intel MBA (resctrl ``MB:``) where the node has
            it (section 4.4: "Memory bandwidth allocation can be done by Intel's recent MBA
            technique"; the paper's nodes had none); off: bandwidth is admitted by the
            profiles only, as on the paper's testbed.
        learn: learn profiles from normal runs (section 4.2): a program without a profile
            runs alone at scale 1, its next run alone at scale 2, ... until spreading stops
            helping; the learned entries (``profiles_dir/learned/``) are planned with once
            the trials are over; an admin's profile always wins (coshare.profiles.learning).
        learn_from: the job-end spool the cycle reads the nodes' measurements from (the
            nodes' ``node.job_end_dir``, on a file system both see); ``null``: learned
            entries are still planned with, none is updated.
    """

    profiles_dir: str | None = None
    default_alpha: float = field(default=0.9, metadata={"min": 0, "max": 1})
    ways_weight: float = field(default=2.0, metadata={"min": 0, "max": 100})
    mba: bool = False
    learn: bool = False
    learn_from: str | None = None

    def __post_init__(self) -> None:
        if self.learn and self.profiles_dir is None:
            raise ConfigError(
                "policy.sns.learn: learned profiles are kept in policy.sns.profiles_dir/"
                "learned/; set policy.sns.profiles_dir"
            )
        if self.default_alpha <= 0:
            raise ConfigError(
                f"policy.sns.default_alpha: {plain(self.default_alpha)} is out of "
                "range (allowed: a number in (0, 1])"
            )


@dataclass(frozen=True)
class PolicyConfig:
    """Options shared by the policies.

    Attributes:
        name: the policy the cycle uses.
        threads: ``strict`` keeps the declared threads of the jobs on a device within its
            hardware threads; ``soft`` lets them exceed it where the node's offload gate
            serializes offloads (the paper's COSMIC).
        seed: seed of the ``random`` policy (and of any tie-breaking that needs one).
        age_limit_s: a job pending longer than this is placed before any other, and a device
            is held back for it if it fits none now; ``null`` disables aging.
        max_reserved_devices: at most this many devices are held back per cycle for aged jobs.
        max_reserved_gangs: at most this many aged multi-node jobs hold back nodes per cycle
            (backfill's reservation); 0 disables their reservations.
        order: whose order the jobs are planned in: ``scheduler``: the scheduler's own
            priority of each job (Slurm's multifactor priority, HTCondor's negotiator order)
            is the snapshot's ``priority``, so coshare plans its jobs in the order the
            scheduler alone would start them; ``coshare``: the adapters report the job's own
            priority as before (Slurm: none for a held job) and the policies' size and age
            rules order the rest. Aging (``age_limit_s``) holds under both.
        priority_band: the knapsack's (and sharepack's when devices are contended) priority
            bands: jobs whose priorities fall in one band of this many units
            (``floor(priority / priority_band)``) share devices by the knapsack's value rule,
            and a higher band's jobs fill the devices before a lower band's are offered; 0:
            one band, the value rule decides across priorities (priority breaks its ties).
        membw: options of the ``membw`` policy (``policy.membw.max_share`` ...).
        sns: options of the ``sns`` and ``cs`` policies (``policy.sns.profiles_dir`` ...).
    """

    name: str = "sharepack"
    threads: ThreadMode = "strict"
    seed: int = field(default=0, metadata={"max": 2**63 - 1})
    age_limit_s: float | None = field(default=3600.0, metadata={"min": 0})
    max_reserved_devices: int = field(default=8, metadata={"min": 0})
    max_reserved_gangs: int = field(default=1, metadata={"min": 0, "max": 1024})
    order: PlanOrder = "scheduler"
    priority_band: float = field(default=0.0, metadata={"min": 0, "max": 1e18})
    membw: MembwConfig = field(default_factory=MembwConfig)
    sns: SnsConfig = field(default_factory=SnsConfig)


@dataclass(frozen=True)
class KnapsackConfig:
    """Options of the knapsack policy.

    Attributes:
        memory_grid_mib: the dynamic program's memory step; job memory is rounded *up* to it and
            free device memory *down*, so a plan never under-reserves. Smaller is tighter and
            slower (cost grows with device memory / grid).
        max_thread_cells: the thread dimension of the dynamic program has at most this many
            cells; when declared thread counts share no common step that fits, they are
            rounded up to ``threads / max_thread_cells``.
        max_memory_cells: the memory dimension has at most this many cells: on larger devices
            the step grows, so a fine ``memory_grid_mib`` never costs more (the plan then
            notes the table the finer step would have needed).
        max_dp_cells: one device's table has at most this many rows x cells (its time, and
            its bytes of choices); beyond it, dominated job sizes are dropped and the memory
            step coarsened for that device, and the plan notes it.
    """

    memory_grid_mib: int = field(default=64, metadata={"min": 1, "max": MAX_DEVICE_MEMORY_MIB})
    max_thread_cells: int = field(default=64, metadata={"min": 1})
    max_memory_cells: int = field(default=2048, metadata={"min": 1, "max": 1 << 20})
    max_dp_cells: int = field(default=1 << 22, metadata={"min": 1, "max": 1 << 28})


@dataclass(frozen=True)
class CycleConfig:
    """Options of the live planning cycle (both adapters).

    Attributes:
        replan_after_s: a job planned this long ago that has not started is planned again
            (its device may have been taken by something coshare does not manage).
        interval_s: how often the deploy files run a cycle (systemd timer, cron).
        node_facts_max_age_s: node facts (:mod:`coshare.ledger.facts`) older than this are ignored,
            with a note: the node is planned without them. The default covers a node's
            sampling (``node.sample_interval_s``, 60 s), its publisher (HTCondor startd cron,
            Slurm timer: 60 s) and HTCondor's collector update (``UPDATE_INTERVAL``, 300 s).
        failure_dir: where a cycle writes the snapshot that reproduces a policy failure it
            planned around (:mod:`coshare.cycle.containment`; ``coshare plan FILE`` shows it), one
            file per failure, named in the cycle's log; ``null``: written nowhere.
    """

    replan_after_s: float = field(default=300.0, metadata={"min": 0})
    interval_s: float = field(default=30.0, metadata={"min": 1})
    node_facts_max_age_s: float = field(default=600.0, metadata={"min": 1})
    failure_dir: str | None = "/var/lib/coshare/failures"


def _default_node_devices() -> Mapping[str, int]:
    return {}


@dataclass(frozen=True)
class NodeConfig:
    """Options of the node helpers (``coshare node ...``, :mod:`coshare.node`).

    Attributes:
        cgroup_root: where the cgroup file systems are mounted (v2: the cgroup2 mount; v1: the
            directory holding one mount per controller).
        cgroup_version: ``auto`` uses v2 when ``cgroup_root`` is a cgroup2 mount, else v1.
        cgroup_parent: the coshare-owned group under which each job gets its own group.
        state_dir: job records, kill reasons and the allocation lock live here.
        gate_socket: the offload gate's unix socket.
        devices: the hardware threads of each device the gate manages (device id -> threads).
        watch_interval_s: how often the watchdog checks memory use.
        device_memory: ``nvml`` enforces declared device memory with NVML (GPUs; needs the
            ``nvml`` extra); ``none`` does not watch device memory.
        gpu_limits: ``mps`` sets each job's MPS limits (pinned device memory, active thread
            percentage) from its placement where an MPS control daemon runs
            (:mod:`coshare.node.mps`); ``none`` sets none. The watchdog stays the backstop.
        mps_pipe_dir: the MPS control daemon's pipe directory; ``null``: the daemon's
            ``CUDA_MPS_PIPE_DIRECTORY``, else NVIDIA's default ``nvidia-mps`` in the temporary
            directory.
        device_env: variables set to the job's device ids (comma-separated) by ``job-exec``.
        kill_timeout_s: how long freezing, killing and removing a job's group may take.
        control_socket: the node daemon's job-control socket (START, JOIN, END), where job
            wrappers that run as the job's user ask the root daemon to set up and end the
            job's group (:mod:`coshare.node.control`).
        trusted_launchers: programs whose children may START a job (HTCondor's
            ``condor_starter``, Slurm's ``slurmstepd``, installed as ``slurmstepd-wlm`` by
            Debian and Ubuntu): a bare name matches the basename of the program's executable,
            an absolute path the whole executable path.
        trusted_launcher_uids: accounts a trusted launcher must run as (its real uid): 0 where
            the scheduler's daemons run as root; add the condor account of a pool whose
            daemons run unprivileged.
        cpu_overcommit: how many jobs may hold one CPU. 1 (the default): every job gets CPUs
            of its own, and a job is refused when too few are free. More is for test rigs
            that run several fake nodes, each advertising more cores than the host has, on
            one host: jobs then get the least-held CPUs, still their own while enough are free.
        max_connections_per_uid: connections one uid may hold open to each of the daemon's
            sockets; the next is refused (``ERR too_many``), so one user's flood leaves the
            others served.
        line_timeout_s: how long a request line may take to arrive whole once begun (and a
            client may leave its replies unread) before the daemon hangs up.
        idle_timeout_s: how long a gate connection that holds no grant and waits for none may
            stay silent before the daemon closes it (control connections: ``line_timeout_s``).
        watch_failure_limit: watchdog rounds in a row that may fail (or one round may take
            this many intervals, at least 60 s) before the daemon exits non-zero, for its
            service manager to restart it.
        metrics_address: ``HOST:PORT`` where the daemon serves Prometheus metrics at
            ``/metrics`` (:mod:`coshare.node.metrics`); ``null``: no metrics. Plain HTTP
            without authentication: keep it on a local or management address.
        sample_interval_s: how often the daemon samples each job's CPU load from its cgroup
            and writes the node's facts (``state_dir/facts``); the collocation paper's minute.
        load_history: samples of each job's load kept (its mean, last and highest are
            published).
        probe_interval_s: how often the daemon probes the memory bandwidth of the cores no
            job holds (when a baseline exists); 0: only when asked (``coshare node probe``).
        probe_array_mib: the probe's array; 0: four times the last-level cache, 64..1024 MiB.
        resctrl_root: where the resctrl file system is mounted (LLC ways and memory bandwidth
            per job: Intel CAT/MBA, AMD L3 QoS).
        llc_share_spare: give the LLC ways no job is allocated to the jobs holding ways, in
            equal shares, and take them back when a job comes (Spread-n-Share section 4.4);
            false: each job's group holds exactly its own ways.
        operator_uids: accounts that may FREEZE and THAW jobs over the control socket.
        trial_requests: where the daemon reads the trial co-runs to probe for
            ``policy.membw.probe_via: facts`` (answered in its facts, ``trial=``):
            ``condor``, the schedds of this node's HTCondor jobs (read-only queries through
            the ``htcondor`` bindings: the ``condor`` extra); ``none``: it reads none.
        condor_config: ``trial_requests: condor``: the HTCondor configuration file the
            bindings read (where the collector is); ``null``: HTCondor's own search
            (``CONDOR_CONFIG``, ``/etc/condor/condor_config``).
        max_freeze_s: a job frozen longer than this is thawed by the daemon (a freeze is for
            a probe, never for good).
        job_end_dir: where the node writes what it measured of each job that ends (CPU time
            of its cgroup, run time, whether it had its nodes alone; Slurm's Epilog), for the
            profiles ``sns`` learns from normal runs (``policy.sns.learn_from``, the same
            directory on a file system the planner reads); ``null``: nothing written.
    """

    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_version: Literal["auto", "v1", "v2"] = "auto"
    cgroup_parent: str = "coshare"
    state_dir: str = "/run/coshare"
    gate_socket: str = "/run/coshare/gate.sock"
    devices: Mapping[str, int] = field(
        default_factory=_default_node_devices, metadata={"min": 1, "max": MAX_DEVICE_THREADS}
    )
    watch_interval_s: float = field(default=1.0, metadata={"min": 0.01})
    device_memory: Literal["none", "nvml"] = "none"
    gpu_limits: Literal["none", "mps"] = "none"
    mps_pipe_dir: str | None = None
    device_env: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    kill_timeout_s: float = field(default=10.0, metadata={"min": 0.1})
    control_socket: str = "/run/coshare/control.sock"
    trusted_launchers: tuple[str, ...] = ("condor_starter", "slurmstepd", "slurmstepd-wlm")
    trusted_launcher_uids: tuple[int, ...] = field(default=(0,), metadata={"max": 2**32 - 2})
    cpu_overcommit: int = field(default=1, metadata={"min": 1})
    max_connections_per_uid: int = field(default=256, metadata={"min": 1})
    line_timeout_s: float = field(default=10.0, metadata={"min": 0.01})
    idle_timeout_s: float = field(default=300.0, metadata={"min": 0.01})
    watch_failure_limit: int = field(default=10, metadata={"min": 1})
    sample_interval_s: float = field(default=60.0, metadata={"min": 0.05})
    load_history: int = field(default=60, metadata={"min": 1, "max": 100_000})
    probe_interval_s: float = field(default=300.0, metadata={"min": 0})
    probe_array_mib: int = field(default=0, metadata={"min": 0, "max": 65536})
    resctrl_root: str = "/sys/fs/resctrl"
    llc_share_spare: bool = True
    operator_uids: tuple[int, ...] = field(default=(0,), metadata={"max": 2**32 - 2})
    max_freeze_s: float = field(default=60.0, metadata={"min": 0.1})
    metrics_address: str | None = None
    trial_requests: Literal["none", "condor"] = "none"
    condor_config: str | None = None
    job_end_dir: str | None = None

    def __post_init__(self) -> None:
        if self.metrics_address is not None:
            listen_address(self.metrics_address, "node.metrics_address")


#: ``HOST:PORT`` where a daemon listens: a host name or IPv4 address, or ``[IPv6]``.
_ADDRESS = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])"
    r":(?P<port>[0-9]{1,5})"
)


def listen_address(text: str, key: str) -> tuple[str, int]:
    """The (host, port) of a ``HOST:PORT`` setting (an IPv6 host in brackets, given back
    without them).

    Raises:
        ConfigError: naming ``key``, the value and what is allowed.
    """
    match = _ADDRESS.fullmatch(text)
    port = int(match["port"]) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise ConfigError(
            f"{key}: {shorten(text)} is not an address to listen on (allowed: "
            "HOST:PORT, e.g. 127.0.0.1:9810 or [::1]:9810, port 1..65535)"
        )
    return match["host"].strip("[]"), port


#: A push gateway's address: ``http(s)://HOST[:PORT][/PATH]``.
_URL = re.compile(r"https?://[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?")
_JOB_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class MetricsConfig:
    """Where planning cycles export their Prometheus metrics (:mod:`coshare.cycle.metrics`).

    Every cycle that writes (not ``--dry-run``, not ``show``) exports the figures of that
    cycle: to a file for the node exporter's textfile collector, to a push gateway, or
    both; neither is the default. A failed export is logged and never fails the cycle.

    Attributes:
        textfile_dir: the node exporter's ``--collector.textfile.directory``; each cycle
            replaces ``coshare_<scheduler>.prom`` there (written whole, then renamed).
        pushgateway: URL of a Prometheus push gateway (``http://host:9091``); each cycle
            replaces its group there (job ``push_job``, label ``scheduler``).
        push_job: the ``job`` label of the pushed group.
        push_timeout_s: how long one push may take.
    """

    textfile_dir: str | None = None
    pushgateway: str | None = None
    push_job: str = "coshare"
    push_timeout_s: float = field(default=5.0, metadata={"min": 0.1, "max": 300})

    def __post_init__(self) -> None:
        if self.pushgateway is not None and _URL.fullmatch(self.pushgateway) is None:
            raise ConfigError(
                f"metrics.pushgateway: {shorten(self.pushgateway)} is not a push "
                "gateway URL (allowed: http(s)://HOST[:PORT][/PATH])"
            )
        if _JOB_LABEL.fullmatch(self.push_job) is None:
            raise ConfigError(
                f"metrics.push_job: {shorten(self.push_job)} is not a job label "
                "(allowed: 1-64 of A-Z a-z 0-9 _ . -)"
            )


@dataclass(frozen=True)
class CondorConfig:
    """Options of the HTCondor adapter (``coshare condor ...``).

    Attributes:
        config_file: HTCondor configuration file the bindings read (as ``CONDOR_CONFIG``
            would name it); ``null``: the bindings' usual lookup (``$CONDOR_CONFIG``,
            ``/etc/condor``). Was ``condor_config``.
        collector: ``host:port`` of the collector; ``null``: ``COLLECTOR_HOST`` of that config.
        schedd: name of the schedd whose jobs are planned; ``null``: the local schedd, or the
            only one the collector knows.
        hold_invalid: hold an annotated job whose annotations are unusable, with the message
            as its hold reason; ``false``: leave it idle and only report it.
        retry_attempts: attempts of a read (and of a write that failed to connect) before
            giving up. Was ``retries``.
        retry_wait_s: seconds between attempts.
        lock_file: a cycle takes this lock so overlapping cycles (cron) never interleave;
            ``null``: no lock.
        trigger_lead_s: ``coshare condor trigger`` finishes its cycle this long (plus what
            its last cycle took) before the negotiator's next cycle is due.
        trigger_poll_s: how often the trigger reads the negotiator's ad from the collector,
            to see a negotiation cycle that started early (a submission asks for one).
        trigger_reschedule: after a cycle that placed jobs, and that ran after a negotiation
            cycle it was not ready for, the trigger asks the schedd for a negotiation now
            (``condor_reschedule``), so those jobs need not wait a whole negotiator interval.
        parallel_may_double: place parallel-universe jobs whose slot (``request_cpus``,
            ``request_memory``) fits twice on a node: HTCondor's dedicated scheduler may then
            start two of a job's processes on one planned node and none on another (coshare's
            node helpers refuse the second, and the job is held with that reason). ``false``:
            such jobs are refused, saying so; a slot of more than half a node is never
            doubled.
        lend_slots: the execute nodes have coshare's lend slots (``COSHARE_LEND_SLOT_TYPE`` in
            ``deploy/condor/config.d/20-coshare-execute.conf``: a second partitionable slot
            type that only jobs coshare placed on a running GPU job's idle cores can match),
            so live cycles apply the ``collocate`` policy's lent-core placements. ``false``:
            they wait (``unsupported``).
    """

    RENAMED: ClassVar[Mapping[str, str]] = {
        "condor_config": "config_file",
        "retries": "retry_attempts",
    }

    config_file: str | None = None
    collector: str | None = None
    schedd: str | None = None
    hold_invalid: bool = True
    retry_attempts: int = field(default=3, metadata={"min": 1})
    retry_wait_s: float = field(default=1.0, metadata={"min": 0})
    lock_file: str | None = "/run/lock/coshare-condor-cycle.lock"
    trigger_lead_s: float = field(default=2.0, metadata={"min": 0, "max": 3600})
    trigger_poll_s: float = field(default=1.0, metadata={"min": 0.1, "max": 3600})
    trigger_reschedule: bool = True
    parallel_may_double: bool = False
    lend_slots: bool = False


@dataclass(frozen=True)
class CollocateConfig:
    """Options of the ``collocate`` policy (Wu & Hong, section IV-A).

    Attributes:
        monitor_fraction: ``P_M``: a GPU job's cores are all its own for this share of its
            requested time, while its load is sampled; in (0, 1].
        max_harvest_cores: ``P_B``: at most this many of a GPU job's cores may be lent to CPU
            jobs, however idle its load leaves them (the paper's run: 9 of 12). A node with
            fewer cores is capped by its cores (the plan notes it).
        copy_bw_limit_mbps: a GPU job whose host-device copy bandwidth (MB/s per process)
            exceeds this is never collocated with (section III-B3: 300 MB/s keeps CPU jobs'
            slowdown within 10%).
    """

    monitor_fraction: float = field(default=1 / 3, metadata={"min": 0, "max": 1})
    max_harvest_cores: int = field(default=9, metadata={"min": 0, "max": 1 << 20})
    copy_bw_limit_mbps: float = field(default=300.0, metadata={"min": 0, "max": 10**9})

    def __post_init__(self) -> None:
        # The range check allows 0; a monitoring period of nothing harvests on no evidence.
        if self.monitor_fraction <= 0:
            raise ConfigError(
                f"collocate.monitor_fraction: {plain(self.monitor_fraction)} is "
                "out of range (allowed: a number in (0, 1], P_M of the paper)"
            )


@dataclass(frozen=True)
class SlurmConfig:
    """Options of the Slurm adapter (``coshare slurm ...``).

    Attributes:
        config_file: slurm.conf the Slurm commands use (exported as ``SLURM_CONF``); ``null``
            keeps the environment's (normally /etc/slurm/slurm.conf). Was ``conf``.
        bin_dir: directory of squeue, sinfo and scontrol; ``null`` searches ``PATH``.
        partition: plan only the nodes and jobs of this partition; annotated jobs of other
            partitions are refused with a message. ``null``: every node and job.
        gres_name: the GRES whose devices coshare shares (``gpu``); each device's memory and
            threads come from ``device_kinds`` by its GRES type (``gpu:phi5110p:2``).
        lend_partition: the partition (same nodes, ``OverSubscribe=FORCE``, submissions and
            moves into it refused to all but operators by ``job_submit.lua``) that coshare
            moves the jobs of a lent core into: GPU jobs the ``collocate`` policy may lend
            cores of, and the CPU-only jobs placed on them (``deploy/slurm/slurm.conf.snippet``).
            ``null``: ``collocate`` places no job on lent cores live (they wait, ``unsupported``).
        command_timeout_s: limit of each Slurm command.
        retry_attempts: tries of a command that failed because the controller was
            unreachable (tenacity, exponential wait).
        retry_wait_s: first wait between tries; it doubles up to 8 times this.
        update_batch: placements per batch: written (commands on the stdin of a few
            scontrol processes at once), confirmed by one re-read, then released together.
        workers: batches written at the same time.
        lock_file: a cycle takes this lock so overlapping cycles (cron) never interleave;
            ``null``: no lock.
    """

    RENAMED: ClassVar[Mapping[str, str]] = {"conf": "config_file"}

    config_file: str | None = None
    bin_dir: str | None = None
    partition: str | None = None
    gres_name: str = "gpu"
    lend_partition: str | None = None
    command_timeout_s: float = field(default=30.0, metadata={"min": 0.1})
    retry_attempts: int = field(default=3, metadata={"min": 1})
    retry_wait_s: float = field(default=1.0, metadata={"min": 0})
    update_batch: int = field(default=250, metadata={"min": 1})
    workers: int = field(default=4, metadata={"min": 1})
    lock_file: str | None = "/run/lock/coshare-slurm-cycle.lock"


@dataclass(frozen=True)
class SimConfig:
    """Where ``coshare simulate`` runs its independent runs (docs/sweeps.md).

    Attributes:
        executor: ``local`` (this process or local processes; nothing to install) or
            ``dask`` (the ``dask`` extra).
        workers: local processes, or Dask workers coshare starts (processes of a local Dask
            cluster, or worker jobs of ``dask_cluster``).
        retries: how often a run whose worker died is run again elsewhere before the command
            reports it failed.
        dask_scheduler: address of a running Dask scheduler (``tcp://host:8786``); ``null``:
            coshare starts a cluster of kind ``dask_cluster`` for the command.
        dask_cluster: ``local`` (worker processes on this machine), ``slurm`` or
            ``htcondor``: worker jobs of the cluster coshare serves, through dask-jobqueue
            (``SLURMCluster`` with the ``slurm`` section's config file and partition,
            ``HTCondorCluster`` with the ``condor`` section's config file).
        connect_timeout_s: how long to try to reach the scheduler.
        worker_timeout_s: how long to wait for the first worker before giving up, and how
            long runs wait once no worker is left (then they are reported failed).
        scheduler_host: address the scheduler coshare starts listens on; ``null``: Dask's
            choice; ``127.0.0.1`` when the workers run on this host.
        worker_cores: cores of each worker job (one run per core).
        worker_memory_mib: memory of each worker job.
        worker_python: the workers' interpreter, as the worker jobs see it; ``null``: this
            one (nodes that share this installation).
        worker_prologue: shell lines each worker job runs first (``export PYTHONPATH=...``).
        worker_extra_args: more arguments of each worker (``--no-nanny`` where the jobs
            cannot use POSIX semaphores, as in the local pool's chroot).
        worker_walltime: walltime of a Slurm worker job (``HH:MM:SS``).
        log_directory: where worker jobs write their output, as they see it; ``null``:
            nowhere.
    """

    executor: Literal["local", "dask"] = "local"
    workers: int = field(default=1, metadata={"min": 1, "max": MAX_SIM_WORKERS})
    retries: int = field(default=2, metadata={"min": 0, "max": 100})
    dask_scheduler: str | None = None
    dask_cluster: Literal["local", "slurm", "htcondor"] = "local"
    connect_timeout_s: float = field(default=10.0, metadata={"min": 0.1})
    worker_timeout_s: float = field(default=300.0, metadata={"min": 1})
    scheduler_host: str | None = None
    worker_cores: int = field(default=1, metadata={"min": 1})
    worker_memory_mib: int = field(default=2048, metadata={"min": 256})
    worker_python: str | None = None
    worker_prologue: tuple[str, ...] = ()
    worker_extra_args: tuple[str, ...] = ()
    worker_walltime: str = "01:00:00"
    log_directory: str | None = None


#: A planner's or instance's name (``coordination.domain``, ``coordination.instance``).
_PLANNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
#: The longest planner lease (a day): a dead planner's reservations are gone by then.
MAX_LEASE_S = 86_400.0


@dataclass(frozen=True)
class CoordinationConfig:
    """Several planners over shared nodes (PICASO): the engine they coordinate
    through. Absent (``dsn: null``, the default): one planner, no engine, nothing changes.

    Attributes:
        dsn: the PostgreSQL connection string (libpq's ``host=/var/run/coshare-pg port=5432
            dbname=coshare user=coshare``, or a ``postgresql://`` URL);
            ``deploy/postgres/local-postgres start`` prints one. A password belongs in
            ``~/.pgpass`` or ``PGPASSWORD``, not here (messages name the host and port,
            never the DSN).
        domain: this planner's name among the planners (its lease and reservations are
            keyed by it); ``null``: the scheduler's name (``condor``, ``slurm``). Two
            instances of one planner (high availability) give the same domain.
        instance: this instance's name (who holds the lease); ``null``: the host name. Two
            instances of one planner give different names.
        lease_s: the planner's lease: renewed by every cycle, lost when no cycle renews it
            for this long; then the other instance takes over and this planner's
            reservations are released. Longer than ``cycle.interval_s`` plus a cycle's run.
        connect_timeout_s: give up reaching the engine after this long (the cycle then
            writes nothing and exits 1 naming the address).
        fence_every_s: how long after its last check of the lease a cycle checks it again
            before the next batch it writes (it always checks before the first): ``0``
            before every batch; ``null``: a quarter of ``lease_s``. Below ``lease_s``, so
            every batch starts within the lease (no other instance can take it over
            before); each check is one round trip to the engine.
        protocol: how reservations of gangs gathered piecewise resolve contention (PICASO
            section 4): ``cancel`` (active cancellation: a higher request takes back lower
            reservations, which wait again) or ``sequencer`` (every request draws a ticket
            from the engine's sequence and each unit is granted in ticket order: nothing is
            cancelled). Every planner over one engine uses the same: a cycle whose protocol
            differs from a live planner's is refused, naming both.
    """

    dsn: str | None = None
    domain: str | None = None
    instance: str | None = None
    lease_s: float = field(default=120.0, metadata={"min": 1, "max": MAX_LEASE_S})
    connect_timeout_s: float = field(default=5.0, metadata={"min": 0.1, "max": 300})
    fence_every_s: float | None = field(default=None, metadata={"min": 0, "max": MAX_LEASE_S})
    protocol: Literal["cancel", "sequencer"] = "cancel"

    def __post_init__(self) -> None:
        if self.fence_every_s is not None and self.fence_every_s >= self.lease_s:
            raise ConfigError(
                f"coordination.fence_every_s: {self.fence_every_s:g} is not below "
                f"coordination.lease_s {self.lease_s:g} (allowed: 0 to less "
                "than lease_s: every batch must start within the lease)"
            )
        for key in ("domain", "instance"):
            value = getattr(self, key)
            if value is not None and not _PLANNER_NAME.fullmatch(value):
                raise ConfigError(
                    f"coordination.{key}: {shorten(value)} is not a name (allowed: "
                    "1..128 of A-Z a-z 0-9 _ . : @ -, a letter or digit "
                    "first)"
                )

    @property
    def fence_interval_s(self) -> float:
        """``fence_every_s``, its default (a quarter of the lease) filled in."""
        return self.lease_s / 4 if self.fence_every_s is None else self.fence_every_s


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    device_kinds: Mapping[str, DeviceKind] = field(default_factory=_default_device_kinds)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    knapsack: KnapsackConfig = field(default_factory=KnapsackConfig)
    cycle: CycleConfig = field(default_factory=CycleConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    condor: CondorConfig = field(default_factory=CondorConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    collocate: CollocateConfig = field(default_factory=CollocateConfig)
    coordination: CoordinationConfig = field(default_factory=CoordinationConfig)

    def __post_init__(self) -> None:
        # Device kinds are matched ignoring case, spaces, '-' and '_' (coshare.ledger.book): two
        # entries that match the same devices are an error naming both.
        kind_index(self.device_kinds)


#: The largest value of a numeric setting that names no ``max`` of its own, by the unit its
#: name ends in: a duration (``_s``) of a year, a memory size (``_mib``), or a count.
MAX_SETTING_S = 365 * 24 * 3600.0
MAX_SETTING_COUNT = 1000

Range = tuple[float, float]


def _range(name: str, metadata: Mapping[str, Any]) -> Range:
    """The allowed range of a numeric setting (of each item, for a list or mapping)."""
    low = metadata.get("min", 0)
    high = metadata.get("max")
    if high is None:
        unit = name.rsplit("_", 1)[-1]
        high = {"s": MAX_SETTING_S, "mib": MAX_MEMORY_MIB}.get(unit, MAX_SETTING_COUNT)
    return low, high


def build(cls: type[C], data: object, where: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, checking keys, types and ranges.

    Missing keys take the field's default. Every number must be finite and within its range:
    the field's ``min`` and ``max`` metadata, else 0 and a maximum by unit (:func:`_range`).
    Every problem is found before anything is raised (``config check`` lists them all).

    Raises:
        ConfigError: naming each bad key path, the bad value and what is allowed.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {shorten(data)}")
    data = renamed(cls, data, where)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    problems: list[str] = []
    for key in data:
        if key not in fields:
            problems.append(
                f"{where or 'config'}: unknown key {shorten(key)} "
                f"(valid keys: {', '.join(sorted(fields))})"
            )
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name not in fields:
            continue
        path = f"{where}.{name}" if where else name
        try:
            values[name] = _convert(hints[name], value, path, _range(name, fields[name].metadata))
        except ConfigError as exc:
            problems.extend(problems_of(exc))
            continue
        noun, choices = CHOICES.get((cls, name), ("", None))
        if choices is not None and values[name] not in choices():
            problems.append(f"{path}: {unknown_name(noun, values[name], choices())}")
    for n, f in fields.items():
        if (
            n not in values
            and n not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ):
            problems.append(f"{where or 'config'}: missing key {n!r}")
    if problems:
        raise config_error(problems)
    return cls(**values)


def problems_of(exc: ConfigError) -> list[str]:
    """The problems one :class:`ConfigError` reports, one line each."""
    found = getattr(exc, "problems", None)
    return list(found) if found else [str(exc)]


def config_error(problems: list[str], where: str = "") -> ConfigError:
    """One :class:`ConfigError` for every problem found (``problems`` keeps them apart)."""
    prefix = f"{where}: " if where else ""
    if len(problems) == 1:
        error = ConfigError(prefix + problems[0])
    else:
        error = ConfigError(f"{prefix}{len(problems)} problems:\n  " + "\n  ".join(problems))
    error.problems = tuple(prefix + p for p in problems)  # type: ignore[attr-defined]
    return error


def _policy_names() -> list[str]:
    from coshare.policies import policy_names  # the policies load numpy: only when checked

    return policy_names()


#: Settings whose value must be one of a list known only at run time, by (section, key):
#: what the value names, and the list.
CHOICES: Mapping[tuple[type[Any], str], tuple[str, Callable[[], list[str]]]] = {
    (PolicyConfig, "name"): ("policy", _policy_names),
}


def renamed(cls: type[Any], data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``data`` with the keys ``cls`` renamed (its ``RENAMED``: old -> new) under their new
    names, each with a ``FutureWarning``: old spellings keep working for one release.

    Raises:
        ConfigError: a key given under both its old and its new name.
    """
    old_names = getattr(cls, "RENAMED", {})
    if not any(old in data for old in old_names):
        return data
    out = dict(data)
    for old, new in old_names.items():
        if old not in out:
            continue
        prefix = f"{where}." if where else ""
        if new in out:
            raise ConfigError(
                f"{prefix}{old} and {prefix}{new} are the same setting (its old "
                f"and new name); give it once, as {new}"
            )
        warnings.warn(
            f"config key {prefix}{old} is deprecated and goes in the next release; "
            f"call it {prefix}{new}",
            FutureWarning,
            stacklevel=2,
        )
        out[new] = out.pop(old)
    return out


def _sections_renamed(data: Mapping[str, Any]) -> dict[str, Any]:
    """Every section of a config document with its renamed keys under their new names."""
    hints = typing.get_type_hints(Config)
    return {
        name: renamed(hints[name], value, name)
        if name in hints and isinstance(value, Mapping) and dataclasses.is_dataclass(hints[name])
        else value
        for name, value in data.items()
    }


def _convert(hint: Any, value: object, path: str, limits: Range) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, limits)
    if origin is Literal:
        if not isinstance(value, str) or value not in args:
            raise ConfigError(
                f"{path}: {shorten(value)} is not one of {', '.join(map(repr, args))}"
            )
        return value
    if origin in (Mapping, dict, typing.Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {shorten(value)}")
        value_type = args[1]
        out = {}
        for key, item in value.items():
            name = str(key)
            problem = id_problem(name)
            if problem is not None:
                raise ConfigError(
                    f"{path}: the name {shorten(name)} {problem} (allowed: {ALLOWED_ID})"
                )
            if name in out:
                # 0 and "0" are two YAML keys but one name: neither silently wins.
                raise ConfigError(
                    f"{path}: the name {shorten(name)} is given twice (as "
                    f"{shorten(key)} and as another key that reads the same)"
                )
            out[name] = _convert(value_type, item, f"{path}.{name}", limits)
        return out
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {shorten(value)}")
        return tuple(_convert(args[0], v, f"{path}[{i}]", limits) for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, path)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {shorten(value)}")
        return value
    if hint is int or hint is float:
        return _number(hint, value, path, limits)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {shorten(value)}")
        problem = text_problem(value, MAX_TEXT_CHARS)
        if problem is not None:
            raise ConfigError(
                f"{path}: {shorten(value)} {problem} (allowed: text of at most "
                f"{MAX_TEXT_CHARS} characters, no control characters)"
            )
        return value
    raise ConfigError(f"{path}: unsupported setting type {hint!r}")  # pragma: no cover


def _number(hint: type, value: object, path: str, limits: Range) -> int | float:
    """An integer or a finite number within ``limits`` (YAML's ``.nan`` and ``.inf`` are not)."""
    low, high = limits
    what = "an integer" if hint is int else "a number"
    allowed = f"(allowed: {what} {plain(low)}..{plain(high)})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: expected {what}, got {shorten(value)} {allowed}")
    if hint is int and not isinstance(value, int):
        raise ConfigError(f"{path}: expected {what}, got {shorten(value)} {allowed}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{path}: {shorten(value)} is out of range {allowed}")
    return value if hint is int else float(value)


def to_dict(obj: object) -> Any:
    """A plain-data view of a config (for ``coshare config show``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (it keeps the last,
    silently: ``policy: {name: knapsack, name: random}`` would plan with ``random``)."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {shorten(key)} appears twice (first on line {first})",
                    key_node.start_mark,
                )
            seen[key] = key_node
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _mapping)


def load_yaml(text: str, where: str) -> Any:
    """YAML text as data (safe types only), with one :class:`ConfigError` for anything
    unreadable: bad syntax, a key given twice, nesting deeper than PyYAML's recursion goes, or
    an integer longer than Python converts from text.

    Args:
        text: the YAML.
        where: what it is, for the message (a path, ``environment variable COSHARE_...``).
    """
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{where}: not readable: nested too deeply") from exc
    except ValueError as exc:  # Python's int-string conversion limit
        raise ConfigError(f"{where}: not readable: a number has too many digits") from exc


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Read ``COSHARE_<SECTION>_<KEY>`` variables into a nested mapping.

    Only a variable that names a real section and key is a setting: coshare's own variables
    (:data:`NOT_SETTINGS`: ``COSHARE_TRACE_DIR``, ``COSHARE_JOB_ID`` in a job) are ignored, so
    they can never stop a command; any other is ignored with a :class:`ConfigWarning` naming
    the nearest settings.
    Values are parsed as YAML scalars (``3600``, ``null``, ``soft``). Sections whose values
    are mappings of their own (``device_kinds``) are set in the file only.

    Raises:
        ConfigError: a setting's variable whose value is not valid YAML.
    """
    hints = typing.get_type_hints(Config)
    settings = {
        f"{ENV_PREFIX}{section}_{f.name}".upper(): (section, f.name)
        for section, hint in hints.items()
        if dataclasses.is_dataclass(hint)
        for f in dataclasses.fields(hint)
    }
    renamed_keys = {
        f"{ENV_PREFIX}{section}_{old}".upper(): (section, old)
        for section, hint in hints.items()
        for old in getattr(hint, "RENAMED", {})
    }
    out: dict[str, dict[str, Any]] = {}
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX) or var in NOT_SETTINGS:
            continue
        found = settings.get(var) or renamed_keys.get(var)
        if found is None:
            _warn_near(var, settings)
            continue
        section, key = found
        out.setdefault(section, {})[key] = load_yaml(text, f"environment variable {var}")
    return out


def _warn_near(var: str, settings: Mapping[str, tuple[str, str]]) -> None:
    """Warn about a ``COSHARE_`` variable that is not a setting, with the nearest settings.

    One rule names every setting, ``COSHARE_<SECTION>_<KEY>``; a variable that names only a
    section (``COSHARE_POLICY``) or only a key (``COSHARE_SEED``) is the usual slip, so the
    hint lists that section's keys or the settings with that key.
    """
    sections = {section for section, _ in settings.values()}
    rest = var[len(ENV_PREFIX) :].lower()
    named = next(
        (
            s
            for s in sorted(sections, key=len, reverse=True)
            if var.startswith(f"{ENV_PREFIX}{s.upper()}_")
        ),
        None,
    )
    near = difflib.get_close_matches(var, list(settings), n=1, cutoff=0.9)
    by_key = sorted(name for name, (_, key) in settings.items() if key == rest)
    if near:
        hint = f"did you mean {near[0]}?"
    elif by_key:
        hint = f"did you mean {' or '.join(by_key)}?"
    elif named is not None or rest in sections:
        section = named or rest
        keys = sorted(key for s, key in settings.values() if s == section)
        hint = (
            f"settings are {ENV_PREFIX}<SECTION>_<KEY>; the {section} section's keys are "
            f"{', '.join(keys)}"
        )
    else:
        hint = f"settings are {ENV_PREFIX}<SECTION>_<KEY>, listed by `coshare config show`"
    warnings.warn(
        f"environment variable {shorten_text(var)} is not a setting and is ignored ({hint})",
        ConfigWarning,
        stacklevel=3,
    )


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Load the configuration: defaults < file < environment.

    Args:
        path: the YAML file; ``None`` looks at ``$COSHARE_CONFIG`` then
            ``/etc/coshare/config.yaml`` (absent is fine: defaults).
        environ: the environment (``os.environ`` when ``None``).

    Raises:
        ConfigError: for an unreadable file, bad YAML, unknown keys or bad values.
    """
    environ = os.environ if environ is None else environ
    explicit = path is not None or "COSHARE_CONFIG" in environ
    if path is None:
        path = Path(environ["COSHARE_CONFIG"]) if "COSHARE_CONFIG" in environ else None
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = read_bounded(path, MAX_CONFIG_CHARS)
        except TooLarge as exc:
            raise ConfigError(f"{path}: not read: {exc}") from exc
        except OSError as exc:
            if explicit:
                raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
            text = ""
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text") from exc
        loaded = load_yaml(text, str(path)) if text.strip() else {}
        if loaded is None:  # only comments: as empty as an empty file
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: expected a mapping of sections, got {shorten(loaded)}")
        data = _sections_renamed(loaded)
    # Renamed per source, so that a new name in the environment overrides an old one in the
    # file instead of clashing with it.
    data = _merge(data, _sections_renamed(env_overrides(environ)))
    where = str(path) if path is not None else "config"
    try:
        return build(Config, data)
    except ConfigError as exc:
        raise config_error(problems_of(exc), where) from exc


def with_overrides(config: Config, section: str, **values: Any) -> Config:
    """Apply command-line overrides (``None`` values are ignored) to one section."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return config
    current = to_dict(getattr(config, section))
    hint = typing.get_type_hints(Config)[section]
    return dataclasses.replace(config, **{section: build(hint, _merge(current, given), section)})
