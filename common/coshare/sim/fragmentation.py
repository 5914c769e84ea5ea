"""The Alibaba GPU-sharing fragmentation benchmark (Weng et al., ATC'23), for every policy.

The protocol of ``notes/fgd-fragmentation-benchmark.md``, per seed: shuffle the pod list,
append clones drawn uniformly with replacement from it until the GPU requests reach 130% of the
cluster's GPU capacity, submit the pods in that order, drop a pod that does not fit (no retry,
no departures), and after each step record "arrived" (the GPU requests of all pods submitted,
dropped ones included) and "allocated" (GPU milli held), as % of capacity. The metric is the
unallocated GPU % (100 - allocated) at 90-130% arrival.

Two protocols, labelled in every output:

- **online**: one pod per planning cycle, as the published table (and a Kubernetes
  scheduler) does;
- **batch**: each cycle plans the next ``batch`` pods together, as coshare does live with
  whatever waits in the queue. A pod with no room is dropped, like online (nothing ever
  leaves, so it never gets room); one that fits but was not chosen waits for the next cycle.

Ties between nodes follow a seeded random node order (the benchmark's): the snapshot lists
the nodes in that order, and every policy breaks ties by snapshot order.

Speed: an online cycle's snapshot holds only the nodes that can take the pod, one per group of
identical nodes (same free resources, same kind of node), and each device's jobs as one
aggregate placement. For one pod this changes no policy's decision: a node that cannot take it
is chosen by none, identical nodes score identically and the first in snapshot order wins,
and every policy sees the same free resources and the same "device in use" flags
(``tests/unit/test_fragmentation.py`` checks it against the full snapshot). Batch cycles see
the whole cluster. Pure: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Node, Plan, RunningJob, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.base import Policy
from coshare.policies.fgd import Shape, job_shape, target_workload
from coshare.policies.potential import expected_shapes
from coshare.policies.potential import job_shape as workload_shape
from coshare.sim.mig import physical_gpus
from coshare.sim.packing_bound import unallocated_bound
from coshare.sim.traces import GPU_MILLI

PROTOCOLS = ("online", "batch")
#: Arrival levels (% of GPU capacity) the benchmark reports.
ARRIVAL_LEVELS = (90, 100, 110, 120, 130)
#: Pods are submitted until their GPU requests reach this share of capacity.
ARRIVAL_LIMIT = 1.30
#: Pods per cycle in the batch protocol.
BATCH_PODS = 100
#: The knapsack's memory step for GPU milli (requests are multiples of 10 milli).
MILLI_GRID = 10
#: Published unallocated GPU % at 100% arrival, median of 10 seeds (ATC'23).
PUBLISHED_AT_100 = {
    "random": 13.75,
    "dotprod": 9.45,
    "gpuclustering": 8.42,
    "gpupacking": 8.20,
    "bestfit": 7.09,
    "fgd": 4.77,
}


def gpu_request(job: Job) -> int:
    """GPU milli a pod requests in all."""
    return job.device_memory_mib * job.device_count if job.needs_device else 0


def gpu_capacity(nodes: Sequence[Node]) -> int:
    """GPU milli of a cluster: its physical GPUs, a GPU sliced into MIG instances once
    (:mod:`coshare.sim.mig`: what its layout leaves unused is unallocated)."""
    return sum(physical_gpus(n) for n in nodes) * GPU_MILLI


def arrivals(
    pods: Sequence[Job], capacity: int, seed: int, limit: float = ARRIVAL_LIMIT
) -> tuple[Job, ...]:
    """The pods of one seed: shuffled, then clones until requests reach ``limit`` x capacity."""
    rng = random.Random(f"pods:{seed}")
    order = list(pods)
    rng.shuffle(order)
    total = sum(gpu_request(p) for p in order)
    clones = 0
    while total < limit * capacity and total > 0:  # no GPU pods: cloning would never end
        pod = rng.choice(pods)
        clones += 1
        order.append(replace(pod, id=f"{pod.id}~{clones}"))
        total += gpu_request(pod)
    return tuple(order)


def node_order(nodes: Sequence[Node], seed: int) -> tuple[Node, ...]:
    """The seeded random node order that breaks ties."""
    order = list(nodes)
    random.Random(f"nodes:{seed}").shuffle(order)
    return tuple(order)


def fragmentation_options(nodes: Sequence[Node], pods: Sequence[Job], seed: int) -> PolicyOptions:
    """Policy options for the benchmark: FGD's target workload from the pod list (as the
    benchmark's simulator does), BestFit's scale from the cluster, a 10-milli knapsack grid,
    and soft threads (threads mirror GPU milli, so a thread dimension adds nothing)."""
    return PolicyOptions(
        threads="soft",
        seed=seed,
        age_limit_s=None,
        memory_grid_mib=MILLI_GRID,
        fgd_workload=target_workload(job_shape(p) for p in pods),
        workload=expected_shapes(workload_shape(p) for p in pods),
        bestfit_scale=(max(n.cpu_milli for n in nodes), max(len(n.devices) for n in nodes)),
    )


@dataclass(frozen=True)
class FragRun:
    """One policy, one protocol, one seed.

    Attributes:
        policy: the policy's name.
        protocol: ``online`` or ``batch``.
        seed: the seed.
        arrived: after each record, GPU requests submitted so far, % of capacity.
        allocated: after each record, GPU milli held, % of capacity.
        placed: pods placed.
        dropped: pods that did not fit.
        at_100: where the unallocated GPU capacity sits when arrivals first reach 100%, in %
            of capacity: ``idle_gpus`` (GPUs nothing uses), ``idle_gpus_no_cores`` (those of
            them on nodes with fewer free cores than any GPU pod asks for), ``partial``
            (the free part of GPUs in use).
        bound: per arrival level (:data:`ARRIVAL_LEVELS`), the least unallocated GPU % that
            any placement of the pods submitted by then can have, read at the same records
            (:mod:`coshare.sim.packing_bound`); empty when not computed.
    """

    policy: str
    protocol: str
    seed: int
    arrived: tuple[float, ...]
    allocated: tuple[float, ...]
    placed: int
    dropped: int
    at_100: dict[str, float] = field(default_factory=dict)
    bound: dict[float, float] = field(default_factory=dict)

    def unallocated_at(self, level: float) -> float:
        """Unallocated GPU % when arrivals reach ``level`` % (linear between records)."""
        return float(self.unallocated_curve([level])[0])

    def unallocated_curve(
        self, levels: Sequence[float] | npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """:meth:`unallocated_at` for many levels at once."""
        if not self.arrived:
            return np.full(len(levels), 100.0)
        out: npt.NDArray[np.float64] = 100.0 - np.interp(levels, self.arrived, self.allocated)
        return out


Step = Callable[[int], None]


def run_benchmark(
    nodes: Sequence[Node],
    pods: Sequence[Job],
    policy: str | Policy,
    protocol: str,
    seed: int,
    batch: int = BATCH_PODS,
    step: Step | None = None,
) -> FragRun:
    """Run the benchmark once.

    Args:
        nodes: the GPU nodes.
        pods: the original pod list (clones are drawn from it).
        policy: a policy name (built with :func:`fragmentation_options`), or a policy.
        protocol: ``online`` or ``batch``.
        seed: shuffles pods, clones, the node order and seeds the random policy.
        batch: pods per cycle (batch protocol).
        step: called with the number of pods submitted so far, every cycle.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    capacity = gpu_capacity(nodes)
    sequence = arrivals(pods, capacity, seed)
    impl = (
        make_policy(policy, fragmentation_options(nodes, pods, seed))
        if isinstance(policy, str)
        else policy
    )
    ledger = _Ledger(node_order(nodes, seed))
    size = 1 if protocol == "online" else max(1, batch)
    arrived_milli = 0
    arrived: list[float] = []
    allocated: list[float] = []
    placed = 0
    waiting: list[Job] = []
    min_cores = min((p.total_cpu_milli for p in pods if p.needs_device), default=0)
    at_100: dict[str, float] = {}
    submitted: list[int] = []
    for start in range(0, len(sequence), size):
        chunk = sequence[start : start + size]
        arrived_milli += sum(gpu_request(p) for p in chunk)
        pending = [*waiting, *chunk]
        snapshot = ledger.snapshot(pending, reduced=len(pending) == 1)
        plan = impl.plan(snapshot)
        placed += ledger.apply(plan, pending)
        # Online, a pod that is not placed is dropped, as the benchmark does. In a batch,
        # one that fits but was not chosen waits for the next cycle, as it would live; one
        # with no room is dropped (nothing ever leaves, so it would never get any).
        if size > 1:
            kept = {u.job for u in plan.unplaced if u.code == "not_chosen"}
            waiting = [p for p in pending if p.id in kept]
        arrived.append(100.0 * arrived_milli / capacity)
        submitted.append(start + len(chunk))
        allocated.append(100.0 * ledger.allocated / capacity)
        if not at_100 and arrived[-1] >= 100.0:
            at_100 = ledger.breakdown(capacity, min_cores)
        if step is not None:
            step(start + len(chunk))
    return FragRun(
        impl.name,
        protocol,
        seed,
        tuple(arrived),
        tuple(allocated),
        placed,
        len(sequence) - placed,
        at_100,
    )


