"""The control socket: a thin asyncio unix-socket server around :class:`JobControl`.

Each connection is identified once, when it opens, by the kernel (``SO_PEERCRED``: pid and
uid; and the pid's start time, so that a reused pid is not taken for it). Its requests are
answered in order, each in a worker thread (making or killing a group may take a while, the
offload gate on the same event loop must not wait for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from coshare.errors import GateError
from coshare.node.control.protocol import MAX_LINE, format_control_error
from coshare.node.control.service import JobControl
from coshare.node.gate.server import peer_credentials, prepare_socket_path
from coshare.node.procfs import read_process

log = logging.getLogger("coshare.node.control")


class ControlServer:
    """Serves :class:`JobControl` on a unix socket.

    Args:
        control: answers the requests.
    """

    def __init__(self, control: JobControl) -> None:
        self.control = control
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, path: Path) -> None:
        """Listen on ``path`` (mode 0666: any local process may ask, the kernel says who).

        Raises:
            GateError: when another daemon answers there, or it cannot be bound.
        """
        prepare_socket_path(path)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(path), limit=MAX_LINE, backlog=256
            )
        except OSError as exc:
            raise GateError("unreachable", f"cannot listen on {path}: {exc.strerror}") from exc
        path.chmod(0o666)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            pid, uid, _ = peer_credentials(writer.get_extra_info("socket"))
            info = read_process(pid)
            start = info.start_ticks if info is not None else None
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError:
                    return  # the client closed
                except asyncio.LimitOverrunError:
                    writer.write(
                        format_control_error(
                            "too_long", f"request lines are at most {MAX_LINE} bytes"
                        ).encode()
                        + b"\n"
                    )
                    await writer.drain()
                    return
                reply = await asyncio.to_thread(self.control.handle, line, pid, uid, start)
                writer.write(reply.encode("ascii", errors="replace") + b"\n")
                await writer.drain()
        except (ConnectionError, OSError) as exc:
            log.debug("control connection lost: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await self._server.wait_closed()
