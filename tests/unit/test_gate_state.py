"""The offload gate's state machine: budgets, job declarations, the fair queue (pure)."""

from __future__ import annotations

from coshare.node.gate.protocol import Request
from coshare.node.gate.state import Client, GateState, Reply
from hypothesis import given, settings
from hypothesis import strategies as st


def acquire(threads: int, device: str | None = "0") -> Request:
    return Request("ACQUIRE", device=device, threads=threads)


def granted(replies: list[Reply], conn: int) -> int | None:
    for reply in replies:
        if reply.conn == conn and reply.line.startswith("OK "):
            return int(reply.line.split()[1])
    return None


def gate(**budgets: int) -> GateState:
    return GateState({k.lstrip("d"): v for k, v in budgets.items()})


def test_grants_within_budget_and_queue_the_rest() -> None:
    g = gate(d0=8)
    g.connect(1, Client("a", ("0",), 6))
    g.connect(2, Client("b", ("0",), 4))
    assert granted(g.handle(1, acquire(6)), 1) == 1
    assert g.handle(2, acquire(4)) == []  # 2 free: waits
    assert g.is_waiting(2) and g.queued("0") == 1
    assert g.holds(1) and not g.holds(2)  # what keeps a silent connection open
    replies = g.handle(1, Request("RELEASE", grant=1))
    assert replies[0] == Reply(1, "OK")
    assert granted(replies, 2) == 2
    assert g.free("0") == 4
    assert not g.holds(1) and g.holds(2)


def test_large_request_is_not_overtaken_by_small_ones() -> None:
    g = gate(d0=8)
    for conn, job, declared in [(1, "a", 4), (2, "big", 8), (3, "c", 2), (4, "d", 2)]:
        g.connect(conn, Client(job, ("0",), declared))
    g.handle(1, acquire(4))
    assert g.handle(2, acquire(8)) == []  # waits for all 8
    assert g.handle(3, acquire(2)) == []  # 4 are free, but the big one is first in line
    assert g.handle(4, acquire(2)) == []
    replies = g.handle(1, Request("RELEASE", grant=1))
    assert granted(replies, 2) is not None and granted(replies, 3) is None
    assert g.queued("0") == 2


def test_request_held_back_by_its_own_job_does_not_block_others() -> None:
    g = gate(d0=8)
    g.connect(1, Client("a", ("0",), 4))
    g.connect(2, Client("a", ("0",), 4))  # a second process of the same job
    g.connect(3, Client("b", ("0",), 4))
    g.handle(1, acquire(4))
    assert g.handle(2, acquire(2)) == []  # job a holds its whole declaration
    assert granted(g.handle(3, acquire(4)), 3) is not None  # b is not delayed by a's wait
    assert g.job_held("a", "0") == 4 and g.held("0") == 8


def test_declaration_and_device_are_enforced() -> None:
    g = gate(d0=8, d1=4)
    g.connect(1, Client("a", ("0",), 4))
    g.connect(2, Client(None))
    g.connect(3, Client("c", ("0", "1"), 6))
    g.connect(4, Client("d", ("0",), None))
    g.connect(5, Client("e", ("7",), 2))

    def code(conn: int, request: Request) -> str:
        (reply,) = g.handle(conn, request)
        assert reply.line.startswith("ERR ")
        return reply.line.split()[1]

    assert code(1, acquire(5)) == "over_declared"
    assert code(1, acquire(1, "1")) == "not_your_device"
    assert code(2, acquire(1)) == "not_a_job"
    assert code(2, Request("HELLO")) == "not_a_job"
    assert code(3, acquire(1, None)) == "no_device"
    assert code(3, acquire(5, "1")) == "over_device"
    assert code(4, acquire(1)) == "not_declared"
    assert code(5, acquire(1, "7")) == "unknown_device"
    assert granted(g.handle(1, acquire(3)), 1) is not None
    assert code(1, acquire(2)) == "would_deadlock"
    assert code(3, Request("RELEASE", grant=1)) == "unknown_grant"  # another job's grant
    assert g.held("0") == 3


