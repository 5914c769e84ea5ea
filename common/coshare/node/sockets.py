"""What the node daemon's two sockets share: who a peer is, and how much of the daemon one
peer may hold.

Both sockets (the offload gate's and job control's) are mode 0666: any local process may
connect, and the kernel says who it is (``SO_PEERCRED``). So a connection costs the daemon a
descriptor, buffers and a slot in its state before anything is known of its purpose, and a
peer that opens many, or sends half a line and waits, would hold them for ever: about 1,000
half-sent lines used to exhaust the daemon's descriptors, and every START, JOIN and ACQUIRE
then timed out. :class:`LineServer` bounds that once, for both sockets:

- **connections per uid** (``node.max_connections_per_uid``, each socket on its own): the
  next one is answered ``ERR too_many ...`` and closed, so a flood from one uid leaves every
  other uid served. No uid is exempt, root included: nothing a job needs connects as root
  (Slurm's Prolog makes groups directly), so a runaway root script cannot starve jobs either.
  The daemon raises its descriptor limit to the hard limit when it starts, and each socket
  keeps half of it, less a reserve, as a limit on all its connections together;
- **a request line arrives whole** within ``line_timeout_s`` of its first byte, or the
  connection is answered ``ERR timeout ...`` and closed (a slow sender);
- **replies are read**: at most :data:`WRITE_BUFFER_BYTES` of replies wait in the daemon for
  a peer that does not read them; while they do, its further lines are not answered, and if it
  does not read within ``line_timeout_s`` it is dropped (a slow reader);
- **a connection that holds nothing** (no grant, no waiting request, nothing half-sent) is
  closed without a word after ``idle_timeout_s`` of silence; clients reconnect (the Python
  client does so by itself);
- **lines are at most** ``max_line`` bytes, and at most :data:`BUFFER_LINES` lines are read
  ahead of the one being answered.

A service subclasses :class:`LineConnection` and says what a line does (:meth:`handle_line`),
when the connection answers nothing for now (:meth:`~LineConnection.busy`) and when it holds
something that makes silence legitimate (:meth:`~LineConnection.holding`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from coshare.config import NodeConfig
from coshare.errors import GateError

log = logging.getLogger("coshare.node.sockets")

_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}
#: How many request lines may be read ahead of the one being answered.
BUFFER_LINES = 16
#: Replies that may wait in the daemon for a peer that does not read them.
WRITE_BUFFER_BYTES = 64 * 1024
#: How long a connection hung up on may still send before it is closed.
DRAIN_S = 2.0
#: Descriptors kept back from the connection limits: state files, cgroup files, /proc.
RESERVED_FDS = 128
#: Listen backlog of each socket.
BACKLOG = 128
#: Connections accepted (and refused or admitted) at most per turn of the event loop, so that
#: requests on open connections are answered between the turns of a flood.
ACCEPT_BATCH = 32
#: Refused connections of one uid are logged at most once per this many seconds.
LOG_REFUSALS_EVERY_S = 60.0
#: How long accepting pauses when the daemon is out of descriptors or memory.
ACCEPT_RETRY_S = 0.1


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process that connected to a unix socket (unix(7))."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def prepare_socket_path(path: Path) -> None:
    """Make ``path``'s directory and remove a stale socket there.

    Raises:
        GateError: when a daemon already answers on ``path`` or it is not a socket.
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
    raise GateError("unreachable", f"another daemon already serves {path}")


def error_line(code: str, text: str) -> str:
    """An error reply of both sockets' protocols (no newline; the text on one line)."""
    return f"ERR {code} {' '.join(text.split())}"


