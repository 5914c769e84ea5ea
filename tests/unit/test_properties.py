"""Invariants of every policy on random snapshots (hypothesis, 1000 cases per test).

No device memory, device threads (strict mode), host cores or host memory is exceeded by
running + planned jobs, and every pending job appears exactly once. The oracle is
coshare.cycle.verify.check_plan, itself tested in test_verify.py, plus direct recounts here.
"""

from __future__ import annotations

from collections import Counter

import pytest
from coshare.cycle.verify import check_plan
from coshare.model import Snapshot
from coshare.policies import PolicyOptions, make_policy
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
    ("sharepack", "strict"),
    ("sharepack", "soft"),
    ("collocate", "strict"),
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
    for name in ("exclusive", "random", "knapsack", "bestfit", "fgd", "sharepack"):
        options = PolicyOptions(seed=11)
        assert make_policy(name, options).plan(snapshot) == make_policy(name, options).plan(
            snapshot
        )


@pytest.mark.parametrize(("name", "threads"), CASES)
@given(snapshot=snapshots())
def test_a_job_said_not_chosen_really_fits_what_the_plan_leaves(
    name: str, threads: str, snapshot: Snapshot
) -> None:
    # Callers rely on the code: the simulator's batch protocol keeps not_chosen jobs waiting
    # and drops the others. Check it against the resources left after the plan.
    from coshare.model import RunningJob
    from coshare.policies.base import ClusterState

    plan = make_policy(name, PolicyOptions(threads=threads, seed=3)).plan(snapshot)  # type: ignore[arg-type]
    pending = {j.id: j for j in snapshot.pending}
    placed = tuple(
        RunningJob(
            a.job,
            a.node,
            a.devices,
            pending[a.job].device_memory_mib,
            pending[a.job].device_threads,
            pending[a.job].total_cpu_milli,
            pending[a.job].total_memory_mib,
            "planned",
        )
        for a in plan.assignments
    )
    after = ClusterState(
        Snapshot(snapshot.nodes, snapshot.running + placed, (), snapshot.now_s),
        strict_threads=threads == "strict",
    )
    idle = name == "exclusive"
    for u in plan.unplaced:
        if u.code != "not_chosen":
            continue
        job = pending[u.job]
        if not job.needs_device:
            ok = after.host_ok(job) & ((after.node_jobs == 0) if idle else True)
            assert ok.any(), (u.job, u.reason)
        else:
            devices = after.device_ok(job, idle_only=idle)
            assert len(after.nodes_with_devices(job, devices)) > 0, (u.job, u.reason)


@pytest.mark.parametrize("name", ["knapsack", "sharepack"])
@pytest.mark.parametrize("threads", ["strict", "soft"])
@given(snapshot=snapshots())
def test_the_sharing_policies_keep_no_job_waiting_that_fits_what_their_plan_leaves(
    name: str, threads: str, snapshot: Snapshot
) -> None:
    # Their per-device host shares and the knapsack's choice arbitrate between jobs; they
    # never leave room idle that a waiting job fits (the test above checks that not_chosen
    # means exactly that).
    plan = make_policy(name, PolicyOptions(threads=threads)).plan(snapshot)  # type: ignore[arg-type]
    assert [u for u in plan.unplaced if u.code == "not_chosen"] == []


@pytest.mark.parametrize("threads", ["strict", "soft"])
@given(snapshot=snapshots())
def test_the_paths_of_large_cycles_keep_every_promise(threads: str, snapshot: Snapshot) -> None:
    # Large cycles take other roads (bucketed knapsack tables, the greedy, tables kept small);
    # thresholds of zero send every small snapshot down them.
    from coshare.policies.knapsack import KnapsackPolicy
    from coshare.policies.sharepack import SharePackPolicy

    for policy in (
        KnapsackPolicy(threads=threads, max_exact_work=0, max_dp_cells=64),  # type: ignore[arg-type]
        SharePackPolicy(threads=threads, max_exact_work=0, max_replaced_jobs=0),  # type: ignore[arg-type]
        SharePackPolicy(threads=threads, max_replaced_jobs=0, max_dp_cells=64),  # type: ignore[arg-type]
    ):
        plan = policy.plan(snapshot)
        assert check_plan(snapshot, plan, strict_threads=threads == "strict") == []
        listed = Counter([u.job for u in plan.unplaced] + sorted(plan.placed_jobs))
        assert sorted(listed) == sorted(j.id for j in snapshot.pending)
        assert set(listed.values()) <= {1}
        assert [u for u in plan.unplaced if u.code == "not_chosen"] == []
