"""Several planners over shared nodes, against a real PostgreSQL:
concurrent planner processes never double-book, a SIGKILLed planner's reservations are gone
once its lease expires, a standby instance takes over a killed holder's lease within
``lease_s`` and a paused holder stops before its next write, and a live cycle survives the
engine stopping and starting again."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from coshare.alloc.layout import tile
from coshare.cli.cycles import run_once
from coshare.config import Config, CoordinationConfig
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease
from coshare.coord.reservations import PostgresReservations
from coshare.errors import DoubleBooking, EngineUnavailable, LeaseLost, Standby
from coshare.model import Device, Job, Node, Plan, Snapshot
from coshare.policies import make_policy
from coshare.ports import ApplyReport, Rejected, SourceResult

from tests.postgres import Postgres, running_postgres

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[3]
MODULE = "tests.integration.postgres.planner_proc"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def lines(proc: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


def wait_for(proc: subprocess.Popen[str], event: str) -> dict[str, Any]:
    for item in lines(proc):
        if item["event"] == event:
            return item
    _, err = proc.communicate(timeout=10)
    raise AssertionError(f"{event} never came; status {proc.returncode}: {err}")


def kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def count(dsn: str, sql: str, *params: object) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


# -- double booking ---------------------------------------------------------------------------
def test_concurrent_planners_over_overlapping_nodes_never_double_book(
    dsn: str, tmp_path: Path
) -> None:
    planners = [
        spawn("hammer", dsn, f"p{i}", str(i), "150", str(tmp_path / f"p{i}.log")) for i in range(4)
    ]
    totals: dict[str, int] = defaultdict(int)
    for proc in planners:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        for key, value in json.loads(out.splitlines()[-1]).items():
            if key not in ("t", "event"):
                totals[key] += value
    # The planners really contended: gangs were held, refused and cancelled.
    assert totals["held"] > 50 and totals["conflicts"] > 0 and totals["cancelled_others"] > 0, (
        totals
    )
    # Per unit, the held intervals (each inside the time the engine had it held) never overlap.
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for i in range(4):
        for line in (tmp_path / f"p{i}.log").read_text().splitlines():
            unit, job, begin, finish = line.split()
            spans[unit].append((float(begin), float(finish), job))
    assert sum(map(len, spans.values())) >= totals["held"] * 2
    for unit, held in spans.items():
        held.sort()
        for (_, end, job), (start, _, other) in itertools.pairwise(held):
            assert start >= end, f"unit {unit} held by {job} and {other} at once"
    assert count(dsn, "SELECT count(*) FROM coshare_live") == 0  # all released


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    """Engines opened by the test, closed at its end."""
    opened: list[Engine] = []
    yield opened
    for engine in opened:
        engine.close()


def opener(dsn: str, engines: list[Engine]) -> Any:
    """``store(planner, orders=None)``: a store under a fresh lease of ``planner``."""

    def store(
        planner: str, orders: dict[str, tuple[int, int]] | None = None
    ) -> PostgresReservations:
        engine = Engine(dsn)
        engines.append(engine)
        lease = PlannerLease(engine, planner, "i", 60)
        lease.acquire()
        return PostgresReservations(lease, tile(1, 2, cores_per_domain=4), orders)

    return store


def test_the_store_keeps_the_in_memory_contract(dsn: str, engines: list[Engine]) -> None:
    store = opener(dsn, engines)
    one = store("a")
    one.reserve(0, "j1", ["n0/0", "n0/1"])
    assert one.free(0) == ("n0/2", "n0/3") and one.booked(0, "j1") == ("n0/0", "n0/1")
    two = store("b")
    with pytest.raises(DoubleBooking, match="core n0/1 is booked by job 'j1'"):
        two.reserve(0, "j2", ["n0/2", "n0/1"])
    assert two.free(0) == ("n0/2", "n0/3")  # all or none: n0/2 was not taken
    with pytest.raises(DoubleBooking, match="another domain"):
        two.reserve(0, "j2", ["n1/0"])
    assert one.hold(0, "j1", ["n0/1"]) == ("n0/0",)
    assert one.booked(0, "j1", "held") == ("n0/1",) and one.free(0) == ("n0/0", "n0/2", "n0/3")
    assert two.release(0, "j1") == ("n0/1",)  # any planner may free a job's cores
    assert one.holders() == {}


def test_a_higher_request_cancels_lower_reservations_and_never_the_reverse(
    dsn: str, engines: list[Engine]
) -> None:
    store = opener(dsn, engines)
    low, high = store("low"), store("high")
    got = low.claim("late", (50, 0), [(0, "n0/0"), (0, "n0/1"), (1, "n1/0")])
    assert got.granted == ("n0/0", "n0/1", "n1/0") and got.cancelled == ()
    # Lower in the global order (a later time stamp) cannot take them: all or none refuses.
    later = high.claim("later", (60, 1), [(0, "n0/1"), (0, "n0/2")])
    assert later.granted == () and later.conflicts == (("n0/1", "late"),)
    assert high.free(0) == ("n0/2", "n0/3")
    # Higher (earlier): it cancels every reservation of the lower job, on every domain.
    early = high.claim("early", (10, 1), [(0, "n0/1"), (0, "n0/2")])
    assert early.granted == ("n0/1", "n0/2") and early.cancelled == ("late",)
    assert low.holders() == {"n0/1": "early", "n0/2": "early"}
    assert low.cancelled() == ("late",) and low.cancelled() == ()
    # Same time stamp: the home domain id breaks the tie (PICASO section 5).
    tie = low.claim("tie", (10, 0), [(0, "n0/2")])
    assert tie.cancelled == ("early",)
    # Held cores are never cancelled.
    assert low.hold(0, "tie", ["n0/2"]) == ()
    first = high.claim("first", (0, 0), [(0, "n0/2"), (0, "n0/3")], partial=True)
    assert first.granted == ("n0/3",) and first.conflicts == (("n0/2", "tie"),)


# -- dead planners ----------------------------------------------------------------------------
def test_a_sigkilled_planners_reservations_are_gone_once_its_lease_expires(
    dsn: str, engines: list[Engine]
) -> None:
    lease_s = 3.0
    proc = spawn("reserve", dsn, "doomed", str(lease_s))
    try:
        wait_for(proc, "ready")
        time.sleep(0.2)
    finally:
        kill(proc)
    killed = time.monotonic()
    assert count(dsn, "SELECT count(*) FROM coshare_live WHERE planner = 'doomed'") > 0
    survivor = opener(dsn, engines)("survivor")
    units = [(0, "n0/0"), (0, "n0/1"), (1, "n1/0"), (1, "n1/1")]
    while time.monotonic() < killed + lease_s + 10:
        if count(dsn, "SELECT count(*) FROM coshare_live WHERE planner = 'doomed'") == 0:
            break
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert gone_after <= lease_s + 1, f"still reserved {gone_after:.1f} s after the kill"
    # The cores are free for the others, and the dead rows are deleted by the next sweep.
    assert survivor.claim("next", (0, 0), units).granted == tuple(u for _, u in units)
    survivor.sweep()
    assert count(dsn, "SELECT count(*) FROM coshare_reservations WHERE planner = 'doomed'") == 0


def test_the_standby_takes_over_a_killed_holder_within_lease_s(dsn: str) -> None:
    lease_s = 3.0
    holder = spawn("lease", dsn, "ha", "a", str(lease_s))
    standby = None
    try:
        wait_for(holder, "holding")
        standby = spawn("lease", dsn, "ha", "b", str(lease_s))
        assert wait_for(standby, "standby")["holder"] == "a"
        wait_for(holder, "wrote")
        time.sleep(lease_s * 1.5)  # the holder renews: the standby must not take over
        assert standby.poll() is None
        killed = time.monotonic()
        kill(holder)
        took = wait_for(standby, "holding")
        assert took["epoch"] == 2
        waited = took["t"] - killed
        print(f"takeover {waited:.2f} s after SIGKILL (lease_s {lease_s})")
        # Within lease_s of the kill; the slack is the standby's polling (0.05 s) and a
        # loaded machine's scheduling, not the lease.
        assert 0 < waited <= lease_s + 2
        wait_for(standby, "wrote")
    finally:
        kill(holder)
        if standby is not None:
            kill(standby)


def test_a_holder_that_lost_its_lease_stops_before_its_next_write(dsn: str) -> None:
    lease_s = 1.5
    holder = spawn("lease", dsn, "ha", "a", str(lease_s))
    standby = None
    try:
        wait_for(holder, "wrote")
        standby = spawn("lease", dsn, "ha", "b", str(lease_s))
        wait_for(standby, "standby")
        os.kill(holder.pid, signal.SIGSTOP)  # paused, not dead: it still believes it holds it
        wait_for(standby, "holding")
        os.kill(holder.pid, signal.SIGCONT)
        lost = wait_for(holder, "lost")
        assert (
            "planner 'ha': instance 'a' lost its lease (instance 'b' holds it now, epoch 2)"
            in lost["message"]
        )
        assert holder.wait(timeout=10) == 3
    finally:
        kill(holder)
        if standby is not None:
            kill(standby)


def test_a_holder_stalled_inside_a_transaction_does_not_block_the_takeover(
    dsn: str, engines: list[Engine]
) -> None:
    lease_s = 2.0
    engines += [Engine(dsn), Engine(dsn)]
    holder = PlannerLease(engines[0], "ha", "a", lease_s)
    holder.acquire()
    # The holder stops inside a write transaction, its lease row locked FOR SHARE.
    stalled = engines[0].connection()
    stalled.execute("BEGIN")
    with stalled.cursor() as cur:
        holder.check(cur)
    standby = PlannerLease(engines[1], "ha", "b", lease_s)
    # Were the lock kept, the takeover would wait forever: fail after 10 s instead.
    engines[1].connection().execute("SET lock_timeout = '10s'")
    start = time.monotonic()
    while True:
        try:
            standby.acquire()
            break
        except Standby:
            time.sleep(0.05)
    waited = time.monotonic() - start
    assert waited <= lease_s + 2, f"took over after {waited:.1f} s"
    # The server ended the stalled session; once it reconnects the holder learns it lost.
    with pytest.raises(EngineUnavailable):
        holder.fence()
    with pytest.raises(LeaseLost, match="instance 'b' holds it now"):
        holder.fence()


# -- the live cycle -----------------------------------------------------------------------------
class StandIn:
    """An adapter over one fixed snapshot that records what it applied; ``during_read`` runs
    in the middle of the cycle (after the lease was taken, before the write)."""

    def __init__(self, during_read: Any = None) -> None:
        self.applied: list[Plan] = []
        self.during_read = during_read

    def read(self) -> SourceResult:
        if self.during_read is not None:
            self.during_read()
        node = Node("n1", 4000, 8192, (Device("0", 8192, 240, model="phi-5110p"),))
        return SourceResult(Snapshot((node,), pending=(Job("7", 1024, 60),), now_s=0.0), (), ())

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        self.applied.append(plan)
        return ApplyReport(applied=tuple(a.job for a in plan.assignments), dry_run=dry_run)


def cycle(dsn: str, adapter: StandIn, instance: str, tmp_path: Path, lease_s: float = 30) -> Any:
    config = Config(
        coordination=CoordinationConfig(
            dsn=dsn, domain="slurm-a", instance=instance, lease_s=lease_s
        )
    )
    return run_once(
        "fake",
        config,
        make_policy("exclusive"),
        lambda c: adapter,
        str(tmp_path / f"{instance}.lock"),
        log_cycle=False,
    )


def test_two_instances_of_one_planner_only_the_holder_writes(dsn: str, tmp_path: Path) -> None:
    first, second = StandIn(), StandIn()
    assert cycle(dsn, first, "a", tmp_path).apply.applied == ("7",)
    with pytest.raises(
        Standby,
        match=r"instance 'a' holds the lease .* this instance \('b'\) "
        r"is standby and did nothing",
    ):
        cycle(dsn, second, "b", tmp_path)
    assert second.applied == []
    assert cycle(dsn, first, "a", tmp_path).apply.applied == ("7",)  # renews, same epoch
    assert count(dsn, "SELECT epoch FROM coshare_leases WHERE planner = 'slurm-a'") == 1


def test_the_engine_stopped_mid_cycle_then_restarted(tmp_path: Path) -> None:
    with running_postgres() as server:
        dsn = server.dsn()
        adapter = StandIn(during_read=server.stop)
        with pytest.raises(EngineUnavailable) as info:
            cycle(dsn, adapter, "a", tmp_path)
        assert adapter.applied == [] and info.value.exit_status == 1
        assert f"at 127.0.0.1:{server.port} is unreachable" in str(info.value)
        assert "this cycle wrote nothing" in str(info.value)
        # The next cycle, engine down still: refused at the start, nothing written.
        with pytest.raises(EngineUnavailable):
            cycle(dsn, adapter, "a", tmp_path)
        assert adapter.applied == []
        server.start()
        assert cycle(dsn, StandIn(), "a", tmp_path).apply.applied == ("7",)


def test_a_cycle_whose_lease_was_taken_mid_cycle_writes_nothing(
    dsn: str, tmp_path: Path, engines: list[Engine]
) -> None:
    def take_over() -> None:
        time.sleep(1.2)  # the cycle's lease (1 s) lapses while it reads
        engines.append(Engine(dsn))
        PlannerLease(engines[-1], "slurm-a", "b", 30).acquire()

    adapter = StandIn(during_read=take_over)
    with pytest.raises(LeaseLost, match=r"lost its lease .*stopped before writing"):
        cycle(dsn, adapter, "a", tmp_path, lease_s=1)
    assert adapter.applied == []


def test_a_unix_socket_dsn_works_too(postgres_server: Postgres, tmp_path: Path) -> None:
    dsn = postgres_server.dsn(tcp=False)
    assert cycle(dsn, StandIn(), "unix", tmp_path).apply.applied == ("7",)
