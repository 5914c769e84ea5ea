"""The pool's limits on starting jobs, and what each pending job would take of them (pure).

Two kinds, both enforced by the negotiator, so a job over one is never matched however free
the device coshare planned for it is:

- **concurrency limits** (:mod:`condor_addon.concurrency`): each limit a job names in its
  ``ConcurrencyLimits``, against the maximum the pool's configuration gives it;
- **accounting-group quotas** (``GROUP_QUOTA_<group>``, ``GROUP_QUOTA_DYNAMIC_<group>``): a
  group that takes no surplus (``GROUP_ACCEPT_SURPLUS`` false, the default) runs jobs only up
  to its quota, counted in slot weight (``SLOT_WEIGHT``, the slot's cores by default); the
  quota is the negotiator's ``EffectiveQuota`` (:mod:`condor_addon.accounting`).

What is held now is counted as the negotiator counts it, from every claimed slot of the pool
(whatever schedd's): each carries its job's ``ConcurrencyLimits``, its
``RemoteNegotiatingGroup`` and its ``SlotWeight``. This schedd's jobs that hold a slot the
collector does not show yet, and its placements not yet started (they take their share the
moment they match), are added from the queue.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from coshare.ledger.bounds import BadValue, as_float, plain, shorten_text
from coshare.model import MILLI, Job, Limit

from condor_addon.accounting import Accounting, Group, group_of, job_submitter, submitter_name
from condor_addon.concurrency import limit_maximum, parse_request

#: A group's or limit's name in a limit's id (the core's ids are id characters).
_ID_SAFE = re.compile(r"[A-Za-z0-9_.+-]{1,200}")


@dataclass(frozen=True)
class Holder:
    """What one job or claimed slot takes of the limits.

    Attributes:
        concurrency: its ``ConcurrencyLimits``, as read (raw).
        submitter: its ``AccountingGroup``, else ``Owner`` (a job), or ``None``.
        group: the group the negotiator counts it in (``RemoteNegotiatingGroup`` of a
            claimed slot), when known; else found from ``submitter``.
        weight: its slot weight (cores, by default).
        where: for notes (``job 12.0``, ``slot slot1_1@node2``).
    """

    concurrency: object = None
    submitter: str | None = None
    group: str | None = None
    weight: float = 0.0
    where: str = ""


def claimed_holders(slots: Iterable[Mapping[str, object]]) -> list[Holder]:
    """Every claimed slot of the pool (partitionable slots hold nothing themselves)."""
    out: list[Holder] = []
    for ad in slots:
        if ad.get("State") != "Claimed" or ad.get("SlotType") == "Partitionable":
            continue
        weight = as_float(ad.get("SlotWeight"))
        if weight is None:
            weight = as_float(ad.get("Cpus"))
        group = ad.get("RemoteNegotiatingGroup")
        submitter = ad.get("AccountingGroup")
        out.append(
            Holder(
                concurrency=ad.get("ConcurrencyLimits"),
                # A slot the schedd claimed without the negotiator (a second job on a
                # partitionable slot's claim) has no RemoteNegotiatingGroup: its job's
                # AccountingGroup (group.user@domain) names the group then.
                submitter=submitter_name(submitter) if isinstance(submitter, str) else None,
                group=group if isinstance(group, str) else None,
                weight=weight if weight is not None and 0 <= weight < 2**53 else 0.0,
                where=f"slot {shorten_text(str(ad.get('Name', '?')))}",
            )
        )
    return out


@dataclass(frozen=True)
class PoolLimits:
    """The limits, each pending job's charges, and notes."""

    limits: tuple[Limit, ...] = ()
    charges: Mapping[str, tuple[tuple[str, float], ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def concurrency_id(name: str) -> str:
    """A concurrency limit's id: ``cl.sw_license``."""
    return f"cl.{name}"


def group_id(name: str) -> str:
    """A group quota's id: ``group.group_physics``."""
    return f"group.{name}"


def pool_limits(
    pending: Sequence[Job],
    pending_holders: Mapping[str, Holder],
    holders: Iterable[Holder],
    accounting: Accounting,
    config: Mapping[str, str],
) -> PoolLimits:
    """The limits the pending jobs meet, with what is held of each now, and each pending
    job's charges (limit id -> amount).

    Args:
        pending: the snapshot's pending jobs (their host cores are their slot weight).
        pending_holders: each pending job's record (its ``ConcurrencyLimits`` and submitter),
            by id; a job missing here takes nothing.
        holders: what holds a share now (claimed slots, started or placed jobs of this
            schedd not in a claimed slot yet).
        accounting: the negotiator's groups and quotas.
        config: the negotiator's concurrency-limit settings, keys upper-cased.

    A limit whose maximum does not read, a name that cannot be an id, and a holder's
    ``ConcurrencyLimits`` that does not read are each left out with a note (the limit is then
    not checked: coshare never withholds a job on a number it could not read).
    """
    notes: list[str] = []
    used: dict[str, float] = {}
    maxima: dict[str, tuple[str, float]] = {}
    bad: set[str] = set()

    def maximum(name: str) -> tuple[str, float] | None:
        if name in bad:
            return None
        if name not in maxima:
            try:
                found = limit_maximum(name, config)
            except BadValue as exc:
                notes.append(f"concurrency limit {name}: {exc}; not checked")
                bad.add(name)
                return None
            if found is None:
                return None
            if not _ID_SAFE.fullmatch(name):
                bad.add(name)
                return None
            maxima[name] = found
        return maxima[name]

    groups: dict[str, Group] = {}  # the groups whose quota is checked, by name
    for configured in accounting.groups.values():
        if configured.quota is None:
            continue
        if not _ID_SAFE.fullmatch(configured.name):
            notes.append(
                f"group {shorten_text(configured.name)}: its name is not id characters; its "
                "quota is not checked"
            )
            continue
        groups[configured.name] = configured

    for holder in holders:
        try:
            asked = parse_request(holder.concurrency)
        except BadValue as exc:
            notes.append(f"{holder.where}: {exc}; what it holds is not counted")
            asked = {}
        for name, amount in asked.items():
            used[concurrency_id(name)] = used.get(concurrency_id(name), 0.0) + amount
        group = (
            accounting.groups.get(holder.group.lower())
            if holder.group is not None
            else group_of(holder.submitter, accounting.groups)
        )
        if group is not None and group.name in groups:
            key = group_id(group.name)
            used[key] = used.get(key, 0.0) + holder.weight

    limits: dict[str, Limit] = {}
    charges: dict[str, tuple[tuple[str, float], ...]] = {}
    for group in groups.values():
        key = group_id(group.name)
        assert group.quota is not None
        limits[key] = Limit(
            key,
            f"GROUP_QUOTA_{group.name}={plain(group.quota)}",
            f"group {group.name}",
            group.quota,
            used.get(key, 0.0),
        )
    for job in pending:
        record = pending_holders.get(job.id)
        if record is None:
            continue
        try:
            asked = parse_request(record.concurrency)
        except BadValue as exc:  # the reader refuses such a job; never placed unchecked
            notes.append(f"{record.where}: {exc}; not checked")
            continue
        taken: list[tuple[str, float]] = []
        for name, amount in sorted(asked.items()):
            found = maximum(name)
            if found is None or amount <= 0:
                continue
            key = concurrency_id(name)
            limits.setdefault(
                key,
                Limit(
                    key,
                    f"concurrency limit {name}={plain(found[1])}",
                    "the pool",
                    found[1],
                    used.get(key, 0.0),
                ),
            )
            taken.append((key, amount))
        group = group_of(record.submitter, accounting.groups)
        if group is not None and group.name in groups:
            taken.append((group_id(group.name), job.total_cpu_milli / MILLI))
        if taken:
            charges[job.id] = tuple(taken)
    return PoolLimits(tuple(limits[k] for k in sorted(limits)), charges, tuple(notes))


def job_holder(
    job_id: str, concurrency: object, accounting_group: object, owner: object, weight: float
) -> Holder:
    """A queue job's record as a holder."""
    return Holder(
        concurrency=concurrency,
        submitter=job_submitter(accounting_group, owner),
        weight=weight,
        where=f"job {job_id}",
    )
