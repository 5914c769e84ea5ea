"""Scheduler limits: a job the scheduler would not start is not placed.

A Slurm QOS or association limit (``MaxTRESPerUser``, ``GrpTRES``, ``MaxJobs``...) or an
HTCondor group quota or concurrency limit keeps a job waiting however free the devices are.
Planned anyway, the job would hold its device idle until its placement timed out. The
adapters translate each such limit into a :class:`~coshare.model.Limit` (what it allows, what
running jobs hold of it) and each pending job's share of it into ``Job.charges``; the rule
that uses them lives here, once for both schedulers, and the cycle applies it around every
policy (:func:`coshare.cycle.run.checked_plan`)::

    snapshot --withhold--> jobs that cannot fit even alone wait; the rest go to the policy
    policy.plan --> plan --admit--> its placements, highest priority first, each only while
                                    used + admitted this cycle + its charge <= max

A job that does not fit waits with a reason naming the limit and its numbers
(``MaxTRESPerUser gres/gpu=4: user alice holds 4 (max 4); this job needs 1``), which
``explain``, ``show`` and the job's wait reason (:mod:`coshare.ledger.wait_reasons`) carry.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from coshare.ledger.bounds import plain
from coshare.model import Job, Limit, Plan, Snapshot, Unplaced, priority_key

#: The largest ``max``, ``used`` or charge accepted (GRES counts, CPU counts, job counts);
#: the snapshot's contract refuses larger ones (:mod:`coshare.contracts.snapshot_doc`).
MAX_LIMIT_AMOUNT = 1e12

#: Slack for amounts summed in floating point (fractional CPUs): 4.000000000001 is still 4.
_EPSILON = 1e-9


def amount_problem(value: object) -> str | None:
    """Why ``value`` cannot be a limit's ``max``/``used`` or a charge; ``None`` when it can."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "is not a number"
    if not math.isfinite(value):
        return "is not finite"
    if value < 0:
        return "is negative"
    if value > MAX_LIMIT_AMOUNT:
        return f"exceeds {plain(MAX_LIMIT_AMOUNT)}"
    return None


def over_limit(limit: Limit, held: float, charge: float) -> str:
    """The wait reason of a job whose ``charge`` does not fit ``limit`` while ``held`` of it
    is taken (by running jobs and those admitted before it this cycle)."""
    return (
        f"{limit.name}: {limit.holder} holds {_amount(held)} (max {_amount(limit.max)}); "
        f"this job needs {_amount(charge)}"
    )


def _amount(value: float) -> str:
    return plain(value) if float(value).is_integer() else f"{value:.4g}"


@dataclass
class LimitBook:
    """What each limit holds while one cycle admits jobs: ``used`` plus what it admitted."""

    limits: dict[str, Limit]
    held: dict[str, float]

    @classmethod
    def of(cls, snapshot: Snapshot) -> LimitBook:
        """The book of ``snapshot``'s limits, holding what its running jobs use."""
        limits = {lim.id: lim for lim in snapshot.limits}
        return cls(limits, {ident: lim.used for ident, lim in limits.items()})

    def refusal(self, job: Job, *, alone: bool = False) -> str | None:
        """Why ``job`` cannot start now (the first limit its charges exceed), or ``None``.

        Args:
            alone: count only what running jobs hold (before any admission this cycle).
        """
        for ident, amount in job.charges:
            limit = self.limits.get(ident)
            if limit is None:
                return f"charged to limit {ident!r}, which the scheduler did not report"
            held = limit.used if alone else self.held[ident]
            if held + amount > limit.max + _EPSILON:
                return over_limit(limit, held, amount)
        return None

    def admit(self, job: Job) -> None:
        """Count ``job``'s charges as held."""
        for ident, amount in job.charges:
            if ident in self.held:
                self.held[ident] += amount


def withhold(snapshot: Snapshot) -> tuple[Snapshot, tuple[Unplaced, ...]]:
    """The snapshot a policy plans: without the jobs that exceed a limit even alone (what
    running jobs hold plus their own charge), and those jobs' waits.

    A snapshot without limits (or without charged jobs) is returned as it is.
    """
    if not snapshot.limits and not any(j.charges for j in snapshot.pending):
        return snapshot, ()
    book = LimitBook.of(snapshot)
    kept: list[Job] = []
    waits: list[Unplaced] = []
    for job in snapshot.pending:
        why = book.refusal(job, alone=True) if job.charges else None
        if why is None:
            kept.append(job)
        else:
            waits.append(Unplaced(job.id, why, "no_room"))
    if not waits:
        return snapshot, ()
    return replace(snapshot, pending=tuple(kept)), tuple(waits)


def admit(snapshot: Snapshot, plan: Plan) -> Plan:
    """``plan`` with only the placements that fit every limit together: admitted in
    :func:`~coshare.model.priority_key` order (the scheduler's: a limit's room goes to the
    job it would start first); one that would take a limit past its ``max`` is dropped
    (all its assignments, its trial and its spread) and waits with the limit's numbers."""
    charged = {j.id: j for j in snapshot.pending if j.charges}
    placed = [charged[job] for job in plan.placed_jobs if job in charged]
    if not placed:
        return plan
    book = LimitBook.of(snapshot)
    dropped: dict[str, str] = {}
    for job in sorted(placed, key=priority_key):
        why = book.refusal(job)
        if why is None:
            book.admit(job)
        else:
            dropped[job.id] = why
    if not dropped:
        return plan
    return replace(
        plan,
        assignments=tuple(a for a in plan.assignments if a.job not in dropped),
        unplaced=plan.unplaced
        + tuple(Unplaced(job, why, "no_room") for job, why in sorted(dropped.items())),
        trials=tuple(t for t in plan.trials if t.job not in dropped),
        spreads=tuple(s for s in plan.spreads if s.job not in dropped),
    )


def with_waits(plan: Plan, waits: tuple[Unplaced, ...]) -> Plan:
    """``plan`` with the jobs :func:`withhold` kept from the policy, waiting."""
    if not waits:
        return plan
    return replace(plan, unplaced=plan.unplaced + waits)
