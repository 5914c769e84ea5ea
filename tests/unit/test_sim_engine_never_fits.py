"""The engine decides a job no node can hold once: it is never planned again, so a log full
of such jobs costs each of them one cycle, not every cycle."""

from __future__ import annotations

from dataclasses import dataclass, field

from coshare.model import MILLI, Job, Node, Plan, Snapshot
from coshare.policies import make_policy
from coshare.policies.base import Policy
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.jobs import host_only


@dataclass
class Counting:
    """A policy that counts the pending jobs each cycle hands it."""

    inner: Policy
    seen: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def plan(self, snapshot: Snapshot) -> Plan:
        self.seen.append(len(snapshot.pending))
        return self.inner.plan(snapshot)


def test_a_job_no_node_can_hold_is_planned_once_and_reported_not_run() -> None:
    nodes = (Node("n1", 4 * MILLI, 8192), Node("n2", 4 * MILLI, 8192))
    jobs = []
    for k in range(200):
        huge = k % 2 == 0  # half ask more memory than any node has
        job = Job(
            str(k),
            device_count=0,
            kind="cpu",
            cpu_milli=MILLI,
            memory_mib=65536 if huge else 1024,
            submit_time_s=float(k * 10),
        )
        jobs.append(host_only(job, 5.0))
    policy = Counting(make_policy("exclusive"))
    result = simulate(nodes, jobs, policy, options=SimOptions(cycle_delay_s=1.0))
    assert sorted(result.not_run, key=int) == [str(k) for k in range(0, 200, 2)]
    assert sum(r.start_s is not None for r in result.jobs) == 100
    # each huge job was in one cycle's snapshot, not in every cycle after its arrival
    assert sum(policy.seen) <= 2 * 200
    assert max(policy.seen) <= 2
