"""Slurm's QOS and association limits as the core's limits (:mod:`coshare.ledger.limits`).

With ``AccountingStorageEnforce=limits`` Slurm starts a job only while its QOS' and its
associations' limits hold (``QOSMaxGRESPerUser``, ``AssocGrpCpuLimit`` ...). This module
reads them from ``sacctmgr show qos|assoc -P`` and turns each one that a pending coshare job
is subject to into a :class:`~coshare.model.Limit`, with what the jobs that hold it use now,
and each pending job's share into its ``charges``:

===========================  ================================  ==============================
sacctmgr field               holder                            counts
===========================  ================================  ==============================
QOS MaxTRESPerUser           a user, in that QOS               TRES of the user's jobs
QOS MaxTRESPerAccount        an account, in that QOS           TRES of the account's jobs
QOS GrpTRES                  the QOS                           TRES of all its jobs
QOS MaxJobsPerUser/Account   a user / an account, in the QOS   running jobs
QOS GrpJobs                  the QOS                           running jobs
assoc GrpTRES, GrpJobs       a user in an account, or an       TRES / running jobs of that
                             account (its own jobs)            user there, or of the account
assoc MaxJobs                a user in an account              its running jobs
===========================  ================================  ==============================

TRES counted: ``cpu``, ``node`` and every ``gres/NAME``. "Used" is what started jobs hold plus
what coshare's placed-but-not-started jobs will (they start as soon as Slurm dispatches them;
counting them keeps two cycles from admitting past a limit). An account's limits count the
jobs charged to that account itself, not to its sub-accounts. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from coshare.ledger.bounds import plain
from coshare.ledger.limits import amount_problem
from coshare.model import Limit

from slurm_addon.jobs import SlurmJob

#: The QOS fields read (``sacctmgr show qos format=...``), in order.
QOS_FORMAT = (
    "Name,Priority,MaxTRESPerUser,MaxTRESPerAccount,GrpTRES,MaxJobsPerUser,MaxJobsPerAccount,"
    "GrpJobs"
)
#: The association fields read, in order.
ASSOC_FORMAT = "Cluster,Account,User,GrpTRES,GrpJobs,MaxJobs"


@dataclass(frozen=True)
class Rule:
    """One limit of Slurm's accounting, before it is counted.

    Attributes:
        source: ``QOS gpu2`` or ``association``.
        field: the sacctmgr field (``MaxTRESPerUser``).
        what: the TRES (``gres/gpu``) or ``jobs``.
        max: the most it allows.
        scope: ``user``, ``account``, ``all`` (the whole QOS) or ``assoc`` (a user in an
            account).
        qos: the QOS it belongs to (QOS rules).
        account: the association's account (association rules).
        user: the association's user, empty for an account's association.
    """

    source: str
    field: str
    what: str
    max: float
    scope: str
    qos: str = ""
    account: str = ""
    user: str = ""


def tres_amounts(text: str) -> dict[str, float]:
    """``cpu=2,mem=512M,node=1,gres/gpu=1`` as numbers, for the TRES coshare counts
    (``cpu``, ``node``, ``gres/*``); others (memory, billing, energy) are left out."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not (key in ("cpu", "node") or key.startswith("gres/")):
            continue
        try:
            amount = float(value)
        except ValueError:
            continue
        if amount_problem(amount) is None:
            out[key] = amount
    return out


def _rules_of(
    source: str, field: str, text: str, scope: str, notes: list[str], **where: str
) -> list[Rule]:
    rules = []
    for key, amount in tres_amounts(text).items():
        rules.append(Rule(source, field, key, amount, scope, **where))
    return rules


def _jobs_rule(
    source: str, field: str, text: str, scope: str, notes: list[str], **where: str
) -> list[Rule]:
    if not text.strip():
        return []
    try:
        amount = float(text)
    except ValueError:
        notes.append(f"{source}: {field} is {text[:40]!r}, not a number; not enforced by coshare")
        return []
    if amount_problem(amount) is not None:
        notes.append(f"{source}: {field} is {text[:40]!r}; not enforced by coshare")
        return []
    return [Rule(source, field, "jobs", amount, scope, **where)]


def parse_qos(text: str, notes: list[str]) -> tuple[dict[str, float], list[Rule]]:
    """QOS priorities and limit rules of ``sacctmgr -n -P show qos format=`` :data:`QOS_FORMAT`."""
    priorities: dict[str, float] = {}
    rules: list[Rule] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 8:
            notes.append(f"sacctmgr show qos printed {line[:80]!r}; that line is not read")
            continue
        name, prio, per_user, per_account, grp, jobs_user, jobs_account, grp_jobs = (
            f.strip() for f in fields[:8]
        )
        try:
            priorities[name] = max(float(prio or 0), 0.0)
        except ValueError:
            notes.append(f"QOS {name}: priority {prio[:40]!r} is not a number")
        source = f"QOS {name}"
        rules += _rules_of(source, "MaxTRESPerUser", per_user, "user", notes, qos=name)
        rules += _rules_of(source, "MaxTRESPerAccount", per_account, "account", notes, qos=name)
        rules += _rules_of(source, "GrpTRES", grp, "all", notes, qos=name)
        rules += _jobs_rule(source, "MaxJobsPerUser", jobs_user, "user", notes, qos=name)
        rules += _jobs_rule(source, "MaxJobsPerAccount", jobs_account, "account", notes, qos=name)
        rules += _jobs_rule(source, "GrpJobs", grp_jobs, "all", notes, qos=name)
    return priorities, rules


def parse_assocs(text: str, cluster: str, notes: list[str]) -> list[Rule]:
    """Association limit rules of ``sacctmgr -n -P show assoc format=`` :data:`ASSOC_FORMAT`,
    of ``cluster`` only."""
    rules: list[Rule] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 6:
            notes.append(f"sacctmgr show assoc printed {line[:80]!r}; that line is not read")
            continue
        where, account, user, grp, grp_jobs, max_jobs = (f.strip() for f in fields[:6])
        if cluster and where != cluster:
            continue
        scope = "assoc" if user else "account"
        source = f"account {account}" if not user else f"association {user}/{account}"
        rules += _rules_of(source, "GrpTRES", grp, scope, notes, account=account, user=user)
        rules += _jobs_rule(source, "GrpJobs", grp_jobs, scope, notes, account=account, user=user)
        if user:
            rules += _jobs_rule(
                source, "MaxJobs", max_jobs, scope, notes, account=account, user=user
            )
    return rules


def _holder(rule: Rule, job: SlurmJob) -> tuple[str, str] | None:
    """Whom ``rule`` counts ``job`` under (key, words), or ``None`` when it does not apply."""
    if rule.qos:
        if job.qos != rule.qos:
            return None
        if rule.scope == "user":
            return f"user:{job.user}", f"user {job.user}"
        if rule.scope == "account":
            return f"account:{job.account}", f"account {job.account}"
        return "all", f"QOS {rule.qos}"
    if job.account != rule.account:
        return None
    if rule.scope == "assoc":
        if job.user != rule.user:
            return None
        return f"user:{job.user}", f"user {job.user} in account {rule.account}"
    return "all", f"account {rule.account}"


def _amount(rule: Rule, job: SlurmJob) -> float:
    if rule.what == "jobs":
        return 1.0
    return tres_amounts(job.tres).get(rule.what, 0.0)


def _limit_id(rule: Rule, key: str) -> str:
    where = f"qos:{rule.qos}" if rule.qos else f"assoc:{rule.account}"
    return f"{where}:{rule.field}:{rule.what}:{key}"


def limits_and_charges(
    rules: Sequence[Rule],
    jobs: Iterable[SlurmJob],
    pending: Collection[str],
    holding: Collection[str],
) -> tuple[tuple[Limit, ...], dict[str, tuple[tuple[str, float], ...]]]:
    """The limits the pending coshare jobs are subject to, and each one's charges.

    Args:
        rules: Slurm's limits (:func:`parse_qos`, :func:`parse_assocs`).
        jobs: the queue.
        pending: the pending jobs coshare plans (those charged).
        holding: pending jobs coshare placed that will start (their use counts as held).
    """
    queue = list(jobs)
    charges: dict[str, list[tuple[str, float]]] = defaultdict(list)
    found: dict[str, tuple[Rule, str]] = {}
    for job in queue:
        if job.id not in pending:
            continue
        for rule in rules:
            holder = _holder(rule, job)
            amount = _amount(rule, job)
            if holder is None or amount <= 0:
                continue
            ident = _limit_id(rule, holder[0])
            found.setdefault(ident, (rule, holder[1]))
            charges[job.id].append((ident, amount))
    used: dict[str, float] = dict.fromkeys(found, 0.0)
    for job in queue:
        if not (job.phase == "active" or job.id in holding):
            continue
        for rule in rules:
            holder = _holder(rule, job)
            if holder is None:
                continue
            ident = _limit_id(rule, holder[0])
            if ident in used:
                used[ident] += _amount(rule, job)
    limits = tuple(
        Limit(
            ident,
            f"{rule.source} {rule.field} {rule.what}={plain(rule.max)}"
            if rule.what != "jobs"
            else f"{rule.source} {rule.field}={plain(rule.max)}",
            holder,
            rule.max,
            min(used[ident], 1e12),
        )
        for ident, (rule, holder) in sorted(found.items())
    )
    return limits, {job: tuple(c) for job, c in charges.items()}
