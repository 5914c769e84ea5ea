"""Trial co-runs, live: each cycle moves every trial job one step (:mod:`coshare.ledger.trials`)
through its scheduler's :class:`~coshare.ports.TrialControl` and a
:class:`~coshare.ports.TrialProbe`, and records what the probes measured per program.

::

    control.trial_jobs()  -- each job --> trials.advance()
        probe:   control.write_trial(measuring) --> probe.measure() --> trials.decide()
                   kept:      control.write_trial(kept, share)
                   suspended: control.suspend() --> control.write_trial(suspended)
                 pending (the node answers later) --> trials.awaiting()
                   wait:      nothing (measuring; the next cycle looks again)
                   past policy.membw.facts_wait_s: suspended, as a failed probe
        resume:  control.resume()  --> control.write_trial(resumed)
        requeue: control.requeue(reason)           (placement and record replaced)
        write:   control.write_trial(...)          (a record brought in line with its job)
    measured shares --> record_file (policy.membw.record_file)

A failed scheduler verb or write is said in the report's notes and retried by the next
cycle (the record still says where the job stands); it never stops the other jobs.

The probes: :class:`InjectedProbe` (the documented test hook, ``policy.membw.
probe_inject_file``), :class:`SocketProbe` (the node daemon's ``TRIAL`` request over its
control socket, :mod:`coshare.node.control`, reached from the planner's host:
``policy.membw.probe_via: socket``) and :class:`StepProbe` (the same request sent on the
job's node by ``coshare node trial``, which the scheduler runs there as a step of the trial
job: ``probe_via: step``; the adapter says how, :class:`ProbeStep`) and :class:`FactsProbe`
(no connection to the node at all: the ``measuring`` record in the queue is the request,
the node's daemon reads it from the scheduler, probes, and answers in its facts, which
the snapshot carries: ``probe_via: facts``; pending until the answer is there).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from coshare.errors import CommandFailed, ConfigError
from coshare.ledger.trials import (
    NODE_ASKED,
    Step,
    TrialJob,
    TrialLimits,
    TrialWhy,
    advance,
    awaiting,
    decide,
    measured_programs,
)
from coshare.model import Snapshot, TrialResult
from coshare.policies.membw import UNKNOWN_SHARE, job_share
from coshare.ports import ProbeResult, TrialControl, TrialProbe
from coshare.profiles.programs import PROGRAM_NAME
from coshare.system.files import TooLarge, read_bounded
from coshare.system.programs import CommandResult

log = logging.getLogger("coshare.ledger.trials")

#: The largest measurement file read (a share per program is a few dozen bytes).
MAX_RECORD_CHARS = 4 << 20


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
    by_id = {r.id: r for r in snapshot.running}
    nodes = {n.name: n for n in snapshot.nodes}
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
            node = nodes.get(job.node)
            use = 0.0
            for partner in partners:
                held = by_id.get(partner)
                share = (
                    None
                    if held is None or node is None
                    else job_share(held.program, held.membw_gbps, node, programs)
                )
                use += UNKNOWN_SHARE if share is None else share
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


# -- measurements per program ----------------------------------------------------------------


def read_record_file(path: str | None) -> dict[str, float]:
    """The shares recorded in ``policy.membw.record_file`` (empty when unset or absent).

    Raises:
        ConfigError: the file is unreadable, or an entry is not a program with a share in
            [0, 1] (named).
    """
    if path is None:
        return {}
    try:
        text = read_bounded(Path(path), MAX_RECORD_CHARS)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, TooLarge) as exc:
        raise ConfigError(f"policy.membw.record_file {path}: cannot read: {exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"policy.membw.record_file {path}: not JSON ({exc})") from exc
    shares = data.get("programs") if isinstance(data, dict) else None
    if not isinstance(shares, dict):
        raise ConfigError(f'policy.membw.record_file {path}: no "programs" object')
    out: dict[str, float] = {}
    for name, share in shares.items():
        if PROGRAM_NAME.fullmatch(str(name)) is None:
            raise ConfigError(
                f"policy.membw.record_file {path}: {str(name)[:80]!r} is not a "
                "program name (1-64 of A-Z a-z 0-9 _ . -)"
            )
        if (
            isinstance(share, bool)
            or not isinstance(share, int | float)
            or not math.isfinite(share)
            or not 0 <= share <= 1
        ):
            raise ConfigError(
                f"policy.membw.record_file {path}: programs.{name} = {share!r} "
                "is not a share in [0, 1]"
            )
        out[str(name)] = float(share)
    return out


def write_record_file(path: str, measured: Mapping[str, float]) -> bool:
    """Add ``measured`` to the record file (atomically: a new file renamed over the old);
    whether anything changed."""
    known = read_record_file(path)
    merged = {**known, **measured}
    if merged == known:
        return False
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"programs": dict(sorted(merged.items()))}, out, indent=1)
            out.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


# -- probes ------------------------------------------------------------------------------------


class InjectedProbe:
    """The test hook: measurements read from a JSON file instead of the node
    (``policy.membw.probe_inject_file``), through the same interface as the real probe.

    The file: ``{"jobs": {"12": 0.6}, "programs": {"stream": 0.6, "spin": 0.02}}``; a job's
    entry wins over its program's; ``null`` is a probe that failed. It is read at each
    measurement, so a test can change it between cycles.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        """The injected share of ``job`` (or of its program)."""
        try:
            data = json.loads(read_bounded(Path(self.path), MAX_RECORD_CHARS))
        except (OSError, ValueError, TooLarge) as exc:
            return ProbeResult(None, f"injected measurements {self.path} unreadable: {exc}")
        for table, key in (("jobs", job), ("programs", program)):
            entries = data.get(table, {}) if isinstance(data, dict) else {}
            if key is not None and isinstance(entries, dict) and key in entries:
                share = entries[key]
                if share is None:
                    return ProbeResult(None, f"injected failure for {table[:-1]} {key}")
                if isinstance(share, bool) or not isinstance(share, int | float):
                    return ProbeResult(None, f"injected {table}.{key} is not a number")
                return ProbeResult(float(share))
        return ProbeResult(
            None, f"no injected measurement for job {job} or program {program} in {self.path}"
        )


