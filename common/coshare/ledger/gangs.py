"""Multi-node (gang) jobs: what a job that spans nodes asks for, checked once for every reader.

A gang (Spread-n-Share section 4, a job of P processes on n = k * ceil(P/T) nodes;
the distributed allocation paper's gang jobs) asks for

- ``nodes`` .. ``nodes_max`` nodes (Slurm's ``-N min[-max]``, HTCondor's ``machine_count``),
- ``processes`` processes in all (Slurm's ``--ntasks``), at most ``processes_per_node`` on one
  node (``--ntasks-per-node``),
- per process: ``cpu_milli`` cores and ``memory_mib`` host memory; per node: ``device_count``
  devices, each with ``device_memory_mib`` and ``device_threads`` (Slurm's
  ``--gpus-per-node``).

All or nothing: a gang is placed on all its nodes in one cycle or not at all. On ``n`` nodes
its processes are split evenly, the first ``processes mod n`` nodes taking one more (Slurm's
block distribution of equal nodes), so every node gets at least one. A missing ``processes``
reads as ``nodes x processes_per_node`` (one process per node without a per-node count, as
HTCondor's parallel universe starts one per machine). Pure: no I/O.
"""

from __future__ import annotations

from coshare.model import Job


def gang_problems(job: Job) -> list[tuple[str, object, str]]:
    """Why a job's gang fields cannot all hold: ``(field, value, allowed)`` each, empty when
    they are consistent (a single-node job always is)."""
    problems: list[tuple[str, object, str]] = []
    high = job.nodes_max if job.nodes_max is not None else job.nodes
    if job.nodes_max is not None and job.nodes_max < job.nodes:
        problems.append(("nodes_max", job.nodes_max, f"an integer >= nodes ({job.nodes})"))
        return problems
    if job.processes < job.nodes:
        every = f"an integer >= nodes ({job.nodes}): every node runs a process"
        problems.append(("processes", job.processes, every))
    ppn = job.processes_per_node
    if ppn is not None and job.processes > ppn * high:
        problems.append(
            (
                "processes_per_node",
                ppn,
                f"an integer >= ceil(processes / nodes) = "
                f"{-(-job.processes // high)} ({job.processes} processes on at most "
                f"{high} nodes)",
            )
        )
    return problems


def node_counts(job: Job) -> range:
    """The node counts a gang may take, fewest first (each node gets at least one process and
    at most ``processes_per_node``); empty when its fields are inconsistent."""
    high = min(job.nodes_max if job.nodes_max is not None else job.nodes, job.processes)
    low = job.nodes
    if job.processes_per_node is not None:
        low = max(low, -(-job.processes // job.processes_per_node))
    return range(low, high + 1)


def split(processes: int, nodes: int) -> list[int]:
    """``processes`` over ``nodes`` as evenly as possible, larger shares first."""
    q, r = divmod(processes, nodes)
    return [q + 1] * r + [q] * (nodes - r)


def share_of_node_request(per_node: int, processes: int, nodes_high: int) -> int:
    """A per-node host request (Slurm's ``--mem``) as a per-process share that no allowed
    split under-counts: every node gets at least ``processes // nodes_high`` processes (the
    smallest share of the widest split), so that many shares hold the node's request."""
    smallest = max(processes // max(nodes_high, 1), 1)
    return -(-per_node // smallest)
