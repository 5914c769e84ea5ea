"""The ``picaso-*`` workloads: a message-level simulator of the distributed allocation protocol.

Ramachandran and Mueller (``shared/papers/distributed-job-allocation-manycores.md``),
section 6's *partial simulation*: a tile of ``n x n`` domain managers, jobs that end on a
timer, waits measured from submission to the moment the home holds every core it needs.
Every message of :mod:`coshare.alloc.protocol` is delivered here under a **unit-latency
model** (:class:`Timing`): a message takes one time unit per link it crosses (tree messages
go to a neighbour: one link; answers and submissions go straight to their domain over X-Y
routes: the Manhattan distance), and a manager handles one message or event at a time, one
unit each, first come first served (the serialization that makes the sequencer a
bottleneck, section 4.3). Nothing is calibrated: the time unit is a hop, not a TilePro64
cycle, so waits are compared with the paper as the relative change it prints,
``(O_ab - O_ac) / O_ab``.

The paper's scenarios (section 7) and what it does not say, with coshare's choice:

- ``parallel-3``, ``parallel-12`` (Fig. 5): four simultaneous jobs from the four corners of
  a 7 x 7 tile ("the four extreme corners", 7.2), each needing the cores of 3 (12) domains.
- ``short-24``, ``short-49`` (Fig. 6), ``long-24``, ``long-49`` (Fig. 7): the same four
  corners, 24 or 49 domains each; run time 1 unit (short: "below the minimum overhead") or
  500 units (long: the paper's 0.5 s / 0.001 s ratio).
- ``tiles`` (Fig. 8): ``n x n`` tiles, n = 2..7, n simultaneous jobs of n domains each,
  from the diagonal (the paper does not say where).
- ``worst`` (Fig. 9): 7 x 7, ``n`` simultaneous jobs each needing all 49 domains, from
  ``n`` distinct domains drawn per seed (15 seeds, the paper's 15 runs); the wait of the
  first job allocated.
- ``propagation`` (section 7.6): messages per broadcast scheme.

Every domain has 8 cores (the real-task mode's pico-kernels per domain, section 6); a job
of ``k`` domains asks for ``8k`` cores. The sequencer sits at the tile's centre.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from coshare.alloc.layout import Layout, tile
from coshare.alloc.propagation import (
    SCHEMES,
    Pattern,
    Propagation,
    broadcast_messages,
    paper_broadcast_messages,
)
from coshare.alloc.protocol import (
    MESSAGE_KINDS,
    AllocPolicy,
    Gang,
    Manager,
    Message,
    Own,
    Refusal,
    check_gang,
    expected_messages,
)
from coshare.alloc.store import InMemoryReservationStore
from coshare.errors import CoshareError

CORES_PER_DOMAIN = 8
SHORT_RUN = 1
LONG_RUN = 500
SIDE = 7
#: The corners of the 7 x 7 tile (row-major ids), where section 7.2's jobs start.
CORNERS = (0, SIDE - 1, SIDE * (SIDE - 1), SIDE * SIDE - 1)
#: Runs averaged per point where homes are drawn (section 7.1: "averaged over 15 runs").
PAPER_RUNS = 15
#: A run stops with an error beyond this many handled events (a livelock would; none does).
MAX_EVENTS = 5_000_000


class ProtocolStuck(CoshareError):
    """The simulated protocol stopped with jobs neither allocated nor refused (a deadlock),
    or ran past :data:`MAX_EVENTS`."""


@dataclass(frozen=True)
class Timing:
    """The unit-latency model: time units per link crossed and per message handled.

    The defaults are the model every figure uses; the others are assumptions that
    :mod:`coshare.sim.picaso_timing` varies to show which one moves a result:
    ``send_units``, the sender's cost of setting up each message it sends (its handling
    ends only once every message is out, and the i-th leaves after ``i`` set-ups);
    ``jitter_units``, a random extra delay of 0..J units per message (drawn from ``seed``),
    with every link kept first-in-first-out (a message never overtakes an earlier one
    between the same two domains, which the sequencer relies on).
    """

    hop_units: int = 1
    handle_units: int = 1
    send_units: int = 0
    jitter_units: int = 0
    seed: int = 0


@dataclass
class JobResult:
    """One gang's outcome: when the home held every core (``None``: refused), its attempts
    and cancellations, and whether its home decided it alone."""

    job: Gang
    allocated_at: int | None = None
    ended_at: int | None = None
    attempts: int = 0
    cancels: int = 0
    local: bool = False
    use: tuple[tuple[int, tuple[str, ...]], ...] = ()

    @property
    def wait(self) -> int | None:
        return None if self.allocated_at is None else self.allocated_at - self.job.submit


@dataclass
class ProtocolRun:
    """A simulated run: per-job results in the global order, messages sent per kind,
    what section 4's formulas expect, refusals, and the largest number of cores ever booked
    at once (never above the layout's)."""

    policy: AllocPolicy
    pattern: Pattern
    layout: Layout
    sequencer: int
    jobs: list[JobResult]
    messages: dict[str, int]
    expected: dict[str, int]
    refused: list[Refusal]
    link_crossings: int = 0
    events: int = 0
    end_at: int = 0
    first_allocated: int | None = None

    @property
    def total_messages(self) -> int:
        return sum(self.messages.values())

    def broadcasts(self) -> int:
        """Request and cancel propagations (the unit of section 7.3's analysis)."""
        return sum(
            j.attempts + j.cancels for j in self.jobs if not j.local and j.allocated_at is not None
        )


@dataclass(order=True)
class _Event:
    time: int
    seq: int
    kind: Literal["arrive", "ready"] = field(compare=False)
    node: int = field(compare=False)
    msg: Message | None = field(compare=False, default=None)


def run_protocol(
    layout: Layout,
    jobs: Sequence[Gang],
    policy: AllocPolicy,
    pattern: Pattern = "fixed",
    timing: Timing = Timing(),
    sequencer: int | None = None,
) -> ProtocolRun:
    """Run ``jobs`` through the protocol on ``layout`` until every job has ended.

    Jobs that cannot run (a field out of range, wider than all domains: ``never_fits``)
    are refused with the counts and the others go on.

    Raises:
        ProtocolStuck: jobs left neither allocated nor refused (a deadlock), or more than
            :data:`MAX_EVENTS` events.
        DoubleBooking: a core booked by two jobs (the store refuses it).
    """
    seat = layout.centre() if sequencer is None else sequencer
    trees = Propagation(layout, pattern)
    store = InMemoryReservationStore(layout)
    managers = [Manager(d, layout, store, trees, policy, seat) for d in range(layout.size)]
    refused: list[Refusal] = []
    results: dict[str, JobResult] = {}
    heap: list[_Event] = []
    seq = 0

    def push(
        time: int, kind: Literal["arrive", "ready"], node: int, msg: Message | None = None
    ) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, _Event(time, seq, kind, node, msg))

    ids: set[str] = set()
    for job in jobs:
        if job.id in ids:
            raise CoshareError(f"job {job.id}: id given twice; job ids must be unique")
        ids.add(job.id)
        refusal = check_gang(job, layout)
        if refusal is not None:
            refused.append(refusal)
            continue
        results[job.id] = JobResult(job)
        push(job.submit, "arrive", job.home, Message("launch", job, job.home, job.home))

    jitter = random.Random(timing.seed) if timing.jitter_units > 0 else None
    last_arrival: dict[tuple[int, int], int] = {}  # per link: keeps it first-in-first-out
    inbox: list[list[Message]] = [[] for _ in range(layout.size)]
    busy_until = [0] * layout.size
    waiting = [False] * layout.size  # a "ready" event is pending
    messages: dict[str, int] = dict.fromkeys(MESSAGE_KINDS, 0)
    crossings = events = now = 0
    first: str | None = None
    while heap:
        event = heapq.heappop(heap)
        now = event.time
        node = event.node
        if event.kind == "arrive":
            assert event.msg is not None
            inbox[node].append(event.msg)
            if not waiting[node]:
                waiting[node] = True
                push(max(now, busy_until[node]), "ready", node)
            continue
        msg = inbox[node].pop(0)
        events += 1
        if events > MAX_EVENTS:
            raise ProtocolStuck(f"{policy}: more than {MAX_EVENTS} events; stopped")
        effects = managers[node].handle(msg)
        handled_at = now + timing.handle_units
        done_at = handled_at + timing.send_units * len(effects.sends)
        busy_until[node] = done_at
        for i, out in enumerate(effects.sends, 1):
            hops = layout.hops(out.src, out.dst)
            messages[out.kind] += 1
            crossings += hops
            arrival = handled_at + i * timing.send_units + hops * timing.hop_units
            if jitter is not None:
                arrival += jitter.randint(0, timing.jitter_units)
                link = (out.src, out.dst)
                arrival = max(arrival, last_arrival.get(link, 0))
                last_arrival[link] = arrival
            push(arrival, "arrive", out.dst, out)
        for job, use in effects.spawned:
            results[job.id].allocated_at = done_at
            results[job.id].use = use
            first = job.id if first is None else first
        for job in effects.running:
            push(done_at + job.run, "arrive", node, Message("complete", job, node, node))
            ended = results[job.id]
            ended.ended_at = max(ended.ended_at or 0, done_at + job.run)
        if inbox[node]:
            push(done_at, "ready", node)
        else:
            waiting[node] = False

    owns: list[Own] = [own for m in managers for own in m.own.values()]
    for own in owns:
        result = results[own.job.id]
        result.attempts, result.cancels, result.local = own.attempt, own.cancels, own.local
    stuck = [r.job.id for r in results.values() if r.allocated_at is None]
    if stuck:
        shown = ", ".join(stuck[:5]) + (", ..." if len(stuck) > 5 else "")
        raise ProtocolStuck(f"{policy}: {len(stuck)} jobs never allocated ({shown}): deadlock")
    if store.holders():
        raise ProtocolStuck(
            f"{policy}: cores left booked after every job ended: "
            f"{sorted(store.holders().items())[:5]}"
        )
    ordered = sorted(results.values(), key=lambda r: r.job.order)
    return ProtocolRun(
        policy,
        pattern,
        layout,
        seat,
        ordered,
        messages,
        expected_messages(policy, trees, seat, owns),
        refused,
        crossings,
        events,
        now,
        None if first is None else next(i for i, r in enumerate(ordered) if r.job.id == first),
    )


