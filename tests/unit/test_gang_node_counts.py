"""The gang node-count search tries only the counts that can exist (no more than the nodes
that hold a process, no fewer than the largest capacity needs) and finds the same count as
trying every allowed count in turn."""

from __future__ import annotations

import numpy as np
from coshare.ledger.gangs import node_counts
from coshare.model import MILLI, Job
from coshare.policies.gang import fewest_nodes
from hypothesis import given
from hypothesis import strategies as st


def every_count(job: Job, cap: np.ndarray, weights: np.ndarray | None) -> int | None:
    """The reference: each allowed count in turn, fewest first."""
    each = np.repeat(cap, weights) if weights is not None else cap
    for n in node_counts(job):
        q, r = divmod(job.processes, n)
        if np.count_nonzero(each >= q) >= n and np.count_nonzero(each >= q + 1) >= r:
            return n
    return None


@given(
    processes=st.integers(1, 400),
    low=st.integers(1, 40),
    span=st.integers(0, 2**20),
    per_node=st.none() | st.integers(1, 50),
    cap=st.lists(st.integers(0, 60), max_size=30),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_fewest_count_is_the_one_every_count_in_turn_finds(
    processes: int,
    low: int,
    span: int,
    per_node: int | None,
    cap: list[int],
    weighted: bool,
    seed: int,
) -> None:
    job = Job(
        "g",
        0,
        0,
        0,
        MILLI,
        0,
        kind="cpu",
        processes=processes,
        nodes=low,
        nodes_max=low + span,
        processes_per_node=per_node,
    )
    caps = np.array(cap, dtype=np.int64)
    weights = (
        np.random.default_rng(seed).integers(1, 5, len(cap)).astype(np.int64) if weighted else None
    )
    assert fewest_nodes(job, caps, weights) == every_count(job, caps, weights)


def test_a_gang_no_cluster_holds_is_refused_without_trying_each_count() -> None:
    job = Job("g", 0, 0, 0, MILLI, 0, kind="cpu", processes=2**20, nodes=1, nodes_max=2**20)
    assert fewest_nodes(job, np.full(5_000, 64, dtype=np.int64)) is None
    fits = Job(
        "g", 0, 0, 0, MILLI, 0, kind="cpu", processes=64 * 4_999 + 1, nodes=1, nodes_max=2**20
    )
    assert fewest_nodes(fits, np.full(5_000, 64, dtype=np.int64)) == 5_000