def raise_descriptor_limit() -> int:
    """Raise this process's open-file limit to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(frozen=True)
class Limits:
    """What one peer may hold of one socket.

    Attributes:
        max_line: longest request line, newline included.
        per_uid: connections one uid may hold open.
        total: connections all uids together may hold open.
        line_timeout_s: how long a started line may take to arrive whole, and how long a
            peer may leave its replies unread.
        idle_timeout_s: how long a connection that holds nothing may stay silent.
    """

    max_line: int
    per_uid: int = 256
    total: int = 4096
    line_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0

    @classmethod
    def of(cls, config: NodeConfig, max_line: int, idle_timeout_s: float | None = None) -> Limits:
        """The limits the node configuration sets, ``total`` from this process's descriptor
        limit (half of it per socket, less :data:`RESERVED_FDS`; a refused connection is
        closed as soon as it is accepted, so refusals hold none)."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        total = max(1, (soft - RESERVED_FDS) // 2)
        return cls(
            max_line=max_line,
            per_uid=config.max_connections_per_uid,
            total=total,
            line_timeout_s=config.line_timeout_s,
            idle_timeout_s=config.idle_timeout_s if idle_timeout_s is None else idle_timeout_s,
        )

    @property
    def buffer_limit(self) -> int:
        """Bytes that may be read ahead of the line being answered."""
        return BUFFER_LINES * self.max_line

    @property
    def tick_s(self) -> float:
        """How often deadlines are checked."""
        return min(1.0, max(0.01, min(self.line_timeout_s, self.idle_timeout_s) / 4))


