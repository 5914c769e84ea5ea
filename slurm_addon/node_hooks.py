"""Where the node helpers plug into Slurm's Prolog and Epilog (root, on the compute node).

- Prolog: :func:`on_job_start` makes the placed job's group (``coshare.node``) with the cores
  and memory Slurm allocated on this node, the placement's devices and declared device memory
  and threads, and the job's account; the TaskProlog (as the user) then moves each task into
  it through the node daemon (``coshare-launch task-prolog``). When the group cannot be made,
  the reason is recorded, and the TaskProlog fails that job with it (a failing Prolog would
  drain the whole node). A placed job that starts on another node than its placement is
  refused the same way (:func:`refuse`): its devices and limits were planned for that node.
- Epilog: :func:`on_job_end` kills what is left and removes the group; when coshare killed the
  job, :func:`report_kill` tells the user: a ``coshare: <why>`` line at the end of the job's
  error file, written as the job's user (never as root into a path the user chose), and
  ``;killed=<why>`` in the job's AdminComment (in slurmctld while it still takes changes,
  else in the accounting record: ``sacct -o AdminComment``, where sacctmgr stores it folded
  to lower case).

Called from :mod:`slurm_addon.prolog`, which never lets an exception out.
"""

from __future__ import annotations

from coshare.commands import CommandRunner, run
from coshare.config import NodeConfig
from coshare.errors import CoshareError
from coshare.node import lifecycle
from coshare.node.jobs import JobRecord

from slurm_addon.allocation import Allocation, parse_stderr_path
from slurm_addon.client import SlurmClient
from slurm_addon.placement import Placement, with_kill_reason


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

    Raises:
        CoshareError: when the group cannot be made; the reason is recorded for the
            TaskProlog, which then fails the job with it.
    """
    try:
        return lifecycle.job_start(
            config,
            job_id,
            cores=allocation.cpus,
            memory_mib=allocation.memory_mib,
            devices=placement.devices,
            device_memory_mib=placement.device_memory_mib or None,
            device_threads=placement.device_threads or None,
            uid=uid,
        )
    except CoshareError as exc:
        lifecycle.node_store(config).record_error(job_id, str(exc))
        raise


def refuse(config: NodeConfig, job_id: str, reason: str) -> None:
    """Refuse to run a job on this node: the TaskProlog fails it with ``reason``."""
    lifecycle.node_store(config).record_error(job_id, reason)


def on_job_end(config: NodeConfig, job_id: str) -> lifecycle.EndResult:
    """Kill what is left of the job on this node and remove its group and record."""
    return lifecycle.job_end(config, job_id)


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
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "dd", f"of={path}",
         "oflag=append,nofollow", "conv=notrunc,nocreat", "status=none"],
        timeout_s=30, input_text=text,
    )  # fmt: skip
