"""The edge to HTCondor: the few calls coshare makes through the ``htcondor2`` bindings.

This is the only module that imports the untyped bindings (``classad2`` is also used by
:mod:`condor_addon.expressions` to quote values). Every answer is turned into plain Python
values here, so the parsers in :mod:`condor_addon.view` stay pure. Retries live here and only
here (tenacity, with an injectable ``sleep`` so tests are instant): reads are retried,
then raise :class:`~coshare.errors.SchedulerUnavailable`; a write that fails raises
:class:`~condor_addon.errors.EditFailed` at once, and the adapter decides what to do with the
jobs it named.

The bindings keep one configuration per process, read from ``CONDOR_CONFIG``: pointing them
at ``condor.config_file`` is a process-wide act, done once by :func:`configure_bindings` from
the command's entry point (:func:`open_client`), never by a :class:`CondorClient`, which only
uses the bindings it is given.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import classad2
from coshare.config import CondorConfig
from coshare.errors import SchedulerUnavailable
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from condor_addon.attributes import JOB_PROJECTION, SLOT_PROJECTION
from condor_addon.errors import EditFailed

__all__ = ["CondorClient", "EditFailed", "configure_bindings", "open_client", "plain", "values_of"]


#: What the bindings raise when a daemon cannot be reached or refuses a request, and when a
#: ClassAd cannot be parsed or evaluated: ``HTCondorException`` and ``ClassAdException``
#: since 24.0; plain ``RuntimeError`` (``OSError`` for I/O) and ``ValueError`` in the 23.x
#: htcondor2 that comes with Debian 13's condor 23.9, which ``coshare condor trigger`` runs
#: on in the local pool (deploy/condor/pool trigger-on).
_CLASSAD_ERRORS: tuple[type[Exception], ...] = (
    (classad2.ClassAdException,)
    if hasattr(classad2, "ClassAdException")
    else (RuntimeError, ValueError)
)

#: Said when the HTCondor configuration names no collector, and how to point coshare at one.
NO_POOL_CONFIGURED = (
    "no HTCondor pool is configured here (the HTCondor configuration has no COLLECTOR_HOST): "
    "set condor.config_file (COSHARE_CONDOR_CONFIG_FILE, or CONDOR_CONFIG) to the pool's "
    "condor_config, or condor.collector (COSHARE_CONDOR_COLLECTOR) to the collector's host:port"
)


def binding_errors(htcondor: Any) -> tuple[type[Exception], ...]:
    """The exceptions of failed calls to the daemons, for this version of the bindings."""
    error = getattr(htcondor, "HTCondorException", None)
    return (error,) if isinstance(error, type) else (RuntimeError, OSError)


def plain(value: object) -> object:
    """A ClassAd value as plain Python: ``None`` for undefined and error, lists recursively."""
    if isinstance(value, classad2.Value):  # Undefined / Error (an int enum: check it first)
        return None
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, classad2.ClassAd):
        return {k: plain(value.eval(k)) for k in value}
    if isinstance(value, (bool, int, float, str)):
        return value
    return None


def values_of(ad: Any, projection: Iterable[str]) -> dict[str, object]:
    """Evaluate the projected attributes of one ad (names as in ``projection``).

    Attributes the ad lacks are left out; an expression that does not evaluate is ``None``.
    """
    out: dict[str, object] = {}
    for name in projection:
        if name not in ad:
            continue
        try:
            out[name] = plain(ad.eval(name))
        except _CLASSAD_ERRORS:
            out[name] = None
    return out


def configure_bindings(config_file: str | None) -> Any:
    """The ``htcondor2`` bindings, reading ``config_file`` when one is given.

    This sets ``CONDOR_CONFIG`` for the whole process and reloads the bindings'
    configuration: the bindings have one configuration per process and find it only through
    that variable (``reload_config(path)`` of the 25.x wheel does not find a file given
    directly: "can't find config source"). Call it from a command's entry point.
    """
    if config_file:
        os.environ["CONDOR_CONFIG"] = config_file
    htcondor = importlib.import_module("htcondor2")
    if config_file:
        htcondor.reload_config()
    return htcondor


def open_client(config: CondorConfig, sleep: Callable[[float], None] = time.sleep) -> CondorClient:
    """A client of the pool ``config`` names, with the bindings configured for it."""
    return CondorClient(config, configure_bindings(config.config_file), sleep)


class CondorClient:
    """Collector and schedd queries and queue edits.

    Args:
        config: the ``condor`` section (collector, schedd, retries).
        htcondor: the bindings, configured (:func:`configure_bindings`).
        sleep: how to wait between attempts (tests pass a no-op).
    """

    def __init__(
        self, config: CondorConfig, htcondor: Any, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.config = config
        self._sleep = sleep
        self._htcondor = htcondor
        self._error = binding_errors(htcondor)
        self._schedd: Any = None

    # -- plumbing ------------------------------------------------------------------------------

    def _read(self, what: str, call: Callable[[], Any]) -> Any:
        if not self.collector_name:
            # A configuration that names no pool: asking again finds none either.
            raise SchedulerUnavailable(NO_POOL_CONFIGURED)
        retrying = Retrying(
            stop=stop_after_attempt(self.config.retry_attempts),
            wait=wait_fixed(self.config.retry_wait_s),
            retry=retry_if_exception_type((*self._error, *_CLASSAD_ERRORS)),
            sleep=self._sleep,
            reraise=True,
        )

        def attempt() -> Any:
            try:
                return call()
            except (*self._error, *_CLASSAD_ERRORS):
                self.forget_schedd()  # it may have restarted on another port: locate it again
                raise

        try:
            return retrying(attempt)
        except (*self._error, *_CLASSAD_ERRORS) as exc:
            raise SchedulerUnavailable(
                f"cannot {what} after {self.config.retry_attempts} attempts: {exc}"
            ) from exc

    @property
    def collector_name(self) -> str:
        """The collector's address as configured (``condor.collector``, else the HTCondor
        configuration's ``COLLECTOR_HOST``); empty when neither names one."""
        if self.config.collector:
            return self.config.collector
        return str(self._htcondor.param.get("COLLECTOR_HOST", "") or "").strip()

    @property
    def _the_collector(self) -> str:
        """The collector, for messages."""
        return f"the collector {self.collector_name}" if self.collector_name else "the collector"

    def _collector(self) -> Any:
        if self.config.collector:
            return self._htcondor.Collector(self.config.collector)
        return self._htcondor.Collector()

    def forget_schedd(self) -> None:
        """Locate the schedd again on the next call (after a failure or a restart)."""
        self._schedd = None

    def schedd(self) -> Any:
        """The schedd whose jobs are planned (located once, then reused)."""
        if self._schedd is None:
            self._schedd = self._read(
                f"locate the schedd via {self._the_collector}", self._locate_schedd
            )
        return self._schedd

    def _locate_schedd(self) -> Any:
        htc = self._htcondor
        collector = self._collector()
        if self.config.schedd:
            return htc.Schedd(collector.locate(htc.DaemonType.Schedd, self.config.schedd))
        ads = collector.query(htc.AdTypes.Schedd, projection=["Name"])
        if len(ads) == 1:
            return htc.Schedd(collector.locate(htc.DaemonType.Schedd, ads[0]["Name"]))
        if not ads:
            raise SchedulerUnavailable(f"{self._the_collector} knows no schedd")
        names = ", ".join(sorted(str(ad.get("Name")) for ad in ads))
        raise SchedulerUnavailable(
            f"the collector knows several schedds ({names}); set condor.schedd to one of them"
        )

    # -- reads -----------------------------------------------------------------------------

    def slot_ads(self) -> list[dict[str, object]]:
        """Every slot ad of the pool, projected to what coshare reads."""

        def query() -> list[Any]:
            collector = self._collector()
            return list(
                collector.query(self._htcondor.AdTypes.Startd, projection=list(SLOT_PROJECTION))
            )

        ads = self._read(f"query {self._the_collector}", query)
        return [values_of(ad, SLOT_PROJECTION) for ad in ads]

    def job_ads(
        self, constraint: str, projection: Sequence[str] = JOB_PROJECTION
    ) -> list[dict[str, object]]:
        """The schedd's jobs matching ``constraint``, projected."""

        def query() -> list[Any]:
            return list(self.schedd().query(constraint=constraint, projection=list(projection)))

        ads = self._read("query the schedd", query)
        return [values_of(ad, projection) for ad in ads]

    def history_ads(self, constraint: str, projection: Sequence[str]) -> list[dict[str, object]]:
        """The schedd's history: jobs that left the queue and match ``constraint``, projected
        (``condor_history``, through the bindings)."""

        def query() -> list[Any]:
            return list(self.schedd().history(constraint, list(projection), -1))

        ads = self._read("read the schedd's history", query)
        return [values_of(ad, projection) for ad in ads]

    def other_job_ads(
        self, constraint: str, projection: Sequence[str] = JOB_PROJECTION
    ) -> tuple[list[tuple[str, dict[str, object]]], list[str]]:
        """The jobs matching ``constraint`` of every *other* schedd the collector knows
        (several planners, one per schedd): ``(schedd name, values)`` pairs, and
        a note for each schedd that could not be read (its jobs start nowhere while it is
        unreachable, so the cycle goes on). Only with ``condor.schedd`` set; else none.

        Raises:
            SchedulerUnavailable: the collector cannot be asked for the schedds.
        """
        if not self.config.schedd:
            return [], []
        htc = self._htcondor
        names = self._read(
            f"list the schedds via {self._the_collector}",
            lambda: [
                str(ad.get("Name"))
                for ad in self._collector().query(htc.AdTypes.Schedd, projection=["Name"])
            ],
        )
        out: list[tuple[str, dict[str, object]]] = []
        notes: list[str] = []
        for name in sorted(set(names) - {self.config.schedd}):

            def query(name: str = name) -> list[Any]:
                other = htc.Schedd(self._collector().locate(htc.DaemonType.Schedd, name))
                return list(other.query(constraint=constraint, projection=list(projection)))

            try:
                ads = query()
            except (*self._error, *_CLASSAD_ERRORS) as exc:
                notes.append(
                    f"schedd {name} (another planner's) could not be read ({exc}); "
                    "its placed jobs count only through its planner's claims"
                )
                continue
            out += [(name, values_of(ad, projection)) for ad in ads]
        return out, notes

    def schedd_names(self) -> list[str]:
        """The names of the schedds the collector knows.

        Raises:
            SchedulerUnavailable: the collector cannot be asked.
        """
        htc = self._htcondor
        names: list[str] = self._read(
            f"list the schedds via {self._the_collector}",
            lambda: [
                str(ad.get("Name"))
                for ad in self._collector().query(htc.AdTypes.Schedd, projection=["Name"])
            ],
        )
        return names

    def schedd_job_ads(
        self, name: str, constraint: str, projection: Sequence[str]
    ) -> list[dict[str, object]]:
        """The jobs matching ``constraint`` of the schedd ``name`` (read-only), projected.

        Raises:
            SchedulerUnavailable: the schedd cannot be located or read.
        """
        htc = self._htcondor

        def query() -> list[Any]:
            schedd = htc.Schedd(self._collector().locate(htc.DaemonType.Schedd, name))
            return list(schedd.query(constraint=constraint, projection=list(projection)))

        ads = self._read(f"query the schedd {name}", query)
        return [values_of(ad, projection) for ad in ads]

    def negotiator_ads(self, projection: Sequence[str]) -> list[dict[str, object]]:
        """The negotiator ads of the pool, projected (none when no negotiator runs)."""

        def query() -> list[Any]:
            return list(
                self._collector().query(
                    self._htcondor.AdTypes.Negotiator, projection=list(projection)
                )
            )

        ads = self._read(f"query {self._the_collector}", query)
        return [values_of(ad, projection) for ad in ads]

    def _negotiator_ad(self) -> Any:
        """The negotiator's ad, which locates it (the first by name when there are several).

        Raises:
            SchedulerUnavailable: the collector knows no negotiator.
        """
        ads = list(self._collector().query(self._htcondor.AdTypes.Negotiator))
        if not ads:
            raise SchedulerUnavailable(f"{self._the_collector} knows no negotiator")
        return min(ads, key=lambda ad: str(ad.get("Name", "")))

    def negotiator_priorities(self) -> list[dict[str, object]]:
        """The negotiator's accounting, one mapping per submitter and per accounting group
        (``condor_userprio -l``: ``Priority``, ``AccountingGroup``, ``GroupSortKey``,
        ``EffectiveQuota``, ``SurplusPolicy``...).

        Raises:
            SchedulerUnavailable: no negotiator, or it did not answer.
        """

        def query() -> list[Any]:
            negotiator = self._htcondor.Negotiator(self._negotiator_ad())
            return list(negotiator.getPriorities(False))

        ads = self._read("ask the negotiator for its user priorities", query)
        return [values_of(ad, list(ad.keys())) for ad in ads]

    def negotiator_settings(self, wanted: Callable[[str], bool]) -> dict[str, object]:
        """The negotiator's own configuration settings whose names ``wanted`` accepts
        (``condor_config_val -negotiator``), as text.

        Raises:
            SchedulerUnavailable: no negotiator, or it did not answer.
        """

        def query() -> dict[str, object]:
            remote = self._htcondor.RemoteParam(self._negotiator_ad())
            return {str(k): remote.get(k) for k in list(remote.keys()) if wanted(str(k))}

        settings: dict[str, object] = self._read("read the negotiator's configuration", query)
        return settings

    def param_seconds(self, name: str) -> float | None:
        """A duration from the HTCondor configuration the bindings read (``None`` when it is
        not set or not a number)."""
        value = self._htcondor.param.get(name)
        try:
            seconds = float(value) if value is not None else None
        except (TypeError, ValueError):
            return None
        return seconds if seconds is not None and 0 < seconds < float("inf") else None

    # -- writes ----------------------------------------------------------------------------

    def reschedule(self) -> None:
        """Ask the schedd to ask the negotiator for a cycle now (``condor_reschedule``).

        Raises:
            SchedulerUnavailable: the schedd could not be reached.
        """
        try:
            self.schedd().reschedule()
        except self._error as exc:
            self.forget_schedd()
            raise SchedulerUnavailable(f"cannot ask the schedd to reschedule: {exc}") from exc

    def edit_ids(self, job_ids: Sequence[str], attribute: str, value: str) -> int:
        """Set ``attribute`` to the ClassAd expression ``value`` in every listed job.

        One schedd transaction: either every job is edited or none (a job that left the queue
        aborts it).

        Raises:
            EditFailed: nothing was written.
        """
        if not job_ids:
            return 0
        try:
            return int(self.schedd().edit(list(job_ids), attribute, value))
        except self._error as exc:
            self.forget_schedd()
            raise EditFailed(attribute, f"{len(job_ids)} jobs", str(exc)) from exc

    def edit_where(self, constraint: str, attribute: str, value: str) -> int:
        """Set ``attribute`` in the jobs matching ``constraint``; the number edited (0 when none
        matches: the schedd then reports an error, which is told apart by a query).

        Raises:
            EditFailed: jobs matched but the edit was refused or did not arrive.
        """
        try:
            return int(self.schedd().edit(constraint, attribute, value))
        except self._error as exc:
            if not self.job_ads(constraint, ("ClusterId", "ProcId")):
                return 0
            raise EditFailed(attribute, "the jobs of a constraint", str(exc)) from exc

    def hold_where(self, constraint: str, reason: str) -> None:
        """Hold the jobs matching ``constraint`` with ``reason`` (shown by ``condor_q -hold``).

        Raises:
            EditFailed: the schedd refused or could not be reached.
        """
        try:
            # A (text, subcode) pair: htcondor2 25.x drops a reason given as a plain string.
            self.schedd().act(self._htcondor.JobAction.Hold, constraint, reason=(reason, 0))
        except self._error as exc:
            self.forget_schedd()
            raise EditFailed("hold", "the jobs of a constraint", str(exc)) from exc

    def act_where(self, action: str, constraint: str) -> None:
        """A schedd action (``Suspend``, ``Continue``, ``VacateFast``: trial co-runs) on
        the jobs matching ``constraint``.

        Raises:
            EditFailed: the schedd refused or could not be reached.
        """
        if action not in ("Suspend", "Continue", "VacateFast"):
            raise ValueError(f"not a trial action: {action!r}")
        try:
            self.schedd().act(getattr(self._htcondor.JobAction, action), constraint)
        except self._error as exc:
            self.forget_schedd()
            raise EditFailed(action.lower(), "the jobs of a constraint", str(exc)) from exc
