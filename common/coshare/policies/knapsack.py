"""The ``knapsack`` policy: the paper's MCCK (sections IV-B and IV-C).

Each device is a 0-1 knapsack whose capacity is its *free* device memory; a job's value is
``v = 1 - (t/T)^2`` (``t`` its declared threads, ``T`` the device's hardware threads), so the
optimum packs many jobs with few threads. Devices are filled one after another (greedy over
the cluster, Fig. 4); a device that already runs jobs is refilled with what it has left.

What the paper leaves open, decided the way an admin would want (README, "Knapsack policy"):

- **Threads.** ``strict`` (default): the declared threads on a device never exceed ``T``; the
  table gets a thread dimension. The paper's "thread overflow = value 0" picks the same set
  whenever some set within the limit has value. ``soft``: memory alone bounds sharing and the
  node's offload gate serializes offloads; values still prefer jobs with fewer threads.
- **Ties.** Among sets of equal value the one with more jobs wins, then the one whose jobs
  come first in scheduler order (priority, then age, then id). Deterministic.
- **Priority and age.** The knapsack maximizes concurrency, not priority, so a job with many
  threads or much memory could wait forever behind small ones. A job pending longer than
  ``age_limit_s`` is placed *before* the knapsack, best fit, in scheduler order; if it fits
  nowhere now, one device that could hold it is held back (no new jobs) so it drains, at most
  ``max_reserved_devices`` per cycle. Within equal-size jobs, higher priority goes first.
- **Devices of different sizes.** Devices are filled smallest free memory first, so the large
  devices stay open for what fits only there.
- **Host resources.** Jobs also need host cores and memory on the device's node. A node's free
  cores and memory are shared out evenly among its devices being filled, so one device's jobs
  cannot starve its neighbours; a chosen set that exceeds that share is trimmed (fewest-value
  jobs first) and the leftover refilled. A device that finds nothing gives its share back to
  its node's open devices, and the jobs left over at the end are placed best fit where they
  still fit, so no job that fits what the plan leaves is kept waiting.
- **Multi-device jobs** (``device_count > 1``) are placed before the knapsack, best fit on one
  node, in scheduler order; **CPU-only jobs** after it, first fit.
- **Jobs that fit nowhere** are reported with the limit they exceed; jobs that fit the cluster
  but not this cycle's free resources with what they wait for.

Exactness: memory is rounded *up* to ``memory_grid_mib`` per job and free memory *down*
(threads likewise to a thread grid), so the plan never under-reserves. Speed: devices with the
same free state share one solve while the pool holds enough jobs for its answer, and among jobs
with equal threads and host needs only the smallest are offered to the table (a bigger one
never beats a smaller one of equal value). Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from coshare.model import Job, Plan, Snapshot, ThreadMode
from coshare.policies.aging import reserve, split_aged
from coshare.policies.base import (
    ClusterState,
    explain_waiting,
    finish,
    never_fits,
    priority_key,
    shape_of,
)
from coshare.policies.knapsack_dp import ItemType, solve

#: Job values are ``1 - (t/T)^2`` quantized to this many steps (integers keep the table exact).
VALUE_STEPS = 10_000

TypeKey = tuple[int, int, int, int]  # (memory cells, threads, host cpu_milli, host memory_mib)
ClassKey = tuple[int, int, int]  # (threads, host cpu_milli, host memory_mib)
DeviceKey = tuple[int, int, int, int, int]  # (cells, thread cells, T, cpu budget, mem budget)


@dataclass(frozen=True)
class KnapsackPolicy:
    """Per-device 0-1 knapsack, greedy over the cluster (MCCK)."""

    threads: ThreadMode = "strict"
    memory_grid_mib: int = 64
    max_thread_cells: int = 64
    age_limit_s: float | None = 3600.0
    max_reserved_devices: int = 8
    name: str = "knapsack"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place aged jobs, multi-device jobs, then fill devices by knapsack, then CPU jobs."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        unplaced = never_fits(snapshot, snapshot.pending)
        jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        reserved = np.zeros(state.device_count, dtype=np.bool_)
        waiting: list[Job] = []

        aged, rest = split_aged(snapshot, jobs, self.age_limit_s)
        for job in aged:
            if not state.place_best_fit(job, state.device_ok(job) & ~reserved):
                reason = reserve(state, job, reserved, snapshot.now_s, self.age_limit_s,
                                 self.max_reserved_devices)  # fmt: skip
                if reason is not None:
                    unplaced[job.id] = reason
                else:
                    waiting.append(job)

        for job in rest:
            if (
                job.needs_device
                and job.device_count > 1
                and not state.place_best_fit(job, state.device_ok(job) & ~reserved)
            ):
                waiting.append(job)

        singles = [j for j in rest if j.needs_device and j.device_count == 1]
        left = sorted(_Filler(self, state, reserved, singles).run(), key=priority_key)
        waiting.extend(_sweep(state, left, reserved))

        waiting.extend(j for j in rest if not j.needs_device and not state.place_host_job(j))
        unplaced.update(explain_waiting(state, waiting, exclude=reserved))
        return finish(self.name, snapshot, state, unplaced)


def _sweep(state: ClusterState, jobs: list[Job], reserved: np.ndarray) -> list[Job]:
    """Best fit, in scheduler order, of the single-device jobs the knapsacks left over.

    A knapsack solved alone never leaves out a job that still fits (every job has a positive
    value), but the host share a device gets while its node's other devices are open can
    trim one that the node, once the others are filled, still holds. No job that fits what
    the plan leaves waits. Returns the jobs that still do not fit.
    """
    failed: set[object] = set()
    waiting: list[Job] = []
    for job in jobs:
        shape = shape_of(job)
        if shape in failed or not state.place_best_fit(job, state.device_ok(job) & ~reserved):
            failed.add(shape)
            waiting.append(job)
    return waiting


def _thread_grid(state: ClusterState, jobs: Iterable[Job]) -> int:
    """The common step of every thread count in play (so thread cells lose nothing)."""
    g = 0
    for value in state.dev_threads.tolist():
        g = math.gcd(g, value)
    for value in set(state.dev_free_thr.tolist()):
        g = math.gcd(g, max(value, 0))
    for job in jobs:
        g = math.gcd(g, job.device_threads)
    return max(g, 1)


@dataclass
class _Pool:
    """The single-device jobs still to place, grouped by type and by class."""

    types: dict[TypeKey, deque[Job]] = field(default_factory=dict)
    classes: dict[ClassKey, list[TypeKey]] = field(default_factory=dict)

    def add(self, key: TypeKey, job: Job) -> None:
        if key not in self.types:
            self.types[key] = deque()
            self.classes.setdefault((key[1], key[2], key[3]), []).append(key)
        self.types[key].append(job)

    def sort(self) -> None:
        for members in self.classes.values():
            members.sort()  # memory cells ascending within a class

    def left(self, key: TypeKey, used: dict[TypeKey, int]) -> int:
        """Jobs of a type not yet placed nor already chosen for the device at hand."""
        return len(self.types[key]) - used.get(key, 0)

    def offer(self, capacity: int, budget_cpu: int, budget_mem: int, threads: int,
              thread_cap: int | None, thread_grid: int, used: dict[TypeKey, int]
              ) -> list[TypeKey]:  # fmt: skip
        """The types worth offering to a device's table.

        Within a class (equal threads and host needs, hence equal value) a larger job never
        beats a smaller one, so only the smallest types are offered, until their copies
        could fill the device on their own.
        """
        offered: list[TypeKey] = []
        for (t, cpu, mem), members in self.classes.items():
            if t > threads or cpu > budget_cpu or mem > budget_mem:
                continue
            members[:] = [k for k in members if self.types[k]]
            available = [k for k in members if self.left(k, used) > 0]
            if not available or available[0][0] > capacity:
                continue
            most = capacity // available[0][0]
            units = -(-t // thread_grid)
            if thread_cap is not None and units > 0:
                most = min(most, thread_cap // units)
            if cpu > 0:
                most = min(most, budget_cpu // cpu)
            if mem > 0:
                most = min(most, budget_mem // mem)
            taken = 0
            for key in available:
                if taken >= most or key[0] > capacity:
                    break
                offered.append(key)
                taken += self.left(key, used)
        return offered


class _Filler:
    """Fills devices one after another by knapsack; identical devices share a solve."""

    def __init__(
        self, policy: KnapsackPolicy, state: ClusterState, reserved: np.ndarray, jobs: list[Job]
    ) -> None:
        self.state = state
        self.grid = policy.memory_grid_mib
        self.max_cells = policy.max_thread_cells
        self.thread_grid = _thread_grid(state, jobs)
        self.pool = _Pool()
        for job in jobs:  # already in scheduler order, so each type's queue is too
            cells = max(1, -(-job.device_memory_mib // self.grid))
            self.pool.add(
                (cells, job.device_threads, job.total_cpu_milli, job.total_memory_mib), job
            )
        self.pool.sort()
        self.key_of: dict[int, DeviceKey] = {}
        self.groups: dict[DeviceKey, set[int]] = {}
        self.heap: list[DeviceKey] = []
        # A device whose free memory is below the smallest job's would be popped first (its
        # key's memory cells are smaller than any other's), find nothing and be closed; not
        # opening it at all gives the same plan and saves the work on large clusters.
        smallest = min((key[0] for key in self.pool.types), default=None)
        opened = ~reserved & (state.dev_free_mem >= self.grid)
        if smallest is not None:
            opened &= state.dev_free_mem // self.grid >= smallest
        self.open_on_node = np.bincount(
            state.dev_node[opened], minlength=len(state.nodes)
        ).astype(np.int64)
        self._open_all(np.flatnonzero(opened))

    def _open_all(self, devices: np.ndarray) -> None:
        """Key and group the open devices at once (:meth:`_device_key`, vectorized)."""
        s = self.state
        nodes = s.dev_node[devices]
        share = np.maximum(self.open_on_node[nodes], 1)
        threads = s.dev_threads[devices]
        if s.strict:
            grids = np.where(threads // self.thread_grid <= self.max_cells, self.thread_grid,
                             -(-threads // self.max_cells))  # fmt: skip
            units = np.maximum(s.dev_free_thr[devices], 0) // grids
        else:
            units = np.full(len(devices), -1, dtype=np.int64)
        keys = zip(
            (np.maximum(s.dev_free_mem[devices], 0) // self.grid).tolist(),
            units.tolist(),
            threads.tolist(),
            (np.maximum(s.node_free_cpu[nodes], 0) // share).tolist(),
            (np.maximum(s.node_free_mem[nodes], 0) // share).tolist(),
            strict=True,
        )
        for d, key in zip(devices.tolist(), keys, strict=True):
            self.key_of[d] = key
            self.groups.setdefault(key, set()).add(d)
        self.heap = list(self.groups)
        heapq.heapify(self.heap)

    def _grid_of(self, d: int) -> int:
        threads = int(self.state.dev_threads[d])
        if threads // self.thread_grid <= self.max_cells:
            return self.thread_grid
        return -(-threads // self.max_cells)

    def _device_key(self, d: int) -> DeviceKey:
        s = self.state
        n = int(s.dev_node[d])
        share = max(int(self.open_on_node[n]), 1)
        units = -1
        if s.strict:
            units = max(int(s.dev_free_thr[d]), 0) // self._grid_of(d)
        return (
            max(int(s.dev_free_mem[d]), 0) // self.grid,
            units,
            int(s.dev_threads[d]),
            max(int(s.node_free_cpu[n]), 0) // share,
            max(int(s.node_free_mem[n]), 0) // share,
        )

    def _rekey(self, d: int) -> None:
        old = self.key_of[d]
        new = self._device_key(d)
        if new == old:
            return
        if old in self.groups:
            self.groups[old].discard(d)
        self.key_of[d] = new
        if new not in self.groups or not self.groups[new]:
            self.groups[new] = set()
            heapq.heappush(self.heap, new)
        self.groups[new].add(d)

    def _rekey_nodes(self, nodes: Iterable[int]) -> None:
        for node in nodes:
            for d in self.state.node_devs[node]:
                if d in self.key_of:
                    self._rekey(d)

    def _close(self, d: int) -> None:
        del self.key_of[d]
        self.open_on_node[self.state.dev_node[d]] -= 1

    def run(self) -> list[Job]:
        """Fill every open device; returns the jobs left over."""
        while self.heap:
            key = heapq.heappop(self.heap)
            members = self.groups.pop(key, None)
            if not members:
                continue
            devices = sorted(d for d in members if self.key_of.get(d) == key)
            while devices:
                choice = self._choose(key, devices[0])
                if not choice:
                    self._close_group(key, devices)
                    break
                k = min(len(devices), *(len(self.pool.types[t]) // c for t, c in choice.items()))
                batch, devices = devices[:k], devices[k:]
                touched = set()
                for d in batch:
                    node = int(self.state.dev_node[d])
                    for t, copies in choice.items():
                        queue = self.pool.types[t]
                        for _ in range(copies):
                            self.state.place(queue.popleft(), node, [d])
                    self._close(d)
                    touched.add(node)
                self._rekey_nodes(touched)
                devices = [d for d in devices if self.key_of.get(d) == key]
        return [job for queue in self.pool.types.values() for job in queue]

    def _close_group(self, key: DeviceKey, devices: list[int]) -> None:
        """Nothing in the pool fits state ``key``; the pool only shrinks, so it never will.

        A device's host budget is its node's free resources over the node's open devices, so
        closing a device raises its open neighbours' budgets. Of a node's devices in the
        group, all but one are closed; the last is closed only if its budget stays the same
        (it was alone), otherwise it is rekeyed and tried again with the larger budget.
        """
        by_node: dict[int, list[int]] = {}
        for d in devices:
            by_node.setdefault(int(self.state.dev_node[d]), []).append(d)
        for node_devices in by_node.values():
            for d in node_devices[:-1]:
                self._close(d)
            last = node_devices[-1]
            if self._device_key(last) == key:
                self._close(last)
        self._rekey_nodes(by_node)  # their host share grows

    def _choose(self, key: DeviceKey, device: int) -> dict[TypeKey, int]:
        """The job mix for a device in state ``key``: the knapsack optimum, trimmed to the
        device's share of host resources, leftover refilled (at most three rounds)."""
        cells, units, threads, budget_cpu, budget_mem = key
        thread_cap = units if units >= 0 else None
        grid = self._grid_of(device)
        choice: dict[TypeKey, int] = {}
        for _ in range(3):
            offered = self.pool.offer(
                cells, budget_cpu, budget_mem, threads, thread_cap, grid, choice
            )
            if not offered:
                break
            offered.sort(key=lambda t: priority_key(self.pool.types[t][choice.get(t, 0)]))
            per_count = cells + 1  # value dominates, job count breaks ties
            items = [
                ItemType(
                    weight=t[0],
                    units=-(-t[1] // grid),
                    value=int(VALUE_STEPS * (1.0 - (t[1] / threads) ** 2)) * per_count + 1,
                    count=self.pool.left(t, choice),
                )
                for t in offered
            ]
            counts = solve(items, cells, thread_cap)
            picked = {t: c for t, c in zip(offered, counts, strict=True) if c}
            if not picked:
                break
            trimmed = _trim(picked, items_by_type=dict(zip(offered, items, strict=True)),
                            budget_cpu=budget_cpu, budget_mem=budget_mem)  # fmt: skip
            for t, c in trimmed.items():
                choice[t] = choice.get(t, 0) + c
            if trimmed == picked:
                break
            used_cells = sum(t[0] * c for t, c in trimmed.items())
            cells -= used_cells
            if thread_cap is not None:
                thread_cap -= sum(-(-t[1] // grid) * c for t, c in trimmed.items())
            budget_cpu -= sum(t[2] * c for t, c in trimmed.items())
            budget_mem -= sum(t[3] * c for t, c in trimmed.items())
            if cells <= 0:
                break
        return choice


def _trim(
    picked: dict[TypeKey, int], items_by_type: dict[TypeKey, ItemType], budget_cpu: int,
    budget_mem: int,
) -> dict[TypeKey, int]:  # fmt: skip
    """Drop jobs, least valuable and hungriest first, until the host share holds them."""
    out = dict(picked)
    order = sorted(out, key=lambda t: (items_by_type[t].value, -t[2], -t[3]))
    cpu = sum(t[2] * c for t, c in out.items())
    mem = sum(t[3] * c for t, c in out.items())
    for t in order:
        while out[t] and (cpu > budget_cpu or mem > budget_mem):
            out[t] -= 1
            cpu -= t[2]
            mem -= t[3]
    return {t: c for t, c in out.items() if c}
