"""The offload gate daemon: a thin asyncio unix-socket server around :class:`GateState`.

Each connection is identified once, when it opens, from the kernel's peer credentials
(``SO_PEERCRED``: the pid of the process that connected) and that process's cgroup; a client
cannot name its job, so it cannot pass for another. The state machine decides everything
else; this module only moves bytes, and returns a connection's grants when it closes (the
kernel closes it when the process dies, however it dies).

Requests of one connection are answered in order. While its ACQUIRE waits, the server
stops answering that connection's lines (they stay buffered, a bounded amount) but still
notices at once when it closes. What one peer may hold (connections, buffers, time) is
bounded by :mod:`coshare.node.sockets`; a connection that holds a grant or waits for one is
never closed for its silence.

An optional :class:`GateObserver` (the daemon's metrics, :mod:`coshare.node.metrics`) is
told of every grant with how long its ACQUIRE waited, and of every ACQUIRE that queues.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from coshare.node.gate.protocol import (
    MAX_LINE,
    ProtocolError,
    Request,
    format_error,
    parse_request,
)
from coshare.node.gate.state import Client, GateState, Reply
from coshare.node.sockets import Limits, LineConnection, LineServer

log = logging.getLogger("coshare.node.gate")

Identify = Callable[[int, int], Client]
"""Who a peer is: ``identify(pid, uid) -> Client`` (its job, devices, declared threads)."""


class GateObserver(Protocol):
    """Told what the gate grants (metrics). Called on the event loop: must not block."""

    def granted(self, device: str, waited_s: float) -> None:
        """Threads of ``device`` were granted, ``waited_s`` after the request (0: at once)."""

    def queued(self, device: str) -> None:
        """An ACQUIRE of ``device`` could not be granted at once and waits."""


class _Connection(LineConnection):
    server: GateServer

    def __init__(self, server: GateServer) -> None:
        super().__init__(server)
        self.conn = 0

    def opened(self, pid: int, uid: int) -> None:
        server = self.server
        self.conn = server.register(self)
        try:
            client = server.identify(pid, uid)
        except Exception:  # identification must never take the daemon down
            log.exception("cannot identify a client; treating it as no job")
            client = Client(job=None)
        log.debug("connection %d: pid %d, uid %d, job %s", self.conn, pid, uid, client.job)
        server.state.connect(self.conn, client)

    def handle_line(self, line: bytes) -> None:
        try:
            request = parse_request(line)
        except ProtocolError as exc:
            self.write(format_error(exc.code, exc.text))
            return
        replies = self.server.state.handle(self.conn, request)
        self.server.observe(self.conn, request, replies)
        self.server.send(replies, origin=self.conn)
        if request.verb == "QUIT":
            self.close()

    def busy(self) -> bool:
        return self.server.state.is_waiting(self.conn)

    def holding(self) -> bool:
        return self.server.state.holds(self.conn)

    def lost(self) -> None:
        if self.conn:
            self.server.unregister(self.conn)
            self.server.send(self.server.state.disconnect(self.conn))


class GateServer(LineServer):
    """Serves :class:`GateState` on a unix socket.

    Args:
        state: the budgets and queues.
        identify: maps a peer's (pid, uid) to its :class:`Client`.
        limits: what one peer may hold (default: the module's defaults).
    """

    def __init__(
        self,
        state: GateState,
        identify: Identify,
        limits: Limits | None = None,
        observer: GateObserver | None = None,
    ) -> None:
        super().__init__("gate", limits or Limits(max_line=MAX_LINE))
        self.state = state
        self.identify = identify
        self.observer = observer
        self._conns: dict[int, _Connection] = {}
        self._next = 1
        #: When each waiting connection's ACQUIRE was queued (the observer's wait times).
        self._queued_at: dict[int, float] = {}

    def connection(self) -> LineConnection:
        return _Connection(self)

    def register(self, connection: _Connection) -> int:
        conn = self._next
        self._next += 1
        self._conns[conn] = connection
        return conn

    def unregister(self, conn: int) -> None:
        self._conns.pop(conn, None)
        self._queued_at.pop(conn, None)

    def observe(self, conn: int, request: Request, replies: list[Reply]) -> None:
        """Tell the observer of a request's immediate grant, or that it queued."""
        if self.observer is None or request.verb not in ("ACQUIRE", "TRY"):
            return
        device = self.state.waiting_on(conn)
        if device is not None:
            self._queued_at[conn] = self.now()
            self.observer.queued(device)
            return
        for reply in replies:
            if reply.conn == conn and reply.line.startswith("OK "):
                self.observer.granted(reply.line.split()[2], 0.0)  # OK <grant> <device> <n>

    def send(self, replies: list[Reply], origin: int | None = None) -> None:
        """Write each reply to its connection; a connection whose wait ended (any but the
        ``origin`` of the request) answers its next lines."""
        resumed = []
        for reply in replies:
            queued_at = self._queued_at.pop(reply.conn, None)
            if queued_at is not None and self.observer is not None and reply.line.startswith("OK "):
                self.observer.granted(reply.line.split()[2], self.now() - queued_at)
            connection = self._conns.get(reply.conn)
            if connection is not None:
                connection.write(reply.line)
                if reply.conn != origin:
                    resumed.append(connection)
        if resumed:
            loop = asyncio.get_running_loop()
            for connection in resumed:
                loop.call_soon(connection.resume)
