"""The HTCondor read: the pool's slot ads and the schedd's managed jobs into a snapshot.

::

    collector: every slot ad ---> parse_slots --> nodes, devices, claimed slots
    schedd: managed active jobs -> parse_queue --> the ledger: pending, placed, refused
                                   build_snapshot --> Snapshot
    (several planners) the other schedds' open placements, held here too
    node facts from the slot ads
    negotiator: user priorities, group quotas, concurrency limits -> order.with_negotiator

Slots are read before jobs, so a job that starts in between is still counted (from its queue
entry, as running). :mod:`condor_addon.view` says where each fact comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coshare.config import Config
from coshare.errors import SchedulerUnavailable
from coshare.ports import SourceResult

from condor_addon import expressions as X
from condor_addon.client import CondorClient
from condor_addon.order import NegotiatorAnswer, negotiator_setting, with_negotiator
from condor_addon.view import (
    QueueJob,
    QueueView,
    build_snapshot,
    foreign_planned,
    local_lenders,
    parse_queue,
    parse_slots,
    read_job,
    with_node_facts,
)


def managed_jobs(client: CondorClient, constraint: str) -> dict[str, QueueJob]:
    """The schedd's jobs matching ``constraint`` that read, by id (each borrower's GPU job
    named as the snapshot names it)."""
    jobs = (read_job(v) for v in client.job_ads(constraint))
    return local_lenders(j for j in jobs if j is not None)


@dataclass(frozen=True)
class Read:
    """One read: what the cycle plans, and what the Editor compares with."""

    result: SourceResult
    jobs: dict[str, QueueJob]
    queue: QueueView


def read_pool(client: CondorClient, config: Config, now_s: float) -> Read:
    """Take a snapshot of the pool and the schedd's managed jobs.

    Raises:
        SchedulerUnavailable: the collector or the schedd cannot be reached.
    """
    slots = client.slot_ads()
    cluster = parse_slots(slots, config.device_kinds)
    jobs = managed_jobs(client, X.ACTIVE_MANAGED_JOBS)
    queue = parse_queue(
        jobs.values(),
        cluster,
        now_s=now_s,
        replan_after_s=config.cycle.replan_after_s,
        parallel_may_double=config.condor.parallel_may_double,
    )
    snapshot = build_snapshot(cluster, queue, jobs.values(), now_s)
    others: tuple[str, ...] = ()
    if config.coordination.dsn is not None:
        # Several planners, one per schedd: the other schedds' open placements hold their
        # devices here too.
        ads, notes = client.other_job_ads(X.ACTIVE_MANAGED_JOBS)
        foreign, unread = foreign_planned(
            (j for j in (read_job(v) for _, v in ads) if j is not None), cluster
        )
        snapshot = replace(snapshot, running=snapshot.running + foreign)
        others = tuple(notes) + unread
    snapshot, order_notes = with_negotiator(
        snapshot,
        jobs,
        slots,
        ask_negotiator(client),
        scheduler_order=config.policy.order == "scheduler",
    )
    others += order_notes
    snapshot, facts_notes = with_node_facts(
        snapshot, cluster, jobs.values(), now_s=now_s, max_age_s=config.cycle.node_facts_max_age_s
    )
    result = SourceResult(
        snapshot,
        queue.book.rejected,
        notes=cluster.warnings + queue.warnings + facts_notes + others,
        unusable=cluster.unusable,
    )
    return Read(result, jobs, queue)


def ask_negotiator(client: CondorClient) -> NegotiatorAnswer:
    """The negotiator's user priorities and group quotas, and its concurrency-limit settings
    (once per cycle); what could not be read is ``None``, with why."""
    problems: list[str] = []
    priorities = settings = None
    try:
        priorities = client.negotiator_priorities()
    except SchedulerUnavailable as exc:
        problems.append(str(exc))
    try:
        settings = client.negotiator_settings(negotiator_setting)
    except SchedulerUnavailable as exc:
        if str(exc) not in problems:
            problems.append(str(exc))
    return NegotiatorAnswer(priorities, settings, "; ".join(problems))
