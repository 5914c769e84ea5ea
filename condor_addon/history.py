"""HTCondor's history as a replay's jobs: ``condor_history -json`` and ``condor_status
-json``, live (the schedd's history through the bindings) or saved.

An ad gives one :class:`~coshare.sim.history.Finished`: the cores, memory and GPUs its slot
was given (``CpusProvisioned``, ``MemoryProvisioned``, ``GPUsProvisioned``; the requests
where the slot's are missing), the owner and accounting group, the program (``Cmd``'s last
part), submit, start and end times, what it used (``MemoryUsage``, ``CpusUsage``) and its
coshare keys. A job that never started (no ``JobCurrentStartDate``) never ran: counted, not
replayed. A removed job that ran ends when it left the running state
(``EnteredCurrentStatus``).

The nodes are those the live cycle reads from the collector's slot ads (nodes advertising
``CoshareNodeName``, their devices as ``device_kinds`` says).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coshare.config import Config
from coshare.errors import InputError
from coshare.model import Node
from coshare.sim.history import (
    DeviceMemoryRule,
    Finished,
    Workload,
    collect,
    json_items,
    workload,
)

from condor_addon import attributes as A
from condor_addon.view import parse_slots

#: What a replay reads of each history ad.
HISTORY_PROJECTION: tuple[str, ...] = (
    "ClusterId",
    "ProcId",
    "Owner",
    "AcctGroup",
    "Cmd",
    "JobStatus",
    "QDate",
    "JobCurrentStartDate",
    "CompletionDate",
    "EnteredCurrentStatus",
    "RequestCpus",
    "RequestMemory",
    "RequestGPUs",
    "CpusProvisioned",
    "MemoryProvisioned",
    "GPUsProvisioned",
    "MemoryUsage",
    "CpusUsage",
    *A.ANNOTATIONS,
)

REMOVED = 3


def _number(ad: Mapping[str, object], *names: str) -> float | None:
    """The first of ``names`` that holds a number (an expression saved as text is skipped:
    ``condor_history -json`` prints ``RequestMemory``'s default expression unevaluated)."""
    for name in names:
        value = ad.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def finished(ad: Mapping[str, object]) -> Finished | str | None:
    """One history ad: a :class:`Finished`, a message naming the job and the field that
    cannot be read, or ``None`` for a job that never ran."""
    cluster, proc = _number(ad, "ClusterId"), _number(ad, "ProcId")
    if cluster is None or proc is None or not (0 <= cluster < 2**31 and 0 <= proc < 2**31):
        return "a history ad without a whole ClusterId and ProcId"
    job = f"{int(cluster)}.{int(proc)}"
    start = _number(ad, "JobCurrentStartDate")
    if start is None or start <= 0:
        return None
    end = _number(ad, "CompletionDate")
    if (end is None or end <= 0) and _number(ad, "JobStatus") == REMOVED:
        end = _number(ad, "EnteredCurrentStatus")
    if end is None or end <= 0:
        return f"job {job}: CompletionDate is not set (allowed: a finished job's end time)"
    wanted = {a.lower() for a in A.ANNOTATIONS}
    annotations = {k: v for k, v in ad.items() if k.lower() in wanted and v is not None}
    command = ad.get("Cmd")
    return Finished(
        id=job,
        user=str(ad.get("Owner") or ""),
        account=str(ad.get("AcctGroup") or ""),
        program=command.rsplit("/", 1)[-1] if isinstance(command, str) else "",
        cores=_number(ad, "CpusProvisioned", "RequestCpus") or 1.0,
        memory_mib=_number(ad, "MemoryProvisioned", "RequestMemory") or 0.0,
        devices=int(_number(ad, "GPUsProvisioned", "RequestGPUs") or 0),
        submit_s=_number(ad, "QDate") or start,
        start_s=start,
        end_s=end,
        annotations=annotations,
        used_cores=_number(ad, "CpusUsage"),
        used_memory_mib=_number(ad, "MemoryUsage"),
    )


def parse_history(ads: Sequence[object], source: str) -> tuple[list[Finished | str], int]:
    """The finished jobs of history ads (a message for each bad one), and how many never ran."""
    return collect(ads, source, finished)


def history_nodes(slots: Sequence[object], config: Config, notes: list[str]) -> list[Node]:
    """The nodes of the collector's slot ads, as the live cycle reads them."""
    view = parse_slots([s for s in slots if isinstance(s, Mapping)], config.device_kinds)
    notes.extend(view.warnings)
    return list(view.nodes)


def read_history(
    config: Config,
    *,
    since: str | None,
    until: str | None,
    history_file: str | None,
    nodes_file: str | None,
    rule: DeviceMemoryRule,
) -> tuple[Workload, list[str]]:
    """The replay of HTCondor's history: from saved ``condor_history -json`` /
    ``condor_status -json`` files where given, else from the live pool (the schedd's jobs
    that completed from ``since`` to ``until``, epoch seconds).

    Raises:
        InputError: a file cannot be read, or nothing in it can be replayed.
        CoshareError: the live pool cannot be asked.
    """
    from coshare.sim.trace_files import read_records

    notes: list[str] = []
    live = None
    if history_file is None or nodes_file is None:
        from condor_addon.client import open_client

        live = open_client(config.condor)
    ads: Sequence[object]
    if history_file is not None:
        ads, cut = json_items(read_records(history_file, "--history-file"), history_file, None)
        if cut:
            notes.append(cut)
    else:
        assert live is not None
        if since is None:
            raise InputError(
                "--workload condor-history needs --since (epoch seconds) or a "
                "saved condor_history -json output as --history-file"
            )
        ads = live.history_ads(_window(since, until), HISTORY_PROJECTION)
    records, never = parse_history(ads, history_file or "condor_history")
    slots: Sequence[object]
    if nodes_file is not None:
        slots, _ = json_items(read_records(nodes_file, "--nodes-file"), nodes_file, None)
    else:
        assert live is not None
        slots = list(live.slot_ads())
    return workload(records, history_nodes(slots, config, notes), rule, never), notes


def _window(since: str, until: str | None) -> str:
    """The history constraint of jobs that ended from ``since`` to ``until`` (epoch seconds,
    checked as whole numbers before they are written into the expression).

    Raises:
        InputError: not whole numbers of seconds.
    """
    bounds = []
    for flag, value in (("--since", since), ("--until", until)):
        if value is not None and not (value.isascii() and value.isdigit() and len(value) <= 12):
            raise InputError(
                f"{flag} {value[:40]!r}: HTCondor's history is asked by epoch "
                "seconds (e.g. $(date -d '30 days ago' +%s))"
            )
        bounds.append(value)
    constraint = f"CompletionDate >= {int(bounds[0] or 0)}"
    if bounds[1] is not None:
        constraint += f" && CompletionDate <= {int(bounds[1])}"
    return constraint
