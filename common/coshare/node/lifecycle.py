"""A job's life on its node: start (group, cores, limits, record), exec, end.

The scheduler adapters call these through the command line (``coshare node job-start``,
``job-exec``, ``job-end``, or ``job-run`` for all three); see docs/node-helpers.md.
Everything the planner decided arrives as arguments, so nothing here knows HTCondor or
Slurm.

The job's command is the one subprocess here that does not go through
:func:`coshare.system.programs.run`: it is the payload, not a tool coshare talks to, so it runs with
inherited standard streams and no timeout, and joins the job's group before it ``exec``\\ s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import CgroupError, JobSpecError, JobStateError, Unsupported
from coshare.node.cgroups import Cgroups, JobGroup, open_cgroups
from coshare.node.cgroups.base import remove_dirs, signal_all
from coshare.node.gate.client import SOCKET_ENV
from coshare.node.harvest import Holding, after_end, cores_to_lend, lend
from coshare.node.jobs import JobRecord, JobStore, Launcher
from coshare.node.procfs import is_alive
from coshare.node.resctrl import Resctrl
from coshare.node.spec import (
    JobSpec,
    check_cpus,
    check_job_id,
    choose_cpus,
    cores_needed,
    format_cpu_list,
)
from coshare.node.watchdog import enforce, host_memory_violation

log = logging.getLogger(__name__)

#: Exit status of ``job-exec`` when coshare killed the job (as a shell reports SIGKILL).
KILLED_STATUS = 128 + signal.SIGKILL


def node_cgroups(config: NodeConfig) -> Cgroups:
    """The cgroup driver the configuration names."""
    return open_cgroups(
        Path(config.cgroup_root), config.cgroup_version, config.cgroup_parent, config.kill_timeout_s
    )


def node_store(config: NodeConfig) -> JobStore:
    """The node's job records."""
    return JobStore(Path(config.state_dir))


def node_resctrl(config: NodeConfig) -> Resctrl:
    """The node's resctrl mount, with groups named after coshare's cgroup parent."""
    return Resctrl(Path(config.resctrl_root), config.cgroup_parent)


def join_files(config: NodeConfig, record: JobRecord) -> tuple[Path, ...]:
    """Where a process writes its pid to join the job: its cgroups' ``cgroup.procs`` and,
    for a job with ways or a bandwidth share, its resctrl group's ``tasks``."""
    files = record.group(config.kill_timeout_s).procs_files()
    if has_resctrl_group(record):
        files += (node_resctrl(config).tasks_file(record.job),)
    return files


def has_resctrl_group(record: JobRecord | None) -> bool:
    """Whether the job was started with ways or a bandwidth share (a resctrl group)."""
    return record is not None and (
        record.spec.llc_ways is not None or record.spec.membw_percent is not None
    )


def add_process(config: NodeConfig, record: JobRecord, pid: int) -> None:
    """Move process ``pid`` into the job's groups (cgroups, then resctrl).

    Raises:
        CgroupError: a group cannot take it.
    """
    record.group(config.kill_timeout_s).add(pid)
    if has_resctrl_group(record):
        node_resctrl(config).add(record.job, pid)


