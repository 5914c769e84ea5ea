"""What the scheduler's limits cost a cycle (coshare.ledger.limits), at 100,000 pending jobs.

Three figures, each the CPU seconds of this process and the wall seconds:

- ``withhold`` of a snapshot without limits (what every cycle of a site without limits pays);
- ``withhold`` of 100,000 jobs charged to 100 per-user limits;
- ``admit`` of a plan that places 50,000 of them (most are dropped: 50 each per user).

    python bench/limits_scale.py [--jobs N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TypeVar

from coshare.ledger.limits import admit, withhold
from coshare.model import MILLI, Assignment, Device, Job, Limit, Node, Plan, Snapshot

T = TypeVar("T")


def timed(what: str, call: Callable[[], T]) -> T:
    cpu, wall = time.process_time(), time.perf_counter()
    out = call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"{what:<48} cpu {cpu * 1000:8.1f} ms   wall {wall * 1000:8.1f} ms")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    n = parser.parse_args().jobs
    users = 100
    limits = tuple(
        Limit(f"u{i}", "MaxTRESPerUser gres/gpu=50", f"user u{i}", 50, 10) for i in range(users)
    )
    charged = tuple(
        Job(str(i), 100, priority=i % 7, submit_time_s=i, charges=((f"u{i % users}", 1.0),))
        for i in range(n)
    )
    nodes = (Node("n", MILLI, 1, (Device("0", 1, 1),)),)
    plain = Snapshot(nodes, pending=tuple(Job(str(i), 100) for i in range(n)))
    snapshot = Snapshot(nodes, pending=charged, limits=limits)
    plan = Plan("bench", tuple(Assignment(str(i), "n", ("0",)) for i in range(0, n, 2)))
    timed(f"withhold, no limits, {n} jobs", lambda: withhold(plain))
    timed(f"withhold, {users} limits, {n} charged jobs", lambda: withhold(snapshot))
    kept = timed(f"admit {len(plan.assignments)} placements", lambda: admit(snapshot, plan))
    print(f"kept {kept.placed} of {len(plan.assignments)} placements")


if __name__ == "__main__":
    main()
