"""When ``coshare condor trigger`` plans (condor_addon.negotiator): just before each
negotiation cycle, at once after one no plan was ready for, a timer without a negotiator."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from condor_addon.negotiator import NegotiationCycle, NegotiatorSchedule, parse_negotiator


def schedule(interval_s: float | None = 60.0) -> NegotiatorSchedule:
    return NegotiatorSchedule(interval_s, lead_s=2.0, poll_s=1.0, fallback_s=30.0)


def test_the_latest_negotiator_ad_is_read_and_unusable_values_are_not() -> None:
    ads = [
        {
            "Name": "a",
            "LastNegotiationCycleTime0": 100,
            "LastNegotiationCycleEnd0": 103,
            "LastNegotiationCyclePeriod0": 60,
        },
        {"Name": "b", "LastNegotiationCycleTime0": 160, "LastNegotiationCycleEnd0": 161},
        {"Name": "c", "LastNegotiationCycleTime0": "soon"},
        {"Name": "d", "LastNegotiationCycleTime0": float("nan")},
    ]
    assert parse_negotiator(ads) == NegotiationCycle(160.0, 161.0, 0.0)
    assert parse_negotiator(ads[:1]) == NegotiationCycle(100.0, 103.0, 60.0)
    assert parse_negotiator([{"Name": "never ran"}]) is None
    assert parse_negotiator([]) is None


def test_the_first_cycle_seen_is_planned_for_at_once() -> None:
    s = schedule()
    step = s.step(105.0, NegotiationCycle(100.0, 101.0))
    assert step.plan and step.after_unready and step.due_s == 160.0


def test_it_plans_just_before_the_next_cycle_is_due_and_not_again() -> None:
    s = schedule()
    s.step(105.0, NegotiationCycle(100.0, 101.0))
    s.planned(105.0, 0.5)
    cycle = NegotiationCycle(100.0, 101.0)
    waiting = s.step(110.0, cycle)
    assert not waiting.plan and waiting.wait_s == 1.0  # polls the ad meanwhile
    assert not s.step(157.4, cycle).plan  # due 160, lead 2 + last plan 0.5: at 157.5
    step = s.step(157.5, cycle)
    assert step.plan and not step.after_unready and step.due_s == 160.0
    s.planned(157.5, 0.5)
    assert not s.step(158.5, cycle).plan
    # The cycle the plan was for starts and shows in the ad: it was ready; next one at 220.
    after = s.step(161.0, NegotiationCycle(160.0, 161.0))
    assert not after.plan and after.due_s == 220.0


def test_a_cycle_started_early_by_a_reschedule_is_followed_by_a_plan() -> None:
    s = schedule()
    s.step(105.0, NegotiationCycle(100.0, 101.0))
    s.planned(105.0, 0.5)
    # A submission asked for a negotiation at 130: no plan was made for it.
    step = s.step(131.0, NegotiationCycle(130.0, 130.2, 30.0))
    assert step.plan and step.after_unready and step.due_s == 190.0


def test_a_cycle_a_submission_started_just_after_a_plan_is_followed_by_a_plan() -> None:
    # bench/trigger_latency.py: a job submitted 2 s after a plan started a negotiation that
    # fell in the plan's window; it was counted as ready and the job waited 29 s.
    s = schedule()
    s.step(105.0, NegotiationCycle(100.0, 101.0))
    s.planned(157.5, 0.5)  # the plan for the cycle due at 160
    asked: list[int] = []

    def newest(q: float | None) -> Callable[[], float | None]:
        return lambda: asked.append(1) or q  # type: ignore[func-returns-value]

    late = s.step(159.6, NegotiationCycle(159.0, 159.3, 59.0), newest(158.0))  # QDate 158
    assert late.plan and late.after_unready and asked == [1]
    # A job whose QDate second ended before the plan began was in it: ready, no plan.
    t = schedule()
    t.step(105.0, NegotiationCycle(100.0, 101.0))
    t.planned(157.5, 0.5)
    assert not t.step(159.6, NegotiationCycle(159.0, 159.3, 59.0), newest(156.0)).plan
    u = schedule()
    u.step(105.0, NegotiationCycle(100.0, 101.0))
    u.planned(157.5, 0.5)
    assert not u.step(159.6, NegotiationCycle(159.0, 159.3, 59.0), newest(None)).plan
    # asked once per new negotiation cycle, not at every poll
    assert asked == [1, 1, 1]
    assert not u.step(159.9, NegotiationCycle(159.0, 159.3, 59.0), newest(158.0)).plan
    assert asked == [1, 1, 1]


def test_a_stale_ad_is_rolled_forward_by_whole_intervals() -> None:
    # The negotiator updates its ad every NEGOTIATOR_UPDATE_INTERVAL only: the cycles it
    # ran since are where the interval puts them.
    s = schedule()
    s.step(101.0, NegotiationCycle(100.0, 100.5))
    s.planned(101.0, 0.5)
    stale = NegotiationCycle(100.0, 100.5)
    step = s.step(350.0, stale)
    assert not step.plan and step.due_s == 400.0  # 160, 220, 280 and 340 have passed
    assert s.step(397.5, stale).plan
    s.planned(397.5, 0.5)
    assert not s.step(398.5, stale).plan


def test_a_cycle_late_by_less_than_a_poll_is_still_waited_for() -> None:
    s = schedule()
    s.step(101.0, NegotiationCycle(100.0, 100.5))
    s.planned(157.5, 0.5)
    step = s.step(160.5, NegotiationCycle(100.0, 100.5))  # due 160, not in the ad yet
    assert not step.plan and step.due_s == 160.0


def test_without_a_configured_interval_the_ads_period_is_used() -> None:
    s = schedule(interval_s=None)
    assert s.step(25.0, NegotiationCycle(20.0, 20.1, 10.0)).due_s == 30.0
    assert schedule(interval_s=None).step(25.0, NegotiationCycle(20.0, 20.1)).due_s == 50.0


def test_a_long_cycle_delays_the_next_until_it_ends() -> None:
    assert schedule().step(150.0, NegotiationCycle(100.0, 170.0)).due_s == 170.0


def test_without_a_negotiator_it_is_a_timer() -> None:
    s = schedule()
    assert s.step(0.0, None).plan
    s.planned(0.0, 0.5)
    step = s.step(10.0, None)
    assert not step.plan and step.wait_s == 1.0
    assert not s.step(29.9, None).plan
    assert s.step(30.0, None).plan


@given(
    start=st.floats(0, 1e6),
    interval=st.floats(1, 600),
    lead=st.floats(0, 30),
    took=st.floats(0, 30),
    late=st.floats(0, 5000),
)
def test_a_plan_is_never_later_than_the_due_cycle_and_never_repeated_for_it(
    start: float, interval: float, lead: float, took: float, late: float
) -> None:
    s = NegotiatorSchedule(interval, lead_s=lead, poll_s=1.0, fallback_s=30.0)
    cycle = NegotiationCycle(start, start)
    s.step(start, cycle)
    s.planned(start, took)
    now = start + late
    step = s.step(now, cycle)
    assert step.due_s is not None and step.due_s >= now - 1.0
    if step.plan:
        assert step.due_s - now <= lead + took + 1e-6  # not earlier than the lead asks
        s.planned(now, took)
        again = s.step(now + 0.1, cycle)
        assert not again.plan or again.due_s != step.due_s
    else:
        assert step.wait_s <= 1.0 + 1e-9


@pytest.mark.parametrize("value", [0, -5, True, None, "60"])
def test_unusable_periods_fall_back(value: object) -> None:
    ads = [{"LastNegotiationCycleTime0": 10, "LastNegotiationCyclePeriod0": value}]
    assert parse_negotiator(ads) == NegotiationCycle(10.0, 10.0, 0.0)
