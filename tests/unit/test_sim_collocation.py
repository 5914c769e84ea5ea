"""The Wu & Hong experiment in the simulator: workload from the paper's tables, execution
model, measured loads reaching the policy, kills, and ``coshare simulate --workload wu-hong``."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.model import MILLI
from coshare.policies.collocate import CollocatePolicy
from coshare.sim import collocation
from coshare.sim.collocation import (
    CPU_JOBS,
    GPU_JOBS,
    PAPER_CPU_CORE_S,
    TABLE_III,
    TABLE_IV,
    WuHongJob,
    _Sim,
    calibrated_cpu_scale_s,
    copy_slowdown,
    run_wu_hong,
    truncated_exp_mean,
    underused_split,
    wu_hong_nodes,
    wu_hong_workload,
)


def test_the_workload_is_the_paper_s() -> None:
    jobs = wu_hong_workload(0)
    gpu = [j for j in jobs if j.job.needs_device]
    cpu = [j for j in jobs if not j.job.needs_device]
    assert len(gpu) == GPU_JOBS == 32 and len(cpu) == CPU_JOBS == 300
    # one GPU job per Table III configuration, with its load and copy bandwidth
    assert [(j.app, j.load_cores, j.job.copy_bw_mbps) for j in gpu] == [
        (name, load, bw) for name, _, load, bw in TABLE_III
    ]
    assert all(j.job.total_cpu_milli == 12 * MILLI and j.job.device_count == 3 for j in gpu)
    assert all(420 <= j.duration_s <= 780 for j in gpu)
    assert all(
        30 <= j.duration_s <= 660
        and j.job.total_cpu_milli // MILLI in (2, 4, 8)
        and j.app in TABLE_IV
        for j in cpu
    )
    assert all(j.job.walltime_s == pytest.approx(1.15 * j.duration_s) for j in jobs)
    assert {len(n.devices) for n in wu_hong_nodes()} == {3}


def test_the_cpu_run_times_are_calibrated_to_the_paper_s_core_seconds_only() -> None:
    scale = calibrated_cpu_scale_s()
    mean_s = PAPER_CPU_CORE_S / (CPU_JOBS * 14 / 3)
    assert truncated_exp_mean(scale, 30, 660) == pytest.approx(mean_s, rel=1e-6)
    # the closed form against sampling the same distribution
    rng = random.Random(1)
    keep = 1 - math.exp(-630 / scale)
    draws = [30 - scale * math.log(1 - rng.random() * keep) for _ in range(200_000)]
    assert sum(draws) / len(draws) == pytest.approx(mean_s, rel=0.01)
    totals = [
        sum(j.load_cores * j.duration_s for j in wu_hong_workload(s) if not j.job.needs_device)
        for s in range(20)
    ]
    assert sum(totals) / len(totals) == pytest.approx(PAPER_CPU_CORE_S, rel=0.05)


def test_the_slowdown_model_is_table_iv_s() -> None:
    # CG, 8 processes, beside a 300 MB/s GPU job: 8 x 0.00151 x e^(0.00761 x 300)
    assert copy_slowdown(8, TABLE_IV["CG"], 300.0) == pytest.approx(8 * 0.00151 * math.exp(2.283))
    assert copy_slowdown(2, TABLE_IV["EP"], 0.0) == pytest.approx(0.014)


def test_the_policy_sees_the_loads_a_node_daemon_would_have_measured() -> None:
    jobs = wu_hong_workload(0)
    sim = _Sim(wu_hong_nodes(), jobs, CollocatePolicy(), 1.0)
    sim._cycle(1.0)
    gpu = next(j for j in jobs if j.job.id == "g1")  # FFT-1: load 2.22, 39.43 MB/s
    assert "g1" in sim.running  # started at 1 s
    early = next(r for r in sim._snapshot(119.0).running if r.id == "g1")
    assert early.cpu_load_cores is None  # sampled at 60 s only: no whole interval yet
    later = next(r for r in sim._snapshot(121.0).running if r.id == "g1")
    assert later.cpu_load_cores == gpu.load_cores == 2.22
    assert later.walltime_s == gpu.job.walltime_s and later.copy_bw_mbps == 39.43


def test_a_cpu_job_slowed_past_its_request_is_killed() -> None:
    jobs = wu_hong_workload(0)
    triad = next(j for j in jobs if j.app == "Triad-10")  # 611 MB/s, load 4.94
    cg = next(j for j in jobs if j.app == "CG" and j.job.total_cpu_milli == 4 * MILLI)
    long_triad = WuHongJob(
        replace(triad.job, walltime_s=2300.0), 2000.0, triad.load_cores, triad.app
    )
    short_cg = WuHongJob(
        replace(cg.job, walltime_s=345.0), 300.0, cg.load_cores, cg.app, cg.slowdown_ab
    )
    # Triad lends floor(12 - 4.94) = 7 cores once sampled (120 s). S = 4 x 0.00151 x
    # e^(0.00761 x 611) = 0.58: the CG job runs at 63% and cannot finish 300 s of work
    # within its 345 s request. The threshold (1000 MB/s) lets it be placed there.
    assert copy_slowdown(4, TABLE_IV["CG"], 611.14) > 0.5
    run = _Sim(
        wu_hong_nodes()[:1], [long_triad, short_cg], CollocatePolicy(0.01, 9, 1000.0), 1.0
    ).run(0, (0.01, 9, 1000.0))
    assert run.killed == 1 and run.harvested_core_s == pytest.approx(4 * 345.0)
    # With the paper's threshold it is never placed beside Triad, and runs after it unslowed.
    safe = _Sim(
        wu_hong_nodes()[:1], [long_triad, short_cg], CollocatePolicy(0.01, 9, 300.0), 1.0
    ).run(0, (0.01, 9, 300.0))
    assert safe.killed == 0 and safe.harvested_core_s == 0
    assert safe.makespan_s == pytest.approx(2001.0 + 1.0 + 300.0)  # cycle delay 1 s


def test_collocation_beats_the_conventional_run_and_lends_only_after_p_m() -> None:
    conventional = run_wu_hong(CollocatePolicy(max_harvest_cores=0), 0)
    collocated = run_wu_hong(CollocatePolicy(), 0)
    assert conventional.harvested_core_s == 0 and collocated.harvested_core_s > 0
    assert collocated.makespan_s < conventional.makespan_s
    assert conventional.killed == collocated.killed == 0  # Table III's loads are constant
    jobs = wu_hong_workload(0)
    idle = sum((12 - j.load_cores) * j.duration_s for j in jobs if j.job.needs_device)
    assert sum(collocated.split.values()) == pytest.approx(idle)
    # nothing is lent from what monitoring or P_B keep, nor from copy-heavy GPU jobs
    assert collocated.harvested_core_s <= collocated.split["collectible"] + 1e-6
    assert underused_split(jobs, 1 / 3, 0, 300.0)["collectible"] == 0


def test_simulate_wu_hong_prints_the_paper_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collocation, "SWEEP_MONITOR", (1 / 3,))
    monkeypatch.setattr(collocation, "SWEEP_HARVEST", (9,))
    result = CliRunner().invoke(
        cli, ["simulate", "--workload", "wu-hong", "--policies", "collocate", "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload["runs"]) == {"conventional", "collocate"}
    assert [(p["monitor_fraction"], p["max_harvest_cores"]) for p in payload["sweep"]] == [
        (1 / 3, 9)
    ]
    assert (
        payload["sweep"][0]["runs"][0]["makespan_s"]
        == payload["runs"]["collocate"][0]["makespan_s"]
    )
    bad = CliRunner().invoke(cli, ["simulate", "--workload", "wu-hong", "--nodes", "8"])
    assert bad.exit_code == 2 and "--jobs and --nodes do not apply" in bad.output
