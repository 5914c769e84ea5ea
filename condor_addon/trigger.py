"""``coshare condor trigger``: the planning cycle in step with the negotiator, as a daemon
that ``condor_master`` starts, restarts and stops.

::

    condor_master --DAEMON_LIST--> coshare condor trigger --log-file $(LOG)/CoshareTriggerLog
        every trigger_poll_s:  collector: the negotiator's ad --> NegotiatorSchedule.step()
        plan now?              run_once(): lock, read, plan, verify, write, log, metrics
        after an unready cycle, placed jobs:  schedd.reschedule()  (a negotiation now)

:mod:`condor_addon.negotiator` decides when (pure); this module only reads the ad, runs the
cycle (:func:`coshare.cli.cycles.run_once`, the same as ``coshare condor cycle``: the same lock,
log records and metrics) and sleeps. Nothing stops it but SIGTERM or SIGINT (between two
steps; a cycle under way finishes first): a pool that cannot be read, a failed cycle or a
refused plan are logged and tried again at the next step. SIGHUP (what
``condor_reconfig`` sends a daemon that is not a DaemonCore one) reloads coshare's
configuration before the next step.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coshare.cli.cycles import log_notes, run_once
from coshare.cli.main import policy_options
from coshare.config import Config
from coshare.cycle.metrics import CycleTotals
from coshare.cycle.run import CycleReport
from coshare.errors import CoshareError, CycleBusy, SchedulerError
from coshare.policies import make_policy

from condor_addon.adapter import CondorAdapter
from condor_addon.attributes import IDLE, MANAGED
from condor_addon.client import CondorClient, open_client
from condor_addon.negotiator import NEGOTIATOR_PROJECTION, NegotiatorSchedule, parse_negotiator

log = logging.getLogger("coshare.condor.trigger")


@dataclass
class Trigger:
    """The daemon's state: its configuration, its client and its schedule.

    Args:
        load: (re)reads the configuration (at start and on SIGHUP).
        client: the bindings edge (made from the configuration when ``None``).
        clock: wall-clock seconds (the negotiator's ad is in Unix time).
    """

    load: Callable[[], Config]
    client: CondorClient | None = None
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)
    reload: threading.Event = field(default_factory=threading.Event)
    config: Config = field(init=False)
    schedule: NegotiatorSchedule = field(init=False)
    #: What its cycles did since it started (exported with each cycle's metrics).
    totals: CycleTotals = field(default_factory=CycleTotals)

    def __post_init__(self) -> None:
        self._configure()

    def _configure(self) -> None:
        self.config = self.load()
        if self.client is None or self.reload.is_set():
            self.client = open_client(self.config.condor)
        condor = self.config.condor
        interval = self.client.param_seconds("NEGOTIATOR_INTERVAL")
        old = getattr(self, "schedule", None)
        self.schedule = NegotiatorSchedule(
            interval, condor.trigger_lead_s, condor.trigger_poll_s, self.config.cycle.interval_s
        )
        if old is not None:  # what it saw and did stays true across a reload
            self.schedule.seen_start_s = old.seen_start_s
            self.schedule.last_plan_s = old.last_plan_s
            self.schedule.last_plan_took_s = old.last_plan_took_s
        log.info(
            "in step with the negotiator: NEGOTIATOR_INTERVAL %s, lead %g s, poll %g s, "
            "reschedule %s",
            f"{interval:g} s" if interval else "unknown (from its ad)",
            condor.trigger_lead_s,
            condor.trigger_poll_s,
            condor.trigger_reschedule,
            extra={"negotiator_interval_s": interval},
        )

    def run(self) -> None:
        """Step until :attr:`stop` is set."""
        while not self.stop.is_set():
            if self.reload.is_set():
                log.info("SIGHUP: reloading the configuration")
                try:
                    self._configure()
                except CoshareError as exc:
                    log.error("the new configuration is not usable, keeping the old: %s", exc)
                self.reload.clear()
            self.stop.wait(self.step())

    def step(self) -> float:
        """Read the negotiator's ad, plan if it is time; how long to wait now."""
        assert self.client is not None
        schedule = self.schedule
        try:
            ads = self.client.negotiator_ads(NEGOTIATOR_PROJECTION)
        except SchedulerError as exc:
            log.error("%s; trying again in %g s", exc, schedule.fallback_s)
            return schedule.fallback_s
        cycle = parse_negotiator(ads)
        seen = schedule.seen_start_s
        now = self.clock()
        decision = schedule.step(now, cycle, self._newest_submit_s)
        if cycle is not None and (seen is None or cycle.start_s > seen):
            last = schedule.last_plan_s
            log.debug(
                "negotiation cycle started at %.3f",
                cycle.start_s,
                extra={
                    "negotiation_start_s": cycle.start_s,
                    "plan_lead_s": None if last is None else cycle.start_s - last,
                },
            )
        if not decision.plan:
            return decision.wait_s
        log.info("planning %s", decision.why, extra={"why": decision.why, "due_s": decision.due_s})
        report = self._cycle()
        took = self.clock() - now
        schedule.planned(now, took)
        if decision.due_s is not None and not decision.after_unready:
            ready_s = decision.due_s - now - took
            log.info(
                "plan ready %.2f s before the negotiation cycle due",
                ready_s,
                extra={"due_s": decision.due_s, "ready_s": ready_s},
            )
        placed = report is not None and bool(report.apply.applied)
        if placed and decision.after_unready and self.config.condor.trigger_reschedule:
            try:
                self.client.reschedule()
            except SchedulerError as exc:
                log.warning("%s", exc)
            else:
                assert report is not None
                log.info(
                    "asked the schedd for a negotiation cycle now, for %d placed jobs",
                    len(report.apply.applied),
                    extra={"jobs": list(report.apply.applied)},
                )
        return 0.0

    def _newest_submit_s(self) -> float | None:
        """When the newest idle coshare job was submitted (its ``QDate``), or ``None``:
        none waits, or the schedd could not be read (then the plan counts as ready, as
        before; the next cycle's timer still comes)."""
        assert self.client is not None
        try:
            ads = self.client.job_ads(f"JobStatus == {IDLE} && {MANAGED} =?= true", ("QDate",))
        except SchedulerError as exc:
            log.warning("%s", exc)
            return None
        dates = [
            float(d)
            for ad in ads
            for d in [ad.get("QDate")]
            if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d)
        ]
        return max(dates, default=None)

    def _cycle(self) -> CycleReport | None:
        """One cycle, logged; ``None`` when it failed or another cycle held the lock."""
        config = self.config
        client = self.client
        assert client is not None
        policy = make_policy(config.policy.name, policy_options(config))
        try:
            report = run_once(
                "condor",
                config,
                policy,
                lambda c: CondorAdapter(client, c),
                config.condor.lock_file,
                totals=self.totals,
            )
        except CycleBusy as busy:
            log.info("%s", busy)
            return None
        except CoshareError as exc:
            log.error("cycle failed: %s", exc, extra={"status": exc.exit_status})
            return None
        log_notes("condor", report.notes)
        return report


def main(load: Callable[[], Config]) -> None:
    """Run the trigger until SIGTERM or SIGINT (the master's ``condor_off``, or its
    shutdown); SIGHUP reloads the configuration.

    Raises:
        CoshareError: the configuration or the pool's bindings are unusable at start.
    """
    trigger = Trigger(load)
    signal.signal(signal.SIGTERM, lambda *_: trigger.stop.set())
    signal.signal(signal.SIGINT, lambda *_: trigger.stop.set())
    signal.signal(signal.SIGHUP, lambda *_: trigger.reload.set())
    log.info("coshare condor trigger started")
    trigger.run()
    log.info("coshare condor trigger stopped")
