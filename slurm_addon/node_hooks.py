"""Where the node helpers plug into Slurm's Prolog and Epilog (root, on the compute node).

- Prolog: :func:`on_job_start` makes the placed job's group (``coshare.node``) with the cores
  and memory Slurm allocated on this node, the placement's devices and declared device memory
  and threads, and the job's account; the TaskProlog (as the user) then moves each task into
  it through the node daemon (``coshare-launch task-prolog``). When the group cannot be made,
  the reason is recorded, and the TaskProlog fails that job with it (a failing Prolog would
  drain the whole node). A placed job that starts on another node than its placement is
  refused the same way (:func:`refuse`): its devices and limits were planned for that node.
  A CPU-only job placed on a GPU job's idle cores (``collocate``, placement field
  ``harvest``) gets as many cores as Slurm allocated it taken out of the GPU job's cpuset
  first, then its group made with exactly them
  (:func:`coshare.node.lifecycle.job_start_on_loan`), before any task runs; when the loan
  cannot be made no group is left and the job is refused the same way: it never runs on
  cores it shares with the GPU job.
- Epilog: with ``node.job_end_dir`` set, :func:`record_job_end` first writes what the node
  measured of the job (CPU time, run time, alone or not) for the profiles learned from
  normal runs; :func:`on_job_end` kills what is left and removes the group; when coshare killed the
  job, :func:`report_kill` tells the user: a ``coshare: <why>`` line at the end of the job's
  error file, written as the job's user (never as root into a path the user chose), and
  ``;killed=<why>`` in the job's AdminComment (in slurmctld while it still takes changes,
  else in the accounting record: ``sacct -o AdminComment``, where sacctmgr stores it folded
  to lower case).

Called from :mod:`slurm_addon.prolog`, which never lets an exception out.
"""

from __future__ import annotations

from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import CoshareError, JobSpecError, ProbeError, Unsupported
from coshare.ledger.annotations import parse_job
from coshare.node import job_usage, lifecycle
from coshare.node.bandwidth import INIT_HINT, cap_percent, node_peak_gbps
from coshare.node.jobs import JobRecord
from coshare.node.membw import ProbeFiles
from coshare.system.programs import CommandRunner, run

from slurm_addon.allocation import Allocation, parse_stderr_path
from slurm_addon.client import SlurmClient
from slurm_addon.comment import read_annotations
from slurm_addon.placement import Placement, parse_placement, with_kill_reason


def on_job_start(
    config: NodeConfig, job_id: str, placement: Placement, allocation: Allocation, uid: int
) -> JobRecord:
    """Make a placed job's group on this node before its tasks start.

    Args:
        config: the node section of the configuration.
        job_id: the Slurm job id.
        placement: its devices and the device memory and threads it was placed for.
        allocation: the cores and memory Slurm allocated to it here.
        uid: the job's account (``SLURM_JOB_UID``); only its tasks may join the group.

    A Spread-n-Share placement that allocates LLC ways on this node gets its
    resctrl group with them. On a node without resctrl the job runs *without* way
    allocation (the plan's notes say so too), and its tasks are told
    ``COSHARE_LLC_WAYS=unsupported`` with the path looked at (:func:`sns_task_env`):
    nothing is pretended. Ways the node has but cannot give (all held) fail the job with
    the reason, as any other limit that cannot be set. A placement with a bandwidth cap
    (``membw=``, ``policy.sns.mba``) also gets an ``MB:`` line (:func:`membw_cap`); a node
    without MBA, or without a bandwidth baseline to turn GB/s into a percentage, runs the
    job without the cap and its tasks are told ``COSHARE_MEMBW_PERCENT=unsupported`` with
    the path looked at.

    Raises:
        CoshareError: when the group cannot be made; the reason is recorded for the
            TaskProlog, which then fails the job with it.
    """
    store = lifecycle.node_store(config)
    if placement.harvest_from is not None:
        try:
            return _start_on_loan(config, job_id, placement.harvest_from, allocation, uid)
        except CoshareError as exc:
            store.record_error(job_id, str(exc))
            raise
    ways = placement.llc_ways
    percent, no_cap = membw_cap(config, placement)
    without: Unsupported | None = None
    try:
        while True:
            try:
                record = _start(config, job_id, placement, allocation, uid, ways, percent)
                break
            except Unsupported as exc:
                # Run it without what the node lacks, never pretending: MBA first (its
                # refusal names info/MB), then the ways (info/L3); the tasks are told.
                if percent is not None and exc.capability.startswith("resctrl MB"):
                    percent, no_cap = None, exc
                elif ways is not None:
                    ways, without = None, exc
                else:
                    raise
    except CoshareError as exc:
        store.record_error(job_id, str(exc))
        raise
    lines = sns_task_env(config, job_id, placement, record, without, no_cap)
    if lines:
        store.record_task_env(job_id, lines)
    return record