# -- the paper's scenarios ------------------------------------------------------------------

#: The parts a ``picaso-PART`` workload name selects.
PARTS = (
    "parallel-3",
    "parallel-12",
    "short-24",
    "short-49",
    "long-24",
    "long-49",
    "tiles",
    "worst",
    "propagation",
    "timing",
)
#: The parts ``picaso`` runs (``picaso-timing``, a sweep of the time model, runs alone).
ALL_PARTS = PARTS[:-1]

Scenario = Literal["parallel-3", "parallel-12", "short-24", "short-49", "long-24", "long-49"]
#: Section 7.2's four-job scenarios: (domains per job, run time units).
SCENARIOS: dict[str, tuple[int, int]] = {
    "parallel-3": (3, LONG_RUN),
    "parallel-12": (12, LONG_RUN),
    "short-24": (24, SHORT_RUN),
    "short-49": (49, SHORT_RUN),
    "long-24": (24, LONG_RUN),
    "long-49": (49, LONG_RUN),
}
#: What the paper prints for them: the relative change of active cancellation against the
#: sequencer, ``(O_ab - O_ac) / O_ab`` in %, per job in priority order (text of 7.2; the
#: figures print no values). Positive: active cancellation waits less.
PAPER_CHANGE: dict[str, tuple[str, ...]] = {
    "parallel-3": ("+23", "+76", "+83", "+83"),
    "parallel-12": ("+21", "+58", "+73", "+48"),
    "short-24": ("~-17", "~-12", "-7", "-4"),
    "short-49": ("~-12", "-4", "~-1", "~-1"),
    "long-24": ("-17", "-13", "-0.03..-0.05", "-0.03..-0.05"),
    "long-49": ("~-12", "-0.01..-0.04", "-0.01..-0.04", "-0.01..-0.04"),
}


