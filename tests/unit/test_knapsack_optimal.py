"""The per-device knapsack is optimal: equal to a brute-force optimum on small instances.

Checked twice: on the solver alone (item types with counts, 1-D and 2-D), and through the
whole knapsack policy on one device (pool, pruning of dominated job sizes, grids, value
function), against an enumeration of every subset of jobs.
"""

from __future__ import annotations

import itertools

from coshare.model import Device, Job, Node, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.knapsack import VALUE_STEPS
from coshare.policies.knapsack_dp import ItemType, solve
from hypothesis import given
from hypothesis import strategies as st


def brute_force(items: list[ItemType], capacity: int, thread_capacity: int | None) -> int:
    best = 0
    for counts in itertools.product(*(range(item.count + 1) for item in items)):
        weight = sum(c * i.weight for c, i in zip(counts, items))
        units = sum(c * i.units for c, i in zip(counts, items))
        if weight <= capacity and (thread_capacity is None or units <= thread_capacity):
            best = max(best, sum(c * i.value for c, i in zip(counts, items)))
    return best


def item_lists(max_weight: int = 12, max_size: int = 5) -> st.SearchStrategy[list[ItemType]]:
    return st.lists(
        st.builds(
            ItemType,
            weight=st.integers(1, max_weight),
            units=st.integers(0, 5),
            value=st.integers(0, 50),
            count=st.integers(0, 3),
        ),
        max_size=max_size,
    )


item_types = item_lists()


@given(
    items=item_types, capacity=st.integers(0, 30), threads=st.one_of(st.none(), st.integers(0, 10))
)
def test_solver_matches_brute_force(
    items: list[ItemType], capacity: int, threads: int | None
) -> None:
    counts = solve(items, capacity, threads)
    assert all(0 <= c <= i.count for c, i in zip(counts, items))
    weight = sum(c * i.weight for c, i in zip(counts, items))
    units = sum(c * i.units for c, i in zip(counts, items))
    assert weight <= capacity
    if threads is not None:
        assert units <= threads
    assert sum(c * i.value for c, i in zip(counts, items)) == brute_force(items, capacity, threads)


def job_value(job: Job, threads: int) -> float:
    return int(VALUE_STEPS * (1 - (job.device_threads / threads) ** 2)) / VALUE_STEPS


@given(
    memories=st.lists(st.integers(1, 40), min_size=1, max_size=9),
    thread_choices=st.lists(st.sampled_from((10, 30, 60, 120, 240)), min_size=9, max_size=9),
    capacity=st.integers(1, 100),
    strict=st.booleans(),
)
def test_policy_packs_one_device_optimally(
    memories: list[int], thread_choices: list[int], capacity: int, strict: bool
) -> None:
    threads = 240
    node = Node("n", 64_000, 1 << 20, (Device("0", capacity, threads),))
    jobs = [
        Job(f"j{i}", device_memory_mib=m, device_threads=thread_choices[i], memory_mib=1)
        for i, m in enumerate(memories)
    ]
    options = PolicyOptions(threads="strict" if strict else "soft", memory_grid_mib=1)
    plan = make_policy("knapsack", options).plan(Snapshot((node,), (), tuple(jobs)))
    chosen = [j for j in jobs if j.id in plan.placed_jobs]
    got = sum(job_value(j, threads) for j in chosen)
    best = 0.0
    best_count = 0
    for r in range(len(jobs) + 1):
        for subset in itertools.combinations(jobs, r):
            if sum(j.device_memory_mib for j in subset) > capacity:
                continue
            if strict and sum(j.device_threads for j in subset) > threads:
                continue
            value = sum(job_value(j, threads) for j in subset)
            if value > best + 1e-9 or (abs(value - best) <= 1e-9 and len(subset) > best_count):
                best, best_count = value, len(subset)
    assert abs(got - best) <= 1e-9
    assert len(chosen) == best_count  # ties go to more jobs


