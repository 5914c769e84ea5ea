"""The node side in Slurm: TaskProlog, Prolog and Epilog programs.

``coshare-slurm-prolog`` (``Prolog=``, root, before the job starts on the node) reads the
job's placement and allocation with one small ``squeue`` call and makes its group through
:mod:`slurm_addon.node_hooks` (own cores, memory limit, devices, declared device threads).
On each node of a multi-node job it makes that node's group: that node's devices
from the placement's part, that node's cores and memory from ``scontrol show job -d``. A
Spread-n-Share placement (``sns``) also gets its resctrl group with that node's LLC
ways (the placement's ``ways`` field); on a node without resctrl the job runs without them and
its tasks are told so (:func:`slurm_addon.node_hooks.sns_task_env`). A
placed job that starts on another node than its placement (its node list was changed behind
coshare's back) is refused: no group is made, and its TaskProlog fails it with the reason.

``coshare-slurm-task-prolog`` (``TaskProlog=``) runs as the job's user before each task; its
parent is the task about to ``exec`` the user's program. For a job the Prolog set up it asks
the node daemon to move that task into the job's group (JOIN, see
:func:`coshare.node.control.launcher.task_prolog`) and prints ``export NAME=value`` lines that
slurmstepd puts into the task's environment: the devices as ``CUDA_VISIBLE_DEVICES``
(NVIDIA), ``GPU_DEVICE_ORDINAL`` (AMD), ``OFFLOAD_DEVICES`` (Intel Xeon Phi offload), and
``COSHARE_*`` (cores, gate socket, declared limits). When the job's group could not be made,
or the task cannot join it, it prints why and exits 1: Slurm fails that job, not the node.
On a node without coshare's node daemon it exports the placement's devices only (read from
the AdminComment), and refuses a job placed on another node. ``coshare-launch task-prolog``
is the same without coshare's dependencies.

``coshare-slurm-epilog`` (``Epilog=``, root) writes the job-end record of a job with a
``CoshareProgram`` (``node.job_end_dir``, for the profiles learned from normal runs), removes
the group and, when coshare killed the job, tells the user why (AdminComment and the job's
error file).

The Prolog and Epilog always exit 0 (a failing Prolog drains the node).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from coshare.config import NodeConfig, SlurmConfig, load_config
from coshare.errors import CoshareError
from coshare.node.control.launcher import DEVICE_VARIABLES, task_prolog

from slurm_addon import node_hooks
from slurm_addon.allocation import Allocation, parse_node_allocation
from slurm_addon.client import SlurmClient
from slurm_addon.placement import Placement, PlacementError, parse_placement

__all__ = ["DEVICE_VARIABLES", "epilog_main", "prolog_main", "task_prolog_main"]


def moved_job(job_id: str, placement: Placement, node: str) -> str:
    """Why a placed job that starts on another node than its placement is refused."""
    where = ",".join(placement.nodes)
    return (
        f"job {job_id} was placed on {where} but starts on {node}; coshare planned "
        f"its devices and limits for {where} only, so it does not run here (cancel "
        "and resubmit it, or have an operator release it to be placed again)"
    )


def task_environment(placement: Placement, node: str, job_id: str) -> tuple[list[str], int]:
    """The TaskProlog's output for placed job ``job_id`` running on ``node`` (a gang's: that
    node's part), and its exit status (1, with the reason, when the job starts on a node that
    is not part of its placement)."""
    here = placement.on(node) if node else placement
    if here is None:
        return [f"print coshare: {moved_job(job_id, placement, node)}"], 1
    placement = here
    devices = ",".join(placement.devices)
    lines = [f"export {name}={devices}" for name in DEVICE_VARIABLES]
    lines += [
        f"export COSHARE_DEVICES={devices}",
        f"export COSHARE_NODE={placement.node}",
        f"export COSHARE_DEVICE_MEMORY_MIB={placement.device_memory_mib}",
        f"export COSHARE_DEVICE_THREADS={placement.device_threads}",
    ]
    if placement.spread is not None:
        s = placement.spread
        lines.append(f"export COSHARE_SPREAD={s.scale}:{s.nodes}:{s.cores_per_node}")
    if placement.llc_ways is not None:  # no node daemon here: nobody made a resctrl group
        lines += [
            "export COSHARE_LLC_WAYS=unsupported",
            f"print coshare: job {job_id} runs on {placement.node} without its "
            f"{placement.llc_ways} LLC ways: no coshare node daemon here",
        ]
    if placement.spread is not None and placement.spread.membw_gbps is not None:
        lines += [
            "export COSHARE_MEMBW_PERCENT=unsupported",
            f"print coshare: job {job_id} runs on {placement.node} without its memory "
            f"bandwidth cap ({placement.spread.membw_gbps:g} GB/s): no coshare node "
            "daemon here",
        ]
    return lines, 0


def read_placement(
    environ: Mapping[str, str], client: SlurmClient | None = None
) -> Placement | None:
    """The placement of the job in ``SLURM_JOB_ID``, or ``None`` (no job, not placed).

    Raises:
        CoshareError: Slurm could not be asked.
        PlacementError: the AdminComment is an unreadable placement.
    """
    job_id = environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        return None
    return parse_placement((client or prolog_client(environ)).admin_comment(job_id))


def prolog_client(environ: Mapping[str, str]) -> SlurmClient:
    """The Slurm client of the node programs: short timeouts, a few retries."""
    return SlurmClient(
        SlurmConfig(command_timeout_s=10.0, retry_attempts=3, retry_wait_s=0.5), environ=environ
    )


def node_config(environ: Mapping[str, str], *, user: bool = False) -> NodeConfig:
    """The node section of coshare's configuration.

    Args:
        environ: the program's environment.
        user: it is the user's environment (the TaskProlog): only ``COSHARE_CONFIG`` is
            taken from it, not ``COSHARE_NODE_*`` overrides.
    """
    if user:
        environ = {k: v for k, v in environ.items() if k == "COSHARE_CONFIG"}
    return load_config(environ=environ).node


def _say(message: str) -> None:
    print(f"coshare: {message}", file=sys.stderr)


def task_prolog_main() -> None:
    """Entry point of ``coshare-slurm-task-prolog`` (the job's user, before each task)."""
    environ = dict(os.environ)
    try:
        config = node_config(environ, user=True)
    except CoshareError as exc:
        print(f"print coshare: cannot read coshare's configuration: {exc}")
        sys.exit(1)
    joined = task_prolog(config.control_socket, config.gate_socket, config.state_dir, environ)
    if joined is not None:
        print("\n".join(joined[0]))
        sys.exit(joined[1])
    # Not set up by coshare's Prolog here (no node daemon, or the Prolog is not coshare's): a
    # job coshare placed must not run without its group and limits, so it is refused.
    try:
        placement = read_placement(environ)
    except (CoshareError, PlacementError) as exc:
        # Better a job without COSHARE_* than a failed task; the cause goes to the job's log.
        print(f"print coshare: warning: cannot read this job's placement: {exc}")
        return
    if placement is not None:
        node = environ.get("SLURMD_NODENAME", "") or "this node"
        print(
            f"print coshare: job {environ['SLURM_JOB_ID']} cannot run on {node}: coshare's "
            "Prolog did not set up its group here (is coshare-slurm-prolog the node's Prolog "
            "and coshare's node daemon running?); it would run without coshare's limits"
        )
        sys.exit(1)


def prolog_main() -> None:
    """Entry point of ``coshare-slurm-prolog`` (root, before the job starts on this node)."""
    environ = dict(os.environ)
    job_id = environ.get("SLURM_JOB_ID", "")
    try:
        if not job_id.isdigit():
            return
        allocation, admin = prolog_client(environ).job_allocation(job_id)
        placement = parse_placement(admin)
        if placement is None:
            return  # not coshare's job
        node = environ.get("SLURMD_NODENAME", "")
        here = placement.on(node) if node else placement
        if here is None:
            # Its devices and limits were planned for another node: it must not run here. The
            # TaskProlog fails it with this reason (a failing Prolog would drain the node).
            refusal = moved_job(job_id, placement, node)
            node_hooks.refuse(node_config(environ), job_id, refusal)
            _say(refusal)
            return
        if placement.parts:
            # A gang: its TRES are the sums over its nodes; this node's own share.
            detail = prolog_client(environ).show_job_detail(job_id)
            allocation = parse_node_allocation(detail, node) or Allocation(None, None)
        uid = int(environ["SLURM_JOB_UID"])
        record = node_hooks.on_job_start(node_config(environ), job_id, here, allocation, uid)
        ways = "" if record.spec.llc_ways is None else f", {record.spec.llc_ways} LLC ways"
        _say(
            f"job {job_id}: group with cpus {','.join(map(str, record.spec.cpus)) or '-'}, "
            f"memory {record.spec.memory_mib} MiB{ways}"
        )
    except Exception as exc:  # never drain a node for one job's problem
        _say(f"prolog of job {job_id}: {exc}")


def epilog_main() -> None:
    """Entry point of ``coshare-slurm-epilog`` (root, after the job ended on this node)."""
    environ = dict(os.environ)
    job_id = environ.get("SLURM_JOB_ID", "")
    try:
        if not job_id.isdigit():
            return
        config = node_config(environ)
        if config.job_end_dir is not None:
            try:
                node = environ.get("SLURMD_NODENAME", "")
                node_hooks.record_job_end(config, prolog_client(environ), job_id, node)
            except Exception as exc:  # the job's end goes on without its record
                _say(f"epilog of job {job_id}: no job-end record: {exc}")
        result = node_hooks.on_job_end(config, job_id)
        if result.reason is not None:
            problems = node_hooks.report_kill(
                prolog_client(environ),
                job_id,
                result.reason,
                int(environ["SLURM_JOB_UID"]),
                int(environ["SLURM_JOB_GID"]),
            )
            for problem in problems:
                _say(problem)
    except Exception as exc:  # never drain a node for one job's problem
        _say(f"epilog of job {job_id}: {exc}")
