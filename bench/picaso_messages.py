"""Message counts of the distributed allocation protocol per policy, pattern and tile size.

The simulated part of the measurements (the live planners on a database are not built
yet): on every ``n x n`` tile of domain managers, n = 2..7, the messages each policy sends
for two loads, counted by the message-level simulator (``coshare.sim.picaso``) beside
section 4's count from the protocol's attempts and cancels:

- *tiles* (Fig. 8): ``n`` simultaneous jobs of ``n`` domains each, homes on the diagonal;
  also section 7.3's request + cancel propagations against its ``1 + 3(n - 1)``;
- *worst* (Fig. 9 at ``n``): ``n`` simultaneous jobs of all ``n^2`` domains, same homes.

Also the simulator's speed (messages handled per CPU second) on the largest load.

    python bench/picaso_messages.py [--sides 2-7]
"""

from __future__ import annotations

import argparse
import time

from coshare.alloc.layout import tile
from coshare.alloc.protocol import POLICIES, Gang
from coshare.sim.picaso import CORES_PER_DOMAIN, ProtocolRun, run_protocol

KINDS = ("request", "response", "spawn", "cancel", "submit")


def jobs_of(n: int, domains_each: int) -> list[Gang]:
    return [Gang(f"j{i + 1}", i * n + i, domains_each * CORES_PER_DOMAIN, 0, 500) for i in range(n)]


def row(load: str, n: int, run: ProtocolRun) -> str:
    counted = " ".join(f"{run.messages[k]:>6}" for k in KINDS)
    formula = all(run.messages[k] == v for k, v in run.expected.items())
    props = sum(r.attempts + r.cancels for r in run.jobs)
    paper = 1 + 3 * (n - 1) if run.policy == "cancel" else n
    return (
        f"{load:<6} {n}x{n}  {run.policy:<9} {run.pattern:<8} {counted} "
        f"{run.total_messages:>6}  {'yes' if formula else 'NO':<7} {props:>5} / {paper:<5}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sides", default="2-7", help="tile sides, e.g. 2-7")
    args = parser.parse_args()
    low, _, high = args.sides.partition("-")
    sides = range(int(low), int(high or low) + 1)
    print(
        "load   tile policy    pattern  request respns  spawn cancel submit  total  formula"
        "  props / paper"
    )
    handled = 0
    start = time.process_time()
    for load in ("tiles", "worst"):
        for n in sides:
            for policy in POLICIES:
                for pattern in ("fixed", "adaptive"):
                    jobs = jobs_of(n, n if load == "tiles" else n * n)
                    run = run_protocol(
                        tile(n, cores_per_domain=CORES_PER_DOMAIN), jobs, policy, pattern
                    )
                    handled += run.events
                    print(row(load, n, run))
    cpu_s = time.process_time() - start
    print(
        f"\n{handled} events handled in {cpu_s:.2f} CPU s ({handled / cpu_s:,.0f} per s); "
        "props = request + cancel propagations (sequencer: one request each); paper = "
        "section 7.3's 1 + 3(n - 1) for active cancellation, n for the sequencer"
    )


if __name__ == "__main__":
    main()