def membw_cap(config: NodeConfig, placement: Placement) -> tuple[int | None, Unsupported | None]:
    """The ``MB:`` percentage of this node for a placement's bandwidth cap (``membw=``,
    ``policy.sns.mba``): the cap over the node's measured bandwidth (the baseline of ``coshare
    node probe membw --init``, its largest core set), rounded up; ``(None, None)`` when the
    placement asks none, ``(None, why)`` when the node has no baseline to turn GB/s into a
    percentage."""
    spread = placement.spread
    if spread is None or spread.membw_gbps is None:
        return None, None
    files = ProbeFiles(Path(config.state_dir))
    try:
        baseline = files.baseline()
    except ProbeError as exc:
        return None, Unsupported(
            "node memory bandwidth (for the MBA cap)", str(files.baseline_path), str(exc)
        )
    if baseline is None or not baseline.by_cpus:
        return None, Unsupported(
            "node memory bandwidth (for the MBA cap)",
            str(files.baseline_path),
            f"no baseline: {INIT_HINT}",
        )
    return cap_percent(spread.membw_gbps, node_peak_gbps(baseline)), None


def _start_on_loan(
    config: NodeConfig, job_id: str, lender: str, allocation: Allocation, uid: int
) -> JobRecord:
    """Start a harvesting job on cores taken out of ``lender``'s cpuset
    (:func:`coshare.node.lifecycle.job_start_on_loan`); when they cannot be lent no group is
    left (no job runs on the parent's cores)."""
    cores = allocation.cpus
    if cores is None or cores < 1:
        raise JobSpecError(
            f"job {job_id} borrows the cores of job {lender}, but Slurm's "
            "allocation here names no cores to borrow"
        )
    try:
        return lifecycle.job_start_on_loan(
            config, job_id, lender, cores, memory_mib=allocation.memory_mib, uid=uid
        )
    except JobSpecError as exc:
        raise JobSpecError(
            f"job {job_id} was placed on {cores} idle cores of job {lender}, "
            f"which cannot be lent here: {exc}"
        ) from exc


def _start(
    config: NodeConfig,
    job_id: str,
    placement: Placement,
    allocation: Allocation,
    uid: int,
    llc_ways: int | None,
    membw_percent: int | None,
) -> JobRecord:
    return lifecycle.job_start(
        config,
        job_id,
        cores=allocation.cpus,
        memory_mib=allocation.memory_mib,
        devices=placement.devices,
        device_memory_mib=placement.device_memory_mib or None,
        device_threads=placement.device_threads or None,
        uid=uid,
        llc_ways=llc_ways,
        membw_percent=membw_percent,
    )


def sns_task_env(
    config: NodeConfig,
    job_id: str,
    placement: Placement,
    record: JobRecord,
    without: Unsupported | None = None,
    no_cap: Unsupported | None = None,
) -> list[str]:
    """What each task of a Spread-n-Share job is told on this node (empty for other jobs):

    - ``COSHARE_SPREAD=<scale>:<nodes>:<cores_per_node>``, from the placement;
    - ``COSHARE_LLC_WAYS``: the ways its resctrl group holds here; ``none`` when the
      placement allocates none here on a node with resctrl; ``unsupported`` on a node
      without resctrl, with a ``print coshare:`` line naming the path looked at;
    - with a bandwidth cap (``membw=``), ``COSHARE_MEMBW_PERCENT``: the ``MB:`` percentage
      its group has here, or ``unsupported`` with a line naming the path (no MBA, no
      baseline).

    Args:
        without: the refusal of a placement's ways on this node (no resctrl): the job was
            started without them.
        no_cap: why the placement's bandwidth cap is not applied here.
    """
    if placement.spread is None and placement.llc_ways is None:
        return []
    lines = []
    if placement.spread is not None:
        s = placement.spread
        lines.append(f"export COSHARE_SPREAD={s.scale}:{s.nodes}:{s.cores_per_node}")
    lines += _ways_lines(config, job_id, placement, record, without)
    cap = placement.spread.membw_gbps if placement.spread is not None else None
    if cap is not None:
        if record.spec.membw_percent is not None:
            lines.append(f"export COSHARE_MEMBW_PERCENT={record.spec.membw_percent}")
        else:
            lines += [
                "export COSHARE_MEMBW_PERCENT=unsupported",
                f"print coshare: job {job_id} runs on {placement.node} without its memory "
                f"bandwidth cap ({cap:g} GB/s): {no_cap}",
            ]
    return lines