def job_start(
    config: NodeConfig,
    job: str,
    *,
    cores: float | None = None,
    cpus: Sequence[int] | None = None,
    memory_mib: int | None = None,
    devices: Sequence[str] = (),
    device_memory_mib: int | None = None,
    device_threads: int | None = None,
    uid: int | None = None,
    launcher: Launcher | None = None,
    llc_ways: int | None = None,
    membw_percent: int | None = None,
    lends: bool = False,
) -> JobRecord:
    """Create the job's group with its own cores and memory limit, and record the job.

    Args:
        config: the node section of the configuration.
        job: the scheduler's job id.
        cores: how many cores (fractions round up); coshare picks cores no other job on this
            node holds. Mutually exclusive with ``cpus``.
        cpus: exactly these CPUs (they must be free).
        memory_mib: host memory limit.
        devices: device ids the job may offload to.
        device_memory_mib: declared device memory per device (the watchdog enforces it).
        device_threads: declared device threads (the gate enforces it).
        uid: the account the job runs as (only its processes may join the group).
        launcher: the process that waits for the job (the control socket's START); the
            daemon reaps the group once it is gone and the group is empty.
        llc_ways: LLC ways of its own: a resctrl group with that many contiguous ways no
            other job holds.
        membw_percent: its memory-bandwidth share (resctrl ``MB:``, where the node has MBA).
        lends: its scheduler placed it as a job whose idle cores may be lent (HTCondor's
            START ``lends=1``; :func:`job_start_on_loan` checks it for a borrower the user's
            wrapper started).

    Raises:
        JobSpecError: bad inputs, not enough free cores, or ways the node cannot give.
        CgroupUnavailable: the kernel lacks what a requested limit needs.
        Unsupported: ways or a bandwidth share asked of a node without resctrl (or MBA).
        JobStateError: the job already runs here.
    """
    check_job_id(job)
    if cores is not None and cpus is not None:
        raise JobSpecError("give either cores or an explicit cpu list, not both")
    cgroups = node_cgroups(config)
    store = node_store(config)
    with store.lock():
        _refuse_running(store, job)
        taken = {r.job: r.spec.cpus for r in store.records() if r.job != job}
        allowed = cgroups.allowed_cpus()
        chosen: tuple[int, ...] = ()
        if cpus is not None:
            chosen = check_cpus(cpus, allowed, taken)
        elif cores is not None:
            chosen = choose_cpus(allowed, taken, cores_needed(cores), config.cpu_overcommit)
        spec = JobSpec(
            job,
            chosen,
            memory_mib,
            tuple(devices),
            device_memory_mib,
            device_threads,
            llc_ways,
            membw_percent,
        )
        group = cgroups.create(job, chosen, memory_mib)
        if llc_ways is not None or membw_percent is not None:
            try:
                # Every job's mask is laid out again from the records' own ways: the new
                # job's ways are taken back from the others' spare shares (section 4.4).
                node_resctrl(config).create(
                    job,
                    llc_ways,
                    membw_percent,
                    allocated_ways(store, skip=job),
                    config.llc_share_spare,
                )
            except BaseException:
                group.remove()  # no half-made job: the group goes with the refusal
                raise
        record = JobRecord(
            spec, cgroups.version, str(cgroups.root), cgroups.parent, uid, launcher, lends=lends
        )
        store.remove(job)  # an old record and kill reason of a finished run
        store.write(record)
        store.mark_started(job, time.time())
    return record


def _refuse_running(store: JobStore, job: str) -> None:
    """Raise :class:`JobStateError` when ``job`` runs here already (the caller holds the lock)."""
    old = store.read(job)
    if old is not None and old.group().exists() and old.group().pids():
        raise JobStateError(
            f"job {job} already runs on this node ({len(old.group().pids())} "
            "processes in its group)"
        )
    if old is not None and old.launcher is not None and is_alive(*old.launcher):
        raise JobStateError(
            f"job {job} already runs on this node (its launcher, process "
            f"{old.launcher.pid}, is alive)"
        )


