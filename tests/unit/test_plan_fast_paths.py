"""The large cycle's shortcuts against the plain computation they replace.

Each shortcut must give the same answer as the slow path on every input, so the plans stay
byte for byte the same: the reasons of many waiting jobs at once (compared as ranks) against
one job at a time, the "fits some kind of node" columns against each job's own check, and the
table budget counted until its answer is known against counting every type.
"""

from __future__ import annotations

import random
from dataclasses import fields

import numpy as np
import pytest
from coshare.model import MILLI, Assignment, Device, Job, Node, RunningJob, Snapshot
from coshare.policies.base import (
    ClusterState,
    _single_assignment,
    undominated_rows,
    unique_rows,
)
from coshare.policies.knapsack import job_types, tables_affordable, types_affordable
from coshare.policies.waiting import (
    _explain,
    _explain_many,
    _fits_a_class,
    _never_fits_reason,
    _NodeClass,
    never_fits,
)
from coshare.schema import _assignment_dict, _compact


def random_cluster(rng: random.Random) -> Snapshot:
    """A few nodes of a few sizes, some of their room taken by running jobs, and pending
    single-device (and a few multi-device and CPU) jobs of every size."""
    nodes = []
    for i in range(rng.randint(1, 6)):
        devices = tuple(
            Device(str(d), rng.choice([6000, 8000, 16000]), rng.choice([60, 240]))
            for d in range(rng.randint(0, 3))
        )
        nodes.append(
            Node(f"n{i}", rng.choice([4, 8, 16]) * MILLI, rng.choice([8192, 65536]), devices)
        )
    running = []
    for i, node in enumerate(nodes):
        for dev in node.devices:
            if rng.random() < 0.6:
                running.append(
                    RunningJob(
                        f"r{i}.{dev.id}",
                        node.name,
                        (dev.id,),
                        rng.randint(0, dev.memory_mib),
                        rng.randint(0, dev.threads),
                        rng.randint(0, 6) * MILLI,
                        rng.randint(0, 9000),
                    )
                )
    pending = []
    for i in range(rng.randint(1, 40)):
        kind = rng.choice(["device"] * 8 + ["cpu"])
        count = 0 if kind == "cpu" else rng.choice([1, 1, 1, 2, 4])
        pending.append(
            Job(
                f"p{i}",
                device_memory_mib=0 if kind == "cpu" else rng.randint(1, 17000),
                device_threads=0 if kind == "cpu" else rng.randint(1, 250),
                device_count=count,
                cpu_milli=rng.randint(0, 20) * 500,
                memory_mib=rng.randint(0, 70000),
                kind=kind,  # type: ignore[arg-type]
                processes=rng.choice([1, 1, 2]),
            )
        )
    return Snapshot(tuple(nodes), tuple(running), tuple(pending))


def test_reasons_of_many_waiting_jobs_are_each_jobs_own() -> None:
    """``_explain_many`` (all single-device jobs at once, over the undominated devices, as
    ranks) gives each job that does not fit now the reason ``_explain`` gives it alone, and
    None exactly for those that fit; strict and soft threads, with and without held devices."""
    rng = random.Random(15)
    compared = 0
    for _ in range(300):
        snap = random_cluster(rng)
        for strict in (True, False):
            state = ClusterState(snap, strict_threads=strict)
            singles = [j for j in snap.pending if j.needs_device and j.device_count == 1]
            held = None
            if state.device_count and rng.random() < 0.5:
                held = np.array(
                    [rng.random() < 0.3 for _ in range(state.device_count)], dtype=np.bool_
                )
            many = _explain_many(state, singles, held)
            for job, reason in zip(singles, many, strict=True):
                alone = _explain(state, job, False, held)
                if reason is None:
                    assert alone.code == "not_chosen", (job, alone)
                else:
                    assert reason == alone, (job, reason, alone)
                    compared += 1
    assert compared > 1000  # most random jobs wait: the cascade's every step is reached


