"""Prometheus metrics of planning cycles, exported through ``prometheus_client``.

::

    run_cycle(..., on_phase=metrics.phase)     phases as they end (read, plan, verify, apply)
    metrics.finished(report) | metrics.failed(error)
    metrics.export()  --> METRICS.textfile_dir/coshare_<scheduler>.prom   (node exporter)
                      --> METRICS.pushgateway, job=<push_job>, scheduler=<scheduler>

A cycle is one short process (cron, a systemd timer) or one round of the trigger daemon, so
every series describes *the last cycle*: gauges, replaced whole by each export (the textfile
is written to a temporary file and renamed; the push gateway's group is replaced with PUT).
A cycle that failed exports what it knows: its exit status, its time, the phases it finished
and, when the plan was refused, how many violations the check found; its job counts are
absent, as it planned nothing. Dry runs and ``show`` export nothing.

Series (every one labelled ``scheduler``):

=========================================  ============================================
``coshare_cycle_pending_jobs``             pending annotated jobs the policy planned
``coshare_cycle_placed_jobs``              of those, placed by this cycle's plan
``coshare_cycle_refused_jobs``             refused before planning (bad annotations)
``coshare_cycle_waiting_jobs{reason}``     left waiting, by reason code (the plan's
                                           ``UnplacedCode``; ``scheduler``: held back by
                                           the scheduler itself, e.g. a begin time)
``coshare_cycle_phase_seconds{phase}``     read, plan, verify, apply
``coshare_cycle_edits{result}``            written, unchanged, skipped, failed, withdrawn
``coshare_cycle_unusable_nodes{kind}``     nodes left out: ``closed`` by the scheduler
                                           (drained, down), ``unwritable`` (a name its
                                           placements cannot hold)
``coshare_cycle_contained_failures``       policy failures planned around (a job or node
                                           left out; :mod:`coshare.cycle.containment`)
``coshare_cycle_plan_refused``             1 when the plan check refused the plan
``coshare_cycle_plan_violations``          what the plan check found (0 when sound)
``coshare_cycle_exit_status``              the cycle's exit status (0, 1, 3)
``coshare_cycle_timestamp_seconds``        when the cycle ended (Unix time)
=========================================  ============================================

A long-running process (``coshare condor trigger``) cycles more often than Prometheus may
scrape: what one cycle did would be gone before a scrape saw it. It keeps
:class:`CycleTotals` across its cycles and exports them too, as counters since it started:

=========================================  ============================================
``coshare_trigger_cycles_total``           cycles run
``coshare_trigger_cycle_failures_total``   of those, cycles that failed (exit status 1)
``coshare_trigger_plan_refusals_total``    plans the plan check refused
``coshare_trigger_placed_jobs_total``      jobs placed
``coshare_trigger_refused_jobs_total``     jobs refused before planning
``coshare_trigger_edits_total{result}``    edits, by result
``coshare_trigger_contained_failures_total``  policy failures planned around
=========================================  ============================================

``prometheus_client`` is imported only when an export is configured.
"""

from __future__ import annotations

import logging
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coshare.config import MetricsConfig
from coshare.cycle.run import PHASES, CycleReport
from coshare.errors import CoshareError, PlanInvariantError
from coshare.model import UnplacedCode
from coshare.ports import UNWRITABLE

log = logging.getLogger("coshare.cycle.metrics")

#: Reason codes of waiting jobs: the plan's, and ``scheduler`` for the Source's ``waiting``.
WAITING_REASONS: tuple[str, ...] = (*typing.get_args(UnplacedCode), "scheduler")
#: Results of a cycle's edits.
EDIT_RESULTS = ("written", "unchanged", "skipped", "failed", "withdrawn")