class SocketProbe:
    """The real probe: the node daemon's ``TRIAL job=J partners=A,B`` request over its
    control socket (``policy.membw.probe_socket``, ``{node}`` replaced by the node's name).
    The daemon freezes the partners, probes their cores and thaws them, whatever happens,
    and a daemon killed in between thaws them when it starts again (``node.max_freeze_s``).
    """

    def __init__(
        self, socket_template: str, timeout_s: float, node_job_id: Callable[[str], str] = str
    ) -> None:
        self.template = socket_template
        self.timeout_s = timeout_s
        self.node_job_id = node_job_id

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        """Ask ``node``'s daemon to measure ``job`` with ``partners`` frozen."""
        path = self.template.replace("{node}", node)
        request = trial_request(self.node_job_id(job), [self.node_job_id(p) for p in partners])
        try:
            reply = exchange(path, request, self.timeout_s)
        except TimeoutError:
            return ProbeResult(
                None,
                f"the probe on {node} timed out after policy.membw."
                f"probe_timeout_s {self.timeout_s:g}",
            )
        except OSError as exc:
            why = exc.strerror or exc
            return ProbeResult(None, f"node {node}'s control socket {path}: {why}")
        return parse_trial_reply(reply)


class ProbeStep(Protocol):
    """An adapter whose scheduler runs a command on a running job's node as a step of that
    job (Slurm: ``srun --jobid --overlap``): how a trial's probe reaches the node's daemon
    from the planner's host (``policy.membw.probe_via: step``)."""

    def probe_step(
        self, node: str, job: str, argv: Sequence[str], timeout_s: float
    ) -> CommandResult:
        """Run ``argv`` on ``node`` as a step of running job ``job``; what it printed.

        Raises:
            CommandFailed: the step could not be run or took longer than ``timeout_s``.
        """
        ...


def probe_step_of(adapter: object) -> ProbeStep | None:
    """The adapter as a :class:`ProbeStep`, or ``None`` when its scheduler offers none."""
    return adapter if callable(getattr(adapter, "probe_step", None)) else None  # type: ignore[return-value]


#: What a probe step may take beyond the probe itself (the scheduler starting the step).
STEP_SLACK_S = 30.0


class StepProbe:
    """The real probe on the job's node, reached through the scheduler: the adapter runs
    ``coshare node trial`` there as a step of the trial job (Slurm: ``srun --jobid
    --overlap``), which sends the node daemon the same ``TRIAL`` request as
    :class:`SocketProbe` and prints its answer. Nothing but the scheduler connects the
    planner's host to the node.

    Args:
        step: the adapter's :meth:`ProbeStep.probe_step`.
        command: ``coshare`` on the nodes (``policy.membw.probe_command``).
        socket_template: the daemon's socket on the node (``policy.membw.probe_socket``).
        timeout_s: the probe's limit (``policy.membw.probe_timeout_s``); the step gets
            :data:`STEP_SLACK_S` more to start.
    """

    def __init__(
        self,
        step: Callable[[str, str, Sequence[str], float], CommandResult],
        command: str,
        socket_template: str,
        timeout_s: float,
        node_job_id: Callable[[str], str] = str,
    ) -> None:
        self.step = step
        self.command = command
        self.template = socket_template
        self.timeout_s = timeout_s
        self.node_job_id = node_job_id

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        """Run the probe step of ``job`` on ``node``; its printed answer."""
        argv = [
            self.command,
            "node",
            "trial",
            "--socket",
            self.template.replace("{node}", node),
            "--timeout-s",
            f"{self.timeout_s:g}",
            "--job",
            self.node_job_id(job),
            "--partners",
            ",".join(self.node_job_id(p) for p in partners),
        ]
        try:
            result = self.step(node, job, argv, self.timeout_s + STEP_SLACK_S)
        except CommandFailed as exc:
            return ProbeResult(
                None, f"the probe step of job {job} on {node}: {_last_line(exc.stderr) or exc}"
            )
        answers = [
            line.strip() for line in result.stdout.splitlines() if line.startswith(("OK ", "ERR "))
        ]
        if answers:
            return parse_trial_reply(answers[-1])
        why = _last_line(result.stderr) or f"exit status {result.returncode}, no answer"
        return ProbeResult(None, f"the probe step of job {job} on {node}: {why}")


