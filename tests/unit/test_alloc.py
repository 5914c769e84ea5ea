"""The distributed allocation protocol (PICASO): layouts, section 4.4's trees, the
reservation store, and the protocol's invariants on random layouts and arrival orders."""

from __future__ import annotations

from itertools import pairwise

import pytest
from coshare.alloc.layout import Domain, Layout, tile
from coshare.alloc.propagation import (
    SCHEMES,
    Propagation,
    adaptive_parents,
    broadcast_messages,
    distances,
    fixed_parents,
    flooding_messages,
    paper_broadcast_messages,
)
from coshare.alloc.protocol import Gang, check_gang
from coshare.alloc.store import InMemoryReservationStore
from coshare.errors import DoubleBooking, InputError
from coshare.sim.picaso import ProtocolRun, run_protocol
from hypothesis import given
from hypothesis import strategies as st

# -- layouts --------------------------------------------------------------------------------


def test_two_domains_claiming_one_node_are_refused_naming_both() -> None:
    a = Domain("schedd-a", (("node1", 8), ("node2", 8)))
    b = Domain("schedd-b", (("node3", 8), ("node2", 4)))
    with pytest.raises(
        InputError,
        match=r"node 'node2' is claimed by domain 'schedd-a' and "
        r"domain 'schedd-b'",
    ):
        Layout((a, b), 1, 2)