def benchmark_bound(
    nodes: Sequence[Node], pods: Sequence[Job], protocol: str, seed: int, batch: int = BATCH_PODS
) -> dict[float, float]:
    """The least unallocated GPU % any placement can leave at each arrival level
    (:data:`ARRIVAL_LEVELS`) of the benchmark's arrivals for ``seed``
    (:mod:`coshare.sim.packing_bound`). It depends on the arrivals only, never on a policy, so
    it is computed once, and only where asked (``simulate --bound``, the benchmark's report),
    never inside a policy's run (it costs about as much as a fast policy's whole run)."""
    capacity = gpu_capacity(nodes)
    sequence = arrivals(pods, capacity, seed)
    size = 1 if protocol == "online" else max(1, batch)
    arrived: list[float] = []
    submitted: list[int] = []
    arrived_milli = 0
    for start in range(0, len(sequence), size):
        chunk = sequence[start : start + size]
        arrived_milli += sum(gpu_request(p) for p in chunk)
        arrived.append(100.0 * arrived_milli / capacity)
        submitted.append(start + len(chunk))
    requests = [
        (p.device_memory_mib, p.device_count) if p.needs_device else (0, 0) for p in sequence
    ]
    return unallocated_bound(
        arrived, submitted, requests, capacity // GPU_MILLI, GPU_MILLI, ARRIVAL_LEVELS
    )


