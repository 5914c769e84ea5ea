"""The core's limits: one number rule, bounded echoes of input values, and what an id may be."""

from __future__ import annotations

import math
from typing import Any

import pytest
from coshare.cli.render import printable
from coshare.ledger.bounds import (
    SHOWN_CHARS,
    BadValue,
    as_float,
    bounded,
    parse_number,
    shorten,
    shorten_text,
)
from coshare.ledger.ids import MAX_ID_CHARS, checked_id, id_problem, split_ids, text_problem
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("120", 120.0),
        (" +1.5e3 ", 1500.0),
        (".5", 0.5),
        ("7.", 7.0),
        ("-2", -2.0),
        ("1e400", math.inf),
        ("-1e400", -math.inf),
    ],
)
def test_numbers_written_in_ascii_digits_are_numbers(text: str, number: float) -> None:
    assert parse_number(text) == number


@pytest.mark.parametrize(
    "text",
    [
        "",
        "inf",
        "nan",
        "Infinity",
        "1_000",
        "0x10",
        "١٢٠",
        "１２",
        "²",
        "1e",
        "e1",
        "--1",
        "1 2",
        "9" * 41,
    ],
)
def test_anything_else_is_not_a_number(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (5, 5.0),
        (2.5, 2.5),
        (10**400, math.inf),
        (-(10**400), -math.inf),
        (math.inf, math.inf),
        (math.nan, None),
        (True, None),
        ("5", None),
        (None, None),
    ],
)
def test_as_float(value: object, number: float | None) -> None:
    assert as_float(value) == number


def billion_laughs() -> list[Any]:
    level: list[Any] = ["lol"] * 9
    for _ in range(8):
        level = [level] * 9  # one list shared nine times: 9**9 strings, a few KB in memory
    return level


@pytest.mark.parametrize(
    "value",
    [
        billion_laughs(),
        10**5000,
        "x" * 10**6,
        {"k" * 10**5: [1] * 10**5},
        b"\x00" * 10**5,
        "\ud800\x1b[2J",
    ],
    ids=["laughs", "int", "str", "dict", "bytes", "controls"],
)
def test_shorten_is_bounded_and_printable_whatever_the_value(value: object) -> None:
    text = shorten(value)
    assert len(text) <= 4 * SHOWN_CHARS + 3
    assert text.isprintable()


def test_shorten_keeps_small_values_as_repr_and_says_how_long_a_cut_one_was() -> None:
    assert shorten("abc") == "'abc'" and shorten(5) == "5" and shorten([1, 2]) == "[1, 2]"
    assert shorten("x" * 1000).endswith("... (1000 characters)")
    assert shorten(10**5000) == "<an integer of about 5001 digits>"  # 10**5000 has 5001
    assert shorten_text("a\nb") == "a\\nb" and len(shorten_text("y" * 1000)) == SHOWN_CHARS


def test_recursive_values_are_shown_without_recursing_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert shorten(loop) == "[[[[...]]]]"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", None),
        ('node4 " || true || "', None),
        ("csl-n1", None),
        ("é", None),
        (" 0", "has white space at its start or end"),
        ("0\n", "has white space at its start or end"),
        ("0\u00a0", "has white space at its start or end"),
        ("", "is empty"),
        ("a\x1bb", "holds the character '\\x1b'"),
        ("a\ud800", "holds the character '\\ud800'"),
        ("a\u202eb", "holds the character '\\u202e'"),
        ("a\u2028b", "holds the character '\\u2028'"),
        ("a\u200bb", "holds the character '\\u200b'"),
        ("x" * (MAX_ID_CHARS + 1), f"is longer than {MAX_ID_CHARS} characters"),
        (5, "is not a string"),
        (None, "is not a string"),
    ],
)
def test_what_an_id_may_be(value: object, problem: str | None) -> None:
    assert id_problem(value) == problem


def test_text_may_hold_white_space_but_no_controls() -> None:
    assert text_problem(" a b ", 10) is None
    assert text_problem("a\tb", 10) == "holds the character '\\t'"
    assert text_problem("abc", 2) == "is longer than 2 characters"


def test_id_lists_drop_the_white_space_around_commas_only() -> None:
    assert split_ids("0, 1 ,2") == ("0", "1", "2")
    assert split_ids("") == () and split_ids(None) == () and split_ids(" , ") == ()


@given(st.text())
def test_printable_output_never_holds_a_control_character_or_a_surrogate(text: str) -> None:
    out = printable(text)
    assert out.replace("\n", "").isprintable()
    out.encode("utf-8")  # a lone surrogate would raise here
    if text.replace("\n", "").isprintable():
        assert out == text


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (1e300, "f=1e+300 is outside what coshare accepts (allowed: a number 0..100)"),
        (10**400, "f=<an integer of about 401 digits> is outside what coshare accepts"),
        (math.nan, "f=nan is not a number"),
        (math.inf, "f=inf is not a finite number"),
        (-1, "f=-1 is outside"),
        ("5", "f='5' is not a number"),
        (True, "f=True is not a number"),
        (None, "f=None is not a number"),
    ],
)
def test_bounded_refuses_naming_field_value_and_range(value: object, says: str) -> None:
    with pytest.raises(BadValue) as caught:
        bounded("f", value, 100)
    assert str(caught.value).startswith(says) and caught.value.field == "f"
    assert bounded("f", 99.5, 100) == 99.5 and bounded("f", -3, 0, minimum=-5) == -3.0


def test_checked_id_refuses_what_id_problem_refuses() -> None:
    assert checked_id("name", "n1") == "n1"
    for bad in (" n1", "n1\n", "", 7, "x" * 10_000):
        with pytest.raises(BadValue) as caught:
            checked_id("name", bad)
        assert str(caught.value).startswith("name=") and len(str(caught.value)) < 300
