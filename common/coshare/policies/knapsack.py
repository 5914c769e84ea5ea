"""The ``knapsack`` policy: the paper's MCCK (sections IV-B and IV-C).

Each device is a 0-1 knapsack whose capacity is its *free* device memory; a job's value is
``v = 1 - (t/T)^2`` (``t`` its declared threads, ``T`` the device's hardware threads), so the
optimum packs many jobs with few threads. Devices are filled one after another (greedy over
the cluster, Fig. 4); a device that already runs jobs is refilled with what it has left.

What the paper leaves open, decided the way an admin would want (docs/policy-knapsack.md):

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coshare.model import Job, Plan, Snapshot, ThreadMode, Unplaced
from coshare.policies.aging import place_aged, split_aged
from coshare.policies.base import (
    ClusterState,
    finish,
    needs_of,
    priority_key,
    shape_of,
    unique_rows,
)
from coshare.policies.knapsack_dp import Ints, SolveKey, solve_within
from coshare.policies.waiting import explain_waiting, never_fits

#: Job values are ``1 - (t/T)^2`` quantized to this many steps (integers keep the table exact).
VALUE_STEPS = 10_000

#: At most this many memory cells per device: the grid grows with the largest device (the
#: default 64 MiB grid stays exact up to 128 GiB devices).
MAX_MEMORY_CELLS = 2048
#: At most this many rows x cells per device table (time and bytes; see knapsack_dp).
MAX_DP_CELLS = 1 << 22
#: A cycle whose job types x devices exceed this, with fewer than ``BUCKET_FROM_COPIES`` jobs
#: per type on average, rounds job sizes to ``BUCKET_BITS`` leading bits (see _Pool), and
#: keeps each table within ``BUCKETED_DP_CELLS``.
MAX_EXACT_WORK = 2_000_000
BUCKET_FROM_COPIES = 4
BUCKET_BITS = 4
BUCKETED_DP_CELLS = 1 << 18
#: The sweep tests which left-over jobs still fit anywhere (with at least SWEEP_TEST_FROM
#: of them) again after this many misses.
SWEEP_MISSES = 512
SWEEP_TEST_FROM = 64

TypeKey = tuple[int, int, int, int]  # (memory cells, threads, host cpu_milli, host memory_mib)
ClassKey = tuple[int, int, int]  # (threads, host cpu_milli, host memory_mib)
DeviceKey = tuple[int, int, int, int, int]  # (cells, thread cells, T, cpu budget, mem budget)


@dataclass(frozen=True)
class TablePolicy:
    """The options of the policies that solve knapsack tables (``knapsack``, ``sharepack``):
    threads, aging and reservations, and what a table may cost (module docstring)."""

    threads: ThreadMode = "strict"
    memory_grid_mib: int = 64
    max_thread_cells: int = 64
    age_limit_s: float | None = 3600.0
    max_reserved_devices: int = 8
    max_memory_cells: int = MAX_MEMORY_CELLS
    max_dp_cells: int = MAX_DP_CELLS
    max_exact_work: int = MAX_EXACT_WORK
    priority_band: float = 0.0

    def begin(
        self, snapshot: Snapshot
    ) -> tuple[ClusterState, dict[str, Unplaced], list[Job], npt.NDArray[np.bool_]]:
        """A plan's start: the ledger, the jobs no node could ever hold (with why), the rest
        in scheduler order, and no device reserved yet."""
        state = ClusterState(snapshot, strict_threads=self.threads == "strict")
        unplaced = never_fits(snapshot, snapshot.pending)
        jobs = sorted((j for j in snapshot.pending if j.id not in unplaced), key=priority_key)
        return state, unplaced, jobs, np.zeros(state.device_count, dtype=np.bool_)


@dataclass(frozen=True)
class KnapsackPolicy(TablePolicy):
    """Per-device 0-1 knapsack, greedy over the cluster (MCCK)."""

    name: str = "knapsack"

    def plan(self, snapshot: Snapshot) -> Plan:
        """Place aged jobs, multi-device jobs, then fill devices by knapsack, then CPU jobs."""
        state, unplaced, jobs, reserved = self.begin(snapshot)

        aged, rest = split_aged(snapshot, jobs, self.age_limit_s)

        def best_fit(job: Job) -> bool:
            return state.place_best_fit(job, state.device_ok(job) & ~reserved)

        reasons, waiting = place_aged(
            state, snapshot, aged, best_fit, reserved, self.age_limit_s, self.max_reserved_devices
        )
        unplaced.update(reasons)

        for job in rest:
            if (
                job.needs_device
                and job.device_count > 1
                and not state.place_best_fit(job, state.device_ok(job) & ~reserved)
            ):
                waiting.append(job)

        singles = [j for j in rest if j.needs_device and j.device_count == 1]
        left, notes = fill_by_band(self, state, reserved, singles)
        waiting.extend(left)

        waiting.extend(j for j in rest if not j.needs_device and not state.place_host_job(j))
        unplaced.update(explain_waiting(state, waiting, exclude=reserved))
        return finish(self.name, snapshot, state, unplaced, notes)


#: Priority bands filled one after another at most; the lower ones share the last band.
MAX_PRIORITY_BANDS = 16


def priority_bands(jobs: list[Job], width: float) -> list[list[Job]]:
    """``jobs`` (in scheduler order) in bands of ``width`` priority units, the highest band
    first, each in scheduler order: ``floor(priority / width)`` names a job's band. ``width``
    0 (or no jobs): one band. Beyond :data:`MAX_PRIORITY_BANDS` the lowest bands are one."""
    if width <= 0 or not jobs:
        return [jobs]
    by_band: dict[int, list[Job]] = {}
    for job in jobs:
        by_band.setdefault(math.floor(job.priority / width), []).append(job)
    keys = sorted(by_band, reverse=True)
    bands = [by_band[k] for k in keys[: MAX_PRIORITY_BANDS - 1]]
    lowest = [j for k in keys[MAX_PRIORITY_BANDS - 1 :] for j in by_band[k]]
    return [*bands, sorted(lowest, key=priority_key)] if lowest else bands


def fill_by_band(
    policy: TablePolicy, state: ClusterState, reserved: np.ndarray, jobs: list[Job]
) -> tuple[list[Job], list[str]]:
    """One-device jobs onto devices by knapsack, one priority band after another
    (``policy.priority_band``): within a band the value rule chooses; a band's left-overs are
    placed where they still fit before the next band is offered any room. Returns the jobs
    left waiting (in scheduler order) and the fills' notes."""
    waiting: list[Job] = []
    notes: list[str] = []
    for band in priority_bands(jobs, policy.priority_band):
        filler = _Filler(policy, state, reserved, band)
        left = filler.run()  # in scheduler order
        notes += [n for n in filler.notes if n not in notes]
        waiting += _sweep(state, left, reserved)
    return waiting, notes