def corner_jobs(domains_each: int, run: int, side: int = SIDE) -> list[Gang]:
    """Four simultaneous jobs from the tile's corners, each needing ``domains_each`` domains."""
    corners = (0, side - 1, side * (side - 1), side * side - 1)
    return [
        Gang(f"j{i + 1}", home, domains_each * CORES_PER_DOMAIN, 0, run)
        for i, home in enumerate(corners)
    ]


def change_pct(ac: float, ab: float) -> float:
    """The paper's relative change of active cancellation, ``(O_ab - O_ac) / O_ab`` in %."""
    return (ab - ac) / ab * 100.0 if ab else 0.0


@dataclass
class ScenarioResult:
    """Both policies on one scenario."""

    name: str
    runs: dict[str, ProtocolRun]

    def waits(self, policy: str) -> list[int]:
        """Waits of the 1st, 2nd, ... job allocated (the figures' x-axis: the order the
        policy serves the jobs, which is the sequencer's numbering under the sequencer)."""
        return sorted(r.wait or 0 for r in self.runs[policy].jobs)

    def change(self) -> list[float]:
        return [
            change_pct(ac, ab)
            for ac, ab in zip(self.waits("cancel"), self.waits("sequencer"), strict=True)
        ]


def run_scenario(
    name: str,
    pattern: Pattern = "fixed",
    timing: Timing = Timing(),
    sequencer: int | None = None,
) -> ScenarioResult:
    """One of :data:`SCENARIOS` under both policies (the sequencer at the centre unless
    ``sequencer`` names its domain)."""
    domains, run = SCENARIOS[name]
    layout = tile(SIDE, cores_per_domain=CORES_PER_DOMAIN)
    jobs = corner_jobs(domains, run)
    return ScenarioResult(
        name,
        {
            p: run_protocol(layout, jobs, p, pattern, timing, sequencer)
            for p in ("cancel", "sequencer")
        },
    )


