"""Decoding a snapshot or a plan through its typed definition: one pass in C (msgspec) checks
every type, range and length, then the character rules of ids and text run over all of them
at once and the structs become the model's objects.

Each function returns ``None`` when the document does not pass: a field out of range, an id
with a control character, a key given twice, an integer written ``4.0``, anything unusual. The
caller (:mod:`coshare.schema`) then checks the document field by field and names every
problem with the job, the field and what is allowed (or accepts what the contract allows but
the structs do not take, such as ``4.0`` for an integer); so what this path accepts is
exactly what the contract accepts, with the same values (tests/unit/test_schema_fast.py
compares the two).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

import msgspec

from coshare.contracts.plan_doc import PlanDoc, UnplacedDoc
from coshare.contracts.snapshot_doc import (
    LimitDoc,
    NodeDoc,
    PendingDoc,
    RunningDoc,
    SnapshotDoc,
)
from coshare.ledger.bounds import MAX_PROCESSES
from coshare.ledger.gangs import gang_problems
from coshare.ledger.ids import id_problem, split_ids, text_problem
from coshare.model import (
    MILLI,
    Assignment,
    Device,
    Job,
    Limit,
    Node,
    Plan,
    RunningJob,
    Snapshot,
    Spread,
    Trial,
    Unplaced,
    capacity_cores_to_milli,
    cores_to_milli,
)

_SNAPSHOT = msgspec.json.Decoder(SnapshotDoc)
_PLAN = msgspec.json.Decoder(PlanDoc)
_encode = msgspec.json.encode
_FAILED = (msgspec.DecodeError, msgspec.ValidationError)


class _Refused(Exception):
    """A value the structs took but the contract's character or consistency rules do not."""


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No garbage collection while a document becomes objects: they hold no cycles, and the
    collector would walk the growing heap again and again (a third of the time for 100,000
    jobs)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def snapshot_from_text(text: str) -> Snapshot | None:
    """The snapshot JSON ``text`` holds, or ``None`` (see the module's docstring)."""
    with _collector_paused():
        try:
            doc = _SNAPSHOT.decode(text)
        except _FAILED:
            return None
        pending_colons = [0]
        snapshot = snapshot_from_doc(doc, pending_colons)
        if snapshot is None:
            return None
        # the pending jobs' colons were counted while they were read; the rest encoded
        rest = msgspec.structs.replace(doc, pending=None)
        colons = _encode(rest).count(b":") + (doc.pending is not None) + pending_colons[0]
        return snapshot if _colons(text) == colons else None


def snapshot_from_data(data: object) -> Snapshot | None:
    """The snapshot of already decoded JSON values, or ``None``."""
    with _collector_paused():
        try:
            doc = msgspec.convert(data, SnapshotDoc)
        except _FAILED:
            return None
        return snapshot_from_doc(doc)


def plan_from_text(text: str) -> Plan | None:
    """The plan JSON ``text`` holds, or ``None``."""
    with _collector_paused():
        try:
            doc = _PLAN.decode(text)
        except _FAILED:
            return None
        if not no_key_twice(text, doc):
            return None
        return plan_from_doc(doc)


def plan_from_data(data: object) -> Plan | None:
    """The plan of already decoded JSON values, or ``None``."""
    try:
        doc = msgspec.convert(data, PlanDoc)
    except _FAILED:
        return None
    return plan_from_doc(doc)


def no_key_twice(text: str, doc: msgspec.Struct) -> bool:
    """Whether no object of ``data`` gave a key twice (a decoder keeps the last silently).

    Every key of a JSON text ends at one ``:`` outside strings, so ``data`` holds as many colons
    as keys plus those inside strings. Encoding the decoded document again (absent and
    ``null`` fields are left out) gives one colon for each key kept, plus the same colons
    inside strings (and one for each ``\\u003a`` escape). A key given twice, or a ``null``
    written out, leaves fewer in the encoding: then ``False``, and the checker decides.
    """
    return _colons(text) == _encode(doc).count(b":")


def _colons(text: str) -> int:
    """The colons of JSON ``text``, those written as escapes in strings included."""
    colons = text.count(":")
    if "\\u00" in text:
        colons += text.count("\\u003a") + text.count("\\u003A")
    return colons


def _ids_ok(ids: list[str]) -> bool:
    """Whether every one is an id (:func:`coshare.ledger.ids.id_problem`) without a comma:
    plain ASCII ones checked at once, the others one by one."""
    joined = "".join(ids)
    if joined.isascii() and joined.isprintable() and "," not in joined:
        return " " not in joined or not any(i[0] == " " or i[-1] == " " for i in ids)
    return all(id_problem(i) is None and "," not in i for i in ids)


def _texts_ok(texts: list[str]) -> bool:
    """Whether every one is text the contract takes: printable, not only white space (the
    structs checked the lengths)."""
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():
        return not any(map(str.isspace, texts))
    return all(text_problem(t, len(t)) is None and t.strip() for t in texts)


