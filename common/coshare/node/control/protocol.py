"""The node daemon's job-control protocol: how a job wrapper that runs as the job's user asks
the root daemon to set up, join and end the job's group.

A client connects to the control socket (``node.control_socket``, ``/run/coshare/control.sock``)
and sends one request per line; every request gets exactly one reply line, in order. Lines
are ASCII, requests at most :data:`MAX_LINE` bytes; fields are ``key=value`` words. The
daemon knows who asks from the kernel (``SO_PEERCRED``, /proc), never from the request, and
applies the rules of :mod:`coshare.node.control.trust`::

    START job=<id> [cores=<n>] [memory_mib=<m>] [devices=<d1,d2>]
          [device_memory_mib=<m>] [device_threads=<t>] [llc_ways=<w>] [membw_percent=<p>]
          [uid=<n>] [lends=1] [borrow=<lender job>]
        -> OK job=<id> cpus=<list|-> memory_mib=<m|-> devices=<d1,d2|->
    JOIN job=<id> [target=self|parent]
        -> OK job=<id> pid=<moved pid> cpus=<list|-> devices=<d1,d2|->
              device_memory_mib=<m|-> device_threads=<t|->
    END job=<id>
        -> OK job=<id> started=<0|1> leftover=<n> [reason=<text to the end of the line>]
    FREEZE job=<id>
        -> OK job=<id> frozen=1 changed=<0|1>
    THAW job=<id>
        -> OK job=<id> frozen=0 changed=<0|1>
    TRIAL job=<new job> partners=<old job,old job>
        -> OK job=<id> share=<0..1> available=<0..1> gbps=<GB/s> cpus=<list>
    LEND job=<gpu job> to=<cpu job> cpus=<list>
        -> OK job=<gpu job> to=<cpu job> cpus=<its cpus now> to_cpus=<the cpu job's now>
              lent=<all cores lent to it> changed=<0|1>
    RECLAIM job=<gpu job> from=<cpu job> [cpus=<list>]
        -> OK job=<gpu job> from=<cpu job> cpus=<its cpus now> from_cpus=<the cpu job's now>
              lent=<cores still lent to it|-> changed=<0|1> requeue=<0|1>

``uid`` is for root only (the account of a job root starts). ``lends=1`` marks a job its
scheduler placed as one whose idle cores may be lent (``collocate``; HTCondor's wrapper says
so for a job coshare marked ``CoshareLender``). ``borrow=<lender>`` starts a CPU-only job on
``cores`` cores of that running job (HTCondor's wrapper, for a job coshare placed on a lent
core, ``CoshareHarvestFrom``): its group gets no cores of its own, and the cores are taken out
of the lender's cpuset before anything runs in it (the same decision as LEND); refused
(``not_allowed``) unless the lender runs here and started with ``lends=1``, and
(``bad_spec``) when it cannot lend that many and keep a core; the cores go back at its END.
``target=parent`` moves the caller's parent (Slurm's TaskProlog: its parent is the task that
will ``exec`` the user's program). ``reason`` is why coshare killed the job, if it did.
FREEZE and THAW stop and resume every process of the job's group (the cgroup freezer: v1
``freezer.state``, v2 ``cgroup.freeze``; poncos section 7 freezes the old job while it probes
the new one's bandwidth); only accounts of ``node.operator_uids`` may ask, and both are idempotent:
``changed=0`` says the job was frozen (thawed) already and nothing was done.

TRIAL measures a trial co-run of the ``membw`` policy (poncos section 7, steps 6-8):
it freezes the ``partners`` (the old jobs), probes the memory bandwidth available on
their cores while only ``job`` (the new one) runs beside them, and thaws them whatever
happened; ``share`` is ``1 - available``, the new job's use. Operators only. Each freeze is
recorded before it is made, so a daemon killed during the probe thaws them when it starts
again (``node.max_freeze_s``). Refused: ``unknown_job`` for a partner without a group,
``unsupported`` without a freezer or a membw baseline.

LEND and RECLAIM enforce a harvest placement (Wu & Hong, :mod:`coshare.node.harvest`):
LEND takes the named cores *out* of the running GPU job's cpuset and gives them to the CPU-only
job's group (its cpuset grows by them; never shared); RECLAIM gives the GPU job back the named
cores (default: all it lent to that job) and shrinks the CPU job to what remains. When nothing
would remain the reply says ``requeue=1`` and nothing is changed: the planner requeues the CPU
job through its scheduler, and its END gives the cores back. Operators only, idempotent
(``changed=0``: done already), kept in the job records (a daemon restart keeps the loans).
Refused: ``unknown_job`` for either job; ``bad_spec`` for cores the GPU job does not hold,
cores lent already, or a lend that would leave the GPU job no core.

Errors are ``ERR <code> <text>``; codes: ``bad_request``, ``too_long``, ``gone``,
``not_launcher``, ``in_group``, ``wrong_user``, ``not_allowed``, ``running`` (the job runs
already), ``unknown_job``, ``bad_spec`` (e.g. not enough free cores), ``cgroup`` (the kernel
refused), ``unsupported`` (the node lacks what was asked, e.g. a freezer: the text names the
path looked at), ``internal``; and for the connection itself ``too_many`` (its uid holds
``node.max_connections_per_uid`` connections already) and ``timeout`` (the request did not
arrive whole within ``node.line_timeout_s``), after which the daemon hangs up.

This module is pure: parsing and formatting only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from coshare.errors import JobSpecError, ReplyError
from coshare.node.spec import check_device_id, check_job_id, parse_cpu_list

#: Longest request line, newline included.
MAX_LINE = 1024
#: Largest integer a field may carry.
MAX_NUMBER = 2**31 - 1

ControlVerb = Literal["START", "JOIN", "END", "FREEZE", "THAW", "LEND", "RECLAIM", "TRIAL"]

_FIELDS: dict[str, tuple[str, ...]] = {
    "START": (
        "job",
        "cores",
        "memory_mib",
        "devices",
        "device_memory_mib",
        "device_threads",
        "uid",
        "llc_ways",
        "membw_percent",
        "lends",
        "borrow",
    ),
    "JOIN": ("job", "target"),
    "END": ("job",),
    "FREEZE": ("job",),
    "THAW": ("job",),
    "LEND": ("job", "to", "cpus"),
    "RECLAIM": ("job", "from", "cpus"),
    "TRIAL": ("job", "partners"),
}
#: The most partners one TRIAL names.
MAX_PARTNERS = 64


class ControlProtocolError(ReplyError):
    """A line that is not a control request; becomes ``ERR <code> <text>``."""


@dataclass(frozen=True)
class ControlRequest:
    """One parsed request.

    Attributes:
        verb: START, JOIN, END, FREEZE, THAW, LEND or RECLAIM.
        job: the job id.
        cores: cores the job needs (START).
        memory_mib: host memory limit (START).
        devices: device ids (START).
        device_memory_mib: declared device memory per device (START).
        device_threads: declared device threads (START).
        uid: the job's account, when root STARTs it for another user.
        llc_ways: LLC ways of its own (START; resctrl).
        membw_percent: its memory-bandwidth share (START; resctrl MBA).
        target: ``self`` or ``parent`` (JOIN).
        other: the CPU job that borrows (LEND ``to``) or gives back (RECLAIM ``from``).
        cpus: the cores lent or given back (``None`` for RECLAIM: all lent to ``other``).
        partners: the old jobs frozen while ``job`` is measured (TRIAL).
        lends: its scheduler placed it as a job whose idle cores may be lent (START).
        borrow: the running job whose cores it runs on (START; ``cores`` of them).
    """

    verb: ControlVerb
    job: str
    cores: float | None = None
    memory_mib: int | None = None
    devices: tuple[str, ...] = ()
    device_memory_mib: int | None = None
    device_threads: int | None = None
    uid: int | None = None
    target: Literal["self", "parent"] = "self"
    llc_ways: int | None = None
    membw_percent: int | None = None
    other: str | None = None
    cpus: tuple[int, ...] | None = None
    partners: tuple[str, ...] = ()
    lends: bool = False
    borrow: str | None = None


def _integer(job: str, key: str, value: str, minimum: int = 1) -> int:
    if not value.isdigit() or len(value) > 10 or not minimum <= int(value) <= MAX_NUMBER:
        raise ControlProtocolError(
            "bad_request",
            f"job {job}: {key}={value[:32]!r} is not an integer in {minimum}..{MAX_NUMBER}",
        )
    return int(value)


def parse_control(line: bytes) -> ControlRequest:
    """Parse one request line (with or without its newline).

    Raises:
        ControlProtocolError: for anything else, naming the job and field when it can.
    """
    if len(line) > MAX_LINE:
        raise ControlProtocolError("too_long", f"request lines are at most {MAX_LINE} bytes")
    try:
        text = line.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ControlProtocolError("bad_request", "requests are ASCII") from None
    if not text.isprintable():
        raise ControlProtocolError("bad_request", "requests hold no control characters")
    words = text.split()
    if not words:
        raise ControlProtocolError("bad_request", "empty request")
    verb = words[0].upper()
    if verb not in _FIELDS:
        raise ControlProtocolError(
            "bad_request",
            f"unknown request {words[0][:32]!r} (known: {', '.join(_FIELDS)})",
        )
    fields: dict[str, str] = {}
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals:
            raise ControlProtocolError("bad_request", f"{word[:32]!r} is not key=value")
        if key not in _FIELDS[verb]:
            raise ControlProtocolError(
                "bad_request",
                f"{verb} takes no field {key[:32]!r} (fields: {', '.join(_FIELDS[verb])})",
            )
        if key in fields:
            raise ControlProtocolError("bad_request", f"field {key!r} given twice")
        fields[key] = value
    if "job" not in fields:
        raise ControlProtocolError("bad_request", f"{verb} needs job=<id>")
    try:
        job = check_job_id(fields["job"])
    except JobSpecError as exc:
        raise ControlProtocolError("bad_request", str(exc)) from None
    if verb == "JOIN":
        target = fields.get("target", "self")
        if target not in ("self", "parent"):
            raise ControlProtocolError(
                "bad_request", f"job {job}: target={target[:32]!r} (allowed: self, parent)"
            )
        return ControlRequest("JOIN", job, target=target)  # type: ignore[arg-type]
    if verb in ("END", "FREEZE", "THAW"):
        return ControlRequest(verb, job)  # type: ignore[arg-type]
    if verb in ("LEND", "RECLAIM"):
        return _loan(verb, job, fields)
    if verb == "TRIAL":
        return _trial(job, fields)
    return _start(job, fields)


def _trial(job: str, fields: dict[str, str]) -> ControlRequest:
    names = [p for p in fields.get("partners", "").split(",") if p]
    if not names:
        raise ControlProtocolError("bad_request", f"job {job}: TRIAL needs partners=<job,...>")
    if len(names) > MAX_PARTNERS:
        raise ControlProtocolError(
            "bad_request", f"job {job}: partners names {len(names)} jobs (at most {MAX_PARTNERS})"
        )
    partners = tuple(_job_field(job, "partners", p) for p in names)
    if job in partners or len(set(partners)) != len(partners):
        raise ControlProtocolError(
            "bad_request", f"job {job}: partners names a job twice or the job itself"
        )
    return ControlRequest("TRIAL", job, partners=partners)


def _job_field(job: str, key: str, value: str) -> str:
    """A field that names another job: its id, or the refusal naming ``job`` and ``key``."""
    try:
        return check_job_id(value)
    except JobSpecError as exc:
        raise ControlProtocolError("bad_request", f"job {job}: {key}: {exc}") from None


def _loan(verb: str, job: str, fields: dict[str, str]) -> ControlRequest:
    key = "to" if verb == "LEND" else "from"
    if key not in fields:
        raise ControlProtocolError("bad_request", f"job {job}: {verb} needs {key}=<job id>")
    other = _job_field(job, key, fields[key])
    cpus = None
    if "cpus" in fields:
        try:
            cpus = parse_cpu_list(fields["cpus"])
        except JobSpecError as exc:
            raise ControlProtocolError("bad_request", f"job {job}: cpus: {exc}") from None
        if not cpus:
            raise ControlProtocolError("bad_request", f"job {job}: cpus= names no cpu")
    elif verb == "LEND":
        raise ControlProtocolError("bad_request", f"job {job}: LEND needs cpus=<list>")
    return ControlRequest(verb, job, other=other, cpus=cpus)  # type: ignore[arg-type]


def _start(job: str, fields: dict[str, str]) -> ControlRequest:
    cores = None
    if "cores" in fields:
        try:
            cores = float(fields["cores"])
        except ValueError:
            cores = math.nan
        if not math.isfinite(cores) or not 0 < cores <= 65536:
            raise ControlProtocolError(
                "bad_request", f"job {job}: cores={fields['cores']!r} (allowed: a number > 0)"
            )
    devices: tuple[str, ...] = ()
    if fields.get("devices", "") not in ("", "-"):
        try:
            devices = tuple(check_device_id(d) for d in fields["devices"].split(","))
        except JobSpecError as exc:
            raise ControlProtocolError("bad_request", f"job {job}: devices: {exc}") from None
    ints = {
        key: _integer(job, key, fields[key], 0 if key == "uid" else 1)
        for key in (
            "memory_mib",
            "device_memory_mib",
            "device_threads",
            "uid",
            "llc_ways",
            "membw_percent",
        )
        if key in fields
    }
    lends = fields.get("lends", "0")
    if lends not in ("0", "1"):
        raise ControlProtocolError(
            "bad_request", f"job {job}: lends={lends[:32]!r} (allowed: 0, 1)"
        )
    borrow = None
    if "borrow" in fields:
        borrow = _job_field(job, "borrow", fields["borrow"])
        if borrow == job:
            raise ControlProtocolError("bad_request", f"job {job}: borrow names the job itself")
        if cores is None:
            raise ControlProtocolError(
                "bad_request", f"job {job}: borrow= needs cores=<n>, the cores it borrows"
            )
        if devices or lends == "1":
            raise ControlProtocolError(
                "bad_request",
                f"job {job}: a borrowing job is CPU-only "
                "and lends nothing (no devices=, no lends=1)",
            )
    return ControlRequest(
        "START",
        job,
        cores=cores,
        memory_mib=ints.get("memory_mib"),
        devices=devices,
        device_memory_mib=ints.get("device_memory_mib"),
        device_threads=ints.get("device_threads"),
        uid=ints.get("uid"),
        llc_ways=ints.get("llc_ways"),
        membw_percent=ints.get("membw_percent"),
        lends=lends == "1",
        borrow=borrow,
    )


def format_start(request: ControlRequest) -> str:
    """The START line for a request (what clients send)."""
    words = ["START", f"job={request.job}"]
    if request.cores is not None:
        words.append(f"cores={request.cores:g}")
    for key in (
        "memory_mib",
        "device_memory_mib",
        "device_threads",
        "uid",
        "llc_ways",
        "membw_percent",
    ):
        value = getattr(request, key)
        if value is not None:
            words.append(f"{key}={value}")
    if request.devices:
        words.append(f"devices={','.join(request.devices)}")
    if request.lends:
        words.append("lends=1")
    if request.borrow is not None:
        words.append(f"borrow={request.borrow}")
    return " ".join(words)


def format_control_error(code: str, text: str) -> str:
    """An error reply line (no newline; the text on one line)."""
    return f"ERR {code} {' '.join(text.split())}"


def parse_control_reply(line: str) -> tuple[bool, dict[str, str], str]:
    """Split a reply into (ok, fields, rest).

    For ``OK`` the fields are its ``key=value`` words; a ``reason=`` field takes the rest of the
    line. For ``ERR`` the fields are ``{"code": ...}`` and ``rest`` is the text.

    Raises:
        ControlProtocolError: for a line that is neither.
    """
    line = line.rstrip("\r\n")
    if line.startswith("ERR "):
        code, _, text = line[4:].partition(" ")
        return False, {"code": code}, text
    if line != "OK" and not line.startswith("OK "):
        raise ControlProtocolError("bad_request", f"not a control reply: {line[:80]!r}")
    body, _, reason = line[3:].partition("reason=")
    fields = dict(w.partition("=")[::2] for w in body.split())
    if reason:
        fields["reason"] = reason
    return True, fields, ""
