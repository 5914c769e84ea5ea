"""``sharepack``'s search for a one-device job's place scores only some devices: the first node
of each group of identical nodes, the first of identical devices on a node, and, when
relocating a job, only the nodes that changed since it was placed (the others scored the
same then and lost to its place). Each step of a plan made that way must pick the very device
that scoring every fitting device of the cluster picks, on random clusters of identical and
near-identical nodes, through placements and the relocation pass alike.
"""

from __future__ import annotations

import numpy as np
import pytest
from coshare.model import MILLI, Device, Job, Node, RunningJob, Snapshot
from coshare.policies import potential as potential_module
from coshare.policies.base import ClusterState
from coshare.policies.potential import Potential, snapshot_shapes
from hypothesis import given
from hypothesis import strategies as st

SIZES = (4096, 8192)


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    """A few kinds of node, each repeated (so nodes group), some devices partly taken, and a
    batch of one-device jobs of a few sizes (so many moves tie)."""
    kinds = draw(
        st.lists(
            st.tuples(
                st.sampled_from(SIZES),
                st.integers(1, 4),  # devices
                st.sampled_from([2, 4, 8]),  # cores
                st.sampled_from([4096, 16384]),
            ),
            min_size=1,
            max_size=3,
        )
    )
    made: list[Node] = []
    for size, count, cores, memory in kinds:
        for _ in range(draw(st.integers(1, 6))):
            devices = tuple(Device(str(d), size, 64) for d in range(count))
            made.append(Node(f"n{len(made):03d}", cores * MILLI, memory, devices))
    running = []
    for i, node in enumerate(made):
        if draw(st.booleans()):
            dev = node.devices[0]
            used = draw(st.sampled_from([1024, 2048, 3072]))
            running.append(RunningJob(f"r{i}", node.name, (dev.id,), used, 8, MILLI, 1024))
    jobs = tuple(
        Job(
            f"p{j}",
            draw(st.sampled_from([512, 1024, 2048, 3072])),
            draw(st.sampled_from([1, 8, 32])),
            cpu_milli=draw(st.sampled_from([1, 2])) * MILLI,
            memory_mib=draw(st.sampled_from([512, 2048])),
            submit_time_s=float(j),
        )
        for j in range(draw(st.integers(1, 24)))
    )
    return Snapshot(tuple(made), tuple(running), jobs)


def every_device(pot: Potential, job: Job, ok: np.ndarray) -> int | None:
    """The device the rule picks when every fitting device is scored."""
    cand = np.flatnonzero(ok)
    if len(cand) == 0:
        return None
    nodes = pot.state.dev_node[cand]
    rise, b = pot._moves(job, cand, nodes)
    return int(cand[potential_module._first_least(rise, b, pot.free_total[nodes])])


@given(clusters(), st.booleans())
def test_the_indexed_search_picks_what_scoring_every_device_picks(
    snapshot: Snapshot, strict: bool
) -> None:
    state = ClusterState(snapshot, strict_threads=strict)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(potential_module, "GROUP_FROM_NODES", 0)  # group even a few nodes
        pot = Potential(state, snapshot_shapes(snapshot))
        assert pot.grouped
        placed = []
        for job in snapshot.pending:
            ok = state.device_ok(job)
            want = every_device(pot, job, ok)
            got = pot.best(job, ok)
            assert (got[1] if got else None) == (None if want is None else [want]), job.id
            if got is not None:
                state.place(job, got[0], got[1])
                pot.changed(got[0])
                placed.append(job)
            # a node's group is keyed by the same bytes however its key was read
            for n in range(len(state.nodes)):
                assert pot._row_key(n) == pot._rows(np.array([n]))[0].tobytes()
        # the relocation pass, step by step, against the same reference
        checked = []

        def ok_of(job: Job) -> np.ndarray:
            ok = state.device_ok(job)
            want = every_device(pot, job, ok)
            checked.append((job.id, want))
            return ok

        before = list(state.assignments)
        pot.relocate(placed, 0, ok_of)
        assert len(checked) == len(placed)
        chosen = {
            a.job: int(state._local[state.node_index[a.node]][a.devices[0]])
            for a in state.assignments
        }
        assert len(state.assignments) == len(before)
        for job_id, want in checked:
            assert want is not None, job_id  # its own place was free again
        # where each job ended up is what the full scoring picked at its turn
        assert [chosen[j] for j, _ in checked] == [w for _, w in checked]