def _sweep(state: ClusterState, jobs: list[Job], reserved: np.ndarray) -> list[Job]:
    """Best fit, in scheduler order, of the single-device jobs the knapsacks left over.

    A knapsack solved alone never leaves out a job that still fits (every job has a positive
    value), but the host share a device gets while its node's other devices are open can
    trim one that the node, once the others are filled, still holds. No job that fits what
    the plan leaves waits. Returns the jobs that still do not fit.
    """
    failed: set[object] = set()
    waiting: list[Job] = []
    need = needs_of(jobs)
    # resources only shrink: a job that fits nowhere now never will in this plan (the test
    # is worth its cost for many jobs only)
    # a list, not an array: read once per job, and an array's item costs ten times more
    could = (
        state.fitting_needs(need, reserved).tolist()
        if len(jobs) >= SWEEP_TEST_FROM
        else [True] * len(jobs)
    )
    misses = 0
    for i, job in enumerate(jobs):
        if not could[i]:
            waiting.append(job)
            continue
        if misses >= SWEEP_MISSES and len(jobs) - i >= SWEEP_TEST_FROM:  # it went stale
            could[i:] = state.fitting_needs(need[i:], reserved).tolist()
            misses = 0
        shape = shape_of(job)
        if (
            not could[i]
            or shape in failed
            or state.beyond_free(job)
            or not state.place_best_fit(job, state.device_ok(job) & ~reserved)
        ):
            failed.add(shape)
            waiting.append(job)
            misses += bool(could[i])
    return waiting