def job_start_on_loan(
    config: NodeConfig,
    job: str,
    lender: str,
    count: int,
    *,
    memory_mib: int | None = None,
    uid: int | None = None,
    launcher: Launcher | None = None,
    lender_must_lend: bool = False,
) -> JobRecord:
    """Start CPU-only job ``job`` on ``count`` cores of running job ``lender`` (the GPU job it
    was placed on: ``collocate``, Wu & Hong III-B1): its highest-numbered ones
    (:func:`coshare.node.harvest.cores_to_lend`) leave the lender's cpuset first, then the
    job's group is made holding exactly them. So no core is in two groups at any moment, and
    the job's group never holds cores that are not its loan (a group made first without
    cores would hold the parent's until the loan was written: a copy on cgroup v1, inherited
    on v2). Slurm's Prolog and the control socket's ``START borrow=`` call it before any task
    of ``job`` runs.

    Idempotent: a job that has its loan already keeps it. A crash between the lender's write
    and the records leaves the lender a core short of its record (never a core in two
    groups); the same start again lends the same cores.

    Args:
        lender_must_lend: refuse unless the lender started marked as one that may lend
            (``JobRecord.lends``): HTCondor's borrowers are started by a wrapper that runs as
            the job's user, and may only take cores of a job coshare placed as a lender.

    Raises:
        JobStateError: ``job`` runs here already, or ``lender`` has no group here.
        JobSpecError: the lender may not lend (``lender_must_lend``) or has not ``count``
            cores to lend (the message has the numbers).
        CgroupError, CgroupUnavailable: the kernel refused a write (the lender's cpuset is
            put back; no group is left).
    """
    check_job_id(job)
    cgroups = node_cgroups(config)
    store = node_store(config)
    with store.lock():
        _refuse_running(store, job)
        found = store.read(lender)
        lender_group = None if found is None else found.group(config.kill_timeout_s)
        if found is None or lender_group is None or not lender_group.exists():
            raise JobStateError(f"job {lender} has no group on this node")
        if lender_must_lend and not found.lends:
            raise JobSpecError(
                f"job {lender} was not placed as a job whose cores may be lent "
                "(it did not start with lends=1); nothing is borrowed from it"
            )
        cgroups.require(["cpuset"])
        holding = found.holding()
        others = [r.holding() for r in store.records() if r.job not in (lender, job)]
        already = holding.lent_to.get(job, ())  # a start again (slurmd retries a Prolog)
        wanted = already if len(already) == count else cores_to_lend(holding, count)
        change = lend(holding, Holding(job), wanted, others)
        lender_group.set_cpus(change.lender.cpus)
        group = None
        try:
            group = cgroups.create(job, change.borrower.cpus, memory_mib)
            spec = JobSpec(job, change.borrower.cpus, memory_mib)
            record = JobRecord(
                spec, cgroups.version, str(cgroups.root), cgroups.parent, uid, launcher
            ).with_holding(change.borrower)
            store.write(found.with_holding(change.lender))
            store.remove(job)  # an old record and kill reason of a finished run
            store.write(record)
            store.mark_started(job, time.time())
        except BaseException:
            if group is not None:
                with contextlib.suppress(CgroupError, OSError):
                    group.remove()
            with contextlib.suppress(CgroupError):
                lender_group.set_cpus(holding.cpus)
            if store.read(lender) != found:
                store.write(found)
            raise
    return record


def job_env(config: NodeConfig, record: JobRecord, base: Mapping[str, str]) -> dict[str, str]:
    """The job's environment: ``base`` plus its id, devices, cores and the gate's socket."""
    env = dict(base)
    env["COSHARE_JOB_ID"] = record.job
    env[SOCKET_ENV] = config.gate_socket
    devices = ",".join(record.spec.devices)
    env["COSHARE_DEVICES"] = devices
    if record.spec.cpus:
        env["COSHARE_CPUS"] = format_cpu_list(record.spec.cpus)
    if record.spec.device_threads is not None:
        env["COSHARE_DEVICE_THREADS"] = str(record.spec.device_threads)
    if devices:
        for name in config.device_env:
            env[name] = devices
    return env


