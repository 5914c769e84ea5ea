"""Where the node helpers plug into Slurm's Prolog and Epilog.

The node-helpers issue builds ``coshare.node`` (cgroup cpuset and memory limits, the offload
gate that serializes offloads which would oversubscribe a device's threads). The lead wires
it here; until then these hooks do nothing, and a job is confined only by Slurm itself.
They run as root on the compute node, from ``coshare-slurm-prolog`` / ``-epilog``
(:mod:`slurm_addon.prolog`), and must not raise for a problem of one job: a failing Prolog
makes Slurm drain the node.
"""

from __future__ import annotations

from slurm_addon.placement import Placement


def on_job_start(job_id: str, node: str, placement: Placement) -> None:
    """NODE HELPERS HOOK: apply a placed job's limits on this node before it starts.

    Args:
        job_id: the Slurm job id.
        node: this node's name (``SLURMD_NODENAME``).
        placement: its devices and the device memory and threads it was placed for.
    """
    del job_id, node, placement  # wired to coshare.node by the node-helpers issue


def on_job_end(job_id: str, node: str) -> None:
    """NODE HELPERS HOOK: release what :func:`on_job_start` set up for a job on this node."""
    del job_id, node  # wired to coshare.node by the node-helpers issue
