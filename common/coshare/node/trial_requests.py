"""Trial co-runs a node's daemon probes on its own: ``policy.membw.probe_via: facts``.

A planner that cannot reach a node (HTCondor: no command runs on an execute node from the
central manager but a job's own) still gets its trials measured: the ``measuring`` record
the trial cycle writes into the job's queue entry *before* it probes is the request, and
the answer comes back in the node's facts::

    planner:  CoshareTrial = "measuring:<at>:-:<partners>:-"   (the request, in the queue)
    node:     every sampling round (node.sample_interval_s), with node.trial_requests set
              and two jobs or more here (a trial needs a partner):
              source.requests(this node's jobs) --> not answered yet? -->
              mark started (state_dir/trials.json) --> JobControl.trial() (freeze the
              partners, probe, thaw: the TRIAL of the control socket) --> the answer
              --> facts: trial=<job>:<at>:<share | error code>
    planner:  FactsProbe finds the answer to <at> in the node's facts --> keep or suspend

Each request (job, ``at``) is probed at most once: it is marked started before the probe,
and a daemon that finds the mark at its next round (it was killed during the probe, whose
freeze its restart undid) answers ``interrupted`` instead of probing again, so that a
probe that brings its daemon down cannot do it again and again. A request for a job that is
not this node's, or whose partners are none of this node's jobs (they ended: the planner
keeps the job, unmeasured), is not probed. Answers are published while their job runs
here and forgotten when it ends. The scheduler that cannot be read costs one round's
requests (logged), never the daemon.

Where the requests come from is the scheduler's business (:class:`TrialRequestSource`):
HTCondor's, :mod:`condor_addon.node_trials`, reads this node's jobs from their schedds
(read-only queries, as ``condor_q`` from this host does: no port of coshare's own).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from coshare.config import NodeConfig
from coshare.errors import CoshareError, NodeError
from coshare.model import TrialResult
from coshare.system.files import TooLarge, read_bounded

log = logging.getLogger("coshare.node.trials")

#: The answers' file in ``node.state_dir``.
ANSWERS_FILE = "trials.json"
#: Largest answers file read (an answer is a few dozen bytes; a node runs at most thousands).
MAX_ANSWERS_CHARS = 1 << 20
#: An answer's mark while its probe runs.
STARTED = "started"
#: The answer to a request whose probe a killed daemon left unfinished.
INTERRUPTED = "interrupted"
_CODE = re.compile(r"[a-z][a-z_]{0,31}")


@dataclass(frozen=True)
class TrialRequest:
    """A trial co-run the scheduler's queue asks this node to probe.

    Attributes:
        job: the trial job's id here (:mod:`coshare.node.spec`).
        at_s: the request: the ``at`` of its ``measuring`` record (epoch seconds).
        partners: the jobs it is tried beside, by their ids here (those on this node).
    """

    job: str
    at_s: int
    partners: tuple[str, ...]


class TrialRequestSource(Protocol):
    """Reads a node's trial requests from its scheduler (``node.trial_requests``)."""

    def requests(self, jobs: Sequence[str]) -> Sequence[TrialRequest]:
        """The requests among ``jobs`` (this node's jobs, by their ids here).

        Raises:
            CoshareError: the scheduler cannot be read (this round has no requests).
        """
        ...


def reply_result(reply: str) -> str:
    """The answer to publish for the daemon's reply to TRIAL: the share (``0.4300``) of
    ``OK job=J share=S ...``, else the error code of ``ERR code text`` (``internal`` for
    anything else)."""
    words = reply.split()
    if words[:1] == ["OK"]:
        fields = dict(w.partition("=")[::2] for w in words[1:])
        try:
            share = float(fields.get("share", ""))
        except ValueError:
            return "internal"
        if math.isfinite(share) and 0.0 <= share <= 1.0:
            return f"{share:.4f}"
        return "internal"
    if words[:1] == ["ERR"] and len(words) > 1 and _CODE.fullmatch(words[1]):
        return words[1]
    return "internal"


