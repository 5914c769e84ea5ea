"""One planning cycle as the commands run it: under the queue's lock, logged, and its
metrics exported.

``coshare condor|slurm cycle`` (cron, a systemd timer) runs it once;
``coshare condor trigger`` runs it in step with the negotiator. Both go through
:func:`run_once`, so a cycle logs and exports the same way however it was started.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

from coshare.cli.main import membw_programs
from coshare.config import Config
from coshare.coord.cycle import coordination, global_job_ids, job_key
from coshare.cycle.metrics import CycleMetrics, CycleTotals, cycle_figures
from coshare.cycle.run import CycleReport, run_cycle, runs_trials
from coshare.cycle.trials import (
    FactsProbe,
    InjectedProbe,
    SocketProbe,
    StepProbe,
    probe_step_of,
    run_trials,
    write_record_file,
)
from coshare.errors import CoshareError, CycleBusy, SchedulerError
from coshare.ledger.trials import TrialLimits
from coshare.policies import Policy
from coshare.ports import Adapter, TrialControl, TrialProbe
from coshare.schema import snapshot_to_dict
from coshare.system.lock import cycle_lock

log = logging.getLogger("coshare.cycle")


def run_once(
    name: str,
    config: Config,
    policy: Policy,
    open_adapter: Callable[[Config], Adapter],
    lock_file: str | None,
    *,
    dry_run: bool = False,
    log_cycle: bool = True,
    totals: CycleTotals | None = None,
) -> CycleReport:
    """Run one cycle of scheduler ``name`` under its lock; log it (:func:`log_report`,
    unless ``log_cycle`` is false: ``cycle``'s text output already says all of it) and
    export its metrics (not for a dry run), with ``totals``, the running totals of a
    long-running caller, which this cycle adds to.

    With ``coordination.dsn`` set, the cycle also holds its planner's lease
    (:mod:`coshare.coord.cycle`): taken or renewed before reading, checked again right
    before writing; and its plan's device memory is claimed in the engine before it is
    written (the other planners' claims count in its plan).

    Raises:
        CycleBusy: another cycle holds the lock, or (:class:`~coshare.errors.Standby`)
            another instance of this planner holds the lease (nothing was done, nothing is
            exported).
        CoshareError: the cycle failed (its metrics are exported first); with an engine,
            :class:`~coshare.errors.LeaseLost` or
            :class:`~coshare.errors.EngineUnavailable` (nothing was written), or
            :class:`~coshare.errors.StoppedBetweenBatches` (either, found before a batch
            after the first: the batches sent are complete, nothing after them written).
    """
    metrics = CycleMetrics(name, config.metrics, totals=totals)
    try:
        with (
            cycle_lock(lock_file, f"{name}.lock_file"),
            coordination(config.coordination, name, dry_run) as coordinated,
        ):
            adapter = open_adapter(config)
            if coordinated is not None:
                coordinated.gate.global_ids = global_job_ids(adapter)
                coordinated.gate.key = job_key(adapter)
            report = run_cycle(
                adapter,
                policy,
                adapter,
                dry_run=dry_run,
                strict_threads=config.policy.threads == "strict",
                on_phase=metrics.phase,
                before_write=None if coordinated is None else coordinated.fence,
                gate=None if coordinated is None else coordinated.gate,
                fence_every_s=config.coordination.fence_interval_s,
            )
            if policy.name == "membw" and config.policy.membw.trials:
                report = replace(report, trials=step_trials(config, adapter, report, dry_run))
    except CycleBusy:
        raise
    except CoshareError as error:
        if not dry_run:
            metrics.failed(error)
            metrics.export()
        raise
    log_contained(name, report, config.cycle.failure_dir)
    if log_cycle:
        log_report(name, report)
    if not dry_run:
        metrics.finished(report)
        metrics.export()
    return report


def step_trials(
    config: Config, adapter: Adapter, report: CycleReport, dry_run: bool
) -> tuple[str, ...]:
    """Move the trial co-runs one step (:func:`coshare.cycle.trials.run_trials`) and record
    what they measured per program; what was done, one line each.

    Raises:
        SchedulerError: the adapter offers no trial verbs (``policy.membw.trials`` needs them).
    """
    if not runs_trials(adapter):
        raise SchedulerError(
            "policy.membw.trials: this scheduler's adapter does not run trial co-runs"
        )
    membw = config.policy.membw
    control = cast(TrialControl, adapter)
    probe: TrialProbe
    step = probe_step_of(adapter)
    if membw.probe_inject_file is not None:
        probe = InjectedProbe(membw.probe_inject_file)
    elif membw.probe_via == "socket":
        probe = SocketProbe(membw.probe_socket, membw.probe_timeout_s, control.node_job_id)
    elif membw.probe_via == "facts":
        if not getattr(adapter, "probes_via_facts", False):
            reason = getattr(adapter, "probe_facts_unsupported_reason", "")
            raise SchedulerError(
                "policy.membw.probe_via facts: this scheduler's node "
                "daemons read no trial requests"
                f"{f' ({reason})' if reason else ''}; use probe_via: socket "
                "or step"
            )
        assert report.snapshot is not None
        probe = FactsProbe(report.snapshot, control.node_job_id)
    elif step is not None:
        probe = StepProbe(
            step.probe_step,
            membw.probe_command,
            membw.probe_socket,
            membw.probe_timeout_s,
            control.node_job_id,
        )
    else:
        reason = getattr(adapter, "probe_step_unsupported_reason", "")
        raise SchedulerError(
            "policy.membw.probe_via step: this scheduler's adapter runs no "
            f"command on a job's node{f' ({reason})' if reason else ''}; "
            "use probe_via: socket"
        )
    assert report.snapshot is not None
    limits = TrialLimits(membw.max_share, membw.init_s, membw.max_suspend_s, membw.facts_wait_s)
    done = run_trials(
        control,
        probe,
        report.snapshot,
        membw_programs(config),
        limits,
        time.time(),
        dry_run=dry_run,
    )
    if membw.record_file is not None and not dry_run and done.measured:
        try:
            write_record_file(membw.record_file, done.measured)
        except OSError as exc:
            done.notes.append(
                f"policy.membw.record_file {membw.record_file}: not written "
                f"({exc.strerror or exc}); the queue's records still hold "
                "the measurements"
            )
    return tuple(done.notes)


def log_report(name: str, report: CycleReport) -> None:
    """One record for the cycle (its figures as fields), and one per job it refused,
    skipped, failed or withdrew (the job id as a field), all at INFO."""
    figures = cycle_figures(report)
    log.info(
        "cycle %s: %d pending, %d placed, wrote %d",
        "(dry run) " if report.apply.dry_run else "done",
        figures["pending"],
        figures["placed"],
        figures["edits"]["written"],
        extra={
            "scheduler": name,
            "policy": report.plan.policy,
            "dry_run": report.apply.dry_run,
            "status": report.exit_status,
            **figures,
        },
    )
    for line in report.trials:
        log.info("trial: %s", line, extra={"scheduler": name, "outcome": "trial"})
    for rejected in report.rejected:
        log.info(
            "refused job %s: %s",
            rejected.job,
            rejected.reason,
            extra={"scheduler": name, "job": rejected.job, "outcome": "refused"},
        )
    for outcomes, what in (
        (report.apply.skipped, "skipped"),
        (report.apply.failed, "failed"),
        (report.apply.withdrawn, "withdrew"),
        (report.apply.requeued, "requeued"),
    ):
        for outcome in outcomes:
            log.info(
                "%s job %s: %s",
                what,
                outcome.job,
                outcome.detail,
                extra={"scheduler": name, "job": outcome.job, "outcome": what},
            )


def log_contained(name: str, report: CycleReport, failure_dir: str | None) -> None:
    """One error per policy failure the cycle planned around, naming what was left out and
    the file that reproduces it (written into ``failure_dir``; a file that cannot be written
    is said, and never fails the cycle, which has written the rest)."""
    for number, contained in enumerate(report.contained, 1):
        left = ", ".join((*contained.jobs, *(f"node {n}" for n in contained.nodes))[:10])
        where = "not written (cycle.failure_dir is null)"
        if failure_dir is not None:
            path = Path(failure_dir) / (
                f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{number}.json"
            )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(snapshot_to_dict(contained.snapshot), indent=1))
                where = f"reproduce with: coshare plan {path} --policy {report.plan.policy}"
            except OSError as exc:
                where = f"its snapshot could not be written to {path}: {exc.strerror or exc}"
        log.error(
            "policy %s failed on %s and planned the rest without it: %s; %s",
            report.plan.policy,
            left,
            contained.error,
            where,
            extra={
                "scheduler": name,
                "outcome": "policy_failed",
                "jobs": list(contained.jobs),
                "nodes": list(contained.nodes),
            },
        )


def log_notes(name: str, notes: tuple[str, ...]) -> None:
    """What the Source found an admin should fix, one warning each."""
    for note in notes:
        log.warning("%s", note, extra={"scheduler": name})
