"""What one peer may hold of the node daemon's sockets (coshare.node.sockets), with real unix
sockets against a gate server in this process: connections per uid, half-sent lines, idle
and slow-reading connections, read-ahead. No root needed: every connection here is one uid
(this process's); tests/node/test_flood_real.py floods from one uid and serves another."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from coshare.node.control.server import ControlServer
from coshare.node.gate.client import GateClient
from coshare.node.gate.server import GateServer
from coshare.node.gate.state import Client, GateState
from coshare.node.sockets import Limits

LIMITS = Limits(max_line=256, per_uid=4, total=64, line_timeout_s=0.3, idle_timeout_s=0.6)


@dataclass
class Running:
    path: Path
    server: GateServer
    loop: asyncio.AbstractEventLoop

    def call(self, func: object) -> object:
        """Run ``func()`` on the server's loop and return its result."""
        assert callable(func)
        done: list[object] = []
        event = threading.Event()

        def run() -> None:
            done.append(func())
            event.set()

        self.loop.call_soon_threadsafe(run)
        assert event.wait(5)
        return done[0]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Running]:
    """A gate on one device of 8 threads; every peer is job "j" that declared 4 threads."""
    path = tmp_path / "gate.sock"
    loop = asyncio.new_event_loop()
    server = GateServer(GateState({"0": 8}), lambda pid, uid: Client("j", ("0",), 4), LIMITS)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start(path))
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.close())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield Running(path, server, loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def connect(gate: Running) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(str(gate.path))
    return sock


def lines_until_closed(sock: socket.socket) -> list[str]:
    """Every line the gate sends until it closes the connection."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            data += chunk
    return data.decode().splitlines()


def call(sock: socket.socket, line: str) -> str:
    sock.sendall(line.encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        assert chunk, f"closed while waiting for the reply to {line!r}"
        data += chunk
    return data.decode().rstrip("\n")


def test_a_uid_holds_at_most_its_connections_and_gets_one_back_when_one_closes(
    gate: Running,
) -> None:
    held = [connect(gate) for _ in range(LIMITS.per_uid)]
    try:
        for sock in held:
            assert call(sock, "STATUS").startswith("OK 0:free=8")
        with connect(gate) as refused:
            (line,) = lines_until_closed(refused)
        assert line == (
            f"ERR too_many uid {os.getuid()} holds {LIMITS.per_uid} connections "
            "to this socket, the most one uid may (node.max_connections_per_uid)"
        )
        held.pop().close()
        deadline = time.monotonic() + 5
        while gate.call(lambda: gate.server.held_by(os.getuid())) != LIMITS.per_uid - 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with connect(gate) as again:
            assert call(again, "STATUS").startswith("OK 0:free=8")
    finally:
        for sock in held:
            sock.close()


def test_a_half_sent_line_is_answered_timeout_and_hung_up(gate: Running) -> None:
    # The gate's clock of the line may start as it accepts the connection: ours starts before.
    started = time.monotonic()
    with connect(gate) as sock:
        sock.sendall(b"ACQUI")
        assert lines_until_closed(sock) == [
            f"ERR timeout a request line must arrive whole within {LIMITS.line_timeout_s:g} s"
        ]
        assert time.monotonic() - started >= LIMITS.line_timeout_s
    # Dribbling a byte at a time does not reset the clock of the line.
    with connect(gate) as sock:
        started = time.monotonic()
        for byte in b"STATU":
            sock.sendall(bytes([byte]))
            time.sleep(LIMITS.line_timeout_s / 4)
        assert lines_until_closed(sock)[0].startswith("ERR timeout")
        assert time.monotonic() - started < 3 * LIMITS.line_timeout_s


def test_an_idle_connection_is_closed_without_a_word_but_a_holder_or_waiter_is_not(
    gate: Running,
) -> None:
    with connect(gate) as idle, connect(gate) as holder, connect(gate) as waiter:
        grant = call(holder, "ACQUIRE 4")
        assert re.fullmatch(r"OK \d+ 0 4", grant)
        waiter.sendall(b"ACQUIRE 4\n")  # its job holds all it declared: it waits
        time.sleep(LIMITS.idle_timeout_s * 3)
        assert lines_until_closed(idle) == []  # closed, silently
        # The holder is still served; its RELEASE lets the waiter through.
        assert call(holder, "STATUS") == "OK 0:free=4,total=8,queued=1"
        assert call(holder, f"RELEASE {grant.split()[1]}") == "OK"
        assert re.fullmatch(r"OK \d+ 0 4", waiter.recv(64).decode().strip())
        # Holding nothing any more, the holder now goes the idle one's way; the waiter, now
        # holding the threads, stays.
        assert lines_until_closed(holder) == []
        assert call(waiter, "STATUS") == "OK 0:free=4,total=8,queued=0"


def test_the_python_client_reconnects_after_an_idle_close(gate: Running) -> None:
    client = GateClient(gate.path, timeout_s=5)
    try:
        assert client.status()["0"]["free"] == 8
        time.sleep(LIMITS.idle_timeout_s * 3)  # the gate closed it meanwhile
        with client.offload(2) as grant:
            assert grant.threads == 2
            time.sleep(LIMITS.idle_timeout_s * 3)  # holding: the gate keeps it open
            assert client.status()["0"]["free"] == 6
    finally:
        client.close()


def test_a_peer_that_does_not_read_its_replies_is_dropped_and_holds_little(
    gate: Running,
) -> None:
    with connect(gate) as sock, connect(gate) as other:
        sock.setblocking(False)
        sent = 0
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
            while sent < 4 << 20:  # STATUS requests, never a reply read
                sent += sock.send(b"STATUS\n" * 512)
        # The gate stops answering it once its unread replies fill the socket buffers and a
        # little of the gate's own, and drops it when it sends on regardless (read-ahead) or
        # does not read within line_timeout_s: its replies wait in the kernel, not the daemon.
        buffered = gate.call(
            lambda: [
                c.transport.get_write_buffer_size() for c in gate.server._connections if c.transport
            ]
        )
        assert isinstance(buffered, list) and max(buffered, default=0) <= 2 * 64 * 1024
        assert call(other, "STATUS").startswith("OK")  # others are served meanwhile
        sock.setblocking(True)
        sock.settimeout(5)
        lines_until_closed(sock)  # the replies it left in the kernel, then the end: dropped
        assert call(other, "STATUS").startswith("OK")
        deadline = time.monotonic() + 5  # counted until closed (a hung-up one drains first)
        while gate.call(lambda: gate.server.held_by(os.getuid())) > 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_peer_that_stops_reading_is_dropped_after_the_line_timeout(gate: Running) -> None:
    with connect(gate) as sock:
        assert call(sock, "STATUS").startswith("OK")
        # A small kernel buffer on the gate's side, so that a few thousand unread replies fill
        # it and the gate's own 64 KiB while the requests still fit the read-ahead.
        gate.call(
            lambda: [
                c.transport.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
                )
                for c in gate.server._connections
                if c.transport
            ]
        )
        sock.sendall(b"STATUS\n" * 2500)
        time.sleep(0.1)
        paused = gate.call(
            lambda: [c.write_paused_at is not None for c in gate.server._connections]
        )
        assert paused == [True]
        started = time.monotonic()
        time.sleep(LIMITS.line_timeout_s * 2)
        lines = lines_until_closed(sock)
        assert time.monotonic() - started < 5
        assert lines and all(line.startswith("OK 0:free=8") for line in lines)  # no ERR


def test_too_long_lines_and_read_ahead_are_bounded(gate: Running) -> None:
    with connect(gate) as sock:
        sock.sendall(b"A" * 300)
        assert lines_until_closed(sock) == ["ERR too_long request lines are at most 256 bytes"]
    with connect(gate) as holder, connect(gate) as waiter:
        assert call(holder, "ACQUIRE 4").startswith("OK")
        # Waiting for its job's threads, it may read ahead 16 lines' worth, not more.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            waiter.sendall(b"ACQUIRE 4\n" + b"STATUS\n" * 1000)
        assert lines_until_closed(waiter) == [
            "ERR too_long at most 16 request lines may be sent ahead"
        ]
        assert call(holder, "STATUS") == "OK 0:free=4,total=8,queued=0"


def test_control_requests_are_answered_round_robin_across_uids() -> None:
    # 50 requests of one uid are queued before one of another uid: that one is answered
    # second, not 51st (each request runs alone in the daemon's worker thread).
    order: list[tuple[int, bytes]] = []

    class Control:
        def handle(self, line: bytes, pid: int, uid: int, start: int | None) -> str:
            order.append((uid, line))
            return "OK"

    class Peer:
        closing = False

        def __init__(self, uid: int) -> None:
            self.peer_uid, self.pid, self.start = uid, 1, None
            self.answers: list[str] = []

        def answer(self, reply: str) -> None:
            self.answers.append(reply)

    server = ControlServer(Control(), Limits(max_line=1024))  # type: ignore[arg-type]
    flood = [Peer(65534) for _ in range(50)]
    other = Peer(1)

    async def main() -> None:
        server._wake = asyncio.Event()
        for n, peer in enumerate(flood):
            server.submit(peer, f"END job=f{n}".encode())  # type: ignore[arg-type]
        server.submit(other, b"END job=mine")  # type: ignore[arg-type]
        worker = asyncio.create_task(server._work())
        while not all(p.answers for p in [*flood, other]):
            await asyncio.sleep(0)
        worker.cancel()

    asyncio.run(main())
    assert order[:3] == [(65534, b"END job=f0"), (1, b"END job=mine"), (65534, b"END job=f1")]
    assert len(order) == 51


def test_a_connection_being_made_is_not_swept_and_every_request_is_answered(
    gate: Running,
) -> None:
    # Between the accept and connection_made (a task of its own) the sweep may run: a
    # connection without a transport yet has no deadline (it once read as long idle and was
    # closed before it was made, so its request went unanswered).
    fresh = gate.server.connection()
    assert fresh.deadline() is None
    for _ in range(300):
        with connect(gate) as sock:
            assert call(sock, "STATUS").startswith("OK 0:free=8")