def snapshot_from_doc(doc: SnapshotDoc, pending_colons: list[int] | None = None) -> Snapshot | None:
    """The model's snapshot of a decoded document, or ``None`` where an id, a text or a job's
    consistency rules refuse it (the checker says which). ``pending_colons`` gets the colons the
    pending jobs' JSON holds (see :func:`no_key_twice`)."""
    ids: list[str] = []
    texts: list[str] = []
    try:
        nodes = [_node(n, ids, texts) for n in doc.nodes]
        running = [_running(r, ids, texts) for r in doc.running or ()]
        pending = _pending_all(doc.pending or [], ids, texts, pending_colons or [0])
        limits = [_limit(limit, ids, texts) for limit in doc.limits or ()]
    except _Refused:
        return None
    if not _ids_ok(ids) or not _texts_ok(texts):
        return None
    return Snapshot(tuple(nodes), tuple(running), tuple(pending), doc.now, tuple(limits))


def _node(n: NodeDoc, ids: list[str], texts: list[str]) -> Node:
    ids.append(n.name)
    devices = []
    for d in n.devices or ():
        ids.append(d.id)
        if d.model is not None:
            texts.append(d.model)
        devices.append(Device(d.id, d.memory_mib, d.threads, d.model or ""))
    if n.domain is not None:
        texts.append(n.domain)
    return Node(
        n.name,
        capacity_cores_to_milli(n.cores),
        n.memory_mib,
        tuple(devices),
        n.membw_gbps,
        n.llc_ways,
        n.domain,
        n.membw_avail_gbps,
        n.membw_baseline_gbps,
        n.llc_ways_free,
        n.facts_at_s,
        n.membw_at_s,
    )


def _devices(listed: str | None, ids: list[str]) -> tuple[str, ...]:
    if listed is None:
        return ()
    devices = split_ids(listed)
    if not devices:
        raise _Refused
    ids.extend(devices)
    return devices


def _running(r: RunningDoc, ids: list[str], texts: list[str]) -> RunningJob:
    ids.append(r.id)
    ids.append(r.node)
    if r.harvest_from is not None:
        ids.append(r.harvest_from)
    if r.program is not None:
        texts.append(r.program)
    return RunningJob(
        id=r.id,
        node=r.node,
        devices=_devices(r.device, ids),
        device_memory_mib=r.device_memory_mib or 0,
        device_threads=r.device_threads or 0,
        cpu_milli=MILLI if r.cores is None else cores_to_milli(r.cores),
        memory_mib=r.memory_mib or 0,
        state=r.state or "running",
        membw_gbps=r.membw_gbps,
        llc_ways=r.llc_ways,
        start_time_s=r.start_time,
        program=r.program,
        cpu_load_cores=r.cpu_load_cores,
        cpu_load_last_cores=r.cpu_load_last_cores,
        cpu_load_max_cores=r.cpu_load_max_cores,
        cpu_load_window_s=r.cpu_load_window_s,
        walltime_s=r.walltime_s,
        copy_bw_mbps=r.copy_bw_mbps,
        harvest_from=r.harvest_from,
        cpu_cores_held=None if r.cpu_cores_held is None else int(r.cpu_cores_held),
        cpu_wait_cores=r.cpu_wait_cores,
        cpu_wait_last_cores=r.cpu_wait_last_cores,
    )


#: A pending job's fields in the struct, in the order :func:`_pending_all` reads them.
_PENDING_READ = tuple(map(attrgetter, PendingDoc.__struct_fields__))


def _pending_all(
    listed: list[PendingDoc], ids: list[str], texts: list[str], colons: list[int]
) -> list[Job]:
    """The model's jobs: each field read and defaulted a column at a time over all jobs,
    then each job built from its columns in one C call (:class:`~coshare.model.Job` is a
    struct). Adds the colons of their JSON (one per key, and those in their text) to
    ``colons[0]``."""
    n = len(listed)
    if not n:
        return []
    read = [list(map(get, listed)) for get in _PENDING_READ]
    colons[0] += sum(n - column.count(None) for column in read)
    (
        job_ids,
        device_memory,
        device_threads,
        counts,
        cores,
        memory,
        priority,
        submit,
        kinds,
        processes,
        programs,
        alpha,
        membw,
        copy_bw,
        walltime,
        nodes,
        nodes_max,
        per_node,
        charges,
    ) = read
    ids.extend(job_ids)
    device_memory = _default(device_memory, 0)
    device_threads = _default(device_threads, 0)
    if None in kinds:
        kinds = [
            ("device" if (m or t) else "cpu") if k is None else k
            for k, m, t in zip(kinds, device_memory, device_threads, strict=True)
        ]
    if None in counts:
        counts = [
            (1 if k == "device" else 0) if c is None else c
            for c, k in zip(counts, kinds, strict=True)
        ]
    if "cpu" in kinds or min(counts) < 1:
        for m, t, c, k in zip(device_memory, device_threads, counts, kinds, strict=True):
            if (k == "cpu" and (m or t or c)) or (k == "device" and c < 1):
                raise _Refused
    if _given(nodes) or _given(nodes_max) or _given(per_node):
        processes = _gangs(processes, nodes, nodes_max, per_node)
        nodes = _default(nodes, 1)
    else:
        nodes = [1] * n
    given_programs = [p for p in programs if p is not None]
    texts.extend(given_programs)
    colons[0] += "".join(job_ids).count(":") + "".join(given_programs).count(":")
    if _given(charges):
        charges = [() if c is None else tuple(c.items()) for c in charges]
        for c in charges:
            ids.extend(k for k, _ in c)
            colons[0] += len(c) + "".join(k for k, _ in c).count(":")
    else:
        charges = [()] * n
    columns = {
        "id": job_ids,
        "device_memory_mib": device_memory,
        "device_threads": device_threads,
        "device_count": counts,
        "cpu_milli": _milli(cores),
        "memory_mib": _default(memory, 0),
        "priority": _default(priority, 0),
        "submit_time_s": _default(submit, 0.0),
        "kind": kinds,
        "processes": _default(processes, 1),
        "program": programs,
        "alpha": alpha,
        "membw_gbps": membw,
        "copy_bw_mbps": copy_bw,
        "walltime_s": walltime,
        "nodes": nodes,
        "nodes_max": nodes_max,
        "processes_per_node": per_node,
        "charges": charges,
    }
    jobs: list[Job] = list(map(Job, *columns.values()))  # the columns are in field order
    return jobs


