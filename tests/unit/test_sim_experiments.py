"""The paper's experiments: calibration, workloads, footprint search, and the
acceptance criterion (knapsack beats random beats exclusive on the Table I set)."""

from __future__ import annotations

import statistics

import pytest
from coshare.policies import make_policy
from coshare.sim.applications import TABLE_I
from coshare.sim.calibrate import calibrate
from coshare.sim.device import OffloadModel
from coshare.sim.engine import simulate
from coshare.sim.experiments import Setup, compare, sweep
from coshare.sim.footprint import search_footprint
from coshare.sim.workloads import (
    DISTRIBUTIONS,
    MEMORY_STEP_MIB,
    OFFLOADS,
    paper_cluster,
    realize,
    synthetic_draws,
    table1_draws,
)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knapsack_beats_random_beats_exclusive_on_the_table1_set(seed: int) -> None:
    comp = compare("table1", 1000, 8, ("exclusive", "random", "knapsack"), seed, Setup())
    makespan = {name: run.makespan_s for name, run in comp.runs.items()}
    assert makespan["knapsack"] < makespan["random"] < makespan["exclusive"]
    assert comp.runs["exclusive"].utilization == pytest.approx(0.5)
    assert all(run.not_run == 0 for run in comp.runs.values())


def test_calibration_sets_exclusive_utilization_exactly_and_changes_no_schedule() -> None:
    draws = table1_draws(120, seed=3)
    nodes = paper_cluster(3)
    cal = calibrate(nodes, draws, target=0.5)
    assert 0 < cal.offload_share < 1
    assert cal.baseline.utilization == pytest.approx(0.5)
    # the real offload model under exclusive: same schedule, and the calibrated utilization
    real = simulate(
        nodes, realize(draws, cal.offload_share), make_policy("exclusive"), model=OffloadModel()
    )
    assert real.makespan_s == pytest.approx(cal.baseline.makespan_s)
    assert real.utilization == pytest.approx(0.5)
    assert [r.start_s for r in real.jobs] == pytest.approx([r.start_s for r in cal.baseline.jobs])


def test_table1_draws_follow_table1() -> None:
    draws = table1_draws(700, seed=1)
    apps = {a.name: a for a in TABLE_I}
    for d in draws:
        app = apps[d.job.program or ""]
        assert d.job.device_threads == app.threads
        assert app.memory_min_mib <= d.job.device_memory_mib <= app.memory_max_mib
        assert (d.job.device_memory_mib - app.memory_min_mib) % MEMORY_STEP_MIB == 0
        assert len(d.offload_weights) == OFFLOADS[app.name]
        assert len(d.host_weights) == len(d.offload_weights) + 1
    assert {d.job.program for d in draws} == set(apps)
    assert table1_draws(50, seed=1) == draws[:50]  # seeded and stable


def test_synthetic_distributions_shift_memory_and_threads_together() -> None:
    means = {}
    for name in DISTRIBUTIONS:
        draws = synthetic_draws(name, 400, seed=2)
        threads = [d.job.device_threads for d in draws]
        memory = [d.job.device_memory_mib for d in draws]
        assert min(threads) >= 60 and max(threads) <= 240
        assert min(memory) >= 300 and max(memory) <= 3400
        assert statistics.correlation(threads, memory) > 0.99  # one resource level drives both
        means[name] = statistics.fmean(threads)
    assert means["low-skew"] < means["normal"] < means["high-skew"]
    assert means["uniform"] == pytest.approx(150, abs=10)
    with pytest.raises(ValueError):
        synthetic_draws("bimodal", 3)


def test_footprint_walks_to_the_smallest_size_that_meets_the_target() -> None:
    calls: list[int] = []

    def makespan(n: int) -> float:
        calls.append(n)
        return 1200.0 / n

    fp = search_footprint(makespan, target_s=300.0, baseline_nodes=8)
    assert fp.nodes == 4
    assert fp.makespans[4] <= 300.0 < fp.makespans[3]
    assert len(set(calls)) == len(calls) <= 4  # starts near the answer, never repeats a size
    assert search_footprint(lambda n: 1000.0, target_s=10.0, baseline_nodes=4).nodes is None
    slow_start = search_footprint(
        lambda n: 900.0 / n, target_s=100.0, baseline_nodes=8, max_nodes=12
    )
    assert slow_start.nodes == 9


def test_footprint_of_sharing_is_no_larger_than_the_baseline() -> None:
    comp = compare("normal", 160, 4, ("exclusive", "random"), 1, Setup(), footprint=True)
    fp = comp.footprints["random"]
    assert fp.nodes is not None and fp.nodes <= 4
    assert fp.makespans[fp.nodes] <= comp.runs["exclusive"].makespan_s
    if fp.nodes > 1:
        assert fp.makespans.get(fp.nodes - 1, float("inf")) > comp.runs["exclusive"].makespan_s


def test_pressure_sweep_scales_jobs_with_nodes() -> None:
    result = sweep(
        "normal", [1, 2], ["exclusive", "knapsack"], 0, Setup(offload_share=0.8), jobs_per_node=15
    )
    assert result.jobs == {1: 15, 2: 30}
    assert set(result.runs) == {(p, n) for p in ("exclusive", "knapsack") for n in (1, 2)}
    assert all(r.jobs == result.jobs[r.nodes] for r in result.runs.values())
    with pytest.raises(ValueError):
        sweep("normal", [1], ["exclusive"], 0, Setup())
