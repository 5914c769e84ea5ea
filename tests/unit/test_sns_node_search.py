"""The ``sns`` and ``cs`` node search over columns (any number of nodes, array operations)
chooses the same nodes as the search it replaced, a loop over every node per demand, kept
here as the reference: equal plans on random snapshots of varied nodes, running jobs and
pending jobs (profiled, unprofiled, gangs)."""

from __future__ import annotations

from dataclasses import dataclass

from coshare.model import MILLI, Job, Node, RunningJob, Snapshot
from coshare.policies.sns import SnsPolicy, _Node, _Table
from coshare.profiles.programs import Demand, parse_profile
from hypothesis import given
from hypothesis import strategies as st

MG = parse_profile(
    {
        "program": "MG",
        "run_time_s": {"1": 100.0, "2": 89.0, "4": 82.0, "8": 76.0},
        "ways": [2, 3, 20],
        "ipc": [0.8, 0.9, 1.0],
        "membw_gbps": [100.0, 96.0, 80.0],
    },
    "MG.json",
)
EP = parse_profile(
    {
        "program": "EP",
        "run_time_s": {"1": 100.0, "2": 99.0, "4": 98.0, "8": 97.0},
        "ways": [2, 20],
        "ipc": [0.95, 1.0],
        "membw_gbps": [30.0, 30.0],
    },
    "EP.json",
)


@dataclass(frozen=True)
class EveryNode(SnsPolicy):
    """The search as it was: each node tested in turn, then ranked by score."""

    def _node_ok(self, job: Job, d: Demand, node: _Node, share: int, empty: bool) -> bool:
        cores = node.cores if empty else node.free_cores
        memory = node.memory - (0 if empty else node.used_memory)
        if job.cpu_milli * share > cores or job.memory_mib * share > memory:
            return False
        if self.mode == "cs":
            return True
        if d.ways is not None and node.ways is not None:
            free = node.ways if empty else node.free_ways
            if free is not None and d.ways > free:
                return False
        if d.membw_gbps is not None and node.membw is not None:
            used = 0.0 if empty else node.used_membw
            if used > 0 and used + d.membw_gbps * share / d.cores_per_node > node.membw:
                return False  # a job alone on a node always fits its bandwidth
        return True

    def _fits(self, job: Job, d: Demand, table: _Table, empty: bool = False) -> list[int] | None:
        """The ``n`` nodes for demand ``d``, or ``None``."""
        nodes = table.nodes
        big = d.cores_per_node
        ok = [i for i, n in enumerate(nodes) if self._node_ok(job, d, n, big, empty)]
        if len(ok) < d.nodes:
            return None
        if empty:
            return ok[: d.nodes]
        cores_only = self.mode == "cs"
        rank = sorted(ok, key=lambda i: (nodes[i].score(self.ways_weight, cores_only), i))
        groups: dict[int, list[int]] = {}
        for i in rank:
            groups.setdefault(nodes[i].free_cores, []).append(i)
        for idle in sorted(groups):
            if len(groups[idle]) >= d.nodes:
                return groups[idle][: d.nodes]
        return rank[: d.nodes]


nodes_st = st.lists(
    st.tuples(
        st.integers(1, 16),
        st.integers(1, 8),
        st.none() | st.integers(4, 20),
        st.none() | st.sampled_from([0.0, 50.0, 100.0]),
        st.none() | st.integers(0, 20),
    ),
    min_size=1,
    max_size=12,
)
jobs_st = st.lists(
    st.tuples(
        st.integers(1, 4),
        st.integers(1, 4),
        st.integers(1, 12),
        st.sampled_from(["MG", "EP", "other", None]),
        st.integers(1, 3),
        st.integers(1, 6),
        st.integers(0, 2),
    ),
    max_size=20,
)
running_st = st.lists(
    st.tuples(
        st.integers(0, 11),
        st.integers(1, 8),
        st.none() | st.integers(1, 6),
        st.none() | st.sampled_from([10.0, 40.0]),
        st.sampled_from(["MG", "EP", None]),
    ),
    max_size=8,
)


def snapshot(nodes: list, jobs: list, running: list) -> Snapshot:
    ns = tuple(
        Node(f"n{i}", c * MILLI, m * 1024, llc_ways=w, membw_gbps=bw, llc_ways_free=cap)
        for i, (c, m, w, bw, cap) in enumerate(nodes)
    )
    rs = tuple(
        RunningJob(
            f"r{i}",
            f"n{k % len(ns)}",
            cpu_milli=c * 500,
            memory_mib=256,
            llc_ways=w,
            membw_gbps=bw,
            program=p,
        )
        for i, (k, c, w, bw, p) in enumerate(running)
    )
    js = tuple(
        Job(
            f"j{i}",
            0,
            0,
            0,
            c * 500,
            m * 512,
            prio,
            float(i),
            kind="cpu",
            processes=procs,
            program=p,
            nodes=lo,
            nodes_max=lo + span - 1,
        )
        for i, (c, m, procs, p, lo, span, prio) in enumerate(jobs)
    )
    return Snapshot(nodes=ns, running=rs, pending=js)


@given(
    nodes=nodes_st,
    jobs=jobs_st,
    running=running_st,
    cs=st.booleans(),
    weight=st.sampled_from([0.0, 1.0, 2.0, 2.5]),
)
def test_the_column_search_plans_as_the_search_over_every_node(
    nodes: list, jobs: list, running: list, cs: bool, weight: float
) -> None:
    snap = snapshot(nodes, jobs, running)
    mode = "cs" if cs else "sns"
    profiles = {"MG": MG, "EP": EP}
    new = SnsPolicy(profiles, mode, ways_weight=weight).plan(snap)
    old = EveryNode(profiles, mode, ways_weight=weight).plan(snap)
    assert new == old