def test_try_never_waits_and_never_jumps_the_queue() -> None:
    g = gate(d0=4)
    for conn in (1, 2, 3):
        g.connect(conn, Client(str(conn), ("0",), 4))
    g.handle(1, acquire(3))
    g.handle(2, acquire(2))  # waits
    (reply,) = g.handle(3, Request("TRY", device="0", threads=1))
    assert reply.line.startswith("ERR busy")
    assert not g.is_waiting(3)


def test_disconnect_returns_grants_and_withdraws_the_wait() -> None:
    g = gate(d0=4)
    g.connect(1, Client("a", ("0",), 4))
    g.connect(2, Client("b", ("0",), 4))
    g.connect(3, Client("c", ("0",), 4))
    g.handle(1, acquire(4))
    g.handle(2, acquire(4))
    g.handle(3, acquire(1))
    assert g.disconnect(2) == []  # its wait goes; 3 still waits for 1
    replies = g.disconnect(1)
    assert granted(replies, 3) is not None
    assert g.free("0") == 3


def test_hello_and_status_describe_the_caller_and_devices() -> None:
    g = gate(d0=8)
    g.connect(1, Client("a", ("0",), 4))
    assert g.handle(1, Request("HELLO")) == [Reply(1, "OK job=a devices=0 threads=4")]
    g.handle(1, acquire(3))
    assert g.handle(1, Request("STATUS")) == [Reply(1, "OK 0:free=5,total=8,queued=0")]


operations = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "disconnect"]),
        st.integers(0, 7),  # connection
        st.integers(1, 9),  # threads
    ),
    max_size=120,
)


@settings(max_examples=300)
@given(operations)
def test_random_traffic_never_oversubscribes_and_everyone_is_served(
    ops: list[tuple[str, int, int]],
) -> None:
    budget = 8
    g = gate(d0=budget)
    jobs = {conn: f"job{conn % 3}" for conn in range(8)}  # three jobs, several processes each
    declared = {conn: 2 + (conn % 3) * 3 for conn in range(8)}  # 2, 5, 8 threads per job
    connected: set[int] = set()
    held: dict[int, list[int]] = {c: [] for c in range(8)}
    asked: dict[int, int] = {}

    def apply(replies: list[Reply]) -> None:
        for reply in replies:
            if reply.line.startswith("OK ") and reply.conn in asked:
                held[reply.conn].append(int(reply.line.split()[1]))
                del asked[reply.conn]

    for op, conn, threads in ops:
        if conn not in connected:
            g.connect(conn, Client(jobs[conn], ("0",), declared[conn]))
            connected.add(conn)
        if op == "acquire" and not g.is_waiting(conn):
            asked[conn] = threads
            replies = g.handle(conn, acquire(threads))
            if replies and replies[0].conn == conn and replies[0].line.startswith("ERR"):
                del asked[conn]
            apply(replies)
        elif op == "release" and held[conn]:
            apply(g.handle(conn, Request("RELEASE", grant=held[conn].pop())))
        elif op == "disconnect":
            apply(g.disconnect(conn))
            connected.discard(conn)
            held[conn] = []
            asked.pop(conn, None)
        # The invariants: the device and every job stay within their budgets.
        assert 0 <= g.held("0") <= budget
        for conn_of_job, job in jobs.items():
            assert g.job_held(job, "0") <= declared[conn_of_job]
        assert sum(gr.threads for gr in g.grants()) == g.held("0")
    # Releasing everything serves every waiter (nobody starves), then all is free again.
    rounds = 0
    while any(held.values()) and rounds < 100:
        rounds += 1
        for conn in list(held):
            for grant in list(held[conn]):
                held[conn].remove(grant)
                apply(g.handle(conn, Request("RELEASE", grant=grant)))
    assert not asked, f"requests never granted: {asked}"
    assert g.held("0") == 0 and g.queued("0") == 0
