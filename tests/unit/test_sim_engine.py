"""The simulator's engine and the shared-device model: invariants at every simulated instant
and the behaviours of the paper's Figs. 2 and 3."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from coshare.model import MILLI, Device, Job, Node, Plan, Snapshot
from coshare.model import Assignment as Assign
from coshare.policies import PolicyOptions, make_policy
from coshare.sim.device import FixedModel, OffloadModel
from coshare.sim.engine import SimOptions, SimResult, SimulationError, simulate
from coshare.sim.jobs import SimJob, host_only, split_phases
from hypothesis import given, settings
from hypothesis import strategies as st

EPS = 1e-6


def phi(
    name: str, memory: int = 8192, threads: int = 240, devices: int = 1, cores: int = 16
) -> Node:
    return Node(
        name, cores * MILLI, 65536, tuple(Device(str(i), memory, threads) for i in range(devices))
    )


def job(
    ident: str, memory: int, threads: int, phases: tuple[float, ...], submit: float = 0.0
) -> SimJob:
    return SimJob(Job(ident, memory, threads, memory_mib=1024, submit_time_s=submit), phases)


def max_concurrent(intervals: list[tuple[float, float, int]]) -> int:
    """The most threads in use at once over (start, end, threads) intervals (ends first)."""
    events = sorted([(s, 1, t) for s, _, t in intervals] + [(e, 0, -t) for _, e, t in intervals])
    level = peak = 0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def memory_peaks(result: SimResult, jobs: list[SimJob]) -> dict[tuple[str, str], int]:
    """Declared memory held at once per device, recomputed from the job records."""
    mem = {s.job.id: s.job.device_memory_mib for s in jobs}
    events: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for r in result.jobs:
        if r.start_s is None or r.end_s is None:
            continue
        for d in r.devices:
            events[(r.node, d)] += [(r.start_s, mem[r.id]), (r.end_s, -mem[r.id])]
    peaks = {}
    for key, evs in events.items():
        level = peak = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # releases before takes
            level += delta
            peak = max(peak, level)
        peaks[key] = peak
    return peaks


@st.composite
def workloads(draw: st.DrawFn) -> tuple[tuple[Node, ...], list[SimJob]]:
    nodes = tuple(
        phi(
            f"n{i}",
            draw(st.sampled_from((2048, 8192))),
            draw(st.sampled_from((60, 240))),
            draw(st.integers(1, 2)),
            draw(st.sampled_from((2, 16))),
        )
        for i in range(draw(st.integers(1, 3)))
    )
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        offloads = draw(st.integers(0, 4))
        phases = tuple(float(draw(st.integers(0, 20))) for _ in range(2 * offloads + 1))
        jobs.append(
            job(
                f"j{i}",
                draw(st.integers(1, 9000)),
                draw(st.sampled_from((1, 60, 120, 180, 240, 300))),
                phases,
                float(draw(st.sampled_from((0, 0, 5, 13)))),
            )
        )
    return nodes, jobs


CASES = [
    (p, t)
    for p in ("exclusive", "random", "knapsack", "bestfit", "fgd")
    for t in ("strict", "soft")
]


@pytest.mark.parametrize(("name", "threads"), CASES)
@settings(max_examples=150)
@given(case=workloads(), delay=st.sampled_from((0.0, 1.0, 7.5)))
def test_no_instant_oversubscribes_and_every_job_ends_once(
    name: str, threads: str, case: tuple[tuple[Node, ...], list[SimJob]], delay: float
) -> None:
    nodes, jobs = case
    model = OffloadModel(record=True)
    policy = make_policy(name, PolicyOptions(threads=threads, seed=5, age_limit_s=None))  # type: ignore[arg-type]
    options = SimOptions(cycle_delay_s=delay, verify=True, strict_threads=threads == "strict")
    result = simulate(nodes, jobs, policy, options=options, model=model)

    fits = {
        s.job.id
        for s in jobs
        if any(
            d.memory_mib >= s.job.device_memory_mib and d.threads >= s.job.device_threads
            for n in nodes
            for d in n.devices
        )
    }
    assert set(result.not_run) == {s.job.id for s in jobs} - fits
    by_id = {s.job.id: s for s in jobs}
    for r in result.jobs:
        if r.id not in fits:
            continue
        assert r.start_s is not None and r.end_s is not None
        assert r.start_s >= by_id[r.id].job.submit_time_s  # and at a cycle, which may be due
        assert r.end_s - r.start_s >= by_id[r.id].duration_s - EPS
    # device memory: never more declared than the device has, recounted from the records
    capacity = {(n.name, d.id): d for n in nodes for d in n.devices}
    for key, peak in memory_peaks(result, jobs).items():
        assert peak <= capacity[key].memory_mib
    # offload threads: never more at once than the device has, recounted from the offloads
    dev_threads = [d.threads for n in nodes for d in n.devices]
    per_device: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for device, start, end, used, _ in model.offloads:
        per_device[device].append((start, end, used))
    for device, intervals in per_device.items():
        assert max_concurrent(intervals) <= dev_threads[device]
    assert result.makespan_s == max((r.end_s or 0.0) for r in result.jobs)


def test_exclusive_on_one_device_runs_jobs_back_to_back() -> None:
    jobs = [job(str(i), 1000, 60, (3.0, 5.0, 2.0 + i)) for i in range(6)]
    delay = 1.5
    result = simulate(
        (phi("a"),), jobs, make_policy("exclusive"), options=SimOptions(cycle_delay_s=delay)
    )
    records = sorted(result.jobs, key=lambda r: r.start_s or 0.0)
    assert [r.id for r in records] == [str(i) for i in range(6)]  # scheduler order
    assert records[0].start_s == delay
    for before, after in itertools.pairwise(records):
        assert after.start_s == pytest.approx((before.end_s or 0.0) + delay)
    assert result.makespan_s == pytest.approx(6 * delay + sum(s.duration_s for s in jobs))
    assert all(r.slowdown == pytest.approx(1.0) for r in result.jobs)


def test_fig2_full_thread_offloads_never_overlap_but_fill_each_others_gaps() -> None:
    # J1: two 240-thread offloads; J2: three; host phases between (the paper's Fig. 2).
    j1 = job("1", 1000, 240, (2.0, 4.0, 6.0, 4.0, 1.0))
    j2 = job("2", 1000, 240, (1.0, 3.0, 5.0, 3.0, 5.0, 3.0, 1.0))
    model = OffloadModel(record=True)
    result = simulate(
        (phi("a"),),
        [j1, j2],
        make_policy("random", PolicyOptions(threads="soft")),
        options=SimOptions(cycle_delay_s=0),
        model=model,
    )
    offloads = sorted((s, e) for _, s, e, _, _ in model.offloads)
    assert all(e1 <= s2 + EPS for (_, e1), (s2, _) in itertools.pairwise(offloads))
    assert result.makespan_s < j1.duration_s + j2.duration_s  # sequential makespan
    assert result.makespan_s >= max(j1.duration_s, j2.duration_s)


def test_fig3_half_thread_offloads_run_side_by_side() -> None:
    j3 = job("3", 1000, 120, (1.0, 5.0, 2.0, 5.0, 1.0))
    j4 = job("4", 1000, 120, (1.0, 4.0, 1.0, 4.0, 1.0, 4.0, 1.0))
    model = OffloadModel(record=True)
    for threads in ("strict", "soft"):
        result = simulate(
            (phi("a"),),
            [j3, j4],
            make_policy("knapsack", PolicyOptions(threads=threads)),  # type: ignore[arg-type]
            options=SimOptions(cycle_delay_s=0),
            model=model,
        )
        assert result.makespan_s == pytest.approx(max(j3.duration_s, j4.duration_s))
        assert all(r.gate_wait_s == 0 for r in result.jobs)


def test_an_offload_that_does_not_fit_waits_and_so_does_everything_behind_it() -> None:
    # a holds 200 threads from t=0 to 10; b (100 threads) asks at t=1 and waits; c (20
    # threads, would fit) asks at t=2 and waits behind b: first in, first out.
    a = job("a", 100, 200, (0.0, 10.0, 0.0))
    b = job("b", 100, 100, (1.0, 3.0, 0.0))
    c = job("c", 100, 20, (2.0, 3.0, 0.0))
    model = OffloadModel(record=True)
    result = simulate(
        (phi("x"),),
        [a, b, c],
        make_policy("random", PolicyOptions(threads="soft")),
        options=SimOptions(cycle_delay_s=0),
        model=model,
    )
    starts = {job_index: s for _, s, _, _, job_index in model.offloads}
    assert starts == {0: 0.0, 1: 10.0, 2: 10.0}
    waits = {r.id: r.gate_wait_s for r in result.jobs}
    assert waits == {"a": 0.0, "b": 9.0, "c": 8.0}


def test_jobs_arriving_later_wait_for_their_cycle() -> None:
    jobs = [job("early", 1000, 60, (5.0,)), job("late", 1000, 60, (5.0,), submit=100.0)]
    result = simulate(
        (phi("a"),), jobs, make_policy("knapsack"), options=SimOptions(cycle_delay_s=2.0)
    )
    starts = {r.id: r.start_s for r in result.jobs}
    assert starts == {"early": 2.0, "late": 102.0}
    assert result.cycles == 2


def test_a_longer_cycle_delay_means_fewer_cycles_for_the_same_jobs() -> None:
    jobs = [job(str(i), 500, 60, (1.0 + i % 7, 2.0, 1.0)) for i in range(40)]
    cycles = [
        simulate(
            (phi("a"), phi("b")), jobs, make_policy("random"), options=SimOptions(cycle_delay_s=d)
        ).cycles
        for d in (0.0, 5.0, 50.0)
    ]
    assert cycles[0] > cycles[1] > cycles[2] >= 1


def test_a_job_that_fits_no_device_is_reported_and_the_run_ends() -> None:
    jobs = [job("ok", 1000, 60, (1.0,)), job("huge", 20000, 60, (1.0,))]
    result = simulate((phi("a"),), jobs, make_policy("knapsack"))
    assert result.not_run == ("huge",)
    assert result.makespan_s == pytest.approx(2.0)


def test_a_plan_that_oversubscribes_memory_stops_the_simulation() -> None:
    class Greedy:
        name = "greedy"

        def plan(self, snapshot: Snapshot) -> Plan:
            return Plan(self.name, tuple(Assign(j.id, "a", ("0",)) for j in snapshot.pending))

    jobs = [job(str(i), 5000, 60, (1.0,)) for i in range(2)]
    with pytest.raises(SimulationError, match="oversubscribes"):
        simulate((phi("a"),), jobs, Greedy())


def test_fixed_model_runs_each_job_for_its_run_time_whatever_it_shares() -> None:
    jobs = [host_only(Job(str(i), 100, 240, memory_mib=0), 10.0) for i in range(4)]
    result = simulate(
        (phi("a"),),
        jobs,
        make_policy("random", PolicyOptions(threads="soft")),
        options=SimOptions(cycle_delay_s=0),
        model=FixedModel(),
    )
    assert result.makespan_s == pytest.approx(10.0)


def test_split_phases_keeps_the_run_time_and_the_offload_share() -> None:
    phases = split_phases(100.0, 0.8, (1.0, 3.0, 1.0), (1.0, 1.0))
    assert len(phases) == 5
    assert sum(phases) == pytest.approx(100.0)
    assert sum(phases[1::2]) == pytest.approx(80.0)
    assert phases[2] == pytest.approx(3 * phases[0])
    with pytest.raises(ValueError):
        split_phases(1.0, 0.5, (1.0,), (1.0,))
