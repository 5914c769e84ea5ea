"""The offload gate's state machine: each device's thread budget and its fair queue.

Pure: requests in, reply lines out, no I/O and no clock. The server
(:mod:`coshare.node.gate.server`) feeds it parsed requests and connection events and writes
the replies; the tests drive it directly.

Two budgets bound every grant, as the paper's COSMIC bounds offloads (section IV-D2):

- the device's hardware threads (``budgets``): what all jobs on it hold together;
- the job's declaration (``CoshareDeviceThreads``): what one job's offloads hold together on
  one device, so a job that lies about its threads cannot take its neighbours' share.

Fairness: each device has one first-come first-served queue. When threads come back, the
queue is scanned from its head: a request its device cannot hold yet stops the scan (so a
large request is never overtaken forever by small ones); a request held back only by its
*own job's* budget is skipped, since granting others does not delay it (what its job gives
back is its own).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from coshare.node.gate.protocol import ErrorCode, Request, format_error


@dataclass(frozen=True)
class Client:
    """Who is at the other end of a connection, as the kernel says.

    Attributes:
        job: the job whose cgroup holds the peer, ``None`` when it is in none.
        devices: the job's devices.
        declared: the job's declared device threads, ``None`` when it declared none.
    """

    job: str | None
    devices: tuple[str, ...] = ()
    declared: int | None = None


@dataclass(frozen=True)
class Grant:
    """Threads held on a device by one connection."""

    grant: int
    conn: int
    job: str
    device: str
    threads: int


@dataclass
class _Waiter:
    conn: int
    job: str
    device: str
    threads: int
    declared: int


@dataclass(frozen=True)
class Reply:
    """One line to send to one connection."""

    conn: int
    line: str


@dataclass
class GateState:
    """Thread budgets per device, grants per connection, one queue per device.

    Args:
        budgets: hardware threads of each managed device.
    """

    budgets: Mapping[str, int]
    _clients: dict[int, Client] = field(default_factory=dict)
    _grants: dict[int, Grant] = field(default_factory=dict)
    _by_conn: dict[int, set[int]] = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict)
    _job_used: dict[tuple[str, str], int] = field(default_factory=dict)
    _queues: dict[str, deque[_Waiter]] = field(default_factory=dict)
    _waiting: dict[int, _Waiter] = field(default_factory=dict)
    _next_grant: int = 1

    # -- connections -----------------------------------------------------------------------

    def connect(self, conn: int, client: Client) -> None:
        """A connection opened; ``client`` is who the kernel says it is."""
        self._clients[conn] = client
        self._by_conn[conn] = set()

    def disconnect(self, conn: int) -> list[Reply]:
        """A connection closed: withdraw its wait, return its grants, grant what now fits."""
        self._clients.pop(conn, None)
        touched: set[str] = set()
        waiter = self._waiting.pop(conn, None)
        if waiter is not None:
            self._queues[waiter.device].remove(waiter)
            touched.add(waiter.device)
        for grant_id in sorted(self._by_conn.pop(conn, set())):
            touched.add(self._give_back(grant_id).device)
        return [r for device in sorted(touched) for r in self._drain(device)]

    def is_waiting(self, conn: int) -> bool:
        """Whether the connection waits for an ACQUIRE (the server reads no more from it)."""
        return conn in self._waiting

    def waiting_on(self, conn: int) -> str | None:
        """The device the connection's ACQUIRE waits for, ``None`` when it waits for none."""
        waiter = self._waiting.get(conn)
        return waiter.device if waiter is not None else None

    def holds(self, conn: int) -> bool:
        """Whether the connection holds a grant (its silence is legitimate: an offload runs)."""
        return bool(self._by_conn.get(conn))

    # -- requests --------------------------------------------------------------------------

    def handle(self, conn: int, request: Request) -> list[Reply]:
        """Answer one request of a connected client.

        Returns:
            the replies to send, in order; an ACQUIRE that must wait yields no reply to its
            own connection now (it comes from a later call, when threads come back).
        """
        client = self._clients[conn]
        if request.verb == "HELLO":
            if client.job is None:
                return [self._error(conn, "not_a_job", "this process is in no job's cgroup")]
            threads = client.declared if client.declared is not None else 0
            line = (
                f"OK job={client.job} devices={','.join(client.devices) or '-'} threads={threads}"
            )
            return [Reply(conn, line)]
        if request.verb == "STATUS":
            parts = [
                f"{d}:free={self.free(d)},total={t},queued={len(self._queue(d))}"
                for d, t in sorted(self.budgets.items())
            ]
            return [Reply(conn, " ".join(["OK", *parts]))]
        if request.verb == "QUIT":
            return [Reply(conn, "OK")]
        if request.verb == "RELEASE":
            assert request.grant is not None
            grant = self._grants.get(request.grant)
            if grant is None or grant.conn != conn:
                return [
                    self._error(
                        conn,
                        "unknown_grant",
                        f"grant {request.grant} is not held by this connection",
                    )
                ]
            self._by_conn[conn].discard(grant.grant)
            self._give_back(grant.grant)
            return [Reply(conn, "OK"), *self._drain(grant.device)]
        return self._acquire(conn, client, request)

    def _acquire(self, conn: int, client: Client, request: Request) -> list[Reply]:
        threads = request.threads
        assert threads is not None
        if client.job is None:
            return [self._error(conn, "not_a_job", "this process is in no job's cgroup")]
        device = request.device
        if device is None:
            if len(client.devices) != 1:
                return [
                    self._error(
                        conn,
                        "no_device",
                        f"job {client.job} has devices "
                        f"{','.join(client.devices) or 'none'}: name one",
                    )
                ]
            device = client.devices[0]
        if device not in client.devices:
            return [
                self._error(
                    conn, "not_your_device", f"device {device} is not assigned to job {client.job}"
                )
            ]
        if device not in self.budgets:
            return [
                self._error(conn, "unknown_device", f"this gate does not manage device {device}")
            ]
        if client.declared is None:
            return [
                self._error(conn, "not_declared", f"job {client.job} declared no device threads")
            ]
        if threads > client.declared:
            return [
                self._error(
                    conn,
                    "over_declared",
                    f"{threads} threads asked, job {client.job} declared {client.declared}",
                )
            ]
        if threads > self.budgets[device]:
            return [
                self._error(
                    conn,
                    "over_device",
                    f"{threads} threads asked, device {device} has {self.budgets[device]}",
                )
            ]
        mine = sum(
            self._grants[g].threads for g in self._by_conn[conn] if self._grants[g].device == device
        )
        if mine + threads > client.declared:
            return [
                self._error(
                    conn,
                    "would_deadlock",
                    f"this connection holds {mine} of job "
                    f"{client.job}'s {client.declared} threads on device {device}",
                )
            ]
        waiter = _Waiter(conn, client.job, device, threads, client.declared)
        if request.verb == "TRY":
            if self._queue(device) or not self._fits(waiter):
                return [
                    self._error(
                        conn,
                        "busy",
                        f"{self.free(device)} threads free on device "
                        f"{device}, {len(self._queue(device))} requests queued",
                    )
                ]
            return [self._grant(waiter)]
        queue = self._queue(device)
        if not queue and self._fits(waiter):
            return [self._grant(waiter)]  # nobody waits and it fits: no queueing at all
        queue.append(waiter)
        self._waiting[conn] = waiter
        return self._drain(device)

    # -- accounting ------------------------------------------------------------------------

    def free(self, device: str) -> int:
        """Threads of ``device`` nobody holds."""
        return self.budgets[device] - self._used.get(device, 0)

    def held(self, device: str) -> int:
        """Threads of ``device`` held by all grants."""
        return self._used.get(device, 0)

    def job_held(self, job: str, device: str) -> int:
        """Threads of ``device`` held by ``job``'s connections."""
        return self._job_used.get((job, device), 0)

    def queued(self, device: str) -> int:
        """Requests waiting for ``device``."""
        return len(self._queue(device))

    def grants(self) -> list[Grant]:
        """Every grant held now."""
        return list(self._grants.values())

    def _queue(self, device: str) -> deque[_Waiter]:
        return self._queues.setdefault(device, deque())

    def _fits(self, w: _Waiter) -> bool:
        return w.threads <= self.free(w.device) and self._job_fits(w)

    def _job_fits(self, w: _Waiter) -> bool:
        return self.job_held(w.job, w.device) + w.threads <= w.declared

    def _drain(self, device: str) -> list[Reply]:
        """Grant, in queue order, what fits now (see the module's fairness rule)."""
        replies = []
        queue = self._queue(device)
        for waiter in list(queue):
            if not self._job_fits(waiter):
                continue  # held back by its own job only: does not delay the others
            if waiter.threads > self.free(device):
                break  # the device is the limit: nobody overtakes this request
            queue.remove(waiter)
            del self._waiting[waiter.conn]
            replies.append(self._grant(waiter))
        return replies

    def _grant(self, w: _Waiter) -> Reply:
        grant = Grant(self._next_grant, w.conn, w.job, w.device, w.threads)
        self._next_grant += 1
        self._grants[grant.grant] = grant
        self._by_conn[w.conn].add(grant.grant)
        self._used[w.device] = self._used.get(w.device, 0) + w.threads
        key = (w.job, w.device)
        self._job_used[key] = self._job_used.get(key, 0) + w.threads
        return Reply(w.conn, f"OK {grant.grant} {w.device} {w.threads}")

    def _give_back(self, grant_id: int) -> Grant:
        grant = self._grants.pop(grant_id)
        self._used[grant.device] -= grant.threads
        self._job_used[(grant.job, grant.device)] -= grant.threads
        return grant

    @staticmethod
    def _error(conn: int, code: ErrorCode, text: str) -> Reply:
        return Reply(conn, format_error(code, text))
