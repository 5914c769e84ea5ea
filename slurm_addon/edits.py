"""Slurm's codec of the write protocol: a placement as scontrol takes it, and a job as the
protocol re-reads it. Pure, so tested without Slurm.

A placement is ``ReqNodeList`` and ``AdminComment`` in one update (Slurm never sees one
without the other), with the time of this cycle; a gang's also with its ``NumNodes``,
``NumTasks``, ``MinCPUsNode`` (and ``TasksPerNode`` when its split is even), all nodes in
that same one update. A job that ended, started, or whose comment or AdminComment changed
since the read is skipped with the reason (it is planned again next cycle). The order of the
writes is the core's (:mod:`coshare.cycle.protocol`).
"""

from __future__ import annotations

from dataclasses import dataclass

from coshare.ledger.book import Current, Write
from coshare.ledger.trials import TrialRecord, format_trial
from coshare.model import MILLI

from slurm_addon.jobs import SlurmJob
from slurm_addon.placement import (
    Placement,
    PlacementError,
    format_placement,
    parse_placement,
    waiting_reason,
    with_trial,
)
from slurm_addon.scontrol import update_line
from slurm_addon.view import placed_of, same_nodes


@dataclass(frozen=True)
class PlacementWrite:
    """One job's placement to write, then (once confirmed) release.

    Attributes:
        job: the job id.
        node: its ReqNodeList (a gang: its first node).
        admin_comment: the placement text.
        nodes: a gang's nodes (its ReqNodeList and NumNodes); empty for a single-node job.
        tasks: a gang's tasks in all (NumTasks).
        tasks_per_node: a gang's tasks on each node when the plan split them evenly
            (TasksPerNode); 0 for an uneven split (see :func:`~slurm_addon.scontrol.update_line`).
        min_cpus_per_node: a gang's largest part's CPUs (MinCPUsNode): Slurm allocates that
            many on each node, as the ledger counts it (:func:`coshare.ledger.book.held`).
        partition: the lending partition a job of a lent core moves into (``collocate``:
            a CPU-only job placed on a GPU job's idle cores, or a GPU job that may lend);
            ``None``: it stays where it is.
    """

    job: str
    node: str
    admin_comment: str
    nodes: tuple[str, ...] = ()
    tasks: int = 0
    tasks_per_node: int = 0
    min_cpus_per_node: int = 0
    partition: str | None = None

    def line(self) -> str:
        """This placement as a line for scontrol's standard input.

        Raises:
            UnsafeValue: it holds characters outside the safe set.
        """
        return update_line(
            self.job,
            self.node,
            self.admin_comment,
            nodes=self.nodes,
            tasks=self.tasks,
            tasks_per_node=self.tasks_per_node,
            min_cpus_per_node=self.min_cpus_per_node,
            partition=self.partition,
        )

    def confirmed(self, required_nodes: str) -> bool:
        """Whether a re-read ReqNodeList is this write's."""
        if not self.nodes:
            return required_nodes == self.node
        return same_nodes(required_nodes, self.nodes)


def change_since_read(seen: SlurmJob | None, now: SlurmJob) -> str | None:
    """Why a pending job can no longer be written as planned, or ``None`` when it is as it
    was read."""
    if seen is None:
        return "was not in the snapshot"
    if now.comment != seen.comment:
        return "its comment changed since it was read; planned again next cycle"
    if now.admin_comment != seen.admin_comment:
        return "its AdminComment changed since it was read (another cycle, or an admin)"
    return None


def current(now: SlurmJob, seen: SlurmJob | None) -> Current:
    """A job as the Editor re-read it, for :func:`coshare.ledger.book.decide`."""
    try:
        placement = parse_placement(now.admin_comment)
    except PlacementError:
        placement = None
    # A wait reason goes only on a waiting, held job whose AdminComment is empty or an
    # older reason: a placement (its write replaces the record), a refusal and an
    # operator's own text are left as they are.
    text = now.admin_comment.strip()
    reason = waiting_reason(text) if text else None
    return Current(
        id=now.id,
        state=now.state.lower() or now.phase,
        pending=now.phase == "pending",
        gate_open=not now.held,
        placed=placed_of(placement, now),
        changed=change_since_read(seen, now),
        may_note=now.phase == "pending" and now.held and (not text or reason is not None),
        wait_reason=reason,
        started=now.phase == "active",
    )


def placement_write(write: Write, now_s: float, lend_partition: str | None) -> PlacementWrite:
    """``write`` in Slurm's terms.

    Raises:
        PlacementError, ValueError: its placement cannot be recorded.
    """
    if write.harvest_from is not None and lend_partition is None:
        raise PlacementError("placed on lent cores, but slurm.lend_partition is not set")
    # A gang planned on one node (``-N 1-4`` at one node: ``sns`` at scale 1) is pinned
    # to NumNodes=1-1 by its write, so read back it is a single-node job: its placement
    # then records no parts, as a single-node job's (one with parts would be "gone").
    recorded = write.parts if len(write.parts) > 1 else ()
    target = Placement(
        write.node,
        write.devices,
        int(now_s),
        write.device_memory_mib,
        write.device_threads,
        recorded,
        write.llc_ways,
        write.spread,
        write.harvest_from,
    )
    text = format_placement(target)
    if write.trial is not None:  # the trial's record starts with its placement
        text = with_trial(text, format_trial(TrialRecord("placed", int(now_s), write.trial)))
    if not write.parts:
        moved = lend_partition if write.shares_cores else None
        return PlacementWrite(write.job, write.node, text, partition=moved)
    counts = [p.processes for p in write.parts]
    even = counts[0] if len(set(counts)) == 1 else 0
    cpus = max(counts) * -(-write.cpu_milli // MILLI)  # CPUs per task
    nodes = (write.node,) if not recorded else target.nodes
    return PlacementWrite(write.job, write.node, text, nodes, sum(counts), even, cpus)
