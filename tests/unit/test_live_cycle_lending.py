"""Lent cores on the in-memory scheduler: a CPU-only job whose placement names a running GPU
job (``harvest_from``, as ``collocate`` plans it) starts only on the cores that job may lend,
never oversubscribes them, and runs on the node's cores once the lender has ended or been
requeued; whole cycles of ``collocate`` lend and hand back the same way."""

from __future__ import annotations

from dataclasses import replace

from coshare.cycle.run import harvest_refusal, run_cycle
from coshare.ledger.book import Placed
from coshare.model import MILLI, Device, Job, Node
from coshare.policies.collocate import CollocatePolicy
from coshare.sim.facts import JobTraits, MeasuredFacts, NodeHardware
from coshare.sim.memory_scheduler import MemoryAdapter, MemoryScheduler, problems

NODE = Node("n1", 12 * MILLI, 65536, (Device("0", 6144, 1024, "m2070"),))


def gpu(job_id: str = "g", walltime_s: float | None = 300.0) -> Job:
    return Job(
        job_id,
        512,
        64,
        cpu_milli=12 * MILLI,
        memory_mib=4096,
        walltime_s=walltime_s,
        copy_bw_mbps=10.0,
    )


def cpu(job_id: str, cores: int, walltime_s: float = 100.0) -> Job:
    return Job(
        job_id,
        device_count=0,
        kind="cpu",
        cpu_milli=cores * MILLI,
        memory_mib=cores * 512,
        walltime_s=walltime_s,
    )


def place(s: MemoryScheduler, job: Job, run_s: float, harvest_from: str | None = None) -> None:
    """Submit ``job`` with a placement on n1 (on ``harvest_from``'s cores) and its gate open,
    as a cycle's write leaves it."""
    record = s.submit(job, run_s)
    devices = ("0",) if job.needs_device else ()
    record.placed = Placed("n1", devices, s.now, harvest_from=harvest_from)
    s.open_gate(record)


def lending() -> MemoryScheduler:
    """n1's 12 cores all held by GPU job g (running until 200 s)."""
    s = MemoryScheduler((NODE,))
    place(s, gpu(), 200.0)
    assert s.start_ready() == ["g"]
    return s


def test_a_borrower_starts_only_on_the_cores_its_lender_may_lend() -> None:
    s = lending()
    place(s, cpu("plain", 2), 50.0)  # the node's own cores: g holds all 12
    place(s, cpu("b1", 8), 50.0, harvest_from="g")
    place(s, cpu("b2", 4), 50.0, harvest_from="g")  # 8 + 4 > 11: g keeps one core
    place(s, cpu("nobody", 1), 50.0, harvest_from="absent")  # no such lender runs
    assert s.start_ready() == ["b1"]
    [held] = s.records["b1"].holds
    assert held.harvest_from == "g" and held.cpu_milli == 8 * MILLI
    assert s.lendable_milli("g", "n1") == 3 * MILLI
    assert problems(s) == []


def test_a_borrower_never_starts_on_a_cpu_job_or_before_its_lender_runs() -> None:
    s = MemoryScheduler((NODE,))
    place(s, cpu("c", 4), 500.0)
    place(s, cpu("b", 2), 50.0, harvest_from="c")  # a CPU job lends nothing
    place(s, cpu("early", 2), 50.0, harvest_from="g")  # g is not running yet
    assert s.start_ready() == ["c"]
    assert s.lendable_milli("c", "n1") == 0 and s.lendable_milli("g", "n1") == 0


def test_the_lenders_end_hands_its_cores_to_the_node_and_its_borrowers_run_on() -> None:
    s = lending()
    place(s, cpu("b1", 8), 500.0, harvest_from="g")
    assert s.start_ready() == ["b1"]  # on g's cores, beside it
    s.advance(200.0)  # g ends; b1 runs until 500 s
    assert s.records["g"].state == "ended" and s.records["b1"].state == "running"
    [held] = s.records["b1"].holds
    assert held.harvest_from is None  # the node's cores now, as the ledger counts it
    place(s, cpu("big", 5), 50.0)  # 8 + 5 > 12
    place(s, cpu("small", 4), 50.0)
    place(s, cpu("late", 1), 50.0, harvest_from="g")  # g lends nothing any more
    assert s.start_ready() == ["small"]
    assert problems(s) == []


