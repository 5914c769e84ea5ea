"""The negotiator's order and the pool's limits put into a snapshot (pure).

::

    negotiator: getPriorities --> accounting.parse_priorities --> each job's priority
                configuration --> concurrency limits' maxima    \\
    collector: claimed slots ----------------------------------> pool_limits: limits,
    schedd: the managed jobs (submitter, ConcurrencyLimits) ---/   each pending job's charges

:func:`with_negotiator` takes what :mod:`condor_addon.source` read (once per cycle) and gives
the snapshot the policies plan: ``priority`` as the negotiator orders (``policy.order:
scheduler``; ``coshare`` keeps ``JobPrio``), ``limits`` and each pending job's ``charges``
(the core withholds a job whose charge would pass a limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from coshare.ledger.bounds import BadValue
from coshare.model import MILLI, Snapshot

from condor_addon import attributes as A
from condor_addon.accounting import Accounting, job_submitter, negotiator_order, parse_priorities
from condor_addon.concurrency import config_keys, wanted_setting
from condor_addon.pool_limits import Holder, claimed_holders, job_holder, pool_limits
from condor_addon.view import HOLDS_SLOT, QueueJob


@dataclass(frozen=True)
class NegotiatorAnswer:
    """What the negotiator said this cycle.

    Attributes:
        priorities: its ``getPriorities`` entries, or ``None`` when it could not be asked.
        settings: its concurrency-limit settings, or ``None`` when they could not be read.
        problem: why either could not be read (for the one note that says so).
    """

    priorities: Sequence[Mapping[str, object]] | None = None
    settings: Mapping[str, object] | None = None
    problem: str = ""


#: The negotiator's priority factor of a submitter it does not list yet.
PRIO_FACTOR = "DEFAULT_PRIO_FACTOR"


def negotiator_setting(key: str) -> bool:
    """Whether the cycle reads the negotiator's setting ``key``: a concurrency limit's
    maximum, or the priority factor of new submitters."""
    return wanted_setting(key) or key.upper() == PRIO_FACTOR


def _weight(q: QueueJob) -> float:
    """A queue job's slot weight: its cores (every machine's, for a parallel job)."""
    try:
        machines = q.min_hosts if q.is_parallel and isinstance(q.min_hosts, int) else 1
        return q.cpu_milli * max(machines, 1) / MILLI
    except BadValue:
        return 0.0


def queue_holders(
    jobs: Iterable[QueueJob], shown: frozenset[str], planned: frozenset[str]
) -> list[Holder]:
    """This schedd's jobs that hold a share the collector does not show: started ones whose
    slot it does not list yet, and open placements (``planned``) not started."""
    out: list[Holder] = []
    for q in jobs:
        started = q.status in HOLDS_SLOT and not (q.global_id and q.global_id in shown)
        placed = q.status == A.IDLE and q.id in planned
        if started or placed:
            out.append(
                job_holder(q.id, q.concurrency_limits, q.accounting_group, q.owner, _weight(q))
            )
    return out


def with_negotiator(
    snapshot: Snapshot,
    jobs: Mapping[str, QueueJob],
    slots: Sequence[Mapping[str, object]],
    answer: NegotiatorAnswer,
    *,
    scheduler_order: bool = True,
) -> tuple[Snapshot, tuple[str, ...]]:
    """``snapshot`` with the negotiator's priorities, the pool's limits and each pending job's
    charges, and the notes to show.

    Args:
        snapshot: as :func:`condor_addon.view.build_snapshot` made it (``priority`` is
            ``JobPrio``).
        jobs: this schedd's managed jobs, by id.
        slots: every slot ad of the pool, projected.
        answer: the negotiator's answer.
        scheduler_order: order as the negotiator (``policy.order: scheduler``); ``False``
            keeps ``JobPrio``.
    """
    notes: list[str] = []
    if answer.priorities is None:
        limits = "" if answer.settings is not None else " or concurrency limit"
        notes.append(
            f"the negotiator's user priorities and group quotas could not be read "
            f"({answer.problem}): this cycle plans by submit time and checks no group "
            f"quota{limits}"
        )
        accounting = Accounting()
    else:
        settings = answer.settings or {}
        factor = next((v for k, v in settings.items() if k.upper() == PRIO_FACTOR), None)
        accounting = parse_priorities(answer.priorities, factor)
        notes += accounting.notes
    pending = snapshot.pending
    submitters = {
        j.id: job_submitter(jobs[j.id].accounting_group, jobs[j.id].owner)
        for j in pending
        if j.id in jobs
    }
    if scheduler_order:
        if answer.priorities is None:
            pending = tuple(replace(j, priority=0) for j in pending)
        else:
            ranks, order_notes = negotiator_order(pending, submitters, accounting)
            notes += order_notes
            pending = tuple(replace(j, priority=ranks.get(j.id, 0)) for j in pending)
    if answer.settings is None and answer.priorities is not None:
        notes.append(
            f"the negotiator's configuration could not be read ({answer.problem}): "
            "concurrency limits are not checked this cycle"
        )
    planned = frozenset(r.id for r in snapshot.running if r.state == "planned")
    shown = frozenset(
        str(ad["GlobalJobId"])
        for ad in slots
        if ad.get("State") == "Claimed" and isinstance(ad.get("GlobalJobId"), str)
    )
    holders = claimed_holders(slots) + queue_holders(jobs.values(), shown, planned)
    found = pool_limits(
        pending,
        {
            j.id: job_holder(
                j.id,
                jobs[j.id].concurrency_limits,
                jobs[j.id].accounting_group,
                jobs[j.id].owner,
                0.0,
            )
            for j in pending
            if j.id in jobs
        },
        holders,
        accounting,
        config_keys(answer.settings or {}),
    )
    notes += found.notes
    pending = tuple(
        replace(j, charges=found.charges[j.id]) if j.id in found.charges else j for j in pending
    )
    return replace(snapshot, pending=pending, limits=found.limits), tuple(notes)
