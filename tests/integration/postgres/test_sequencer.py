"""The sequencer on the engine (PICASO 4.3; :mod:`coshare.coord.sequencer`) against a real
PostgreSQL: one total, stable order of tickets; each unit granted in ticket order; two
planners contending in opposite orders both finish, lower ticket first, with no double
booking and no cancellation; a dead planner's tickets and waits are gone with its lease; on
random request orders every request is granted and no unit is booked twice."""

from __future__ import annotations

import itertools
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
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease
from coshare.coord.reservations import PostgresReservations
from coshare.coord.sequencer import Request, SequencerReservations, agree, reservations
from coshare.errors import ConfigError, CoordinationError, DoubleBooking
from coshare.policies import make_policy

from tests.integration.postgres.planner_proc import SMALL, SMALL_UNITS
from tests.integration.postgres.test_coordination import StandIn, count, kill, spawn, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

#: 2 domains of 1 node x 4 cores (the dead planner's process uses the same).
LAYOUT, UNITS = SMALL, SMALL_UNITS


@pytest.fixture
def opened() -> Iterator[list[Engine]]:
    engines: list[Engine] = []
    yield engines
    for engine in engines:
        engine.close()


def store(
    dsn: str, engines: list[Engine], planner: str, lease_s: float = 60
) -> SequencerReservations:
    engine = Engine(dsn)
    engines.append(engine)
    lease = PlannerLease(engine, planner, "i", lease_s)
    lease.acquire()
    made = reservations(lease, LAYOUT, "sequencer")
    assert isinstance(made, SequencerReservations)
    return made


def no_higher_in_the_way(req: Request, tickets: dict[str, int]) -> None:
    """A request never waits behind a higher ticket (spawned jobs have none)."""
    for unit, other in req.waiting:
        assert (other in tickets and tickets[other] < req.ticket) or other not in tickets, (
            f"{req.job} (ticket {req.ticket}) waits for {unit} behind {other} "
            f"(ticket {tickets.get(other)})"
        )


def test_the_order_is_total_and_stable_across_re_requests(dsn: str, opened: list[Engine]) -> None:
    a, b = store(dsn, opened, "a"), store(dsn, opened, "b")
    first = a.request("a1", [(0, "n0/0"), (1, "n1/0")])
    second = b.request("b1", [(0, "n0/0")], home=1)
    third = a.request("a2", [(1, "n1/1")])
    assert first.ticket < second.ticket < third.ticket  # one sequence for every planner
    assert first.granted == ("n0/0", "n1/0") and first.ready
    assert second.granted == () and second.waiting == (("n0/0", "a1"),)
    assert third.ready
    # Re-requests (the next cycle) keep the ticket and the place.
    assert b.request("b1", [(0, "n0/0")], home=1).ticket == second.ticket
    assert a.request("a1", [(1, "n1/0"), (0, "n0/0")]).ticket == first.ticket
    assert b.ticket("b1") == second.ticket
    # The ticket stands for its units; another planner may not request the job.
    with pytest.raises(
        CoordinationError,
        match=r"job 'b1' already waits with ticket \d+ for "
        r"units n0/0; a re-request names the same",
    ):
        b.request("b1", [(0, "n0/1")])
    with pytest.raises(CoordinationError, match="job 'a1' is requested by planner 'a'"):
        b.request("a1", [(0, "n0/0"), (1, "n1/0")])
    with pytest.raises(DoubleBooking, match="another domain"):
        a.request("a3", [(0, "n1/0")])
    # a1 spawns on n0/0 only: n1/0 goes back; b1 is next on n0/0 only once a1 ends.
    assert a.hold(0, "a1", ["n0/0"]) == ()
    assert a.hold(1, "a1", []) == ("n1/0",)
    assert a.ticket("a1") is None  # spawned: its request is done
    assert b.poll()["b1"].waiting == (("n0/0", "a1"),)
    assert a.release(0, "a1") == ("n0/0",)
    assert b.poll()["b1"].granted == ("n0/0",)  # granted by a's release, in b's name
    # Leaving the queue and coming back: a new ticket, after every earlier one.
    b.release(0, "b1")
    assert b.ticket("b1") is None
    assert b.request("b1", [(0, "n0/1")]).ticket > third.ticket


def test_each_unit_goes_to_the_lowest_ticket_waiting(dsn: str, opened: list[Engine]) -> None:
    a, b = store(dsn, opened, "a"), store(dsn, opened, "b")
    a.reserve(0, "run", ["n0/0", "n0/1"])  # a job running there
    a.hold(0, "run", ["n0/0", "n0/1"])
    low = b.request("low", [(0, "n0/0"), (0, "n0/2")])
    high = a.request("high", [(0, "n0/2"), (0, "n0/3")])
    # low takes n0/2 (free) at once; high gets n0/3 but waits for n0/2 behind low: never
    # the reverse, whatever the order the planners ask in afterwards.
    assert low.granted == ("n0/2",) and low.waiting == (("n0/0", "run"),)
    assert high.granted == ("n0/3",) and high.waiting == (("n0/2", "low"),)
    assert a.request("high", [(0, "n0/3"), (0, "n0/2")]).waiting == (("n0/2", "low"),)
    # The port's reserve does not jump the queue either.
    with pytest.raises(DoubleBooking, match="core n0/2 is booked by job 'low'"):
        a.reserve(0, "jumper", ["n0/2"])
    a.release(0, "run")
    assert b.poll()["low"].ready
    b.hold(0, "low", ["n0/0", "n0/2"])
    assert a.poll(["high"])["high"].waiting == (("n0/2", "low"),)
    b.release(0, "low")
    assert a.poll()["high"].granted == ("n0/2", "n0/3")
    assert count(dsn, "SELECT count(*) FROM coshare_cancellations") == 0


