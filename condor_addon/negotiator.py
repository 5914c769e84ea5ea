"""When ``coshare condor trigger`` plans: in step with the negotiator (pure).

A job coshare places can match only in a negotiation cycle that starts after the placement
was written. With a timer, a placed job waits for the next negotiation as well as for the
timer; planning just before each negotiation cycle removes the timer's part. The negotiator
publishes when its cycles run, in its ad in the collector (HTCondor 23.9)::

    LastNegotiationCycleTime0       when the last cycle started (Unix time)
    LastNegotiationCycleEnd0        when it ended
    LastNegotiationCyclePeriod0     seconds between the starts of the last two cycles

and starts a cycle ``NEGOTIATOR_INTERVAL`` after the start of the one before (sooner when a
schedd asks for one, ``condor_reschedule``, as ``condor_submit`` does after each
submission: ``SUBMIT_SEND_RESCHEDULE``; never sooner than ``NEGOTIATOR_MIN_INTERVAL``).

:class:`NegotiatorSchedule` decides, from the latest ad and its own last cycle, what to do
now (:meth:`~NegotiatorSchedule.step`):

1. A cycle the schedule was not ready for (none of its plans started shortly before it, as
   after a submission's reschedule, or when the daemon starts; or one did, but a job was
   submitted after that plan began, so the plan could not hold it): plan at once, and say so
   (``after_unready``), so that the daemon may ask for a negotiation right away when the
   plan placed jobs: they were submitted after the last plan, and would otherwise wait a
   whole interval.
2. Else plan when the next cycle is due within ``lead_s`` plus what the last plan took:
   ``next = max(start + interval, end)``, rolled forward by whole intervals while past.
3. No negotiator ad at all (the negotiator is down): plan every ``fallback_s``, a timer.

Clocks: the ad's times are the negotiator's clock and ``now`` is the daemon's, the same
host's clock when the daemon runs on the central manager, as deployed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: What the trigger reads of the negotiator's ad.
NEGOTIATOR_PROJECTION = (
    "Name",
    "LastNegotiationCycleTime0",
    "LastNegotiationCycleEnd0",
    "LastNegotiationCyclePeriod0",
)


@dataclass(frozen=True)
class NegotiationCycle:
    """The negotiator's last cycle, from its ad.

    Attributes:
        start_s: when it started (Unix time).
        end_s: when it ended (the start, while it runs).
        period_s: seconds between the starts of the last two cycles (0: unknown).
    """

    start_s: float
    end_s: float
    period_s: float = 0.0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def parse_negotiator(ads: Sequence[Mapping[str, object]]) -> NegotiationCycle | None:
    """The latest cycle among negotiator ads (several negotiators: the one that ran last);
    ``None`` when no ad says when a cycle started (no negotiator, or none has run yet)."""
    found: list[NegotiationCycle] = []
    for ad in ads:
        start = _number(ad.get("LastNegotiationCycleTime0"))
        if start is None:
            continue
        end = _number(ad.get("LastNegotiationCycleEnd0"))
        period = _number(ad.get("LastNegotiationCyclePeriod0"))
        found.append(NegotiationCycle(start, max(end or start, start), period or 0.0))
    return max(found, key=lambda c: c.start_s) if found else None


@dataclass(frozen=True)
class Step:
    """What the trigger does now.

    Attributes:
        plan: run a cycle now.
        why: why it plans (for the log), or why it waits.
        wait_s: how long to wait before the next step (when not planning).
        after_unready: the plan follows a negotiation cycle no plan was ready for.
        due_s: when the next negotiation cycle is expected (Unix time; ``None``: unknown).
    """

    plan: bool
    why: str
    wait_s: float = 0.0
    after_unready: bool = False
    due_s: float | None = None


@dataclass
class NegotiatorSchedule:
    """The trigger's schedule (see the module's rules).

    Args:
        interval_s: ``NEGOTIATOR_INTERVAL`` (the negotiator's configuration); ``None``: the
            ad's period, else ``fallback_s``.
        lead_s: how long before a due cycle a plan should have ended, beyond what the last
            plan took.
        poll_s: how often the ad is read.
        fallback_s: the timer's interval while there is no negotiator ad.
    """

    interval_s: float | None
    lead_s: float
    poll_s: float
    fallback_s: float
    #: The start of the latest negotiation cycle seen.
    seen_start_s: float | None = None
    #: When the last plan started, and how long it took.
    last_plan_s: float | None = None
    last_plan_took_s: float = 0.0

    def period(self, cycle: NegotiationCycle) -> float:
        """The negotiator's interval: configured, else observed, else the fallback."""
        for value in (self.interval_s, cycle.period_s, self.fallback_s):
            if value is not None and value > 0:
                return value
        return self.fallback_s  # pragma: no cover (fallback_s is positive)

    def window(self) -> float:
        """How long before a cycle a plan counts as made for it."""
        return self.lead_s + self.last_plan_took_s + self.poll_s

    def ready_for(self, start_s: float, newest_submit_s: float | None = None) -> bool:
        """Whether a plan started within :meth:`window` before ``start_s``, and after the
        newest waiting job was submitted (``newest_submit_s``, HTCondor's ``QDate``: whole
        seconds, so a job of ``QDate`` q came at most a second later and a plan holds it
        only if it began at ``q + 1`` or after; ``None``: no job waits). Without the second
        condition a job submitted just after a plan, whose submission started the
        negotiation early, waited a whole negotiator interval (bench/trigger_latency.py)."""
        last = self.last_plan_s
        if last is None or not start_s - self.window() <= last <= start_s:
            return False
        return newest_submit_s is None or newest_submit_s + 1.0 <= last

    def due(self, cycle: NegotiationCycle, now_s: float) -> float:
        """When the next negotiation cycle is expected."""
        period = self.period(cycle)
        due = max(cycle.start_s + period, cycle.end_s)
        if due < now_s - self.poll_s:  # late by more than a poll: it did not come, roll on
            due += math.ceil((now_s - self.poll_s - due) / period) * period
        return due

    def step(
        self,
        now_s: float,
        cycle: NegotiationCycle | None,
        newest_submit_s: Callable[[], float | None] | None = None,
    ) -> Step:
        """What to do at ``now_s``, given the latest negotiator ad; ``newest_submit_s`` tells,
        when asked (once per new negotiation cycle), when the newest waiting job was
        submitted (see :meth:`ready_for`)."""
        if cycle is None:
            last = self.last_plan_s
            if last is None or now_s - last >= self.fallback_s:
                return Step(True, f"no negotiator ad: a plan every {self.fallback_s:g} s")
            return Step(False, "no negotiator ad", min(self.poll_s, last + self.fallback_s - now_s))
        if self.seen_start_s is None or cycle.start_s > self.seen_start_s:
            self.seen_start_s = cycle.start_s
            newest = newest_submit_s() if newest_submit_s is not None else None
            if not self.ready_for(cycle.start_s, newest):
                return Step(
                    True,
                    "after a negotiation cycle no plan was ready for",
                    after_unready=True,
                    due_s=self.due(cycle, now_s),
                )
        due = self.due(cycle, now_s)
        plan_at = due - self.lead_s - self.last_plan_took_s
        last = self.last_plan_s
        done = last is not None and last >= due - self.window()  # this cycle has its plan
        if now_s >= plan_at and not done:
            return Step(True, "before the negotiation cycle due", due_s=due)
        wait = plan_at - now_s if now_s < plan_at else self.poll_s
        return Step(
            False, "waiting for the next negotiation cycle", min(wait, self.poll_s), due_s=due
        )

    def planned(self, started_s: float, took_s: float) -> None:
        """A plan started at ``started_s`` and took ``took_s``."""
        self.last_plan_s = started_s
        self.last_plan_took_s = took_s