def _given(column: list[Any]) -> bool:
    """Whether any job gave the field."""
    return column.count(None) != len(column)


def _default(column: list[Any], default: Any) -> list[Any]:
    return [default if v is None else v for v in column] if None in column else column


def _milli(cores: list[float | None]) -> list[int]:
    """Each job's ``cpu_milli`` (one core when absent), rounded up: whole thousandths at once,
    the others one by one."""
    given = _default(cores, float(MILLI) / MILLI)
    scaled = list(map(float(MILLI).__mul__, given))
    whole = list(map(int, scaled))
    if whole == scaled:
        return whole
    return list(map(cores_to_milli, given))


def _gangs(
    processes: list[int | None],
    nodes: list[int | None],
    nodes_max: list[int | None],
    per_node: list[int | None],
) -> list[int | None]:
    """The processes of each job, a gang's default ``nodes x processes_per_node``; refused
    where a gang's fields are inconsistent (:func:`coshare.ledger.gangs.gang_problems`)."""
    out: list[int | None] = []
    for p, low, high, ppn in zip(processes, nodes, nodes_max, per_node, strict=True):
        if low is None and high is None and ppn is None:
            out.append(p)
            continue
        count = low or 1
        if p is None:
            p = min(count * (ppn or 1), MAX_PROCESSES)
        gang = Job("", processes=p, nodes=count, nodes_max=high, processes_per_node=ppn)
        if gang_problems(gang):
            raise _Refused
        out.append(p)
    return out


def _limit(limit: LimitDoc, ids: list[str], texts: list[str]) -> Limit:
    ids.append(limit.id)
    texts.append(limit.name)
    texts.append(limit.holder)
    return Limit(limit.id, limit.name, limit.holder, limit.max, limit.used)


def plan_from_doc(doc: PlanDoc) -> Plan | None:
    """The model's plan of a decoded document, or ``None`` where an id or a text refuses it."""
    ids: list[str] = []
    texts: list[str] = [doc.policy]
    try:
        assignments = []
        for a in doc.assignments or ():
            ids.append(a.job)
            ids.append(a.node)
            if a.harvest_from is not None:
                ids.append(a.harvest_from)
            assignments.append(
                Assignment(
                    a.job,
                    a.node,
                    _devices(a.device, ids),
                    a.processes,
                    a.harvest_from,
                    a.llc_ways,
                    a.membw_gbps,
                    a.llc_ways_spare,
                )
            )
    except _Refused:
        return None
    unplaced = [_unplaced(u, ids, texts) for u in doc.unplaced or ()]
    requeue = [_unplaced(u, ids, texts) for u in doc.requeue or ()]
    trials = []
    for t in doc.trials or ():
        ids.append(t.job)
        ids.append(t.node)
        ids.extend(t.partners or ())
        trials.append(Trial(t.job, t.node, tuple(t.partners or ())))
    spreads = []
    for s in doc.spreads or ():
        ids.append(s.job)
        if s.note is not None:
            texts.append(s.note)
        spreads.append(
            Spread(s.job, s.scale, s.nodes, s.cores_per_node, s.ways, s.note or "", s.membw_gbps)
        )
    if not _ids_ok(ids) or not _texts_ok(texts):
        return None
    seconds = doc.stats.seconds if doc.stats is not None else None
    return Plan(
        doc.policy,
        tuple(assignments),
        tuple(unplaced),
        seconds or 0.0,
        trials=tuple(trials),
        requeue=tuple(requeue),
        spreads=tuple(spreads),
    )


def _unplaced(u: UnplacedDoc, ids: list[str], texts: list[str]) -> Unplaced:
    ids.append(u.job)
    texts.append(u.reason)
    return Unplaced(u.job, u.reason, u.code or "no_room")
