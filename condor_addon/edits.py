"""HTCondor's codec of the write protocol: one batch of placements grouped into the fewest
schedd transactions (``Schedd.edit`` with a list of job ids), in the order that keeps a crash
harmless. Pure, tested without HTCondor. The order of the protocol's steps is the core's
(:mod:`coshare.cycle.protocol`); within a batch::

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

A job reaches step 3 only after its own steps 1 and 2 succeeded, so a crash or SIGKILL at
any point leaves every job either with its gate closed (the next cycle plans it again) or
fully placed. A gang is no exception: all its nodes and devices are written (2b) before its
one gate opens, so a cycle killed between a gang's writes leaves it unplaced, and the next
cycle writes its placement whole (what it plans now) or leaves it waiting; a gang whose open
gate does not come with a whole node list is ``gone`` to the ledger and its gate closed.
The ClassAd text of each value is built by :mod:`condor_addon.expressions`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coshare.ledger.book import Write
from coshare.ledger.trials import TrialRecord, format_trial

from condor_addon.names import device_id_problem, node_name_problem


@dataclass(frozen=True)
class Transactions:
    """The transactions of one batch of placements, in the order they are sent.

    Attributes:
        placed: jobs whose ``CosharePlacedAt`` is written (step 1).
        trials: ``(CoshareTrial record, jobs)`` of jobs placed for a trial co-run (step 1,
            with ``CosharePlacedAt``).
        devices: ``(device ids, jobs)`` per device set (step 2).
        harvest: ``(GPU job's GlobalJobId or None to clear, jobs)`` (step 2a).
        lenders: ``(CoshareLender, jobs)`` (step 2a; ``False``: cleared).
        gang_nodes: ``(node list, jobs)`` per list of a gang's nodes (step 2b).
        gang_devices: ``(device ids per node, jobs)`` per list of a gang's devices (step 2b).
        nodes: ``(node, jobs)`` per node (step 3).
    """

    placed: tuple[str, ...] = ()
    trials: tuple[tuple[str, tuple[str, ...]], ...] = ()
    devices: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    harvest: tuple[tuple[str | None, tuple[str, ...]], ...] = ()
    lenders: tuple[tuple[bool, tuple[str, ...]], ...] = ()
    gang_nodes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    gang_devices: tuple[tuple[tuple[tuple[str, ...], ...], tuple[str, ...]], ...] = ()
    nodes: tuple[tuple[str, tuple[str, ...]], ...] = ()


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


def transactions(
    writes: Sequence[Write], *, now_s: float = 0.0, loans: Loans | None = None
) -> Transactions:
    """Group one batch of placements into the schedd's transactions (see the module
    docstring).

    Args:
        writes: the placements.
        now_s: when the trial records start (epoch seconds).
        loans: lent cores (``collocate``); ``None``: nothing of them is written.
    """
    by_devices: dict[tuple[str, ...], list[str]] = defaultdict(list)
    by_node: dict[str, list[str]] = defaultdict(list)
    by_nodes: dict[tuple[str, ...], list[str]] = defaultdict(list)
    by_node_devices: dict[tuple[tuple[str, ...], ...], list[str]] = defaultdict(list)
    by_trial: dict[str, list[str]] = defaultdict(list)
    harvest: dict[str | None, list[str]] = defaultdict(list)
    lenders: dict[bool, list[str]] = defaultdict(list)
    for w in writes:
        if w.parts:
            by_nodes[tuple(p.node for p in w.parts)].append(w.job)
            by_node_devices[tuple(p.devices for p in w.parts)].append(w.job)
        else:
            by_devices[w.devices].append(w.job)
        by_node[w.node].append(w.job)
        if w.trial is not None:
            by_trial[format_trial(TrialRecord("placed", int(now_s), w.trial))].append(w.job)
        if loans is None:
            continue
        if w.harvest_from is not None:
            harvest[loans.global_ids.get(w.harvest_from, w.harvest_from)].append(w.job)
        elif w.job in loans.borrowing:
            harvest[None].append(w.job)
        if loans.lend_slots and w.shares_cores and w.harvest_from is None and not w.parts:
            lenders[True].append(w.job)
        elif w.job in loans.lending:
            lenders[False].append(w.job)
    return Transactions(
        placed=tuple(w.job for w in writes),
        trials=tuple((t, tuple(ids)) for t, ids in sorted(by_trial.items())),
        devices=tuple((d, tuple(ids)) for d, ids in sorted(by_devices.items())),
        harvest=tuple(
            sorted(((g, tuple(ids)) for g, ids in harvest.items()), key=lambda item: item[0] or "")
        ),
        lenders=tuple((flag, tuple(ids)) for flag, ids in sorted(lenders.items())),
        gang_nodes=tuple((n, tuple(ids)) for n, ids in sorted(by_nodes.items())),
        gang_devices=tuple((d, tuple(ids)) for d, ids in sorted(by_node_devices.items())),
        nodes=tuple((n, tuple(ids)) for n, ids in sorted(by_node.items())),
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
