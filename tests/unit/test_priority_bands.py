"""The knapsack's priority bands (``policy.priority_band``): within a band the value rule
chooses which jobs share a device; a higher band fills the devices before a lower band is
offered room. One band (the default) keeps the value rule across priorities."""

from __future__ import annotations

import pytest
from coshare.model import MILLI, Device, Job, Node, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies.knapsack import MAX_PRIORITY_BANDS, priority_bands


def contended(*jobs: Job) -> Snapshot:
    """One Xeon Phi (8 GiB, 240 threads) that cannot take every job: the knapsack decides."""
    node = Node("n1", 16 * MILLI, 65536, (Device("0", 8192, 240, "phi"),))
    return Snapshot(nodes=(node,), running=(), pending=jobs, now_s=0.0)


def job(name: str, threads: int, priority: int) -> Job:
    return Job(name, device_memory_mib=2000, device_threads=threads, priority=priority)


# The urgent job's 200 threads leave no room for either small one (120 each); the two small
# ones together are worth more to the value rule (1 - (t/T)^2: 0.75 each against 0.31).
URGENT, SMALL_1, SMALL_2 = job("urgent", 200, 100), job("s1", 120, 0), job("s2", 120, 0)


@pytest.mark.parametrize("policy", ["knapsack", "sharepack"])
@pytest.mark.parametrize(
    ("band", "placed"), [(0.0, {"s1", "s2"}), (1.0, {"urgent"}), (50.0, {"urgent"})]
)
def test_a_higher_band_fills_the_device_before_the_value_rule_looks_lower(
    policy: str, band: float, placed: set[str]
) -> None:
    plan = make_policy(policy, PolicyOptions(priority_band=band)).plan(
        contended(SMALL_1, URGENT, SMALL_2)
    )
    assert {a.job for a in plan.assignments} == placed
    assert {u.job for u in plan.unplaced} == {"urgent", "s1", "s2"} - placed


@pytest.mark.parametrize("policy", ["knapsack", "sharepack"])
def test_within_one_band_the_value_rule_still_chooses(policy: str) -> None:
    # 100 and 60 are one band of 1000 units: the two small jobs win, as with no bands.
    jobs = (job("s1", 120, 60), job("urgent", 200, 100), job("s2", 120, 60))
    plan = make_policy(policy, PolicyOptions(priority_band=1000.0)).plan(contended(*jobs))
    assert {a.job for a in plan.assignments} == {"s1", "s2"}


def test_bands_are_highest_first_each_in_scheduler_order_and_bounded() -> None:
    jobs = [job(f"j{p}", 60, p) for p in (5, 27, 26, 3, 14)]
    ordered = sorted(jobs, key=lambda j: -j.priority)
    assert [[j.id for j in b] for b in priority_bands(ordered, 10.0)] == [
        ["j27", "j26"],
        ["j14"],
        ["j5", "j3"],
    ]
    assert priority_bands(ordered, 0.0) == [ordered]
    many = sorted((job(f"k{p}", 60, p) for p in range(40)), key=lambda j: -j.priority)
    bands = priority_bands(many, 1.0)
    assert len(bands) == MAX_PRIORITY_BANDS
    assert [j.id for j in bands[-1]][:2] == ["k24", "k23"]  # the lowest bands are one
    assert sum(len(b) for b in bands) == 40