def contender(
    dsn: str,
    planner: str,
    gangs: list[list[tuple[int, str]]],
    out: list[Any],
    engines: list[Engine],
) -> None:
    """One planner: request every gang (in the given order), then poll, spawn what is ready
    (a short hold) and release it, until all ran. ``out``: (job, ticket, units, start)."""
    seq = store(dsn, engines, planner)
    jobs = {}
    for n, gang in enumerate(gangs):
        job = f"{planner}-{n}"
        req = seq.request(job, gang)
        jobs[job] = (gang, req.ticket)
        assert seq.cancelled() == ()
    deadline = time.monotonic() + 120
    seen: dict[str, set[str]] = defaultdict(set)
    while jobs:
        assert time.monotonic() < deadline, f"{planner}: still waiting: {sorted(jobs)}"
        for job, req in seq.poll(jobs).items():
            assert seen[job] <= set(req.granted), f"{job} lost a granted unit"  # no cancel
            seen[job] = set(req.granted)
            if not req.ready:
                continue
            gang, ticket = jobs.pop(job)
            by_domain: dict[int, list[str]] = defaultdict(list)
            for d, u in gang:
                by_domain[d].append(u)
            for d, units in sorted(by_domain.items()):
                seq.hold(d, job, units)
            out.append((job, ticket, sorted(u for _, u in gang), time.monotonic()))
            time.sleep(0.002)
            for d in sorted(by_domain):
                seq.release(d, job)
        time.sleep(0.005)


