"""Offloads over a device's hardware threads (coshare.sim.oversubscribe) and the knapsack's
margin over random in a sweep (coshare.sim.margin)."""

from __future__ import annotations

import pytest
from coshare.errors import InputError
from coshare.model import MILLI, Device, Job, Node
from coshare.policies import PolicyOptions, make_policy
from coshare.sim.device import OffloadModel
from coshare.sim.engine import SimOptions, simulate
from coshare.sim.experiments import Setup, compare
from coshare.sim.jobs import SimJob
from coshare.sim.margin import PAPER_TABLE_II_VS_RANDOM, margin_rows
from coshare.sim.oversubscribe import (
    OversubscribedModel,
    oversubscribed_rate,
    parse_oversubscribe,
)
from coshare.sim.params import apply, parse_sweeps
from coshare.sim.report import GridRun, margin_table, render

EPS = 1e-9


def phi(name: str = "a") -> Node:
    return Node(name, 16 * MILLI, 65536, (Device("0", 8192, 240),))


def job(ident: str, threads: int, phases: tuple[float, ...]) -> SimJob:
    return SimJob(Job(ident, 1000, threads, memory_mib=1024), phases)


def run(jobs: list[SimJob], model: OffloadModel | OversubscribedModel) -> dict[str, float]:
    result = simulate(
        (phi(),),
        jobs,
        make_policy("random", PolicyOptions(threads="soft")),
        options=SimOptions(cycle_delay_s=0),
        model=model,
    )
    return {r.id: r.end_s or 0.0 for r in result.jobs}


@pytest.mark.parametrize(("slowdown", "end"), [(1.0, 20.0), (2.0, 40.0), (4.5, 90.0)])
def test_two_full_thread_offloads_take_twice_s_their_time_alone(
    slowdown: float, end: float
) -> None:
    # 480 threads on 240: each gets half the hardware threads, and pays s for switching;
    # at s = 4.5 that is 9x, the paper's "as much as 800%".
    ends = run(
        [job("a", 240, (0.0, 10.0, 0.0)), job("b", 240, (0.0, 10.0, 0.0))],
        OversubscribedModel(slowdown),
    )
    assert ends == {"a": pytest.approx(end), "b": pytest.approx(end)}


def test_under_the_gate_the_same_offloads_wait_instead() -> None:
    ends = run([job("a", 240, (0.0, 10.0, 0.0)), job("b", 240, (0.0, 10.0, 0.0))], OffloadModel())
    assert sorted(ends.values()) == [10.0, 20.0]


def test_the_rate_rises_again_when_an_offload_ends() -> None:
    # 360 threads on 240, s = 3: each runs at (2/3) / (1 + 2 * 0.5) = 1/3 of its speed.
    # b's 2 s of work end at t = 6; a has done 2 of its 10 s then, and runs the other 8
    # alone at full speed: it ends at 14.
    model = OversubscribedModel(3.0, record=True)
    ends = run([job("a", 240, (0.0, 10.0, 0.0)), job("b", 120, (0.0, 2.0, 0.0))], model)
    assert ends == {"a": pytest.approx(14.0), "b": pytest.approx(6.0)}
    assert model.peak_threads == [360]
    # hardware threads busy: 240 from 0 to 14
    assert model.busy_thread_s[0] == pytest.approx(240 * 14.0)


def test_offloads_that_fit_run_exactly_as_under_the_gate() -> None:
    # the paper's Fig. 3: two 120-thread jobs, never over 240 threads
    j3 = job("3", 120, (1.0, 5.0, 2.0, 5.0, 1.0))
    j4 = job("4", 120, (1.0, 4.0, 1.0, 4.0, 1.0, 4.0, 1.0))
    assert run([j3, j4], OversubscribedModel(9.0)) == run([j3, j4], OffloadModel())


