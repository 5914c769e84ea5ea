"""Node facts in the simulator: a policy sees the fields a live cycle reads, as node daemons
sampling every interval would measure them (coshare.sim.facts)."""

from __future__ import annotations

from coshare.ledger.facts import JobLoad
from coshare.model import MILLI, Job, Node, Plan, Snapshot
from coshare.policies import make_policy
from coshare.sim.device import FixedModel
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.facts import JobTraits, MeasuredFacts, NodeHardware
from coshare.sim.jobs import host_only


class Spy:
    """The exclusive policy, keeping every snapshot it was given."""

    def __init__(self) -> None:
        self.inner = make_policy("exclusive")
        self.seen: list[Snapshot] = []

    @property
    def name(self) -> str:
        return "spy"

    def plan(self, snapshot: Snapshot) -> Plan:
        self.seen.append(snapshot)
        return self.inner.plan(snapshot)


def cpu_job(ident: str, submit: float, cores: int = 2) -> Job:
    return Job(
        ident,
        device_count=0,
        kind="cpu",
        cpu_milli=cores * MILLI,
        memory_mib=64,
        submit_time_s=submit,
    )


def test_policies_see_loads_bandwidth_and_ways_as_sampled() -> None:
    nodes = [Node("n1", 8 * MILLI, 65536)]
    jobs = [
        host_only(cpu_job("gpu-job", 0.0), 1000.0),
        host_only(cpu_job("late", 150.0), 10.0),
        host_only(cpu_job("later", 200.0), 10.0),
    ]
    model = MeasuredFacts(
        traits={"gpu-job": JobTraits(cpu_load_cores=2.5, membw_share=0.4, llc_ways=6)},
        default=NodeHardware(membw_baseline_gbps=20.0, probe_cores=4, llc_ways=20),
        sample_interval_s=60,
        history=2,
    )
    spy = Spy()
    simulate(
        nodes, jobs, spy, options=SimOptions(cycle_delay_s=1.0), model=FixedModel(), facts=model
    )
    by_time = {s.now_s: s for s in spy.seen}
    first = by_time[1.0]  # the first cycle: nothing runs yet
    assert (first.nodes[0].facts_at_s, first.nodes[0].membw_avail_gbps) == (0.0, 20.0)
    assert first.nodes[0].llc_ways_free == 20
    late = by_time[151.0]  # sampled at 120: gpu-job started at 1, sampled from 60 on
    (running,) = [r for r in late.running if r.id == "gpu-job"]
    assert (running.cpu_load_cores, running.cpu_load_window_s) == (2.5, 60.0)
    node = late.nodes[0]
    assert (node.facts_at_s, node.membw_avail_gbps, node.membw_baseline_gbps) == (120.0, 12.0, 20.0)
    assert (node.llc_ways, node.llc_ways_free) == (20, 14)
    later = by_time[201.0]  # sampled at 180: two intervals of history (its limit)
    (running,) = [r for r in later.running if r.id == "gpu-job"]
    assert running.cpu_load_window_s == 120.0
    assert all(r.cpu_load_cores is None for r in later.running if r.id == "late")


def test_the_probe_never_reads_zero_and_unknown_nodes_have_no_facts() -> None:
    nodes = (Node("n1", 8 * MILLI, 1), Node("n2", 8 * MILLI, 1))
    from coshare.model import RunningJob

    running = (
        RunningJob("a", "n1", start_time_s=0.0),
        RunningJob("b", "n1", start_time_s=0.0),
        RunningJob("c", "n1", start_time_s=0.0, state="planned"),
    )
    model = MeasuredFacts(
        traits={
            "a": JobTraits(membw_share=0.7, cpu_load_cores=1.0),
            "b": JobTraits(membw_share=0.6),
            "c": JobTraits(membw_share=0.9),
        },
        hardware={"n1": NodeHardware(membw_baseline_gbps=10.0)},
    )
    facts = model.facts(130.0, nodes, running)
    assert set(facts) == {"n1"}
    membw = facts["n1"].membw
    assert membw is not None and membw.avail_gbps == 10.0 * 0.05 and membw.at_s == 120.0
    assert facts["n1"].loads == (JobLoad("a", 1.0, 1.0, 1.0, 120.0),)
    assert facts["n1"].llc_ways is None and facts["n1"].llc_ways_free is None
