"""The negotiator's order and its accounting groups, from its own answer (pure).

The negotiator hands out slots group by group and, within a group, submitter by submitter
(HTCondor manual, "User Priorities and Negotiation", "Accounting Groups"):

1. groups in the order of ``GROUP_SORT_EXPR``, which the negotiator publishes as each
   group's ``GroupSortKey`` (by default the group's usage over its quota: the group furthest
   below its quota first; the jobs of no group, ``<none>``, last);
2. within a group, submitters by effective user priority, lower first (``condor_userprio``'s
   "Effective Priority", the ``Priority`` of each submitter's entry);
3. within a submitter, the schedd offers its jobs by ``JobPrio``, larger first, then in the
   order they were submitted.

``condor_userprio -l`` and the bindings' ``Negotiator.getPriorities()`` give one entry per
submitter (``Name`` ``group_physics.alice@domain``, ``Priority``, ``AccountingGroup``) and one
per group (``IsAccountingGroup``, ``GroupSortKey``, ``EffectiveQuota``, ``SurplusPolicy``).
:func:`negotiator_order` folds the three levels into the snapshot's one ``priority``
(docs/deploy-htcondor.md, "Priorities and limits").

A job's submitter is its ``AccountingGroup`` (``accounting_group`` and
``accounting_group_user`` of the submit file), else its ``Owner``; its group is the longest
group name that the submitter's name starts with, dot by dot, ignoring case, as the negotiator
maps it (else ``<none>``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from coshare.ledger.bounds import as_float, parse_number, shorten_text
from coshare.ledger.limits import MAX_LIMIT_AMOUNT
from coshare.model import Job

#: The group of jobs in no configured group.
NONE_GROUP = "<none>"

#: Effective priorities above this are no priority a negotiator computes (the largest
#: priority factor HTCondor documents is 1e6 times usage): such a value is refused.
MAX_PRIORITY = 1e15


@dataclass(frozen=True)
class Group:
    """One accounting group as the negotiator reports it.

    Attributes:
        name: as configured (``GROUP_NAMES``), e.g. ``group_physics``.
        sort_key: ``GroupSortKey``: groups with a smaller key negotiate first.
        quota: the quota the negotiator enforces on it (``EffectiveQuota``, in slot weight:
            cores by default), or ``None`` when it may take surplus beyond it (its
            ``SurplusPolicy`` is not ``no``), has none, or reports none that reads.
    """

    name: str
    sort_key: float
    quota: float | None = None


@dataclass(frozen=True)
class Accounting:
    """What the negotiator said.

    Attributes:
        priorities: each submitter's effective priority, by name without its domain
            (``group_physics.alice``).
        groups: the configured groups, by lower-cased name.
        notes: values that could not be read (each names the submitter or group and the
            field).
        unreadable: submitters listed with a priority that did not read.
        new_submitter: the effective priority of a submitter the negotiator does not list
            yet (none of its jobs was negotiated): HTCondor's least real priority, 0.5, times
            ``DEFAULT_PRIO_FACTOR``; ``None`` when that setting did not read.
    """

    priorities: Mapping[str, float] = field(default_factory=dict)
    groups: Mapping[str, Group] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    unreadable: frozenset[str] = frozenset()
    new_submitter: float | None = None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value and value.isprintable() else None


def submitter_name(name: str) -> str:
    """A submitter's name without its domain: ``group_physics.alice@vm`` ->
    ``group_physics.alice``."""
    return name.rpartition("@")[0] or name


#: The least real priority HTCondor gives a submitter (a new one starts there).
MIN_REAL_PRIORITY = 0.5


def parse_priorities(
    ads: Iterable[Mapping[str, object]], default_factor: object = None
) -> Accounting:
    """The negotiator's answer to ``getPriorities`` (one mapping per entry) read, with
    ``DEFAULT_PRIO_FACTOR`` (as configured, text) for submitters it does not list yet.

    A submitter whose ``Priority`` is missing, not a positive number or above
    :data:`MAX_PRIORITY` is left out with a note: its jobs keep their place by submit time.
    A group whose ``GroupSortKey`` does not read sorts after the others (with a note); one
    whose quota does not read has none.
    """
    priorities: dict[str, float] = {}
    groups: dict[str, Group] = {}
    notes: list[str] = []
    unreadable: set[str] = set()
    for ad in ads:
        name = _text(ad.get("Name"))
        if name is None:
            continue
        if ad.get("IsAccountingGroup") is True:
            if name == NONE_GROUP:
                continue
            key = as_float(ad.get("GroupSortKey"))
            if key is None or math.isnan(key):
                notes.append(
                    f"negotiator: group {shorten_text(name)}: GroupSortKey="
                    f"{ad.get('GroupSortKey')!r} is not a number; it is ordered after the others"
                )
                key = math.inf
            groups[name.lower()] = Group(name, key, _quota(name, ad, notes))
            continue
        eup = as_float(ad.get("Priority"))
        if eup is None or not 0 < eup <= MAX_PRIORITY:
            notes.append(
                f"negotiator: submitter {shorten_text(name)}: Priority={ad.get('Priority')!r} "
                f"is not an effective priority (a number 0..{MAX_PRIORITY:g}); its jobs keep "
                "their place by submit time"
            )
            unreadable.add(submitter_name(name))
            continue
        priorities[submitter_name(name)] = eup
    factor = parse_number(default_factor) if isinstance(default_factor, str) else None
    new = MIN_REAL_PRIORITY * factor if factor is not None and 0 < factor <= 1e9 else None
    return Accounting(priorities, groups, tuple(notes), frozenset(unreadable), new)


def _quota(name: str, ad: Mapping[str, object], notes: list[str]) -> float | None:
    """A group's enforced quota: ``EffectiveQuota`` when it takes no surplus."""
    if ad.get("SurplusPolicy") != "no":
        return None  # it may run beyond its quota when others leave theirs unused
    quota = as_float(ad.get("EffectiveQuota"))
    if quota is None or not 0 <= quota <= MAX_LIMIT_AMOUNT:
        notes.append(
            f"negotiator: group {shorten_text(name)}: EffectiveQuota="
            f"{ad.get('EffectiveQuota')!r} is not a quota; the group is not limited"
        )
        return None
    return quota


