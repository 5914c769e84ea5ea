"""The planner lease's fence before every batch both Editors write: a planner that
lost its lease, or whose engine became unreachable, stops before its next batch, not only
before its first; what was sent before is complete (placed and released on Slurm; on
HTCondor the gate, written last, stays closed)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from coshare.config import Config, DeviceKind, SlurmConfig, load_config
from coshare.cycle.run import fences_batches, run_cycle
from coshare.errors import ConfigError, EngineUnavailable, LeaseLost, StoppedBetweenBatches
from coshare.ledger.book import Book
from coshare.model import Assignment, Job, Plan
from coshare.policies import make_policy

from condor_addon import attributes as A
from condor_addon.adapter import CondorAdapter
from condor_addon.view import QueueView
from slurm_addon.adapter import SlurmAdapter
from slurm_addon.client import SlurmClient

from .slurm_recorder import Recorder, job_record
from .test_slurm_adapter import NOW, FakeQueue


class Fence:
    """Lets ``allow`` calls through, then raises :class:`LeaseLost` (another instance
    took over)."""

    def __init__(self, allow: int) -> None:
        self.allow = allow
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls > self.allow:
            raise LeaseLost("gpu", "a", "b", "another instance took it over")


def slurm(queue: FakeQueue) -> tuple[SlurmAdapter, Recorder]:
    runner = Recorder(queue)
    config = Config(
        device_kinds={"fakephi": DeviceKind(8192, 240)},
        slurm=SlurmConfig(update_batch=1, workers=1),
    )
    client = SlurmClient(config.slurm, runner=runner, sleep=lambda s: None, environ={})
    return SlurmAdapter(client, config, clock=lambda: NOW), runner


def test_both_adapters_declare_it() -> None:
    assert fences_batches(SlurmAdapter) and fences_batches(CondorAdapter)
    assert not fences_batches(object())


def test_slurm_stops_before_the_batch_after_the_lease_was_lost() -> None:
    queue = FakeQueue(*(job_record(j, submit_time=NOW - 10 + j) for j in (1, 2, 3)))
    adapter, runner = slurm(queue)
    fence = Fence(allow=2)  # the cycle's own check, then the first batch's
    with pytest.raises(StoppedBetweenBatches) as stopped:
        run_cycle(adapter, make_policy("knapsack"), adapter, before_write=fence)
    assert isinstance(stopped.value.cause, LeaseLost)
    assert str(stopped.value) == (
        "planner 'gpu': instance 'a' lost its lease (another instance took it over); it "
        "stopped between two batches of its writes: those sent are complete, nothing after "
        "them was written (the next cycle writes the rest)"
    )
    assert fence.calls == 4  # the cycle's, then one before each batch: the 2nd and 3rd refused
    placed = [
        j for j, r in queue.jobs.items() if r["admin_comment"].startswith("coshare-placement")
    ]
    assert len(placed) == 1, placed
    # The batch sent before was completed: written, confirmed and released.
    assert queue.jobs[placed[0]]["priority"] == 1000
    assert runner.verbs().count("scontrol <stdin>") == 1
    assert all(queue.jobs[j]["priority"] == 0 for j in queue.jobs if j not in placed)


def test_slurm_with_its_lease_writes_every_batch_and_checks_before_each() -> None:
    queue = FakeQueue(*(job_record(j, submit_time=NOW - 10 + j) for j in (1, 2, 3)))
    adapter, _ = slurm(queue)
    fence = Fence(allow=99)
    report = run_cycle(adapter, make_policy("knapsack"), adapter, before_write=fence)
    assert sorted(report.apply.applied) == ["1", "2", "3"]
    assert fence.calls == 1 + 3
    # Without a fence (no engine) the same writes, none checked.
    queue = FakeQueue(*(job_record(j, submit_time=NOW - 10 + j) for j in (1, 2, 3)))
    adapter, _ = slurm(queue)
    assert sorted(run_cycle(adapter, make_policy("knapsack"), adapter).apply.applied) == [
        "1",
        "2",
        "3",
    ]


class Schedd:
    """Stands in for the CondorClient: two idle managed jobs; edits recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def job_ads(self, constraint: str, projection: Sequence[str] = ()) -> list[dict[str, object]]:
        return [{"ClusterId": c, "ProcId": 0, "JobStatus": A.IDLE, A.MANAGED: True} for c in (1, 2)]

    def edit_ids(self, ids: Sequence[str], attribute: str, value: str) -> int:
        self.calls.append((",".join(ids), attribute, value))
        return len(ids)


