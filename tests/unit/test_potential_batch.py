"""``sharepack``'s large cycles place one-device jobs a chunk at a time
(:mod:`coshare.policies.potential_batch`): a chunk of one job must be the one-by-one placement
of :meth:`Potential.place`, the bound that spares scoring must leave out no move that could be
chosen, and a chunked plan keeps the planning contract. Cycles up to the batch size keep the
one-by-one plan.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from coshare.cycle.verify import check_plan
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies import potential as potential_module
from coshare.policies import potential_batch
from coshare.policies.base import ClusterState
from coshare.policies.potential import Potential, snapshot_shapes
from coshare.policies.sharepack import SharePackPolicy

SIZES = (4096, 8192, 16384)


def random_snapshot(rng: random.Random, nodes: int, jobs: int, multi: bool = False) -> Snapshot:
    """Nodes of a few kinds (often identical, so they group), some room taken, one-device jobs
    of many sizes (``multi``: some multi-device and CPU-only jobs too); host room tight on
    some nodes, so that a move can stop a shape by cores or host memory."""
    made = []
    for i in range(nodes):
        size = rng.choice(SIZES)
        devices = tuple(Device(str(d), size, 240) for d in range(rng.choice([1, 2, 2, 4])))
        made.append(
            Node(f"n{i:04d}", rng.choice([4, 8, 16]) * MILLI, rng.choice([8192, 32768]), devices)
        )
    running = []
    for i, node in enumerate(made):
        for dev in node.devices:
            if rng.random() < 0.3:
                running.append(
                    RunningJob(
                        f"r{i}.{dev.id}",
                        node.name,
                        (dev.id,),
                        rng.randrange(0, dev.memory_mib, 256),
                        60,
                        rng.randint(0, 3) * MILLI,
                        rng.randint(0, 4096),
                    )
                )
    pending = []
    for j in range(jobs):
        kind = "cpu" if multi and rng.random() < 0.08 else "device"
        count = 0 if kind == "cpu" else rng.choice([1] * 8 + ([2] if multi else []))
        pending.append(
            Job(
                f"p{j}",
                device_memory_mib=0 if kind == "cpu" else rng.randrange(256, 6144, 128),
                device_threads=0 if kind == "cpu" else rng.randint(1, 240),
                device_count=count,
                cpu_milli=rng.randint(1, 6) * MILLI,
                memory_mib=rng.choice([512, 1024, 4096, 8192]),
                submit_time_s=float(j),
                kind=kind,  # type: ignore[arg-type]
            )
        )
    return Snapshot(tuple(made), tuple(running), tuple(pending))


def devices_of(state: ClusterState) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(a.job, a.node, a.devices) for a in state.assignments]


def one_by_one(snapshot: Snapshot, strict: bool) -> list[tuple[str, str, tuple[str, ...]]]:
    state = ClusterState(snapshot, strict_threads=strict)
    pot = Potential(state, snapshot_shapes(snapshot))
    for job in snapshot.pending:
        pot.place(job, state.device_ok(job))
    return devices_of(state)


def chunked(snapshot: Snapshot, strict: bool) -> tuple[list[tuple[str, str, tuple[str, ...]]], int]:
    state = ClusterState(snapshot, strict_threads=strict)
    pot = Potential(state, snapshot_shapes(snapshot))
    reserved = np.zeros(state.device_count, dtype=np.bool_)
    left = potential_batch.place_chunked(pot, snapshot.pending, reserved)
    return devices_of(state), len(left)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_a_chunk_of_one_job_is_the_one_by_one_placement(
    seed: int, grouped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk's scoring gives every move the very rise :meth:`Potential.place` gives it,
    and its choice follows the same rule of ties."""
    snapshot = random_snapshot(random.Random(seed), 60, 150)
    strict = seed % 2 == 0
    monkeypatch.setattr(potential_module, "GROUP_FROM_NODES", 0 if grouped else 10**9)
    want = one_by_one(snapshot, strict)
    monkeypatch.setattr(potential_batch, "CHUNK", 1)
    got, _ = chunked(snapshot, strict)
    assert got == want


@pytest.mark.parametrize("seed", range(8))
def test_the_bound_leaves_out_no_move_that_could_be_chosen(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks that score only the moves their bound leaves open place as chunks that score
    every move."""
    snapshot = random_snapshot(random.Random(100 + seed), 300, 500)
    monkeypatch.setattr(potential_module, "GROUP_FROM_NODES", 0)
    monkeypatch.setattr(potential_batch, "FEW_OPEN", 0)  # always the bound
    pruned = chunked(snapshot, True)
    monkeypatch.setattr(potential_batch._Columns, "_score_promising", lambda self, rows: False)
    full = chunked(snapshot, True)
    assert pruned == full
    assert pruned[1] < len(snapshot.pending)  # jobs were placed at all


@pytest.mark.parametrize("seed", range(6))
def test_a_chunked_plan_keeps_the_contract_and_places_what_fits(seed: int) -> None:
    """A cycle above the batch size (here: every cycle) gives a valid plan; with room for
    all, every job is placed, as one job at a time does."""
    snapshot = random_snapshot(random.Random(200 + seed), 200, 260, multi=True)
    batch = SharePackPolicy(batch_from_jobs=0).plan(snapshot)
    assert check_plan(snapshot, batch) == []
    single = SharePackPolicy().plan(snapshot)
    assert len(batch.assignments) == len(single.assignments)


def test_a_cycle_up_to_the_batch_size_keeps_the_one_by_one_plan() -> None:
    snapshot = random_snapshot(random.Random(7), 80, 120, multi=True)
    size = len(snapshot.pending)
    assert (
        SharePackPolicy(batch_from_jobs=size).plan(snapshot).assignments
        == SharePackPolicy(batch_from_jobs=10**9).plan(snapshot).assignments
    )
    assert (
        SharePackPolicy(batch_from_jobs=size - 1).plan(snapshot).assignments
        != SharePackPolicy(batch_from_jobs=10**9).plan(snapshot).assignments
    )


@pytest.mark.parametrize("holds", [True, False])
def test_a_bound_that_misses_is_tried_again_less_and_less(
    holds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk tries the bound while it holds; after a miss, the next try waits
    RETRY_BOUND chunks, twice as many after each further miss in a row."""
    tried: list[int] = []

    def chunk(p: object, jobs: list[Job], reserved: object, left: object, bound: bool) -> tuple:
        if bound:
            tried.append(len(seen))
        seen.append(1)
        return 1, bound and holds

    seen: list[int] = []
    monkeypatch.setattr(potential_batch, "_chunk", chunk)
    jobs = [Job(f"{k}.0", 1) for k in range(40)]
    potential_batch.place_chunked(None, jobs, None)  # type: ignore[arg-type]
    r = potential_batch.RETRY_BOUND
    if holds:
        assert tried == list(range(40))
    else:
        assert tried == [0, 1 + r, 2 + 3 * r, 3 + 7 * r]  # waits of r, 2r, 4r; then past 40
