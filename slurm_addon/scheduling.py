"""What Slurm's own scheduling says of coshare's pending jobs: their priority and limits.

::

    scontrol show config  --> weights, ClusterName, AccountingStorageEnforce
    sshare                --> fair-share factor per (account, user)     slurm_addon.priority
    scontrol show partition -> PriorityJobFactor per partition
    sacctmgr show qos     --> QOS priorities and limits                 slurm_addon.limits
    sacctmgr show assoc   --> association limits
            |
            v
    with_scheduling(snapshot): each pending job's ``priority`` (``policy.order: scheduler``)
    and ``charges``, the snapshot's ``limits`` (coshare.ledger.limits applies them)

A command that fails is a note, never a failed cycle: without ``sshare`` the jobs are
planned by submit time, without ``sacctmgr`` no limit is known (Slurm still enforces its
own, and a job it keeps waiting is planned again after ``cycle.replan_after_s``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from coshare.errors import CoshareError
from coshare.model import Snapshot

from slurm_addon.client import SlurmClient
from slurm_addon.jobs import SlurmJob
from slurm_addon.limits import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    Rule,
    limits_and_charges,
    parse_assocs,
    parse_qos,
)
from slurm_addon.priority import (
    Factors,
    PriorityProblem,
    parse_partition_factors,
    parse_sshare,
    parse_weights,
    priorities,
)


@dataclass(frozen=True)
class Scheduling:
    """Slurm's priority factors and limits, as read this cycle.

    Attributes:
        factors: the priority's factors; ``None``: plan by submit time (not asked for, or
            unreadable: ``notes`` says which).
        rules: the QOS and association limits.
        notes: what an admin should know (said once per cycle).
    """

    factors: Factors | None = None
    rules: tuple[Rule, ...] = ()
    notes: tuple[str, ...] = ()


def _config_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def read_scheduling(client: SlurmClient, *, order: str, nodes: int, cpus: int) -> Scheduling:
    """Read what :func:`with_scheduling` needs; every failure is a note.

    Args:
        order: ``policy.order``: priorities are read only for ``scheduler``.
        nodes: the cluster's nodes (job-size factor).
        cpus: the cluster's CPUs (job-size factor).
    """
    notes: list[str] = []
    try:
        config_text = client.read_text("scontrol", "show", "config")
    except CoshareError as exc:
        return Scheduling(
            notes=(
                f"Slurm's configuration could not be read ({exc}); jobs are "
                "planned by submit time and no limit is known",
            )
        )
    config = _config_values(config_text)
    enforce = config.get("AccountingStorageEnforce", "")
    qos_priority: dict[str, float] = {}
    rules: list[Rule] = []
    accounting = config.get("AccountingStorageType", "") == "accounting_storage/slurmdbd"
    if accounting:
        try:
            qos_priority, qos_rules = parse_qos(
                client.read_text("sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"),
                notes,
            )
            if "limits" in enforce or "qos" in enforce:
                rules += qos_rules
            if "limits" in enforce:
                rules += parse_assocs(
                    client.read_text(
                        "sacctmgr", "-n", "-P", "show", "assoc", f"format={ASSOC_FORMAT}"
                    ),
                    config.get("ClusterName", ""),
                    notes,
                )
        except CoshareError as exc:
            notes.append(
                f"Slurm's QOS and association limits could not be read ({exc}); "
                "coshare does not know them this cycle"
            )
    factors = None
    if order == "scheduler":
        factors = _factors(client, config_text, qos_priority, nodes, cpus, notes)
    return Scheduling(factors, tuple(rules), tuple(notes))


def _factors(
    client: SlurmClient,
    config_text: str,
    qos_priority: Mapping[str, float],
    nodes: int,
    cpus: int,
    notes: list[str],
) -> Factors | None:
    try:
        weights = parse_weights(config_text)
        if not weights.multifactor:
            # priority/basic orders by submit time: so does coshare without a priority
            return None
        fairshare = {}
        if weights.weights["PriorityWeightFairShare"]:
            fairshare = parse_sshare(
                client.read_text("sshare", "-a", "-n", "-P", "-o", "Account,User,FairShare")
            )
        partitions = parse_partition_factors(
            client.read_text("scontrol", "show", "partition", "-o")
        )
    except (CoshareError, PriorityProblem) as exc:
        notes.append(
            f"jobs are planned by submit time this cycle: Slurm's priority factors "
            f"could not be read ({exc})"
        )
        return None
    return Factors(weights, fairshare, qos_priority, partitions, nodes, cpus)


def with_scheduling(
    snapshot: Snapshot, jobs: Sequence[SlurmJob], scheduling: Scheduling, now_s: float
) -> tuple[Snapshot, tuple[str, ...]]:
    """``snapshot`` with each pending job's Slurm priority and charges, and the limits they
    are charged to; the notes of this cycle."""
    by_id = {j.id: j for j in jobs}
    pending = [by_id[j.id] for j in snapshot.pending if j.id in by_id]
    notes = list(scheduling.notes)
    prio: dict[str, int] = {}
    if scheduling.factors is not None:
        prio, found = priorities(pending, scheduling.factors, now_s)
        notes += found
    holding = {r.id for r in snapshot.running if r.state == "planned"}
    limits, charges = limits_and_charges(scheduling.rules, jobs, {j.id for j in pending}, holding)
    if not prio and not charges:
        return snapshot, tuple(notes)
    jobs_out = tuple(
        replace(
            j,
            priority=prio.get(j.id, j.priority),
            charges=charges.get(j.id, j.charges),
        )
        for j in snapshot.pending
    )
    return replace(snapshot, pending=jobs_out, limits=limits), tuple(notes)