def _ways_lines(
    config: NodeConfig,
    job_id: str,
    placement: Placement,
    record: JobRecord,
    without: Unsupported | None,
) -> list[str]:
    if record.spec.llc_ways is not None:
        return [f"export COSHARE_LLC_WAYS={record.spec.llc_ways}"]
    problem = without
    if problem is None:
        try:
            lifecycle.node_resctrl(config).cache()
        except Unsupported as exc:
            problem = exc
    if problem is None:
        return ["export COSHARE_LLC_WAYS=none"]
    asked = f" (its placement asks {placement.llc_ways})" if without is not None else ""
    return [
        "export COSHARE_LLC_WAYS=unsupported",
        f"print coshare: job {job_id} runs on {placement.node} without LLC way "
        f"allocation{asked}: {problem}",
    ]


def refuse(config: NodeConfig, job_id: str, reason: str) -> None:
    """Refuse to run a job on this node: the TaskProlog fails it with ``reason``."""
    lifecycle.node_store(config).record_error(job_id, reason)


def on_job_end(config: NodeConfig, job_id: str) -> lifecycle.EndResult:
    """Kill what is left of the job on this node and remove its group and record."""
    return lifecycle.job_end(config, job_id)


def record_job_end(config: NodeConfig, client: SlurmClient, job_id: str, node: str) -> Path | None:
    """Write what this node measured of a placed job with a ``CoshareProgram`` into the
    job-end spool (``node.job_end_dir``; :mod:`coshare.node.job_usage`), before its group is
    removed: its program from its comment, its scale and node count from its placement
    (``spread=``; a placement without it ran at scale 1). ``None``: nothing to write (no
    spool, not coshare's job, no program, or no group of it here).

    Raises:
        CoshareError: Slurm could not be asked.
    """
    if config.job_end_dir is None:
        return None
    placement = parse_placement(client.admin_comment(job_id))
    if placement is None:
        return None
    try:
        declared = parse_job(job_id, read_annotations(job_id, client.comment(job_id)))
    except CoshareError:
        return None
    if declared.program is None:
        return None
    spread = placement.spread
    scale, nodes = (spread.scale, spread.nodes) if spread is not None else (1, len(placement.nodes))
    end = job_usage.measure_end(config, job_id, node, declared.program, scale, nodes)
    if end is None:
        return None
    return job_usage.write_end(Path(config.job_end_dir), end)


def report_kill(
    client: SlurmClient,
    job_id: str,
    reason: str,
    uid: int,
    gid: int,
    runner: CommandRunner = run,
) -> list[str]:
    """Tell the user why coshare killed the job: AdminComment and the job's error file.

    Returns:
        one line per part that failed (empty: both done).
    """
    problems = []
    try:
        assignment = f"AdminComment={with_kill_reason(client.admin_comment(job_id), reason)}"
        # slurmctld refuses changes to a finished job ("Job has already finished", which it
        # is by the time the Epilog runs): then the accounting record takes it (sacct).
        error = client.update(["update", f"JobId={job_id}", assignment])
        if error is not None:
            error = client.update_accounting(job_id, assignment)
        if error is not None:
            problems.append(f"AdminComment of job {job_id} not updated: {error}")
    except CoshareError as exc:
        problems.append(f"AdminComment of job {job_id} not updated: {exc}")
    try:
        path = parse_stderr_path(client.show_job(job_id))
        if path is None:
            problems.append(f"job {job_id} has no error file to write the reason into")
        else:
            append_as_user(path, f"coshare: {reason}\n", uid, gid, runner)
    except CoshareError as exc:
        problems.append(f"cannot write the reason into job {job_id}'s error file: {exc}")
    return problems


def append_as_user(path: str, text: str, uid: int, gid: int, runner: CommandRunner = run) -> None:
    """Append ``text`` to an existing file with the user's own rights (``setpriv``, ``dd``):
    no file is created, a symbolic link at ``path`` is not followed, and what the user may
    not write stays unwritten.

    Raises:
        CommandFailed: when it cannot be written.
    """
    runner(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "dd",
            f"of={path}",
            "oflag=append,nofollow",
            "conv=notrunc,nocreat",
            "status=none",
        ],
        timeout_s=30,
        input_text=text,
    )
