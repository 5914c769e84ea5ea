"""The PICASO time model's assumptions (Timing's set-up cost and link delay, the sequencer's
seat) and the sweep over them (coshare.sim.picaso_timing, ``--workload picaso-timing``)."""

from __future__ import annotations

import pytest
from coshare.alloc.layout import tile
from coshare.sim.picaso import (
    ALL_PARTS,
    CORES_PER_DOMAIN,
    PARTS,
    SIDE,
    Timing,
    corner_jobs,
    crossover,
    run_protocol,
    run_scenario,
    run_worst,
)
from coshare.sim.picaso_report import timing_table
from coshare.sim.picaso_timing import ASSUMPTIONS, Assumption, parallel12, run_assumption
from coshare.sim.report import render


def test_the_default_timing_is_the_unit_model_whatever_the_seed() -> None:
    # without link delay nothing is drawn: every figure stays what it was
    plain = run_scenario("parallel-12")
    seeded = run_scenario("parallel-12", timing=Timing(seed=7))
    for policy in ("cancel", "sequencer"):
        assert seeded.waits(policy) == plain.waits(policy)


def test_a_set_up_cost_per_message_lengthens_a_lone_jobs_wait() -> None:
    waits = [
        run_worst([1], [0], timing=Timing(send_units=s))[0].mean(policy)
        for s in (0, 1, 2)
        for policy in ("cancel",)
    ]
    assert waits[0] < waits[1] < waits[2]


@pytest.mark.parametrize("seed", range(4))
def test_link_delay_keeps_the_protocol_whole(seed: int) -> None:
    # random delays, links still first-in-first-out: every job allocated, the messages
    # are section 4's counts, nothing deadlocks (the sequencer relies on FIFO links)
    layout = tile(SIDE, cores_per_domain=CORES_PER_DOMAIN)
    jobs = corner_jobs(12, 500)
    for policy in ("cancel", "sequencer"):
        run = run_protocol(layout, jobs, policy, timing=Timing(jitter_units=8, seed=seed))
        assert all(r.allocated_at is not None for r in run.jobs)
        assert all(run.messages[k] == v for k, v in run.expected.items()), policy


def test_link_delay_is_drawn_per_seed_and_repeatable() -> None:
    def waits(seed: int) -> list[int]:
        return run_scenario("parallel-12", timing=Timing(jitter_units=8, seed=seed)).waits("cancel")

    assert waits(3) == waits(3)
    assert len({tuple(waits(s)) for s in range(4)}) > 1


def test_the_sequencer_seat_changes_the_sequencers_waits_only() -> None:
    centre = run_scenario("parallel-3")
    corner = run_scenario("parallel-3", sequencer=0)
    assert corner.waits("cancel") == centre.waits("cancel")
    assert corner.waits("sequencer") != centre.waits("sequencer")


def test_the_sweeps_unit_row_is_the_figures_model() -> None:
    counts = (1, 4, 13)
    row = run_assumption(ASSUMPTIONS[0], [0, 1], counts)
    assert list(row.parallel12) == run_scenario("parallel-12").change()
    assert row.crossover == crossover(run_worst(counts, [0, 1]))
    assert [p.n for p in row.worst] == list(counts)


def test_a_set_up_cost_moves_parallel12_toward_the_paper() -> None:
    # what the sweep shows: with a sender's set-up per message, the 2nd..4th jobs gain
    # under active cancellation, where the unit model has them lose
    unit = parallel12(ASSUMPTIONS[0], [0])
    set_up = parallel12(Assumption("set-up", Timing(send_units=1)), [0])
    assert all(s > u for s, u in zip(set_up[1:], unit[1:], strict=True))
    assert all(s > 0 for s in set_up)


def test_the_timing_table_prints_the_paper_first_and_each_assumption() -> None:
    rows = [run_assumption(a, [0], (1, 2)) for a in ASSUMPTIONS[:2]]
    table, line, data = timing_table(rows, 1)
    text = render(table)
    assert text.index("paper") < text.index("unit latency") < text.index("handling 4")
    assert "+21 +58 +73 +48" in text
    assert [r["assumption"] for r in data["rows"]] == [a.name for a in ASSUMPTIONS[:2]]
    assert "stays lower" in line


def test_the_timing_sweep_is_a_part_of_its_own_not_of_picaso() -> None:
    assert "timing" in PARTS and "timing" not in ALL_PARTS


def test_run_assumption_refuses_no_seed_or_an_n_beyond_the_tile() -> None:
    with pytest.raises(ValueError, match="at least one seed"):
        run_assumption(ASSUMPTIONS[0], [])
    with pytest.raises(ValueError, match=r"1\.\.49"):
        run_assumption(ASSUMPTIONS[0], [0], (50,))


def test_the_cli_refuses_a_timing_sweep_beyond_the_work_bound() -> None:
    from click.testing import CliRunner
    from coshare.cli.main import cli

    out = CliRunner().invoke(cli, ["simulate", "--workload", "picaso-timing", "--seeds", "1000"])
    assert out.exit_code != 0
    assert "--seeds 1000: 882000 runs" in out.output