#: Every series: name, help, labels besides ``scheduler``.
_FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "coshare_cycle_exit_status",
        "Exit status of the last cycle (0 ok, 1 failed, 3 some writes failed).",
        (),
    ),
    ("coshare_cycle_timestamp_seconds", "When the last cycle ended (Unix time).", ()),
    ("coshare_cycle_plan_refused", "1 when the plan check refused the last plan.", ()),
    ("coshare_cycle_plan_violations", "Violations the plan check found in the last plan.", ()),
    ("coshare_cycle_phase_seconds", "Seconds of each phase of the last cycle.", ("phase",)),
    ("coshare_cycle_pending_jobs", "Pending annotated jobs the last cycle planned.", ()),
    ("coshare_cycle_placed_jobs", "Jobs the last cycle's plan placed.", ()),
    ("coshare_cycle_refused_jobs", "Jobs refused before planning (unusable annotations).", ()),
    (
        "coshare_cycle_waiting_jobs",
        "Jobs the last cycle left waiting, by reason code.",
        ("reason",),
    ),
    ("coshare_cycle_edits", "Jobs of the last cycle's edits, by result.", ("result",)),
    (
        "coshare_cycle_unusable_nodes",
        "Nodes the last cycle left out: closed by the scheduler, or unwritable names.",
        ("kind",),
    ),
    (
        "coshare_cycle_contained_failures",
        "Policy failures the last cycle planned around (jobs or nodes left out).",
        (),
    ),
)


def cycle_figures(report: CycleReport) -> dict[str, Any]:
    """The figures of one cycle as flat fields (also what a cycle logs, one record).

    Keys: ``pending``, ``placed``, ``refused``, ``waiting`` (a mapping by reason code, every
    code present), ``edits`` (by result), ``seconds`` (by phase).
    """
    waiting = dict.fromkeys(WAITING_REASONS, 0)
    for unplaced in report.plan.unplaced:
        waiting[unplaced.code] = waiting.get(unplaced.code, 0) + 1
    waiting["scheduler"] += len(report.waiting)
    apply = report.apply
    return {
        "pending": report.plan.pending,
        "placed": report.plan.placed,
        "refused": len(report.rejected),
        "waiting": waiting,
        "edits": {
            "written": len(apply.applied),
            "unchanged": len(apply.unchanged),
            "skipped": len(apply.skipped),
            "failed": len(apply.failed),
            "withdrawn": len(apply.withdrawn),
        },
        "seconds": {
            "read": report.read_s,
            "plan": report.plan.seconds,
            "verify": report.verify_s,
            "apply": report.apply_s,
        },
        "contained": len(report.contained),
        "unusable": {
            "closed": sum(u.state != UNWRITABLE for u in report.unusable),
            UNWRITABLE: sum(u.state == UNWRITABLE for u in report.unusable),
        },
    }


#: The counters of :class:`CycleTotals`: name, help, labels besides ``scheduler``.
_TOTALS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("coshare_trigger_cycles", "Cycles the process ran since it started.", ()),
    ("coshare_trigger_cycle_failures", "Of those, cycles that failed.", ()),
    ("coshare_trigger_plan_refusals", "Plans the plan check refused.", ()),
    ("coshare_trigger_placed_jobs", "Jobs placed.", ()),
    ("coshare_trigger_refused_jobs", "Jobs refused before planning.", ()),
    ("coshare_trigger_edits", "Jobs of the cycles' edits, by result.", ("result",)),
    ("coshare_trigger_contained_failures", "Policy failures the cycles planned around.", ()),
)


@dataclass
class CycleTotals:
    """What the cycles of one long-running process did, added up (its counters)."""

    cycles: int = 0
    failures: int = 0
    plan_refusals: int = 0
    placed: int = 0
    refused: int = 0
    edits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EDIT_RESULTS, 0))
    contained: int = 0

    def add(self, metrics: CycleMetrics) -> None:
        """Add one cycle."""
        self.cycles += 1
        self.failures += metrics.figures is None and not metrics.refused_plan
        self.plan_refusals += metrics.refused_plan
        if metrics.figures is not None:
            self.placed += metrics.figures["placed"]
            self.refused += metrics.figures["refused"]
            for result, count in metrics.figures["edits"].items():
                self.edits[result] = self.edits.get(result, 0) + count
            self.contained += metrics.figures["contained"]


