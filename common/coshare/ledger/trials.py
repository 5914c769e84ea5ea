"""Trial co-runs of the ``membw`` policy as a state machine (poncos section 7).

A job whose memory bandwidth use is unknown may start beside jobs whose use is known, as a
*trial* the plan names (:class:`coshare.model.Trial`). Its record lives in the scheduler's
queue, with the job itself (Slurm: a ``trial=`` field of its placement in AdminComment;
HTCondor: the job attribute ``CoshareTrial``), so a planner killed at any point finds it
again in the next cycle. The states and what moves a job between them::

    plan names a trial --> placed --(running >= init_s)--> measuring
    placed or measuring --(every partner ended first)--> kept (alone, unmeasured)
    measuring --(killed planner: probed again next cycle)--> measuring
    measuring --(probe pending: the node answers in its facts later)--> measuring
    measuring --(still pending facts_wait_s after the request: probe failed)--> suspended
    measuring --(use + partners' <= max_share)--> kept (share recorded per program)
    measuring --(over the limit; or the probe failed: unmeasured = bandwidth-bound)-->
        suspended (through the scheduler)
    suspended --(every partner ended)--> resumed
    suspended --(suspended longer than max_suspend_s)--> requeued (pending, with why)
    suspended --(running again, resumed by hand)--> resumed

``kept``, ``resumed`` and ``requeued`` are final. Each step is written so that a cycle
killed between the scheduler's action and the record's update is finished by the next one:
the record goes to ``measuring`` *before* the probe (with ``why`` :data:`NODE_ASKED`, it
is the request a node reads with ``policy.membw.probe_via: facts``; the node daemon thaws
a job frozen
longer than ``node.max_freeze_s``, even across its own restart, so a probe cut off freezes
nothing for good; the next cycle probes again); a suspend or resume is done *before* its
record is written, and a record that disagrees with the job's state (``measuring`` or
``placed`` but the job suspended; ``suspended`` but the job running) is brought in line.
Every job is thus always running, suspended by its scheduler (whose suspended time does
not count against its time limit) or pending; never frozen past a probe.

Pure: no I/O, no clock (the cycle passes ``now_s``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from coshare.errors import CoshareError

TrialState = Literal["placed", "measuring", "kept", "suspended", "resumed", "requeued"]
#: Every state, in the order of the diagram.
STATES: tuple[TrialState, ...] = ("placed", "measuring", "kept", "suspended", "resumed", "requeued")
#: States a trial does not leave.
FINAL: frozenset[str] = frozenset({"kept", "resumed", "requeued"})

TrialWhy = Literal[
    "within_limit",
    "over_limit",
    "probe_failed",
    "partners_ended",
    "max_suspend",
    "resumed_by_hand",
    "node_asked",
]
WHYS: tuple[TrialWhy, ...] = (
    "within_limit",
    "over_limit",
    "probe_failed",
    "partners_ended",
    "max_suspend",
    "resumed_by_hand",
    "node_asked",
)
#: The ``why`` of a ``measuring`` record that asks the node's daemon to probe it on its own
#: and answer in its facts (``policy.membw.probe_via: facts``); a node probes no other.
NODE_ASKED: TrialWhy = "node_asked"

JobPhase = Literal["pending", "running", "suspended", "ended"]
TrialAction = Literal["wait", "probe", "suspend", "resume", "requeue", "write", "none"]

#: A job id inside a record: Slurm's digits, HTCondor's ``cluster.proc``; never ``:``,
#: ``+``, ``;``, ``,``, spaces or quotes (the record is written through scontrol's command
#: language and as a ClassAd string).
_JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_RECORD = re.compile(
    r"(?P<state>[a-z]+):(?P<at>[0-9]{1,12}):(?P<share>-|[0-9]\.[0-9]{1,4}|1|0)"
    r":(?P<with>-|[A-Za-z0-9_.+-]{1,2000}):(?P<why>-|[a-z_]{1,32})"
)
#: Sums are compared with this slack, as the policy does (0.45 + 0.45 is within 0.9).
_EPS = 1e-9
#: The use a job is counted with when its probe failed: bandwidth-bound.
UNMEASURED_SHARE = 1.0


class TrialRecordError(CoshareError):
    """A trial record that cannot be read: which job, which part, and what is allowed."""

    def __init__(self, job: str, field: str, problem: str) -> None:
        self.job, self.field, self.problem = job, field, problem
        super().__init__(f"job {job}: trial record {field}: {problem}")


@dataclass(frozen=True)
class TrialRecord:
    """Where a job's trial co-run stands (the text of it lives in the scheduler's queue).

    Attributes:
        state: one of :data:`STATES`.
        at_s: when it entered the state (epoch seconds, the cycle's clock).
        partners: the jobs it was tried beside (sorted).
        share: its measured share of the node's bandwidth (``None``: not measured).
        why: why it is in its state, when that needs saying (:data:`WHYS`).
    """

    state: TrialState
    at_s: int
    partners: tuple[str, ...]
    share: float | None = None
    why: TrialWhy | None = None


def format_trial(record: TrialRecord) -> str:
    """The record's text: ``state:at:share:partner+partner:why`` (``-`` for nothing), e.g.
    ``suspended:1732233445:0.62:12+13:over_limit``. Only tokens :func:`parse_trial`
    accepts are written.

    Raises:
        ValueError: a partner id or a share that must not be written.
    """
    for partner in record.partners:
        if _JOB_ID.fullmatch(partner) is None:
            raise ValueError(f"partner job id {partner!r} cannot be written in a trial record")
    if record.share is not None and not (0.0 <= record.share <= 1.0):
        raise ValueError(f"share {record.share!r} is outside [0, 1]")
    share = "-" if record.share is None else f"{record.share:.4f}".rstrip("0").rstrip(".")
    share = "0" if share == "" else share
    partners = "+".join(record.partners) or "-"
    return f"{record.state}:{max(int(record.at_s), 0)}:{share}:{partners}:{record.why or '-'}"


def parse_trial(job: str, text: str) -> TrialRecord:
    """Read a record written by :func:`format_trial`.

    Raises:
        TrialRecordError: naming the job and the part that is wrong.
    """
    found = _RECORD.fullmatch(text)
    if found is None:
        raise TrialRecordError(job, "(text)", f"{text[:80]!r} is not state:at:share:partners:why")
    state = found["state"]
    if state not in STATES:
        raise TrialRecordError(job, "state", f"{state!r} is not one of {', '.join(STATES)}")
    share = None if found["share"] == "-" else float(found["share"])
    if share is not None and not (0.0 <= share <= 1.0):
        raise TrialRecordError(job, "share", f"{share} is outside [0, 1]")
    partners: tuple[str, ...] = ()
    if found["with"] != "-":
        partners = tuple(found["with"].split("+"))
        bad = [p for p in partners if _JOB_ID.fullmatch(p) is None]
        if bad:
            raise TrialRecordError(job, "partners", f"{bad[0]!r} is not a job id")
    why = None if found["why"] == "-" else found["why"]
    if why is not None and why not in WHYS:
        raise TrialRecordError(job, "why", f"{why!r} is not one of {', '.join(WHYS)}")
    return TrialRecord(state, int(found["at"]), partners, share, why)


@dataclass(frozen=True)
class TrialJob:
    """A job with a trial record, as an adapter read it.

    Attributes:
        job: the job id.
        node: the node of the trial.
        program: its ``CoshareProgram``, if any (its measurement is recorded under it).
        phase: ``pending``, ``running``, ``suspended`` (by the scheduler) or ``ended``.
        started_s: when it started running (epoch seconds), if it did.
        record: its trial record.
    """

    job: str
    node: str
    program: str | None
    phase: JobPhase
    started_s: float | None
    record: TrialRecord


@dataclass(frozen=True)
class TrialLimits:
    """The ``policy.membw`` options the state machine uses.

    Attributes:
        max_share: the most the jobs of a node may use together.
        init_s: a trial is measured once the job ran this long (its initialization).
        max_suspend_s: a job suspended longer than this is requeued with the reason.
        facts_wait_s: a probe still pending this long after its request (the ``at`` of
            the ``measuring`` record) failed (``policy.membw.probe_via: facts``).
    """

    max_share: float = 0.9
    init_s: float = 60.0
    max_suspend_s: float = 3600.0
    facts_wait_s: float = 600.0


@dataclass(frozen=True)
class Step:
    """What the cycle does for one trial job.

    Attributes:
        job: the job.
        action: ``wait`` (nothing to do yet), ``probe`` (write ``record``, then measure:
            :func:`decide` takes the result), ``suspend`` / ``resume`` / ``requeue`` (tell
            the scheduler, then write ``record``; a requeue's placement is cleared with
            ``reason``), ``write`` (only write ``record``), ``none`` (final, nothing to do).
        record: the record to write (``None``: unchanged).
        note: what the cycle says about it (empty for ``wait`` and ``none``).
        reason: a requeued job's reason, for the user.
    """

    job: str
    action: TrialAction
    record: TrialRecord | None = None
    note: str = ""
    reason: str = ""


def advance(job: TrialJob, alive: Iterable[str], now_s: float, limits: TrialLimits) -> Step:
    """The next step of one trial job, before any probe of this cycle.

    Args:
        job: the job and its record.
        alive: the jobs still running or suspended on the scheduler (its partners among
            them are the ones that have not ended).
        now_s: the cycle's clock (epoch seconds).
        limits: the policy's options.
    """
    rec, now = job.record, int(now_s)
    partners = [p for p in rec.partners if p in set(alive)]
    if job.phase == "ended" or rec.state in FINAL:
        return Step(job.job, "none")
    if rec.state in ("placed", "measuring"):
        if job.phase == "suspended":
            # A cycle suspended it and was killed before writing so: write it now.
            return Step(
                job.job,
                "write",
                replace(
                    rec,
                    state="suspended",
                    at_s=now,
                    why="over_limit" if rec.why in (None, NODE_ASKED) else rec.why,
                ),
                f"job {job.job} was suspended after its trial; recorded",
            )
        if job.phase == "pending":
            return Step(job.job, "wait")
        if not partners:
            return Step(
                job.job,
                "write",
                replace(rec, state="kept", at_s=now, why="partners_ended"),
                f"job {job.job}: every job of its trial ({_list(rec.partners)}) ended "
                "before it was measured; it runs alone, unmeasured",
            )
        if rec.state == "measuring":
            return Step(
                job.job,
                "probe",
                None,
                f"job {job.job}: its trial's probe did not finish; probing again",
            )
        if job.started_s is not None and job.started_s + limits.init_s <= now_s:
            return Step(
                job.job,
                "probe",
                replace(rec, state="measuring", at_s=now),
                f"job {job.job}: past its initialization "
                f"(policy.membw.init_s {limits.init_s:g}); probing beside "
                f"{_list(partners)}",
            )
        return Step(job.job, "wait")
    # suspended
    if job.phase == "running":
        return Step(
            job.job,
            "write",
            replace(rec, state="resumed", at_s=now, why="resumed_by_hand"),
            f"job {job.job} runs again though its trial suspended it "
            "(resumed outside coshare); recorded as resumed",
        )
    if job.phase == "pending":
        return Step(job.job, "none")
    if not partners:
        return Step(
            job.job,
            "resume",
            replace(rec, state="resumed", at_s=now, why="partners_ended"),
            f"job {job.job}: {_list(rec.partners)} ended; resumed",
        )
    if now_s - rec.at_s > limits.max_suspend_s:
        reason = (
            f"suspended for {now_s - rec.at_s:.0f} s after its trial co-run beside "
            f"{_list(partners)}, longer than policy.membw.max_suspend_s "
            f"{limits.max_suspend_s:g}; requeued"
        )
        return Step(
            job.job,
            "requeue",
            replace(rec, state="requeued", at_s=now, why="max_suspend"),
            f"job {job.job}: {reason}",
            reason,
        )
    return Step(job.job, "wait")


def decide(
    job: TrialJob,
    share: float | None,
    error: str,
    partners_use: float,
    now_s: float,
    limits: TrialLimits,
) -> Step:
    """The step after a trial's probe: keep the pair, or suspend the new job.

    Args:
        share: the job's measured share (``1 - available`` on its partners' cores while
            they were frozen); ``None`` when the probe failed or timed out.
        error: why the probe failed (when ``share`` is ``None``).
        partners_use: the known use of the partners still on the node.
    """
    rec, now = job.record, int(now_s)
    if share is not None and not (math.isfinite(share) and 0.0 <= share <= 1.0):
        error, share = f"the probe gave share {share!r}, outside [0, 1]", None
    use = UNMEASURED_SHARE if share is None else share
    total = use + partners_use
    if share is not None and total <= limits.max_share + _EPS:
        return Step(
            job.job,
            "write",
            replace(rec, state="kept", at_s=now, share=share, why="within_limit"),
            f"job {job.job}: measured {share:.2f}, with {_list(rec.partners)} "
            f"{total:.2f} <= policy.membw.max_share {limits.max_share:g}; "
            "kept",
        )
    if share is None:
        note = (
            f"job {job.job}: the probe of its trial failed ({error}); it is unmeasured, "
            f"treated as bandwidth-bound, and suspended until {_list(rec.partners)} "
            "end"
        )
        return Step(
            job.job,
            "suspend",
            replace(rec, state="suspended", at_s=now, share=None, why="probe_failed"),
            note,
        )
    return Step(
        job.job,
        "suspend",
        replace(rec, state="suspended", at_s=now, share=share, why="over_limit"),
        f"job {job.job}: measured {share:.2f}, with {_list(rec.partners)} "
        f"{total:.2f} > policy.membw.max_share {limits.max_share:g}; suspended "
        "until they end",
    )


def awaiting(
    job: TrialJob, pending: str, partners_use: float, now_s: float, limits: TrialLimits
) -> Step:
    """The step when the trial's probe is pending (its node answers later, in its facts):
    the job stays ``measuring`` (a ``wait`` with a note), unless the request (the record's
    ``at``) is older than ``limits.facts_wait_s``: then the probe failed (:func:`decide`:
    unmeasured, suspended).

    Args:
        job: the job, its record ``measuring`` since the request.
        pending: why the probe has no result yet (for the notes).
        partners_use: as for :func:`decide`.
    """
    waited = now_s - job.record.at_s
    if waited > limits.facts_wait_s:
        return decide(
            job,
            None,
            f"{pending} {waited:.0f} s after it, longer than "
            f"policy.membw.facts_wait_s {limits.facts_wait_s:g}",
            partners_use,
            now_s,
            limits,
        )
    return Step(
        job.job,
        "wait",
        None,
        f"job {job.job}: its trial's probe is pending ({pending}; asked "
        f"{max(waited, 0):.0f} s ago, waiting at most policy.membw.facts_wait_s "
        f"{limits.facts_wait_s:g})",
    )


def measured_programs(jobs: Iterable[TrialJob]) -> dict[str, float]:
    """Each program's measured share from the trial records in the queue (the latest
    measurement of a program wins); jobs without a program or a measurement add nothing."""
    latest: dict[str, tuple[int, float]] = {}
    for job in jobs:
        share = job.record.share
        if job.program is None or share is None:
            continue
        if job.program not in latest or latest[job.program][0] <= job.record.at_s:
            latest[job.program] = (job.record.at_s, share)
    return {p: s for p, (_, s) in latest.items()}


def merge_programs(
    configured: Mapping[str, float], measured: Mapping[str, float]
) -> dict[str, float]:
    """The programs the policy plans with: the measured ones, and the configured
    ``policy.membw.programs`` over them (an admin's figure is the admin's word)."""
    return {**measured, **configured}


def _list(jobs: Iterable[str]) -> str:
    shown = list(jobs)
    if not shown:
        return "no job"
    text = ", ".join(shown[:5]) + (" ..." if len(shown) > 5 else "")
    return f"job{'s' if len(shown) > 1 else ''} {text}"