PLAN = Plan(
    "knapsack", assignments=(Assignment("1.0", "node1", ("0",)), Assignment("2.0", "node2", ("0",)))
)


def condor(schedd: Schedd) -> CondorAdapter:
    adapter = CondorAdapter(schedd, load_config(environ={}), clock=lambda: float(NOW))  # type: ignore[arg-type]
    adapter.queue = QueueView(book=Book(pending=(Job("1.0", 1000, 10), Job("2.0", 1000, 10))))
    return adapter


def test_condor_checks_before_each_transaction_and_never_opens_a_gate_after_a_lost_lease() -> None:
    schedd = Schedd()
    report = condor(schedd).apply(PLAN, (), dry_run=False, fence=(fence := Fence(allow=99)))
    assert report.applied == ("1.0", "2.0")
    # placed at, devices, then each node's gate: one check before each transaction
    assert [c[1] for c in schedd.calls] == [
        A.PLACED_AT,
        A.PLACED_DEVICES,
        A.PLACED_NODE,
        A.PLACED_NODE,
    ]
    assert fence.calls == len(schedd.calls)
    for allow in range(len(schedd.calls)):
        lost = Schedd()
        with pytest.raises(LeaseLost):
            condor(lost).apply(PLAN, (), dry_run=False, fence=Fence(allow=allow))
        assert len(lost.calls) == allow  # nothing sent after the failed check
        opened = [c[0] for c in lost.calls if c[1] == A.PLACED_NODE]
        assert opened == ["1.0"][: max(0, allow - 2)]


def test_an_engine_gone_before_the_first_write_says_nothing_was_written() -> None:
    """The cycle's own check, before any batch, keeps its message: nothing was written."""
    queue = FakeQueue(job_record(1, submit_time=NOW))
    adapter, runner = slurm(queue)

    def gone() -> None:
        raise EngineUnavailable("127.0.0.1:5432", "connection refused")

    with pytest.raises(EngineUnavailable, match="this cycle wrote nothing"):
        run_cycle(adapter, make_policy("knapsack"), adapter, before_write=gone)
    assert "scontrol <stdin>" not in runner.verbs()


def test_a_check_counts_for_fence_every_s_and_the_first_is_always_made() -> None:
    """Every batch starts within ``fence_every_s`` of a passed check (below the lease, so
    within the lease); the check before the first write is always made."""
    queue = FakeQueue(*(job_record(j, submit_time=NOW - 10 + j) for j in (1, 2, 3)))
    adapter, _ = slurm(queue)
    fence = Fence(allow=1)  # the cycle's own check passes; any later one would fail
    report = run_cycle(
        adapter, make_policy("knapsack"), adapter, before_write=fence, fence_every_s=3600
    )
    assert sorted(report.apply.applied) == ["1", "2", "3"] and fence.calls == 1
    queue = FakeQueue(job_record(1, submit_time=NOW))
    adapter, runner = slurm(queue)
    with pytest.raises(LeaseLost):
        run_cycle(
            adapter,
            make_policy("knapsack"),
            adapter,
            before_write=Fence(allow=0),
            fence_every_s=3600,
        )
    assert "scontrol <stdin>" not in runner.verbs()


def test_fence_every_s_defaults_to_a_quarter_of_the_lease_and_stays_below_it() -> None:
    assert load_config(environ={}).coordination.fence_interval_s == 30.0
    config = load_config(environ={"COSHARE_COORDINATION_FENCE_EVERY_S": "0"})
    assert config.coordination.fence_interval_s == 0.0
    with pytest.raises(
        ConfigError,
        match=r"coordination.fence_every_s: 120 is not below "
        r"coordination.lease_s 120",
    ):
        load_config(environ={"COSHARE_COORDINATION_FENCE_EVERY_S": "120"})
    with pytest.raises(ConfigError, match="fence_every_s"):
        load_config(environ={"COSHARE_COORDINATION_FENCE_EVERY_S": "nan"})