@dataclass
class TilePoint:
    """Fig. 8: one tile size, both policies, and section 7.3's broadcast count
    ``1 + 3(n - 1)`` (every lower job cancelled once and asked again)."""

    n: int
    runs: dict[str, ProtocolRun]

    @property
    def paper_broadcasts(self) -> int:
        return 1 + 3 * (self.n - 1)

    def first_last(self, policy: str) -> tuple[int, int]:
        """Waits of the first and the last job allocated."""
        waits = sorted(r.wait or 0 for r in self.runs[policy].jobs)
        return waits[0], waits[-1]


def run_tiles(sides: Sequence[int] = range(2, 8), pattern: Pattern = "fixed") -> list[TilePoint]:
    """Fig. 8: on each ``n x n`` tile, ``n`` simultaneous jobs of ``n`` domains each, homed
    on the diagonal."""
    points = []
    for n in sides:
        layout = tile(n, cores_per_domain=CORES_PER_DOMAIN)
        jobs = [Gang(f"j{i + 1}", i * n + i, n * CORES_PER_DOMAIN, 0, LONG_RUN) for i in range(n)]
        points.append(
            TilePoint(
                n, {p: run_protocol(layout, jobs, p, pattern) for p in ("cancel", "sequencer")}
            )
        )
    return points


@dataclass
class WorstPoint:
    """Fig. 9: ``n`` simultaneous jobs of all 49 domains; the first allocated job's wait
    per seed, per policy."""

    n: int
    first_wait: dict[str, list[int]]
    messages: dict[str, list[int]]

    def mean(self, policy: str) -> float:
        values = self.first_wait[policy]
        return sum(values) / len(values)


def run_worst(
    counts: Sequence[int] = range(1, SIDE * SIDE + 1),
    seeds: Sequence[int] = range(PAPER_RUNS),
    pattern: Pattern = "fixed",
    timing: Timing = Timing(),
    sequencer: int | None = None,
) -> list[WorstPoint]:
    """Fig. 9: per ``n``, ``n`` homes drawn (seeded) from the 7 x 7 tile (the sequencer at
    the centre unless ``sequencer`` names its domain; a timing with jitter draws it per
    seed)."""
    layout = tile(SIDE, cores_per_domain=CORES_PER_DOMAIN)
    points = []
    for n in counts:
        waits: dict[str, list[int]] = {"cancel": [], "sequencer": []}
        sent: dict[str, list[int]] = {"cancel": [], "sequencer": []}
        for seed in seeds:
            homes = sorted(random.Random(seed * 1000 + n).sample(range(layout.size), n))
            jobs = [
                Gang(f"j{i + 1}", home, layout.total_cores, 0, SHORT_RUN)
                for i, home in enumerate(homes)
            ]
            drawn = replace(timing, seed=timing.seed * 1000 + seed)
            for policy in ("cancel", "sequencer"):
                run = run_protocol(layout, jobs, policy, pattern, drawn, sequencer)
                first = min(r.allocated_at or 0 for r in run.jobs)
                waits[policy].append(first)
                sent[policy].append(run.total_messages)
        points.append(WorstPoint(n, waits, sent))
    return points


def crossover(points: Sequence[WorstPoint]) -> int | None:
    """The smallest ``n`` from which the sequencer's mean first wait stays below active
    cancellation's (section 7.4: past a quarter of the domains)."""
    found = None
    for point in sorted(points, key=lambda p: p.n, reverse=True):
        if point.mean("sequencer") < point.mean("cancel"):
            found = point.n
        else:
            break
    return found


@dataclass(frozen=True)
class PropagationRow:
    """Section 7.6: messages of one broadcast from a corner of an ``n x n`` tile, counted by
    walking each scheme, beside the paper's formula; and the adaptive set-up's one-off cost."""

    n: int
    counted: dict[str, int]
    paper: dict[str, int]
    adaptive_setup: int
    depth: dict[str, int]


def run_propagation(sides: Sequence[int] = range(2, 8)) -> list[PropagationRow]:
    """Section 7.6's schemes on ``n x n`` tiles, from the corner (node 1 of Fig. 3)."""
    rows = []
    for n in sides:
        layout = tile(n, cores_per_domain=CORES_PER_DOMAIN)
        counted: dict[str, int] = {s: broadcast_messages(layout, 0, s) for s in SCHEMES}
        paper: dict[str, int] = {s: paper_broadcast_messages(n, s) for s in SCHEMES}
        depth: dict[str, int] = {}
        for pattern in ("fixed", "adaptive"):
            parents = Propagation(layout, pattern).parents(0)
            depth[pattern] = max((_depth(parents, d) for d in parents), default=0)
        rows.append(
            PropagationRow(
                n, counted, paper, Propagation(layout, "adaptive").setup_messages(0), depth
            )
        )
    return rows


def _depth(parents: dict[int, int], node: int) -> int:
    hops = 0
    while node in parents:
        node, hops = parents[node], hops + 1
    return hops
