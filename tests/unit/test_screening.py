"""Screening the pending jobs that fit nowhere (ClusterState.may_fit, policies.base.screened).

A policy that only places while it walks the jobs in order may skip, at the start of each
block, the jobs that fit nowhere at that moment: placing only takes room. These tests hold
the screen to "never skips a job that fits" and the screened policies to the plans they make
when every job is tried."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from unittest import mock

import numpy as np
import pytest
from coshare.model import Job, Snapshot
from coshare.policies import PolicyOptions, make_policy
from coshare.policies import base as policy_base
from coshare.policies.base import ClusterState
from coshare.policies.bestfit import least
from coshare.policies.membw import least_used_with_room
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import snapshots

#: policy -> the module whose walk is screened
SCREENED = {
    "bestfit": "coshare.policies.bestfit",
    "collocate": "coshare.policies.collocate",
    "exclusive": "coshare.policies.base",
    "fgd": "coshare.policies.fgd",
    "membw": "coshare.policies.membw",
    "random": "coshare.policies.base",
}


def fits_somewhere(state: ClusterState, job: Job, idle_only: bool) -> bool:
    if not job.needs_device:
        return bool((state.host_ok(job) & ((state.node_jobs == 0) | (not idle_only))).any())
    ok = state.device_ok(job, idle_only=idle_only)
    return len(state.nodes_with_devices(job, ok)) > 0


@settings(max_examples=300)
@given(snapshot=snapshots(), data=st.data())
def test_a_job_screened_out_fits_nowhere(snapshot: Snapshot, data: st.DataObject) -> None:
    state = ClusterState(snapshot)
    jobs = list(snapshot.pending)
    # take some room first, as a plan in progress has
    for job in jobs[: data.draw(st.integers(0, len(jobs)))]:
        if job.needs_device and job.device_count == 1:
            ok = np.flatnonzero(state.device_ok(job))
            if len(ok):
                state.place(job, int(state.dev_node[ok[0]]), [int(ok[0])])
    for idle_only in (False, True):
        may = state.may_fit(jobs, idle_only)
        for job, flag in zip(jobs, may.tolist(), strict=True):
            if not flag:
                assert not fits_somewhere(state, job, idle_only), (job, idle_only)
    # the screen does screen: a job larger than every device and node is out
    huge = Job("huge", device_memory_mib=1 << 40, device_threads=1)
    assert not state.may_fit([huge])[0]


def every_job_tried(
    state: ClusterState,
    jobs: Sequence[Job],
    block: int = 0,
    idle_only: bool = False,
    least: int = 0,
) -> Iterator[tuple[Job, bool]]:
    return ((job, True) for job in jobs)


@pytest.mark.parametrize("name", sorted(SCREENED))
@pytest.mark.parametrize("threads", ["strict", "soft"])
@settings(max_examples=60)  # 12 policies and modes, two plans each: 1,000 examples took 4.5 min
@given(snapshot=snapshots(max_pending=60))
def test_screening_changes_no_plan(name: str, threads: str, snapshot: Snapshot) -> None:
    policy = make_policy(name, PolicyOptions(threads=threads))  # type: ignore[arg-type]
    module = SCREENED[name]
    # a block of one screens before every job: the most the screen can skip
    with mock.patch(
        f"{module}.screened", functools.partial(policy_base.screened, block=1, least=0)
    ):
        screened = policy.plan(snapshot)
    with mock.patch(f"{module}.screened", every_job_tried):
        tried = policy.plan(snapshot)
    assert screened == tried


@given(
    values=st.lists(
        st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.integers(0, 3)),
        min_size=1,
        max_size=40,
    )
)
def test_bestfits_tie_rule_is_the_sorts_first(values: list[tuple[float, int]]) -> None:
    cand = np.arange(0, 2 * len(values), 2, dtype=np.int64)
    score = np.array([v for v, _ in values], dtype=np.float64)
    free = np.zeros(2 * len(values), dtype=np.int64)
    free[cand] = [f for _, f in values]
    assert least(cand, score, free) == cand[np.lexsort((cand, free[cand], score))[0]]


@settings(max_examples=300)
@given(snapshot=snapshots(), data=st.data())
def test_the_least_used_node_with_room_is_found_for_all_jobs_at_once(
    snapshot: Snapshot, data: st.DataObject
) -> None:
    state = ClusterState(snapshot, strict_threads=data.draw(st.booleans()))
    used = np.array(
        data.draw(
            st.lists(
                st.sampled_from([0.0, 0.5, 1.0]),
                min_size=len(state.nodes),
                max_size=len(state.nodes),
            )
        ),
        dtype=np.float64,
    )
    jobs = list(snapshot.pending)
    found = least_used_with_room(state, jobs, used)
    for job, node in zip(jobs, found, strict=True):
        if job.needs_device:
            counts = np.bincount(state.dev_node[state.device_ok(job)], minlength=len(state.nodes))
            room = np.flatnonzero(counts >= job.device_count).tolist()
        else:
            room = np.flatnonzero(state.host_ok(job)).tolist()
        expected = min(room, key=lambda k: (used[k], k)) if room else None
        assert node == expected, job


def test_a_short_walk_is_not_screened() -> None:
    state = ClusterState(Snapshot((), (), ()))
    huge = Job("huge", device_memory_mib=1 << 40, device_threads=1)
    assert list(policy_base.screened(state, [huge])) == [(huge, True)]
    assert list(policy_base.screened(state, [huge], least=0)) == [(huge, False)]
