"""``coshare simulate --cycle live``: the live cycle (run_cycle, the ledger, the write
protocol) on the in-memory scheduler, on a simulated clock, beside the fast engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.policies import make_policy
from coshare.sim.device import OffloadModel
from coshare.sim.experiments import draws_for
from coshare.sim.live import LiveOptions, simulate_live
from coshare.sim.workloads import paper_cluster, realize


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_live_json_gives_both_runs_per_policy() -> None:
    code, out, err = run(
        "simulate",
        "--workload",
        "table1",
        "--jobs",
        "40",
        "--nodes",
        "2",
        "--offload-share",
        "0.5",
        "--policies",
        "exclusive,knapsack",
        "--cycle",
        "live",
        "--output",
        "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert (data["cycle"], data["cycle_s"], data["replan_after_s"]) == ("live", 30.0, 300.0)
    assert [r["policy"] for r in data["runs"]] == ["exclusive", "knapsack"]
    for r in data["runs"]:
        assert r["engine"]["jobs"] == r["live"]["jobs"] == 40
        assert r["engine"]["not_run"] == r["live"]["not_run"] == 0
        assert r["live"]["makespan_s"] > 0 and r["live"]["cycles"] > 0
        assert {"withdrawn", "failed", "skipped", "rejected"} <= set(r["live"])


def test_live_table_shows_both_and_the_cycle_interval() -> None:
    code, out, err = run(
        "simulate",
        "--workload",
        "table1",
        "--jobs",
        "20",
        "--nodes",
        "2",
        "--offload-share",
        "0.5",
        "--policies",
        "exclusive",
        "--cycle",
        "live",
        "--cycle-s",
        "10",
    )
    assert code == 0, err
    assert "live cycle every 10 s" in out
    assert "makespan" in out and "engine" in out and "live" in out


def test_live_replays_an_swf_log_gangs_included(tmp_path: Path) -> None:
    log = tmp_path / "tiny.swf"
    log.write_text(
        "; SWF\n"
        + "".join(
            f"{i + 1} {10 * i} 0 {50 + i} {1 + i % 3} -1 -1 {1 + i % 3} 100 "
            "-1 1 1 1 -1 -1 1 -1 -1\n"
            for i in range(9)
        )
    )
    (tmp_path / "tiny.swf.machines").write_text("0 seth 3 2 1 1048576\n")
    code, out, err = run(
        "simulate",
        "--workload",
        f"trace:{log}",
        "--policies",
        "exclusive",
        "--cycle",
        "live",
        "--output",
        "json",
    )
    assert code == 0, err
    [r] = json.loads(out)["runs"]
    assert r["live"]["not_run"] == 0  # 3 processors on nodes of 2: a gang, placed whole


def test_cycle_s_without_live_and_live_with_a_sweep_are_refused() -> None:
    code, _, err = run("simulate", "--workload", "table1", "--cycle-s", "10")
    assert code == 2 and "--cycle-s applies to --cycle live" in err
    code, _, err = run("simulate", "--cycle", "live", "--sweep", "jobs=10,20")
    assert code == 2 and "--sweep" in err


def test_live_wu_hong_lends_cores_and_keeps_the_paper_s_order() -> None:
    """Wu & Hong's workload through the live cycle, beside its collocation engine: the same
    figures both ways; collocate lends cores and beats exclusive on both; the live cycle
    runs at most one cycle per cycle_s."""
    code, out, err = run(
        "simulate",
        "--workload",
        "wu-hong",
        "--cycle",
        "live",
        "--cycle-s",
        "60",
        "--output",
        "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert (data["workload"], data["cycle_s"], data["seeds"]) == ("wu-hong", 60.0, [0])
    runs = {r["policy"]: r for r in data["runs"]}
    assert list(runs) == ["exclusive", "collocate"]  # the default pair
    figures = {"makespan_s", "cpu_utilization", "gpu_utilization", "harvested_core_s", "killed"}
    for r in runs.values():
        assert figures <= set(r["engine"]) and figures <= set(r["live"])
        assert {"withdrawn", "failed", "skipped", "rejected"} <= set(r["live"])
        assert r["live"]["not_run"] == r["engine"]["not_run"] == 0
        assert r["live"]["killed"] == r["engine"]["killed"] == 0  # Table III's loads are constant
        assert r["live"]["failed"] == r["live"]["rejected"] == 0
        assert 0 < r["live"]["cycles"] <= r["live"]["makespan_s"] / 60 + 1
    for side in ("engine", "live"):
        assert runs["collocate"][side]["makespan_s"] < runs["exclusive"][side]["makespan_s"]
        assert runs["collocate"][side]["harvested_core_s"] > 0
        assert runs["exclusive"][side]["harvested_core_s"] == 0


def test_live_wu_hong_is_the_paper_s_setup_and_other_workloads_are_refused() -> None:
    code, _, err = run("simulate", "--workload", "wu-hong", "--cycle", "live", "--jobs", "10")
    assert code != 0 and "--jobs and --nodes do not apply" in err
    code, _, err = run("simulate", "--workload", "sns", "--cycle", "live")
    assert code != 0 and "wu-hong" in err and "not sns" in err


def test_every_live_start_is_at_a_cycle_and_every_job_runs() -> None:
    jobs = realize(draws_for("table1", 60, 0), 0.5)
    run_ = simulate_live(
        paper_cluster(2),
        jobs,
        make_policy("knapsack"),
        options=LiveOptions(cycle_s=20.0, check=True),
        model=OffloadModel(),
    )
    starts = [r.start_s for r in run_.result.jobs]
    assert None not in starts
    assert all(s is not None and s % 20.0 == 0 for s in starts)
    assert run_.result.makespan_s == max(r.end_s or 0 for r in run_.result.jobs)
    assert run_.withdrawn == run_.failed == 0


def test_a_job_read_back_from_the_in_memory_queue_is_the_job_submitted(tmp_path: Path) -> None:
    """The scheduler keeps annotations, as a real queue does; the ledger reads them back
    into the very job the fast engine plans (a device job, a CPU job, a gang)."""
    from coshare.ledger.book import pending_job
    from coshare.model import Job
    from coshare.sim.memory_scheduler import MemoryScheduler

    jobs = [
        realize(draws_for("table1", 1, 0), 0.5)[0].job,
        Job("c", kind="cpu", device_count=0, cpu_milli=2000, memory_mib=512, walltime_s=90.0),
        Job(
            "g",
            kind="cpu",
            device_count=0,
            processes=3,
            nodes=2,
            nodes_max=3,
            processes_per_node=2,
            memory_mib=100,
        ),
    ]
    s = MemoryScheduler(paper_cluster(3))
    for job in jobs:
        record = s.submit(job)
        assert pending_job(s.queued(record), None, gangs=True) == job


def test_a_job_no_node_can_hold_is_refused_reported_as_not_run_and_the_run_ends() -> None:
    from dataclasses import replace

    jobs = list(realize(draws_for("table1", 10, 0), 0.5))
    jobs[3] = replace(jobs[3], job=replace(jobs[3].job, device_memory_mib=9000))  # > 8192
    run_ = simulate_live(
        paper_cluster(2), jobs, make_policy("exclusive"), options=LiveOptions(check=True)
    )
    assert run_.result.not_run == (jobs[3].job.id,)
    assert run_.rejected >= 1
    assert run_.result.makespan_s > 0