def test_fits_a_kind_of_node_as_columns_is_each_jobs_own_check() -> None:
    rng = random.Random(16)
    for _ in range(200):
        snap = random_cluster(rng)
        kinds = {
            (n.cpu_milli, n.memory_mib, tuple((d.memory_mib, d.threads) for d in n.devices))
            for n in snap.nodes
        }
        classes = {_NodeClass(c, m, tuple(sorted(d, reverse=True))) for c, m, d in kinds}
        fits = _fits_a_class(list(snap.pending), classes).tolist()
        for job, fit in zip(snap.pending, fits, strict=True):
            alone = _never_fits_reason(job, classes, 0, 0, 0, 0, 0)
            assert fit == (alone is None), job
        assert set(never_fits(snap, snap.pending)) == {
            j.id for j, fit in zip(snap.pending, fits, strict=True) if not fit
        }


def test_table_budget_counted_until_known_is_the_budget_of_every_type() -> None:
    """``types_affordable`` stops counting types once the answer is known; it answers what
    ``tables_affordable`` answers on the full count, on both sides of each bound."""
    rng = random.Random(17)
    for _ in range(400):
        sizes = rng.randint(1, 60)
        jobs = [
            Job(
                f"j{i}",
                device_memory_mib=rng.randint(1, sizes) * 64,
                device_threads=rng.choice([60, 120]),
                cpu_milli=MILLI,
                memory_mib=rng.choice([0, 1]),
            )
            for i in range(rng.randint(0, 300))
        ]
        grid = rng.choice([64, 128, 1000])
        devices = rng.randint(0, 50)
        work = rng.randint(0, 2000)
        expected = tables_affordable(job_types(jobs, grid), len(jobs), devices, work)
        assert types_affordable(jobs, grid, devices, work) == expected


def test_a_single_assignment_built_slot_by_slot_is_the_classes_own() -> None:
    """Every field set (reading an unset slot raises), equal and of the same types."""
    built = _single_assignment("8.0", "node-1", ("3",))
    plain = Assignment("8.0", "node-1", ("3",))
    assert built == plain and hash(built) == hash(plain)
    assert [(f.name, getattr(built, f.name)) for f in fields(Assignment)] == [
        (f.name, getattr(plain, f.name)) for f in fields(Assignment)
    ]


def test_undominated_rows_are_the_distinct_rows_nothing_else_beats() -> None:
    """``undominated_rows`` (strong rows first, then blocks) against the definition: the
    distinct rows no other distinct row is at least as large as in every column, largest
    first; many rows (the strong rows' pass runs from 64) and few, ties and negatives."""
    rng = np.random.default_rng(15)
    for _ in range(150):
        n, k = int(rng.integers(1, 700)), int(rng.integers(1, 6))
        rows = rng.integers(-3, int(rng.integers(1, 40)), size=(n, k)).astype(np.int64)
        distinct = sorted({tuple(r) for r in rows.tolist()}, reverse=True)
        expected = [
            r
            for r in distinct
            if not any(o != r and all(a >= b for a, b in zip(o, r, strict=True)) for o in distinct)
        ]
        assert undominated_rows(rows).tolist() == [list(r) for r in expected]


def test_unique_rows_are_numpys_unique_rows_first_positions_and_inverse() -> None:
    """``unique_rows`` against ``np.unique(axis=0, return_index=True, return_inverse=True)``:
    the same distinct rows in the same order, the same first position of each and the same
    place of each row; ties, negatives, one column and none at all."""
    rng = np.random.default_rng(16)
    for _ in range(150):
        n, k = int(rng.integers(0, 400)), int(rng.integers(1, 6))
        rows = rng.integers(-5, int(rng.integers(1, 30)), size=(n, k)).astype(np.int64)
        keys, first, inverse = unique_rows(rows)
        want_keys, want_first, want_inverse = np.unique(
            rows, axis=0, return_index=True, return_inverse=True
        )
        assert keys.tolist() == want_keys.tolist()
        assert first.tolist() == want_first.tolist()
        assert inverse.tolist() == want_inverse.reshape(-1).tolist()
        assert (keys[inverse] == rows).all()


