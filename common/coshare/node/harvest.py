"""Harvest on the node: which cores a GPU job lends to a CPU-only job, and which it takes back.

Wu & Hong (collocating CPU-only jobs with GPU jobs, section III-B1) partition a GPU job's
idle cores: the cores a CPU-only job harvests are taken *out* of the GPU job's cpuset and put
into the CPU job's, never shared. This module decides what each group's cpuset becomes; the
control service (:mod:`coshare.node.control.service`) reads the job records, calls these
functions and writes the cpusets and records. Pure (no I/O).

A job's cores are its record's ``spec.cpus`` (what its cpuset holds now), and two maps:

- ``lent_to`` (the lender's): borrower -> the cores it has of this job's;
- ``borrowed_from`` (the borrower's): lender -> the cores it has of that job's.

So a lender's own cores are ``cpus`` plus everything it lent, a borrower's own cores are its
``cpus`` less everything it borrowed (none, for a CPU job placed wholly on harvested cores).
A job either lends or borrows, never both: a loan is never passed on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from coshare.errors import JobSpecError
from coshare.node.spec import format_cpu_list

Cores = tuple[int, ...]


def _cores(cpus: Iterable[int]) -> Cores:
    return tuple(sorted(set(cpus)))


def _text(cpus: Iterable[int]) -> str:
    return format_cpu_list(cpus) or "none"


@dataclass(frozen=True)
class Holding:
    """What one job holds on the node, as its record says.

    Attributes:
        job: the job id.
        cpus: the cores its cpuset holds now (empty: not pinned, the parent's cores).
        lent_to: borrower -> cores of this job the borrower has.
        borrowed_from: lender -> cores of that job this job has.
    """

    job: str
    cpus: Cores = ()
    lent_to: Mapping[str, Cores] = field(default_factory=dict)
    borrowed_from: Mapping[str, Cores] = field(default_factory=dict)

    def own(self) -> Cores:
        """The job's own cores: what it holds, plus what it lent, less what it borrowed."""
        lent = {c for cores in self.lent_to.values() for c in cores}
        borrowed = {c for cores in self.borrowed_from.values() for c in cores}
        return _cores((set(self.cpus) | lent) - borrowed)


@dataclass(frozen=True)
class Change:
    """A decision: the two jobs' holdings after it, and what it means.

    Attributes:
        lender: the lender's holding after the request.
        borrower: the borrower's holding after the request.
        changed: whether any cpuset or record changes (``False``: the request was done already,
            or, for a give-back, could not shrink the borrower: see ``requeue``).
        requeue: a give-back would have left the borrower no core at all: nothing was changed
            and the planner must requeue the borrower through its scheduler (its end returns
            the cores to the lender).
    """

    lender: Holding
    borrower: Holding
    changed: bool
    requeue: bool = False


def _with(holding: Holding, key: str, cores: Cores, *, lent: bool) -> dict[str, Cores]:
    loans = dict(holding.lent_to if lent else holding.borrowed_from)
    if cores:
        loans[key] = cores
    else:
        loans.pop(key, None)
    return loans


def _check_pair(lender: Holding, borrower: Holding) -> None:
    if lender.job == borrower.job:
        raise JobSpecError(f"job {lender.job} cannot lend cores to itself")
    if lender.borrowed_from:
        raise JobSpecError(
            f"job {lender.job} runs on cores it borrowed (from "
            f"{', '.join(sorted(lender.borrowed_from))}); a loan is never passed on"
        )
    if borrower.lent_to:
        raise JobSpecError(
            f"job {borrower.job} lent cores (to {', '.join(sorted(borrower.lent_to))}); a job "
            "that lends does not borrow"
        )


def lend(
    lender: Holding, borrower: Holding, cpus: Iterable[int], others: Iterable[Holding] = ()
) -> Change:
    """Lend ``cpus`` of ``lender`` (the GPU job) to ``borrower`` (a CPU-only job).

    Idempotent: cores lent to this borrower already are left as they are; when all of them
    were, nothing changes (``changed=False``).

    Args:
        lender: the GPU job's holding.
        borrower: the CPU job's holding.
        cpus: the cores to lend (at least one).
        others: every other job of the node (a core lent to one of them is refused).

    Raises:
        JobSpecError: no cores named; cores the lender does not hold (never held, or lent to
            another job); a lend that leaves the lender no core; a lender that borrows or a
            borrower that lends; naming the job and the cores.
    """
    _check_pair(lender, borrower)
    wanted = _cores(cpus)
    if not wanted:
        raise JobSpecError(f"job {lender.job}: lend at least one core")
    if not lender.cpus:
        raise JobSpecError(
            f"job {lender.job} holds no cores of its own (not pinned); it has none to lend"
        )
    already = set(lender.lent_to.get(borrower.job, ()))
    elsewhere = {
        c: job
        for other in (lender, *others)
        for job, cores in other.lent_to.items()
        if job != borrower.job or other.job != lender.job
        for c in cores
    }
    taken = sorted(c for c in wanted if c in elsewhere and c not in already)
    if taken:
        holders = ", ".join(f"{c} to {elsewhere[c]}" for c in taken)
        raise JobSpecError(f"job {lender.job}: cpus {_text(taken)} are lent already ({holders})")
    foreign = sorted(set(wanted) - set(lender.cpus) - already)
    if foreign:
        raise JobSpecError(
            f"job {lender.job} does not hold cpus {_text(foreign)} (it holds {_text(lender.cpus)})"
        )
    new = set(wanted) - already
    if not new:
        # Done already; the borrower's record is made to agree with the lender's should a
        # crash have come between the two records' writes.
        loan = _cores(already)
        repaired = Holding(
            borrower.job,
            _cores(set(borrower.cpus) | already),
            dict(borrower.lent_to),
            _with(borrower, lender.job, loan, lent=False),
        )
        return Change(lender, repaired, changed=repaired != borrower)
    remaining = _cores(set(lender.cpus) - new)
    if not remaining:
        raise JobSpecError(
            f"job {lender.job}: lending cpus {_text(new)} would leave it no core "
            f"(it holds {_text(lender.cpus)}); it keeps at least one"
        )
    loan = _cores(already | new)
    clash = sorted(set(new) & set(borrower.cpus))
    if clash:  # a core in both cpusets would be shared: the records disagree with the node
        raise JobSpecError(f"job {borrower.job} holds cpus {_text(clash)} already")
    return Change(
        Holding(
            lender.job,
            remaining,
            _with(lender, borrower.job, loan, lent=True),
            dict(lender.borrowed_from),
        ),
        Holding(
            borrower.job,
            _cores(set(borrower.cpus) | new),
            dict(borrower.lent_to),
            _with(borrower, lender.job, loan, lent=False),
        ),
        changed=True,
    )


def cores_to_lend(lender: Holding, count: int) -> Cores:
    """Which ``count`` cores of ``lender`` a borrower placed on its harvest gets: its
    highest-numbered cores it still holds (a job's own processes start on its lowest), and it
    keeps at least one.

    Raises:
        JobSpecError: ``count`` below 1, or not that many cores left to lend, with the numbers.
    """
    if count < 1:
        raise JobSpecError(f"job {lender.job}: lend at least one core, not {count}")
    if count >= len(lender.cpus):
        raise JobSpecError(
            f"job {lender.job} holds cpus {_text(lender.cpus)} now; lending "
            f"{count} would leave it no core (it keeps at least one)"
        )
    return _cores(lender.cpus[-count:])


def give_back(lender: Holding, borrower: Holding, cpus: Iterable[int] | None = None) -> Change:
    """Give ``lender`` back ``cpus`` it lent to ``borrower`` (``None``: all of them).

    The borrower is shrunk to what remains of its own and borrowed cores; when nothing would
    remain, nothing is changed and :attr:`Change.requeue` says the planner must requeue it
    (the node never leaves a job with no core, nor runs it on the lender's). Idempotent: cores
    the lender holds again already are fine (``changed=False`` when all are).

    Raises:
        JobSpecError: cores the lender never held, or that it lent to another job.
    """
    _check_pair(lender, borrower)
    loan = set(lender.lent_to.get(borrower.job, ()))
    wanted = set(loan) if cpus is None else set(cpus)
    own = set(lender.own())
    foreign = sorted(wanted - own)
    if foreign:
        raise JobSpecError(
            f"job {lender.job} never held cpus {_text(foreign)} (its own: {_text(own)})"
        )
    elsewhere = sorted(c for c in wanted - loan if c not in lender.cpus)
    if elsewhere:
        holders = ", ".join(
            sorted(j for j, cores in lender.lent_to.items() if set(cores) & set(elsewhere))
        )
        raise JobSpecError(
            f"job {lender.job}: cpus {_text(elsewhere)} are lent to {holders}, "
            f"not to {borrower.job}"
        )
    back = wanted & loan
    if not back:
        return Change(lender, borrower, changed=False)
    left = _cores(set(borrower.cpus) - back)
    if not left:
        return Change(lender, borrower, changed=False, requeue=True)
    keep = _cores(loan - back)
    return Change(
        Holding(
            lender.job,
            _cores(set(lender.cpus) | back),
            _with(lender, borrower.job, keep, lent=True),
            dict(lender.borrowed_from),
        ),
        Holding(
            borrower.job,
            left,
            dict(borrower.lent_to),
            _with(borrower, lender.job, keep, lent=False),
        ),
        changed=True,
    )


def after_end(ended: Holding, others: Iterable[Holding]) -> list[Holding]:
    """The holdings that change when job ``ended`` leaves the node.

    A borrower's end gives each lender back the cores it had of it. A lender's end leaves its
    borrowers the cores they have (nobody else holds them now): they become their own.
    """
    out = []
    for other in others:
        if other.job in ended.borrowed_from:
            back = ended.borrowed_from[other.job]
            out.append(
                Holding(
                    other.job,
                    _cores(set(other.cpus) | set(back)),
                    _with(other, ended.job, (), lent=True),
                    dict(other.borrowed_from),
                )
            )
        elif other.job in ended.lent_to:
            out.append(
                Holding(
                    other.job,
                    other.cpus,
                    dict(other.lent_to),
                    _with(other, ended.job, (), lent=False),
                )
            )
    return out


def copy_bandwidths(
    devices: Mapping[str, Iterable[str]], per_gpu_mbps: Mapping[str, float]
) -> dict[str, float]:
    """Each GPU job's host<->device copy bandwidth (MB/s): the PCIe throughput of its GPUs.

    PCIe counters are per GPU, not per process, so a job is given a figure only when every GPU
    it holds is its alone and NVML measured each; any other job gets none (the planner then
    keeps its declaration), never a share that was guessed.

    Args:
        devices: the GPUs (canonical ids, as in ``per_gpu_mbps``) each job holds.
        per_gpu_mbps: TX + RX MB/s of each GPU NVML measured.
    """
    holders: dict[str, int] = {}
    held = {job: tuple(dict.fromkeys(gpus)) for job, gpus in devices.items()}
    for gpus in held.values():
        for gpu in gpus:
            holders[gpu] = holders.get(gpu, 0) + 1
    return {
        job: sum(per_gpu_mbps[g] for g in gpus)
        for job, gpus in sorted(held.items())
        if gpus and all(holders[g] == 1 and g in per_gpu_mbps for g in gpus)
    }
