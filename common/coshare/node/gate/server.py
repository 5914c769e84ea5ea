"""The offload gate daemon: a thin asyncio unix-socket server around :class:`GateState`.

Each connection is identified once, when it opens, from the kernel's peer credentials
(``SO_PEERCRED``: the pid of the process that connected) and that process's cgroup; a client
cannot name its job, so it cannot pass for another. The state machine decides everything
else; this module only moves bytes, and returns a connection's grants when it closes (the
kernel closes it when the process dies, however it dies).

Requests of one connection are answered in order. While its ACQUIRE waits, the server
stops reading that connection's lines (they stay buffered, at most :data:`BUFFER_LIMIT`
bytes) but still notices at once when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path

from coshare.errors import GateError
from coshare.node.gate.protocol import MAX_LINE, ProtocolError, format_error, parse_request
from coshare.node.gate.state import Client, GateState, Reply

log = logging.getLogger("coshare.node.gate")

#: Bytes a waiting connection may send ahead before the gate drops it.
BUFFER_LIMIT = 16 * MAX_LINE
#: How long a connection hung up on for a too-long line may still send before it is closed.
DRAIN_S = 2.0
_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}

Identify = Callable[[int, int], Client]
"""Who a peer is: ``identify(pid, uid) -> Client`` (its job, devices, declared threads)."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process that connected to a unix socket (unix(7))."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


class _Connection(asyncio.Protocol):
    def __init__(self, server: GateServer) -> None:
        self.server = server
        self.conn = 0
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closing = False
        self.draining = False
        self.drained = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn = self.server.register(self)
        sock = transport.get_extra_info("socket")
        try:
            pid, uid, _ = peer_credentials(sock)
            client = self.server.identify(pid, uid)
        except Exception:  # identification must never take the daemon down
            log.exception("cannot identify a client; treating it as no job")
            pid, client = -1, Client(job=None)
        log.debug("connection %d: pid %d, job %s", self.conn, pid, client.job)
        self.server.state.connect(self.conn, client)

    def data_received(self, data: bytes) -> None:
        if self.draining:
            self.drained += len(data)
            if self.drained > BUFFER_LIMIT and self.transport is not None:
                self.transport.close()
            return
        self.buffer += data
        self.process()

    def process(self) -> None:
        """Answer the buffered lines, up to a waiting ACQUIRE."""
        state = self.server.state
        while not self.closing and not state.is_waiting(self.conn):
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) >= MAX_LINE:
                    self.fail_too_long()
                return
            if end + 1 > MAX_LINE:
                self.fail_too_long()
                return
            line = bytes(self.buffer[: end + 1])
            del self.buffer[: end + 1]
            try:
                request = parse_request(line)
            except ProtocolError as exc:
                self.write(format_error(exc.code, exc.text))
                continue
            self.server.send(state.handle(self.conn, request))
            if request.verb == "QUIT":
                self.close()
                return
        if len(self.buffer) > BUFFER_LIMIT:
            self.fail_too_long()

    def fail_too_long(self) -> None:
        """Answer ``too_long`` and hang up.

        Closing a unix socket that still holds unread input resets it, and the client would
        lose the error line; so the gate shuts its sending side (the client reads the error,
        then end of file), discards what still arrives, and closes soon after.
        """
        self.write(format_error("too_long", f"request lines are at most {MAX_LINE} bytes"))
        self.closing = True
        self.buffer.clear()
        self.server.send(self.server.state.disconnect(self.conn))  # its grants come back now
        transport = self.transport
        if transport is None or not transport.can_write_eof():
            self.close()
            return
        transport.write_eof()
        self.draining = True
        asyncio.get_running_loop().call_later(DRAIN_S, transport.close)

    def write(self, line: str) -> None:
        if self.transport is not None and not self.closing:
            self.transport.write(line.encode() + b"\n")

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.unregister(self.conn)
        self.server.send(self.server.state.disconnect(self.conn))


class GateServer:
    """Serves :class:`GateState` on a unix socket.

    Args:
        state: the budgets and queues.
        identify: maps a peer's (pid, uid) to its :class:`Client`.
    """

    def __init__(self, state: GateState, identify: Identify) -> None:
        self.state = state
        self.identify = identify
        self._conns: dict[int, _Connection] = {}
        self._next = 1
        self._server: asyncio.AbstractServer | None = None

    def register(self, connection: _Connection) -> int:
        conn = self._next
        self._next += 1
        self._conns[conn] = connection
        return conn

    def unregister(self, conn: int) -> None:
        self._conns.pop(conn, None)

    def send(self, replies: list[Reply]) -> None:
        """Write each reply to its connection; a connection that was granted resumes."""
        resumed = []
        for reply in replies:
            connection = self._conns.get(reply.conn)
            if connection is not None:
                connection.write(reply.line)
                if connection.buffer:
                    resumed.append(connection)
        for connection in resumed:
            asyncio.get_running_loop().call_soon(connection.process)

    async def start(self, path: Path) -> None:
        """Listen on ``path`` (a stale socket file there is replaced; mode 0666: any local
        process may connect, the kernel tells who it is).

        Raises:
            GateError: when another gate answers on ``path``, or it cannot be bound.
        """
        loop = asyncio.get_running_loop()
        prepare_socket_path(path)
        try:
            self._server = await loop.create_unix_server(
                lambda: _Connection(self), path=str(path), backlog=1024
            )
        except OSError as exc:
            raise GateError("unreachable", f"cannot listen on {path}: {exc.strerror}") from exc
        path.chmod(0o666)

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
            for connection in list(self._conns.values()):
                connection.close()
            await self._server.wait_closed()


def prepare_socket_path(path: Path) -> None:
    """Make ``path``'s directory and remove a stale socket there.

    Raises:
        GateError: when a gate already answers on ``path`` or it is not a socket.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise GateError("unreachable", f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    finally:
        probe.close()
    raise GateError("unreachable", f"another gate already serves {path}")
