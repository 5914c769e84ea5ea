"""poncos' own sequence in the simulator: the live policy plans trial co-runs and the live
trial steps probe, freeze, decide and record, on modelled (optionally noisy) probes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.sim.poncos import QUEUES, USE, VARIANTS, run_queue
from coshare.sim.poncos_trials import TrialSetup, reading, run_with_trials

VARIANT = {v.name: v for v in VARIANTS}
#: Heat alg. 2 beside alg. 9 sums to 0.825, near the 90% rule: noise can tip it.
NEAR = ("heat2", "heat9", "heat2", "heat9")


@pytest.mark.parametrize("queue", list(QUEUES))
def test_without_noise_every_decision_is_the_rules_on_the_true_uses(queue: str) -> None:
    run = run_with_trials(QUEUES[queue], TrialSetup(noise=0.0))
    assert run.trials >= 1
    assert any(d.kind == "trial" for d in run.decisions)
    assert [d for d in run.decisions if d.wrong] == []
    # what the trials recorded is Table 1's use
    assert run.measured and all(share == pytest.approx(USE[p]) for p, share in run.measured.items())


@pytest.mark.parametrize("queue", list(QUEUES))
def test_without_trials_the_runner_is_todays_no_record_schedule(queue: str) -> None:
    run = run_with_trials(QUEUES[queue], TrialSetup(trials=False))
    engine = run_queue(QUEUES[queue], VARIANT["membw, nothing recorded"])
    assert run.makespan_s == pytest.approx(engine.makespan_s)
    assert (run.trials, run.decisions, run.frozen_s) == (0, (), 0.0)


def test_a_pair_over_the_limit_is_suspended_until_its_partner_ends() -> None:
    run = run_with_trials(("heat2", "heat2"), TrialSetup())
    first, second = run.jobs
    (decision,) = run.decisions
    assert (decision.kind, decision.co_run, decision.true_sum) == ("trial", False, 1.18)
    assert second.suspended_s > 0
    assert second.end_s > first.end_s


def test_trials_cost_the_frozen_partners_time() -> None:
    queue = QUEUES["queue 2"]
    spans = [run_with_trials(queue, TrialSetup(probe_s=p)).makespan_s for p in (0.0, 1.0, 5.0)]
    assert spans[0] < spans[1] < spans[2]
    run = run_with_trials(queue, TrialSetup(probe_s=3.0))
    assert run.frozen_s == pytest.approx(3.0 * run.trials)
    # Knowing Table 1 beforehand beats measuring it by trials; trials beat waiting for it.
    recorded = run_queue(queue, VARIANT["membw"]).makespan_s
    off = run_with_trials(queue, TrialSetup(trials=False)).makespan_s
    assert recorded < run_with_trials(queue, TrialSetup()).makespan_s < off


def test_a_seed_reproduces_a_noisy_run_and_another_seed_reads_otherwise() -> None:
    setup = TrialSetup(noise=0.2, seed=7)
    assert run_with_trials(NEAR, setup) == run_with_trials(NEAR, setup)
    assert reading(0.2, 7, 1, 2, 3) == reading(0.2, 7, 1, 2, 3)
    assert reading(0.2, 7, 1, 2, 3) != reading(0.2, 8, 1, 2, 3)
    assert reading(0.0, 7, 1, 2, 3) == 1.0


def test_more_noise_makes_more_wrong_decisions_on_a_fixed_seed_set() -> None:
    def wrong(noise: float) -> int:
        return sum(run_with_trials(NEAR, TrialSetup(noise=noise, seed=s)).wrong for s in range(30))

    assert wrong(0.0) == 0
    assert wrong(0.05) < wrong(0.3)


def test_simulate_poncos_trials_reports_both_runs() -> None:
    args = ["simulate", "--workload", "poncos", "--trials", "both", "--probe-noise", "0.1"]
    result = CliRunner().invoke(cli, [*args, "--seeds", "3", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)["trials"]
    assert data["noise"] == 0.1 and data["seeds"] == [0, 1, 2]
    q2 = data["queue 2"]
    assert q2["trials"]["trials"] == 2 and q2["no_trials"]["trials"] == 0
    assert q2["trials"]["makespan_s"] < q2["no_trials"]["makespan_s"]
    text = CliRunner().invoke(cli, args).output
    assert "no trials (default)" in text and "wrong / decisions" in text
    other = CliRunner().invoke(cli, ["simulate", "--workload", "table1", "--trials", "on"])
    assert other.exit_code == 2 and "apply to --workload poncos" in other.output
