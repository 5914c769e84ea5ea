"""Trial co-runs, one cycle's steps: each cycle moves every trial job one step
(:mod:`coshare.ledger.trials`) through its scheduler's :class:`~coshare.ports.TrialControl` and a
:class:`~coshare.ports.TrialProbe` (the flow is in :mod:`coshare.cycle.trials`). Pure: the
probes and the record file, which do I/O, are :mod:`coshare.cycle.trials`'s; the simulator
runs these same steps on modelled probes (:mod:`coshare.sim.poncos_trials`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from coshare.ledger.bandwidth import UNKNOWN_SHARE, job_share, measured_use
from coshare.ledger.trials import (
    Step,
    TrialJob,
    TrialLimits,
    advance,
    awaiting,
    decide,
    measured_programs,
)
from coshare.model import RunningJob, Snapshot
from coshare.ports import ProbeResult, TrialControl, TrialProbe


@dataclass
class TrialReport:
    """What one cycle did with the trial co-runs.

    Attributes:
        steps: the steps taken (waiting jobs left out), in order.
        notes: what the cycle says: each step, and each failure (a probe that failed, a
            verb the scheduler refused).
        measured: each program's share as the queue's records now say.
    """

    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: dict[str, float] = field(default_factory=dict)


def run_trials(
    control: TrialControl,
    probe: TrialProbe,
    snapshot: Snapshot,
    programs: Mapping[str, float],
    limits: TrialLimits,
    now_s: float,
    *,
    dry_run: bool = False,
) -> TrialReport:
    """Move every trial job one step (see the module docstring).

    Args:
        control: the scheduler's trial verbs (and the jobs its last read found).
        probe: measures a trial.
        snapshot: what the same read found (the partners' programs and nodes).
        programs: the recorded shares the policy plans with (the partners' use).
        limits: ``policy.membw``'s options.
        now_s: the cycle's clock (epoch seconds).
        dry_run: say what would be done; probe, suspend and write nothing.
    """
    report = TrialReport()
    jobs = list(control.trial_jobs())
    alive = {r.id for r in snapshot.running if r.state == "running"}
    done: list[TrialJob] = []
    for job in jobs:
        step = advance(job, alive, now_s, limits)
        if step.action in ("wait", "none"):
            done.append(job)
            continue
        if dry_run:
            report.steps.append(step)
            report.notes.append(f"(dry run) {step.note}")
            done.append(job)
            continue
        if step.action == "probe":
            why = getattr(probe, "request_why", None)  # the request a node reads itself
            if step.record is not None and why is not None:
                step = replace(step, record=replace(step.record, why=why))
            elif why is not None and job.record.why != why:  # measuring, asked no node yet
                step = replace(step, record=replace(job.record, at_s=int(now_s), why=why))
            if step.record is not None and not _write(control, job.job, step, report):
                done.append(job)
                continue
            asked = step.record or job.record  # the measuring record: the request
            partners = [p for p in job.record.partners if p in alive]
            result = _measure(probe, job, partners, asked.at_s)
            if not result.pending or step.record is not None:
                report.notes.append(step.note)  # not "probing again" each pending cycle
            use = partners_use(snapshot, job, partners, programs, limits.init_s, result.share)
            if result.pending:
                job = TrialJob(job.job, job.node, job.program, job.phase, job.started_s, asked)
                step = awaiting(job, result.error, use, now_s, limits)
                if step.action == "wait":
                    report.notes.append(step.note)
                    done.append(job)
                    continue
            else:
                step = decide(job, result.share, result.error, use, now_s, limits)
        report.steps.append(step)
        if _act(control, job, step, report) and step.record is not None:
            job = TrialJob(job.job, job.node, job.program, job.phase, job.started_s, step.record)
        done.append(job)
    report.measured = measured_programs(done)
    return report


def partners_use(
    snapshot: Snapshot,
    job: TrialJob,
    partners: Sequence[str],
    programs: Mapping[str, float],
    init_s: float,
    share: float | None,
) -> float:
    """The use of a trial's partners still on its node: each partner's recorded or declared
    share (:func:`coshare.policies.membw.job_share`, as before); a partner with neither
    counts with what the node's probe found of it, as the policy counted it when it planned
    the trial (poncos section 7 step 3: the first job is measured on the free cores before
    the next starts). That is the probe's figure less the known shares of the other jobs it
    saw (those started before it), the job on trial among them with its measured ``share``
    (a probe during a job's initialization saw less of it than its share, so the partners
    may then count a little low). A partner with neither a share nor a probe past its
    ``init_s`` (or beside another such job the probe saw: the figure cannot be split) is
    bandwidth-bound (1.0), so the trial fails: nothing is known to co-run beside."""
    node = next((n for n in snapshot.nodes if n.name == job.node), None)
    if node is None:
        return UNKNOWN_SHARE * len(partners)
    on_node = {r.id: r for r in snapshot.running if r.node == node.name}
    known = 0.0
    unknown: list[RunningJob] = []
    for partner in partners:
        held = on_node.get(partner)
        est = None if held is None else job_share(held.program, held.membw_gbps, node, programs)
        if est is not None:
            known += est
        elif held is None:
            known += UNKNOWN_SHARE
        else:
            unknown.append(held)
    if not unknown:
        return known
    probe = measured_use(node)
    if probe is None or share is None:
        return known + UNKNOWN_SHARE * len(unknown)
    measured, at = probe
    if not all(_seen(r, at, init_s) for r in unknown):
        return known + UNKNOWN_SHARE * len(unknown)
    others = 0.0
    ids = {r.id for r in unknown}
    for r in on_node.values():
        if r.id in ids or r.id == job.job or not _seen(r, at, 0.0):
            continue
        est = job_share(r.program, r.membw_gbps, node, programs)
        if est is None:
            return known + UNKNOWN_SHARE * len(unknown)
        others += est
    if job.started_s is not None and job.started_s < at:
        others += share
    return known + max(measured - others, 0.0)


def _seen(job: RunningJob, probe_at_s: float, after_s: float) -> bool:
    """Whether a probe at ``probe_at_s`` ran more than ``after_s`` after ``job`` started
    running (``0``: while it ran at all)."""
    start = job.start_time_s
    return job.state == "running" and start is not None and start + after_s < probe_at_s


def _measure(
    probe: TrialProbe, job: TrialJob, partners: Sequence[str], requested_at_s: int
) -> ProbeResult:
    """The probe's result; an exception of the probe is a failed probe, not a failed cycle."""
    try:
        return probe.measure(
            job.node, job.job, partners, job.program, requested_at_s=requested_at_s
        )
    except Exception as exc:
        return ProbeResult(None, f"{type(exc).__name__}: {exc}")


def _act(control: TrialControl, job: TrialJob, step: Step, report: TrialReport) -> bool:
    """Do a step's scheduler verb, then write its record; whether both went through."""
    verb = {
        "suspend": lambda: control.suspend(job.job),
        "resume": lambda: control.resume(job.job),
        "requeue": lambda: control.requeue(job.job, step.reason),
    }.get(step.action)
    if verb is not None:
        error = verb()
        if error is not None:
            report.notes.append(
                f"job {job.job}: could not {step.action} it ({error}); the next cycle tries again"
            )
            return False
        report.notes.append(step.note)  # done, whatever becomes of the record
        if step.action == "requeue":  # its record went with its placement
            return True
        return step.record is None or _write(control, job.job, step, report)
    ok = step.record is None or _write(control, job.job, step, report)
    if ok:
        report.notes.append(step.note)
    return ok


def _write(control: TrialControl, job: str, step: Step, report: TrialReport) -> bool:
    assert step.record is not None
    error = control.write_trial(job, step.record)
    if error is not None:
        report.notes.append(
            f"job {job}: its trial record ({step.record.state}) was not "
            f"written ({error}); the next cycle tries again"
        )
        return False
    return True