class LineConnection(asyncio.Protocol):
    """One admitted connection of a :class:`LineServer`: line splitting, bounds, deadlines.

    Subclasses implement :meth:`handle_line` and may override :meth:`opened`,
    :meth:`busy`, :meth:`holding` and :meth:`lost`. The server admitted the peer (its
    ``pid`` and ``uid``) before the connection is made.
    """

    def __init__(self, server: LineServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.pid = -1
        self.uid: int | None = None  # set once admitted
        self.buffer = bytearray()
        self.closing = False
        self.draining = False
        self.drained = 0
        self.write_paused_at: float | None = None
        self.partial_at: float | None = None
        self.active_at = 0.0
        self._lost = False

    # -- what a service says ------------------------------------------------------------------

    def opened(self, pid: int, uid: int) -> None:
        """The connection was admitted; ``pid`` and ``uid`` are the kernel's."""

    def handle_line(self, line: bytes) -> None:
        """Answer one request line (newline included)."""
        raise NotImplementedError

    def busy(self) -> bool:
        """Whether the connection waits for the daemon (no lines are answered meanwhile, and
        no deadline runs)."""
        return False

    def holding(self) -> bool:
        """Whether the connection holds something that makes its silence legitimate (a grant)."""
        return False

    def lost(self) -> None:
        """The connection is closing or closed: give back what it holds (called once)."""

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        self.active_at = self.server.clock
        if self.uid is None:  # the server closed meanwhile
            self.abort()
            return
        try:
            self.opened(self.pid, self.uid)
        except Exception:  # one peer must never take the daemon down
            log.exception("%s: cannot set up a connection of pid %d", self.server.name, self.pid)
            self.abort()
            return

    def data_received(self, data: bytes) -> None:
        if self.draining:
            self.drained += len(data)
            if self.drained > self.limits.buffer_limit:
                self.abort()
            return
        if self.closing:
            return
        self.buffer += data
        self.process()

    def pause_writing(self) -> None:
        self.write_paused_at = self.server.now()

    def resume_writing(self) -> None:
        self.write_paused_at = None
        self.process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._lose()
        if self.uid is not None:  # counted until its descriptor is closed, draining included
            self.server.release(self.uid)
            self.uid = None
        self.server.forget(self)

    # -- lines --------------------------------------------------------------------------------

    def process(self) -> None:
        """Answer the buffered lines while the connection is not busy and its replies are read."""
        limits = self.limits
        # The gate's hot path: the sweep's clock (its tick is the deadlines' precision anyway)
        # rather than a clock read per line.
        now = self.server.clock
        consumed = False
        blocked = self.closing or self.write_paused_at is not None or self.busy()
        while not blocked:
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) >= limits.max_line:
                    self.fail("too_long", f"request lines are at most {limits.max_line} bytes")
                    return
                break
            if end + 1 > limits.max_line:
                self.fail("too_long", f"request lines are at most {limits.max_line} bytes")
                return
            line = bytes(self.buffer[: end + 1])
            del self.buffer[: end + 1]
            consumed = True
            self.active_at = now
            try:
                self.handle_line(line)
            except Exception:  # one peer must never take the daemon down
                log.exception("%s: request of pid %d failed", self.server.name, self.pid)
                self.fail("internal", "the request failed; see the daemon's log")
                return
            # (busy() only matters when another line waits: one call fewer per request.)
            blocked = (
                self.closing
                or self.write_paused_at is not None
                or (bool(self.buffer) and self.busy())
            )
        if self.closing:
            return
        if len(self.buffer) > limits.buffer_limit:
            # Read ahead too far while busy or unread: it cannot be a client of the protocol.
            self.fail("too_long", f"at most {BUFFER_LINES} request lines may be sent ahead")
            return
        if not self.buffer:
            self.partial_at = None
        elif consumed or self.partial_at is None:
            self.partial_at = now

    def resume(self) -> None:
        """The daemon finished what the connection waited for: answer its next lines."""
        self.active_at = self.server.clock
        self.process()

    def deadline(self) -> float | None:
        """When the sweep closes the connection, for its state now (see the module's
        bounds); ``None``: not by itself. Worked out by the sweep, not on every line."""
        limits = self.limits
        if self.transport is None or self.closing or self.busy():
            return None  # not made yet (its transport is on its way), or closing
        if self.write_paused_at is not None:
            return self.write_paused_at + limits.line_timeout_s
        if self.partial_at is not None:
            return self.partial_at + limits.line_timeout_s
        if self.holding():
            return None
        return self.active_at + limits.idle_timeout_s

    def expire(self) -> None:
        """The deadline passed: close the connection, saying why when the peer is mid-request."""
        if self.write_paused_at is not None:
            log.info(
                "%s: pid %d (uid %s) did not read its replies for %g s; dropped",
                self.server.name,
                self.pid,
                self.uid,
                self.limits.line_timeout_s,
            )
            self.abort()
        elif self.partial_at is not None:
            log.info(
                "%s: pid %d (uid %s) sent part of a line and stopped; dropped",
                self.server.name,
                self.pid,
                self.uid,
            )
            self.fail(
                "timeout",
                f"a request line must arrive whole within {self.limits.line_timeout_s:g} s",
            )
        else:
            # Silent: an unasked line would be read as the reply to the client's next request.
            self.close()

    # -- replies and closing ------------------------------------------------------------------

    def write(self, line: str) -> None:
        """Send one reply line (nothing once the connection is closing or broken)."""
        if self.transport is not None and not self.closing and not self.transport.is_closing():
            self.transport.write(line.encode("ascii", errors="replace") + b"\n")

    def fail(self, code: str, text: str) -> None:
        """Answer ``ERR <code> <text>`` and hang up.

        Closing a unix socket that still holds unread input resets it, and the client would
        lose the error line; so the sending side is shut (the client reads the error, then
        end of file), what still arrives is discarded, and the socket closed soon after.
        """
        self.write(error_line(code, text))
        self.closing = True
        self.buffer.clear()
        self._lose()  # what it holds comes back now, not when the client closes
        transport = self.transport
        if transport is None or not transport.can_write_eof():
            self.abort()
            return
        transport.write_eof()
        self.draining = True
        asyncio.get_running_loop().call_later(DRAIN_S, transport.close)

    def close(self) -> None:
        """Close the connection (replies already written are sent first)."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent replies."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def _lose(self) -> None:
        if self.uid is not None and not self._lost:
            self._lost = True
            self.lost()


class LineServer:
    """A unix-socket server of :class:`LineConnection` s under :class:`Limits`.

    Args:
        name: the service, for logs (``gate``, ``control``).
        limits: what one peer may hold.
    """

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits
        self._per_uid: dict[int, int] = {}
        self._refused: dict[int, tuple[int, float]] = {}
        self._open = 0
        self._connections: set[LineConnection] = set()
        self._listener: socket.socket | None = None
        #: The event loop's clock at the last sweep (or start): coarse, cheap to read.
        self.clock = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def connection(self) -> LineConnection:
        """A new connection object (the service's subclass)."""
        raise NotImplementedError

    @staticmethod
    def now() -> float:
        """The event loop's clock."""
        return asyncio.get_running_loop().time()

    def admit(self, uid: int) -> str | None:
        """Count a new connection of ``uid``; the refusal text when it holds too many."""
        held = self._per_uid.get(uid, 0)
        if held >= self.limits.per_uid:
            self._log_refusal(uid, f"uid {uid} holds {held} connections")
            return (
                f"uid {uid} holds {held} connections to this socket, the most one uid may "
                "(node.max_connections_per_uid)"
            )
        if self._open >= self.limits.total:
            self._log_refusal(uid, f"{self._open} connections are open")
            return f"this socket serves {self._open} connections, the most it may"
        self._per_uid[uid] = held + 1
        self._open += 1
        return None

    def _log_refusal(self, uid: int, why: str) -> None:
        """Log refused connections, once per uid per :data:`LOG_REFUSALS_EVERY_S` (a flood
        must not flood the log too)."""
        now = self.now()
        count, logged_at = self._refused.get(uid, (0, -LOG_REFUSALS_EVERY_S))
        count += 1
        if now - logged_at >= LOG_REFUSALS_EVERY_S:
            log.warning(
                "%s: %s; refused %d connection(s) of uid %d since the last such line",
                self.name,
                why,
                count,
                uid,
            )
            count, logged_at = 0, now
        self._refused[uid] = (count, logged_at)

    def release(self, uid: int) -> None:
        """A connection of ``uid`` closes."""
        held = self._per_uid.get(uid, 0) - 1
        if held > 0:
            self._per_uid[uid] = held
        else:
            self._per_uid.pop(uid, None)
        self._open -= 1

    def forget(self, connection: LineConnection) -> None:
        """A connection is closed."""
        self._connections.discard(connection)

    def held_by(self, uid: int) -> int:
        """Connections ``uid`` holds open."""
        return self._per_uid.get(uid, 0)

    async def start(self, path: Path, backlog: int = BACKLOG) -> None:
        """Listen on ``path`` (a stale socket file there is replaced; mode 0666: any local
        process may connect, the kernel tells who it is).

        Raises:
            GateError: when another daemon answers on ``path``, or it cannot be bound.
        """
        prepare_socket_path(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(backlog)
        except OSError as exc:
            listener.close()
            raise GateError("unreachable", f"cannot listen on {path}: {exc.strerror}") from exc
        listener.setblocking(False)
        path.chmod(0o666)
        self._listener = listener
        self.clock = self.now()
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept)
        self._sweeper = asyncio.create_task(self._sweep())

    def _accept(self) -> None:
        """Accept what waits (:data:`ACCEPT_BATCH` at a time) and refuse what is over the
        limits right here, before any transport or state is made for it: a flood that
        reconnects as fast as it is refused costs the daemon little more than it costs the
        flooder, and the backlog, which every uid shares, drains."""
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors or memory: retry a little later
                log.error("%s: cannot accept connections: %s", self.name, exc)
                loop.remove_reader(self._listener.fileno())
                loop.call_later(ACCEPT_RETRY_S, self._resume_accepting)
                return
            try:
                pid, uid, _ = peer_credentials(sock)
            except OSError:  # gone already
                sock.close()
                continue
            refusal = self.admit(uid)
            if refusal is not None:
                with contextlib.suppress(OSError):
                    sock.send(error_line("too_many", refusal).encode() + b"\n", socket.MSG_DONTWAIT)
                sock.close()
                continue
            sock.setblocking(False)
            connection = self.connection()
            connection.pid, connection.uid = pid, uid
            connection.active_at = self.clock
            self._connections.add(connection)
            task = loop.create_task(self._serve(connection, sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, connection: LineConnection, sock: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: connection, sock)
        except OSError as exc:
            log.debug("%s: connection of pid %d lost at once: %s", self.name, connection.pid, exc)
            sock.close()
            connection.connection_lost(exc)

    def _resume_accepting(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)

    async def _sweep(self) -> None:
        """Close connections whose deadline passed, every ``limits.tick_s``."""
        while True:
            await asyncio.sleep(self.limits.tick_s)
            now = self.clock = self.now()
            for connection in list(self._connections):
                deadline = connection.deadline()
                if deadline is not None and deadline <= now:
                    connection.expire()

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for task in list(self._tasks):
            task.cancel()
        for connection in list(self._connections):
            connection.abort()
        await asyncio.sleep(0)  # let the transports close