def job_submitter(accounting_group: object, owner: object) -> str | None:
    """A job's submitter as the negotiator names it (without the domain): its
    ``AccountingGroup``, else its ``Owner``; ``None`` when neither is text."""
    return _text(accounting_group) or _text(owner)


def group_of(submitter: str | None, groups: Mapping[str, Group]) -> Group | None:
    """The group a submitter negotiates in: the longest configured group that its name is,
    or starts with followed by a dot (ignoring case); ``None``: no group (``<none>``)."""
    if submitter is None:
        return None
    parts = submitter.lower().split(".")
    for end in range(len(parts), 0, -1):
        found = groups.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def negotiator_order(
    pending: Sequence[Job], submitters: Mapping[str, str | None], accounting: Accounting
) -> tuple[dict[str, int], tuple[str, ...]]:
    """Each pending job's priority, one integer that orders them as the negotiator would
    (larger first): the dense rank of (group order, submitter order, ``JobPrio``) over the
    pending jobs, so that jobs of one submitter and one ``JobPrio`` share a number and their
    submit time decides between them (the policies' order).

    A submitter the negotiator does not list yet has a new submitter's priority
    (:attr:`Accounting.new_submitter`), as the negotiator gives it. A job whose submitter's
    priority did not read (or, without ``DEFAULT_PRIO_FACTOR``, is not listed) is ordered
    after its group's known submitters, by submit time only; one note per such submitter.

    Args:
        pending: the jobs, each with its ``JobPrio`` as ``priority``.
        submitters: each job's submitter (:func:`job_submitter`), by job id.
        accounting: the negotiator's answer (:func:`parse_priorities`).
    """
    group_rank = {
        g.name.lower(): i
        for i, g in enumerate(
            sorted(accounting.groups.values(), key=lambda g: (g.sort_key, g.name))
        )
    }
    none_rank = len(group_rank)
    notes: list[str] = []
    unknown: set[str] = set()
    keys: dict[str, tuple[int, float, int]] = {}
    for job in pending:
        submitter = submitters.get(job.id)
        group = group_of(submitter, accounting.groups)
        rank = group_rank[group.name.lower()] if group is not None else none_rank
        eup = accounting.priorities.get(submitter) if submitter is not None else None
        if eup is None and submitter is not None and submitter not in accounting.unreadable:
            eup = accounting.new_submitter  # not negotiated yet: a new submitter's priority
        if eup is None:
            who = (
                shorten_text(submitter)
                if submitter is not None
                else "(no AccountingGroup or Owner)"
            )
            if who not in unknown:
                unknown.add(who)
                notes.append(
                    f"negotiator: no effective priority for submitter {who}; its jobs keep "
                    "their place by submit time"
                )
            keys[job.id] = (rank, math.inf, 0)
        else:
            keys[job.id] = (rank, eup, -job.priority)
    order = sorted(set(keys.values()))
    top = len(order) - 1
    place = {key: top - i for i, key in enumerate(order)}
    return {job_id: place[key] for job_id, key in keys.items()}, tuple(notes)
