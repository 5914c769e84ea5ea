"""Modern-GPU clusters and job mixes for the planning benchmarks.

Devices are 80 GB GPUs (H100: 81,559 MiB, 132 SMs x 2,048 resident threads), 8 per node,
on nodes of 128 cores and 2 TiB. Jobs are drawn from three kinds of work that share GPUs
today, with device memory from 1 GB to 80 GB in 256 MiB steps, so nearly every job has its
own size:

==========  ======  ===============  ==================  ========  ============
kind        share   device memory    device threads      cores     host memory
==========  ======  ===============  ==================  ========  ============
notebook    40%     1-8 GB           5-25% of the SMs    1-4       4-32 GB
inference   35%     8-40 GB          10-60% of the SMs   2-8       16-128 GB
training    25%     40-80 GB         50-100% of the SMs  8-16      64-256 GB
==========  ======  ===============  ==================  ========  ============

Threads are whole SMs (multiples of 2,048), as MPS percentages give them.
"""

from __future__ import annotations

import random

from coshare.model import MILLI, Device, Job, Node

GPU_MEMORY_MIB = 81_559
GPU_THREADS = 132 * 2_048
GPUS_PER_NODE = 8
NODE_CORES = 128
NODE_MEMORY_MIB = 2 * 1024 * 1024
GIB = 1024
STEP_MIB = 256

#: (weight, memory GB range, SM share range, cores range, host GB range)
KINDS = (
    (0.40, (1, 8), (0.05, 0.25), (1, 4), (4, 32)),
    (0.35, (8, 40), (0.10, 0.60), (2, 8), (16, 128)),
    (0.25, (40, 80), (0.50, 1.00), (8, 16), (64, 256)),
)


def gpu_cluster(devices: int) -> tuple[Node, ...]:
    """``devices`` H100s, 8 per node (the last node may have fewer)."""
    nodes = []
    for n in range(-(-devices // GPUS_PER_NODE)):
        count = min(GPUS_PER_NODE, devices - n * GPUS_PER_NODE)
        gpus = tuple(Device(str(d), GPU_MEMORY_MIB, GPU_THREADS, "H100") for d in range(count))
        nodes.append(Node(f"gpu{n:05d}", NODE_CORES * MILLI, NODE_MEMORY_MIB, gpus))
    return tuple(nodes)


def gpu_job(rng: random.Random, job_id: str) -> Job:
    """One job of the mix."""
    pick, kind = rng.random(), KINDS[-1]
    for candidate in KINDS:
        if pick < candidate[0]:
            kind = candidate
            break
        pick -= candidate[0]
    _, memory_gb, sm_share, cores, host_gb = kind
    low, high = memory_gb[0] * GIB // STEP_MIB, min(memory_gb[1] * GIB, GPU_MEMORY_MIB) // STEP_MIB
    sms = max(1, round(rng.uniform(*sm_share) * GPU_THREADS / 2_048))
    return Job(
        id=job_id,
        device_memory_mib=rng.randint(low, high) * STEP_MIB,
        device_threads=sms * 2_048,
        cpu_milli=rng.randint(*cores) * MILLI,
        memory_mib=rng.randint(*host_gb) * GIB,
    )


def gpu_jobs(count: int, seed: int = 0) -> tuple[Job, ...]:
    """``count`` jobs of the mix, ids ``1.0``, ``2.0``, ..."""
    rng = random.Random(seed)
    return tuple(gpu_job(rng, f"{i + 1}.0") for i in range(count))
