"""The offload gate's line protocol: small enough to speak from C or Fortran.

A client connects to the gate's unix stream socket (``/run/coshare/gate.sock``) and sends
one request per line; the gate answers every request with exactly one line, in order.
Lines are ASCII, at most :data:`MAX_LINE` bytes with the newline, fields separated by
spaces; a trailing ``\\r`` is ignored. The gate knows who the client is from the kernel
(``SO_PEERCRED`` -> pid -> cgroup -> job), so requests carry no identity.

Requests::

    HELLO                          -> OK job=<id> devices=<d1,d2> threads=<declared>
    ACQUIRE [<device>] <threads>   -> OK <grant> <device> <threads>   (waits until granted)
    TRY [<device>] <threads>       -> OK <grant> <device> <threads> | ERR busy ...
    RELEASE <grant>                -> OK
    STATUS                         -> OK <device>:free=<n>,total=<n>,queued=<n> ...
    QUIT                           -> OK, then the gate closes the connection

``<device>`` may be left out when the job has exactly one device. ``ACQUIRE`` waits in a
first-come first-served queue per device: a request that does not fit holds back the
requests behind it, so large requests are never starved. While it waits, the gate reads
nothing more from that connection; closing the connection withdraws it. Every grant of a
connection is returned when the connection closes, which the kernel does when the process
dies, however it dies.

Errors are ``ERR <code> <text>``; codes: ``bad_request`` (not a request of this protocol),
``too_long``, ``not_a_job`` (the client is in no job's cgroup), ``not_declared`` (its job
declared no device threads), ``no_device`` (the job has several devices and named none),
``not_your_device`` (not one of the job's devices), ``unknown_device`` (the gate does not
manage it), ``over_declared`` (more than the job declared), ``over_device`` (more than the
device has), ``would_deadlock`` (the connection already holds so much of its job's
declaration that the request could never be granted), ``unknown_grant``, ``busy`` (TRY
only), and for the connection itself ``too_many`` (its uid holds
``node.max_connections_per_uid`` connections already), ``timeout`` (a line begun was not
finished within ``node.line_timeout_s``) and ``internal``. After ``too_long``, ``too_many``,
``timeout`` and ``internal`` the gate closes the connection; after any other error the
connection stays usable. A connection that holds no grant and waits for none is closed
without a reply after ``node.idle_timeout_s`` of silence (the Python client reconnects).

This module is pure: parsing and formatting only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from coshare.errors import ReplyError

#: Longest request line, newline included.
MAX_LINE = 256
#: Largest thread count or grant id a request may carry.
MAX_NUMBER = 2**31 - 1

Verb = Literal["HELLO", "ACQUIRE", "TRY", "RELEASE", "STATUS", "QUIT"]
ErrorCode = Literal[
    "bad_request",
    "too_long",
    "not_a_job",
    "not_declared",
    "no_device",
    "not_your_device",
    "unknown_device",
    "over_declared",
    "over_device",
    "would_deadlock",
    "unknown_grant",
    "busy",
    "too_many",
    "timeout",
    "internal",
]

_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_NUMBER = re.compile(r"[0-9]{1,10}")
#: The well-formed ACQUIRE / TRY / RELEASE lines, matched in one go (the gate's hot path);
#: anything else takes the slow path that explains what is wrong.
_FAST = re.compile(
    rb"(ACQUIRE|TRY) (?:([A-Za-z0-9][A-Za-z0-9._:-]{0,63}) )?([1-9][0-9]{0,8})\r?\n?"
    rb"|RELEASE ([1-9][0-9]{0,8})\r?\n?"
)


@dataclass(frozen=True)
class Request:
    """One parsed request line.

    Attributes:
        verb: the request.
        device: the device named (ACQUIRE/TRY), ``None`` when left out.
        threads: threads asked for (ACQUIRE/TRY).
        grant: the grant to give back (RELEASE).
    """

    verb: Verb
    device: str | None = None
    threads: int | None = None
    grant: int | None = None


class ProtocolError(ReplyError):
    """A line that is not a request; becomes ``ERR <code> <text>``."""

    code: ErrorCode

    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(code, text)


def _number(token: str, what: str) -> int:
    if not _NUMBER.fullmatch(token) or not 1 <= int(token) <= MAX_NUMBER:
        raise ProtocolError("bad_request", f"{what} must be an integer in 1..{MAX_NUMBER}")
    return int(token)


def parse_request(line: bytes) -> Request:
    """Parse one request line (without or with its newline).

    Raises:
        ProtocolError: for anything that is not a request, with the code to answer.
    """
    if len(line) > MAX_LINE:
        raise ProtocolError("too_long", f"request lines are at most {MAX_LINE} bytes")
    fast = _FAST.fullmatch(line)
    if fast is not None:
        verb, device, threads, grant = fast.groups()
        if grant is not None:
            return Request("RELEASE", grant=int(grant))
        return Request(
            "ACQUIRE" if verb == b"ACQUIRE" else "TRY",
            device=device.decode() if device is not None else None,
            threads=int(threads),
        )
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("bad_request", "requests are ASCII") from None
    if not text.isprintable():
        raise ProtocolError("bad_request", "requests hold no control characters")
    words = text.split()
    if not words:
        raise ProtocolError("bad_request", "empty request")
    verb, args = words[0].upper(), words[1:]
    if verb in ("HELLO", "STATUS", "QUIT"):
        if args:
            raise ProtocolError("bad_request", f"{verb} takes no arguments")
        return Request(verb)  # type: ignore[arg-type]
    if verb in ("ACQUIRE", "TRY"):
        if len(args) not in (1, 2):
            raise ProtocolError("bad_request", f"usage: {verb} [<device>] <threads>")
        device = args[0] if len(args) == 2 else None
        if device is not None and not _DEVICE.fullmatch(device):
            raise ProtocolError("bad_request", "device ids are letters, digits and . _ : -")
        return Request(verb, device=device, threads=_number(args[-1], "threads"))  # type: ignore[arg-type]
    if verb == "RELEASE":
        if len(args) != 1:
            raise ProtocolError("bad_request", "usage: RELEASE <grant>")
        return Request("RELEASE", grant=_number(args[0], "grant"))
    raise ProtocolError(
        "bad_request", "unknown request (known: HELLO, ACQUIRE, TRY, RELEASE, STATUS, QUIT)"
    )


def format_error(code: ErrorCode, text: str) -> str:
    """An error reply line (without the newline)."""
    return f"ERR {code} {text}"


def parse_reply(line: str) -> tuple[bool, list[str]]:
    """Split a reply line into (ok, fields); for an error the fields are [code, text].

    Raises:
        ProtocolError: for a line that is neither ``OK ...`` nor ``ERR ...``.
    """
    line = line.rstrip("\r\n")
    if line == "OK" or line.startswith("OK "):
        return True, line.split()[1:]
    if line.startswith("ERR "):
        code, _, text = line[4:].partition(" ")
        return False, [code, text]
    raise ProtocolError("bad_request", f"not a gate reply: {line[:80]!r}")