class FactsProbe:
    """The real probe without any connection to the node (``policy.membw.probe_via:
    facts``): the ``measuring`` record the cycle writes into the job's queue entry is the
    request; the node's daemon reads it from the scheduler (HTCondor: the schedd, read-only,
    :mod:`condor_addon.node_trials`), sends itself the same ``TRIAL`` as
    :class:`SocketProbe` would, at most once per request, and publishes the answer in its
    node facts (``trial=job:at:result``, :mod:`coshare.ledger.facts`), which reach the planner the
    way all facts do (HTCondor: the startd cron into the machine ad). This probe only looks
    the answer up in the cycle's snapshot: an answer to this request (its ``at``) is the
    result; none yet (or one to an earlier request) is ``pending``, and the trial waits in
    ``measuring`` (:func:`coshare.ledger.trials.awaiting` fails it after
    ``policy.membw.facts_wait_s``).

    Args:
        snapshot: the cycle's snapshot (its nodes' usable facts, ``Node.trial_results``).
        node_job_id: a job's id as its node knows it.

    Attributes:
        request_why: the ``why`` the cycle writes into the ``measuring`` record: a node's
            daemon probes only records that ask it to (a planner probing over its socket
            writes none, and the node leaves the trial to it).
    """

    request_why: TrialWhy = NODE_ASKED

    def __init__(self, snapshot: Snapshot, node_job_id: Callable[[str], str] = str) -> None:
        self.results: dict[str, dict[str, TrialResult]] = {
            n.name: {r.job: r for r in n.trial_results} for n in snapshot.nodes
        }
        self.node_job_id = node_job_id

    def measure(
        self,
        node: str,
        job: str,
        partners: Sequence[str],
        program: str | None,
        *,
        requested_at_s: int = 0,
    ) -> ProbeResult:
        """The answer of ``node``'s daemon to the request of ``requested_at_s``, if it is in
        the node's facts."""
        local = self.node_job_id(job)
        found = self.results.get(node, {}).get(local)
        if found is None or found.at_s != requested_at_s:
            earlier = "" if found is None else f" (only one of {found.at_s})"
            return ProbeResult(
                None,
                f"node {node}'s facts carry no answer to the request of {requested_at_s}{earlier}",
                pending=True,
            )
        if found.share is None:
            return ProbeResult(
                None, f"node {node}'s daemon could not probe it ({found.error}; its log says why)"
            )
        return ProbeResult(found.share)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def trial_request(job: str, partners: Sequence[str]) -> str:
    """The ``TRIAL`` request line for the node daemon (ids as the node knows them)."""
    return f"TRIAL job={job} partners={','.join(partners)}\n"


def exchange(path: str, request: str, timeout_s: float) -> str:
    """Send one request line to a node daemon's control socket; its answer line.

    Raises:
        OSError: the socket cannot be reached or answers not in time (``TimeoutError``).
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(path)
        conn.sendall(request.encode())
        reply = b""
        while not reply.endswith(b"\n") and len(reply) < 4096:
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode(errors="replace").strip()


def parse_trial_reply(line: str) -> ProbeResult:
    """The daemon's answer to TRIAL: ``OK job=J share=0.43 ...`` or ``ERR code message``."""
    if not line.startswith("OK "):
        return ProbeResult(None, line[:300] or "no answer")
    fields = dict(part.partition("=")[::2] for part in line.split()[1:])
    try:
        share = float(fields["share"])
    except (KeyError, ValueError):
        return ProbeResult(None, f"unreadable answer {line[:200]!r}")
    if not (math.isfinite(share) and 0 <= share <= 1):
        return ProbeResult(None, f"the probe gave share {share!r}, outside [0, 1]")
    return ProbeResult(share)