def test_an_assignment_in_the_plans_json_is_the_compact_form_of_its_fields() -> None:
    """The usual assignment's dict, built directly, is what the general path writes: the same
    keys in the same order, optional fields only when set."""
    cases = [
        Assignment("1", "n", ("0",)),
        Assignment("2", "n"),
        Assignment("3", "n", ("0", "1")),
        Assignment("4", "n", ("",)),
        Assignment("5", "n", ("0",), processes=2),
        Assignment("6", "n", (), harvest_from="1"),
        Assignment("7", "n", ("0",), llc_ways=3),
        Assignment("8", "n", ("0",), membw_gbps=1.5),
    ]
    for a in cases:
        general = _compact(
            [
                ("job", a.job),
                ("node", a.node),
                ("device", ",".join(a.devices) or None),
                ("processes", a.processes),
                ("harvest_from", a.harvest_from),
                ("llc_ways", a.llc_ways),
                ("membw_gbps", a.membw_gbps),
            ]
        )
        assert list(_assignment_dict(a).items()) == list(general.items()), a


def test_a_first_pass_sharepack_would_throw_away_is_skipped_with_the_same_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the one-device jobs that fit need more host cores or memory than is free,
    ``sharepack`` no longer makes its first pass by potential (it would leave one of them out
    and be undone): the plans with and without that shortcut are the same, on random
    snapshots (strict and soft threads, with aged jobs) and the Xeon Phi mix of
    ``plan_scale.py`` with soft threads (memory enough for all, cores not), and the skipped
    pass is one the plain path throws away."""
    from coshare.policies import PolicyOptions, make_policy, sharepack
    from coshare.sim.applications import phi_cluster, table1_jobs

    real = sharepack._host_contended
    skipped: list[bool] = []

    def counting(*args: object) -> bool:
        out = real(*args)  # type: ignore[arg-type]
        skipped.append(out)
        return out

    def plans(snapshot: Snapshot, options: PolicyOptions) -> tuple[object, object]:
        monkeypatch.setattr(sharepack, "_host_contended", counting)
        skips, undone = len(skipped), len(thrown_away)
        fast = make_policy("sharepack", options).plan(snapshot)
        undone_fast = len(thrown_away) - undone
        monkeypatch.setattr(sharepack, "_host_contended", lambda *args: False)
        plain = make_policy("sharepack", options).plan(snapshot)
        # where the pass was skipped, the plain path made it and undid it: one undo more
        extra = len(thrown_away) - undone - 2 * undone_fast
        assert extra == int(len(skipped) > skips and skipped[-1])
        return (fast.assignments, fast.unplaced), (plain.assignments, plain.unplaced)

    thrown_away: list[int] = []
    restore = sharepack._Saved.restore

    def counting_restore(self: sharepack._Saved, state: ClusterState) -> None:
        thrown_away.append(1)
        restore(self, state)

    monkeypatch.setattr(sharepack._Saved, "restore", counting_restore)
    rng = random.Random(18)
    for _ in range(400):
        snap = random_cluster(rng)
        for threads in ("strict", "soft"):
            options = PolicyOptions(threads=threads, age_limit_s=rng.choice([None, 1.0]))
            fast, plain = plans(snap, options)
            assert fast == plain, snap
    assert sum(skipped) >= 30 and not all(skipped)  # both ways are taken
    phi = Snapshot(phi_cluster(100, seed=1), (), table1_jobs(1000, 2))
    skipped.clear()
    fast, plain = plans(phi, PolicyOptions(threads="soft"))
    assert skipped == [True] and fast == plain
