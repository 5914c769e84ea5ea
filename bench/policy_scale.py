"""Planning time of the policies whose search grows with jobs x nodes, at 10,000 x 10,000.

Realistic snapshots, seeded: CPU nodes of varied cores (32-192) and memory (128 GiB-1.5 TiB),
most with resctrl (11-20 LLC ways) and a measured bandwidth, some without; one node in ten a
GPU node of eight 80 GB devices. Pending jobs vary: 1-32 processes of 1-8 cores and
1-16 GiB each, programs from a few profiles (some unprofiled), some declaring bandwidth, a
tenth needing a device.

Cases (``--cases``):

- ``membw``, ``sns``, ``cs``: the pending jobs above over the nodes above (target: 10,000 x
  10,000 within 5 s of CPU each).
- ``gang-exclusive``, ``gang-sharepack``: 1,000 gang jobs of ``nodes 1``, ``nodes_max``
  2**20 (and as many processes, which no cluster of this size holds) on 5,000 CPU nodes: the
  node-count search of each must stop at what the cluster can hold.

Prints, per case, the CPU seconds of this process spent in ``plan`` and the wall seconds;
``--check`` verifies each plan with coshare.cycle.verify and that it parses with the plan schema.

    python bench/policy_scale.py [--cases membw,sns,cs,gang-exclusive,gang-sharepack]
                                 [--jobs 10000] [--nodes 10000] [--gangs 1000]
                                 [--gang-nodes 5000] [--check] [--write PREFIX]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Device, Job, Node, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.profiles.programs import Profile, parse_profile
from coshare.schema import parse_plan, plan_to_dict, snapshot_to_dict

GIB = 1024
H100_MIB = 81_559


def profiles() -> dict[str, Profile]:
    """Three programs: bandwidth-bound (MG), cache-sensitive (BFS), compute-bound (EP)."""
    raw = {
        "MG": (
            {"1": 100.0, "2": 89.0, "4": 82.0, "8": 76.0},
            [2, 3, 20],
            [0.8, 0.9, 1.0],
            [100.0, 96.0, 80.0],
        ),
        "BFS": (
            {"1": 100.0, "2": 120.0, "4": 130.0, "8": 150.0},
            [2, 18, 20],
            [0.5, 0.9, 1.0],
            [1.0, 1.0, 1.0],
        ),
        "EP": ({"1": 100.0, "2": 99.0, "4": 98.0, "8": 97.0}, [2, 20], [0.95, 1.0], [0.1, 0.1]),
    }
    return {
        name: parse_profile(
            {"program": name, "run_time_s": rt, "ways": w, "ipc": ipc, "membw_gbps": bw},
            f"{name}.json",
        )
        for name, (rt, w, ipc, bw) in raw.items()
    }


def cluster(count: int, rng: random.Random, gpu_every: int = 10) -> tuple[Node, ...]:
    out = []
    for i in range(count):
        cores = rng.choice((32, 48, 64, 96, 128, 192))
        memory = rng.choice((128, 256, 384, 512, 768, 1536)) * GIB
        ways = rng.choice((11, 12, 15, 16, 20)) if rng.random() < 0.9 else None
        bw = rng.choice((100.0, 200.0, 300.0, 400.0))
        devices: tuple[Device, ...] = ()
        if gpu_every and i % gpu_every == 0:
            devices = tuple(Device(f"g{i}-{d}", H100_MIB, 132) for d in range(8))
        out.append(
            Node(
                f"node{i:05d}",
                cores * MILLI,
                memory,
                devices,
                membw_gbps=bw,
                llc_ways=ways,
                membw_baseline_gbps=bw,
            )
        )
    return tuple(out)


def pending(count: int, rng: random.Random) -> tuple[Job, ...]:
    out = []
    for i in range(count):
        program = rng.choice(("MG", "BFS", "EP", "EP", "unprofiled", None))
        if rng.random() < 0.1:
            out.append(
                Job(
                    f"j{i}",
                    rng.randrange(1, 80) * GIB,
                    rng.randrange(1, 133),
                    rng.choice((1, 1, 2, 4, 8)),
                    rng.randrange(1, 17) * MILLI,
                    rng.randrange(1, 65) * GIB,
                    rng.randrange(0, 3),
                    float(i),
                )
            )
            continue
        out.append(
            Job(
                f"j{i}",
                0,
                0,
                0,
                rng.randrange(1, 9) * MILLI,
                rng.randrange(1, 17) * GIB,
                rng.randrange(0, 3),
                float(i),
                kind="cpu",
                processes=rng.choice((1, 1, 2, 4, 8, 16, 32)),
                program=program,
                membw_gbps=rng.choice((None, 5.0, 20.0, 60.0)),
            )
        )
    return tuple(out)


def gangs(count: int) -> tuple[Job, ...]:
    return tuple(
        Job(
            f"g{i}",
            0,
            0,
            0,
            MILLI,
            GIB,
            0,
            float(i),
            kind="cpu",
            processes=2**20,
            nodes=1,
            nodes_max=2**20,
        )
        for i in range(count)
    )


def run(case: str, snapshot: Snapshot, check: bool) -> None:
    policy = make_policy(
        case.removeprefix("gang-"), PolicyOptions(sns_profiles=profiles(), threads="soft")
    )
    cpu, wall = time.process_time(), time.perf_counter()
    plan = policy.plan(snapshot)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"{case:15s} jobs {len(snapshot.pending):6d} nodes {len(snapshot.nodes):6d}  "
        f"placed {len({a.job for a in plan.assignments}):6d}  cpu {cpu:7.2f} s  "
        f"wall {wall:7.2f} s",
        flush=True,
    )
    if check:
        problems = check_plan(snapshot, plan)
        assert not problems, problems[:3]
        parse_plan(plan_to_dict(plan))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="membw,sns,cs,gang-exclusive,gang-sharepack")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gangs", type=int, default=1_000)
    parser.add_argument("--gang-nodes", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--write",
        metavar="PREFIX",
        help="write the two snapshots as PREFIX-mixed.json and PREFIX-gang.json "
        "(for farm-bench of `coshare plan`) instead of planning",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    mixed = Snapshot(nodes=cluster(args.nodes, rng), pending=pending(args.jobs, rng))
    wide = Snapshot(nodes=cluster(args.gang_nodes, rng, gpu_every=0), pending=gangs(args.gangs))
    if args.write:
        for label, snap in (("mixed", mixed), ("gang", wide)):
            with open(f"{args.write}-{label}.json", "w") as out:
                json.dump(snapshot_to_dict(snap), out)
        return
    for case in args.cases.split(","):
        run(case, wide if case.startswith("gang-") else mixed, args.check)


if __name__ == "__main__":
    main()
