"""The control socket: a thin asyncio unix-socket server around :class:`JobControl`.

Each connection is identified once, when it opens, by the kernel (``SO_PEERCRED``: pid and
uid; and the pid's start time, so that a reused pid is not taken for it). Its requests are
answered in order, one at a time, in a worker thread (making or killing a group may take a
while, and the offload gate on the same event loop must not wait for it).

Requests wait in one queue per uid, and the worker takes them round-robin across uids: a uid
that sends many requests at once delays its own, not other users' (a START of another user
waits for at most one request of each other uid). What one peer may hold (connections,
buffers, time) is bounded by :mod:`coshare.node.sockets`; a control connection must send its
request within ``node.line_timeout_s`` of connecting or of its last reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from pathlib import Path

from coshare.node.control.protocol import MAX_LINE, format_control_error
from coshare.node.control.service import JobControl
from coshare.node.procfs import read_process
from coshare.node.sockets import BACKLOG, Limits, LineConnection, LineServer

log = logging.getLogger("coshare.node.control")


class _Connection(LineConnection):
    server: ControlServer

    def __init__(self, server: ControlServer) -> None:
        super().__init__(server)
        self.peer_uid = -1
        self.start: int | None = None
        self.waiting = False

    def opened(self, pid: int, uid: int) -> None:
        self.peer_uid = uid
        info = read_process(pid)
        self.start = info.start_ticks if info is not None else None

    def handle_line(self, line: bytes) -> None:
        self.waiting = True
        self.server.submit(self, line)

    def busy(self) -> bool:
        return self.waiting

    def answer(self, reply: str) -> None:
        self.waiting = False
        self.write(reply)
        self.resume()


class ControlServer(LineServer):
    """Serves :class:`JobControl` on a unix socket.

    Args:
        control: answers the requests.
        limits: what one peer may hold (default: the module's defaults).
    """

    def __init__(self, control: JobControl, limits: Limits | None = None) -> None:
        super().__init__("control", limits or Limits(max_line=MAX_LINE))
        self.control = control
        #: Requests waiting, per uid; the dict's order is the round-robin order.
        self._queues: dict[int, deque[tuple[_Connection, bytes]]] = {}
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None

    def connection(self) -> LineConnection:
        return _Connection(self)

    def submit(self, connection: _Connection, line: bytes) -> None:
        """Queue one request of a connection (which then waits for its answer)."""
        self._queues.setdefault(connection.peer_uid, deque()).append((connection, line))
        if self._wake is not None:
            self._wake.set()

    async def start(self, path: Path, backlog: int = BACKLOG) -> None:
        """Listen on ``path`` and start the worker (see :meth:`LineServer.start`)."""
        self._wake = asyncio.Event()
        await super().start(path, backlog)
        self._worker = asyncio.create_task(self._work())

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            while self._queues:
                uid = next(iter(self._queues))
                queue = self._queues.pop(uid)
                connection, line = queue.popleft()
                if queue:
                    self._queues[uid] = queue  # the rest of this uid's requests: next round
                if connection.closing:
                    continue
                try:
                    reply = await asyncio.to_thread(
                        self.control.handle,
                        line,
                        connection.pid,
                        connection.peer_uid,
                        connection.start,
                    )
                except Exception as exc:  # handle() never raises; a thread pool might
                    log.exception("control request of pid %d failed", connection.pid)
                    reply = format_control_error("internal", str(exc))
                connection.answer(reply)
            self._wake.clear()

    async def close(self) -> None:
        """Stop the worker, stop listening and drop every connection."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        await super().close()