class TrialAnswers:
    """The answers this node gave (``state_dir/trials.json``, written atomically):
    ``{"answers": {job: [at, result]}}``, ``result`` a share, an error code or
    :data:`STARTED`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, tuple[int, str]]:
        """The answers; none when the file is absent. An unreadable file is said and
        treated as empty (a request is then probed again: it was at most once)."""
        try:
            data = json.loads(read_bounded(self.path, MAX_ANSWERS_CHARS))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TooLarge) as exc:
            log.error("trial answers %s unreadable (%s); starting afresh", self.path, exc)
            return {}
        out: dict[str, tuple[int, str]] = {}
        answers = data.get("answers") if isinstance(data, dict) else None
        for job, value in answers.items() if isinstance(answers, dict) else ():
            if (
                isinstance(value, list)
                and len(value) == 2
                and isinstance(value[0], int)
                and isinstance(value[1], str)
            ):
                out[str(job)] = (value[0], value[1])
        return out

    def save(self, answers: dict[str, tuple[int, str]]) -> None:
        """Write ``answers`` (a new file renamed over the old).

        Raises:
            NodeError: it cannot be written.
        """
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(
                json.dumps({"answers": {j: [a, r] for j, (a, r) in sorted(answers.items())}}) + "\n"
            )
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NodeError(f"trial answers {self.path}: not written: {exc}") from exc


def published(answers: dict[str, tuple[int, str]], jobs: Sequence[str]) -> tuple[TrialResult, ...]:
    """The answers to put in the facts: those of ``jobs`` (still here) that are done."""
    here = set(jobs)
    out = []
    for job, (at, result) in sorted(answers.items()):
        if job not in here or result == STARTED:
            continue
        if _CODE.fullmatch(result):
            out.append(TrialResult(job, at, None, result))
            continue
        try:
            share = float(result)
        except ValueError:
            continue
        if math.isfinite(share) and 0.0 <= share <= 1.0:
            out.append(TrialResult(job, at, share))
    return tuple(out)


class NodeTrials:
    """The trial requests of one node, round after round (see the module docstring).

    Args:
        source: where the requests come from.
        trial: the daemon's TRIAL (:meth:`coshare.node.control.service.JobControl.trial`):
            the reply line for a job and its partners.
        answers: the answers' file.
    """

    def __init__(
        self,
        source: TrialRequestSource,
        trial: Callable[[str, Sequence[str]], str],
        answers: TrialAnswers,
    ) -> None:
        self.source = source
        self.trial = trial
        self.answers = answers

    def round(self, jobs: Sequence[str]) -> list[str]:
        """Probe the requests not answered yet among ``jobs`` (this node's); what was done,
        one line each (also logged). Never raises but :class:`NodeError` (the answers
        cannot be written: no probe runs without its mark)."""
        here = set(jobs)
        answers = self.answers.load()
        done: list[str] = []
        kept = {j: a for j, a in answers.items() if j in here}
        for job, (at, result) in list(kept.items()):
            if result == STARTED:
                kept[job] = (at, INTERRUPTED)
                done.append(
                    f"job {job}: the trial probe of request {at} was cut off (the "
                    f"daemon stopped); answered {INTERRUPTED}"
                )
        if kept != answers:
            self.answers.save(kept)
        if len(here) < 2:
            return self._said(done)
        try:
            requests = list(self.source.requests(sorted(here)))
        except CoshareError as exc:
            log.warning("trial requests not read this round: %s", exc)
            return self._said(done)
        for request in requests:
            partners = [p for p in request.partners if p in here and p != request.job]
            if request.job not in here or not partners:
                continue
            if request.job in kept and kept[request.job][0] == request.at_s:
                continue  # answered (or cut off): at most once per request
            kept[request.job] = (request.at_s, STARTED)
            self.answers.save(kept)
            reply = self.trial(request.job, partners)
            kept[request.job] = (request.at_s, reply_result(reply))
            self.answers.save(kept)
            done.append(
                f"job {request.job}: trial request {request.at_s} beside "
                f"{','.join(partners)}: {reply}"
            )
        return self._said(done)

    @staticmethod
    def _said(lines: list[str]) -> list[str]:
        for line in lines:
            log.info("%s", line)
        return lines

    def published(self, jobs: Sequence[str]) -> tuple[TrialResult, ...]:
        """The answers the facts carry now (see :func:`published`)."""
        return published(self.answers.load(), jobs)


def open_node_trials(
    config: NodeConfig, trial: Callable[[str, Sequence[str]], str]
) -> NodeTrials | None:
    """The node's trial requests as ``node.trial_requests`` says (``None``: off).

    Raises:
        MissingExtra: ``condor`` without the ``htcondor`` bindings installed.
        CoshareError: the source cannot be set up.
    """
    if config.trial_requests == "none":
        return None
    from coshare.cli.extras import load

    opener = load("condor_addon.node_trials:open_requests", "node.trial_requests: condor")
    source: TrialRequestSource = opener(config)
    return NodeTrials(source, trial, TrialAnswers(Path(config.state_dir) / ANSWERS_FILE))