def arrays(items: list[ItemType]) -> tuple[object, object, object, object]:
    import numpy as np

    return tuple(
        np.array([getattr(i, f) for i in items], dtype=np.int64).reshape(-1)
        for f in ("weight", "units", "value", "count")
    )  # type: ignore[return-value]


def value_of(items: list[ItemType], counts: list[int]) -> int:
    return sum(c * i.value for c, i in zip(counts, items))


@given(
    items=item_lists(max_size=12),
    capacity=st.integers(0, 30),
    threads=st.one_of(st.none(), st.integers(0, 10)),
)
def test_dropping_dominated_items_loses_nothing(
    items: list[ItemType], capacity: int, threads: int | None
) -> None:
    # A budget of one cell forces the dominance step; with no room to coarsen (capacity 0-1)
    # or before coarsening, the value must still be the exact optimum.
    from coshare.policies.knapsack_dp import most_items, undominated

    w, u, v, c = arrays(items)
    keep = undominated(w, u, v, c, most_items(w, u, c, capacity, threads))  # type: ignore[arg-type]
    kept = [items[i] for i in keep.tolist()]
    assert brute_force(kept, capacity, threads) == brute_force(items, capacity, threads)


@given(
    items=item_lists(max_weight=40, max_size=8),
    capacity=st.integers(0, 120),
    threads=st.one_of(st.none(), st.integers(0, 10)),
    budget=st.sampled_from((1, 64, 512, 1 << 20)),
)
def test_a_coarser_grid_keeps_its_stated_bound(
    items: list[ItemType], capacity: int, threads: int | None, budget: int
) -> None:
    # Within the budget the table is exact; beyond it the choice still fits, and is worth at
    # least the exact optimum of a device smaller by one coarse step per item it can hold.
    from coshare.policies.knapsack_dp import most_items, solve_within

    w, u, v, c = arrays(items)
    counts, factor = solve_within(w, u, v, c, capacity, threads, budget)  # type: ignore[arg-type]
    chosen = counts.tolist()
    assert all(0 <= k <= i.count for k, i in zip(chosen, items))
    assert sum(k * i.weight for k, i in zip(chosen, items)) <= capacity
    if threads is not None:
        assert sum(k * i.units for k, i in zip(chosen, items)) <= threads
    most = most_items(w, u, c, capacity, threads)  # type: ignore[arg-type]
    smaller = max(capacity - most * factor, 0)
    assert value_of(items, chosen) >= brute_force(items, smaller, threads)
    if factor == 1:
        assert value_of(items, chosen) == brute_force(items, capacity, threads)


@given(
    items=item_lists(max_weight=40, max_size=8),
    other_counts=st.lists(st.integers(0, 40), min_size=8, max_size=8),
    capacity=st.integers(0, 120),
    threads=st.one_of(st.none(), st.integers(0, 10)),
    budget=st.sampled_from((1, 64, 512, 1 << 20)),
)
def test_a_shared_table_memo_gives_each_problem_its_own_answer(
    items: list[ItemType],
    other_counts: list[int],
    capacity: int,
    threads: int | None,
    budget: int,
) -> None:
    # Two problems that differ only in how many copies there are: with one memo, in either
    # order, each gets the answer it gets alone (the memo's key keeps what the answer reads).
    import numpy as np
    from coshare.policies.knapsack_dp import solve_within

    w, u, v, c = arrays(items)
    c2 = np.array(other_counts[: len(items)], dtype=np.int64)
    alone = [solve_within(w, u, v, k, capacity, threads, budget) for k in (c, c2)]  # type: ignore[arg-type]
    for order in ((0, 1), (1, 0)):
        memo: dict = {}  # type: ignore[type-arg]
        for i in order:
            counts, factor = solve_within(w, u, v, (c, c2)[i], capacity, threads, budget, memo)  # type: ignore[arg-type]
            assert counts.tolist() == alone[i][0].tolist()
            assert factor == alone[i][1]
