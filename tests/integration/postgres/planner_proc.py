"""A planner process for the PostgreSQL coordination tests (run as ``python -m``), so the
tests can run several at once and SIGKILL or SIGSTOP one. Each prints JSON lines.

Modes:
  hammer DSN PLANNER SEED ROUNDS OUT   claim random overlapping gangs in random global order
      over the shared layout (:data:`LAYOUT`), hold them, release them; every held gang is
      written to OUT as ``unit job start end`` on the machine's monotonic clock (start after
      the hold committed, end before the release began), and the counts are printed.
  lease DSN PLANNER INSTANCE LEASE_S   wait (standby) until it holds the planner's lease,
      then renew it and write (claim and release a unit) every LEASE_S / 10 until killed;
      a lost lease is printed and ends it with status 3.
  reserve DSN PLANNER LEASE_S           take the lease once, then claim and release units in
      a loop (never renewing): "ready" once it holds some.
  queue DSN PLANNER LEASE_S             the sequencer (:data:`SMALL`): take the lease once,
      request half the units for PLANNER-0 and all of them for PLANNER-1 (granted what is
      free, waiting behind PLANNER-0 for the rest), say "ready", then poll (never renewing).
"""

from __future__ import annotations

import json
import random
import sys
import time

from coshare.alloc.layout import tile
from coshare.coord.engine import Engine
from coshare.coord.leases import PlannerLease
from coshare.coord.reservations import PostgresReservations
from coshare.coord.sequencer import SequencerReservations
from coshare.errors import DoubleBooking, EngineUnavailable, LeaseLost, Standby

#: 4 domains of 2 nodes x 3 cores: 24 units the planners fight over.
LAYOUT = tile(2, 2, cores_per_domain=6)
UNITS = [(d, u) for d, domain in enumerate(LAYOUT.domains) for u in domain.cores()]
#: 2 domains of 1 node x 4 cores (the sequencer's tests).
SMALL = tile(1, 2, cores_per_domain=4)
SMALL_UNITS = [(d, u) for d, domain in enumerate(SMALL.domains) for u in domain.cores()]


def say(**fields: object) -> None:
    print(json.dumps({"t": time.monotonic(), **fields}), flush=True)


def hammer(dsn: str, planner: str, seed: int, rounds: int, out: str) -> None:
    rng = random.Random(seed)
    lease = PlannerLease(Engine(dsn), planner, "i", 600)
    lease.acquire()
    store = PostgresReservations(lease, LAYOUT)
    counts = dict.fromkeys(
        ("held", "conflicts", "cancelled_others", "lost_to_cancel", "partial"), 0
    )
    with open(out, "w") as log:
        for n in range(rounds):
            job = f"{planner}-{n}"
            gang = rng.sample(UNITS, rng.randint(2, 8))
            order = (rng.randint(0, 1000), int(planner[1:]))
            claim = store.claim(job, order, gang, partial=rng.random() < 0.5)
            counts["conflicts"] += len(claim.conflicts)
            counts["cancelled_others"] += len(claim.cancelled)
            if len(claim.granted) < len(gang):
                counts["partial"] += bool(claim.granted)
                for domain in sorted({d for d, _ in gang}):
                    store.release(domain, job)
                continue
            try:
                for domain in sorted({d for d, _ in gang}):
                    store.hold(domain, job, [u for d, u in gang if d == domain])
            except DoubleBooking:
                # A higher job cancelled this one between claim and hold: it waits again.
                counts["lost_to_cancel"] += 1
                for domain in sorted({d for d, _ in gang}):
                    store.release(domain, job)
                continue
            start = time.monotonic()
            time.sleep(rng.random() * 0.004)
            end = time.monotonic()
            for _, unit in gang:
                log.write(f"{unit} {job} {start:.9f} {end:.9f}\n")
            counts["held"] += 1
            for domain in sorted({d for d, _ in gang}):
                store.release(domain, job)
        store.cancelled()
    say(event="done", **counts)


def lease_loop(dsn: str, planner: str, instance: str, lease_s: float) -> None:
    lease = PlannerLease(Engine(dsn), planner, instance, lease_s)
    while True:
        try:
            held = lease.acquire()
            break
        except Standby as standby:
            say(event="standby", holder=standby.holder)
            time.sleep(0.05)
    say(event="holding", epoch=held.epoch)
    store = PostgresReservations(lease, LAYOUT)
    n = 0
    while True:
        try:
            lease.fence()
            n += 1
            store.claim(f"{instance}-{n}", (n, 0), [UNITS[n % len(UNITS)]])
            store.release(UNITS[n % len(UNITS)][0], f"{instance}-{n}")
        except LeaseLost as lost:
            say(event="lost", message=str(lost))
            sys.exit(3)
        except EngineUnavailable as cut:
            # Paused inside a transaction: the server ended the session after half a lease
            # (so the standby could take over); the next round connects afresh, as the next
            # cycle would.
            say(event="cut", message=str(cut))
            continue
        say(event="wrote", n=n)
        time.sleep(lease_s / 10)


def reserve_loop(dsn: str, planner: str, lease_s: float) -> None:
    lease = PlannerLease(Engine(dsn), planner, "doomed", lease_s)
    lease.acquire()
    store = PostgresReservations(lease, LAYOUT)
    n = 0
    while True:
        n += 1
        gang = [UNITS[(n + k) % len(UNITS)] for k in range(6)]
        store.claim(f"{planner}-{n}", (n, 0), gang, partial=True)
        if n == 1:
            say(event="ready")
        if n % 2 == 0:
            for domain in sorted({d for d, _ in gang}):
                store.release(domain, f"{planner}-{n - 1}")


def queue_loop(dsn: str, planner: str, lease_s: float) -> None:
    lease = PlannerLease(Engine(dsn), planner, "doomed", lease_s)
    lease.acquire()
    store = SequencerReservations(lease, SMALL)
    store.request(f"{planner}-0", SMALL_UNITS[::2])
    store.request(f"{planner}-1", SMALL_UNITS)
    say(event="ready")
    while True:
        time.sleep(0.05)
        store.poll()


def main(argv: list[str]) -> None:
    mode, dsn, planner, *rest = argv
    if mode == "hammer":
        hammer(dsn, planner, int(rest[0]), int(rest[1]), rest[2])
    elif mode == "lease":
        lease_loop(dsn, planner, rest[0], float(rest[1]))
    elif mode == "reserve":
        reserve_loop(dsn, planner, float(rest[0]))
    elif mode == "queue":
        queue_loop(dsn, planner, float(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