@pytest.mark.parametrize(
    ("domains", "rows", "cols", "message"),
    [
        ((Domain("a", ()),), 1, 1, "nodes is empty"),
        ((Domain("a", (("n", 0),)),), 1, 1, "has 0 cores; allowed 1..4096"),
        ((Domain("a", (("n", 1),)), Domain("a", (("m", 1),))), 1, 2, "two domains are named 'a'"),
        ((Domain("a", (("n", 1),)),), 1, 2, "holds 2 domains, not 1"),
    ],
)
def test_bad_layouts_are_refused(
    domains: tuple[Domain, ...], rows: int, cols: int, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        Layout(domains, rows, cols)


def test_a_tile_is_a_mesh_with_its_centre() -> None:
    layout = tile(7)
    assert layout.size == 49 and layout.total_cores == 49 * 8
    assert layout.neighbours(0) == (1, 7)
    assert layout.neighbours(24) == (17, 23, 25, 31)
    assert layout.hops(0, 48) == 12
    assert layout.centre() == 24
    assert layout.links() == 2 * 7 * 6


# -- section 4.4's propagation patterns --------------------------------------------------------

meshes = st.tuples(st.integers(1, 6), st.integers(1, 6))


def _depth(parents: dict[int, int], node: int) -> int:
    hops = 0
    while node in parents:
        node, hops = parents[node], hops + 1
        assert hops <= len(parents), "the parents make a cycle"
    return hops


@given(meshes, st.data())
def test_both_patterns_are_shortest_path_spanning_trees(
    mesh: tuple[int, int], data: st.DataObject
) -> None:
    layout = tile(*mesh, cores_per_domain=1)
    source = data.draw(st.integers(0, layout.size - 1))
    dist = distances(layout, source)
    for parents in (fixed_parents(layout, source), adaptive_parents(layout, source)):
        assert set(parents) == set(range(layout.size)) - {source}
        for node, parent in parents.items():
            assert parent in layout.neighbours(node)
            assert _depth(parents, node) == dist[node] == layout.hops(source, node)


@given(meshes, st.data())
def test_broadcast_counts_match_section_7_6(mesh: tuple[int, int], data: st.DataObject) -> None:
    layout = tile(*mesh, cores_per_domain=1)
    source = data.draw(st.integers(0, layout.size - 1))
    assert broadcast_messages(layout, source, "naive") == layout.size - 1
    assert broadcast_messages(layout, source, "fixed") == layout.size - 1
    assert broadcast_messages(layout, source, "adaptive") == layout.size - 1
    # A mesh is bipartite: under unit latency flooding crosses every link exactly once.
    assert flooding_messages(layout, source) == layout.links()
    assert (
        Propagation(layout, "adaptive").setup_messages(source) == layout.links() + layout.size - 1
    )


@pytest.mark.parametrize("n", range(2, 8))
def test_the_paper_formulas_on_its_tiles(n: int) -> None:
    layout = tile(n)
    for scheme in SCHEMES:
        assert broadcast_messages(layout, 0, scheme) == paper_broadcast_messages(n, scheme)
    assert paper_broadcast_messages(n, "flooding") == 2 * n * (n - 1)


def test_the_fixed_pattern_from_a_corner_is_fig_3a() -> None:
    # Source at a corner: its column carries the message on, every node of it along its row.
    assert fixed_parents(tile(3), 0) == {3: 0, 6: 3, 1: 0, 2: 1, 4: 3, 5: 4, 7: 6, 8: 7}


def test_the_adaptive_tree_of_a_3x3_tile_differs_from_fig_3c_only_in_tie_breaks() -> None:
    ours = adaptive_parents(tile(3), 0)
    # Fig. 3(c), nodes 1-9 renumbered 0-8: 1->2,4; 2->3,5; 4->7; 5->8,6; 8->9.
    figure = {1: 0, 3: 0, 2: 1, 4: 1, 6: 3, 7: 4, 5: 4, 8: 7}
    assert {n for n in ours if ours[n] != figure[n]} == {5, 8}
    dist = distances(tile(3), 0)
    assert all(dist[figure[n]] == dist[n] - 1 for n in figure)  # the figure's is shortest too


# -- the reservation store --------------------------------------------------------------------


def test_the_store_refuses_a_second_booking_and_changes_nothing() -> None:
    store = InMemoryReservationStore(tile(1, 2, cores_per_domain=2))
    store.reserve(0, "a", ["n0/0"])
    with pytest.raises(DoubleBooking, match=r"core n0/0 is booked by job 'a'; job 'b'"):
        store.reserve(0, "b", ["n0/1", "n0/0"])
    assert store.free(0) == ("n0/1",)
    with pytest.raises(DoubleBooking, match="another domain"):
        store.reserve(0, "b", ["n1/0"])
    with pytest.raises(DoubleBooking):
        store.hold(0, "b", ["n0/0"])  # b does not reserve it


def test_hold_keeps_the_chosen_cores_and_releases_the_rest() -> None:
    store = InMemoryReservationStore(tile(1, 1, cores_per_domain=4))
    store.reserve(0, "a", ["n0/0", "n0/1", "n0/2"])
    assert store.hold(0, "a", ["n0/1"]) == ("n0/0", "n0/2")
    assert store.booked(0, "a", "held") == ("n0/1",)
    assert store.free(0) == ("n0/0", "n0/2", "n0/3")
    assert store.release(0, "a") == ("n0/1",)
    assert store.holders() == {}


# -- the protocol ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["cancel", "sequencer"])
def test_fig_2s_deadlock_is_avoided(policy: str) -> None:
    # Two domains of 8 cores; jobs of 12 and 16 cores submitted at once at each: piecewise
    # allocation holds 8 + 8 and waits forever (Fig. 2). Both policies allocate both.
    layout = tile(1, 2)
    jobs = [Gang("a", 0, 12, 0, 5), Gang("b", 1, 16, 0, 5)]
    run = run_protocol(layout, jobs, policy)  # type: ignore[arg-type]
    assert all(r.allocated_at is not None for r in run.jobs)
    a, b = run.jobs
    assert a.allocated_at is not None and b.allocated_at is not None
    assert a.allocated_at < b.allocated_at  # a is older (same time, lower home id)
    assert b.allocated_at >= a.allocated_at + a.job.run  # b needs a's cores
    if policy == "cancel":
        assert (a.cancels, b.cancels, b.attempts) == (0, 1, 2)


def test_a_gang_wider_than_all_domains_never_fits_and_the_others_run() -> None:
    layout = tile(2)
    jobs = [Gang("wide", 0, 33, 0, 1), Gang("ok", 1, 20, 0, 1), Gang("bad", 7, 1, 0, 1)]
    run = run_protocol(layout, jobs, "cancel")
    assert [(r.job, r.code) for r in run.refused] == [("wide", "never_fits"), ("bad", "invalid")]
    assert run.refused[0].message == (
        "job wide: asks for 33 cores; all 4 domains together have 32 (never_fits)"
    )
    assert run.refused[1].message == "job bad: home is 7; allowed a domain index 0..3"
    assert [r.job.id for r in run.jobs] == ["ok"] and run.jobs[0].allocated_at is not None


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (Gang("x", 0, 0), "cores is 0"),
        (Gang("x", 0, 1, -1), "submit is -1"),
        (Gang("x", 0, 1, 0, 10**13), "run is 10000000000000"),
    ],
)
def test_out_of_range_fields_are_refused_by_name(job: Gang, field: str) -> None:
    refusal = check_gang(job, tile(2))
    assert refusal is not None and refusal.code == "invalid" and field in refusal.message


