"""Slurm's accounting as a replay's jobs: ``sacct --json`` and ``sinfo --json``, live or saved.

A record gives one :class:`~coshare.sim.history.Finished`: the cores, memory and GPUs Slurm
allocated (``tres.allocated``; ``tres.requested`` where nothing was allocated), the nodes, the
user, account and job name, submit, start and end times, the time limit, and the coshare keys
of its comment (``AccountingStoreFlags=job_comment`` keeps comments in accounting). A job that
ended before it started (cancelled while pending) never ran: counted, not replayed. Both the
22.05 form of a number and the ``{"set", "number"}`` form of 23.02+ are read.

The nodes are those ``sinfo`` lists, all of them, whatever their state now (a node drained
today ran jobs last month), with their devices as the live cycle reads them (``gres_name``
and ``device_kinds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from coshare.config import Config
from coshare.errors import AnnotationError, CoshareError, InputError
from coshare.ledger.bounds import MAX_TIME_S, BadValue
from coshare.model import Node
from coshare.sim.history import (
    DeviceMemoryRule,
    Finished,
    Workload,
    collect,
    json_items,
    workload,
)

from slurm_addon.comment import is_annotated, read_annotations
from slurm_addon.jobs import number, text
from slurm_addon.nodes import parse_sinfo_json
from slurm_addon.view import build_nodes


def _tres(record: Mapping[str, object], kind: str) -> dict[str, float]:
    """``type`` (``gres/NAME`` for a GRES) -> count of one TRES list of the record."""
    tres = record.get("tres")
    items = tres.get(kind) if isinstance(tres, Mapping) else None
    out: dict[str, float] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        name = text(item.get("type"))
        if name == "gres" and text(item.get("name")):
            name = f"gres/{text(item.get('name'))}"
        count = item.get("count")
        if name and isinstance(count, (int, float)) and not isinstance(count, bool):
            out[name] = float(count)
    return out


def _time(record: Mapping[str, object], name: str, job: str) -> float:
    times = record.get("time")
    value = times.get(name) if isinstance(times, Mapping) else None
    return float(number(value, 0, field=f"job {job} time.{name}", maximum=MAX_TIME_S))


def finished(record: Mapping[str, object], gres_name: str) -> Finished | str | None:
    """One ``sacct --json`` job: a :class:`Finished`, a message naming the job and the field
    that cannot be read, or ``None`` for a job that never ran."""
    job = str(record.get("job_id", "?"))[:64]
    try:
        start, end = _time(record, "start", job), _time(record, "end", job)
        if start <= 0:
            return None
        if end <= 0:
            return f"job {job}: time.end is not set (still running; allowed: a finished job)"
        given = _tres(record, "allocated") or _tres(record, "requested")
        limit = _time(record, "limit", job)  # minutes in Slurm's accounting
        comment = record.get("comment")
        said = text(comment.get("job")) if isinstance(comment, Mapping) else text(comment)
        annotations = read_annotations(job, said) if is_annotated(said) else {}
        # 22.05 leaves "user" empty where its association names the user
        found = record.get("association")
        association = found if isinstance(found, Mapping) else {}
        return Finished(
            id=job,
            user=text(record.get("user")) or text(association.get("user")),
            account=text(record.get("account")) or text(association.get("account")),
            program=text(record.get("name")),
            cores=given.get("cpu", 1.0),
            memory_mib=given.get("mem", 0.0),
            devices=int(given.get(f"gres/{gres_name}", 0) // max(1, given.get("node", 1))),
            nodes=int(given.get("node", 1)) or 1,
            submit_s=_time(record, "submission", job),
            start_s=start,
            end_s=end,
            time_limit_s=60.0 * limit if 0 < limit < 2**32 - 2 else None,
            annotations=annotations,
        )
    except AnnotationError as exc:
        return str(exc)
    except BadValue as exc:
        return f"job {job}: {exc}" if not str(exc).startswith("job") else str(exc)


def parse_accounting(
    output: str, source: str, gres_name: str
) -> tuple[list[Finished | str], int, str | None]:
    """The finished jobs of a ``sacct --json`` output (a message for each bad record), how
    many never ran, and a note when the output was cut short.

    Raises:
        InputError: not JSON with a ``jobs`` array.
    """
    items, note = json_items(output, source, "jobs")
    records, never = collect(items, source, lambda item: finished(item, gres_name))
    return records, never, note


def history_nodes(output: str, config: Config, notes: list[str]) -> list[Node]:
    """Every node of a ``sinfo --json`` output, as the live cycle reads its devices, whatever
    its state now."""
    nodes = [replace(n, state="idle", flags=()) for n in parse_sinfo_json(output, notes)]
    usable, _ = build_nodes(nodes, config.device_kinds, config.slurm.gres_name, None, notes)
    return usable


def read_history(
    config: Config,
    *,
    since: str | None,
    until: str | None,
    history_file: str | None,
    nodes_file: str | None,
    rule: DeviceMemoryRule,
) -> tuple[Workload, list[str]]:
    """The replay of Slurm's accounting: from saved ``sacct --json`` / ``sinfo --json`` files
    where given, else from the live cluster (``sacct`` from ``since`` to ``until``).

    Raises:
        InputError: a file cannot be read, or nothing in it can be replayed.
        CoshareError: the live cluster cannot be asked.
    """
    from coshare.sim.trace_files import read_records

    from slurm_addon.client import SlurmClient

    client = SlurmClient(config.slurm) if history_file is None or nodes_file is None else None
    notes: list[str] = []
    if history_file is not None:
        output, source = read_records(history_file, "--history-file"), history_file
    else:
        assert client is not None
        if since is None:
            raise InputError(
                "--workload slurm-history needs --since (e.g. now-30days) or a "
                "saved sacct --json output as --history-file"
            )
        output, source = client.read_accounting(since, until), "sacct --json"
    records, never, cut = parse_accounting(output, source, config.slurm.gres_name)
    if cut:
        notes.append(cut)
    nameless = [r for r in records if isinstance(r, Finished) and not r.user]
    if nameless and history_file is None:
        assert client is not None and since is not None
        users = client.read_accounting_users(since, until)
        records = [
            replace(r, user=users.get(r.id, "")) if isinstance(r, Finished) and not r.user else r
            for r in records
        ]
        nameless = [r for r in records if isinstance(r, Finished) and not r.user]
    if nameless:
        notes.append(
            f"{len(nameless)} jobs name no user in the accounting's JSON (Slurm leaves "
            "it out for a user without an association); they are replayed as user "
            "'' (the live read asks sacct --parsable2 for their names)"
        )
    if nodes_file is not None:
        sinfo = read_records(nodes_file, "--nodes-file")
    else:
        assert client is not None
        sinfo = client.read_sinfo_text()
    try:
        nodes = history_nodes(sinfo, config, notes)
    except CoshareError as exc:
        raise InputError(f"{nodes_file or 'sinfo --json'}: {exc}") from exc
    return workload(records, nodes, rule, never), notes
