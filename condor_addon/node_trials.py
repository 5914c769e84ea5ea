"""The trial requests of an HTCondor execute node's jobs (``node.trial_requests: condor``;
``policy.membw.probe_via: facts``, :mod:`coshare.node.trial_requests`).

The node's daemon knows its jobs by their GlobalJobId in id characters
(:func:`condor_addon.view.node_job_id`, ``<schedd>_<cluster>.<proc>_<qdate>``): that names
the schedd holding each job and its id there. Each round it asks only those schedds, only
for its own jobs, read-only, as ``condor_q`` from this host would (HTCondor's own ports and
authorization, READ; no port of coshare's own, no connection from the planner to the node):

    CoshareManaged =?= true && ((ClusterId == 12 && ProcId == 0) || (ClusterId == 13 && ...))

A job whose ``CoshareTrial`` record says ``measuring`` with ``why`` ``node_asked`` (the
planner probes over ``probe_via: facts``; with ``socket`` or ``step`` it probes itself and
writes no ``why``) and which runs is a request: its
record's ``at`` and its partners, the ``cluster.proc`` ids of the same schedd named to the
node by their GlobalJobIds (partners not on this node have ended, or are another node's:
left out). The answers a schedd gives are kept only for the jobs whose GlobalJobId is one
of this node's (never a job of another node, whatever the schedd says). Every value that
goes into a constraint is an integer parsed from a full match; nothing is edited.

Trust: the record is the planner's (a queue super user's), protected against the job's
owner by ``PROTECTED_JOB_ATTRS`` (deploy/condor/config.d/10-coshare-schedd.conf), and a
trial freezes only jobs of this node for one probe (``node.max_freeze_s`` at most).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from coshare.config import CondorConfig, NodeConfig
from coshare.errors import CoshareError
from coshare.ledger.trials import NODE_ASKED, TrialRecordError, parse_trial
from coshare.node.trial_requests import TrialRequest

from condor_addon import attributes as A
from condor_addon.client import CondorClient, configure_bindings
from condor_addon.view import node_job_id

log = logging.getLogger("coshare.node.trials")

#: A job's id on its node: ``<schedd name in id characters>_<cluster>.<proc>_<qdate>``.
_NODE_ID = re.compile(
    r"(?P<schedd>[A-Za-z0-9._+-]+)_(?P<cluster>[0-9]{1,12})\."
    r"(?P<proc>[0-9]{1,9})_[0-9]{1,12}"
)
#: What a request needs of a job ad.
PROJECTION = ("ClusterId", "ProcId", "GlobalJobId", A.TRIAL, "JobStatus")
#: The most jobs one query names (a node runs a few dozen; a constraint stays small).
MAX_JOBS_PER_QUERY = 256


def split_node_id(job: str) -> tuple[str, int, int] | None:
    """``(schedd name in id characters, cluster, proc)`` of a node's job id; ``None`` for
    an id that is not a GlobalJobId (a job not started by HTCondor, or one cut at 128
    characters)."""
    found = _NODE_ID.fullmatch(job)
    if found is None:
        return None
    return found["schedd"], int(found["cluster"]), int(found["proc"])


def jobs_constraint(ids: Iterable[tuple[int, int]]) -> str:
    """The constraint that selects the coshare-managed jobs ``(cluster, proc)``: integers
    only."""
    terms = [f"ClusterId == {int(c)} && ProcId == {int(p)}" for c, p in sorted(set(ids))]
    if not terms:
        return "false"
    return "CoshareManaged =?= true && (" + " || ".join(f"({t})" for t in terms) + ")"


def requests_of(
    ads: Iterable[Mapping[str, object]], jobs: Iterable[str]
) -> tuple[list[TrialRequest], list[str]]:
    """The trial requests among one schedd's ads of this node's ``jobs``, and notes on the
    records that could not be read. Pure."""
    here = set(jobs)
    local: dict[str, tuple[str, Mapping[str, object]]] = {}
    for ad in ads:
        global_id, cluster, proc = ad.get("GlobalJobId"), ad.get("ClusterId"), ad.get("ProcId")
        if (
            not isinstance(global_id, str)
            or not isinstance(cluster, int)
            or not isinstance(proc, int)
        ):
            continue
        job = node_job_id(global_id)
        if job in here:
            local[f"{cluster}.{proc}"] = (job, ad)
    out: list[TrialRequest] = []
    notes: list[str] = []
    for queue_id, (job, ad) in sorted(local.items()):
        text = ad.get(A.TRIAL)
        if not isinstance(text, str) or ad.get("JobStatus") != A.RUNNING:
            continue
        try:
            record = parse_trial(queue_id, text)
        except TrialRecordError as exc:
            notes.append(f"{exc}; not probed")
            continue
        if record.state != "measuring" or record.why != NODE_ASKED:
            continue  # not a request (a planner probing over its socket asks no node)
        partners = tuple(local[p][0] for p in record.partners if p in local)
        out.append(TrialRequest(job, record.at_s, partners))
    return out, notes


class CondorTrialRequests:
    """The requests of this node's jobs, read from their schedds (see the module
    docstring).

    Args:
        client: a client of the pool (only its read-only queries are used).
    """

    def __init__(self, client: CondorClient) -> None:
        self.client = client

    def requests(self, jobs: Sequence[str]) -> list[TrialRequest]:
        """The requests among ``jobs``.

        Raises:
            SchedulerUnavailable: the collector cannot be asked for the schedds (one schedd
                that cannot be read costs only its own jobs' requests, logged).
        """
        by_schedd: dict[str, list[tuple[int, int]]] = {}
        for job in jobs:
            parsed = split_node_id(job)
            if parsed is not None:
                by_schedd.setdefault(parsed[0], []).append(parsed[1:])
        if not by_schedd:
            return []
        out: list[TrialRequest] = []
        for name in sorted(set(self.client.schedd_names())):
            ids = by_schedd.get(node_job_id(name))
            if not ids:
                continue
            ads: list[dict[str, object]] = []
            try:
                for start in range(0, len(ids), MAX_JOBS_PER_QUERY):
                    constraint = jobs_constraint(ids[start : start + MAX_JOBS_PER_QUERY])
                    ads += self.client.schedd_job_ads(name, constraint, PROJECTION)
            except CoshareError as exc:  # one schedd never costs the others
                log.warning("trial requests: schedd %s not read: %s", name, exc)
                continue
            found, notes = requests_of(ads, jobs)
            for note in notes:
                log.warning("trial requests: schedd %s: %s", name, note)
            out += found
        return out


def open_requests(config: NodeConfig) -> CondorTrialRequests:
    """The node daemon's source of trial requests: the pool ``node.condor_config`` names
    (the bindings are configured for the whole daemon process, once, here)."""
    condor = replace(
        CondorConfig(),
        config_file=config.condor_config,
        retry_attempts=2,
        retry_wait_s=1.0,
        lock_file=None,
    )
    return CondorTrialRequests(CondorClient(condor, configure_bindings(config.condor_config)))
