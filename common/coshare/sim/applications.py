"""Job mixes drawn like the papers' workloads, for the demo, benchmarks and the simulator.

``TABLE_I`` is the coprocessor-sharing paper's Table I: seven Xeon Phi offload applications
with their device thread counts and the range of device memory their instances requested.
``XEON_PHI`` lists the three Xeon Phi models (memory, hardware threads = cores x 4) used to
build clusters of mixed device sizes. Pure: randomness only from a seeded generator passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coshare.model import MILLI, Device, Job, Node


@dataclass(frozen=True)
class Application:
    """One application of Table I.

    Attributes:
        name: the paper's abbreviation.
        description: what it computes.
        threads: device threads of its offloads.
        memory_min_mib: smallest device memory an instance requested.
        memory_max_mib: largest device memory an instance requested.
    """

    name: str
    description: str
    threads: int
    memory_min_mib: int
    memory_max_mib: int


TABLE_I: tuple[Application, ...] = (
    Application("KM", "K-means (Lloyd)", 60, 300, 1250),
    Application("MC", "Monte Carlo paths", 180, 400, 650),
    Application("MD", "molecular dynamics", 180, 300, 750),
    Application("SG", "SGEMM series", 60, 500, 3400),
    Application("BT", "CFD block tri-diagonal (NAS BT)", 240, 300, 1250),
    Application("SP", "CFD scalar penta-diagonal (NAS SP)", 180, 300, 1850),
    Application("LU", "CFD lower-upper Gauss-Seidel (NAS LU)", 180, 400, 1250),
)

#: Xeon Phi models: (name, memory MiB, hardware threads).
XEON_PHI: tuple[tuple[str, int, int], ...] = (
    ("phi-3120a", 6144, 57 * 4),
    ("phi-5110p", 8192, 60 * 4),
    ("phi-7120p", 16384, 61 * 4),
)


def table1_job(rng: random.Random, job_id: str, submit_time_s: float = 0.0) -> Job:
    """One job: a Table I application picked uniformly, memory uniform in its range."""
    app = rng.choice(TABLE_I)
    return Job(
        id=job_id,
        device_memory_mib=rng.randint(app.memory_min_mib, app.memory_max_mib),
        device_threads=app.threads,
        cpu_milli=MILLI,
        memory_mib=rng.choice((1024, 2048)),
        submit_time_s=submit_time_s,
        program=app.name,
    )


def table1_jobs(count: int, seed: int = 0) -> tuple[Job, ...]:
    """``count`` Table I jobs with ids ``1.0``, ``2.0``, ... (HTCondor style)."""
    rng = random.Random(seed)
    return tuple(table1_job(rng, f"{i + 1}.0") for i in range(count))


def phi_cluster(devices: int, seed: int = 0, per_node: int = 2) -> tuple[Node, ...]:
    """A cluster of ``devices`` Xeon Phis of mixed models, ``per_node`` per node.

    Nodes have 16 cores (2 x 8, as in the paper) per device pair and 64 GiB per device pair.
    """
    rng = random.Random(seed)
    nodes: list[Node] = []
    made = 0
    while made < devices:
        count = min(per_node, devices - made)
        model, memory, threads = rng.choice(XEON_PHI)
        nodes.append(
            Node(
                name=f"node{len(nodes) + 1:05d}",
                cpu_milli=8 * MILLI * max(count, 2),
                memory_mib=32768 * max(count, 2),
                devices=tuple(Device(str(i), memory, threads, model) for i in range(count)),
            )
        )
        made += count
    return tuple(nodes)
