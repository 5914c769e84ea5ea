"""The poncos workload: Table 1's admission matrix under the 90% rule, the
bandwidth execution model, and the queues of section 8 run by the live policy on simulated
node facts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.model import MILLI, Node, RunningJob
from coshare.policies.membw import MembwPolicy
from coshare.sim.engine import simulate
from coshare.sim.facts import JobTraits, MeasuredFacts, NodeHardware
from coshare.sim.jobs import host_only
from coshare.sim.poncos import (
    QUEUES,
    USE,
    VARIANTS,
    BandwidthModel,
    _job,
    admits,
    run_queue,
)

VARIANT = {v.name: v for v in VARIANTS}


def test_table1_uses_are_one_minus_available() -> None:
    assert USE == {"hydro": 0.473, "lama": 0.534, "mpiblast": 0.075, "heat2": 0.59, "heat9": 0.235}


def test_the_rule_refuses_the_bandwidth_bound_pairs_and_nothing_else() -> None:
    refused = {(a, b) for a in USE for b in USE if not admits(a, b)}
    bound = {"hydro", "lama", "heat2"}
    assert refused == {(a, b) for a in bound for b in bound}


def test_co_running_jobs_slow_down_only_while_their_uses_sum_above_one() -> None:
    node = Node("n", 16 * MILLI, 1024)
    two = [host_only(_job("a", "heat2"), 44.0), host_only(_job("b", "heat2"), 44.0)]
    run = simulate(
        [node], two, MembwPolicy(max_share=float("inf"), programs=USE), model=BandwidthModel(USE)
    )
    # 0.59 + 0.59 = 1.18: each runs at 1 / (0.41 + 0.59 * 1.18) of its speed.
    assert [r.end_s for r in run.jobs] == pytest.approx([1.0 + 44.0 * (0.41 + 0.59 * 1.18)] * 2)
    light = [host_only(_job("a", "heat2"), 44.0), host_only(_job("b", "heat9"), 20.0)]
    run = simulate(
        [node], light, MembwPolicy(max_share=float("inf"), programs=USE), model=BandwidthModel(USE)
    )
    assert [r.end_s for r in run.jobs] == pytest.approx([45.0, 21.0])


def test_a_job_speeds_up_again_when_its_partner_ends() -> None:
    node = Node("n", 16 * MILLI, 1024)
    jobs = [host_only(_job("a", "heat2"), 44.0), host_only(_job("b", "heat2"), 10.0)]
    run = simulate(
        [node], jobs, MembwPolicy(max_share=float("inf"), programs=USE), model=BandwidthModel(USE)
    )
    slow = 0.41 + 0.59 * 1.18
    b_end = 1.0 + 10.0 * slow
    assert run.jobs[1].end_s == pytest.approx(b_end)
    assert run.jobs[0].end_s == pytest.approx(b_end + (44.0 - 10.0))


def test_queue2_co_schedules_mpiblast_beside_each_lama_run() -> None:
    run = run_queue(QUEUES["queue 2"], VARIANT["membw"])
    starts = {r.id: r.start_s for r in run.jobs}
    ends = {r.id: r.end_s for r in run.jobs}
    assert starts["2-mpiblast"] < ends["1-lama"]
    assert starts["3-lama"] == pytest.approx(ends["1-lama"])
    assert run.makespan_s < run_queue(QUEUES["queue 2"], VARIANT["dedicated"]).makespan_s


@pytest.mark.parametrize("queue", list(QUEUES))
def test_under_the_rule_two_bandwidth_bound_runs_never_share_the_node(queue: str) -> None:
    run = run_queue(QUEUES[queue], VARIANT["membw"])
    for a in run.jobs:
        for b in run.jobs:
            overlap = a.id < b.id and a.start_s < b.end_s and b.start_s < a.end_s  # type: ignore[operator]
            if overlap:
                assert USE[a.id.split("-")[1]] + USE[b.id.split("-")[1]] <= 0.9


def test_without_records_or_trials_nothing_is_co_scheduled() -> None:
    # What a live cycle does today with unknown programs: each runs alone.
    for queue in QUEUES.values():
        run = run_queue(queue, VARIANT["membw, nothing recorded"])
        assert run.makespan_s == pytest.approx(44.0 * len(queue))


def test_a_simulated_probe_does_not_see_jobs_started_after_it() -> None:
    facts = MeasuredFacts(
        traits={"a": JobTraits(membw_share=0.5)}, default=NodeHardware(membw_baseline_gbps=40.0)
    )
    node = Node("n", 16 * MILLI, 1024)
    late = RunningJob("a", "n", start_time_s=90.0)
    assert facts.facts(100.0, [node], [late])["n"].membw.avail_gbps == 40.0  # type: ignore[union-attr]
    early = RunningJob("a", "n", start_time_s=30.0)
    assert facts.facts(100.0, [node], [early])["n"].membw.avail_gbps == 20.0  # type: ignore[union-attr]


def test_simulate_poncos_prints_the_matrix_and_the_queues() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--workload", "poncos", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["matrix"]) == 25
    cell = {(m["running"], m["new"]): m for m in data["matrix"]}
    assert cell[("heat2", "hydro")]["coshare"] is False
    assert cell[("heat2", "hydro")]["paper_text"] is True
    assert cell[("heat9", "heat9")]["coshare"] is True
    q1 = data["queues"]["queue 1"]
    assert q1["membw"]["makespan_s"] < q1["dedicated"]["makespan_s"]
    text = CliRunner().invoke(cli, ["simulate", "--workload", "poncos"]).output
    assert "Hydro + Heat alg. 2" in text and "queue 2" in text