def grid_note(
    configured: int, grid: int, max_cells: int, thread_cells: int, state: ClusterState, types: int
) -> str:
    """What the configured memory step would have cost, and what the tables use instead."""
    largest = int(state.dev_total_mem.max(initial=0))
    cells = -(-largest // max(configured, 1)) + 1
    table = cells * (thread_cells + 1) * (max(types, 1) + 8)  # a bool per row and cell + best
    return (
        f"knapsack.memory_grid_mib {configured} would give {cells - 1} memory cells on the "
        f"{largest} MiB devices, a table of about {_size(table)} for the {types} job types of "
        f"this cycle; the tables use {grid} MiB steps instead (knapsack.max_memory_cells "
        f"{max_cells})"
    )


def _size(n_bytes: int) -> str:
    """Bytes for people: 93.2 GiB, 12.0 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def tables_affordable(types: int, jobs: int, devices: int, max_work: int = MAX_EXACT_WORK) -> bool:
    """Whether a cycle can afford a table per device over exact job types: the types times
    the devices stay within ``max_work``, or types hold ``BUCKET_FROM_COPIES`` jobs on
    average (devices in the same state then share solves)."""
    return types * devices <= max_work or jobs >= BUCKET_FROM_COPIES * types


def job_types(jobs: Iterable[Job], grid: int) -> int:
    """How many exact types (memory cells, threads, host cores, host memory) ``jobs`` form."""
    return len(
        {
            (
                -(-j.device_memory_mib // grid),
                j.device_threads,
                j.total_cpu_milli,
                j.total_memory_mib,
            )
            for j in jobs
        }
    )


def types_affordable(
    jobs: Sequence[Job], grid: int, devices: int, max_work: int = MAX_EXACT_WORK
) -> bool:
    """:func:`tables_affordable` for the exact types of ``jobs`` (:func:`job_types`),
    counted only until the answer is known: that holds while the types are at most
    ``max_work // devices`` or ``len(jobs) // BUCKET_FROM_COPIES``, and 100,000 jobs of
    nearly as many types pass the larger bound within a quarter of them."""
    limit = max(max_work // devices if devices > 0 else len(jobs), len(jobs) // BUCKET_FROM_COPIES)
    if len(jobs) <= limit:
        return True
    seen: set[TypeKey] = set()
    step = 4096
    for start in range(0, len(jobs), step):
        seen.update(
            (
                -(-j.device_memory_mib // grid),
                j.device_threads,
                j.total_cpu_milli,
                j.total_memory_mib,
            )
            for j in jobs[start : start + step]
        )
        if len(seen) > limit:
            return False
    return True


def memory_grid(grid_mib: int, max_cells: int, state: ClusterState) -> int:
    """The memory step of the cycle's tables: the configured one, or coarser where the largest
    device would otherwise have more than ``max_cells`` cells."""
    largest = int(state.dev_total_mem.max(initial=0))
    return max(grid_mib, -(-largest // max(max_cells, 1)), 1)


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


def _buckets(values: Ints, bits: int) -> Ints:
    """``values`` rounded up to keep their ``bits`` leading binary digits (at most
    ``1 / 2**(bits-1)`` more): 1..2**bits stay, then 2**(bits-1) steps per doubling."""
    drop = np.maximum(np.frexp(values.astype(np.float64))[1] - bits, 0)
    out: Ints = -(-values >> drop) << drop
    return out


class _Pool:
    """The single-device jobs still to place, grouped into types, with numpy arrays over the
    types so that choosing what to offer a device is a few vector operations.

    Exact types have equal memory cells, threads, host cores and host memory. With
    ``bucket_bits`` (a cycle with too many distinct jobs for a table per device), a type is
    jobs whose memory cells and threads round up (:func:`bucket`) to the same values, and the
    table sees those rounded values: jobs then share types, devices in the same state share a
    solve again, and a job is never given less than it declared. Host needs leave the type:
    its cores and memory are the least of its jobs (what the table offers), and a device takes
    the first of a type's jobs, in scheduler order, whose host needs its share still holds.
    """

    def __init__(self, jobs: list[Job], grid: int, bucket_bits: int | None = None) -> None:
        self.bucketed = bucket_bits is not None
        self.jobs = jobs  # in scheduler order: a job's rank is its index
        need = needs_of(jobs)
        cells = np.maximum(-(-need[:, 0] // grid), 1)
        table = np.stack([cells, need[:, 1], need[:, 2], need[:, 3]], axis=1)
        if bucket_bits is not None:
            table[:, 0], table[:, 1] = (
                _buckets(table[:, 0], bucket_bits),
                _buckets(table[:, 1], bucket_bits),
            )
            table[:, 2:] = 0
        keys, _, inverse = unique_rows(table)
        members = np.argsort(inverse, kind="stable")  # by type, each in scheduler order
        sizes = np.bincount(inverse, minlength=len(keys)).astype(np.int64)
        self.start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.rank = members.astype(np.int64)
        # each type's jobs (their ranks), first in scheduler order first
        parts = np.split(members, self.start[1:]) if len(keys) else []
        self.queues: list[deque[int]] = [deque(part.tolist()) for part in parts]
        self.taken = np.zeros(len(jobs), dtype=np.bool_)
        self.waiting = len(jobs)  # jobs not taken yet
        self.keys: list[TypeKey] = [(a, b, c, d) for a, b, c, d in keys.tolist()]
        self.cells, self.threads = keys[:, 0].copy(), keys[:, 1].copy()
        # host needs of a type: the least of its jobs (exact types: all the same)
        self.cpu = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
        self.mem = self.cpu.copy()
        np.minimum.at(self.cpu, inverse, need[:, 2])
        np.minimum.at(self.mem, inverse, need[:, 3])
        self.size = sizes
        self.left = sizes.copy()  # jobs of each type not placed yet
        _, _, self.cls = unique_rows(np.stack([self.threads, self.cpu, self.mem], axis=1))
        self.order = np.lexsort((self.cells, self.cls))  # by class, memory cells ascending

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, k: int, budget_cpu: int, budget_mem: int) -> Job | None:
        """The next job of type ``k`` (the first in scheduler order whose host needs fit the
        budget: exact types all have the same), removed from the pool; ``None`` if none fits."""
        queue = self.queues[k]
        for i, rank in enumerate(queue):
            job = self.jobs[rank]
            if job.total_cpu_milli <= budget_cpu and job.total_memory_mib <= budget_mem:
                del queue[i]
                self.left[k] -= 1
                self.waiting -= 1
                self.taken[rank] = True
                return job
            if not self.bucketed:
                break
        return None

    def remaining(self) -> list[Job]:
        """The jobs not taken, in scheduler order."""
        return [self.jobs[r] for r in np.flatnonzero(~self.taken).tolist()]

    def offer(
        self,
        capacity: int,
        budget_cpu: int,
        budget_mem: int,
        threads: int,
        thread_cap: int | None,
        thread_grid: int,
        used: Ints,
    ) -> Ints:
        """The types worth offering to a device's table, in the scheduler order of the job
        each would give first (``used``: copies of each already chosen for the device).

        Within a class (equal threads and host needs, hence equal value) a larger job never
        beats a smaller one, so only the smallest types are offered, until their copies
        could fill the device on their own.
        """
        left = self.left - used
        ok = (left > 0) & (self.threads <= threads) & (self.cpu <= budget_cpu)
        ok &= (self.mem <= budget_mem) & (self.cells <= capacity)
        idx: Ints = self.order[ok[self.order]]
        if len(idx) == 0:
            return idx
        cls = self.cls[idx]
        new = np.r_[True, cls[1:] != cls[:-1]]
        starts = np.flatnonzero(new)
        segment = np.cumsum(new) - 1
        head = idx[starts]  # the smallest type of each class
        most = capacity // self.cells[head]
        units = -(-self.threads[head] // thread_grid)
        if thread_cap is not None:
            most = np.where(units > 0, np.minimum(most, thread_cap // np.maximum(units, 1)), most)
        cpu, mem = self.cpu[head], self.mem[head]
        most = np.where(cpu > 0, np.minimum(most, budget_cpu // np.maximum(cpu, 1)), most)
        most = np.where(mem > 0, np.minimum(most, budget_mem // np.maximum(mem, 1)), most)
        copies = left[idx]
        before = np.cumsum(copies) - copies
        before -= before[starts][segment]  # copies of smaller types in the same class
        offered = idx[before < most[segment]]
        heads = self.rank[self.start[offered] + self.size[offered] - left[offered]]
        out: Ints = offered[np.argsort(heads, kind="stable")]
        return out


class _Filler:
    """Fills devices one after another by knapsack; identical devices share a solve."""

    def __init__(
        self, policy: TablePolicy, state: ClusterState, reserved: np.ndarray, jobs: list[Job]
    ) -> None:
        self.state = state
        self.notes: list[str] = []
        self.grid = memory_grid(policy.memory_grid_mib, policy.max_memory_cells, state)
        self.max_cells = policy.max_thread_cells
        self.max_dp_cells = policy.max_dp_cells
        self.thread_grid = _thread_grid(state, jobs)
        self.pool = _Pool(jobs, self.grid)
        if jobs and self.grid > policy.memory_grid_mib:
            self.notes.append(
                grid_note(
                    policy.memory_grid_mib,
                    self.grid,
                    policy.max_memory_cells,
                    policy.max_thread_cells,
                    state,
                    job_types(jobs, policy.memory_grid_mib),
                )
            )
        devices = int((~reserved).sum())
        if not tables_affordable(len(self.pool), len(jobs), devices, policy.max_exact_work):
            self.pool = _Pool(jobs, self.grid, BUCKET_BITS)
            self.max_dp_cells = min(self.max_dp_cells, BUCKETED_DP_CELLS)
        self._values_on: dict[int, Ints] = {}
        self._solved: dict[SolveKey, tuple[Ints, int]] = {}
        self.key_of: dict[int, DeviceKey] = {}
        self.moves: list[int] = [0] * state.device_count  # key changes of each device
        self.groups: dict[DeviceKey, set[int]] = {}
        self.heap: list[DeviceKey] = []
        # A device whose free memory is below the smallest job's would be popped first (its
        # key's memory cells are smaller than any other's), find nothing and be closed; not
        # opening it at all gives the same plan and saves the work on large clusters.
        smallest = int(self.pool.cells.min()) if len(self.pool) else None
        opened = ~reserved & (state.dev_free_mem >= self.grid)
        if smallest is not None:
            opened &= state.dev_free_mem // self.grid >= smallest
        self.open_on_node = np.bincount(state.dev_node[opened], minlength=len(state.nodes)).astype(
            np.int64
        )
        self._open_all(np.flatnonzero(opened))

    def _open_all(self, devices: np.ndarray) -> None:
        """Key and group the open devices at once (:meth:`_device_key`, vectorized)."""
        s = self.state
        nodes = s.dev_node[devices]
        share = np.maximum(self.open_on_node[nodes], 1)
        threads = s.dev_threads[devices]
        if s.strict:
            grids = np.where(
                threads // self.thread_grid <= self.max_cells,
                self.thread_grid,
                -(-threads // self.max_cells),
            )
            units = np.maximum(s.dev_free_thr[devices], 0) // grids
        else:
            units = np.full(len(devices), -1, dtype=np.int64)
        keys = zip(
            (np.maximum(s.dev_free_mem[devices], 0) // self.grid).tolist(),
            units.tolist(),
            threads.tolist(),
            self._budget(np.maximum(s.node_free_cpu[nodes], 0) // share).tolist(),
            self._budget(np.maximum(s.node_free_mem[nodes], 0) // share).tolist(),
            strict=True,
        )
        for d, key in zip(devices.tolist(), keys, strict=True):
            self.key_of[d] = key
            self.groups.setdefault(key, set()).add(d)
        self.heap = list(self.groups)
        heapq.heapify(self.heap)

    def _type_values(self, threads: int) -> Ints:
        """:func:`_values` of every pool type on a device of ``threads`` hardware threads,
        worked out once per thread count (the pool's types do not change)."""
        values = self._values_on.get(threads)
        if values is None:
            values = self._values_on[threads] = _values(self.pool.threads, threads)
        return values

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
            self._budget_of(max(int(s.node_free_cpu[n]), 0) // share),
            self._budget_of(max(int(s.node_free_mem[n]), 0) // share),
        )

    def _budget_of(self, value: int) -> int:
        """:meth:`_budget` of one value."""
        if not self.pool.bucketed:
            return value
        drop = max(value.bit_length() - BUCKET_BITS, 0)
        return (value >> drop) << drop

    def _budget(self, values: Ints) -> Ints:
        """Host budgets as device keys hold them: exact, or (bucketed pool) rounded down to
        their leading bits, so that devices on nodes in nearly the same state share a solve."""
        if not self.pool.bucketed:
            return values
        drop = np.maximum(np.frexp(values.astype(np.float64))[1] - BUCKET_BITS, 0)
        out: Ints = (values >> drop) << drop
        return out

    def _rekey(self, d: int) -> None:
        old = self.key_of[d]
        new = self._device_key(d)
        if new == old:
            return
        if old in self.groups:
            self.groups[old].discard(d)
        self.key_of[d] = new
        self.moves[d] += 1
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
        while self.heap and self.pool.waiting:
            key = heapq.heappop(self.heap)
            members = self.groups.pop(key, None)
            if not members:
                continue
            # The group's devices in order, each with its count of key changes: one whose
            # key changes (its node took jobs) leaves the group for good, even if a later
            # change brings the same key back (it is then a member of the group anew). The
            # ones that left are skipped as the walk reaches them, not filtered out of the
            # whole list after every batch (a group of 10,000 devices and 5,000 batches).
            devices = [(d, self.moves[d]) for d in sorted(members) if self.key_of.get(d) == key]
            at = 0
            while True:
                while at < len(devices) and not self._kept(devices[at], key):
                    at += 1
                if at == len(devices):
                    break
                choice = self._choose(key, devices[at][0])
                if not choice:
                    self._close_group(key, [d for d, n in devices[at:] if self._kept((d, n), key)])
                    break
                k = min(int(self.pool.left[t]) // c for t, c in choice.items())
                batch: list[int] = []
                while at < len(devices) and len(batch) < k:
                    if self._kept(devices[at], key):
                        batch.append(devices[at][0])
                    at += 1
                touched = set()
                for d in batch:
                    node = int(self.state.dev_node[d])
                    cpu, mem = key[3], key[4]
                    for t, copies in choice.items():
                        for _ in range(copies):
                            job = self.pool.take(t, cpu, mem)
                            if job is None:
                                break
                            self.state.place(job, node, [d])
                            cpu -= job.total_cpu_milli
                            mem -= job.total_memory_mib
                    self._close(d)
                    touched.add(node)
                self._rekey_nodes(touched)
        return self.pool.remaining()

    def _kept(self, entry: tuple[int, int], key: DeviceKey) -> bool:
        """Whether a device listed with ``moves`` key changes is still in group ``key``."""
        d, moves = entry
        return self.moves[d] == moves and self.key_of.get(d) == key

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

    def _choose(self, key: DeviceKey, device: int) -> dict[int, int]:
        """The job mix for a device in state ``key`` (copies per pool type): the knapsack
        optimum, trimmed to the device's share of host resources, leftover refilled (at most
        three rounds)."""
        cells, units, threads, budget_cpu, budget_mem = key
        thread_cap = units if units >= 0 else None
        grid = self._grid_of(device)
        pool = self.pool
        used = np.zeros(len(pool), dtype=np.int64)
        choice: dict[int, int] = {}
        for _ in range(3):
            offered = pool.offer(cells, budget_cpu, budget_mem, threads, thread_cap, grid, used)
            if len(offered) == 0:
                break
            t = pool.threads[offered]
            per_count = cells + 1  # value dominates, job count breaks ties
            values = self._type_values(threads)[offered] * per_count + 1
            counts, _ = solve_within(
                pool.cells[offered],
                -(-t // grid),
                values,
                pool.left[offered] - used[offered],
                cells,
                thread_cap,
                self.max_dp_cells,
                self._solved,
            )
            hit = np.flatnonzero(counts)
            if len(hit) == 0:
                break
            picked = {int(offered[i]): int(counts[i]) for i in hit}
            value_of = {int(offered[i]): int(values[i]) for i in hit}
            trimmed = _trim(picked, value_of, pool, budget_cpu, budget_mem)
            for k, c in trimmed.items():
                choice[k] = choice.get(k, 0) + c
                used[k] += c
            if trimmed == picked:
                break
            cells -= sum(int(pool.cells[k]) * c for k, c in trimmed.items())
            if thread_cap is not None:
                thread_cap -= sum(-(-int(pool.threads[k]) // grid) * c for k, c in trimmed.items())
            budget_cpu -= sum(int(pool.cpu[k]) * c for k, c in trimmed.items())
            budget_mem -= sum(int(pool.mem[k]) * c for k, c in trimmed.items())
            if cells <= 0:
                break
        return choice


def _values(threads: Ints, device_threads: int) -> Ints:
    """The paper's value ``1 - (t/T)^2`` of each thread count, in :data:`VALUE_STEPS`
    (computed per distinct count with Python floats, so it is the same on every platform)."""
    distinct, inverse = np.unique(threads, return_inverse=True)
    table = np.array(
        [int(VALUE_STEPS * (1.0 - (t / device_threads) ** 2)) for t in distinct.tolist()],
        dtype=np.int64,
    )
    out: Ints = table[inverse.reshape(-1)]
    return out


def _trim(
    picked: dict[int, int], value_of: dict[int, int], pool: _Pool, budget_cpu: int, budget_mem: int
) -> dict[int, int]:
    """Drop jobs, least valuable and hungriest first, until the host share holds them."""
    out = dict(picked)
    order = sorted(out, key=lambda k: (value_of[k], -int(pool.cpu[k]), -int(pool.mem[k])))
    cpu = sum(int(pool.cpu[k]) * c for k, c in out.items())
    mem = sum(int(pool.mem[k]) * c for k, c in out.items())
    for k in order:
        while out[k] and (cpu > budget_cpu or mem > budget_mem):
            out[k] -= 1
            cpu -= int(pool.cpu[k])
            mem -= int(pool.mem[k])
    return {k: c for k, c in out.items() if c}