def test_the_rate_is_continuous_at_the_limit_and_falls_with_excess_and_cost() -> None:
    assert oversubscribed_rate(241, 240, 4.5) == pytest.approx(1.0, rel=0.02)
    rates = [oversubscribed_rate(u, 240, 3.0) for u in (260, 360, 480, 720)]
    assert rates == sorted(rates, reverse=True)
    costs = [oversubscribed_rate(360, 240, s) for s in (1.0, 1.5, 2.0, 4.5)]
    assert costs == sorted(costs, reverse=True)
    assert oversubscribed_rate(480, 240, 4.5) == pytest.approx(1 / 9)


def test_parse_oversubscribe_accepts_wait_or_a_slowdown_of_at_least_one() -> None:
    assert parse_oversubscribe("wait") == "wait"
    assert parse_oversubscribe(" 2.50 ") == "2.5"
    for bad in ("0.5", "nan", "inf", "-1", "fast", "101"):
        with pytest.raises(ValueError, match="wait, or a slowdown from 1 to 100"):
            parse_oversubscribe(bad)
    with pytest.raises(ValueError, match="finite number >= 1"):
        OversubscribedModel(0.9)


def test_a_sweep_sets_the_model_and_refuses_a_bad_value() -> None:
    points = parse_sweeps(["oversubscribe=wait,1.5"])
    assert [apply(p, Setup()).oversubscribe for p in points] == ["wait", "1.5"]
    assert isinstance(apply(points[1], Setup()).model(), OversubscribedModel)
    with pytest.raises(InputError, match=r"oversubscribe: '0' is not allowed \(allowed: wait"):
        parse_sweeps(["oversubscribe=0"])


def _makespans(threads: str, policy: str, values: list[str]) -> list[float]:
    found = []
    for value in values:
        setup = Setup(threads=threads, offload_share=0.8, oversubscribe=value)  # type: ignore[arg-type]
        comp = compare("table1", 60, 2, (policy,), 0, setup)
        found.append(comp.runs[policy].makespan_s)
    return found


def test_strict_never_oversubscribes_so_no_cost_moves_it() -> None:
    makespans = _makespans("strict", "knapsack", ["wait", "1", "2", "4.5"])
    assert len(set(makespans)) == 1


def test_soft_pays_more_the_more_oversubscription_costs() -> None:
    makespans = _makespans("soft", "random", ["1", "1.5", "2", "4.5"])
    assert makespans == sorted(makespans)
    assert makespans[-1] > 2 * makespans[0]


def _summary(policy: str, makespan: float):  # type: ignore[no-untyped-def]
    from coshare.sim.metrics import RunSummary

    return RunSummary(policy, 8, 1000, makespan, 0.5, 1.0, 1.0, 1.0, 0.0, 1, 0)


def test_margin_rows_pair_each_thread_mode_and_knapsack_strict_with_random_soft() -> None:
    runs = [
        GridRun("table1", (("threads", t),), seed, _summary(p, value + seed))
        for t, values in (
            ("strict", {"exclusive": 3700.0, "random": 2900.0, "knapsack": 2950.0}),
            ("soft", {"exclusive": 3700.0, "random": 2500.0, "knapsack": 2400.0}),
        )
        for p, value in values.items()
        for seed in (0, 2)
    ]
    rows = {r.threads: r for r in margin_rows(runs)}
    assert set(rows) == {"strict", "soft", "soft/strict"}
    assert rows["soft"].vs_random == pytest.approx(2401 / 2501 - 1)
    assert rows["strict"].vs_random == pytest.approx(2951 / 2901 - 1)
    assert rows["soft/strict"].vs_random == pytest.approx(2951 / 2501 - 1)
    assert rows["soft/strict"].vs_exclusive == pytest.approx(2951 / 3701 - 1)
    assert all(r.seeds == 2 for r in rows.values())
    text = render(margin_table(list(rows.values()), ["threads"]))
    assert f"{PAPER_TABLE_II_VS_RANDOM:+.1%}" in text and "+18.0%" in text


def test_no_margin_without_both_random_and_knapsack() -> None:
    runs = [GridRun("table1", (), 0, _summary(p, 3000.0)) for p in ("exclusive", "knapsack")]
    assert margin_rows(runs) == []
