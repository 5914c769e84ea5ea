"""Invariants of every policy on random snapshots (hypothesis, 1000 cases per test).

No device memory, device threads (strict mode), host cores or host memory is exceeded by
running + planned jobs, and every pending job appears exactly once. The oracle is
coshare.verify.check_plan, itself tested in test_verify.py, plus direct recounts here.
"""

from __future__ import annotations

from collections import Counter

import pytest
from coshare.model import Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.verify import check_plan
from hypothesis import given

from tests.strategies import snapshots

CASES = [
    ("exclusive", "strict"),
    ("random", "strict"),
    ("random", "soft"),
    ("knapsack", "strict"),
    ("knapsack", "soft"),
    ("bestfit", "strict"),
    ("bestfit", "soft"),
    ("fgd", "strict"),
    ("fgd", "soft"),
]


@pytest.mark.parametrize(("name", "threads"), CASES)
@given(snapshot=snapshots())
def test_plans_never_oversubscribe_and_account_for_every_job(
    name: str, threads: str, snapshot: Snapshot
) -> None:
    policy = make_policy(name, PolicyOptions(threads=threads, seed=3, memory_grid_mib=64))  # type: ignore[arg-type]
    plan = policy.plan(snapshot)
    assert check_plan(snapshot, plan, strict_threads=threads == "strict") == []
    listed = Counter([u.job for u in plan.unplaced] + sorted(plan.placed_jobs))
    assert sorted(listed) == sorted(j.id for j in snapshot.pending)
    assert set(listed.values()) <= {1}
    for u in plan.unplaced:
        assert u.reason.strip()


@given(snapshot=snapshots())
def test_policies_are_deterministic(snapshot: Snapshot) -> None:
    for name in ("exclusive", "random", "knapsack", "bestfit", "fgd"):
        options = PolicyOptions(seed=11)
        assert make_policy(name, options).plan(snapshot) == make_policy(name, options).plan(
            snapshot
        )
