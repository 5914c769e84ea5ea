"""The picaso workloads: the paper's scenarios through the message-level
simulator, and ``coshare simulate --workload picaso-*``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.alloc.layout import tile
from coshare.alloc.protocol import Gang
from coshare.cli.main import cli
from coshare.sim.picaso import (
    SCENARIOS,
    WorstPoint,
    change_pct,
    crossover,
    run_protocol,
    run_scenario,
    run_worst,
)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenarios_allocate_every_job_with_the_formula_counts(name: str) -> None:
    result = run_scenario(name)
    for policy, run in result.runs.items():
        assert len(run.jobs) == 4 and all(r.allocated_at is not None for r in run.jobs)
        assert all(run.messages[k] == v for k, v in run.expected.items()), policy
    seq = result.runs["sequencer"]
    # One submit per job (no corner is the centre), one spawn back to the sequencer each.
    assert seq.messages["submit"] == 4
    assert seq.messages["spawn"] == 4 * 48 + 4
    assert seq.messages["request"] == 4 * 48


def test_sparse_jobs_need_no_cancellation_and_run_in_parallel() -> None:
    # Section 7.2: from the four corners, 3 domains each, every job is satisfied nearby
    # before the others' requests arrive; the sequencer serializes them.
    result = run_scenario("parallel-3")
    ac = result.runs["cancel"]
    assert [r.cancels for r in ac.jobs] == [0, 0, 0, 0]
    assert len(set(result.waits("cancel"))) == 1
    assert result.waits("sequencer") == sorted(set(result.waits("sequencer")))
    assert all(c > 0 for c in result.change())


def test_a_propagation_costs_n2_minus_1_under_both_patterns() -> None:
    # The trees differ, so the timing and the number of cancellations may differ; each
    # propagation still crosses 48 edges of the 7 x 7 tile (section 7.6).
    jobs = [Gang(f"j{i}", home, 8 * 12, 0, 500) for i, home in enumerate((0, 6, 42, 48))]
    for pattern in ("fixed", "adaptive"):
        run = run_protocol(tile(7), jobs, "cancel", pattern)  # type: ignore[arg-type]
        assert run.messages["request"] == 48 * sum(r.attempts for r in run.jobs)
        assert run.messages["cancel"] == 48 * sum(r.cancels for r in run.jobs)
        assert run.messages["spawn"] == 48 * len(run.jobs)


def test_change_is_the_papers_convention() -> None:
    assert change_pct(ac=25.0, ab=100.0) == 75.0
    assert change_pct(ac=112.0, ab=100.0) == pytest.approx(-12.0)


def test_crossover_is_where_the_sequencer_stays_lower() -> None:
    def point(n: int, ac: int, seq: int) -> WorstPoint:
        return WorstPoint(
            n, {"cancel": [ac], "sequencer": [seq]}, {"cancel": [0], "sequencer": [0]}
        )

    assert crossover([point(1, 5, 9), point(2, 9, 8), point(3, 7, 8), point(4, 9, 8)]) == 4
    assert crossover([point(1, 5, 9), point(2, 5, 9)]) is None


def test_worst_case_first_wait_grows_with_n_under_active_cancellation() -> None:
    points = run_worst(counts=(1, 25, 49), seeds=(0,))
    ac = [p.mean("cancel") for p in points]
    assert ac == sorted(ac) and ac[0] < ac[-1]
    assert points[-1].mean("sequencer") < points[-1].mean("cancel")


def test_simulate_picaso_scenario_table_and_json() -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["simulate", "--workload", "picaso-parallel-3"])
    assert out.exit_code == 0, out.output
    assert "parallel-3" in out.output and "+23 +76 +83 +83" in out.output
    assert "DIFFERS" not in out.output and "matches" in out.output
    out = runner.invoke(cli, ["simulate", "--workload", "picaso-tiles", "--output", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["tiles"]
    assert [r["n"] for r in rows] == [2, 3, 4, 5, 6, 7]
    assert all(r["propagations"] == r["paper_propagations"] for r in rows)


def test_simulate_picaso_propagation() -> None:
    out = CliRunner().invoke(cli, ["simulate", "--workload", "picaso-propagation"])
    assert out.exit_code == 0, out.output
    assert "84 [84]" in out.output  # 7 x 7 flooding: 2n(n - 1)


@pytest.mark.parametrize("args", [["--jobs", "5"], ["--nodes", "3"], ["--policies", "knapsack"]])
def test_simulate_picaso_refuses_options_that_do_not_apply(args: list[str]) -> None:
    out = CliRunner().invoke(cli, ["simulate", "--workload", "picaso-short-24", *args])
    assert out.exit_code == 2
    assert "do not apply" in out.output


def test_an_unknown_picaso_part_is_an_unknown_workload() -> None:
    out = CliRunner().invoke(cli, ["simulate", "--workload", "picaso-nothing"])
    assert out.exit_code == 2 and "picaso-parallel-3" in out.output


def test_the_documented_scenario_table_is_what_the_simulator_prints() -> None:
    # The simulator is deterministic: the section 7.2 table of the PICASO page (docs/) must
    # stay its output.
    readme = (Path(__file__).resolve().parents[2] / "docs" / "paper-picaso.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in SCENARIOS and len(cells) == 7:
            rows[cells[0]] = cells
    assert set(rows) == set(SCENARIOS)
    for name, cells in rows.items():
        result = run_scenario(name)
        ac, seq = result.runs["cancel"], result.runs["sequencer"]
        assert cells[1] == " ".join(map(str, result.waits("cancel"))), name
        assert cells[2] == " ".join(map(str, result.waits("sequencer"))), name
        assert cells[3] == " ".join(f"{c:+.0f}" for c in result.change()), name
        assert cells[5] == str(sum(r.cancels for r in ac.jobs)), name
        assert cells[6] == f"{ac.total_messages} / {seq.total_messages}", name