@dataclass
class CycleMetrics:
    """What one cycle exports: fed by the cycle, exported once at its end.

    Args:
        scheduler: the adapter's name (``condor``, ``slurm``): the ``scheduler`` label and
            the textfile's name.
        config: where to export.
        clock: wall-clock seconds, for ``coshare_cycle_timestamp_seconds``.
        totals: the running totals of a long-running process, which this cycle adds to
            when it ends and which are exported with it.
    """

    scheduler: str
    config: MetricsConfig
    clock: Callable[[], float] = time.time
    totals: CycleTotals | None = None
    phases: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] | None = None
    exit_status: int = 0
    violations: int = 0
    refused_plan: bool = False

    @property
    def enabled(self) -> bool:
        """Whether any export is configured."""
        return self.config.textfile_dir is not None or self.config.pushgateway is not None

    def phase(self, name: str, seconds: float) -> None:
        """A phase ended (the cycle's ``on_phase`` hook)."""
        self.phases[name] = seconds

    def finished(self, report: CycleReport) -> None:
        """The cycle ran to its end."""
        self.figures = cycle_figures(report)
        self.exit_status = report.exit_status
        if self.totals is not None:
            self.totals.add(self)

    def failed(self, error: CoshareError) -> None:
        """The cycle stopped with ``error`` (nothing, or not everything, was written)."""
        self.exit_status = error.exit_status
        if isinstance(error, PlanInvariantError):
            self.refused_plan = True
            self.violations = len(error.violations)
        if self.totals is not None:
            self.totals.add(self)

    def registry(self) -> Any:
        """A ``prometheus_client`` registry holding this cycle's series."""
        from prometheus_client import CollectorRegistry, Gauge

        registry = CollectorRegistry()
        families: dict[str, Any] = {}
        for name, doc, labels in _FAMILIES:
            families[name] = Gauge(name, doc, ["scheduler", *labels], registry=registry)

        def put(name: str, value: float, **labels: str) -> None:
            families[name].labels(scheduler=self.scheduler, **labels).set(value)

        put("coshare_cycle_exit_status", self.exit_status)
        put("coshare_cycle_timestamp_seconds", self.clock())
        put("coshare_cycle_plan_refused", int(self.refused_plan))
        put("coshare_cycle_plan_violations", self.violations)
        for phase in PHASES:
            if phase in self.phases:
                put("coshare_cycle_phase_seconds", self.phases[phase], phase=phase)
        if self.figures is not None:
            put("coshare_cycle_pending_jobs", self.figures["pending"])
            put("coshare_cycle_placed_jobs", self.figures["placed"])
            put("coshare_cycle_refused_jobs", self.figures["refused"])
            for reason, count in self.figures["waiting"].items():
                put("coshare_cycle_waiting_jobs", count, reason=reason)
            for result, count in self.figures["edits"].items():
                put("coshare_cycle_edits", count, result=result)
            put("coshare_cycle_contained_failures", self.figures["contained"])
            for kind, count in self.figures["unusable"].items():
                put("coshare_cycle_unusable_nodes", count, kind=kind)
        if self.totals is not None:
            self._put_totals(registry, self.totals)
        return registry

    def _put_totals(self, registry: Any, totals: CycleTotals) -> None:
        from prometheus_client.core import CounterMetricFamily

        families = []
        for name, doc, labels in _TOTALS:
            families.append(CounterMetricFamily(name, doc, labels=["scheduler", *labels]))
        cycles, failures, refusals, placed, refused, edits, contained = families
        label = [self.scheduler]
        cycles.add_metric(label, totals.cycles)
        failures.add_metric(label, totals.failures)
        refusals.add_metric(label, totals.plan_refusals)
        placed.add_metric(label, totals.placed)
        refused.add_metric(label, totals.refused)
        for result, count in totals.edits.items():
            edits.add_metric([*label, result], count)
        contained.add_metric(label, totals.contained)

        class Totals:  # a collector of fixed values: no _created series
            def collect(self) -> Any:
                return families

        registry.register(Totals())

    def export(self) -> list[str]:
        """Export to every configured destination; the problems (logged, never raised: an
        unreachable push gateway must not fail a cycle that wrote its plan)."""
        if not self.enabled:
            return []
        from prometheus_client import push_to_gateway, write_to_textfile

        registry = self.registry()
        problems = []
        if self.config.textfile_dir is not None:
            path = Path(self.config.textfile_dir) / f"coshare_{self.scheduler}.prom"
            try:
                write_to_textfile(str(path), registry)
            except OSError as exc:
                problems.append(f"cannot write the metrics file {path}: {exc.strerror or exc}")
        if self.config.pushgateway is not None:
            try:
                push_to_gateway(
                    self.config.pushgateway,
                    job=self.config.push_job,
                    registry=registry,
                    grouping_key={"scheduler": self.scheduler},
                    timeout=self.config.push_timeout_s,
                )
            except OSError as exc:  # urllib's URLError and HTTPError are OSErrors
                problems.append(f"cannot push the metrics to {self.config.pushgateway}: {exc}")
        for problem in problems:
            log.warning("%s", problem, extra={"scheduler": self.scheduler})
        return problems
