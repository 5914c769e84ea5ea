"""Python client of the offload gate: ask for device threads before an offload.

::

    from coshare.node.gate.client import offload

    with offload(120):            # the job's only device; waits while it would oversubscribe
        run_kernel()              # threads come back when the block ends, however it ends

The socket is ``$COSHARE_GATE_SOCKET`` (``job-exec`` sets it), else
``/run/coshare/gate.sock``. A process keeps one connection; a forked child opens its own. The
gate closes a connection that stays silent while it holds nothing (``node.idle_timeout_s``);
the next request then reconnects by itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coshare.errors import GateError
from coshare.node.gate.protocol import MAX_LINE, ProtocolError, parse_reply

DEFAULT_SOCKET = "/run/coshare/gate.sock"
SOCKET_ENV = "COSHARE_GATE_SOCKET"


def default_socket() -> Path:
    """``$COSHARE_GATE_SOCKET``, else ``/run/coshare/gate.sock``."""
    return Path(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


@dataclass(frozen=True)
class Hello:
    """What the gate knows of the caller's job."""

    job: str
    devices: tuple[str, ...]
    threads: int


@dataclass(frozen=True)
class Grant:
    """Threads granted on a device; give them back with :meth:`GateClient.release`."""

    grant: int
    device: str
    threads: int


class _Closed(Exception):
    """The gate closed the connection before it replied."""


class GateClient:
    """One connection to the gate (blocking).

    Args:
        path: the gate's socket (default: :func:`default_socket`).
        timeout_s: how long one reply may take; ``None`` waits as long as an ACQUIRE must.
    """

    def __init__(self, path: Path | str | None = None, timeout_s: float | None = None) -> None:
        self.path = Path(path) if path is not None else default_socket()
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._held: set[int] = set()

    def __enter__(self) -> GateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Connect now (otherwise the first request does).

        Raises:
            GateError: ``unreachable`` when no gate listens on the socket.
        """
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout_s is not None:
                # A blocking connect waits in the kernel for room in a full listen backlog,
                # bounded by the send timeout (unix(7)); a timed socket would fail at once.
                seconds = int(self.timeout_s)
                sock.setsockopt(
                    socket.SOL_SOCKET,
                    socket.SO_SNDTIMEO,
                    struct.pack("ll", seconds, int((self.timeout_s - seconds) * 1e6)),
                )
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise GateError("unreachable", f"no gate at {self.path}: {exc.strerror}") from exc
        sock.settimeout(self.timeout_s)
        self._sock = sock

    def close(self) -> None:
        """Close the connection; the gate returns every grant it still holds."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buffer = b""
            self._held.clear()

    def request(self, line: str) -> list[str]:
        """Send one request line and return the fields of its ``OK`` reply.

        A connection that holds no grant may have been closed by the gate for its silence
        (``node.idle_timeout_s``; the gate then read nothing of the request): the request is
        sent once more on a new connection.

        Raises:
            GateError: the gate's error code and text, or ``unreachable``.
        """
        idle = self._sock is not None and not self._held
        try:
            return self._request(line)
        except _Closed as exc:
            self.close()
            if not idle:
                raise GateError("unreachable", str(exc)) from None
        try:
            return self._request(line)
        except _Closed as exc:
            self.close()
            raise GateError("unreachable", str(exc)) from None

    def _request(self, line: str) -> list[str]:
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(line.encode("ascii") + b"\n")
            while b"\n" not in self._buffer:
                chunk = self._sock.recv(4096)
                if not chunk:
                    raise _Closed(f"the gate at {self.path} closed the connection")
                self._buffer += chunk
                if len(self._buffer) > 64 * MAX_LINE:
                    raise GateError("bad_reply", "reply line too long")
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Closed(f"the gate at {self.path} closed the connection: {exc}") from exc
        except OSError as exc:
            self.close()
            raise GateError("unreachable", f"gate at {self.path}: {exc}") from exc
        except GateError:
            self.close()
            raise
        reply, _, self._buffer = self._buffer.partition(b"\n")
        try:
            ok, fields = parse_reply(reply.decode("ascii", errors="replace"))
        except ProtocolError as exc:
            raise GateError("bad_reply", str(exc)) from exc
        if not ok:
            raise GateError(fields[0], fields[1])
        return fields

    def hello(self) -> Hello:
        """Who the gate says the caller is: its job, devices and declared threads."""
        fields = dict(f.partition("=")[::2] for f in self.request("HELLO"))
        devices = tuple(d for d in fields.get("devices", "").split(",") if d and d != "-")
        return Hello(fields.get("job", ""), devices, int(fields.get("threads", "0")))

    def acquire(self, threads: int | None = None, device: str | None = None) -> Grant:
        """Wait for ``threads`` (default: all the job declared) on ``device`` (default: the
        job's only device).

        Raises:
            GateError: e.g. ``over_declared``, ``not_your_device``, ``not_a_job``.
        """
        return self._grant("ACQUIRE", threads, device)

    def try_acquire(self, threads: int | None = None, device: str | None = None) -> Grant | None:
        """Like :meth:`acquire` but never waits: ``None`` when the threads are not free now."""
        try:
            return self._grant("TRY", threads, device)
        except GateError as exc:
            if exc.code == "busy":
                return None
            raise

    def _grant(self, verb: str, threads: int | None, device: str | None) -> Grant:
        if threads is None:
            threads = self.hello().threads
        words = [verb, *([device] if device is not None else []), str(threads)]
        fields = self.request(" ".join(words))
        grant = Grant(int(fields[0]), fields[1], int(fields[2]))
        self._held.add(grant.grant)
        return grant

    def release(self, grant: Grant) -> None:
        """Give threads back."""
        self.request(f"RELEASE {grant.grant}")
        self._held.discard(grant.grant)

    def status(self) -> dict[str, dict[str, int]]:
        """Per device: ``free``, ``total``, ``queued``."""
        out: dict[str, dict[str, int]] = {}
        for field in self.request("STATUS"):
            device, _, rest = field.partition(":")
            out[device] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split(","))}
        return out

    @contextlib.contextmanager
    def offload(self, threads: int | None = None, device: str | None = None) -> Iterator[Grant]:
        """Hold threads for the duration of a ``with`` block."""
        grant = self.acquire(threads, device)
        try:
            yield grant
        finally:
            with contextlib.suppress(GateError):  # a lost connection returned them already
                self.release(grant)


_process_client: tuple[int, GateClient] | None = None


def process_client() -> GateClient:
    """This process's shared connection (a new one after ``fork``)."""
    global _process_client
    if _process_client is None or _process_client[0] != os.getpid():
        _process_client = (os.getpid(), GateClient())
    return _process_client[1]


@contextlib.contextmanager
def offload(
    threads: int | None = None, device: str | None = None, path: Path | str | None = None
) -> Iterator[Grant]:
    """Hold ``threads`` device threads (default: the job's declaration) for a ``with`` block.

    Args:
        threads: threads of this offload.
        device: the device (default: the job's only device).
        path: the gate's socket (default: ``$COSHARE_GATE_SOCKET`` or /run/coshare/gate.sock).

    Raises:
        GateError: when the gate refuses (code and reason) or cannot be reached.
    """
    client = process_client() if path is None else GateClient(path)
    try:
        with client.offload(threads, device) as grant:
            yield grant
    finally:
        if path is not None:
            client.close()
