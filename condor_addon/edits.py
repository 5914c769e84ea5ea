"""What to write into the schedd to apply a plan: pure decisions, tested without HTCondor.

:func:`plan_edits` asks the ledger (:func:`coshare.ledger.book.decide`) what each job needs, from
the jobs as the schedd lists them *now*, and groups the writes into the fewest schedd
transactions (``Schedd.edit`` with a list of job ids), in the order that keeps a crash
harmless::

    0. CosharePlacedNode = undefined   every open gate the plan does not keep (guarded: idle
                                       jobs only); confirmed before step 1
    1. CosharePlacedAt = <now>         all placements, one transaction
    2. CosharePlacedDevices = "0,1"    one transaction per device set (single-node jobs)
    2a. CoshareHarvestFrom = "<GPU job's GlobalJobId>"   jobs placed on a running GPU job's
                                       idle cores (collocate), one transaction per GPU job;
                                       undefined for a job re-placed without one;
        CoshareLender = true           GPU jobs placed as ones that may lend (with lend slots)
    2b. CosharePlacedNodes = {"n1", "n2"}, CosharePlacedNodeDevices = {"0,1", "0"}
                                       parallel-universe jobs (gangs): one transaction per
                                       node list and one per device list
    3. CosharePlacedNode = "node2"     one transaction per node (a gang: its first node):
                                       opens the gate
    4. hold                            refused jobs, one action per reason
    5. CoshareWaitReason = "..."       waiting jobs whose reason changed, one transaction per
                                       reason; undefined for the jobs this plan places

A job reaches step 3 only after its own steps 1 and 2 succeeded, so a crash or SIGKILL at
any point leaves every job either with its gate closed (the next cycle plans it again) or
fully placed. A gang is no exception: all its nodes and devices are written (2b) before its
one gate opens, so a cycle killed between a gang's writes leaves it unplaced, and the next
cycle writes its placement whole (what it plans now) or leaves it waiting; a gang whose open
gate does not come with a whole node list is ``gone`` to the ledger and its gate closed.
The ClassAd text of each value is built by
:mod:`condor_addon.expressions`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.ledger.book import Book, Current, Decisions, Write, decide
from coshare.ledger.trials import TrialRecord, format_trial
from coshare.model import Plan
from coshare.policies.explain import wait_reason_writes
from coshare.ports import JobOutcome, Rejected

from condor_addon.names import device_id_problem, node_name_problem


@dataclass(frozen=True)
class Edits:
    """The transactions of one apply.

    Attributes:
        decisions: the ledger's decision per job.
        placed: jobs whose ``CosharePlacedAt`` is written (step 1).
        devices: ``(device ids, jobs)`` per device set (step 2).
        gang_nodes: ``(node list, jobs)`` per list of a gang's nodes (step 2b).
        gang_devices: ``(device ids per node, jobs)`` per list of a gang's devices (step 2b).
        nodes: ``(node, jobs)`` per node (step 3).
        holds: ``(hold reason, jobs)`` of refused jobs per reason (step 4).
        trials: ``(CoshareTrial record, jobs)`` of jobs placed for a trial co-run (step 1,
            with ``CosharePlacedAt``).
        harvest: ``(GPU job's GlobalJobId or None to clear, jobs)`` (step 2a).
        lenders: ``(CoshareLender, jobs)`` (step 2a; ``False``: cleared).
    """

    decisions: Decisions
    placed: tuple[str, ...] = ()
    devices: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    gang_nodes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    gang_devices: tuple[tuple[tuple[tuple[str, ...], ...], tuple[str, ...]], ...] = ()
    nodes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    holds: tuple[tuple[str, tuple[str, ...]], ...] = ()
    trials: tuple[tuple[str, tuple[str, ...]], ...] = ()
    harvest: tuple[tuple[str | None, tuple[str, ...]], ...] = ()
    lenders: tuple[tuple[bool, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Loans:
    """What the Editor knows of lent cores when it writes (``collocate``).

    Attributes:
        lend_slots: the pool has lend slots (``condor.lend_slots``): GPU jobs that may lend
            are marked ``CoshareLender``.
        global_ids: GlobalJobId by ``cluster.proc`` (what ``CoshareHarvestFrom`` holds).
        borrowing: the jobs whose ``CoshareHarvestFrom`` is set now (cleared when they are
            placed without a loan).
        lending: the jobs whose ``CoshareLender`` is true now (cleared likewise).
    """

    lend_slots: bool = False
    global_ids: Mapping[str, str] = field(default_factory=dict)
    borrowing: frozenset[str] = frozenset()
    lending: frozenset[str] = frozenset()


def plan_edits(
    plan: Plan,
    book: Book,
    rejected: Sequence[Rejected],
    current: Mapping[str, Current],
    *,
    now_s: float = 0.0,
    loans: Loans | None = None,
) -> Edits:
    """Decide and group the writes that apply ``plan`` (see the module docstring).

    Args:
        plan: the plan.
        book: the read's ledger (its pending jobs and open gates).
        rejected: the jobs refused by the read, to hold.
        current: the managed jobs as the schedd lists them now.
        now_s: when the trial records start (epoch seconds).
        loans: lent cores (``collocate``); ``None``: nothing of them is written.
    """
    pending = {j.id: j for j in book.pending}
    decisions = writable(decide(plan, pending, book.to_close, rejected, current))
    by_devices: dict[tuple[str, ...], list[str]] = defaultdict(list)
    by_node: dict[str, list[str]] = defaultdict(list)
    by_nodes: dict[tuple[str, ...], list[str]] = defaultdict(list)
    by_node_devices: dict[tuple[tuple[str, ...], ...], list[str]] = defaultdict(list)
    for w in decisions.writes:
        if w.parts:
            by_nodes[tuple(p.node for p in w.parts)].append(w.job)
            by_node_devices[tuple(p.devices for p in w.parts)].append(w.job)
        else:
            by_devices[w.devices].append(w.job)
        by_node[w.node].append(w.job)
    by_reason: dict[str, list[str]] = defaultdict(list)
    for r in decisions.refuse:
        by_reason[hold_reason(r.reason, r.job)].append(r.job)
    trials = {t.job: t for t in plan.trials}
    by_trial: dict[str, list[str]] = defaultdict(list)
    for w in decisions.writes:
        if w.job in trials:
            record = TrialRecord("placed", int(now_s), trials[w.job].partners)
            by_trial[format_trial(record)].append(w.job)
    harvest: dict[str | None, list[str]] = defaultdict(list)
    lenders: dict[bool, list[str]] = defaultdict(list)
    if loans is not None:
        for w in decisions.writes:
            if w.harvest_from is not None:
                harvest[loans.global_ids.get(w.harvest_from, w.harvest_from)].append(w.job)
            elif w.job in loans.borrowing:
                harvest[None].append(w.job)
            if loans.lend_slots and w.shares_cores and w.harvest_from is None and not w.parts:
                lenders[True].append(w.job)
            elif w.job in loans.lending:
                lenders[False].append(w.job)
    return Edits(
        harvest=tuple(
            sorted(((g, tuple(ids)) for g, ids in harvest.items()), key=lambda item: item[0] or "")
        ),
        lenders=tuple((flag, tuple(ids)) for flag, ids in sorted(lenders.items())),
        trials=tuple((t, tuple(ids)) for t, ids in sorted(by_trial.items())),
        decisions=decisions,
        placed=tuple(w.job for w in decisions.writes),
        devices=tuple((d, tuple(ids)) for d, ids in sorted(by_devices.items())),
        gang_nodes=tuple((n, tuple(ids)) for n, ids in sorted(by_nodes.items())),
        gang_devices=tuple((d, tuple(ids)) for d, ids in sorted(by_node_devices.items())),
        nodes=tuple((n, tuple(ids)) for n, ids in sorted(by_node.items())),
        holds=tuple((r, tuple(ids)) for r, ids in by_reason.items()),
    )


def write_problem(write: Write) -> str | None:
    """Why a placement cannot be written (a node name or device id
    :mod:`condor_addon.names` refuses); ``None`` when it can."""
    places = [(write.node, write.devices)] + [(p.node, p.devices) for p in write.parts]
    for node, devices in places:
        problem = node_name_problem(node)
        if problem is not None:
            return f"the node name {node!r} {problem}"
        for device in devices:
            problem = device_id_problem(device)
            if problem is not None:
                return f"the device id {device!r} on {node!r} {problem}"
    return None


def writable(decisions: Decisions) -> Decisions:
    """``decisions`` with every write that cannot be written moved to ``failed`` with why:
    that job is left as it is, and the others are written."""
    problems = {w.job: p for w in decisions.writes if (p := write_problem(w)) is not None}
    if not problems:
        return decisions
    failed = tuple(JobOutcome(job, f"not written: {why}") for job, why in problems.items())
    return replace(
        decisions,
        writes=tuple(w for w in decisions.writes if w.job not in problems),
        failed=decisions.failed + failed,
    )


def hold_reason(message: str, job_id: str) -> str:
    """The hold reason for a job refused for its annotations: the parser's message without the
    leading ``job ID:`` (HTCondor shows the job next to it), prefixed ``coshare:``.

    The reason travels as text, not as an expression, yet the schedd (23.9) stores one that
    holds a double quote as an unparsable HoldReason (seen on the test pool: the reason was
    lost), so double quotes become single ones and backslashes are dropped: a user's value
    cannot blank out or break the hold reason.
    """
    prefix = f"job {job_id}: "
    text = message[len(prefix) :] if message.startswith(prefix) else message
    return "coshare: " + text.replace("\\", "").replace('"', "'")


def wait_reason_edits(
    plan: Plan, recorded: Mapping[str, str | None]
) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
    """Step 5: ``(reason, jobs)`` per distinct wait reason to write (``None``: clear it), for
    the jobs whose reason changed (:func:`coshare.policies.explain.wait_reason_writes`).

    Args:
        plan: the plan.
        recorded: each idle managed job's ``CoshareWaitReason`` as re-read.
    """
    by_reason: dict[str | None, list[str]] = defaultdict(list)
    for job, text in wait_reason_writes(plan, recorded).items():
        by_reason[text].append(job)
    return tuple((text, tuple(ids)) for text, ids in by_reason.items())
