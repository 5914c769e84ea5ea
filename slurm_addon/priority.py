"""The priority Slurm would give a held job: its multifactor formula, computed here.

coshare holds its jobs until it places them, and Slurm gives a held job priority 0, so
``squeue`` never shows the number that orders them. The controller's weights
(``scontrol show config``), the fair-share factor of the job's association (``sshare``),
its QOS' priority (``sacctmgr show qos``) and its partition's ``PriorityJobFactor``
(``scontrol show partition``) give it back, by the formula of Slurm's multifactor plugin
(https://slurm.schedmd.com/priority_multifactor.html)::

    priority = W_age       * min(age / PriorityMaxAge, 1)     age: since it was submitted
             + W_fairshare * FairShare                         sshare, the job's association
             + W_jobsize   * size                              nodes and CPUs of the cluster
             + W_partition * PriorityJobFactor / the largest partition's
             + W_qos       * QOS priority / the largest QOS priority
             - nice                                            truncated to an integer, >= 1

Age counts from submission (a held job accrues none in Slurm; coshare's jobs are held only
so that coshare places them). The association and TRES weights and a site factor plugin are
not known here: a controller that uses them gets a note, and the jobs are ordered by what
is known. Any number missing, negative or absurd (a weight, a factor) makes the cycle order
the jobs by submit time instead, with one note: never an exception. Pure: parsers of the
commands' text and the formula.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coshare.ledger.bounds import MAX_PRIORITY

from slurm_addon.jobs import SlurmJob

#: The weights read from ``scontrol show config`` (a missing one is 0 in Slurm).
WEIGHTS = (
    "PriorityWeightAge",
    "PriorityWeightFairShare",
    "PriorityWeightJobSize",
    "PriorityWeightPartition",
    "PriorityWeightQOS",
)
#: Weights this module cannot honour (non-zero: noted).
UNKNOWN_WEIGHTS = ("PriorityWeightAssoc",)
#: The largest weight Slurm accepts (a 32-bit priority).
MAX_WEIGHT = 2**32 - 1
#: ``PriorityMaxAge`` as Slurm prints it: ``[days-]hours:minutes:seconds``.
_DURATION = re.compile(r"(?:(\d+)-)?(\d+):(\d+):(\d+)")


@dataclass(frozen=True)
class Weights:
    """The controller's multifactor settings.

    Attributes:
        multifactor: whether ``PriorityType`` is ``priority/multifactor``.
        weights: each of :data:`WEIGHTS`.
        max_age_s: ``PriorityMaxAge``.
        favor_small: ``PriorityFavorSmall``.
        notes: what is not honoured (an association or TRES weight, a site factor).
    """

    multifactor: bool
    weights: Mapping[str, float]
    max_age_s: float
    favor_small: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Factors:
    """Everything but the job that its priority depends on.

    Attributes:
        weights: the controller's.
        fairshare: per ``(account, user)``: sshare's FairShare factor.
        qos_priority: per QOS name: its priority.
        partition_factor: per partition: its ``PriorityJobFactor``.
        nodes: the cluster's nodes (job size).
        cpus: the cluster's CPUs (job size).
    """

    weights: Weights
    fairshare: Mapping[tuple[str, str], float]
    qos_priority: Mapping[str, float]
    partition_factor: Mapping[str, float]
    nodes: int = 1
    cpus: int = 1


class PriorityProblem(ValueError):
    """A number the formula needs is missing or unusable (the message says which)."""


def _key_values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def duration_s(text: str) -> float | None:
    """``1-00:00:00`` (Slurm's duration) in seconds; ``None`` when unreadable."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def parse_weights(text: str) -> Weights:
    """The multifactor settings of ``scontrol show config``'s output.

    Raises:
        PriorityProblem: a weight or ``PriorityMaxAge`` is unreadable, negative or absurd.
    """
    values = _key_values(text)
    multifactor = values.get("PriorityType", "") == "priority/multifactor"
    weights: dict[str, float] = {}
    for key in WEIGHTS:
        raw = values.get(key, "0")
        weights[key] = _weight(key, raw)
    max_age = duration_s(values.get("PriorityMaxAge", "7-00:00:00"))
    if max_age is None or not 0 < max_age < 1e10:
        raise PriorityProblem(
            f"PriorityMaxAge is {values.get('PriorityMaxAge')!r} (allowed: a duration "
            "D-HH:MM:SS above zero)"
        )
    notes = []
    for key in UNKNOWN_WEIGHTS:
        if values.get(key, "0") not in ("0", ""):
            notes.append(f"{key} is not counted in the priorities coshare computes")
    tres = values.get("PriorityWeightTRES", "(null)")
    if tres not in ("(null)", ""):
        notes.append("PriorityWeightTRES is not counted in the priorities coshare computes")
    site = values.get("PrioritySiteFactorPlugin", "(null)")
    if site not in ("(null)", ""):
        notes.append(f"the site factor ({site}) is not counted in the priorities coshare computes")
    return Weights(
        multifactor,
        weights,
        max_age,
        values.get("PriorityFavorSmall", "No").lower() == "yes",
        tuple(notes),
    )


def _weight(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= MAX_WEIGHT:
        raise PriorityProblem(f"{key} is {raw!r} (allowed: an integer 0..{MAX_WEIGHT})")
    return value


def parse_sshare(text: str) -> dict[tuple[str, str], float]:
    """FairShare per ``(account, user)`` of ``sshare -a -n -P -o Account,User,FairShare``
    (account rows, with no user, are left out).

    Raises:
        PriorityProblem: a line is not three fields, or a factor is not a number in 0..1.
    """
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 3:
            raise PriorityProblem(f"sshare printed {line[:80]!r} (expected Account|User|FairShare)")
        account, user, factor = (f.strip() for f in fields)
        if not user:
            continue
        try:
            value = float(factor)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise PriorityProblem(
                f"sshare's FairShare of user {user} in account {account} is {factor!r} "
                "(allowed: a number 0..1)"
            )
        out[(account, user)] = value
    return out


def parse_partition_factors(text: str) -> dict[str, float]:
    """``PriorityJobFactor`` per partition of ``scontrol show partition -o``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        fields = dict(f.partition("=")[::2] for f in line.split() if "=" in f)
        name = fields.get("PartitionName")
        if not name:
            continue
        try:
            value = float(fields.get("PriorityJobFactor", "1"))
        except ValueError:
            value = math.nan
        if not 0 <= value <= 65535:
            raise PriorityProblem(
                f"partition {name}'s PriorityJobFactor is {fields.get('PriorityJobFactor')!r} "
                "(allowed: 0..65535)"
            )
        out[name] = value
    return out


def job_priority(job: SlurmJob, factors: Factors, now_s: float) -> int:
    """The priority Slurm's multifactor plugin would give ``job`` were it not held.

    Raises:
        PriorityProblem: a factor of this job is unknown (its association has no fair-share
            row, its QOS or partition is unknown).
    """
    w = factors.weights.weights
    total = 0.0
    if w["PriorityWeightAge"]:
        age = max(0.0, now_s - max(job.submit_time_s, job.eligible_time_s))
        total += w["PriorityWeightAge"] * min(age / factors.weights.max_age_s, 1.0)
    if w["PriorityWeightFairShare"]:
        share = factors.fairshare.get((job.account, job.user))
        if share is None:
            raise PriorityProblem(
                f"job {job.id}: sshare shows no fair-share factor for user {job.user} in "
                f"account {job.account or '(none)'}"
            )
        total += w["PriorityWeightFairShare"] * share
    if w["PriorityWeightJobSize"]:
        size = max(job.node_count / max(factors.nodes, 1), job.cpus / max(factors.cpus, 1))
        size = min(size, 1.0)
        total += w["PriorityWeightJobSize"] * (1.0 - size if factors.weights.favor_small else size)
    if w["PriorityWeightPartition"]:
        partition = job.partition.split(",")[0]
        largest = max(factors.partition_factor.values(), default=0.0)
        if partition not in factors.partition_factor:
            raise PriorityProblem(f"job {job.id}: partition {partition!r} is unknown")
        if largest > 0:
            total += w["PriorityWeightPartition"] * factors.partition_factor[partition] / largest
    if w["PriorityWeightQOS"]:
        largest = max(factors.qos_priority.values(), default=0.0)
        if job.qos and job.qos not in factors.qos_priority:
            raise PriorityProblem(f"job {job.id}: QOS {job.qos!r} is unknown")
        if largest > 0:
            total += w["PriorityWeightQOS"] * factors.qos_priority.get(job.qos, 0.0) / largest
    total -= job.nice
    if not math.isfinite(total) or total > MAX_PRIORITY:
        raise PriorityProblem(f"job {job.id}: its priority comes to {total!r}")
    return max(int(total), 1)


def priorities(
    jobs: Sequence[SlurmJob], factors: Factors, now_s: float
) -> tuple[dict[str, int], tuple[str, ...]]:
    """Each job's priority, or none at all with a note: a job whose priority cannot be
    computed would jump ahead of or behind the others for no reason, so the cycle then
    orders every job by submit time (which it does with no priority) and says why once."""
    if not factors.weights.multifactor:
        return {}, ()  # priority/basic: submit time, coshare's order without a priority
    out: dict[str, int] = {}
    problems: list[str] = []
    for job in jobs:
        try:
            out[job.id] = job_priority(job, factors, now_s)
        except PriorityProblem as exc:
            problems.append(str(exc))
    if problems:
        shown = "; ".join(problems[:3]) + (
            f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        )
        return {}, (f"jobs are planned by submit time this cycle: {shown}",)
    return out, factors.weights.notes
