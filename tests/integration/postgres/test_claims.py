"""Device-memory claims of several planners on a real PostgreSQL: planners
claiming concurrently never book a device beyond its memory, claims die with their planner's
lease, and a cycle through ``run_once`` claims what it writes and releases it once its job is
gone."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from coshare.cli.cycles import run_once
from coshare.config import Config, CoordinationConfig
from coshare.coord.claims import Part
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease, PostgresClaims
from coshare.model import Device, Job, Node, Plan, RunningJob, Snapshot
from coshare.policies import make_policy
from coshare.ports import ApplyReport, Rejected, SourceResult

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

CAP = {f"n{n}/{d}": 8192 for n in range(2) for d in range(2)}


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    opened: list[Engine] = []
    yield opened
    for engine in opened:
        engine.close()


def claims_of(dsn: str, engines: list[Engine], planner: str, lease_s: float = 60) -> PostgresClaims:
    engine = Engine(dsn)
    engines.append(engine)
    lease = PlannerLease(engine, planner, "i", lease_s)
    lease.acquire()
    return PostgresClaims(lease)


def part(job: str, unit: str, mib: int) -> Part:
    node, device = unit.split("/")
    return Part(job, node, device, mib)


def test_concurrent_planners_never_book_a_device_beyond_its_memory(
    dsn: str, engines: list[Engine]
) -> None:
    """Three planners (threads, each its own connection and lease) claim random jobs, some
    of them gangs over two devices, and release them after a while. Each granted job's span
    (from its claim's commit to the start of its release) is logged on the monotonic clock;
    on no device do the spans alive at once ever add up to more than its memory."""
    spans: list[tuple[str, int, float, float]] = []
    counts: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def planner(name: str, seed: int) -> None:
        rng = random.Random(seed)
        claims = claims_of(dsn, engines, name)
        held: list[tuple[str, list[Part], float]] = []
        for n in range(60):
            units = rng.sample(sorted(CAP), rng.choice((1, 1, 2)))
            job = f"{name}-{n}"
            parts = [part(job, u, rng.randint(1000, 5000)) for u in units]
            decision = claims.claim({job: parts}, CAP, {})
            now = time.monotonic()
            with lock:
                counts["granted" if not decision.refused else "refused"] += 1
            if not decision.refused:
                held.append((job, parts, now))
            if held and (len(held) > 3 or rng.random() < 0.3):
                gone, gone_parts, start = held.pop(rng.randrange(len(held)))
                end = time.monotonic()
                claims.release([gone])
                with lock:
                    spans.extend((p.unit, p.memory_mib, start, end) for p in gone_parts)
        end = time.monotonic()
        with lock:
            spans.extend((p.unit, p.memory_mib, start, end) for _, ps, start in held for p in ps)

    threads = [threading.Thread(target=planner, args=(f"p{i}", i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert counts["granted"] > 20 and counts["refused"] > 20, counts  # contention happened
    peak = dict.fromkeys(CAP, 0)
    for unit in CAP:
        events = sorted(
            [(s, m) for u, m, s, _ in spans if u == unit]
            + [(e, -m) for u, m, _, e in spans if u == unit],
            key=lambda x: (x[0], x[1]),
        )  # ends first at one instant
        used = 0
        for _, delta in events:
            used += delta
            assert used <= CAP[unit], f"{unit}: {used} MiB booked at once"
            peak[unit] = max(peak[unit], used)
    assert any(p > 5000 for p in peak.values()), peak  # devices were shared


def test_what_the_read_shows_counts_once_and_claims_die_with_the_lease(
    dsn: str, engines: list[Engine]
) -> None:
    a = claims_of(dsn, engines, "a", lease_s=1.5)
    b = claims_of(dsn, engines, "b")
    assert a.claim({"7": [part("7", "n0/0", 5000)]}, CAP, {}).refused == {}
    # b's read already shows job 7 (written by a): counted once, not twice.
    assert b.claim({"8": [part("8", "n0/0", 3000)]}, CAP, {"n0/0": {"7": 5000}}).refused == {}
    refused = b.claim({"9": [part("9", "n0/0", 1000)]}, CAP, {}).refused
    assert "8000 of 8192 MiB in use (claims of planner a)" in refused["9"]
    assert {(c.planner, c.part.job) for c in b.live()} == {("a", "7"), ("b", "8")}
    time.sleep(2)  # a's lease lapses: its claim is dead
    assert {c.part.job for c in b.live()} == {"8"}
    # While b's read still shows job 7 in the queue, it counts from there ...
    refused = b.claim({"9": [part("9", "n0/0", 1000)]}, CAP, {"n0/0": {"7": 5000}}).refused
    assert "8000 of 8192 MiB in use, 1000 MiB more" in refused["9"]
    # ... and once job 7 is gone from the queue too, its memory is free.
    assert b.claim({"9": [part("9", "n0/0", 1000)]}, CAP, {}).refused == {}
    # Releasing: only one's own claims.
    assert b.release(["8", "9"]) == 2 and b.live() == ()


class Queue:
    """A scheduler stand-in whose queue the test edits between cycles: pending jobs, and the
    placements written (which the next read shows as planned)."""

    def __init__(self, pending: list[Job]) -> None:
        self.pending = pending
        self.placed: dict[str, RunningJob] = {}
        self.extra: list[RunningJob] = []

    def read(self) -> SourceResult:
        node = Node("n0", 8000, 16384, (Device("0", 8192, 240), Device("1", 8192, 240)))
        pending = tuple(j for j in self.pending if j.id not in self.placed)
        return SourceResult(
            Snapshot((node,), tuple(self.placed.values()) + tuple(self.extra), pending, now_s=0.0),
            (),
        )

    def apply(self, plan: Plan, rejected: tuple[Rejected, ...], *, dry_run: bool) -> ApplyReport:
        memory = {j.id: j.device_memory_mib for j in self.pending}
        for a in plan.assignments:
            self.placed[a.job] = RunningJob(
                a.job, a.node, a.devices, memory[a.job], 60, state="planned"
            )
        return ApplyReport(applied=tuple(sorted(plan.placed_jobs)), dry_run=dry_run)


def cycle(dsn: str, queue: Queue, planner: str, tmp_path: Path) -> Any:
    config = Config(
        coordination=CoordinationConfig(dsn=dsn, domain=planner, instance="i", lease_s=30)
    )
    return run_once(
        "fake",
        config,
        make_policy("knapsack"),
        lambda c: queue,
        str(tmp_path / f"{planner}.lock"),
        log_cycle=False,
    )


def test_a_cycle_claims_what_it_writes_and_releases_it_when_the_job_is_gone(
    dsn: str, tmp_path: Path
) -> None:
    # Two planners over one node of two 8 GiB devices, each with jobs the other cannot see.
    a = Queue([Job(f"a{i}", 5000, 60, memory_mib=100) for i in range(3)])
    b = Queue([Job(f"b{i}", 5000, 60, memory_mib=100) for i in range(3)])
    report = cycle(dsn, a, "a", tmp_path)
    assert len(report.apply.applied) == 2  # one 5000 MiB job per device
    # b's read shows none of a's jobs; a's claims keep b off both devices.
    report = cycle(dsn, b, "b", tmp_path)
    assert report.apply.applied == ()
    assert all(u.code == "no_room" for u in report.plan.unplaced)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT planner, job, memory_mib FROM coshare_live_claims ORDER BY job"
        ).fetchall()
    assert rows == [("a", j, 5000) for j in sorted(a.placed)]
    # a's first job ends: a's next cycle releases its claim and places its third job there.
    first = sorted(a.placed)[0]
    del a.placed[first]
    a.pending = [j for j in a.pending if j.id != first]
    report = cycle(dsn, a, "a", tmp_path)
    assert report.apply.applied == ("a2",)
    # Another job ends; now b gets the device.
    second = sorted(a.placed)[0]
    del a.placed[second]
    a.pending = [j for j in a.pending if j.id != second]
    cycle(dsn, a, "a", tmp_path)
    report = cycle(dsn, b, "b", tmp_path)
    assert len(report.apply.applied) == 1
