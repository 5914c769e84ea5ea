"""The offload gate's line protocol (pure parsing)."""

from __future__ import annotations

import pytest
from coshare.node.gate.protocol import MAX_LINE, ProtocolError, Request, parse_reply, parse_request
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"HELLO\n", Request("HELLO")),
        (b"acquire 0 60\r\n", Request("ACQUIRE", device="0", threads=60)),
        (b"ACQUIRE 60", Request("ACQUIRE", threads=60)),
        (b"TRY  GPU-1a:2   8\n", Request("TRY", device="GPU-1a:2", threads=8)),
        (b"RELEASE 17\n", Request("RELEASE", grant=17)),
        (b"STATUS\n", Request("STATUS")),
        (b"QUIT\n", Request("QUIT")),
    ],
)
def test_requests_parse(line: bytes, expected: Request) -> None:
    assert parse_request(line) == expected


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"\n", "bad_request"),
        (b"HELLO there\n", "bad_request"),
        (b"ACQUIRE\n", "bad_request"),
        (b"ACQUIRE 0 0\n", "bad_request"),
        (b"ACQUIRE 0 -5\n", "bad_request"),
        (b"ACQUIRE 0 99999999999\n", "bad_request"),
        (b"ACQUIRE ../x 5\n", "bad_request"),
        (b"ACQUIRE 0 1 2\n", "bad_request"),
        (b"RELEASE x\n", "bad_request"),
        (b"FORK\n", "bad_request"),
        (b"HELLO\x00\n", "bad_request"),
        ("ACQUIRE é 1\n".encode(), "bad_request"),
        (b"A" * (MAX_LINE + 1), "too_long"),
    ],
)
def test_bad_lines_get_an_error_code(line: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request(line)
    assert info.value.code == code


@given(st.binary(max_size=2 * MAX_LINE))
def test_any_bytes_parse_or_raise_a_protocol_error(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ProtocolError as exc:
        assert exc.code in ("bad_request", "too_long")
        return
    assert request.verb in ("HELLO", "ACQUIRE", "TRY", "RELEASE", "STATUS", "QUIT")


def test_replies_split_into_fields() -> None:
    assert parse_reply("OK 3 0 60\n") == (True, ["3", "0", "60"])
    assert parse_reply("OK") == (True, [])
    assert parse_reply("ERR over_declared 90 threads asked") == (
        False,
        ["over_declared", "90 threads asked"],
    )
    with pytest.raises(ProtocolError):
        parse_reply("what")


@settings(max_examples=300)
@given(
    st.sampled_from(["ACQUIRE", "TRY", "acquire"]),
    st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,10}", fullmatch=True)),
    st.integers(1, 2**31 - 1),
    st.sampled_from(["", "\n", "\r\n"]),
)
def test_fast_and_slow_paths_agree(verb: str, device: str | None, threads: int, end: str) -> None:
    words = [verb, *([device] if device else []), str(threads)]
    expected = Request(verb.upper(), device=device or None, threads=threads)  # type: ignore[arg-type]
    assert parse_request((" ".join(words) + end).encode()) == expected
    assert parse_request(f"RELEASE {threads}{end}".encode()) == Request("RELEASE", grant=threads)