def test_two_planners_in_opposite_orders_both_finish_lower_ticket_first(
    dsn: str, opened: list[Engine]
) -> None:
    rng = random.Random(20)
    gangs = [rng.sample(UNITS, rng.randint(2, 6)) for _ in range(12)]
    done: list[Any] = []
    errors: list[BaseException] = []

    def run(planner: str, order: list[list[tuple[int, str]]]) -> None:
        try:
            contender(dsn, planner, order, done, opened)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("a", gangs)),
        threading.Thread(target=run, args=("b", gangs[::-1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert len(done) == 24  # both finished every gang
    # Per unit, the jobs ran in ticket order: a request never went behind a higher ticket,
    # and (spans are sequential) no unit was booked twice.
    per_unit: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for job, ticket, units, start in done:
        for unit in units:
            per_unit[unit].append((start, ticket, job))
    contended = 0
    for unit, runs in per_unit.items():
        runs.sort()
        tickets = [t for _, t, _ in runs]
        assert tickets == sorted(tickets), f"{unit}: ran out of ticket order: {runs}"
        contended += len(runs) > 1
    assert contended >= 4
    assert count(dsn, "SELECT count(*) FROM coshare_cancellations") == 0
    assert count(dsn, "SELECT count(*) FROM coshare_live") == 0
    assert count(dsn, "SELECT count(*) FROM coshare_tickets") == 0  # all spawned and done


def test_a_dead_planners_tickets_and_waits_are_gone_after_its_lease(
    dsn: str, opened: list[Engine]
) -> None:
    lease_s = 3.0
    proc = spawn("queue", dsn, "doomed", str(lease_s))
    try:
        wait_for(proc, "ready")
    finally:
        kill(proc)
    killed = time.monotonic()
    for table in ("coshare_live_tickets", "coshare_live_waits", "coshare_live"):
        assert count(dsn, f"SELECT count(*) FROM {table} WHERE planner = 'doomed'") > 0, table
    survivor = store(dsn, opened, "survivor")
    # Behind the dead planner's tickets on every unit until its lease expires.
    waiting = survivor.request("next", UNITS)
    assert waiting.granted == () and {j for _, j in waiting.waiting} >= {"doomed-0"}
    while time.monotonic() < killed + lease_s + 10:
        if count(dsn, "SELECT count(*) FROM coshare_live_tickets WHERE planner = 'doomed'") == 0:
            break
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    assert gone_after <= lease_s + 1, f"still queued {gone_after:.1f} s after the kill"
    assert count(dsn, "SELECT count(*) FROM coshare_live_waits WHERE planner = 'doomed'") == 0
    assert survivor.poll()["next"].granted == tuple(sorted(u for _, u in UNITS))
    assert survivor.sweep() > 0
    for table in ("coshare_tickets", "coshare_waits", "coshare_reservations"):
        assert count(dsn, f"SELECT count(*) FROM {table} WHERE planner = 'doomed'") == 0, table


@pytest.mark.parametrize("seed", range(6))
def test_on_random_request_orders_every_request_is_granted_once(
    dsn: str, opened: list[Engine], seed: int
) -> None:
    rng = random.Random(seed)
    planners = [store(dsn, opened, f"p{i}") for i in range(3)]
    gangs = {f"j{n}": rng.sample(UNITS, rng.randint(1, 5)) for n in range(14)}
    owner = {job: rng.choice(planners) for job in gangs}
    arrivals = list(gangs)
    rng.shuffle(arrivals)
    tickets: dict[str, int] = {}
    running: set[str] = set()
    ran: list[tuple[str, int]] = []  # (job, ticket) in the order they were spawned
    for step in itertools.count():
        assert step < 500, f"not every request was granted: {sorted(set(gangs) - set(tickets))}"
        if arrivals and rng.random() < 0.5:
            job = arrivals.pop()
            tickets[job] = owner[job].request(job, gangs[job], home=rng.randint(0, 1)).ticket
        elif running and rng.random() < 0.5:
            job = rng.choice(sorted(running))
            running.discard(job)
            for domain in sorted({d for d, _ in gangs[job]}):
                owner[job].release(domain, job)
        else:
            seq = rng.choice(planners)
            for job, req in seq.poll().items():
                live = {j: t for j, t in tickets.items() if j not in running and j not in dict(ran)}
                no_higher_in_the_way(req, live)
                if req.ready and rng.random() < 0.7:
                    for domain in sorted({d for d, _ in gangs[job]}):
                        seq.hold(domain, job, [u for d, u in gangs[job] if d == domain])
                    running.add(job)
                    ran.append((job, req.ticket))
        holders = planners[0].holders()
        # No unit booked twice: every booked unit's job asked for it, and no two jobs
        # running at once share a unit.
        for unit, job in holders.items():
            assert unit in {u for _, u in gangs[job]}, (unit, job)
        used = [u for job in running for _, u in gangs[job]]
        assert len(used) == len(set(used)), "a unit held by two running jobs"
        if not arrivals and len(ran) == len(gangs):
            break
    # Two gangs sharing a unit ran in ticket order.
    spawn_at = {job: i for i, (job, _) in enumerate(ran)}
    for x, y in itertools.combinations(gangs, 2):
        if {u for _, u in gangs[x]} & {u for _, u in gangs[y]}:
            first, second = sorted((x, y), key=lambda j: tickets[j])
            assert spawn_at[first] < spawn_at[second], (first, second)
    assert count(dsn, "SELECT count(*) FROM coshare_cancellations") == 0


def test_planners_of_different_protocols_over_one_engine_are_refused(
    dsn: str, opened: list[Engine]
) -> None:
    store(dsn, opened, "seq")
    engine = Engine(dsn)
    opened.append(engine)
    lease = PlannerLease(engine, "canc", "i", 60)
    lease.acquire()
    with pytest.raises(
        ConfigError,
        match=r"coordination\.protocol: planner 'canc' uses "
        r"'cancel' but planner 'seq', live on the same "
        r"engine, uses 'sequencer'",
    ):
        reservations(lease, LAYOUT, "cancel")
    assert isinstance(reservations(lease, LAYOUT, "sequencer"), SequencerReservations)
    with pytest.raises(ConfigError, match="unknown protocol 'paxos'"):
        agree(lease, "paxos")
    # Once the sequencer planners' leases are gone, active cancellation may start.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE coshare_leases SET lease_until = clock_timestamp()")
    lease.acquire()
    assert isinstance(reservations(lease, LAYOUT, "cancel"), PostgresReservations)


def test_a_live_cycle_of_the_other_protocol_is_refused_and_writes_nothing(
    dsn: str, tmp_path: Path
) -> None:
    def cycle(domain: str, protocol: str, adapter: StandIn) -> Any:
        config = Config(
            coordination=CoordinationConfig(dsn=dsn, domain=domain, instance="i", protocol=protocol)
        )  # type: ignore[arg-type]
        return run_once(
            "fake",
            config,
            make_policy("exclusive"),
            lambda c: adapter,
            str(tmp_path / f"{domain}.lock"),
            log_cycle=False,
        )

    assert cycle("seq-a", "sequencer", StandIn()).apply.applied == ("7",)
    refused = StandIn()
    with pytest.raises(
        ConfigError,
        match=r"planner 'cancel-b' uses 'cancel' but planner "
        r"'seq-a', live on the same engine, uses "
        r"'sequencer'",
    ):
        cycle("cancel-b", "cancel", refused)
    assert refused.applied == []  # refused before its read: it never got to write
    # The same planner with the engine's protocol runs to its write (job 7's device is
    # seq-a's claim under the exclusive policy, so it places nothing there).
    accepted = StandIn()
    cycle("cancel-b", "sequencer", accepted)
    assert len(accepted.applied) == 1