def test_a_job_its_home_can_hold_is_decided_there_without_messages() -> None:
    run = run_protocol(tile(3), [Gang("small", 4, 8, 0, 3)], "cancel")
    assert run.jobs[0].local and run.jobs[0].wait == 1  # one handled event
    assert run.total_messages == 0


@pytest.mark.parametrize("n", range(2, 8))
def test_section_7_3_count_on_the_tiles(n: int) -> None:
    # n simultaneous jobs of n domains each on an n x n tile: one request for the highest,
    # and an initial request, a cancel and a repeat for each of the n - 1 others.
    jobs = [Gang(f"j{i}", i * n + i, 8 * n, 0, 500) for i in range(n)]
    run = run_protocol(tile(n), jobs, "cancel")
    assert run.broadcasts() == 1 + 3 * (n - 1)
    assert run.messages["cancel"] == (n - 1) * (n * n - 1)


# -- properties on random layouts and arrival orders ------------------------------------------


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Layout, list[Gang]]:
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    domains = []
    for i in range(rows * cols):
        nodes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
        domains.append(Domain(f"d{i}", tuple((f"n{i}-{k}", c) for k, c in enumerate(nodes))))
    layout = Layout(tuple(domains), rows, cols)
    jobs = [
        Gang(
            f"j{k}",
            draw(st.integers(0, layout.size - 1)),
            draw(st.integers(1, layout.total_cores)),
            draw(st.integers(0, 15)),
            draw(st.integers(1, 25)),
        )
        for k in range(draw(st.integers(1, 7)))
    ]
    return layout, jobs


def _check(run: ProtocolRun, jobs: list[Gang]) -> None:
    # Every gang is allocated, the oldest included, and the run drained (no deadlock: a
    # stuck job raises ProtocolStuck, a double booking DoubleBooking, inside run_protocol).
    assert sorted(r.job.id for r in run.jobs) == sorted(j.id for j in jobs)
    assert all(r.allocated_at is not None and r.wait is not None and r.wait >= 0 for r in run.jobs)
    for result in run.jobs:
        used = [c for _, cores in result.use for c in cores]
        assert len(used) == len(set(used)) == result.job.cores
    # Section 4's counts from attempts and cancels equal the messages actually sent.
    for kind, count in run.expected.items():
        assert run.messages[kind] == count, kind
    if run.policy == "sequencer":
        assert run.messages["cancel"] == 0 and all(r.attempts <= 1 for r in run.jobs)


@given(worlds(), st.sampled_from(["cancel", "sequencer"]), st.sampled_from(["fixed", "adaptive"]))
def test_every_gang_is_allocated_once_with_the_formula_counts(
    world: tuple[Layout, list[Gang]], policy: str, pattern: str
) -> None:
    layout, jobs = world
    run = run_protocol(layout, jobs, policy, pattern)  # type: ignore[arg-type]
    _check(run, jobs)


@given(worlds())
def test_simultaneous_full_width_gangs_are_served_one_by_one(
    world: tuple[Layout, list[Gang]],
) -> None:
    # The worst case of section 7.4 on random layouts: every job needs every core.
    layout, drawn = world
    jobs = [Gang(j.id, j.home, layout.total_cores, 0, j.run) for j in drawn]
    for policy in ("cancel", "sequencer"):
        run = run_protocol(layout, jobs, policy)  # type: ignore[arg-type]
        _check(run, jobs)
        spans = sorted((r.allocated_at or 0, r.ended_at or 0) for r in run.jobs)
        assert all(later[0] >= earlier[1] for earlier, later in pairwise(spans))
