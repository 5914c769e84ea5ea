"""The neutral records both adapters fill, and the ledger's rules that read them.

An adapter parses its scheduler's text, JSON or ClassAds into these records; what a
record means for the snapshot is decided here, once for both schedulers:

- :class:`Started`: a started job, where it runs and what it holds on each node
  (:func:`holdings`): its placed devices with its demand, or those devices whole; every
  node whole when its own record cannot be read.
- :func:`foreign_holdings`: a pending job another planner placed holds its devices here.
- :func:`unwritable_node`: a node whose name the writer cannot write is left out.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coshare.ledger.book import Declared, Queued, placed_elsewhere, whole_devices, whole_node
from coshare.ledger.bounds import shorten_text
from coshare.model import Node, RunningJob
from coshare.ports import UNWRITABLE, Rejected, Unusable


@dataclass(frozen=True)
class Started:
    """A started job as its adapter read it.

    Attributes:
        id: the job's id in the snapshot.
        devices: each node it runs on (in its order), with the device ids it holds there.
        cpu_milli: its cores on each node, in thousandths.
        memory_mib: its host memory on each node.
        problem: why its own record (cores, memory) cannot be read, naming the job, its
            nodes and the field; or ``None``. With one, it holds each of its nodes whole.
        demand: its device memory and threads on each device; ``None``: unknown, its
            devices count whole (never under-count).
        terms: what it declared that the policies read (time, bandwidths, program).
        start_time_s: when it started, or ``None``.
        harvest_from: the GPU job whose idle cores it borrows, or ``None``.
        llc_ways: its LLC ways on each node where it has a resctrl group.
    """

    id: str
    devices: Mapping[str, tuple[str, ...]]
    cpu_milli: int = 0
    memory_mib: int = 0
    problem: str | None = None
    demand: tuple[int, int] | None = None
    terms: Declared = field(default_factory=Declared)
    start_time_s: float | None = None
    harvest_from: str | None = None
    llc_ways: Mapping[str, int] = field(default_factory=dict)


def holdings(job: Started, nodes: Mapping[str, Node], notes: list[str]) -> list[RunningJob]:
    """What a started job holds on each of its nodes the snapshot has (the others are not
    planned: nothing there to count against)."""
    here = [name for name in job.devices if name in nodes]
    if job.problem is not None:
        if here:
            notes.append(f"{job.problem}: counted as holding the whole node")
        return [whole_node(job.id, nodes[name]) for name in here]
    held: list[RunningJob] = []
    for name in here:
        known = {d.id: d for d in nodes[name].devices}
        missing = [d for d in job.devices[name] if d not in known]
        if missing:
            notes.append(f"job {job.id} uses device(s) {','.join(missing)} unknown on {name}")
        ids = tuple(d for d in job.devices[name] if d in known)
        memory, threads = job.demand or whole_devices([known[d] for d in ids])
        held.append(
            RunningJob(
                id=job.id,
                node=name,
                devices=ids,
                device_memory_mib=memory,
                device_threads=threads,
                cpu_milli=job.cpu_milli,
                memory_mib=job.memory_mib,
                state="running",
                llc_ways=job.llc_ways.get(name),
                start_time_s=job.start_time_s,
                walltime_s=job.terms.walltime_s,
                copy_bw_mbps=job.terms.copy_bw_mbps,
                harvest_from=job.harvest_from,
                program=job.terms.program,
                membw_gbps=job.terms.membw_gbps,
            )
        )
    return held


def foreign_holdings(
    job: Queued | Rejected, nodes: Sequence[Node], who: str, notes: list[str]
) -> tuple[RunningJob, ...]:
    """What a pending job another planner placed holds on ``nodes`` (several planners): its
    placement's devices (:func:`coshare.ledger.book.placed_elsewhere`). One whose record
    cannot be read holds nothing here, with a note naming ``who``: its planner's claims
    count for it; it never stops this planner's cycle."""
    got = job if isinstance(job, Rejected) else placed_elsewhere(job, nodes)
    if isinstance(got, Rejected):
        notes.append(
            f"{who} is placed but cannot be read here ({got.reason}); it counts only "
            "through its planner's claims"
        )
        return ()
    return got


def unwritable_node(name: str, problem: str, allowed: str, notes: list[str]) -> Unusable:
    """A node whose name the writer refuses in every placement, left out with a note:
    planning jobs onto it would fail every write of every cycle while good nodes sit free."""
    notes.append(
        f"node {shorten_text(name)}: its name cannot be written into a placement: it "
        f"{problem} ({allowed}); node left out of this cycle"
    )
    return Unusable(name, UNWRITABLE, f"name not writable ({allowed})")
