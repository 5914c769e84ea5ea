"""The node side in Slurm: TaskProlog, Prolog and Epilog programs.

``coshare-slurm-task-prolog`` (slurm.conf ``TaskProlog=``) runs as the job's user before each
task and prints ``export NAME=value`` lines that slurmstepd puts into the task's environment:
the devices of the job's placement as ``CUDA_VISIBLE_DEVICES`` (NVIDIA), ``GPU_DEVICE_ORDINAL``
(AMD), ``OFFLOAD_DEVICES`` (Intel Xeon Phi offload) and ``COSHARE_*``. A CPU-only job sees
no device. Jobs without a placement are left as they are.

``coshare-slurm-prolog`` / ``-epilog`` (``Prolog=``, ``Epilog=``, run as root by slurmd) call
the node helpers' hooks in :mod:`slurm_addon.node_hooks`.

All three read the placement from the job's AdminComment with one small ``squeue`` call,
always exit 0 (a failing Prolog drains the node) and import nothing heavy, since they run
at every job start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from coshare.config import SlurmConfig
from coshare.errors import CoshareError

from slurm_addon import node_hooks
from slurm_addon.client import SlurmClient
from slurm_addon.placement import Placement, PlacementError, parse_placement

#: Device selection variables of the common accelerator runtimes.
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "OFFLOAD_DEVICES")


def task_environment(placement: Placement, node: str) -> list[str]:
    """The TaskProlog's output for a placed job running on ``node``."""
    devices = ",".join(placement.devices)
    lines = [f"export {name}={devices}" for name in DEVICE_VARIABLES]
    lines += [
        f"export COSHARE_DEVICES={devices}",
        f"export COSHARE_NODE={placement.node}",
        f"export COSHARE_DEVICE_MEMORY_MIB={placement.device_memory_mib}",
        f"export COSHARE_DEVICE_THREADS={placement.device_threads}",
    ]
    if node and node != placement.node:
        lines.append(
            f"print coshare: warning: this job was placed on {placement.node} but runs on "
            f"{node}; it uses the devices of its placement ({devices or 'none'})"
        )
    return lines


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
    if client is None:
        client = SlurmClient(
            SlurmConfig(command_timeout_s=10.0, retry_attempts=3, retry_wait_s=0.5),
            environ=environ,
        )
    return parse_placement(client.admin_comment(job_id))


def _say(message: str) -> None:
    print(f"coshare: {message}", file=sys.stderr)


def task_prolog_main() -> None:
    """Entry point of ``coshare-slurm-task-prolog``."""
    try:
        placement = read_placement(os.environ)
    except (CoshareError, PlacementError) as exc:
        # Better a job without COSHARE_* than a failed task; the cause goes to the job's log.
        print(f"print coshare: warning: cannot read this job's placement: {exc}")
        return
    if placement is not None:
        print("\n".join(task_environment(placement, os.environ.get("SLURMD_NODENAME", ""))))


def prolog_main() -> None:
    """Entry point of ``coshare-slurm-prolog`` (root, before the job starts on this node)."""
    try:
        placement = read_placement(os.environ)
        if placement is not None:
            node_hooks.on_job_start(
                os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME", ""),
                placement,
            )  # fmt: skip
    except Exception as exc:  # never drain a node for one job's problem
        _say(f"prolog of job {os.environ.get('SLURM_JOB_ID')}: {exc}")


def epilog_main() -> None:
    """Entry point of ``coshare-slurm-epilog`` (root, after the job ended on this node)."""
    try:
        node_hooks.on_job_end(
            os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME", "")
        )
    except Exception as exc:  # never drain a node for one job's problem
        _say(f"epilog of job {os.environ.get('SLURM_JOB_ID')}: {exc}")