def test_a_requeued_lender_hands_its_cores_back_and_a_borrower_that_ends_returns_them() -> None:
    s = lending()
    place(s, cpu("b1", 8), 20.0, harvest_from="g")
    place(s, cpu("b2", 3), 500.0, harvest_from="g")
    assert s.start_ready() == ["b1", "b2"]
    assert s.lendable_milli("g", "n1") == 0
    s.advance(20.0)  # b1 ends: its 8 cores go back to g
    assert s.lendable_milli("g", "n1") == 8 * MILLI
    s.requeue("g", "its load rose")
    assert [h.harvest_from for h in s.records["b2"].holds] == [None]
    assert s._free_cpu["n1"] == 9 * MILLI  # b2's 3 cores count against the node now
    assert problems(s) == []


def test_problems_names_a_lender_that_lends_too_much_and_a_loan_not_handed_back() -> None:
    s = lending()
    place(s, cpu("b", 8), 500.0, harvest_from="g")
    s.start_ready()
    record = s.records["b"]
    [held] = record.holds
    record.holds = (replace(held, cpu_milli=12 * MILLI),)
    assert any("more than the 12 it holds less the one it keeps" in p for p in problems(s))
    record.holds = (held,)
    s.records["g"].state = "ended"  # the lender left without handing its cores back
    assert any("runs no GPU job there" in p for p in problems(s))


def test_a_collocate_cycle_lends_after_the_monitoring_period_and_the_node_keeps_count() -> None:
    """The whole cycle: read (with the node daemons' loads), collocate's plan, the write
    protocol; the scheduler starts the borrower on the GPU job's cores."""
    facts = MeasuredFacts(
        traits={"g": JobTraits(cpu_load_cores=2.0)}, default=NodeHardware(), sample_interval_s=60
    )
    s = MemoryScheduler((NODE,), facts=facts)
    adapter = MemoryAdapter(s)
    s.submit(gpu(), 400.0)
    s.submit(cpu("c", 8), 50.0)
    policy = CollocatePolicy()
    for t in (0.0, 60.0):
        s.advance(t)
        run_cycle(adapter, policy, adapter)
        s.start_ready()
        assert s.records["c"].state == "pending"  # g is watched: 1/3 of 300 s, a load at 120
    s.advance(120.0)
    report = run_cycle(adapter, policy, adapter)
    s.start_ready()
    assert report.apply.applied == ("c",)
    placed = s.records["c"].placed
    assert placed is not None and placed.harvest_from == "g"
    assert s.records["c"].state == "running" and s.records["c"].holds[0].harvest_from == "g"
    assert s._free_cpu["n1"] == 0  # g's 12 cores, the borrower inside them
    assert problems(s) == []
    s.advance(170.0)
    # the borrower's cores are g's again (the scheduler's bound: all but one; the policy's
    # pool, P_B and the load, is the plan's to keep)
    assert s.records["c"].state == "ended" and s.lendable_milli("g", "n1") == 11 * MILLI


def test_the_in_memory_adapter_applies_harvest_placements() -> None:
    """The live cycle keeps a plan's harvest placements for this Editor (its capability)."""
    assert harvest_refusal(MemoryAdapter(MemoryScheduler((NODE,)))) is None


def test_a_borrower_the_cycle_requeues_gives_its_cores_back_and_runs_after_the_lender() -> None:
    """The lender's load rises past what it lent: collocate asks the borrower back, the
    write protocol requeues it through the scheduler, and its cores are the lender's again."""
    traits = {"g": JobTraits(cpu_load_cores=2.0)}
    facts = MeasuredFacts(traits=traits, default=NodeHardware(), sample_interval_s=60)
    s = MemoryScheduler((NODE,), facts=facts)
    adapter = MemoryAdapter(s)
    s.submit(gpu(walltime_s=300.0), 400.0)
    s.submit(cpu("c", 8, walltime_s=150.0), 140.0)  # ends within g's request
    policy = CollocatePolicy()
    for t in (0.0, 60.0, 120.0):
        s.advance(t)
        run_cycle(adapter, policy, adapter)
        s.start_ready()
    assert s.records["c"].state == "running" and s.lendable_milli("g", "n1") == 3 * MILLI
    traits["g"] = JobTraits(cpu_load_cores=8.0)  # g now keeps 8 cores busy: 4 idle
    s.advance(180.0)
    report = run_cycle(adapter, policy, adapter)
    s.start_ready()
    assert [o.job for o in report.apply.requeued] == ["c"]
    record = s.records["c"]
    assert (record.state, record.placed, record.holds) == ("pending", None, ())
    assert record.requeued is not None and s.lendable_milli("g", "n1") == 11 * MILLI
    assert problems(s) == []
    s.advance(420.0)  # g ended at 400: c is placed on the node's own cores
    run_cycle(adapter, policy, adapter)
    s.start_ready()
    assert record.state == "running" and record.start_s == 420.0 and record.starts == 2
    assert record.placed is not None and record.placed.harvest_from is None