def spawn_in_group(
    argv: Sequence[str],
    group: JobGroup,
    env: Mapping[str, str],
    files: Sequence[Path] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside ``group``: the child joins before it ``exec``\\ s, so nothing it
    does runs outside its limits. ``files``: every file the child writes its pid into
    (default: the group's ``cgroup.procs``; :func:`join_files` adds a resctrl group's).

    Raises:
        CgroupError: when the group cannot be opened.
        JobStateError: when the command cannot be started.
    """
    fds = []
    try:
        for procs in group.procs_files() if files is None else files:
            try:
                fds.append(os.open(procs, os.O_WRONLY))
            except OSError as exc:
                raise CgroupError(str(procs), "open", exc.strerror or str(exc)) from exc

        def join() -> None:  # runs in the child between fork and exec: writes only
            pid = str(os.getpid()).encode()
            for fd in fds:
                os.write(fd, pid)

        try:
            return subprocess.Popen(list(argv), env=dict(env), preexec_fn=join)
        except (OSError, subprocess.SubprocessError) as exc:
            raise JobStateError(f"cannot start {argv[0]!r} in job {group.job}: {exc}") from exc
    finally:
        for fd in fds:
            os.close(fd)


@dataclass(frozen=True)
class ExecResult:
    """How the job's command ended.

    Attributes:
        status: the exit status to pass on (``KILLED_STATUS`` when coshare killed the job;
            128 + N when a signal N ended it).
        returncode: the child's own status (negative: killed by that signal).
        reason: why coshare killed the job, if it did.
    """

    status: int
    returncode: int
    reason: str | None


def job_exec(
    config: NodeConfig,
    job: str,
    argv: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    on_spawn: Callable[[subprocess.Popen[bytes], JobGroup], None] | None = None,
) -> ExecResult:
    """Run ``argv`` inside the job's group and watch its host memory until it exits.

    Args:
        config: the node section of the configuration.
        job: a job started with :func:`job_start`.
        argv: the command.
        environ: the environment to start from (default: this process's).
        on_spawn: called with the child and the group once it runs (the CLI forwards
            signals from there).

    Raises:
        JobStateError: the job was not started, or the command cannot be run.
    """
    store = node_store(config)
    record = store.require(job)
    group = record.group(config.kill_timeout_s)
    env = job_env(config, record, os.environ if environ is None else environ)
    child = spawn_in_group(argv, group, env, join_files(config, record))
    if on_spawn is not None:
        on_spawn(child, group)
    while True:
        try:
            returncode = child.wait(timeout=config.watch_interval_s)
            break
        except subprocess.TimeoutExpired:
            violation = host_memory_violation(record, group)
            if violation is not None:
                enforce(store, group, violation)
    # The OOM killer may have taken the main process itself: the rest must go too.
    violation = host_memory_violation(record, group)
    if violation is not None and store.reason(job) is None:
        enforce(store, group, violation)
    reason = store.reason(job)
    if reason is not None:
        return ExecResult(KILLED_STATUS, returncode, reason)
    status = returncode if returncode >= 0 else 128 - returncode
    return ExecResult(status, returncode, None)


def forward_signal(group: JobGroup, signum: int) -> None:
    """Pass a signal the wrapper received on to every process of the job."""
    try:
        signal_all(group.pids(), signum)
    except CgroupError as exc:  # the group may be gone already
        print(f"coshare: cannot forward signal {signum}: {exc}", file=sys.stderr)


def job_attach(config: NodeConfig, job: str, pids: Sequence[int]) -> None:
    """Move running processes (with their threads) into a started job's group.

    Raises:
        JobStateError: the job was not started.
        CgroupError: a pid cannot be moved (gone, or not permitted).
    """
    record = node_store(config).require(job)
    for pid in pids:
        add_process(config, record, pid)


@dataclass(frozen=True)
class EndResult:
    """What ``job-end`` found.

    Attributes:
        job: the job.
        started: whether the job had a record on this node.
        leftover: processes still in its group that were killed.
        reason: why coshare killed the job, if it did.
    """

    job: str
    started: bool
    leftover: int
    reason: str | None


def job_end(config: NodeConfig, job: str) -> EndResult:
    """Kill what is left of the job, remove its group and record; idempotent.

    Raises:
        CgroupError: when the group cannot be emptied or removed in ``kill_timeout_s``.
    """
    check_job_id(job)
    store = node_store(config)
    record = store.read(job)
    group = (
        record.group(config.kill_timeout_s)
        if record is not None
        else node_cgroups(config).open(job)
    )
    leftover = len(group.pids()) if group.exists() else 0
    if record is not None and store.reason(job) is None:
        # The kernel's OOM killer may have ended the job's last process before the watchdog
        # looked: the job was still killed for its memory, and its user must learn why.
        violation = host_memory_violation(record, group)
        if violation is not None:
            store.record_reason(job, violation.reason())
    group.remove()
    if record is not None and (record.lent_to or record.borrowed_from):
        # After its group is gone: a lender gets back the cores the job borrowed, a borrower
        # keeps the cores this job lent it (nobody else holds them now).
        with store.lock():
            others = {r.job: r for r in store.records() if r.job != job}
            changes = after_end(record.holding(), [r.holding() for r in others.values()])
            apply_holdings(config, store, others, changes)
    resctrl = node_resctrl(config)
    if has_resctrl_group(record) or resctrl.path(job).is_dir():
        # After the processes: a group removed first would hand them back the whole cache.
        resctrl.remove(job)
        if record is not None and record.spec.llc_ways is not None and config.llc_share_spare:
            share_spare_ways(config, store, skip=job)
    reason = store.reason(job)
    store.remove(job)
    return EndResult(job, record is not None, leftover, reason)


def allocated_ways(store: JobStore, skip: str | None = None) -> dict[str, int]:
    """Each job's own LLC ways on this node, from the records (``skip``: one left out)."""
    return {
        r.job: r.spec.llc_ways
        for r in store.records()
        if r.spec.llc_ways is not None and r.job != skip
    }


def share_spare_ways(config: NodeConfig, store: JobStore, skip: str | None = None) -> None:
    """Give the ways no job is allocated to the jobs holding ways, in equal shares (after a
    job ended: its ways go to the others; Spread-n-Share section 4.4). A node without
    resctrl, or a mask the kernel refuses, leaves the masks as they are (the jobs keep at
    least their own ways) and is logged: a job's end never fails for another's share."""
    try:
        with store.lock():
            node_resctrl(config).relayout(allocated_ways(store, skip=skip), share_spare=True)
    except (CgroupError, Unsupported) as exc:
        log.warning("spare LLC ways not shared out after job %s ended: %s", skip, exc)


def apply_holdings(
    config: NodeConfig,
    store: JobStore,
    records: Mapping[str, JobRecord],
    changes: Sequence[Holding],
) -> list[JobRecord]:
    """Write the cpusets and records of jobs whose cores changed (harvest: LEND, RECLAIM, and
    the end of a job that lent or borrowed); the caller holds ``store.lock()``.

    The cpusets that shrink are written first, so no core is ever in two jobs' cpusets at
    once; when a write fails, those written already are put back. A job whose group is gone
    gets its record only. The records are written last, in the same order: should the daemon
    die between two, no core is in two records, and the same request again finishes the work
    (:func:`coshare.node.harvest.lend` repairs the borrower's record; a give-back finds the
    core still lent and gives it).

    Raises:
        CgroupError: the kernel refused a write (everything written is undone).
        CgroupUnavailable: a group has no cpuset.
    """
    order = sorted(changes, key=lambda h: len(h.cpus) - len(records[h.job].spec.cpus))
    done: list[tuple[JobGroup, tuple[int, ...]]] = []
    try:
        for holding in order:
            old = records[holding.job]
            group = old.group(config.kill_timeout_s)
            if holding.cpus != old.spec.cpus and holding.cpus and group.exists():
                group.set_cpus(holding.cpus)
                if old.spec.cpus:
                    done.append((group, old.spec.cpus))
    except BaseException:
        for group, cpus in reversed(done):
            with contextlib.suppress(CgroupError):
                group.set_cpus(cpus)
        raise
    written = []
    for holding in order:
        record = records[holding.job].with_holding(holding)
        store.write(record)
        written.append(record)
    return written


def node_cleanup(config: NodeConfig) -> list[EndResult]:
    """End every job of the node (records and groups) and remove coshare's parent group.

    Only coshare's parent group and what is under it is touched.

    Raises:
        CgroupError: when a group cannot be emptied or removed.
    """
    cgroups = node_cgroups(config)
    jobs = sorted(set(node_store(config).jobs()) | set(cgroups.jobs()))
    with contextlib.suppress(OSError):
        jobs = sorted(set(jobs) | set(node_resctrl(config).jobs()))
    results = [job_end(config, job) for job in jobs]
    for directory in cgroups.parent_directories():
        remove_dirs(directory, config.kill_timeout_s)
    return results
