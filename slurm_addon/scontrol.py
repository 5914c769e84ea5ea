"""Pure builders of the scontrol commands coshare runs, and readers of their errors.

Two ways of writing, chosen by what is written:

- Placements go in batches through scontrol's own command language on its standard input
  (``update JobId=7 ReqNodeList=n1 AdminComment=coshare-placement;...``, one per line): one
  process applies hundreds of updates at ~2 ms each, where one process per job costs ~16 ms
  on a 2-core controller. ``ReqNodeList`` takes one job per update (``JobId=a,b`` is refused),
  so batching by process is the only batching there is; a batch's lines are shared among a
  few processes that run at once (``slurm_addon.writer.shares``), which overlap the time
  each update waits for its credential and reply. That language splits at white space
  and keeps quotes, so a line is built only from validated tokens (:func:`update_line`
  refuses anything else) and never from text a user wrote.
- Refusal messages quote the user's annotations; they go as one argument list per job.

Release and hold take many jobs per call (``scontrol release 1,2,3``). A node's facts go
into its ``Extra`` field with one argument list (:func:`node_extra_argv`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from coshare.errors import UnsafeValue as UnsafeValue  # raised here; importable here
from coshare.ledger.bounds import shorten

from slurm_addon.placement import is_safe_token

#: What may appear in a line of scontrol's command language that coshare writes. Checked with
#: fullmatch: "$" would match before a trailing newline, and a value ending in "\n" would split
#: one update into two commands.
_LINE_VALUE = re.compile(r"[A-Za-z0-9._;=,:-]{1,3900}")
#: The longest line coshare gives scontrol: scontrol built without readline reads its input
#: through a 4096-byte buffer (src/scontrol/scontrol.c, ``_getline``), and drops longer lines.
MAX_LINE_CHARS = 4000
_JOB_ID = re.compile(r"[0-9]{1,12}")
_FOR_JOB = re.compile(r"\bfor job (\d+)")

#: Phrases of Slurm clients that mean the controller is unreachable (worth a retry).
CONTROLLER_DOWN = (
    "Unable to contact slurm controller",
    "Unexpected message received",
    "Socket timed out",
    "Connection refused",
    "Transport endpoint is not connected",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
)


def update_line(
    job_id: str,
    node: str,
    admin_comment: str,
    *,
    nodes: Sequence[str] = (),
    tasks: int = 0,
    tasks_per_node: int = 0,
    min_cpus_per_node: int = 0,
    partition: str | None = None,
) -> str:
    """One placement as a line for scontrol's standard input.

    A gang's (``nodes`` given) names all its nodes in the same one update, with the node
    count pinned (``NumNodes=n-n``: with a range Slurm could add a node the plan does not
    know), its tasks, and ``MinCPUsNode`` (its largest share's CPUs: Slurm then allocates
    that many on every node; without it Slurm 22.05 gave ``-N 3 -n 5`` 3, 1 and 1 CPUs). Its
    ``TasksPerNode`` only when the split is even (``tasks_per_node`` > 0): Slurm 22.05 raises
    a job's task count to nodes x TasksPerNode when it starts it (seen: ``NumTasks=5
    TasksPerNode=2`` on 3 nodes started with 6 tasks). One line is one ``slurm_update_job``
    RPC, which slurmctld applies under its job write lock: a cycle killed before, during or
    after it leaves the whole placement or none of it, never some of its nodes (and the job
    stays held until a re-read confirms it).

    Raises:
        UnsafeValue: the job id, a node name or the text holds characters outside the safe
            set, or the line is longer than scontrol reads (:data:`MAX_LINE_CHARS`).
    """
    if not _JOB_ID.fullmatch(job_id):
        raise UnsafeValue(f"job id {shorten(job_id)}")
    for name in (node, *nodes):
        if not is_safe_token(name):
            raise UnsafeValue(f"node name {shorten(name)}")
    if not _LINE_VALUE.fullmatch(admin_comment):
        raise UnsafeValue(f"AdminComment {shorten(admin_comment)}")
    if partition is not None and not is_safe_token(partition):
        raise UnsafeValue(f"partition name {shorten(partition)}")
    if not nodes:
        # A job of a lent core (collocate) moves into the lending partition in the same
        # update: Slurm never sees it placed there without the placement, or the reverse.
        moved = f" Partition={partition}" if partition is not None else ""
        return f"update JobId={job_id} ReqNodeList={node}{moved} AdminComment={admin_comment}\n"
    if not (0 <= tasks_per_node <= tasks and len(nodes) <= tasks and min_cpus_per_node >= 1):
        raise UnsafeValue(
            f"tasks {tasks} / per node {tasks_per_node} on {len(nodes)} nodes, "
            f"{min_cpus_per_node} CPUs per node"
        )
    per_node = f"TasksPerNode={tasks_per_node} " if tasks_per_node else ""
    line = (
        f"update JobId={job_id} ReqNodeList={','.join(nodes)} "
        f"NumNodes={len(nodes)}-{len(nodes)} NumTasks={tasks} {per_node}"
        f"MinCPUsNode={min_cpus_per_node} AdminComment={admin_comment}\n"
    )
    if len(line) > MAX_LINE_CHARS:
        raise UnsafeValue(
            f"a placement of {len(nodes)} nodes ({len(line)} characters, more "
            f"than scontrol reads in one line: {MAX_LINE_CHARS})"
        )
    return line


def update_argv(job_id: str, admin_comment: str) -> list[str]:
    """``scontrol update`` of one job's AdminComment, as an argument list (any text)."""
    if not _JOB_ID.fullmatch(job_id):
        raise UnsafeValue(f"job id {shorten(job_id)}")
    return ["update", f"JobId={job_id}", f"AdminComment={admin_comment}"]


def node_extra_argv(node: str, facts: str) -> list[str]:
    """``scontrol update`` of a node's ``Extra`` field with its facts line.

    Raises:
        UnsafeValue: a node name outside the safe set, or text that is not a facts line.
    """
    if not is_safe_token(node):
        raise UnsafeValue(f"node name {shorten(node)}")
    if not _FACTS.fullmatch(facts):
        raise UnsafeValue(f"node facts {shorten(facts)}")
    return ["update", f"NodeName={node}", f"Extra={facts}"]


_FACTS = re.compile(r"coshare-facts;[A-Za-z0-9._:;=,+-]{0,131072}")


def chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    """``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def job_list(job_ids: Sequence[str]) -> str:
    """Job ids as scontrol's comma-separated list.

    Raises:
        UnsafeValue: an id is not a plain job number.
    """
    for job_id in job_ids:
        if not _JOB_ID.fullmatch(job_id):
            raise UnsafeValue(f"job id {shorten(job_id)}")
    return ",".join(job_ids)


def errors_by_job(stderr: str) -> dict[str, str]:
    """scontrol's per-job error lines (``Invalid node name specified for job 6``), by job."""
    found: dict[str, str] = {}
    for line in stderr.splitlines():
        match = _FOR_JOB.search(line)
        if match:
            found.setdefault(match.group(1), line.strip())
    return found


def controller_down(output: str) -> bool:
    """Whether a Slurm client's output says the controller could not be reached."""
    return any(phrase in output for phrase in CONTROLLER_DOWN)