def median_unallocated(runs: Sequence[FragRun], level: float) -> float:
    """The median over seeds of the unallocated GPU % at ``level`` % arrival."""
    return float(np.median([r.unallocated_at(level) for r in runs]))


def median_bound(runs: Sequence[FragRun], level: float) -> float | None:
    """The median over seeds of the lower bound at ``level`` % arrival (``None``: none)."""
    values = [r.bound[level] for r in runs if level in r.bound]
    return float(np.median(values)) if values else None


class _Ledger:
    """What each node holds, kept as free resources and aggregate placements."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        width = max((len(n.devices) for n in self.nodes), default=1) or 1
        self.free = np.full((len(self.nodes), width), -1, dtype=np.int64)
        for i, n in enumerate(self.nodes):
            self.free[i, : len(n.devices)] = [d.memory_mib for d in n.devices]
        self.size = self.free.copy()  # each device's size (a MIG instance's is its own)
        self.slot = [{d.id: s for s, d in enumerate(n.devices)} for n in self.nodes]
        self.cpu = np.array([n.cpu_milli for n in self.nodes], dtype=np.int64)
        self.mem = np.array([n.memory_mib for n in self.nodes], dtype=np.int64)
        self.dev_host = [[0, 0] for _ in self.nodes]  # host cpu, memory of device pods
        self.cpu_pods = [[0, 0, 0] for _ in self.nodes]  # count, cpu, memory of CPU pods
        classes: dict[object, int] = {}
        self.kind = [
            classes.setdefault(
                (
                    n.cpu_milli,
                    n.memory_mib,
                    tuple((d.memory_mib, d.threads, d.model) for d in n.devices),
                ),
                len(classes),
            )
            for n in self.nodes
        ]
        self.key_ids: dict[object, int] = {}
        self.key_of = np.zeros(len(self.nodes), dtype=np.int64)  # node -> id of its state
        self.entries: list[tuple[RunningJob, ...] | None] = [None] * len(self.nodes)
        self.allocated = 0
        for i in range(len(self.nodes)):
            self._changed(i)

    def breakdown(self, capacity: int, min_cores: int) -> dict[str, float]:
        """Where the free GPU capacity sits, in % of ``capacity`` (see :class:`FragRun`)."""
        valid = self.free >= 0
        idle = (self.free == self.size) & valid
        no_cores = (self.cpu < min_cores)[:, None] & idle
        partial = valid & (self.free < self.size)
        return {
            "idle_gpus": 100.0 * int(self.free[idle].sum()) / capacity,
            "idle_gpus_no_cores": 100.0 * int(self.free[no_cores].sum()) / capacity,
            "partial": 100.0 * int(self.free[partial].sum()) / capacity,
        }

    def _changed(self, i: int) -> None:
        key = (
            self.kind[i],
            int(self.cpu[i]),
            int(self.mem[i]),
            tuple(self.free[i].tolist()),
            self.cpu_pods[i][0] > 0,
        )
        self.key_of[i] = self.key_ids.setdefault(key, len(self.key_ids))
        self.entries[i] = None

    def _entries(self, i: int) -> tuple[RunningJob, ...]:
        cached = self.entries[i]
        if cached is not None:
            return cached
        node = self.nodes[i]
        out: list[RunningJob] = []
        host_cpu, host_mem = self.dev_host[i]
        for s, dev in enumerate(node.devices):
            used = dev.memory_mib - int(self.free[i, s])
            if used <= 0:
                continue
            out.append(
                RunningJob(
                    f"{node.name}/{dev.id}", node.name, (dev.id,), used, used, host_cpu, host_mem
                )
            )
            host_cpu = host_mem = 0  # device pods' host share rides on the first entry
        count, cpu, mem = self.cpu_pods[i]
        if count:
            out.append(RunningJob(f"{node.name}/host", node.name, (), 0, 0, cpu, mem))
        self.entries[i] = tuple(out)
        return self.entries[i] or ()

    def snapshot(self, pods: Sequence[Job], reduced: bool) -> Snapshot:
        rows = self._candidates(pods[0]) if reduced else list(range(len(self.nodes)))
        nodes: list[Node] = []
        running: list[RunningJob] = []
        for i in rows:
            nodes.append(self.nodes[i])
            running.extend(self._entries(i))
        jobs = tuple(replace(p, submit_time_s=float(k)) for k, p in enumerate(pods))
        return Snapshot(tuple(nodes), tuple(running), jobs)

    def _candidates(self, pod: Job) -> list[int]:
        """Nodes that could take ``pod``, the first of each group of identical ones."""
        ok = (self.cpu >= pod.total_cpu_milli) & (self.mem >= pod.total_memory_mib)
        if pod.needs_device:
            ok &= (self.free >= pod.device_memory_mib).sum(axis=1) >= pod.device_count
        rows = np.flatnonzero(ok)
        _, first = np.unique(self.key_of[rows], return_index=True)
        return sorted(rows[first].tolist())

    def apply(self, plan: Plan, pods: Sequence[Job]) -> int:
        by_id = {p.id: p for p in pods}
        placed = 0
        for a in plan.assignments:
            pod = by_id[a.job]
            i = self.index[a.node]
            self.cpu[i] -= pod.total_cpu_milli
            self.mem[i] -= pod.total_memory_mib
            if a.devices:
                self.dev_host[i][0] += pod.total_cpu_milli
                self.dev_host[i][1] += pod.total_memory_mib
            else:
                self.cpu_pods[i][0] += 1
                self.cpu_pods[i][1] += pod.total_cpu_milli
                self.cpu_pods[i][2] += pod.total_memory_mib
            for dev in a.devices:
                s = self.slot[i][dev]
                self.free[i, s] -= pod.device_memory_mib
                assert self.free[i, s] >= 0, f"GPU {a.node}/{dev} oversubscribed"
            assert self.cpu[i] >= 0 and self.mem[i] >= 0, f"host of {a.node} oversubscribed"
            self.allocated += gpu_request(pod)
            placed += 1
            self._changed(i)
        return placed


def shapes_of(pods: Sequence[Job]) -> tuple[tuple[Shape, int], ...]:
    """FGD's target workload of a pod list (the most frequent shapes, 95% coverage)."""
    return target_workload(job_shape(p) for p in pods)
